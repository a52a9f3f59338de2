"""Serving LLMs: what a server built from the modules below sustains, and the decisions that
size one.

Chapter: *Serving LLMs: prefill, decode and the KV cache*; also *How to benchmark your
own traffic* and *Beyond one GPU*. Times are seconds, rates requests/s, memory bytes.

The server's parts, one idea a module each (import a name from its module):

- `paged_kv`: the paged KV cache (`kv_cache_budget`, `kv_blocks`, `kv_sequences`,
  `kv_memory_use`, `paging_gain`, vLLM's block size and memory fractions);
- `engine_step`: one engine step, timed on the per-operation roofline of its mix of
  tokens, with a compute format, tensor parallelism, and the ceiling or the achievable
  model (`EngineStep`; one step with its parts: `parallel.tp_step_s`);
- `llm_simulator`: the event simulator, continuous batching with a paged cache and
  preemption (`simulate_llm`) and disaggregated prefill and decode
  (`simulate_disaggregated`);
- `llm_slo`: SLO attainment, a run's summary and DistServe's goodput.

This module holds the steady state and the sizing decisions: `offline_throughput`
answers what `trtllm-bench throughput` and `vllm bench throughput` report;
`chunk_step_s` and `largest_chunk_budget` size a chunked-prefill token budget to a step
objective. Two numbers for everything: `achievable=False`, the ceiling (the roofline, an
upper bound on throughput), or True, the calibrated achievable model
(`gpuinfer.predict.achievable`).

Prediction layer: no torch, no measurement.
"""

from __future__ import annotations

import math

import numpy as np

from gpuinfer.predict import achievable as _achievable
from gpuinfer import dtypes as _dtypes
from gpuinfer.predict import expert_parallel as _ep
from gpuinfer import hardware as _hardware
from gpuinfer.predict import llm as _llm
from gpuinfer.predict import architectures
from gpuinfer.predict import step_model
from gpuinfer.predict import parallel as _parallel
from gpuinfer.predict import roofline as _roofline
from gpuinfer.predict import search as _search
from gpuinfer import validate as _v
from gpuinfer.predict.batching import MAX_BATCH, MAX_TOKENS
from gpuinfer.predict.engine_step import EngineStep, tp_shard
from gpuinfer.predict.paged_kv import (ACHIEVABLE_GPU_MEMORY_UTILIZATION, DEFAULT_BLOCK_SIZE,
                                       kv_cache_budget)



def offline_throughput(model, accelerator, input_tokens, output_tokens, *, dtype="fp16",
                       kv_dtype=None, compute_dtype=None, n_devices=1, ep=1, attention_dp=False,
                       achievable=True, max_num_seqs=None, max_num_batched_tokens=None,
                       gpu_memory_utilization=None, block_size=DEFAULT_BLOCK_SIZE,
                       interconnect=None) -> dict:
    """What `trtllm-bench throughput` and `vllm bench throughput` report: output tokens/s
    under maximum load (every request queued at once, all of `input_tokens` prompt and
    `output_tokens` output tokens), in total and per GPU, for one tensor-parallel group
    of `n_devices` GPUs (`n_devices=1`: one GPU).

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
    experts its routed tokens touch, `llm.experts_touched`; under `n_devices` each expert is
    split 1/tp in width, vLLM's default); as that count is concave in the step's tokens,
    the averaged step's experts are an upper bound on the mean step's, by at most what
    a few more touched experts read once the batch touches most of them.

    `ep` = `n_devices` with `attention_dp=True`: the engines' own MoE layout (TensorRT-LLM's
    `--tp N --ep N` with `enable_attention_dp`, SGLang's `--enable-dp-attention`): each
    of the N GPUs holds the whole non-expert part and E/N whole experts, runs attention,
    the dense parts and the LM head for its own B/N sequences, the experts for the tokens
    routed to it, and two all-to-alls a MoE layer (`ep_dp_step`). B is then N x what one
    GPU's KV budget holds (the full model's KV bytes a token, the budget left beside the
    replicated non-expert weights); `max_num_seqs` and `max_num_batched_tokens` cap each
    GPU's own batch, as TensorRT-LLM's per-rank `max_batch_size` does. Expert parallelism
    with TP attention prices as `n_devices` here (each device's expert FLOPs and bytes are the
    same to first order): ValueError. Returns a dict:
    `batch`, `step_s`, `tokens_per_s` (the group's output tokens/s), `tokens_per_s_per_gpu`,
    `requests_per_s`, `limited_by` ("memory", "max_num_seqs" or
    "max_num_batched_tokens"), `prefill_tokens_per_step`, `decode_tokens_per_step`,
    `comm_s` (all-reduces a step), `kv_budget_bytes` (per GPU), `gpus`."""
    m, acc = architectures.get(model), _hardware.get(accelerator)
    i = _v.count("input_tokens", input_tokens, maximum=MAX_TOKENS)
    o = _v.count("output_tokens", output_tokens, maximum=MAX_TOKENS)
    e = _v.count("ep", ep, maximum=1 << 16)
    n = _v.count("n_devices", n_devices, maximum=1 << 16)
    _check_ep_layout(m, e, n, attention_dp)
    eff = _achievable.as_efficiency(achievable)
    dp = attention_dp
    part = m if dp else tp_shard(m, n_devices)
    block = _v.count("block_size", block_size, maximum=MAX_TOKENS)
    _, kv, _ = _dtypes.formats(dtype, kv_dtype, compute_dtype)
    kv_token = step_model.kv_cache_bytes_per_token(part, kv)
    budget = _offline_kv_budget(part, acc, dtype, eff, gpu_memory_utilization, n if dp else 1)
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
    prefills, decodes = b / o, b * (o - 1) / o
    context = i + (o - 2) / 2
    z = np.array([1.0, prefills * i + decodes, b,       # llm.STEP_AGGREGATES
                  prefills * i * (i + 1) / 2 + decodes * (context + 1), decodes * context,
                  prefills * i * i + decodes * (context + 1)])
    if dp:
        r = ep_dp_step(m, acc, n, z, dtype=dtype, kv_dtype=kv_dtype,
                       compute_dtype=compute_dtype, achievable=eff, interconnect=interconnect)
        # b is one GPU's batch; the group runs n of them
        step, comm = r["step_s"], r["comm_s"]
        return {"model": m.name, "accelerator": acc.name, "gpus": n, "batch": b * n,
                "limited_by": limited_by, "step_s": step, "tokens_per_s": b * n / step,
                "tokens_per_s_per_gpu": b / step, "requests_per_s": b * n / o / step,
                "prefill_tokens_per_step": prefills * i * n,
                "decode_tokens_per_step": decodes * n, "comm_s": comm,
                "kv_budget_bytes": budget}
    timer = EngineStep(m, acc, dtype, kv_dtype, compute_dtype, n_devices=n, achievable=eff,
                        interconnect=interconnect)
    # The step's overheads (`achievable.overheads`) include the host's per-sequence cost
    # for its B sequences (z[2], the LM-head rows).
    step = float(timer.many(z[:, None])[0])
    if not math.isfinite(step):
        raise ValueError(f"{acc.name} has no peak for {dtype} (compute "
                         f"{_dtypes.formats(dtype, kv_dtype, compute_dtype)[2]}) in the "
                         f"catalogue")
    return {"model": m.name, "accelerator": acc.name, "gpus": n, "batch": b,
            "limited_by": limited_by, "step_s": step, "tokens_per_s": b / step,
            "tokens_per_s_per_gpu": b / step / n, "requests_per_s": b / o / step,
            "prefill_tokens_per_step": prefills * i, "decode_tokens_per_step": decodes,
            "comm_s": float(timer.comm_s(z[1])[0]), "kv_budget_bytes": budget}


def _check_ep_layout(m, e, n, attention_dp):
    """The expert-parallel layouts `offline_throughput` expresses: none (ep 1, no
    attention DP), or ep = tp with attention DP on an MoE model whose experts split."""
    if not isinstance(attention_dp, bool):
        raise TypeError(f"attention_dp must be True or False, got {attention_dp!r}")
    if e == 1 and not attention_dp:
        return
    if not m.is_moe:
        raise ValueError(f"ep={e}, attention_dp={attention_dp}: {m.name} is dense, it has "
                         f"no experts to spread; use tp")
    if not attention_dp or e != n:
        raise ValueError(f"ep={e} with tp={n}, attention_dp={attention_dp}: expert "
                         f"parallelism is modelled with data-parallel attention over the "
                         f"same GPUs (ep = tp, attention_dp=True); with TP attention it "
                         f"prices as tp alone (ep=1)")
    if m.n_experts % n:
        raise ValueError(f"ep={e}: {m.name}'s {m.n_experts} experts do not split evenly "
                         f"over {e} GPUs")


def _offline_kv_budget(part, acc, dtype, eff, gpu_memory_utilization, ep):
    """One GPU's KV budget for `offline_throughput`: the ceiling's whole card less the
    weights (no reserve), the achievable model's `gpu_memory_utilization` of it
    (`kv_cache_budget`); under EP with attention DP (`ep` > 1) the GPU holds the
    whole non-expert part and 1/ep of the routed experts."""
    ceiling = gpu_memory_utilization is None and eff.is_ceiling
    u = (ACHIEVABLE_GPU_MEMORY_UTILIZATION if gpu_memory_utilization is None
         else gpu_memory_utilization)
    if ep == 1:
        return (kv_cache_budget(part, acc, dtype, reserve_bytes=0) if ceiling
                else kv_cache_budget(part, acc, dtype, gpu_memory_utilization=u))
    held = step_model.weight_bytes(part, dtype) - _routed_expert_weight_bytes(part, dtype) * (
        1 - 1 / ep)
    if ceiling:
        return max(0.0, acc.memory_bytes - held)
    return max(0.0, _v.fraction("gpu_memory_utilization", u) * acc.memory_bytes - held
               - _llm.DEFAULT_RESERVE_BYTES)


def _routed_expert_weight_bytes(m, dtype) -> float:
    """Bytes of every routed expert of `m` in the weights' format (what EP spreads)."""
    return m.n_moe_layers * m.n_experts * m.expert_params * step_model.expert_bytes(
        m, _dtypes.formats(dtype)[0])


def ep_dp_step(model, accelerator, n_devices, z, *, dtype="fp16", kv_dtype=None,
               compute_dtype=None, achievable=True, interconnect=None) -> dict:
    """One GPU's step in expert parallelism with data-parallel attention (ep = N GPUs),
    for one GPU's share of a step whose per-GPU aggregates are `z`
    (`llm.step_aggregates` of that GPU's own sequences): every row of the whole model's
    operations table (`EngineStep` at tp 1) on those aggregates, except the experts,
    which run the tokens routed to this GPU: the experts row of the whole group's
    aggregates (N x z's tokens) over N, its FLOPs times the busiest GPU's imbalance
    (`expert_parallel.uniform_routing_imbalance`; the ceiling takes the mean, 1). Two
    all-to-alls a MoE layer (`expert_parallel.moe_all_to_all_bytes` of z's tokens,
    `all_to_all_s`, over `expert_parallel.deepep_fraction` where the Efficiency's
    `all_to_all` is "measured"). The ceiling overlaps them with the computation, max(the
    two) (a bound holds under any overlap); the achievable model adds them and its
    overheads (`achievable.overheads`). Returns {"step_s", "comm_s", "rows_s" (seconds
    a row), "names", "flops", "bytes", "peaks", "bandwidths" (each row's rates)};
    `achievable`: False, True or an Efficiency."""
    m, acc = architectures.get(model), _hardware.get(accelerator)
    n = _v.count("n_devices", n_devices, maximum=1 << 16)
    eff = _achievable.as_efficiency(achievable)
    z = np.asarray(z, dtype=float)
    timer = EngineStep(m, acc, dtype, kv_dtype, compute_dtype, n_devices=1, achievable=eff)
    whole = z * n
    whole[0] = 1.0
    f, y = (a[:, 0] for a in timer.flops_bytes(z[:, None]))
    fw, yw = (a[:, 0] for a in timer.flops_bytes(whole[:, None]))
    j = timer.names.index("experts")
    imb = 1.0 if eff.is_ceiling else _ep.uniform_routing_imbalance(
        max(whole[1], 1.0), n, m.experts_per_token, m.n_experts // n)
    f[j], y[j] = fw[j] / n * imb, yw[j] / n
    rows = _roofline.op_time_s_unchecked(f, y, timer.peaks, timer.bandwidths)
    device = float(rows.sum())
    comm = 0.0
    if n > 1:
        ic = _parallel.link_for(interconnect, acc)
        a2a = _ep.moe_all_to_all_bytes(m, z[1], n)
        # The ceiling's all-to-alls at their floor (bytes at the link's bandwidth, no
        # latency: a bound); the achievable model's with NCCL's latency, or DeepEP's.
        a2a_s = _ep.all_to_all_floor_s if eff.is_ceiling else _ep.all_to_all_s
        d = a2a_s(a2a["dispatch_sent_bytes"], n, ic)
        c = a2a_s(a2a["combine_sent_bytes"], n, ic)
        if eff.all_to_all == "measured" and not eff.is_ceiling:
            f_d, f_c = _ep.deepep_fraction(n)
            d, c = d / f_d, c / f_c
        comm = m.n_moe_layers * (d + c)
    if eff.is_ceiling:
        step = max(device, comm)
    else:
        step = float(_achievable.overheads(device + comm, m.n_layers, eff, sequences=z[2]))
    return {"step_s": step, "comm_s": comm, "rows_s": rows, "names": list(timer.names),
            "flops": f, "bytes": y, "peaks": timer.peaks, "bandwidths": timer.bandwidths}


def chunk_step_s(model, accelerator, budget, *, decodes, decode_context, prompt_tokens,
                 dtype="fp16", kv_dtype=None, compute_dtype=None, n_devices=1,
                 achievable=True) -> float:
    """Seconds of the worst step of chunked prefill under a token `budget` a step
    (Sarathi-Serve; vLLM's `max_num_batched_tokens`): `decodes` running sequences'
    decode tokens, each at `decode_context` cached tokens, and one chunk of the rest,
    budget - decodes tokens, of a `prompt_tokens`-token prompt, taken as if it ended the
    prompt (on prompt_tokens - chunk cached tokens, with its LM-head row): the most
    context a chunk of that size can attend to, whether or not it divides the prompt.
    Timed as `simulate_llm` times a step (`parallel.tp_step_s`): `achievable=True` (default) on
    the achievable model, False on the ceiling."""
    d = _v.count("decodes", decodes, minimum=0, maximum=MAX_BATCH)
    b = _v.count("budget", budget, maximum=MAX_TOKENS)
    p = _v.count("prompt_tokens", prompt_tokens, maximum=MAX_TOKENS)
    c = _v.count("decode_context", decode_context, minimum=0, maximum=MAX_TOKENS)
    chunk = b - d
    if not 1 <= chunk <= p:
        raise ValueError(f"budget={b:,} must leave a chunk of 1 to prompt_tokens={p:,} "
                         f"tokens beside decodes={d:,}: a budget from {d + 1:,} to {d + p:,}")
    return _parallel.tp_step_s(model, accelerator, n_devices, d + 1, [c] * d + [p - chunk],
                               new_tokens=[1] * d + [chunk], dtype=dtype, kv_dtype=kv_dtype,
                               compute_dtype=compute_dtype, achievable=achievable)


def largest_chunk_budget(model, accelerator, *, decodes, decode_context, prompt_tokens,
                         step_slo_s, granularity=64, dtype="fp16", kv_dtype=None,
                         compute_dtype=None, n_devices=1, achievable=True) -> int:
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
                            compute_dtype=compute_dtype, n_devices=n_devices, achievable=achievable) <= slo
    n = _search.largest_meeting(meets, lo, hi)
    return n * g if n >= lo else 0
