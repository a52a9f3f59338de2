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

Prediction layer: no torch, no measurement.
"""

from __future__ import annotations

import numpy as np

from . import achievable as _achievable
from . import dtypes as _dtypes
from . import hardware as _hardware
from . import llm as _llm
from . import validate as _v
from .batching import MAX_TOKENS
from .engine_step import EngineStep

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
    m, acc = _llm.get(model), _hardware.get(accelerator)
    weights = _llm.weight_bytes(m, dtype)
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
    m = _llm.get(model)
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
    blocks = each // (block * _llm.kv_cache_bytes_per_token(m, kv))
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
                achievable=False, kv_cache_bytes=None) -> dict:
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
    m, acc = _llm.get(model), _hardware.get(accelerator)
    use = kv_memory_use(lengths, max_len=max_len, block_size=block_size)
    _, kv, _ = _dtypes.formats(dtype, kv_dtype, compute_dtype)
    per_token = _llm.kv_cache_bytes_per_token(m, kv)
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
                        efficiency=_achievable.as_efficiency(achievable))
    out = {}
    for k, b in batches.items():
        z = np.array([1.0, b, b, b * (c + 1), b * c, b * (c + 1)])  # llm.STEP_AGGREGATES
        out[f"batch_{k}"] = b
        out[f"tokens_per_s_{k}"] = b / float(timer.many(z[:, None])[0])
    out["batch_ratio"] = out["batch_paged"] / out["batch_contiguous"]
    out["throughput_gain"] = out["tokens_per_s_paged"] / out["tokens_per_s_contiguous"]
    return out

