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
Each all-reduce is priced by NCCL's own cost model (`collectives.fastest_allreduce`:
its fastest ring or tree and protocol, latency included).

Three step times; tell them apart by what they charge the all-reduces and the shard:
- the *ceiling*, a lower bound on a step's time (an upper bound on throughput): the
  shard's per-operation roofline plus each all-reduce's bytes at NCCL's bus bandwidth
  for the link, no latency (`allreduce_floor_s`). It is `tp_decode_breakdown`'s
  `ceiling_s`, and the serving simulator's step with `achievable=False`
  (`engine_step.tp_step_s`) is the same number for a decode step;
- the *roofline model*, not a bound: the shard's roofline plus NCCL's cost model of its
  fastest ring or tree, latency included, no overheads. It is `tp_decode_breakdown`'s
  `total_s`, `tp_decode_step_s(..., achievable=False)` and `tp_decode_step_s(..., achievable=False)`: the
  chapter's worked numbers. NVLS and the engines' one-shot all-reduces can beat NCCL's
  ring, so it can overstate the communication; it leaves out kernel gaps and the step's
  fixed cost, so it understates the rest;
- the *achievable model*, for decisions: the shard on the calibrated achievable model
  (`gpuinfer.predict.achievable`: derated rates, kernel gaps, a fixed cost a step) plus NCCL's
  all-reduces as above. It is `tp_decode_step_s` (the default), and
  `engine_step.tp_step_s(..., achievable=True)` is the same number for a decode step.
Decisions rest on the achievable model, the ceiling beside: `tp_decode_step_s`,
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
    parameter, for the error (`tp`, `degrees[1]`)."""
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


def tp_message_bytes_per_value(compute_dtype, achievable=False) -> float:
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


def _shard_step(part, acc, new_tokens, context, dtype, kv_dtype, compute_dtype, achievable):
    """(ops table, seconds) of one device's step, sequence i bringing `new_tokens[i]`
    tokens on `context[i]` cached ones: the roofline's (`achievable` False) or the
    achievable model's rows plus its step overheads."""
    eff = _achievable.as_efficiency(achievable)
    if eff.is_ceiling:
        ops = _llm.forward_step_breakdown(part, acc, new_tokens, context, dtype,
                                          kv_dtype=kv_dtype, compute_dtype=compute_dtype)
        return ops, float(ops["seconds"].sum())
    ops = _achievable.step_breakdown(part, acc, new_tokens, context, dtype,
                                     kv_dtype=kv_dtype, compute_dtype=compute_dtype,
                                     achievable=eff)
    return ops, float(_achievable.overheads(ops["seconds"].sum(), part.n_layers, eff))


def tp_decode_breakdown(model, accelerator, n_devices, batch=1, context=0, dtype="fp16",
                        interconnect=None, *, network=None, kv_dtype=None,
                        compute_dtype=None, achievable=False, allreduce="nccl") -> dict:
    """The parts of one tensor-parallel decode step on N devices. Returns a dict:
    `ops` (one device's shard as `llm.decode_step_breakdown`'s table; with `achievable`,
    `achievable.step_breakdown`'s, `ceiling_s` beside `seconds`), `shard_s` (the step's
    time on one device: the rows' sum, plus the achievable model's step overheads),
    `n_allreduces` (2 x layers + 1), `allreduce_bytes` ([batch, d_model] at
    `tp_message_bytes_per_value`: the compute format's on the ceiling, at least 16 bits
    on the achievable model), `allreduce_s` (one, NCCL's fastest algorithm and protocol, latency
    included), `algorithm`, `protocol`, `comm_s` (all of them), `total_s` (shard_s +
    comm_s: a model, not a bound), `ceiling_s` (the lower bound on the step's time: the
    shard's roofline plus each all-reduce at `allreduce_floor_s`), the bytes behind them
    and the route (`interconnect`, `network`, `nodes`).

    `achievable`: False (default) times the shard on the roofline; True on the fitted
    achievable model (`achievable.FITTED`: derated rates, kernel gaps, a fixed cost a
    step), or pass an `achievable.Efficiency`. The all-reduces are priced the same way
    in both (NCCL's cost model). `interconnect`: a name ("NVLink 4", "PCIe Gen5 x16")
    or `hardware.Interconnect`; default: the accelerator's NVLink generation. Past the
    link's domain the ring takes `network` (default `DEFAULT_NETWORK`). `allreduce`:
    "nccl" (default) prices each all-reduce with NCCL's cost model; "custom" with the
    engines' one-shot/two-shot kernel where it runs (`collectives.engine_allreduce`)."""
    m, acc = architectures.get(model), _hardware.get(accelerator)
    n = check_tp_degree(m, n_devices)
    b = _v.count("batch", batch, maximum=1 << 30)
    c = _v.count("context", context, minimum=0, maximum=1 << 30)
    part = shard(m, n)
    ops, shard_s = _shard_step(part, acc, np.ones(b, dtype=int), np.full(b, c), dtype,
                               kv_dtype, compute_dtype, achievable)
    return _with_allreduces(m, acc, n, b, b, c, ops, shard_s, dtype, kv_dtype, compute_dtype,
                            interconnect, network, achievable, allreduce)


def _with_allreduces(m, acc, n, b, tokens, c, ops, shard_s, dtype, kv_dtype, compute_dtype,
                     interconnect, network, achievable, allreduce) -> dict:
    """`tp_decode_breakdown`'s dict for a shard's step of `tokens` tokens: its 2L + 1
    all-reduces of [tokens, d_model] added to `shard_s`."""
    roofline_s = float(ops["ceiling_s" if "ceiling_s" in ops else "seconds"].sum())
    _, kv, compute = _dtypes.formats(dtype, kv_dtype, compute_dtype)
    message = tokens * m.d_model * tp_message_bytes_per_value(compute, achievable)
    n_allreduces = 2 * m.n_layers + 1
    route = {"interconnect": None, "network": None, "nodes": 1}
    one, protocol, algorithm, floor = 0.0, None, None, 0.0
    if n > 1:
        ic = link_for(interconnect, acc)
        best = engine_allreduce(float(message), n, ic, network=network, allreduce=allreduce)
        one, algorithm, protocol = best["seconds"], best["algorithm"], best["protocol"]
        route = {k: best[k] for k in ("interconnect", "network", "nodes")}
        # The bound all-reduces the smallest message: the compute format's.
        floor = allreduce_floor_s(tokens * m.d_model * tp_message_bytes_per_value(compute), n,
                                  ic, network=network)
    comm_s = n_allreduces * one
    part = shard(m, n)
    return {"model": m.name, "accelerator": acc.name, "n_devices": n, "batch": b,
            "context": c, "ops": ops,
            "weight_bytes_per_device": step_model.weight_bytes(part, dtype),
            "kv_bytes_per_device": b * c * step_model.kv_cache_bytes_per_token(part, kv),
            "shard_s": shard_s, "n_allreduces": n_allreduces, "allreduce_bytes": message,
            "allreduce_s": one, "algorithm": algorithm, "protocol": protocol,
            "comm_s": comm_s, "total_s": shard_s + comm_s,
            "ceiling_s": roofline_s + n_allreduces * floor, **route}


def tp_prefill_breakdown(model, accelerator, n_devices, prompt_tokens, dtype="fp16",
                         interconnect=None, *, network=None, kv_dtype=None,
                         compute_dtype=None, achievable=False, allreduce="nccl") -> dict:
    """One prompt of `prompt_tokens` tokens prefilled in one step by a tensor-parallel group
    of N devices: the time to first token's compute part (no queueing). The same dict as
    `tp_decode_breakdown` (batch 1, context 0): the shard's forward step over the prompt
    (`llm.forward_step_breakdown`, one LM-head row; with `achievable`, the achievable
    model's), plus 2 x layers + 1 all-reduces of [prompt_tokens, d_model]: messages of
    megabytes, priced by NCCL's model (bandwidth-bound: LL128 or Simple) or, with
    `allreduce="custom"`, the engines' two-shot kernel."""
    m, acc = architectures.get(model), _hardware.get(accelerator)
    n = check_tp_degree(m, n_devices)
    p = _v.count("prompt_tokens", prompt_tokens, maximum=1 << 24)
    part = shard(m, n)
    ops, shard_s = _shard_step(part, acc, [p], [0], dtype, kv_dtype, compute_dtype, achievable)
    return _with_allreduces(m, acc, n, 1, p, 0, ops, shard_s, dtype, kv_dtype, compute_dtype,
                            interconnect, network, achievable, allreduce)


def tp_tradeoff(model, accelerator, batch=1, context=0, dtype="fp16", interconnect=None, *,
                degrees=None, network=None, kv_dtype=None):
    """Chapter *Beyond one GPU*: what each TP degree buys, one row per degree N (that
    fits `batch` sequences of `context` tokens): ms per token (a sequence's latency),
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
    base_t = tp_decode_step_s(m, accelerator, base, batch, context, dtype=dtype,
                              interconnect=interconnect, network=network, kv_dtype=kv_dtype,
                              achievable=False)
    rows = []
    for n in fits:
        parts = tp_decode_breakdown(m, accelerator, n, batch, context, dtype, interconnect,
                                    network=network, kv_dtype=kv_dtype)
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
    """The smallest valid TP degree N at which a decode step's communication time reaches
    its shrinking shard time (comm_s >= shard_s); math.inf if none does up to
    `max_devices` (default: the query heads). Beyond it, adding devices buys little."""
    for n in valid_tp_degrees(model, max_devices):
        if n == 1:
            continue
        parts = tp_decode_breakdown(model, accelerator, n, batch, context, dtype,
                                    interconnect, network=network)
        if parts["comm_s"] >= parts["shard_s"]:
            return n
    return math.inf


def pp_decode_breakdown(model, accelerator, n_stages, batch=1, context=0, dtype="fp16",
                        interconnect=None, *, network=None, achievable=False) -> dict:
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

def tp_decode_step_s(model, accelerator, n_devices, batch=1, context=0, *, dtype="fp16",
                     kv_dtype=None, interconnect=None, network=None, achievable=True,
                     allreduce="nccl", compute_dtype=None) -> float:
    """Seconds of one tensor-parallel decode step on `n_devices` (every sequence at
    `context` cached tokens), for decisions: by default on the achievable model, the
    shard's operations at `achievable.FITTED`'s derated rates, plus the 2 x layers + 1
    all-reduces of NCCL's cost model (latency included), plus the achievable model's
    kernel gaps and fixed cost a step. `achievable=False`: the roofline model, the same
    number as `tp_decode_step_s(..., achievable=False)` (the roofline plus NCCL's all-reduces with their
    latencies; not a bound); an `achievable.Efficiency` times the shard on it. Equal to
    `tp_decode_breakdown(..., achievable=achievable)["total_s"]`, cached (a search asks
    for the same step many times).

    How it relates to the serving simulator's TP step, `engine_step.tp_step_s`: on the
    achievable model the two are the same step (the simulator prices its all-reduces
    with NCCL's latency too). With `achievable=False` they differ: the simulator's
    ceiling charges each all-reduce its bytes at NCCL's bus bandwidth and no latency (a
    lower bound, `allreduce_floor_s`), while this keeps NCCL's latencies, so it is the
    longer of the two at decode sizes; that bound is `tp_decode_breakdown`'s `ceiling_s`.
    `allreduce="custom"` prices the all-reduces with the engines' one-shot/two-shot kernel
    where it runs (`collectives.engine_allreduce`) instead of NCCL's. `compute_dtype`:
    the matmuls' format (default: `dtypes.formats`' for `dtype`, weight-only for fp8
    weights; "fp8_e4m3" for FP8 W8A8)."""
    m = architectures.get(model)
    n = check_tp_degree(m, n_devices)
    b = _v.count("batch", batch, maximum=1 << 30)
    c = _v.count("context", context, minimum=0, maximum=1 << 30)
    eff = _achievable.as_efficiency(achievable)
    ar = _v.choice("allreduce", allreduce, ("nccl", "custom"))
    key = (m, n, b, c, dtype, kv_dtype, interconnect, network, eff, ar, compute_dtype)
    if isinstance(accelerator, str) and _hashable(key):
        return _tp_step_cached(_hardware.get(accelerator).name, *key)
    return _tp_step(accelerator, *key)


def _hashable(key) -> bool:
    try:
        hash(key)
    except TypeError:
        return False
    return True


def _tp_step(acc, m, n, b, c, dtype, kv_dtype, interconnect, network, eff, ar,
             compute_dtype) -> float:
    return tp_decode_breakdown(m, acc, n, b, c, dtype, interconnect, network=network,
                               kv_dtype=kv_dtype, compute_dtype=compute_dtype, achievable=eff,
                               allreduce=ar)["total_s"]


_tp_step_cached = functools.lru_cache(maxsize=65536)(_tp_step)


def tp_max_batch_within(model, accelerator, n_devices, context, tpot_s, *, dtype="fp16",
                        kv_dtype=None, interconnect=None, network=None,
                        achievable=True, allreduce="nccl", compute_dtype=None) -> int:
    """The largest batch whose tensor-parallel decode step on `n_devices` (every sequence
    at `context` cached tokens; `tp_decode_step_s`, achievable by default, the roofline
    model with `achievable=False`) takes at most `tpot_s` seconds and fits in each
    device's memory (`tp_max_batch`, less `llm.DEFAULT_RESERVE_BYTES`); 0 if none does.
    The step grows with the batch, so `search.largest_meeting` bisects between 1 and
    what memory allows."""
    m = architectures.get(model)
    n = check_tp_degree(m, n_devices)
    c = _v.count("context", context, minimum=0, maximum=1 << 30)
    limit = _v.positive("tpot_s", tpot_s)
    top = tp_max_batch(m, accelerator, n, max(c, 1), dtype, kv_dtype=kv_dtype)
    return _search.largest_meeting(
        lambda b: tp_decode_step_s(m, accelerator, n, b, c, dtype=dtype, kv_dtype=kv_dtype,
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


def tp_options(model, prices, context, tpot_s, *, degrees=(1, 2, 4, 8), dtype="fp16",
               achievable=True, allreduce="nccl", kv_dtype=None, compute_dtype=None):
    """Every (GPU, TP degree) for serving `model` with every sequence at `context` cached
    tokens and each decode step within `tpot_s` seconds, cheapest first: a DataFrame with
    `GPU`, `N`, `batch` (the largest that fits and meets the objective,
    `tp_max_batch_within`), `step_ms` (`tp_decode_step_s` at that batch), `usd_per_million`
    (N GPUs at their price over the tokens they serve fully busy, `cost.cost_per_million`),
    `memory_batch` (the largest memory alone allows) and `memory_usd_per_million` (what it
    would cost, whether or not it meets the objective); NaN where no batch does.

    `prices` maps each accelerator to compare to its price per GPU-hour (USD, or any
    currency), e.g. {"H200": cost.price_per_gpu_hour("AWS p5e.48xlarge (Capacity Block)")};
    `degrees`: the TP degrees to try (each must shard the model, `check_tp_degree`);
    `achievable`: the steps on the achievable model (default) or, with False, on the
    roofline model (`tp_decode_step_s(..., achievable=False)`: the roofline and NCCL's all-reduces, no
    overheads; optimistic beside an engine, though not a strict bound); `allreduce`:
    "nccl" (default) or "custom", the engines' one-shot/two-shot all-reduce
    (`tp_decode_step_s`); `kv_dtype`, `compute_dtype`: the cache's and the matmuls'
    formats (FP8 W8A8: dtype and compute_dtype "fp8_e4m3")."""
    import pandas as pd

    m = architectures.get(model)
    prices = check_gpu_prices(prices)
    degrees = _v.each("degrees", degrees, lambda name, n: check_tp_degree(m, n, name))
    c = _v.count("context", context, minimum=0, maximum=1 << 30)
    kw = dict(dtype=dtype, achievable=achievable, kv_dtype=kv_dtype,
              compute_dtype=compute_dtype,
              allreduce=_v.choice("allreduce", allreduce, ("nccl", "custom")))

    def usd(acc, price, n, batch):
        step = tp_decode_step_s(m, acc, n, batch, c, **kw)
        return float(_cost.cost_per_million(n * price, batch / step))
    rows = []
    for acc, price in prices.items():
        for n in degrees:
            b = tp_max_batch_within(m, acc, n, c, tpot_s, **kw)
            fits = tp_max_batch(m, acc, n, max(c, 1), dtype, kv_dtype=kv_dtype)
            nan = float("nan")
            rows.append({
                "GPU": _hardware.get(acc).name, "N": n, "batch": b,
                "step_ms": 1e3 * tp_decode_step_s(m, acc, n, b, c, **kw) if b else nan,
                "usd_per_million": usd(acc, price, n, b) if b else nan,
                "memory_batch": fits,
                "memory_usd_per_million": usd(acc, price, n, fits) if fits else nan})
    return pd.DataFrame(rows).sort_values("usd_per_million").reset_index(drop=True)
