"""The exercises asked in `labs/01_weight_reads` (every registration here has
`where="labs/01_weight_reads"`) and the helpers only they use."""

from gpuinfer.predict import achievable as _achievable
from gpuinfer.measure import bench
from gpuinfer import hardware
from gpuinfer.predict import paged_kv, validation
from gpuinfer.predict import architectures
from gpuinfer.predict import step_model
from gpuinfer.course.exercises import register
from gpuinfer.course.exercises.common import GPU_PRICES

WEIGHT_READS = "labs/01_weight_reads"


# --- lab 1: the cheapest GPU that decodes fast enough at batch 1 ------------------------------
STREAM_TOKENS_PER_S = 15.0  # the target for one stream of Llama-2-7B at batch 1
STREAM_MODEL = "llama-2-7b"
#: One sequence at Llama-2's full context must fit beside the weights: 4,096 tokens (Touvron
#: et al. 2023, "Llama 2", Table 1: context length 4k; max_position_embeddings 4096 in
#: meta-llama/Llama-2-7b-hf's config.json).
STREAM_MAX_CONTEXT = 4096
#: The speed test's context: the stream's worst step, at the end of its context, where each
#: step also reads the whole KV cache (2.15 GB at 4,096 tokens).
STREAM_CONTEXT = STREAM_MAX_CONTEXT
#: The achievable model's errors that bound the speed test (`validation.interval`): batch-1
#: decode, one user at a time.
STREAM_REGIME = "batch-1"


def stream_tokens_per_s(accelerator, fraction=None, *, achievable=True) -> float:
    """Batch-1 Llama-2-7B fp16 decode tokens/s on `accelerator`, at `STREAM_CONTEXT` tokens of
    context (the stream's slowest step). Default: what an engine achieves
    (`achievable.decode_tokens_per_s`, the fitted model); `achievable=False`: the
    ceiling. With `fraction`: that fraction of the datasheet bandwidth over every weight
    read once (the exercise's former one-number rule, kept for its slips)."""
    if fraction is not None:
        return fraction * hardware.get(accelerator).bandwidth / step_model.weight_bytes(STREAM_MODEL, "fp16")
    return _achievable.decode_tokens_per_s(STREAM_MODEL, accelerator, 1, STREAM_CONTEXT, "fp16",
                                           achievable=achievable)


def stream_kv_tokens(accelerator) -> float:
    """Tokens of Llama-2-7B fp16 KV cache an engine at vLLM's default memory share
    (`paged_kv.VLLM_GPU_MEMORY_UTILIZATION`) has room for on `accelerator` beside the weights and
    the reserve (`paged_kv.kv_cache_budget`): the memory test, made before the speed one."""
    budget = paged_kv.kv_cache_budget(STREAM_MODEL, accelerator, "fp16",
                                      gpu_memory_utilization=paged_kv.VLLM_GPU_MEMORY_UTILIZATION)
    return budget / step_model.kv_cache_bytes_per_token(architectures.get(STREAM_MODEL), "fp16")


def stream_meets(accelerator) -> bool:
    """Whether `accelerator` serves the stream: memory first (one `STREAM_MAX_CONTEXT`-token sequence
    fits, `stream_kv_tokens`), then speed at the low end of the achievable number's 80%
    interval (`validation.interval` in `STREAM_REGIME`), so that the answer does not hang
    on the model's error."""
    if stream_kv_tokens(accelerator) < STREAM_MAX_CONTEXT:
        return False
    low, _ = validation.interval(stream_tokens_per_s(accelerator), STREAM_REGIME)
    return low >= STREAM_TOKENS_PER_S


@register("lab-weight-reads-cheapest-gpu", where=WEIGHT_READS,
          question="One stream of Llama-2-7B in fp16 (up to its 4,096-token context) must "
          "decode at batch 1 at 15 tokens/s or more, on a T4 (USD 0.526/h), an A10G (USD "
          "1.006/h) or an H100 SXM (an eighth of USD 39.33/h). Memory first: an engine at "
          "vLLM's default share (paged_kv.kv_cache_budget with gpu_memory_utilization="
          "paged_kv.VLLM_GPU_MEMORY_UTILIZATION) must hold one 4,096-token sequence's KV "
          "cache beside the weights. Then speed: the achievable number "
          "(achievable.decode_tokens_per_s, batch 1, context 4,096: the stream's slowest step) "
          "must meet the target at the low end of its 80% interval (validation.interval(value, 'batch-1')), the ceiling "
          "beside it. What does the cheapest that passes both cost per hour?",
          unit="USD per hour (to the cent)",
          hint="For each GPU: kv_cache_budget(...) / llm.kv_cache_bytes_per_token(model, "
          "'fp16') tokens must reach 4,096; then validation.interval(achievable."
          "decode_tokens_per_s('llama-2-7b', gpu, 1, 4096, 'fp16'), 'batch-1')[0] must reach 15 "
          "(achievable=False gives the ceiling, which decides nothing here). Pick the "
          "cheapest per hour that passes both.",
          slips={
              # the T4: 49 tokens of KV cache at vLLM's 0.92 share (1.1 GB even with no
              # reserve: 2,100 tokens); at context 4,096, 17.2 tokens/s achievable, its
              # 80% interval straddling 15.
              GPU_PRICES["T4"] / GPU_PRICES["A10G"]: "That is the T4. Memory first: its "
              "15.8 GB at vLLM's default 0.92 share leaves room for a few dozen tokens of KV "
              "cache beside 13.5 GB of weights, not one 4,096-token sequence. Speed would "
              "not rescue it: at the end of the context, about 17 tokens/s achievable, with "
              "an 80% interval that reaches below 15.",
              GPU_PRICES["H100 SXM"] / GPU_PRICES["A10G"]: "The H100 meets the target, but "
              "it is not the cheapest that does.",
              8 * GPU_PRICES["H100 SXM"] / GPU_PRICES["A10G"]: "That is the whole 8-GPU "
              "instance, and not the cheapest GPU that meets the target.",
          })
def _():
    return min(GPU_PRICES[g] for g in GPU_PRICES if stream_meets(g))


LAB = "labs/01_weight_reads"

# pytorch-labs/gpt-fast README (references.bib: gptfast2023): Llama-2-7B, bf16, batch 1,
# on an A100-80GB power-limited to 330 W, moved 1,397 GB/s of weights. The lab's
# question states this number; the answer is computed from it.
GPT_FAST_A100_BYTES_PER_S = 1397e9


# --- lab ------------------------------------------------------------------------------

@register("lab-weight-reads-bytes-per-token", where=LAB,
          question="Bytes read per generated token by Llama-2-13B in fp16 at batch 1 "
          "(weights only)", unit="bytes", hint="Parameters x bytes per parameter; the "
          "parameter count is computed from the published config.")
def _():
    return step_model.weight_bytes("llama-2-13b", "fp16")


@register("lab-weight-reads-t4-floor", where=LAB,
          question="Shortest possible decode step of Llama-2-7B in fp16 on a T4, at the "
          "datasheet bandwidth", unit="seconds", hint="The step must read every weight "
          "once: weight bytes / bandwidth (the inverse of the batch-1 ceiling). Seconds, "
          "not milliseconds.")
def _():
    return step_model.weight_bytes("llama-2-7b", "fp16") / hardware.get("T4").bandwidth


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
