"""Exercises of the chapter *The roofline model* and the lab *Weight reads*."""

from .. import hardware, llm, roofline
from . import register

WHERE = "chapters/01_roofline"


@register("roofline-ridge-h100", where=WHERE,
          question="Ridge point of an H100 SXM in fp16 (dense)",
          unit="FLOP/byte", hint="Divide the dense fp16 peak by the HBM bandwidth; "
          "check you used the dense figure, not the sparse one.")
def _():
    return hardware.get("H100 SXM").ridge_point("fp16")


@register("roofline-gemv-intensity", where=WHERE,
          question="Arithmetic intensity of a batch-1 decode matmul, [1, 4096] @ [4096, 4096] in fp16",
          unit="FLOP/byte", hint="FLOPs are 2*m*n*k; bytes are every operand read or "
          "written once, 2 bytes each. The weight matrix dominates.")
def _():
    return roofline.matmul_intensity(1, 4096, 4096, "fp16")


@register("roofline-7b-batch1", where=WHERE,
          question="Weight-read ceiling of a 7e9-parameter fp16 model at 2 TB/s, batch 1",
          unit="tokens/s", hint="Each token reads every weight once: bandwidth / "
          "(parameters x bytes per parameter).")
def _():
    return llm.weight_read_ceiling(7e9, 2, 2e12, batch=1)


@register("roofline-t4-compute-bound-batch", where=WHERE,
          question="Smallest batch at which Llama-2-7B fp16 decode (short context) is "
          "compute-bound on a T4", unit="sequences",
          hint="Decode intensity is about the batch size in FLOP/byte for fp16 weights; "
          "compare it with the T4's fp16 ridge point.", rel_tol=0.05)
def _():
    return llm.compute_bound_batch("llama-2-7b", "T4", context=0)


@register("lab-weight-reads-bytes-per-token", where="labs/01_weight_reads",
          question="Bytes read per generated token by Llama-2-13B in fp16 at batch 1 "
          "(weights only)", unit="bytes", hint="Parameters x bytes per parameter; the "
          "parameter count is computed from the published config.")
def _():
    return llm.weight_bytes("llama-2-13b", "fp16")
