"""Exercises of the chapter *Serving systems and sharing a GPU*."""

from .. import hardware, serving
from . import register

WHERE = "chapters/05_serving"


@register("serving-gelu-unfused-bytes", where=WHERE,
          question="DRAM bytes the unfused tanh-GELU chain (8 ops) moves over 1e6 fp16 "
          "elements", unit="bytes",
          hint="Each op reads its tensor inputs and writes one output; two of the eight "
          "ops read x a second time. Count tensors of n elements, 2 bytes each.")
def _():
    return serving.elementwise_chain_bytes(1_000_000, serving.GELU_TANH_OP_INPUTS, "fp16")


@register("serving-h200-instances", where=WHERE,
          question="Instances of Llama-2-7B (fp16 weights, 2e9 bytes of workspace each, no "
          "KV cache) that fit in an H200's 141e9 bytes", unit="instances",
          hint="Each instance holds its own copy of the weights: "
          "memory // (weights + workspace).", rel_tol=0.0)
def _():
    return serving.max_instances(serving.deployment("chat", "llama-2-7b",
                                                    workspace_bytes=2e9), "H200")


@register("serving-a100-fp16-vs-fp32-compute", where=WHERE,
          question="Upper bound on the speed-up of fp16 (tensor cores) over fp32 for a "
          "compute-bound layer on an A100 80GB, from the datasheet peaks", unit="x",
          hint="Ratio of the dense fp16 tensor-core peak to the fp32 (non-tensor) peak.")
def _():
    a100 = hardware.get("A100 80GB")
    return a100.peak_flops("fp16") / a100.peak_flops("fp32")


@register("serving-kv-instance-bytes", where=WHERE,
          question="Memory of one Llama-3-8B fp16 instance holding a KV cache for 16 "
          "sequences of 4,096 tokens (weights + KV cache, no workspace)", unit="bytes",
          hint="Weights: parameters x 2 bytes. KV per token: 2 x layers x KV heads x "
          "head_dim x 2 bytes (Llama-3-8B has 8 KV heads).")
def _():
    return serving.deployment("chat", "llama-3-8b", batch=16, context=4096).total_bytes
