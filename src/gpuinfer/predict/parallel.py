"""Sharding a decoder across devices: tensor- and pipeline-parallel decode, and what a
tensor-parallel group serves within a time-per-output-token objective. (The lab's layers
on torch.distributed: `gpuinfer.measure.distributed`; NCCL's collectives: `gpuinfer.predict.collectives`;
mixtures of experts spread over devices:
`gpuinfer.predict.expert_parallel`; across servers: `gpuinfer.predict.multinode`.)

Chapter: *Beyond one GPU*; lab: *Tensor-parallel layers*. SI units: bytes, bytes/s, s.

A tensor-parallel (TP) decode step on N devices (Megatron-LM's layout, Shoeybi et al.
2019; Pope et al. 2023 call it 1D weight-stationary):
- each device holds a *shard* of the model (`shard`): a 1/N slice of the query heads, of
  the MLP's hidden size and of the vocabulary; the KV heads are split too, but a KV head
  cannot be split, so when N exceeds the number of KV heads each head (and its K/V
  projections) is *replicated* on N / n_kv_heads devices;
- each device runs the per-operation roofline of `gpuinfer.predict.llm` on its shard (the shard's
  matmuls, its heads' attention, its slice of the LM head);
- each layer needs two all-reduces of the activations, [batch, d_model] each (after the
  attention block's output projection and after the MLP's down projection), and the
  vocabulary-parallel embedding one more per step: 2 x layers + 1;
- the all-reduces sit on the critical path (the next layer needs their result), so
  their time is *added*: step = the shard's step + communication.
On the achievable model each all-reduce is priced by NCCL's own cost model
(`collectives.fastest_allreduce`: its fastest ring or tree and protocol, latency included).

Two step times, one function (`tp_step_s`) and its switch:
- the *ceiling* (`achievable=False`), a lower bound on a step's time (an upper bound on
  throughput): the shard's per-operation roofline plus each all-reduce's bytes at NCCL's
  bus bandwidth for the link, no latency (`allreduce_floor_s`);
- the *achievable model* (`achievable=True`, the default), for decisions: the shard on
  the calibrated achievable model (`gpuinfer.predict.achievable`: derated rates, kernel
  gaps, a fixed cost a step) plus NCCL's all-reduces as above, latency included. The
  serving simulator times its steps the same way (`engine_step.EngineStep`).
Decisions rest on the achievable model, the ceiling beside: `tp_step_s`,
`tp_max_batch_within` and `tp_options` (the cheapest GPU and TP degree for an objective).

Prediction layer: no torch, no measurement.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from gpuinfer.predict import achievable as _achievable
from gpuinfer.predict import cost as _cost
from gpuinfer import dtypes as _dtypes
from gpuinfer import hardware as _hardware
from gpuinfer.hardware import device_links
from gpuinfer.predict import llm as _llm
from gpuinfer.predict import architectures
from gpuinfer.predict import step_model
from gpuinfer.predict import search as _search
from gpuinfer import validate as _v
# NCCL's collectives live in `collectives`; their names stay importable from here.
from gpuinfer.predict.collectives import (allreduce_floor_s, check_devices, engine_allreduce,
                                          ring_route)

# --- sharding a decoder ------------------------------------------------------------------

def check_tp_degree(model, n_devices, name="n_devices") -> int:
    """Raise ValueError unless `n_devices` can shard `model` evenly: it must divide the
    query heads and the MLP's hidden size, and either divide the KV heads or be a multiple
    of them (then each KV head is replicated). Returns N as an int. `name`: the caller's
    parameter, for the error (`n_devices`, `degrees[1]`)."""
    m = architectures.get(model)
    n = check_devices(n_devices, name)
    if m.n_heads % n:
        raise ValueError(f"{n} devices do not divide {m.name}'s {m.n_heads} query heads")
    if m.d_ff % n:
        raise ValueError(f"{n} devices do not divide {m.name}'s MLP hidden size {m.d_ff}")
    if m.is_moe and m.expert_d_ff % n:
        raise ValueError(f"{n} devices do not divide {m.name}'s expert width {m.expert_d_ff}")
    if m.n_kv_heads % n and n % m.n_kv_heads:
        raise ValueError(f"{n} devices neither divide {m.name}'s {m.n_kv_heads} KV heads nor "
                         f"are a multiple of them")
    return n


def valid_tp_degrees(model, max_devices=None) -> list[int]:
    """Every N up to `max_devices` (default: the number of query heads) that shards
    `model` evenly (see `check_tp_degree`). Only divisors of the query heads qualify, so
    the search never walks past them."""
    m = architectures.get(model)
    top = m.n_heads if max_devices is None else min(check_devices(max_devices, "max_devices"),
                                                    m.n_heads)
    out = []
    for n in range(1, top + 1):
        if m.n_heads % n:
            continue
        try:
            out.append(check_tp_degree(m, n))
        except ValueError:
            pass
    return out


def kv_heads_per_device(model, n_devices) -> int:
    """KV heads each device holds under TP: n_kv_heads / N, but never fewer than one
    (a head cannot be split, so beyond n_kv_heads devices it is replicated)."""
    m = architectures.get(model)
    n = check_tp_degree(m, n_devices)
    return max(1, m.n_kv_heads // n)


def shard(model, n_devices) -> architectures.ModelSpec:
    """One device's part of `model` under N-way tensor parallelism, as a `ModelSpec` that
    `gpuinfer.predict.llm` times and sizes: 1/N of the query heads, of the MLP's hidden size and
    of the vocabulary (rounded up, as Megatron pads it), `kv_heads_per_device` KV heads
    (replicated past n_kv_heads), the full d_model (activations are whole on every
    device between the all-reduces). An MoE model's experts are split the same way, 1/N
    of each expert's width on every device (vLLM's default without
    `enable_expert_parallel`); latent attention's down-projections and cached latent are
    whole on every device (only the heads split), as vLLM replicates them."""
    m = architectures.get(model)
    n = check_tp_degree(m, n_devices)
    return dataclasses.replace(
        m, name=f"{m.name} (1/{n} shard)" if n > 1 else m.name, n_heads=m.n_heads // n,
        n_kv_heads=kv_heads_per_device(m, n), d_ff=m.d_ff // n,
        expert_d_ff=m.expert_d_ff // n, vocab_size=math.ceil(m.vocab_size / n))


_KV_SHARDINGS = ("heads", "batch")


def tp_kv_cache_bytes_per_token(model, n_devices, dtype="fp16", kv_sharding="heads"):
    """KV-cache bytes one token of one sequence costs each device, averaged over devices.

    kv_sharding="heads": each device caches its KV heads for every sequence
    (2 x layers x kv_heads_per_device x head_dim x bytes): replication stops the saving
    once N exceeds the KV heads (the multi-query trap, Pope et al. 2023, sec. 3.3).
    kv_sharding="batch": each device caches whole sequences, batch / N of them, so the
    average per device is the full per-token cache / N, whatever the head count."""
    m = architectures.get(model)
    n = check_tp_degree(m, n_devices)
    _v.choice("kv_sharding", kv_sharding, _KV_SHARDINGS)
    if kv_sharding == "batch":
        return step_model.kv_cache_bytes_per_token(m, dtype) / n
    return step_model.kv_cache_bytes_per_token(shard(m, n), dtype)


def tp_weight_bytes_per_device(model, n_devices, dtype="fp16") -> float:
    """Weight bytes on each device: the shard's weights (`llm.weight_bytes` of `shard`),
    replicated K/V projections included past n_kv_heads devices."""
    return step_model.weight_bytes(shard(model, n_devices), dtype)


def tp_max_batch(model, accelerator, n_devices, context, dtype="fp16", *, kv_dtype=None,
                 reserve_bytes=None, kv_sharding="heads") -> int:
    """Largest batch whose weight shard plus KV cache (`context` tokens a sequence) fits in
    each of N devices' memory (what the card has) less `reserve_bytes` a device (default
    `llm.DEFAULT_RESERVE_BYTES`). 0 if the shard alone does not fit. With N = 1 this is
    `llm.max_batch`. With kv_sharding="batch" the result is a multiple of N."""
    m, acc = architectures.get(model), _hardware.get(accelerator)
    n = check_tp_degree(m, n_devices)
    _, kv, _ = _dtypes.formats(dtype, kv_dtype)
    c = _v.count("context", context, maximum=1 << 30)
    reserve = _llm.DEFAULT_RESERVE_BYTES if reserve_bytes is None else _v.non_negative(
        "reserve_bytes", reserve_bytes)
    free = acc.memory_bytes - reserve - tp_weight_bytes_per_device(m, n, dtype)
    if free <= 0:
        return 0
    batch = int(free // (c * tp_kv_cache_bytes_per_token(m, n, kv, kv_sharding)))
    return batch - batch % n if kv_sharding == "batch" else batch


def min_tp_degree(model, accelerator, context, batch=1, dtype="fp16", *, kv_dtype=None,
                  reserve_bytes=None, kv_sharding="heads", max_devices=None) -> float:
    """Fewest devices (a valid TP degree) whose memory holds the weights plus `batch`
    sequences of `context` tokens; math.inf if no degree up to `max_devices` does."""
    b = _v.count("batch", batch, maximum=1 << 30)
    for n in valid_tp_degrees(model, max_devices):
        if tp_max_batch(model, accelerator, n, context, dtype, kv_dtype=kv_dtype,
                        reserve_bytes=reserve_bytes, kv_sharding=kv_sharding) >= b:
            return n
    return math.inf


def link_for(interconnect, accelerator):
    """The `hardware.Interconnect` a TP group uses: `interconnect` (a name or an
    Interconnect), or when None the accelerator's own (`hardware.interconnect_for`)."""
    if interconnect is None:
        return device_links.interconnect_for(accelerator)
    return device_links.get_interconnect(interconnect)


def tp_message_bytes_per_value(compute_dtype, achievable=True) -> float:
    """Bytes per value of a tensor-parallel all-reduce's message ([tokens, d_model]).

    The ceiling (`achievable` False): the compute format's, the smallest message the
    matmuls could hand over, so the bound stays a bound. The achievable model (True or
    an `achievable.Efficiency`): what engines send, the activations' dtype, at least 16
    bits: W8A8 fp8/int8 and W4A4 fp4 matmuls write their output in bf16/fp16 and the
    engine all-reduces that (2 bytes a value; fp32 stays 4)."""
    # vLLM: RowParallelLinear.forward all-reduces the output of quant_method.apply, which
    # the fp8 linear methods return in the input's 16-bit dtype
    # (https://github.com/vllm-project/vllm/blob/main/vllm/model_executor/layers/linear.py).
    # TensorRT-LLM reduces in the input dtype too: its fused all-reduce + RMSNorm + FP8
    # kernels quantise after the reduction, and its low-precision all-reduce strategy is
    # opt-in (cpp/tensorrt_llm/kernels/communicationKernels/allReduceFusionKernels.h).
    act = _dtypes.bytes_per_element(compute_dtype)
    return act if _achievable.as_efficiency(achievable).is_ceiling else max(act, 2.0)


def _shard_step(part, acc, new_tokens, context, dtype, kv_dtype, compute_dtype, achievable,
                logits=None):
    """(ops table, seconds) of one device's step, sequence i bringing `new_tokens[i]`
    tokens on `context[i]` cached ones: the roofline's (`achievable` False) or the
    achievable model's rows plus its step overheads."""
    eff = _achievable.as_efficiency(achievable)
    if eff.is_ceiling:
        ops = _llm.forward_step_breakdown(part, acc, new_tokens, context, dtype, logits=logits,
                                          kv_dtype=kv_dtype, compute_dtype=compute_dtype)
        return ops, float(ops["seconds"].sum())
    ops = _achievable.step_breakdown(part, acc, new_tokens, context, dtype, logits=logits,
                                     kv_dtype=kv_dtype, compute_dtype=compute_dtype,
                                     achievable=eff)
    sampled = len(new_tokens) if logits is None else sum(1 for x in logits if x)
    return ops, float(_achievable.overheads(ops["seconds"].sum(), part.n_layers, eff,
                                            sequences=sampled))


def _per_sequence(name, value, batch, positive):
    """`value` (a number, or one a sequence) as a tuple of `batch` integers."""
    check = _v.positive if positive else _v.non_negative
    arr = np.atleast_1d(check(name, value, integer=True, array=True)).astype(int)
    if arr.ndim != 1 or arr.size not in (1, batch):
        raise ValueError(f"{name} must be a number or hold one value a sequence "
                         f"({batch}); got {arr.size} values")
    return tuple(int(x) for x in np.broadcast_to(arr, (batch,)))


def tp_step_s(model, accelerator, n_devices, batch=1, context=0, *, new_tokens=1, logits=None,
              dtype="fp16", kv_dtype=None, compute_dtype=None, interconnect=None,
              network=None, achievable=True, allreduce="nccl", parts=False):
    """Chapter *Beyond one GPU*: seconds of one forward step of a tensor-parallel group of
    `n_devices`: `batch` sequences, sequence i bringing `new_tokens[i]` tokens (default
    1, a decode step) on top of `context[i]` cached ones (each a number for every
    sequence, or one value a sequence), `logits[i]` rows of the LM head (default: one
    each). One device's shard (`shard`) plus 2 x layers + 1 all-reduces of
    [tokens, d_model], on the critical path (the next layer needs their result).

    `achievable=True` (default; or an `achievable.Efficiency`): the achievable model, for
    decisions: the shard's rows at `achievable.FITTED`'s derated rates plus its kernel
    gaps and fixed cost a step, and each all-reduce at NCCL's fastest ring or tree and
    protocol, latency included (`collectives.engine_allreduce`), messages in 16 bits
    (`tp_message_bytes_per_value`). `allreduce="custom"`: the engines' one-shot/two-shot
    kernel where it runs, NCCL's elsewhere.
    `achievable=False`: the ceiling, a lower bound on the step's time: the shard's
    per-operation roofline plus each all-reduce at `allreduce_floor_s` (its bytes, in the
    compute format, at NCCL's bus bandwidth for the link, no latency), whatever
    `allreduce` says.

    `interconnect`: a name ("NVLink 4", "PCIe Gen5 x16") or `hardware.Interconnect`;
    default: the accelerator's. Past the link's domain the all-reduces take `network`
    (default `collectives.DEFAULT_NETWORK`). `compute_dtype`: the matmuls' format
    (default `dtypes.formats`' for `dtype`; "fp8_e4m3" for FP8 W8A8). The seconds are
    cached (a search asks for the same step many times).

    `parts=True` returns a dict: `ops` (one device's rows: `llm.forward_step_breakdown`'s
    table, or `achievable.step_breakdown`'s with `ceiling_s` beside `seconds`), `shard_s`
    (one device's step: the rows, plus the achievable model's overheads),
    `n_allreduces`, `allreduce_bytes` (one message), `allreduce_s` (one all-reduce),
    `algorithm` and `protocol` (NCCL's or the custom kernel's; None on the ceiling),
    `comm_s` (all of them), `total_s` (shard_s + comm_s: the number this returns),
    `ceiling_s` (the ceiling, beside the achievable model), the bytes each device holds
    and the route (`interconnect`, `network`, `nodes`)."""
    m = architectures.get(model)
    n = check_tp_degree(m, n_devices)
    b = _v.count("batch", batch, maximum=1 << 30)
    q = _per_sequence("new_tokens", new_tokens, b, positive=True)
    c = _per_sequence("context", context, b, positive=False)
    lg = None if logits is None else _per_sequence("logits", logits, b, positive=False)
    if lg is not None and any(x > t for x, t in zip(lg, q)):
        raise ValueError("logits must be at most new_tokens for each sequence")
    eff = _achievable.as_efficiency(achievable)
    ar = _v.choice("allreduce", allreduce, ("nccl", "custom"))
    if not isinstance(parts, bool):
        raise TypeError(f"parts must be True or False, got {parts!r}")
    if parts:
        return _tp_step(accelerator, m, n, q, c, lg, dtype, kv_dtype, compute_dtype,
                        interconnect, network, eff, ar)
    key = (m, n, q, c, lg, dtype, kv_dtype, compute_dtype, interconnect, network, eff, ar)
    if isinstance(accelerator, str) and _hashable(key):
        return _tp_step_total(_hardware.get(accelerator).name, *key)
    return _tp_step(accelerator, *key)["total_s"]


def _hashable(key) -> bool:
    try:
        hash(key)
    except TypeError:
        return False
    return True


def _tp_step(accelerator, m, n, q, c, lg, dtype, kv_dtype, compute_dtype, interconnect,
             network, eff, ar) -> dict:
    """`tp_step_s`'s parts, its arguments checked."""
    acc = _hardware.get(accelerator)
    part = shard(m, n)
    ops, shard_s = _shard_step(part, acc, list(q), list(c), dtype, kv_dtype, compute_dtype,
                               eff, logits=None if lg is None else list(lg))
    if not math.isfinite(shard_s):
        raise ValueError(f"{acc.name} has no peak for "
                         f"{_dtypes.formats(dtype, kv_dtype, compute_dtype)[2]} in the catalogue")
    roofline_s = float(ops["ceiling_s" if "ceiling_s" in ops else "seconds"].sum())
    _, kv, compute = _dtypes.formats(dtype, kv_dtype, compute_dtype)
    tokens = sum(q)
    message = tokens * m.d_model * tp_message_bytes_per_value(compute, eff)
    n_allreduces = 2 * m.n_layers + 1
    route = {"interconnect": None, "network": None, "nodes": 1}
    one, protocol, algorithm, floor = 0.0, None, None, 0.0
    if n > 1:
        ic = link_for(interconnect, acc)
        # The bound all-reduces the smallest message: the compute format's.
        floor = allreduce_floor_s(tokens * m.d_model * tp_message_bytes_per_value(compute, achievable=False), n,
                                  ic, network=network)
        if eff.is_ceiling:
            link, net, nodes = ring_route(n, ic, network)
            one = floor
            route = {"interconnect": link.name, "network": net.name if net else None,
                     "nodes": nodes}
        else:
            best = engine_allreduce(float(message), n, ic, network=network, allreduce=ar)
            one, algorithm, protocol = best["seconds"], best["algorithm"], best["protocol"]
            route = {k: best[k] for k in ("interconnect", "network", "nodes")}
    comm_s = n_allreduces * one
    return {"model": m.name, "accelerator": acc.name, "n_devices": n, "batch": len(q),
            "context": c[0] if len(set(c)) == 1 else c, "new_tokens": tokens, "ops": ops,
            "weight_bytes_per_device": step_model.weight_bytes(part, dtype),
            "kv_bytes_per_device": sum(c) * step_model.kv_cache_bytes_per_token(part, kv),
            "shard_s": shard_s, "n_allreduces": n_allreduces, "allreduce_bytes": message,
            "allreduce_s": one, "algorithm": algorithm, "protocol": protocol,
            "comm_s": comm_s, "total_s": shard_s + comm_s,
            "ceiling_s": roofline_s + n_allreduces * floor, **route}


@functools.lru_cache(maxsize=65536)
def _tp_step_total(accelerator, *key) -> float:
    return _tp_step(accelerator, *key)["total_s"]


def tp_tradeoff(model, accelerator, batch=1, context=0, dtype="fp16", interconnect=None, *,
                degrees=None, network=None, kv_dtype=None):
    """Chapter *Beyond one GPU*: what each TP degree buys on the achievable model
    (`tp_step_s`), one row per degree N (that fits `batch` sequences of `context`
    tokens): ms per token (a sequence's latency),
    tokens/s in total and per GPU, the share of the step spent communicating. Compare
    with data-parallel replicas: `replicas_of_min_tp` copies of the smallest degree that
    fits, each serving `batch` sequences, on the same N GPUs."""
    import pandas as pd

    m = architectures.get(model)
    degrees = valid_tp_degrees(m) if degrees is None else [check_tp_degree(m, n) for n in degrees]
    fits = [n for n in degrees if tp_max_batch(m, accelerator, n, max(context, 1), dtype,
                                               kv_dtype=kv_dtype) >= batch]
    if not fits:
        raise ValueError(f"no TP degree among {degrees} holds {m.name} at batch {batch}, "
                         f"context {context} on {_hardware.get(accelerator).name}")
    base = fits[0]
    kw = dict(dtype=dtype, interconnect=interconnect, network=network, kv_dtype=kv_dtype)
    base_t = tp_step_s(m, accelerator, base, batch, context, **kw)
    rows = []
    for n in fits:
        parts = tp_step_s(m, accelerator, n, batch, context, parts=True, **kw)
        t = parts["total_s"]
        replicas = n // base if n % base == 0 else np.nan
        rows.append({"n_devices": n, "ms_per_token": 1e3 * t, "tokens_per_s": batch / t,
                     "tokens_per_s_per_gpu": batch / t / n,
                     "comm_share": parts["comm_s"] / t, "algorithm": parts["algorithm"],
                     "protocol": parts["protocol"],
                     "replicas_of_min_tp": replicas,
                     "replicas_tokens_per_s_per_gpu": batch / base_t / base,
                     "replicas_ms_per_token": 1e3 * base_t})
    return pd.DataFrame(rows).set_index("n_devices")


def crossover_devices(model, accelerator, batch=1, context=0, dtype="fp16",
                      interconnect=None, *, max_devices=None, network=None) -> float:
    """The smallest valid TP degree N at which a decode step's all-reduces take at least as
    long as its shard, both on the achievable model: `shard_s` and `comm_s` of one
    `tp_step_s(..., parts=True)` (the shard at `achievable.FITTED`'s rates with its kernel
    gaps and fixed cost a step, NCCL's all-reduces latency included); math.inf if none
    does up to `max_devices` (default: the query heads). The chapter's closed form (the
    quadratic with the shard's fixed overheads) approximates it; beyond it, adding devices
    buys little. The ceiling's crossover (its roofline shard against its latency-free
    all-reduces) is another matter, not computed here: on the ceiling the bytes alone
    never catch a shard of weights that shrinks as 1/N at decode's message sizes."""
    kw = dict(dtype=dtype, interconnect=interconnect, network=network, parts=True)
    for n in valid_tp_degrees(model, max_devices):
        if n == 1:
            continue
        step = tp_step_s(model, accelerator, n, batch, context, **kw)
        if step["comm_s"] >= step["shard_s"]:
            return n
    return math.inf


def pp_decode_breakdown(model, accelerator, n_stages, batch=1, context=0, dtype="fp16",
                        interconnect=None, *, network=None, achievable=True) -> dict:
    """Pipeline parallelism on `n_stages` devices, each holding n_layers / n_stages whole
    layers. One token still passes every stage in turn, so its latency is the whole
    model's step time plus (stages - 1) point-to-point sends of [batch, d_model]
    activations; with `n_stages` micro-batches of `batch` sequences in flight, every stage
    is busy and throughput rises n_stages-fold. No overlap of sends and compute assumed;
    a send costs NCCL's Simple-protocol base and step latency plus bytes / bandwidth, over
    the link inside a domain and over `network` for the hand-offs between domains.

    A stage's time is its share, 1 / n_stages, of the whole model's decode step: the
    roofline's (`achievable` False) or the achievable model's, overheads included
    (`achievable` True or an `achievable.Efficiency`).

    Returns stage_s, send_s (the slowest hand-off), sends_s (all of them), latency_s (one
    token, one micro-batch) and tokens_per_s (all micro-batches, pipeline full: the
    slowest stage plus its hand-off paces it), in seconds and tokens/s."""
    m, acc = architectures.get(model), _hardware.get(accelerator)
    s = check_devices(n_stages, "n_stages")
    if m.n_layers % s:
        raise ValueError(f"{s} stages do not divide {m.name}'s {m.n_layers} layers")
    b = _v.count("batch", batch, maximum=1 << 30)
    _, _, compute = _dtypes.formats(dtype)
    c = _v.count("context", context, minimum=0, maximum=1 << 30)
    whole_s = _shard_step(m, acc, np.ones(b, dtype=int), np.full(b, c), dtype, None, None,
                          achievable)[1]
    stage_s = whole_s / s
    send_bytes = float(b) * m.d_model * _dtypes.bytes_per_element(compute)
    sends = []  # the (s - 1) hand-offs: inside a domain over the link, between domains over the network
    if s > 1:
        ic, net, nodes = ring_route(s, link_for(interconnect, acc), network)
        inside = ic.nccl("Simple")
        inside_s = inside.base_latency_s + inside.step_latency_s + send_bytes / inside.bandwidth_bytes_per_s
        crossing = nodes - 1
        sends = [inside_s] * (s - 1 - crossing)
        if crossing:
            out = net.nccl("Simple")
            sends += [out.base_latency_s + out.step_latency_s
                      + send_bytes / (net.bandwidth_bytes_per_s / ic.domain_gpus)] * crossing
    send_s = max(sends, default=0.0)
    latency_s = s * stage_s + sum(sends)
    return {"n_stages": s, "stage_s": stage_s, "send_s": send_s, "sends_s": sum(sends),
            "latency_s": latency_s, "tokens_per_s": float(b) / (stage_s + send_s)}


#: Kernels one decoder layer launches in an eager TP decode step (vLLM/Megatron layout):
#: RMSNorm, QKV matmul, rotary embedding, cache write, attention, output matmul,
#: all-reduce, residual add + RMSNorm, gate/up matmul, SiLU x up, down matmul,
#: all-reduce, residual add. An illustrative count, not a measurement: fused
#: implementations launch fewer, unfused ones more.
KERNELS_PER_LAYER = 13


def launch_floor_s(model, per_kernel_s, kernels_per_layer=KERNELS_PER_LAYER) -> float:
    """Chapter *Beyond one GPU*: the time a decode step spends just launching its
    kernels, one after another: layers x kernels per layer x `per_kernel_s` (seconds a
    launch costs the CPU, a few microseconds eagerly; CUDA graphs replay the whole step
    with one launch). Compare it with the roofline step time under TP: the roofline
    shrinks with N, the launch floor does not."""
    m = architectures.get(model)
    t = _v.positive("per_kernel_s", per_kernel_s)
    k = _v.count("kernels_per_layer", kernels_per_layer, maximum=10_000)
    return m.n_layers * k * t


# --- what a tensor-parallel group serves within an objective -------------------------------

def tp_max_batch_within(model, accelerator, n_devices, context, tpot_s, *, dtype="fp16",
                        kv_dtype=None, interconnect=None, network=None,
                        achievable=True, allreduce="nccl", compute_dtype=None) -> int:
    """The largest batch whose tensor-parallel decode step on `n_devices` (every sequence
    at `context` cached tokens; `tp_step_s`, achievable by default, the ceiling with
    `achievable=False`) takes at most `tpot_s` seconds and fits in each
    device's memory (`tp_max_batch`, less `llm.DEFAULT_RESERVE_BYTES`); 0 if none does.
    The step grows with the batch, so `search.largest_meeting` bisects between 1 and
    what memory allows."""
    m = architectures.get(model)
    n = check_tp_degree(m, n_devices)
    c = _v.count("context", context, minimum=0, maximum=1 << 30)
    limit = _v.positive("tpot_s", tpot_s)
    top = tp_max_batch(m, accelerator, n, max(c, 1), dtype, kv_dtype=kv_dtype)
    return _search.largest_meeting(
        lambda b: tp_step_s(m, accelerator, n, b, c, dtype=dtype, kv_dtype=kv_dtype,
                            interconnect=interconnect, network=network,
                            achievable=achievable, allreduce=allreduce,
                            compute_dtype=compute_dtype) <= limit, 1, top)


def check_gpu_prices(prices) -> dict:
    """`prices`, a mapping of accelerator (a catalogue name) to its price per GPU-hour, as
    a dict; a clear error for anything else (not a mapping, empty, an unknown GPU, a price
    that is not a positive number)."""
    if isinstance(prices, str) or not hasattr(prices, "items") or not len(prices):
        raise TypeError("prices must map accelerator names to a price per GPU-hour, e.g. "
                        f"{{'H200': 5.41}}; got {prices!r}")
    out = {}
    for acc, price in prices.items():
        _hardware.get(acc)
        out[acc] = _v.positive(f"prices[{acc!r}]", price)
    return out


def tp_options(model, options=(1, 2, 4, 8), *, tpot_s, context, prices, dtype="fp16",
               achievable=True, allreduce="nccl", kv_dtype=None, compute_dtype=None):
    """Every (GPU, TP degree) for serving `model` with every sequence at `context` cached
    tokens and each decode step within `tpot_s` seconds, cheapest first: a DataFrame with
    `GPU`, `N`, `batch` (the largest that fits and meets the objective,
    `tp_max_batch_within`), `step_ms` (`tp_step_s` at that batch), `usd_per_million`
    (N GPUs at their price over the tokens they serve fully busy, `cost.cost_per_million`),
    `memory_batch` (the largest memory alone allows) and `memory_usd_per_million` (what it
    would cost, whether or not it meets the objective); NaN where no batch does.

    `prices` maps each accelerator to compare to its price per GPU-hour (USD, or any
    currency), e.g. {"H200": cost.price_per_gpu_hour("AWS p5e.48xlarge (Capacity Block)")};
    `options`: the TP degrees to compare (each must shard the model, `check_tp_degree`);
    `achievable`: the steps on the achievable model (default) or, with False, on the
    ceiling (`tp_step_s(..., achievable=False)`: a lower bound on each step, so the
    batches are an upper bound); `allreduce`: "nccl" (default) or "custom", the engines'
    one-shot/two-shot all-reduce (`tp_step_s`); `kv_dtype`, `compute_dtype`: the cache's and the matmuls'
    formats (FP8 W8A8: dtype and compute_dtype "fp8_e4m3")."""
    import pandas as pd

    m = architectures.get(model)
    prices = check_gpu_prices(prices)
    degrees = _v.each("options", options, lambda name, n: check_tp_degree(m, n, name))
    c = _v.count("context", context, minimum=0, maximum=1 << 30)
    kw = dict(dtype=dtype, achievable=achievable, kv_dtype=kv_dtype,
              compute_dtype=compute_dtype,
              allreduce=_v.choice("allreduce", allreduce, ("nccl", "custom")))

    def usd(acc, price, n, batch):
        step = tp_step_s(m, acc, n, batch, c, **kw)
        return float(_cost.cost_per_million(n * price, batch / step))
    rows = []
    for acc, price in prices.items():
        for n in degrees:
            b = tp_max_batch_within(m, acc, n, c, tpot_s, **kw)
            fits = tp_max_batch(m, acc, n, max(c, 1), dtype, kv_dtype=kv_dtype)
            nan = float("nan")
            rows.append({
                "GPU": _hardware.get(acc).name, "N": n, "batch": b,
                "step_ms": 1e3 * tp_step_s(m, acc, n, b, c, **kw) if b else nan,
                "usd_per_million": usd(acc, price, n, b) if b else nan,
                "memory_batch": fits,
                "memory_usd_per_million": usd(acc, price, n, fits) if fits else nan})
    return pd.DataFrame(rows).sort_values("usd_per_million").reset_index(drop=True)
