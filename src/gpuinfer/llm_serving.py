"""Serving LLMs: what a server built from the modules below sustains, and the decisions that
size one.

Chapter: *Serving LLMs: prefill, decode and the KV cache*; also *How to benchmark your
own traffic* and *Beyond one GPU*. Times are seconds, rates requests/s, memory bytes.

The server's parts, one idea a module, each re-exported here so that
`llm_serving.simulate_llm` and the rest keep their names:

- `paged_kv`: the paged KV cache (`kv_cache_budget`, `kv_blocks`, `kv_sequences`,
  `kv_memory_use`, `paging_gain`, vLLM's block size and memory fractions);
- `engine_step`: one engine step, timed on the per-operation roofline of its mix of
  tokens, with a compute format, tensor parallelism, and the ceiling or the achievable
  model (`EngineStep`, `tp_step_s`);
- `llm_simulator`: the event simulator, continuous batching with a paged cache and
  preemption (`simulate_llm`) and disaggregated prefill and decode
  (`simulate_disaggregated`);
- `llm_slo`: SLO attainment, a run's summary and DistServe's goodput.

This module holds the steady state and the sizing decisions: `offline_throughput`
answers what `trtllm-bench throughput` and `vllm bench throughput` report;
`chunk_step_s` and `largest_chunk_budget` size a chunked-prefill token budget to a step
objective. Two numbers for everything: `achievable=False`, the ceiling (the roofline, an
upper bound on throughput), or True, the calibrated achievable model
(`gpuinfer.achievable`).

Prediction layer: no torch, no measurement.
"""

from __future__ import annotations

import math

import numpy as np

from . import achievable as _achievable
from . import dtypes as _dtypes
from . import hardware as _hardware
from . import llm as _llm
from . import search as _search
from . import validate as _v
from .batching import MAX_BATCH, MAX_TOKENS
from .engine_step import EngineStep, tp_shard, tp_step_s, tp_step_seconds
from .llm_simulator import LLM_COLUMNS, simulate_disaggregated, simulate_llm
from .llm_slo import goodput, slo_attainment, summarize_llm
from .paged_kv import (
    ACHIEVABLE_GPU_MEMORY_UTILIZATION,
    DEFAULT_BLOCK_SIZE,
    VLLM_GPU_MEMORY_UTILIZATION,
    kv_blocks,
    kv_cache_budget,
    kv_memory_use,
    kv_sequences,
    paging_gain,
)

#: The names this module re-exports from its parts, and its own.
__all__ = [
    "ACHIEVABLE_GPU_MEMORY_UTILIZATION", "DEFAULT_BLOCK_SIZE",
    "LLM_COLUMNS", "VLLM_GPU_MEMORY_UTILIZATION", "EngineStep", "chunk_step_s", "goodput",
    "kv_blocks", "kv_cache_budget", "kv_memory_use", "kv_sequences",
    "largest_chunk_budget", "offline_throughput", "paging_gain", "simulate_disaggregated",
    "simulate_llm", "slo_attainment", "summarize_llm", "tp_shard", "tp_step_s",
    "tp_step_seconds",
]


def offline_throughput(model, accelerator, input_tokens, output_tokens, *, dtype="fp16",
                       kv_dtype=None, compute_dtype=None, tp=1, ep=1, achievable=False,
                       max_num_seqs=None, max_num_batched_tokens=None,
                       gpu_memory_utilization=None, block_size=DEFAULT_BLOCK_SIZE,
                       interconnect=None) -> dict:
    """What `trtllm-bench throughput` and `vllm bench throughput` report: output tokens/s
    under maximum load (every request queued at once, all of `input_tokens` prompt and
    `output_tokens` output tokens), in total and per GPU, for one tensor-parallel group
    of `tp` GPUs (`tp=1`: one GPU).

    The steady state of a continuous-batching server that mixes prefill and decode in
    its steps: B sequences run; each occupies the batch for `output_tokens` steps (its
    prefill, which gives its first token, then O - 1 decodes), so an average step
    prefills B / O prompts and decodes B (O - 1) / O sequences at the mean context
    I + (O - 2) / 2, and yields B output tokens. Its time is `simulate_llm`'s step model
    (`llm.StepCost`: the per-operation roofline of the shard, the all-reduces, and with
    `achievable` the derated rates and overheads) at those average aggregates. For the
    ceiling of a dense model this is a lower bound on the mean step: by convexity of the
    roofline's max, no schedule of uneven steps is faster on average than the averaged
    step.

    B is the largest batch the KV cache holds: a sequence holds I + (O - 1) / 2 tokens on
    average over its life (rounded up to `block_size` blocks in the achievable model),
    so B = KV budget / (that x KV bytes a token on one GPU), capped by `max_num_seqs`
    (vLLM's --max-num-seqs, TensorRT-LLM's max_batch_size; None: no cap) and by
    `max_num_batched_tokens` (a token budget per step: B (I + O - 1) / O <= it). The
    KV budget: for the ceiling, the card's whole memory less one GPU's weights (no
    reserve); for the achievable model, vLLM's `gpu_memory_utilization` (`kv_cache_budget`;
    default `ACHIEVABLE_GPU_MEMORY_UTILIZATION`, 0.9: vLLM's default before it became
    0.92, the value the model was fitted with). Throughput grows with B (the weights are read once per step),
    so the largest B that fits is the best.

    `compute_dtype`: W8A8 ("fp8", "int8") or W4A4 ("fp4") runs the matmuls at that
    format's peak. A mixture-of-experts model runs too (its average step reads the
    experts its routed tokens touch, `llm.experts_touched`; under `tp` each expert is
    split 1/tp in width, vLLM's default); as that count is concave in the step's tokens,
    the averaged step's experts are an upper bound on the mean step's, by at most what
    a few more touched experts read once the batch touches most of them. `ep` > 1
    (expert parallelism across a serving run) is not modelled: ValueError pointing to
    `expert_parallel.ep_decode_breakdown`, which prices one step of it. Returns a dict:
    `batch`, `step_s`, `tokens_per_s` (the group's output tokens/s), `tokens_per_s_per_gpu`,
    `requests_per_s`, `limited_by` ("memory", "max_num_seqs" or
    "max_num_batched_tokens"), `prefill_tokens_per_step`, `decode_tokens_per_step`,
    `comm_s` (all-reduces a step), `kv_budget_bytes` (per GPU), `gpus`."""
    m, acc = _llm.get(model), _hardware.get(accelerator)
    i = _v.count("input_tokens", input_tokens, maximum=MAX_TOKENS)
    o = _v.count("output_tokens", output_tokens, maximum=MAX_TOKENS)
    e = _v.count("ep", ep, maximum=1 << 16)
    if e != 1:
        what = ("a dense model has no experts to spread" if not m.is_moe else
                "expert parallelism is modelled for one decode or prefill step "
                "(expert_parallel.ep_decode_breakdown, expert_parallel.moe_layouts), not "
                "for a serving run")
        raise ValueError(f"ep={e}: {what}; {m.name} runs here with ep=1 (use tp, which "
                         f"splits each expert's width: parallel.shard)")
    eff = _achievable.as_efficiency(achievable)
    part = tp_shard(m, tp)
    n = _v.count("tp", tp, maximum=1 << 16)
    block = _v.count("block_size", block_size, maximum=MAX_TOKENS)
    _, kv, _ = _dtypes.formats(dtype, kv_dtype, compute_dtype)
    kv_token = _llm.kv_cache_bytes_per_token(part, kv)
    if gpu_memory_utilization is None and eff.is_ceiling:
        budget = kv_cache_budget(part, acc, dtype, reserve_bytes=0)
    else:
        u = (ACHIEVABLE_GPU_MEMORY_UTILIZATION if gpu_memory_utilization is None
             else gpu_memory_utilization)
        budget = kv_cache_budget(part, acc, dtype, gpu_memory_utilization=u)
    held = i + (o - 1) / 2
    if not eff.is_ceiling:
        held = math.ceil(held / block) * block + block / 2  # whole blocks, the last half-full
    if budget < kv_token * (i + o):
        raise ValueError(
            f"{m.name} on {n} x {acc.name} ({dtype}): {budget / 1e9:.3g} GB of KV cache per "
            f"GPU cannot hold one sequence of {i:,} + {o:,} tokens "
            f"({kv_token * (i + o) / 1e9:.3g} GB): raise tp or shorten the sequence")
    limits = {"memory": budget / (kv_token * held)}
    if max_num_seqs is not None:
        limits["max_num_seqs"] = _v.count("max_num_seqs", max_num_seqs, maximum=MAX_BATCH)
    if max_num_batched_tokens is not None:
        cap = _v.count("max_num_batched_tokens", max_num_batched_tokens, maximum=MAX_TOKENS)
        limits["max_num_batched_tokens"] = cap * o / (i + o - 1)
    limited_by = min(limits, key=limits.get)
    b = float(limits[limited_by])
    timer = EngineStep(m, acc, dtype, kv_dtype, compute_dtype, tp=n, efficiency=eff,
                        interconnect=interconnect)
    prefills, decodes = b / o, b * (o - 1) / o
    context = i + (o - 2) / 2
    z = np.array([1.0, prefills * i + decodes, b,       # llm.STEP_AGGREGATES
                  prefills * i * (i + 1) / 2 + decodes * (context + 1), decodes * context,
                  prefills * i * i + decodes * (context + 1)])
    # The host's per-sequence cost (`achievable.Efficiency.sequence_s`; 0 in FITTED and
    # the ceiling) for the B sequences of the step.
    step = float(timer.many(z[:, None])[0]) + eff.sequence_s * b
    if not math.isfinite(step):
        raise ValueError(f"{acc.name} has no peak for {dtype} (compute "
                         f"{_dtypes.formats(dtype, kv_dtype, compute_dtype)[2]}) in the "
                         f"catalogue")
    return {"model": m.name, "accelerator": acc.name, "gpus": n, "batch": b,
            "limited_by": limited_by, "step_s": step, "tokens_per_s": b / step,
            "tokens_per_s_per_gpu": b / step / n, "requests_per_s": b / o / step,
            "prefill_tokens_per_step": prefills * i, "decode_tokens_per_step": decodes,
            "comm_s": float(timer.comm_s(z[1])[0]), "kv_budget_bytes": budget}


def chunk_step_s(model, accelerator, budget, *, decodes, decode_context, prompt_tokens,
                 dtype="fp16", kv_dtype=None, compute_dtype=None, tp=1,
                 achievable=True) -> float:
    """Seconds of the worst step of chunked prefill under a token `budget` a step
    (Sarathi-Serve; vLLM's `max_num_batched_tokens`): `decodes` running sequences'
    decode tokens, each at `decode_context` cached tokens, and one chunk of the rest,
    budget - decodes tokens, of a `prompt_tokens`-token prompt, taken as if it ended the
    prompt (on prompt_tokens - chunk cached tokens, with its LM-head row): the most
    context a chunk of that size can attend to, whether or not it divides the prompt.
    Timed as `simulate_llm` times a step (`tp_step_s`): `achievable=True` (default) on
    the achievable model, False on the ceiling."""
    d = _v.count("decodes", decodes, minimum=0, maximum=MAX_BATCH)
    b = _v.count("budget", budget, maximum=MAX_TOKENS)
    p = _v.count("prompt_tokens", prompt_tokens, maximum=MAX_TOKENS)
    c = _v.count("decode_context", decode_context, minimum=0, maximum=MAX_TOKENS)
    chunk = b - d
    if not 1 <= chunk <= p:
        raise ValueError(f"budget={b:,} must leave a chunk of 1 to prompt_tokens={p:,} "
                         f"tokens beside decodes={d:,}: a budget from {d + 1:,} to {d + p:,}")
    return tp_step_s(model, accelerator, tp, [1] * d + [chunk], [c] * d + [p - chunk],
                     dtype=dtype, kv_dtype=kv_dtype, compute_dtype=compute_dtype,
                     achievable=achievable)


def largest_chunk_budget(model, accelerator, *, decodes, decode_context, prompt_tokens,
                         step_slo_s, granularity=64, dtype="fp16", kv_dtype=None,
                         compute_dtype=None, tp=1, achievable=True) -> int:
    """The largest chunked-prefill token budget, a multiple of `granularity`, whose worst
    step (`chunk_step_s`: the decodes and a chunk of budget - decodes tokens ending the
    prompt) takes at most `step_slo_s` seconds (a time-per-output-token objective every
    step must meet). A larger budget prefills a prompt in fewer steps (a shorter TTFT,
    fewer weight reads) and slows every step it shares with the decodes.

    Budgets run from the smallest multiple above `decodes` (a chunk of at least one
    token) to the largest at most decodes + prompt_tokens (the whole prompt in one
    chunk). The step grows with the budget (each chunk token adds its matmul FLOPs and
    activations; the prompt's shorter cached context reads less), so the answer is found
    by `search.largest_meeting`. 0 if even the smallest budget misses the objective.
    `achievable=True` (default): the achievable model, as an engine runs; False: the
    ceiling, which allows a larger budget than an engine meets."""
    d = _v.count("decodes", decodes, minimum=0, maximum=MAX_BATCH)
    p = _v.count("prompt_tokens", prompt_tokens, maximum=MAX_TOKENS)
    g = _v.count("granularity", granularity, maximum=MAX_TOKENS)
    slo = _v.positive("step_slo_s", step_slo_s)
    lo, hi = d // g + 1, (d + p) // g
    if hi < lo:
        raise ValueError(f"no multiple of granularity={g:,} lies between decodes={d:,} "
                         f"(exclusive) and decodes + prompt_tokens = {d + p:,}")

    def meets(n):
        return chunk_step_s(model, accelerator, n * g, decodes=d, decode_context=decode_context,
                            prompt_tokens=p, dtype=dtype, kv_dtype=kv_dtype,
                            compute_dtype=compute_dtype, tp=tp, achievable=achievable) <= slo
    n = _search.largest_meeting(meets, lo, hi)
    return n * g if n >= lo else 0
