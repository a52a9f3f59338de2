"""The exercises asked in `labs/09_compile_fuse_calibrate` (every registration here has
`where="labs/09_compile_fuse_calibrate"`) and the helpers only they use."""

from gpuinfer import hardware
from gpuinfer.measure import quant
from gpuinfer.predict import tabular
from gpuinfer.course.exercises import register

LAB_COMPILE = "labs/09_compile_fuse_calibrate"


# --- lab 9: what int8 can buy ------------------------------------------------------------

def mlp_int8_bytes_fraction(features=tabular.DEFAULT_FEATURES, hidden=tabular.DEFAULT_HIDDEN,
                            outputs=tabular.DEFAULT_OUTPUTS):
    """Bytes of the MLP with int8 weights, an fp32 scale per output channel and fp32
    biases, over its bytes in fp32."""
    params = tabular.mlp_params(features, hidden, outputs)
    channels = sum(hidden) + outputs               # one bias and one scale each
    weights = params - channels
    return (weights * 1 + channels * 4 + channels * 4) / (params * 4)


@register("lab-compile-int8-bytes-fraction", where=LAB_COMPILE,
          question="The lab's MLP (64 -> 1,024 x 3 -> 1) with int8 weights, one fp32 scale per "
          "output channel and fp32 biases: what fraction of its fp32 bytes does it take?",
          unit="fraction (0 to 1), 3 significant figures",
          hint="Weights: in x out per layer, 1 byte each in int8, 4 in fp32. Each output "
          "channel adds a 4-byte bias (in both) and, in int8, a 4-byte scale "
          "(tabular.mlp_params counts weights and biases).",
          rel_tol=0.003,
          slips={0.25 / mlp_int8_bytes_fraction(): "A quarter is the weights alone: add "
                 "the fp32 biases and the per-channel scales."})
def _():
    return mlp_int8_bytes_fraction()


@register("lab-compile-int4-db", where=LAB_COMPILE,
          question="By the ideal quantiser's rule (6.02 b + 1.76 dB for b bits), how many dB "
          "of SQNR would int4 weights lose against int8?",
          unit="dB (3 significant figures)",
          hint="The difference of the rule at 8 and at 4 bits: four bits' worth "
          "(quant.ideal_sqnr_db).",
          slips={(quant.ideal_sqnr_db(8) - quant.ideal_sqnr_db(7))
                 / (quant.ideal_sqnr_db(8) - quant.ideal_sqnr_db(4)):
                 "That is one bit's worth, what reduce_range costs; int4 drops four bits."})
def _():
    return quant.ideal_sqnr_db(8) - quant.ideal_sqnr_db(4)


def a100_ratio(over="fp32"):
    a100 = hardware.get("A100 80GB")
    return a100.peak_flops("int8") / a100.peak_flops(over)


@register("lab-compile-a100-int8-over-fp32", where=LAB_COMPILE,
          question="On an A100 80GB's datasheet (dense figures), how many times the fp32 rate "
          "of its CUDA cores is its int8 tensor-core rate?",
          unit="ratio (2 significant figures)", kind="flop_ratio",
          hint="Dense int8 TOPS over fp32 TFLOP/s (not TF32, which runs on the tensor "
          "cores): hardware.get('A100 80GB').peak_flops('int8') / .peak_flops('fp32').",
          slips={a100_ratio("tf32") / a100_ratio(): "That is over TF32 (the tensor cores' "
                 "fp32 format); the question asks for fp32 on the CUDA cores."})
def _():
    return a100_ratio()
