"""Exercises of the labs *Triton's dynamic batcher, measured* and *Compile, fuse,
calibrate*: what a per-batch hand-off does to a server's capacity, Little's law on a
measured run, and the bytes, dB and datasheet ratios that bound int8. The inputs are
fixed here (close to what the labs measure on a small shared CPU), so that everyone gets
the same answers; each answer is computed with the package."""

import math

from .. import batching, hardware, quant, tabular
from . import register

LAB_TRITON = "labs/08_triton_dynamic_batching"
LAB_COMPILE = "labs/09_compile_fuse_calibrate"

# --- lab 8: a per-batch hand-off in the service table -----------------------------------
#: The model's own seconds at batch 1 and 32, and the hand-off every batch pays inside
#: the server (the gap between batches under load), s.
MODEL_S = {1: 0.41e-3, 32: 3.1e-3}
HANDOFF_S = 0.020
MAX_BATCH = 32
#: Demand for the fleet question, requests/s, and the most of its full-batch throughput
#: each server may run at (the headroom its queue needs).
FLEET_DEMAND, FLEET_UTILISATION = 3500, 0.8
#: A measured run: requests/s answered and their mean latency, s (offered: 1,500/s).
ANSWERED_PER_S, MEAN_LATENCY_S, OFFERED_PER_S = 943.0, 0.093, 1500.0


def server_service(handoff_s=HANDOFF_S):
    """Seconds a batch of b takes inside the server: the model's time (linear between
    batch 1 and 32) plus the per-batch hand-off."""
    sizes = sorted(MODEL_S)
    return batching.service_table(sizes, [MODEL_S[b] + handoff_s for b in sizes])


def full_batch_throughput(handoff_s=HANDOFF_S):
    """Requests/s with full batches of `MAX_BATCH` back to back."""
    return batching.saturation_throughput(server_service(handoff_s), MAX_BATCH)


@register("lab-triton-saturation-with-handoff", where=LAB_TRITON,
          question="A model takes 3.1 ms for a batch of 32 on its own; inside a server every "
          "batch also pays a 20 ms hand-off. With full batches of 32 back to back, how many "
          "requests a second can the server answer at most?",
          unit="requests/s (3 significant figures)",
          hint="A full batch leaves the server once every (model time + hand-off): the "
          "hand-off belongs in the service time of each batch, not of each request.",
          slips={
              # the model alone: 32 / 3.1 ms = 10,323/s
              full_batch_throughput(0.0) / full_batch_throughput(): "That is the model "
              "alone: the server pays the hand-off once per batch, so add it to each "
              "batch's time.",
              # the hand-off paid per request: 32 / (3.1 ms + 32 x 20 ms)
              (MAX_BATCH / (MODEL_S[32] + MAX_BATCH * HANDOFF_S)) / full_batch_throughput():
              "That pays the hand-off once per request; it is paid once per batch.",
          })
def _():
    return full_batch_throughput()


@register("lab-triton-servers-needed", where=LAB_TRITON,
          question="3,500 requests/s must be served by servers that each answer at most the "
          "full-batch throughput of the previous question, each kept at no more than 80% of "
          "it. How many servers?", unit="servers (a whole number)",
          hint="Each server may carry 0.8 x its full-batch throughput (with the hand-off); "
          "servers = ceil(3,500 / that).",
          rel_tol=0.0,
          slips={
              3 / 4: "That runs every server at its full-batch throughput: keep 20% "
                     "headroom for the queue (0.8 x the throughput).",
              1 / 4: "That uses the model's own throughput, without the per-batch "
                     "hand-off: the server answers far fewer.",
          })
def _():
    return math.ceil(FLEET_DEMAND / (FLEET_UTILISATION * full_batch_throughput()))


@register("lab-triton-requests-in-flight", where=LAB_TRITON,
          question="At 1,500 requests/s offered a server answered 943 a second with a mean "
          "latency of 93 ms. How many requests were inside it on average (Little's law)?",
          unit="requests (3 significant figures)",
          hint="Little's law: requests in the system = the rate through it x the mean "
          "time in it. Use the rate that came out (answered), in requests/s, and the "
          "latency in seconds.",
          slips={OFFERED_PER_S / ANSWERED_PER_S: "That uses the offered rate; only 943 a "
                 "second went through (the rest queued and grew the latency): use the "
                 "answered rate."})
def _():
    return ANSWERED_PER_S * MEAN_LATENCY_S


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
          unit="ratio (2 significant figures)",
          hint="Dense int8 TOPS over fp32 TFLOP/s (not TF32, which runs on the tensor "
          "cores): hardware.get('A100 80GB').peak_flops('int8') / .peak_flops('fp32').",
          slips={a100_ratio("tf32") / a100_ratio(): "That is over TF32 (the tensor cores' "
                 "fp32 format); the question asks for fp32 on the CUDA cores."})
def _():
    return a100_ratio()
