"""Exercises of the chapter *Quantisation*."""

from .. import hardware, llm, quant
from . import register

WHERE = "chapters/04_quantisation"


@register("quant-int8-scale", where=WHERE,
          question="Scale of a symmetric per-tensor int8 quantiser (grid -127..127) for a "
          "tensor whose largest |value| is 6.35", unit="units of x per step",
          hint="Symmetric: the largest magnitude maps to the largest integer, 127.")
def _():
    scale, _ = quant.scale_zero_point(-6.35, 6.35, bits=8, symmetric=True)
    return float(scale)


@register("quant-int4-g32-bytes", where=WHERE,
          question="Bytes per weight of int4 weights in groups of 32, each group with a "
          "bf16 scale and a bf16 zero point", unit="bytes",
          hint="Half a byte per weight, plus the group's scale and zero shared by 32 weights.")
def _():
    return quant.bytes_per_weight(4, group_size=32, scale_bytes=2, zero_point_bytes=2)


@register("quant-7b-int4-ceiling-a100", where=WHERE,
          question="Batch-1 weight-read ceiling of Llama-2-7B with those int4 weights on an "
          "A100 80GB", unit="tokens/s",
          hint="Bandwidth / (parameters x bytes per weight, scales included).", rel_tol=0.02)
def _():
    return llm.weight_read_ceiling(llm.get("llama-2-7b").n_params,
                                   quant.bytes_per_weight(4, 32, 2, 2),
                                   hardware.get("A100 80GB").bandwidth)


@register("quant-sqnr-6bit", where=WHERE,
          question="Textbook SQNR of a 6-bit uniform quantiser driven by a full-scale sine",
          unit="dB", hint="About 6 dB per bit, plus 1.76 dB for a sine.", rel_tol=0.005)
def _():
    return quant.ideal_sqnr_db(6, "sine")
