"""Exercises of the chapter *Serving LLMs: prefill, decode and the KV cache*."""

import functools

from .. import llm, llm_serving, speculative
from . import register

WHERE = "chapters/09_llm_serving"
MODEL, GPU = "llama-3-8b", "H100 SXM"

# The chunk-budget decision: 32 sequences decoding at 2,048 tokens of context share each
# step with one chunk of a 4,096-token prompt (its last chunk, the one with most context).
DECODES, DECODE_CONTEXT, PROMPT, STEP_SLO_S = 32, 2048, 4096, 0.015
BUDGET_STEP = 64

# The speculative decision: Llama-3.2-1B drafting for Llama-3-8B.
SPEC_ACCEPTANCE, SPEC_K, SPEC_CONTEXT = 0.8, 4, 256

# DeepSeek-V3's published config: 61 layers; MLA caches a latent of kv_lora_rank 512 and a
# shared RoPE key of qk_rope_head_dim 64 per token and layer (bf16: 2 bytes each).
MLA_LAYERS, MLA_LATENT, MLA_ROPE, MLA_HEADS, MLA_HEAD_DIM = 61, 512, 64, 128, 128


def step_with_chunk_s(budget) -> float:
    """Seconds of one chunked-prefill step: the decodes plus the rest of the budget as
    the last chunk of the prompt (on top of the prompt's earlier tokens)."""
    chunk = budget - DECODES
    return llm.forward_step_time(MODEL, GPU, [1] * DECODES + [chunk],
                                 [DECODE_CONTEXT] * DECODES + [PROMPT - chunk])


@functools.lru_cache(maxsize=None)
def largest_budget() -> int:
    """The largest token budget (a multiple of 64) whose steps meet the objective."""
    best = 0
    for budget in range(BUDGET_STEP, PROMPT + DECODES + 1, BUDGET_STEP):
        if budget > DECODES and step_with_chunk_s(budget) <= STEP_SLO_S:
            best = budget
    return best


def matmul_weights() -> float:
    """Llama-3-8B's weights that a prefill multiplies for every prompt token: the layers'
    matmuls (the embedding table is gathered; the LM head runs for the last token only)."""
    m = llm.get(MODEL)
    return float(m.linear_params_per_layer * m.n_layers)


def mla_kv_bytes_per_token() -> float:
    """DeepSeek-V3's cache per token: layers x (latent + RoPE key) x 2 bytes."""
    return float(MLA_LAYERS * (MLA_LATENT + MLA_ROPE) * 2)


@functools.lru_cache(maxsize=None)
def speculation_stops_paying() -> int:
    """The smallest batch at which drafting 4 tokens no longer speeds decoding up (it
    must fit in memory: at most llm.max_batch at this context)."""
    def gain(b):
        return speculative.decode_speedup(MODEL, speculative.LLAMA_3_2_1B, GPU,
                                          acceptance=SPEC_ACCEPTANCE, k=SPEC_K, batch=b,
                                          context=SPEC_CONTEXT)
    lo, hi = 1, llm.max_batch(MODEL, GPU, SPEC_CONTEXT)
    if gain(hi) > 1:
        raise ValueError("speculation pays at every batch that fits: no decision to make")
    # gain(lo) > 1 >= gain(hi); the gain falls as the batch grows.
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if gain(mid) > 1 else (lo, mid)
    return hi


def two_instances_sequences(context=4096, utilisation=0.45) -> int:
    """4,096-token sequences two vLLM instances at 0.45 each hold together."""
    blocks = llm_serving.kv_cache_budget(MODEL, GPU, gpu_memory_utilization=utilisation) // (
        llm_serving.DEFAULT_BLOCK_SIZE * llm.kv_cache_bytes_per_token(MODEL))
    per_sequence = llm_serving.kv_blocks(context)
    return int(2 * (blocks // per_sequence))


@register("llm-ttft-lone", where=WHERE,
          question="Llama-3-8B in fp16 on an H100 SXM, alone on the GPU: the time to first "
          "token of a request with a 2,000-token prompt, from the per-operation roofline. "
          "In seconds, 3 significant figures.", unit="s",
          hint="Alone, a request waits for nothing: its TTFT is one prefill step over the "
          "whole prompt (llm.prefill_time), compute-bound: 2 FLOPs x "
          f"{matmul_weights() / 1e9:.2f}e9 matmul weights x 2,000 tokens over the peak (the "
          "embedding table is gathered, not multiplied, and the LM head runs for the last "
          "token only), plus about a millisecond of causal attention.",
          slips={2000 * llm.decode_step_time(MODEL, GPU, 1, 1000)
                 / llm.prefill_time(MODEL, GPU, 2000):
                 "That is 2,000 decode steps: a prompt goes through the model in one "
                 "forward pass, not one token at a time.",
                 1000.0: "Give seconds, not milliseconds."})
def _():
    return llm.prefill_time(MODEL, GPU, 2000)


@register("llm-chunk-budget", where=WHERE,
          question=f"Decision. An H100 SXM serves Llama-3-8B (fp16) with chunked prefill: "
          f"each step holds the {DECODES} running sequences' decode tokens (each at "
          f"{DECODE_CONTEXT:,} tokens of context) and fills the rest of a token budget "
          f"with one chunk of a {PROMPT:,}-token prompt. Every step must take at most "
          f"{STEP_SLO_S * 1e3:g} ms (the TPOT objective), even for the prompt's last chunk "
          f"(on {PROMPT:,} - chunk cached tokens). A larger budget means fewer steps per "
          f"prompt (a shorter TTFT, fewer weight reads). What is the largest budget, a "
          f"multiple of {BUDGET_STEP} tokens, that meets the objective?", unit="tokens",
          hint="Time one step with llm.forward_step_time: new_tokens = 32 ones and the "
          "chunk (budget - 32); context = 32 x 2,048 and 4,096 - chunk. Try budgets in "
          "steps of 64 and keep the largest within 15 ms. The budget counts the 32 decode "
          "tokens too.", rel_tol=0.0)
def _():
    return largest_budget()


@register("llm-two-instances", where=WHERE,
          question="Two vLLM instances of Llama-3-8B (fp16) share one H100 SXM, each started "
          "with gpu_memory_utilization=0.45. Counting each instance's KV cache as 0.45 of "
          "the card's memory less its weights and 1 GiB of activations "
          "(llm_serving.kv_cache_budget), in blocks of 16 tokens, how many 4,096-token "
          "sequences can the two hold in all?", unit="sequences",
          hint="Each instance: kv_cache_budget(..., gpu_memory_utilization=0.45), divided "
          "into 16-token blocks of 16 x 131,072 B; a 4,096-token sequence holds 256 blocks. "
          "Round down per instance, then add the two.", rel_tol=0.0,
          slips={two_instances_sequences(utilisation=0.9) / 2 / two_instances_sequences():
                 "That is one instance at 0.9 (one copy of the weights). Two instances each "
                 "hold their own weights: compute one at 0.45 and double it."})
def _():
    return two_instances_sequences()


@register("llm-mla-kv", where=WHERE,
          question="DeepSeek-V3 caches, per token and layer, a compressed latent of 512 "
          "values and a shared RoPE key of 64 (multi-head latent attention), in bf16, over "
          "61 layers. How many bytes of KV cache does one token add?", unit="bytes",
          hint="Layers x (latent + RoPE key) x bytes per element. MLA caches one latent "
          "per token, not a key and a value per head.", rel_tol=0.0,
          slips={2 * MLA_HEADS * MLA_HEAD_DIM / (MLA_LATENT + MLA_ROPE):
                 "That is the cache of full multi-head attention (2 x 128 heads x 128): "
                 "MLA caches the latent instead.",
                 0.5: "bf16 is 2 bytes per value.",
                 60 / 61: "DeepSeek-V3 has 61 layers (DeepSeek-V2 has 60)."})
def _():
    return mla_kv_bytes_per_token()


@register("llm-spec-batch", where=WHERE,
          question=f"Decision. Llama-3-8B (fp16, H100 SXM) decodes with Llama-3.2-1B as its "
          f"draft: acceptance {SPEC_ACCEPTANCE}, {SPEC_K} drafted tokens per round, "
          f"{SPEC_CONTEXT:,} tokens of context (a short chat). From which batch on should the server turn "
          f"speculation off, because speculative.decode_speedup is 1 or less? A whole "
          f"number of sequences.", unit="sequences",
          hint="decode_speedup falls as the batch grows: verifying 5 tokens a sequence costs "
          "about one step while the matmuls are memory-bound and about 5 once they are "
          "compute-bound. Bisect over the batch for the first one at or below 1.",
          rel_tol=0.02)
def _():
    return float(speculation_stops_paying())
