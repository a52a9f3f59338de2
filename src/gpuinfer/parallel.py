"""Sharding a model across devices: the communication roofline, and tensor- and
pipeline-parallel decode. (The lab's layers on torch.distributed: `gpuinfer.distributed`.)

Chapter: *Beyond one GPU*; lab: *Tensor-parallel layers*. SI units: bytes, bytes/s, s.

The model of a tensor-parallel (TP) decode step on N devices (Megatron-LM's layout,
Shoeybi et al. 2019; Pope et al. 2023 call it 1D weight-stationary):
- every weight matrix is split N ways (attention by heads, the MLP by its hidden size),
  and so is the KV cache, by KV heads; a KV head cannot be split, so when N exceeds the
  number of KV heads each head is *replicated* on N / n_kv_heads devices;
- each device runs the single-device roofline on its shard: max(bytes / bandwidth,
  FLOPs / peak), with bytes and FLOPs divided by N;
- each layer needs two all-reduces of the activations, [batch, d_model] each: one after
  the attention block's output projection, one after the MLP's down projection;
- the all-reduces sit on the critical path (the next layer needs their result), so
  their time is *added*, not overlapped: step = sharded roofline + communication.

A ring all-reduce of S bytes on N devices (Patarasuk & Yuan 2009) moves 2(N-1)/N x S bytes
through each device's link in each direction, in 2(N-1) steps:
    time = 2(N-1)/N x S / bandwidth + 2(N-1) x step latency (+ a fixed cost per call).
These are ceilings: real libraries add kernel launches, synchronisation and protocol
overheads.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from . import dtypes as _dtypes
from . import hardware as _hardware
from . import llm as _llm

# --- collectives -------------------------------------------------------------------------


def _devices(n_devices, name="n_devices") -> int:
    if isinstance(n_devices, bool) or not isinstance(n_devices, numbers.Real) \
            or not float(n_devices).is_integer() or n_devices < 1:
        raise ValueError(f"{name} must be a whole number >= 1, got {n_devices!r}")
    return int(n_devices)


def _non_negative(name, value):
    arr = np.asarray(value, dtype=float)
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"{name} must be non-negative and finite, got {value!r}")
    return arr


def _positive(name, value):
    arr = np.asarray(value, dtype=float)
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{name} must be positive and finite, got {value!r}")
    return arr


def _scalar(x):
    return float(x) if np.ndim(x) == 0 else x


def allreduce_bytes_sent(n_bytes, n_devices):
    """Bytes each device sends (and receives) in a ring all-reduce of `n_bytes`:
    2(N-1)/N x n_bytes (reduce-scatter, then all-gather). 0 on one device."""
    n = _devices(n_devices)
    s = _non_negative("n_bytes", n_bytes)
    return _scalar(2.0 * (n - 1) / n * s)


def allreduce_time(n_bytes, n_devices, bandwidth, latency=0.0, *, base_latency=0.0):
    """Seconds for a ring all-reduce of `n_bytes` (bytes, scalar or array) on `n_devices`:
    2(N-1)/N x n_bytes / bandwidth + 2(N-1) x latency + base_latency; 0 for one device.

    `bandwidth`: bytes/s each device's link carries in ONE direction (NVLink 4: 450e9, not
    the datasheet's bidirectional 900e9); `latency`: seconds per ring step; `base_latency`:
    seconds per call, whatever N."""
    n = _devices(n_devices)
    s = _non_negative("n_bytes", n_bytes)
    bw = float(_positive("bandwidth", bandwidth))
    lat = float(_non_negative("latency", latency))
    base = float(_non_negative("base_latency", base_latency))
    if n == 1:
        return _scalar(np.zeros_like(s))
    return _scalar(2.0 * (n - 1) / n * s / bw + 2 * (n - 1) * lat + base)


def interconnect_allreduce_time(n_bytes, n_devices, interconnect):
    """`allreduce_time` with the bandwidth and NCCL latency model of a catalogue link
    (a name such as "NVLink 4", or a `hardware.Interconnect`)."""
    ic = _hardware.get_interconnect(interconnect)
    return allreduce_time(n_bytes, n_devices, ic.bandwidth_bytes_per_s, ic.step_latency_s,
                          base_latency=ic.base_latency_s)


def allreduce_crossover_bytes(n_devices, bandwidth, latency=0.0, *, base_latency=0.0):
    """Message size (bytes) at which a ring all-reduce's bandwidth term equals its latency
    terms: below it the all-reduce is latency-bound, above it bandwidth-bound (the
    communication roofline's ridge). 0 when there is no latency; inf on one device."""
    n = _devices(n_devices)
    bw = float(_positive("bandwidth", bandwidth))
    fixed = 2 * (n - 1) * float(_non_negative("latency", latency)) \
        + float(_non_negative("base_latency", base_latency))
    if n == 1:
        return math.inf
    return fixed * bw * n / (2.0 * (n - 1))


def allreduce_bus_bandwidth(n_bytes, n_devices, seconds):
    """nccl-tests' "bus bandwidth" of a measured all-reduce: n_bytes / seconds x 2(N-1)/N,
    bytes/s. It compares directly with a link's per-direction bandwidth."""
    n = _devices(n_devices)
    if n == 1:
        raise ValueError("bus bandwidth needs n_devices >= 2: one device moves nothing")
    return _scalar(allreduce_bytes_sent(n_bytes, n) / _positive("seconds", seconds))


def fit_allreduce(n_bytes, seconds, n_devices) -> dict:
    """Fit measured all-reduce times to time = latency + 2(N-1)/N x n_bytes / bandwidth,
    by least squares on the *relative* error (weights 1 / time), so that sizes spanning
    decades count alike. Returns {"bandwidth_bytes_per_s", "latency_s"}; the latency is
    the whole fixed cost of one call (use it as `base_latency`)."""
    n = _devices(n_devices)
    if n == 1:
        raise ValueError("fitting an all-reduce needs n_devices >= 2")
    s = _non_negative("n_bytes", n_bytes).ravel()
    t = _positive("seconds", seconds).ravel()
    if s.size != t.size or s.size < 2 or np.ptp(s) == 0:
        raise ValueError("fit_allreduce needs at least two different sizes, one time each; "
                         f"got {s.size} sizes and {t.size} times")
    slope, intercept = np.polyfit(allreduce_bytes_sent(s, n), t, 1, w=1.0 / t)
    if slope <= 0:
        raise ValueError("the measured times do not grow with the message size, so they "
                         "give no bandwidth; measure larger messages")
    return {"bandwidth_bytes_per_s": 1.0 / slope, "latency_s": max(0.0, float(intercept))}


# --- sharding a decoder ------------------------------------------------------------------


def check_tp_degree(model, n_devices) -> int:
    """Raise ValueError unless `n_devices` can shard `model` evenly: it must divide the
    query heads and the MLP's hidden size, and either divide the KV heads or be a multiple
    of them (then each KV head is replicated). Returns N as an int."""
    m = _llm.get(model)
    n = _devices(n_devices)
    if m.n_heads % n:
        raise ValueError(f"{n} devices do not divide {m.name}'s {m.n_heads} query heads")
    if m.d_ff % n:
        raise ValueError(f"{n} devices do not divide {m.name}'s MLP hidden size {m.d_ff}")
    if m.n_kv_heads % n and n % m.n_kv_heads:
        raise ValueError(f"{n} devices neither divide {m.name}'s {m.n_kv_heads} KV heads nor "
                         f"are a multiple of them")
    return n


def valid_tp_degrees(model, max_devices=None) -> list[int]:
    """Every N from 1 to `max_devices` (default: the number of query heads) that shards
    `model` evenly (see `check_tp_degree`)."""
    m = _llm.get(model)
    top = m.n_heads if max_devices is None else _devices(max_devices, "max_devices")
    out = []
    for n in range(1, top + 1):
        try:
            out.append(check_tp_degree(m, n))
        except ValueError:
            pass
    return out


def kv_heads_per_device(model, n_devices) -> int:
    """KV heads each device holds under TP: n_kv_heads / N, but never fewer than one
    (a head cannot be split, so beyond n_kv_heads devices it is replicated)."""
    m = _llm.get(model)
    n = check_tp_degree(m, n_devices)
    return max(1, m.n_kv_heads // n)


_KV_SHARDINGS = ("heads", "batch")


def tp_kv_cache_bytes_per_token(model, n_devices, dtype="fp16", kv_sharding="heads"):
    """KV-cache bytes one token of one sequence costs each device, averaged over devices.

    kv_sharding="heads": each device caches its KV heads for every sequence
    (2 x layers x kv_heads_per_device x head_dim x bytes): replication stops the saving
    once N exceeds the KV heads (the multi-query trap, Pope et al. 2023, sec. 3.3).
    kv_sharding="batch": each device caches whole sequences, batch / N of them, so the
    average per device is the full per-token cache / N, whatever the head count."""
    m = _llm.get(model)
    n = check_tp_degree(m, n_devices)
    if kv_sharding not in _KV_SHARDINGS:
        raise ValueError(f"kv_sharding must be one of {_KV_SHARDINGS}, got {kv_sharding!r}")
    if kv_sharding == "batch":
        return _llm.kv_cache_bytes_per_token(m, dtype) / n
    return 2.0 * m.n_layers * kv_heads_per_device(m, n) * m.head_dim \
        * _dtypes.bytes_per_element(dtype)


def tp_weight_bytes_per_device(model, n_devices, dtype="fp16") -> float:
    """Weight bytes on each device: all weights / N (embeddings split by vocabulary; the
    few norm weights, ~0.001% of the total, counted as split too)."""
    n = check_tp_degree(model, n_devices)
    return _llm.weight_bytes(model, dtype) / n


def tp_max_batch(model, accelerator, n_devices, context, dtype="fp16", *, kv_dtype=None,
                 reserve_bytes=0.0, kv_sharding="heads") -> int:
    """Largest batch whose weight shard plus KV cache (`context` tokens a sequence) fits in
    each of N devices' memory, less `reserve_bytes` a device. 0 if the shard alone does
    not fit. With N = 1 this is `llm.max_batch`. With kv_sharding="batch" the result is a
    multiple of N (each device holds batch / N whole sequences)."""
    m, acc = _llm.get(model), _hardware.get(accelerator)
    n = check_tp_degree(m, n_devices)
    dtype, kv, _ = _llm._formats(dtype, kv_dtype, None)
    c = float(_positive("context", context))
    if not c.is_integer():
        raise ValueError(f"context must be a whole number of tokens, got {context!r}")
    _non_negative("reserve_bytes", reserve_bytes)
    free = acc.memory_bytes - reserve_bytes - tp_weight_bytes_per_device(m, n, dtype)
    if free <= 0:
        return 0
    batch = int(free // (c * tp_kv_cache_bytes_per_token(m, n, kv, kv_sharding)))
    return batch - batch % n if kv_sharding == "batch" else batch


def min_tp_degree(model, accelerator, context, batch=1, dtype="fp16", *, kv_dtype=None,
                  reserve_bytes=0.0, kv_sharding="heads", max_devices=None) -> float:
    """Fewest devices (a valid TP degree) whose memory holds the weights plus `batch`
    sequences of `context` tokens; math.inf if no degree up to `max_devices` does."""
    b = _positive("batch", batch)
    for n in valid_tp_degrees(model, max_devices):
        if tp_max_batch(model, accelerator, n, context, dtype, kv_dtype=kv_dtype,
                        reserve_bytes=reserve_bytes, kv_sharding=kv_sharding) >= b:
            return n
    return math.inf


def _interconnect(interconnect, accelerator):
    if interconnect is None:
        return _hardware.interconnect_for(accelerator)
    return _hardware.get_interconnect(interconnect)


def tp_decode_breakdown(model, accelerator, n_devices, batch=1, context=0, dtype="fp16",
                        interconnect=None, *, kv_dtype=None, compute_dtype=None) -> dict:
    """The parts of one tensor-parallel decode step on N devices, in seconds and bytes:
    memory_s and compute_s (one device's shard: bytes or FLOPs / N), roofline_s (their
    max), comm_s (2 x layers ring all-reduces of [batch, d_model] activations), total_s
    (roofline_s + comm_s), and the bytes behind them.

    `interconnect`: a name ("NVLink 4", "PCIe Gen5 x16") or `hardware.Interconnect`;
    default: the accelerator's NVLink generation. The activations travel in the compute
    dtype (fp16 for fp16, int8 and int4 weights)."""
    m, acc = _llm.get(model), _hardware.get(accelerator)
    n = check_tp_degree(m, n_devices)
    dtype, kv, compute = _llm._formats(dtype, kv_dtype, compute_dtype)
    b = float(_positive("batch", batch))
    c = float(_non_negative("context", context))
    if not (b.is_integer() and c.is_integer()):
        raise ValueError(f"batch and context must be whole numbers, got {batch!r}, {context!r}")
    weight_bytes = tp_weight_bytes_per_device(m, n, dtype)
    kv_bytes = b * c * tp_kv_cache_bytes_per_token(m, n, kv)
    flops = _llm.decode_step_flops(m, b, c) / n
    memory_s = (weight_bytes + kv_bytes) / acc.bandwidth
    compute_s = flops / acc.peak_flops(compute)
    message_bytes = b * m.d_model * _dtypes.bytes_per_element(compute)
    n_allreduces = 2 * m.n_layers
    if n == 1:
        comm_s, ic_name = 0.0, None
    else:
        ic = _interconnect(interconnect, acc)
        comm_s = n_allreduces * interconnect_allreduce_time(message_bytes, n, ic)
        ic_name = ic.name
    roofline_s = max(memory_s, compute_s)
    return {"model": m.name, "accelerator": acc.name, "interconnect": ic_name,
            "n_devices": n, "batch": int(b), "context": int(c),
            "weight_bytes_per_device": weight_bytes, "kv_bytes_per_device": kv_bytes,
            "memory_s": memory_s, "compute_s": compute_s, "roofline_s": roofline_s,
            "n_allreduces": n_allreduces, "allreduce_bytes": message_bytes,
            "comm_s": comm_s, "total_s": roofline_s + comm_s}


def tp_decode_step_time(model, accelerator, n_devices, batch=1, context=0, dtype="fp16",
                        interconnect=None, *, kv_dtype=None, compute_dtype=None) -> float:
    """Seconds for one tensor-parallel decode step on N devices: the sharded roofline time
    (weights and KV heads split N ways) plus two ring all-reduces of [batch, d_model]
    activations per layer. See `tp_decode_breakdown` for the parts."""
    return tp_decode_breakdown(model, accelerator, n_devices, batch, context, dtype,
                               interconnect, kv_dtype=kv_dtype,
                               compute_dtype=compute_dtype)["total_s"]


def crossover_devices(model, accelerator, batch=1, context=0, dtype="fp16",
                      interconnect=None, *, max_devices=None) -> float:
    """The smallest valid TP degree N at which a decode step's communication time reaches
    its shrinking sharded roofline time (comm_s >= roofline_s); math.inf if none does up to
    `max_devices` (default: the query heads). Beyond it, adding devices buys little."""
    for n in valid_tp_degrees(model, max_devices):
        if n == 1:
            continue
        parts = tp_decode_breakdown(model, accelerator, n, batch, context, dtype,
                                    interconnect)
        if parts["comm_s"] >= parts["roofline_s"]:
            return n
    return math.inf


def pp_decode_breakdown(model, accelerator, n_stages, batch=1, context=0, dtype="fp16",
                        interconnect=None) -> dict:
    """Pipeline parallelism on `n_stages` devices, each holding n_layers / n_stages whole
    layers. One token still passes every stage in turn, so its latency is the whole
    model's roofline time plus (stages - 1) point-to-point sends of [batch, d_model]
    activations; with `n_stages` micro-batches of `batch` sequences in flight, every stage
    is busy and throughput rises n_stages-fold. No overlap of sends and compute assumed.

    Returns stage_s, send_s, latency_s (one token, one micro-batch) and tokens_per_s
    (all micro-batches, pipeline full), in seconds and tokens/s."""
    m, acc = _llm.get(model), _hardware.get(accelerator)
    s = _devices(n_stages, "n_stages")
    if m.n_layers % s:
        raise ValueError(f"{s} stages do not divide {m.name}'s {m.n_layers} layers")
    dtype, _, compute = _llm._formats(dtype, None, None)
    whole_s = _llm.decode_step_time(m, acc, batch, context, dtype)
    stage_s = whole_s / s
    send_bytes = float(batch) * m.d_model * _dtypes.bytes_per_element(compute)
    if s == 1:
        send_s = 0.0
    else:
        ic = _interconnect(interconnect, acc)
        send_s = ic.base_latency_s + ic.step_latency_s + send_bytes / ic.bandwidth_bytes_per_s
    latency_s = s * stage_s + (s - 1) * send_s
    return {"n_stages": s, "stage_s": stage_s, "send_s": send_s, "latency_s": latency_s,
            "tokens_per_s": float(batch) / (stage_s + send_s)}
