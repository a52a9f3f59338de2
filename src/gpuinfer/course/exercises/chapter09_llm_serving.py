"""The exercises asked in `chapters/09_llm_serving` (every registration here has
`where="chapters/09_llm_serving"`) and the helpers only they use."""

import functools
import math

from gpuinfer import hardware
from gpuinfer.predict import llm, llm_serving, paged_kv, speculative
from gpuinfer.hardware import device_links
from gpuinfer.predict import architectures
from gpuinfer.predict import step_model
from gpuinfer.course.exercises import register

WHERE = "chapters/09_llm_serving"
MODEL, GPU = "llama-3-8b", "H100 SXM"

# Exercise 1: a lone prompt of this many tokens (the page itself simulates 2,000).
TTFT_PROMPT = 3000

# The chunk-budget decision: 32 sequences decoding at 2,048 tokens of context share each
# step with one chunk of a 4,096-token prompt, taken as if it ended the prompt (on
# 4,096 - chunk earlier tokens): the most context a chunk of that size can attend to, so
# the worst step, whether or not the chunk divides 4,096.
DECODES, DECODE_CONTEXT, PROMPT, STEP_SLO_S = 32, 2048, 4096, 0.015
BUDGET_STEP = 64

# The speculative decision: Llama-3.2-1B drafting for Llama-3-8B (the page works 0.8).
SPEC_ACCEPTANCE, SPEC_K, SPEC_CONTEXT = 0.6, 4, 256

# The two-instances exercise: sequences of this many tokens (the page's table: 4,096).
TWO_CONTEXT = 8192

# DeepSeek-V3's published config (llm's catalogue row): 61 layers; MLA caches a latent of
# kv_lora_rank 512 and a shared RoPE key of qk_rope_head_dim 64 per token and layer (bf16:
# 2 bytes each); 128 heads, values of v_head_dim 128.
_DSV3 = architectures.get("deepseek-v3")
MLA_LAYERS, MLA_LATENT, MLA_ROPE, MLA_HEADS, MLA_HEAD_DIM = (
    _DSV3.n_layers, _DSV3.kv_lora_rank, _DSV3.qk_rope_head_dim, _DSV3.n_heads, _DSV3.v_head_dim)
# DeepSeek-V2's (the exercise; the page works V3): 60 layers, the same latent, RoPE key
# and 128 heads (num_hidden_layers, kv_lora_rank, qk_rope_head_dim in its config.json).
MLA_V2_LAYERS = 60


#: The chunk-budget question as `llm_serving.chunk_step_s` and `largest_chunk_budget` take it.
CHUNK_QUESTION = dict(decodes=DECODES, decode_context=DECODE_CONTEXT, prompt_tokens=PROMPT)


@functools.lru_cache(maxsize=None)
def largest_budget(achievable_=True) -> int:
    """The question's budget: on the achievable model (`achievable_=False`: the ceiling)."""
    return llm_serving.largest_chunk_budget(MODEL, GPU, **CHUNK_QUESTION, step_slo_s=STEP_SLO_S,
                                            granularity=BUDGET_STEP, achievable=achievable_)


def matmul_weights() -> float:
    """Llama-3-8B's weights that a prefill multiplies for every prompt token: the layers'
    matmuls (the embedding table is gathered; the LM head runs for the last token only)."""
    m = architectures.get(MODEL)
    return float(m.linear_params_per_layer * m.n_layers)


@functools.lru_cache(maxsize=None)
def speculation_stops_paying(achievable_=True) -> int:
    """The question's cut-off (`speculative.cutoff_batch`), among the batches that fit in
    memory at this context (`llm.max_batch`); on the achievable model (`achievable_=False`:
    the ceiling)."""
    cut = speculative.cutoff_batch(MODEL, speculative.LLAMA_3_2_1B, GPU,
                                   acceptance=SPEC_ACCEPTANCE, k=SPEC_K, context=SPEC_CONTEXT,
                                   achievable=achievable_,
                                   max_batch=llm.max_batch(MODEL, GPU, SPEC_CONTEXT))
    if cut == math.inf:
        raise ValueError("speculation pays at every batch that fits: no decision to make")
    return int(cut)


def two_instances_sequences(context=TWO_CONTEXT, utilisation=0.45, instances=2) -> int:
    """The question's count: `context`-token sequences that `instances` vLLM instances at
    `utilisation` each hold together (`llm_serving.kv_sequences`)."""
    return paged_kv.kv_sequences(MODEL, GPU, context, instances=instances,
                                    gpu_memory_utilization=utilisation)


@register("llm-ttft-lone", where=WHERE,
          question="Llama-3-8B in fp16 on an H100 SXM, alone on the GPU: the time to first "
          f"token of a request with a {TTFT_PROMPT:,}-token prompt, from the per-operation "
          "roofline. In seconds, 3 significant figures.", unit="s",
          hint="Alone, a request waits for nothing: its TTFT is one prefill step over the "
          "whole prompt (llm.prefill_s), compute-bound: 2 FLOPs x "
          f"{matmul_weights() / 1e9:.2f}e9 matmul weights x {TTFT_PROMPT:,} tokens over the "
          "peak (the "
          "embedding table is gathered, not multiplied, and the LM head runs for the last "
          "token only), plus a few milliseconds of causal attention over the prompt.",
          slips={TTFT_PROMPT * llm.decode_step_s(MODEL, GPU, 1, TTFT_PROMPT // 2)
                 / llm.prefill_s(MODEL, GPU, TTFT_PROMPT):
                 f"That is {TTFT_PROMPT:,} decode steps: a prompt goes through the model in "
                 "one forward pass, not one token at a time.",
                 1000.0: "Give seconds, not milliseconds.",
                 # the matmuls alone: 2 x 6.98e9 x 3,000 / 989e12 = 42.3 ms of 45.1
                 2 * matmul_weights() * TTFT_PROMPT / llm.prefill_s(MODEL, GPU, TTFT_PROMPT)
                 / hardware.get(GPU).peak_flops("fp16"):
                 "That is the matmuls alone: add the prompt's causal attention and the LM "
                 "head for the last token (llm.forward_step_breakdown lists each)."})
def _():
    return llm.prefill_s(MODEL, GPU, TTFT_PROMPT)


@register("llm-chunk-budget", where=WHERE,
          question=f"Decision. An H100 SXM serves Llama-3-8B (fp16) with chunked prefill: "
          f"each step holds the {DECODES} running sequences' decode tokens (each at "
          f"{DECODE_CONTEXT:,} tokens of context) and fills the rest of a token budget "
          f"with one chunk of a {PROMPT:,}-token prompt. Every step must take at most "
          f"{STEP_SLO_S * 1e3:g} ms (the TPOT objective), even the worst: take a full chunk "
          f"of (budget - {DECODES}) tokens on top of {PROMPT:,} - chunk cached tokens of the "
          f"prompt, as if it ended the prompt (the most context a chunk of that size can "
          f"have, whether or not it divides {PROMPT:,}). A larger budget means fewer steps per "
          f"prompt (a shorter TTFT, fewer weight reads). What is the largest budget, a "
          f"multiple of {BUDGET_STEP} tokens, that meets the objective on the achievable "
          f"model (gpuinfer.predict.achievable)?", unit="tokens",
          hint="Time one step with achievable.step_s (achievable=True): new_tokens = "
          "32 ones and the chunk (budget - 32); context = 32 x 2,048 and 4,096 - chunk. Try "
          "budgets in steps of 64 and keep the largest within 15 ms. The budget counts the "
          "32 decode tokens too, and the step pays its fixed cost whatever its size.",
          rel_tol=0.0,
          slips={largest_budget(False) / largest_budget():
                 "That is the budget on the ceiling (llm.forward_step_s): an engine's "
                 "step is slower (derated matmuls and bandwidth, a fixed cost a step). "
                 "Decide on the achievable model."})
def _():
    return largest_budget()


@register("llm-two-instances", where=WHERE,
          question="Two vLLM instances of Llama-3-8B (fp16) share one H100 SXM, each started "
          "with gpu_memory_utilization=0.45. Counting each instance's KV cache as 0.45 of "
          f"the card's {hardware.get(GPU).memory_bytes / 1e9:.1f} GB "
          f"({hardware.get(GPU).memory_bytes / 2**30:.1f} GiB, as CUDA reports it: "
          "hardware.get('H100 SXM').memory_bytes) less its "
          f"{step_model.weight_bytes(MODEL) / 1e9:.2f} GB of weights (llm.weight_bytes) and 1 GiB "
          "(2**30 B) of activations (llm_serving.kv_cache_budget), in blocks of 16 tokens "
          f"({step_model.kv_cache_bytes_per_token(MODEL):,.0f} B of cache a token), how many "
          f"{TWO_CONTEXT:,}-token sequences can the two hold in all?", unit="sequences",
          hint="Each instance: 0.45 x the card's bytes - the weights - 2**30 "
          "(kv_cache_budget(..., gpu_memory_utilization=0.45)), divided into 16-token "
          f"blocks of 16 x 131,072 B; a {TWO_CONTEXT:,}-token sequence holds "
          f"{paged_kv.kv_blocks(TWO_CONTEXT)} blocks. Round down per instance, then add "
          "the two.", rel_tol=0.0,
          slips={two_instances_sequences(utilisation=0.9, instances=1) / two_instances_sequences():
                 "That is one instance at 0.9 (one copy of the weights). Two instances each "
                 "hold their own weights: compute one at 0.45 and double it.",
                 two_instances_sequences(context=4096) / two_instances_sequences():
                 f"That counts 4,096-token sequences (the page's table); these have "
                 f"{TWO_CONTEXT:,} tokens."})
def _():
    return two_instances_sequences()


@register("llm-mla-kv", where=WHERE,
          question="DeepSeek-V2 caches, per token and layer, a compressed latent of 512 "
          "values and a shared RoPE key of 64 (multi-head latent attention), in bf16, over "
          "60 layers. How many bytes of KV cache does one token add?", unit="bytes",
          hint="Layers x (latent + RoPE key) x bytes per element. MLA caches one latent "
          "per token, not a key and a value per head.", rel_tol=0.0,
          slips={2 * MLA_HEADS * MLA_HEAD_DIM / (MLA_LATENT + MLA_ROPE):
                 "That is the cache of full multi-head attention (2 x 128 heads x 128): "
                 "MLA caches the latent instead.",
                 0.5: "bf16 is 2 bytes per value.",
                 MLA_LAYERS / MLA_V2_LAYERS: "That is DeepSeek-V3's 61 layers (the page's "
                 "table); DeepSeek-V2 has 60."})
def _():
    return step_model.mla_kv_cache_bytes_per_token(MLA_V2_LAYERS, MLA_LATENT, MLA_ROPE, 2)


@register("llm-spec-batch", where=WHERE,
          question=f"Decision. Llama-3-8B (fp16, H100 SXM) decodes with Llama-3.2-1B as its "
          f"draft: acceptance {SPEC_ACCEPTANCE}, {SPEC_K} drafted tokens per round, "
          f"{SPEC_CONTEXT:,} tokens of context (a short chat). From which batch on should the server turn "
          f"speculation off, because speculative.decode_speedup on the achievable model "
          f"(achievable=True) is 1 or less? A whole number of sequences.",
          unit="sequences",
          hint="decode_speedup falls as the batch grows: verifying 5 tokens a sequence costs "
          "about one step while the matmuls are memory-bound and about 5 once they are "
          "compute-bound. Bisect over the batch for the first one at or below 1, with "
          "achievable=True.", rel_tol=0.02,
          slips={speculation_stops_paying(False) / speculation_stops_paying():
                 "That is the cut-off on the ceiling: on the achievable model the matmuls "
                 "turn compute-bound at a smaller batch. Pass achievable=True."})
def _():
    return float(speculation_stops_paying())


# --- The 2026 serving stack: prefix caching, routing, tiers, transfer ------------------------
# A chat: a shared system prompt, then turns of a user message and a reply (tokens).
CHAT = dict(turns=8, system_tokens=1000, user_tokens=200, output_tokens=300)
ROUTING_REPLICAS = 4
# A prefix evicted from HBM, and the link it could come back over (an NVMe SSD, ~7 GB/s).
OFFLOAD_TOKENS, OFFLOAD_SSD_BYTES_PER_S = 32768, 7e9
# Disaggregated serving: Llama-3-70B's prompt cache over one GPU's 400 Gb/s RDMA NIC, one
# of a DGX H100 node's eight NDR ports (the node's link over its NICs, as chapter 10 counts).
TRANSFER_MODEL, TRANSFER_PROMPT = "llama-3-70b", 8000
TRANSFER_LINK, TRANSFER_NICS = "InfiniBand NDR x8", 8


def chat_hits(kv_aware=True, replicas=ROUTING_REPLICAS) -> dict:
    """The chat's prefix-cache hits (`paged_kv.conversation_prefix_hits`)."""
    return paged_kv.conversation_prefix_hits(**CHAT, replicas=replicas, kv_aware=kv_aware)


def routing_prefill_ratio() -> float:
    """Prompt tokens computed (not cached) under random routing over those under a
    KV-aware router, for the chat."""
    aware, blind = chat_hits(True), chat_hits(False)
    return ((blind["prompt_tokens"] - blind["cached_tokens"])
            / (aware["prompt_tokens"] - aware["cached_tokens"]))


def offload_breakeven_gbs(achievable_=True) -> float:
    """GB/s at which reloading the evicted prefix takes as long as recomputing it."""
    r = paged_kv.kv_reload_or_recompute(MODEL, GPU, OFFLOAD_TOKENS,
                                        bandwidth_bytes_per_s=OFFLOAD_SSD_BYTES_PER_S,
                                        achievable=achievable_)
    return r["breakeven_bytes_per_s"] / 1e9


def transfer_link_bytes_per_s() -> float:
    links = device_links.interconnects().set_index("name")
    return float(links.loc[TRANSFER_LINK, "bandwidth_bytes_per_s_per_direction"]) / TRANSFER_NICS


@register("llm-prefix-hit-rate", where=WHERE,
          question=f"A chat with a {CHAT['system_tokens']:,}-token system prompt and "
          f"{CHAT['turns']} turns of {CHAT['user_tokens']} user tokens and "
          f"{CHAT['output_tokens']} reply tokens each: turn t sends the system prompt, "
          "every earlier message and reply, and its new message. A KV-aware router sends "
          "every turn to the replica holding the conversation's cache, which keeps every "
          "block the conversation wrote; cached prefixes count in whole blocks of 16 tokens "
          "and the system prompt is cached from the start. What fraction of all the prompt "
          "tokens sent over the 8 turns are served from the prefix cache? A fraction, "
          "3 significant figures.", unit="fraction",
          hint="Turn t sends 1,000 + 500 (t - 1) + 200 tokens; the cache holds the whole "
          "16-token blocks of 1,000 + 500 (t - 1) (turn 1: of the system prompt alone). Sum "
          "both over the turns and divide.", rel_tol=0.005,
          slips={23000 / 21952: "No block rounding: a prefix cache shares whole blocks "
                 "only (1,000 tokens hold 62 blocks, 992 tokens).",
                 (21952 - 992) / 21952: "Turn 1 hits too: the system prompt is cached (all "
                 "conversations share it)."})
def _():
    return chat_hits()["hit_rate"]


@register("llm-routing-prefill-ratio", where=WHERE,
          question=f"The same chat served by {ROUTING_REPLICAS} replicas, each with its own "
          "prefix cache (the system prompt cached on all), but routed at random: turn t "
          "lands on the replica that served the conversation's turn j last with "
          "probability (1/4)(3/4)^(t-1-j), and that replica holds the history through "
          "turn j's reply (whole 16-token blocks); if it served none, only the system "
          "prompt. How many times the prompt tokens computed under a KV-aware router does "
          "random routing compute (the uncached tokens of all 8 turns, expected)?",
          unit="ratio",
          hint="Per turn, the expected cached tokens are a sum over j of the probability "
          "times whole blocks of 1,000 + 500 j, plus the leftover probability times the "
          "system prompt's 992. Uncached = sent - cached; divide the two totals.",
          rel_tol=0.01,
          slips={1 / routing_prefill_ratio(): "Upside down: random routing computes more, "
                 "not less."})
def _():
    return routing_prefill_ratio()


@register("llm-offload-breakeven", where=WHERE,
          question=f"Decision. A {OFFLOAD_TOKENS:,}-token prefix of Llama-3-8B (fp16 cache, "
          "H100 SXM) was evicted from GPU memory to an SSD. Reloading its KV cache takes its "
          "bytes over the link; recomputing takes a prefill of the 32,768 tokens (no "
          "logits) on the achievable model (achievable.step_s). At what link bandwidth, "
          "in GB/s, do the two take as long (paged_kv.kv_reload_or_recompute)? Above it, "
          "reload. 3 significant figures.", unit="GB/s",
          hint="Bytes: 32,768 x 131,072 B. Recompute: achievable.step_s(MODEL, GPU, "
          "[32768], [0], logits=[0]); the prompt's causal attention grows with its square. "
          "Divide the bytes by the seconds.", rel_tol=0.01,
          slips={offload_breakeven_gbs(False) / offload_breakeven_gbs():
                 "That is the ceiling's recompute time: an engine's prefill is slower, so a "
                 "slower link already wins. Decide on the achievable model.",
                 8.0: "GB/s, not Gb/s."})
def _():
    return offload_breakeven_gbs()


@register("llm-kv-transfer-ms", where=WHERE,
          question=f"Disaggregated serving: Llama-3-70B (fp16 cache; 80 layers, 8 KV heads of "
          f"128) prefills a {TRANSFER_PROMPT:,}-token prompt on one GPU and sends its KV cache "
          "to a decode GPU over one 400 Gb/s RDMA NIC (50e9 B/s per direction, no latency). How "
          "many milliseconds does the transfer take at least (paged_kv.kv_transfer_s)? "
          "3 significant figures.", unit="ms",
          hint="Bytes per token: 2 (K and V) x 80 layers x 8 KV heads x 128 x 2 bytes. Times "
          "the prompt, over 50e9 B/s.", rel_tol=0.01,
          slips={8.0: "Llama-3-70B caches 8 KV heads, not its 64 query heads.",
                 1 / 8: "400 Gb/s is 50 GB/s: bits, not bytes.",
                 1 / 1000: "Give milliseconds, not seconds."})
def _():
    return 1e3 * paged_kv.kv_transfer_s(TRANSFER_MODEL, TRANSFER_PROMPT,
                                        link_bytes_per_s=transfer_link_bytes_per_s())
