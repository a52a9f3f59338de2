"""Exercises of the chapter *The roofline model* and the lab *Weight reads*.

Every answer is computed with the package; a published measurement used in a question
is named with its source beside it.
"""

from .. import bench, hardware, llm, roofline
from . import register

WHERE = "chapters/01_roofline"
LAB = "labs/01_weight_reads"

# pytorch-labs/gpt-fast README (references.bib: gptfast2023): Llama-2-7B, bf16, batch 1,
# on an A100-80GB power-limited to 330 W, moved 1,397 GB/s of weights.
GPT_FAST_A100_BYTES_PER_S = 1397e9


# --- chapter ------------------------------------------------------------------------

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


@register("roofline-prefill-intensity", where=WHERE,
          question="Arithmetic intensity of a prefill matmul, [2048, 4096] @ [4096, 4096] in fp16",
          unit="FLOP/byte", hint="Same formula as for decode, with m = 2048 tokens: the "
          "activations and the output now weigh as much as the weight matrix.")
def _():
    return roofline.matmul_intensity(2048, 4096, 4096, "fp16")


@register("roofline-t4-compute-bound-batch", where=WHERE,
          question="Smallest batch at which Llama-2-7B fp16 decode (short context) is "
          "compute-bound on a T4", unit="sequences",
          hint="Decode intensity is about the batch size in FLOP/byte for fp16 weights; "
          "compare it with the T4's fp16 ridge point.", rel_tol=0.05)
def _():
    return llm.compute_bound_batch("llama-2-7b", "T4", context=0)


@register("roofline-h100-max-batch-4k", where=WHERE,
          question="Largest batch of Llama-2-7B fp16 sequences, 4,096 tokens of context "
          "each, whose weights and KV cache fit in an H100 SXM's 80 GB",
          unit="sequences", hint="Memory left after the weights, divided by one "
          "sequence's KV cache (KV bytes per token x context); round down.",
          rel_tol=0.0, abs_tol=0.5)
def _():
    return llm.max_batch("llama-2-7b", "H100 SXM", context=4096)


@register("roofline-13b-a100-ceiling", where=WHERE,
          question="Weight-read ceiling of Llama-2-13B in fp16 on an A100 80GB (SXM), batch 1",
          unit="tokens/s", hint="Bandwidth / (parameters x 2 bytes); take the parameter "
          "count from llm.get('llama-2-13b').n_params, not the rounded 13e9.")
def _():
    return llm.weight_read_ceiling(llm.get("llama-2-13b").n_params, 2,
                                   hardware.get("A100 80GB").bandwidth, batch=1)


# --- lab ------------------------------------------------------------------------------

@register("lab-weight-reads-bytes-per-token", where=LAB,
          question="Bytes read per generated token by Llama-2-13B in fp16 at batch 1 "
          "(weights only)", unit="bytes", hint="Parameters x bytes per parameter; the "
          "parameter count is computed from the published config.")
def _():
    return llm.weight_bytes("llama-2-13b", "fp16")


@register("lab-weight-reads-t4-floor", where=LAB,
          question="Shortest possible decode step of Llama-2-7B in fp16 on a T4, at the "
          "datasheet bandwidth", unit="seconds", hint="The step must read every weight "
          "once: weight bytes / bandwidth (the inverse of the batch-1 ceiling).")
def _():
    return llm.weight_bytes("llama-2-7b", "fp16") / hardware.get("T4").bandwidth


@register("lab-weight-reads-gpt-fast-fraction", where=LAB,
          question="gpt-fast's batch-1 Llama-2-7B decode on an A100-80GB moved 1,397 GB/s "
          "of weights: what fraction of the datasheet bandwidth is that?",
          unit="fraction (0-1)", hint="Divide by the A100 80GB (SXM) bandwidth from the "
          "catalogue, in the same units.")
def _():
    return GPT_FAST_A100_BYTES_PER_S / hardware.get("A100 80GB").bandwidth


@register("lab-weight-reads-flush-pool", where=LAB,
          question="Smallest pool of weights that bench reads through to flush an H100's "
          "50 MiB L2 cache", unit="bytes", hint="bench.CACHE_FLUSH_FACTOR times the cache; "
          "MiB are binary (2**20 bytes).")
def _():
    return bench.CACHE_FLUSH_FACTOR * hardware.get("H100 SXM").cache_bytes
