"""The paged KV cache: how much memory a server gives its cache, how many blocks a
sequence holds, how much of the reserved memory holds tokens, and what paging buys.

Chapter: *Serving LLMs: prefill, decode and the KV cache*. Memory in bytes, sizes in
tokens.

vLLM's PagedAttention (Kwon et al. 2023) holds each sequence's keys and values in blocks
of `DEFAULT_BLOCK_SIZE` tokens, allocated as the sequence grows, where earlier servers
reserved a slab of the longest reply a sequence might give. `kv_cache_budget` sizes the
cache the way vLLM (`gpu_memory_utilization`) and TensorRT-LLM
(`free_gpu_memory_fraction`) do; `kv_blocks` and `kv_sequences` count blocks and the
sequences they hold; `kv_memory_use` compares the two allocators; `paging_gain` prices
the larger batch paging fits on the engine's step (`engine_step.EngineStep`).

Reusing the cache: `conversation_prefix_hits` counts what a prefix cache serves of a
multi-turn or agentic conversation, routed to the replica holding its history or at
random; `prefix_ttft_s` prices a hit's TTFT; `kv_reload_or_recompute` compares bringing an
offloaded prefix back over a link with recomputing it; `kv_transfer_s` is the KV transfer
of disaggregated serving.

Prediction layer: no torch, no measurement.
"""

from __future__ import annotations

import numpy as np

from gpuinfer.predict import achievable as _achievable
from gpuinfer import dtypes as _dtypes
from gpuinfer import hardware as _hardware
from gpuinfer.predict import llm as _llm
from gpuinfer.predict import architectures
from gpuinfer.predict import step_model
from gpuinfer import validate as _v
from gpuinfer.predict.batching import MAX_TOKENS
from gpuinfer.predict.engine_step import EngineStep

#: vLLM's default KV-cache block size, in tokens (`--block-size`, CacheConfig
#: DEFAULT_BLOCK_SIZE = 16: https://docs.vllm.ai/en/stable/api/vllm/config/cache/).
DEFAULT_BLOCK_SIZE = 16
#: vLLM's `gpu_memory_utilization` default: 0.92 in current releases (vllm/entrypoints/
#: llm.py, `LLM.__init__(..., gpu_memory_utilization: float = 0.92)`), 0.9 before.
VLLM_GPU_MEMORY_UTILIZATION = 0.92
#: The fraction `offline_throughput`'s achievable model gives a server unless told: vLLM's
#: older default, 0.9, the one the achievable model's constants were fitted with
#: (`achievable.FITTED`); pass `gpu_memory_utilization=VLLM_GPU_MEMORY_UTILIZATION` for
#: a current vLLM.
ACHIEVABLE_GPU_MEMORY_UTILIZATION = 0.9


def kv_cache_budget(model, accelerator, dtype="fp16", *, gpu_memory_utilization=None,
                    free_gpu_memory_fraction=None, reserve_bytes=None) -> float:
    """Bytes of device memory a server gives its KV cache, as real servers size it.

    - Neither fraction: all the card has (`Accelerator.memory_bytes`, what torch
      reports) less `reserve_bytes` (default `llm.DEFAULT_RESERVE_BYTES`) and the
      weights: `llm.max_batch`'s budget.
    - `gpu_memory_utilization=u` (vLLM): the instance may use u x the card's memory
      for weights, activations and KV cache; the KV cache gets u x memory - weights -
      reserve (the reserve standing in for the activations vLLM profiles). A
      per-instance limit: two instances on one GPU each take their own u, and each
      holds its own copy of the weights. vLLM's default u is 0.92 in current
      releases (`VLLM_GPU_MEMORY_UTILIZATION`), 0.9 before; here no u is assumed.
    - `free_gpu_memory_fraction=f` (TensorRT-LLM's KvCacheConfig, default 0.9): the KV
      cache gets f x the memory still free after the weights and the reserve.

    0.0 when nothing is left (the weights do not fit).
    """
    m, acc = architectures.get(model), _hardware.get(accelerator)
    weights = step_model.weight_bytes(m, dtype)
    reserve = _llm.DEFAULT_RESERVE_BYTES if reserve_bytes is None else _v.non_negative(
        "reserve_bytes", reserve_bytes)
    if gpu_memory_utilization is not None and free_gpu_memory_fraction is not None:
        raise ValueError("give gpu_memory_utilization (vLLM) or free_gpu_memory_fraction "
                         "(TensorRT-LLM), not both: they size the cache differently")
    total = acc.memory_bytes
    if gpu_memory_utilization is not None:
        u = _v.fraction("gpu_memory_utilization", gpu_memory_utilization)
        return max(0.0, u * total - weights - reserve)
    free = max(0.0, total - weights - reserve)
    if free_gpu_memory_fraction is not None:
        return _v.fraction("free_gpu_memory_fraction", free_gpu_memory_fraction) * free
    return free


def kv_blocks(tokens, block_size=DEFAULT_BLOCK_SIZE):
    """KV-cache blocks a sequence of `tokens` holds under paged allocation:
    ceil(tokens / block_size). Vectorised over `tokens`."""
    t = _v.non_negative("tokens", tokens, integer=True, array=True)
    b = _v.count("block_size", block_size, maximum=MAX_TOKENS)
    return _v.scalar_or_array(np.ceil(t / b))


def kv_sequences(model, accelerator, tokens, *, instances=1, dtype="fp16", kv_dtype=None,
                 block_size=DEFAULT_BLOCK_SIZE, gpu_memory_utilization=None,
                 free_gpu_memory_fraction=None, reserve_bytes=None,
                 kv_cache_bytes=None) -> int:
    """Sequences of `tokens` tokens each that `instances` servers of `model` on one
    `accelerator` hold at once in their paged KV caches. Each instance's cache
    (`kv_cache_bytes`, or `kv_cache_budget` with `gpu_memory_utilization`,
    `free_gpu_memory_fraction` and `reserve_bytes`: each instance holds its own weights
    and takes its own fraction, vLLM's per-instance limit) is cut into whole blocks of
    `block_size` tokens (block_size x `llm.kv_cache_bytes_per_token` in the cache's
    format), and a sequence takes `kv_blocks(tokens)` of them:

        instances x floor(floor(budget / block bytes) / ceil(tokens / block_size)).

    0 when one sequence does not fit."""
    m = architectures.get(model)
    t = _v.count("tokens", tokens, maximum=MAX_TOKENS)
    n = _v.count("instances", instances, maximum=1 << 10)
    block = _v.count("block_size", block_size, maximum=MAX_TOKENS)
    _, kv, _ = _dtypes.formats(dtype, kv_dtype)
    sizing = dict(gpu_memory_utilization=gpu_memory_utilization,
                  free_gpu_memory_fraction=free_gpu_memory_fraction, reserve_bytes=reserve_bytes)
    if kv_cache_bytes is None:
        each = kv_cache_budget(m, accelerator, dtype, **sizing)
    elif any(v is not None for v in sizing.values()):
        raise ValueError("give kv_cache_bytes or the budget's sizing (gpu_memory_utilization, "
                         "free_gpu_memory_fraction, reserve_bytes), not both")
    else:
        each = _v.non_negative("kv_cache_bytes", kv_cache_bytes)
    blocks = each // (block * step_model.kv_cache_bytes_per_token(m, kv))
    return int(n * (blocks // kv_blocks(t, block)))


def kv_memory_use(tokens, *, max_len, block_size=DEFAULT_BLOCK_SIZE) -> dict:
    """How much of the reserved KV-cache memory holds tokens, for sequences of
    `tokens` (an array, one length per sequence) under two allocators:

    - contiguous pre-allocation reserves `max_len` tokens per sequence (a slab for the
      longest reply it may give, as serving systems before vLLM did);
    - paged allocation holds ceil(tokens / block_size) blocks per sequence; only the
      last block of each sequence is partly empty.

    Returns token counts reserved and the fraction used by each (`contiguous_used`,
    `paged_used`) and how many more sequences paging fits in the same memory
    (`paged_capacity_ratio`)."""
    t = np.atleast_1d(_v.positive("tokens", tokens, integer=True, array=True)).ravel()
    max_len = _v.count("max_len", max_len, maximum=MAX_TOKENS)
    if t.max() > max_len:
        raise ValueError(f"a sequence of {t.max():,.0f} tokens is longer than "
                         f"max_len={max_len:,}")
    block = _v.count("block_size", block_size, maximum=MAX_TOKENS)
    used = float(t.sum())
    contiguous = float(max_len * t.size)
    paged = float(np.ceil(t / block).sum() * block)
    return {"sequences": int(t.size), "tokens": used,
            "contiguous_reserved": contiguous, "paged_reserved": paged,
            "contiguous_used": used / contiguous, "paged_used": used / paged,
            "paged_capacity_ratio": contiguous / paged}


def paging_gain(model, accelerator, lengths, *, max_len, block_size=DEFAULT_BLOCK_SIZE,
                context=None, dtype="fp16", kv_dtype=None, compute_dtype=None,
                achievable=True, kv_cache_bytes=None) -> dict:
    """Chapter *Serving LLMs*: what paging the KV cache buys in decode throughput, not
    only in batch. Sequences ending at `lengths` tokens (an array) fit the cache
    (`kv_cache_budget`, or `kv_cache_bytes`) `max_len` tokens each when reserved
    contiguously, or their blocks' worth each when paged (`kv_memory_use`); a decode
    step of each batch, every sequence at `context` cached tokens (default the mean
    length: the cache full), is timed by `simulate_llm`'s step model. A bigger batch
    shares the weight read but adds its own KV reads, so the throughput grows by less
    than the batch. Returns `batch_contiguous`, `batch_paged`, `batch_ratio`, the decode
    tokens/s of each (`tokens_per_s_contiguous`, `tokens_per_s_paged`) and
    `throughput_gain` (their ratio)."""
    m, acc = architectures.get(model), _hardware.get(accelerator)
    use = kv_memory_use(lengths, max_len=max_len, block_size=block_size)
    _, kv, _ = _dtypes.formats(dtype, kv_dtype, compute_dtype)
    per_token = step_model.kv_cache_bytes_per_token(m, kv)
    budget = kv_cache_budget(m, acc, dtype) if kv_cache_bytes is None else _v.positive(
        "kv_cache_bytes", kv_cache_bytes)
    n = use["sequences"]
    c = use["tokens"] / n if context is None else _v.non_negative("context", context)
    batches = {"contiguous": float(budget // (max_len * per_token)),
               "paged": float(budget // (use["paged_reserved"] / n * per_token))}
    if batches["contiguous"] < 1:
        raise ValueError(f"{m.name}'s cache on {acc.name} ({budget / 1e9:.3g} GB) holds no "
                         f"sequence of max_len={max_len:,} tokens")
    timer = EngineStep(m, acc, dtype, kv_dtype, compute_dtype,
                        achievable=_achievable.as_efficiency(achievable))
    out = {}
    for k, b in batches.items():
        z = np.array([1.0, b, b, b * (c + 1), b * c, b * (c + 1)])  # llm.STEP_AGGREGATES
        out[f"batch_{k}"] = b
        out[f"tokens_per_s_{k}"] = b / float(timer.many(z[:, None])[0])
    out["batch_ratio"] = out["batch_paged"] / out["batch_contiguous"]
    out["throughput_gain"] = out["tokens_per_s_paged"] / out["tokens_per_s_contiguous"]
    return out



# --- Reusing the cache: prefix caching, routing, tiers, transfer ------------------------------

def conversation_prefix_hits(turns, *, system_tokens, user_tokens, output_tokens,
                             block_size=DEFAULT_BLOCK_SIZE, replicas=1, kv_aware=True) -> dict:
    """Chapter *Serving LLMs*: how much of a multi-turn conversation's prompts a prefix
    cache serves (vLLM's automatic prefix caching, SGLang's RadixAttention). Turn t
    (1..`turns`) sends the system prompt, the t - 1 earlier exchanges (`user_tokens` in,
    `output_tokens` out, each) and its new `user_tokens`; an agent's loop is the same
    shape, its tool results the input and its actions the output. The server keeps every
    block a conversation wrote (prompt and reply); a cached prefix counts in whole
    blocks of `block_size` tokens (vLLM hashes full blocks).

    The system prompt is cached on every replica (all conversations share it). The
    history is cached where the conversation's last turns ran: with `kv_aware=True`
    (a KV-aware router: Dynamo's, llm-d's, SGLang's; or session affinity) each turn goes
    to the replica that holds its history; with `kv_aware=False` (round robin or random)
    among `replicas`, turn t lands on the replica that served turn j last with
    probability (1/R)(1 - 1/R)^(t-1-j), and that replica holds the history through turn
    j. Returns the prompt tokens sent, the expected cached tokens, `hit_rate` (their
    ratio) and `last_turn_hit_rate`. Eviction is not modelled: a cache too small for
    the traffic's working set does worse."""
    n = _v.count("turns", turns, maximum=1 << 20)
    sys_t = _v.count("system_tokens", system_tokens, minimum=0, maximum=MAX_TOKENS)
    u = _v.count("user_tokens", user_tokens, maximum=MAX_TOKENS)
    o = _v.count("output_tokens", output_tokens, minimum=0, maximum=MAX_TOKENS)
    block = _v.count("block_size", block_size, maximum=MAX_TOKENS)
    r = _v.count("replicas", replicas, maximum=1 << 20)
    if not isinstance(kv_aware, (bool, np.bool_)):
        raise TypeError(f"kv_aware must be True or False, got {kv_aware!r}")

    def whole(tokens):
        return (tokens // block) * block

    sent = cached = 0.0
    for t in range(1, n + 1):
        prompt = sys_t + (t - 1) * (u + o) + u
        history = np.array([whole(sys_t + j * (u + o)) for j in range(1, t)], dtype=float)
        if kv_aware or r == 1:
            hit = history[-1] if t > 1 else whole(sys_t)
        else:  # the replica's most recent turn of this conversation was j, or none
            p = (1 / r) * (1 - 1 / r) ** (t - 1 - np.arange(1, t))
            hit = float(p @ history) + (1 - p.sum()) * whole(sys_t)
        sent += prompt
        cached += hit
    return {"prompt_tokens": sent, "cached_tokens": cached, "hit_rate": cached / sent,
            "last_turn_hit_rate": hit / prompt}


def prefix_ttft_s(model, accelerator, prompt_tokens, cached_tokens, *, dtype="fp16",
                  kv_dtype=None, achievable=True) -> float:
    """Seconds of the prefill step of a lone prompt of `prompt_tokens` tokens whose first
    `cached_tokens` are in the prefix cache: the rest is computed on top of them
    (`achievable.step_s`; `achievable=False` the ceiling). Its time to first token on
    an idle server."""
    p = _v.count("prompt_tokens", prompt_tokens, maximum=MAX_TOKENS)
    c = _v.count("cached_tokens", cached_tokens, minimum=0, maximum=p - 1)
    return float(_achievable.step_s(model, accelerator, [p - c], [c], dtype,
                                    kv_dtype=kv_dtype, achievable=achievable))


def kv_reload_or_recompute(model, accelerator, tokens, *, bandwidth_bytes_per_s,
                           dtype="fp16", kv_dtype=None, achievable=True) -> dict:
    """Chapter *Serving LLMs*: a prefix of `tokens` tokens left the GPU's memory (offloaded
    to host memory or an SSD: vLLM's KV connectors, LMCache, Dynamo's KVBM, Mooncake's
    store). Bring its cache back over a link of `bandwidth_bytes_per_s`, or recompute it?

    - `reload_s`: its bytes (`llm.kv_cache_bytes_per_token` x tokens) over the link;
    - `recompute_s`: a prefill of the tokens, no logits (`achievable.step_s`; the ceiling
      with `achievable=False`);
    - `breakeven_bytes_per_s`: the link bandwidth at which the two take as long: a
      faster link reloads sooner (`reload_wins`).

    Both are times of the fetch or the computation alone: an engine that overlaps the
    reload with other work, or loads layer by layer while computing, hides part of it."""
    t = _v.count("tokens", tokens, maximum=MAX_TOKENS)
    bw = _v.positive("bandwidth_bytes_per_s", bandwidth_bytes_per_s)
    _, kv, _ = _dtypes.formats(dtype, kv_dtype)
    nbytes = t * step_model.kv_cache_bytes_per_token(model, kv)
    recompute = float(_achievable.step_s(model, accelerator, [t], [0], dtype, logits=[0],
                                         kv_dtype=kv_dtype, achievable=achievable))
    reload_s = nbytes / bw
    return {"kv_bytes": float(nbytes), "reload_s": reload_s, "recompute_s": recompute,
            "breakeven_bytes_per_s": nbytes / recompute, "reload_wins": reload_s < recompute}


def kv_transfer_s(model, prompt_tokens, *, link_bytes_per_s, kv_dtype="fp16", links=1) -> float:
    """Chapter *Serving LLMs*: seconds to send a prompt's KV cache from a prefill GPU to a
    decode GPU (disaggregated serving: NIXL in Dynamo and llm-d, Mooncake's transfer
    engine): bytes per token (`llm.kv_cache_bytes_per_token` in `kv_dtype`) x
    `prompt_tokens`, over `links` links of `link_bytes_per_s` each (one NIC a GPU: a
    tensor-parallel group of n sends its n shards over n links). No latency, no
    protocol overhead: a lower bound."""
    p = _v.count("prompt_tokens", prompt_tokens, maximum=MAX_TOKENS)
    bw = _v.positive("link_bytes_per_s", link_bytes_per_s)
    n = _v.count("links", links, maximum=1 << 16)
    return p * step_model.kv_cache_bytes_per_token(model, kv_dtype) / (bw * n)
