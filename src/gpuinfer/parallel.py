"""Sharding a model across devices: the communication roofline, tensor- and
pipeline-parallel decode, and tensor-parallel layers on torch.distributed.

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


# --- torch.distributed: tensor-parallel layers and their timing ----------------------------
# The lab's runner. Workers start once (torch.multiprocessing spawn, or torchrun) and do
# every measurement in that one start: process start-up costs seconds.


def column_shard(weight, rank, world_size):
    """Rank `rank`'s column block of `weight` [d_in, d_out] -> [d_in, d_out / N]:
    a column-parallel layer, whose output each rank holds a slice of."""
    d_out = weight.shape[-1]
    if d_out % world_size:
        raise ValueError(f"{world_size} ranks do not divide the {d_out} output columns")
    w = d_out // world_size
    return weight[..., rank * w:(rank + 1) * w].contiguous()


def row_shard(weight, rank, world_size):
    """Rank `rank`'s row block of `weight` [d_in, d_out] -> [d_in / N, d_out]:
    a row-parallel layer, whose outputs are partial sums to be all-reduced."""
    d_in = weight.shape[0]
    if d_in % world_size:
        raise ValueError(f"{world_size} ranks do not divide the {d_in} input rows")
    w = d_in // world_size
    return weight[rank * w:(rank + 1) * w].contiguous()


def mlp_reference(x, w_in, w_out):
    """The unsharded layer pair the lab shards: gelu(x @ w_in) @ w_out.
    x: [batch, d_model], w_in: [d_model, d_ff], w_out: [d_ff, d_model]."""
    import torch.nn.functional as F

    return F.gelu(x @ w_in) @ w_out


def tp_mlp_partial(x, w_in_shard, w_out_shard, out=None):
    """One rank's share of the tensor-parallel MLP, before the all-reduce: the column-
    parallel layer (and its elementwise gelu) needs no communication; the row-parallel
    layer leaves a partial sum [batch, d_model] that the ranks add up."""
    import torch
    import torch.nn.functional as F

    h = F.gelu(x @ w_in_shard)  # [batch, d_ff / N]
    return torch.matmul(h, w_out_shard, out=out)  # [batch, d_model], partial


def tp_mlp_forward(x, w_in_shard, w_out_shard, group=None):
    """The tensor-parallel MLP on one rank: partial product, then one all-reduce (sum),
    after which every rank holds the full output [batch, d_model]."""
    import torch.distributed as dist

    y = tp_mlp_partial(x, w_in_shard, w_out_shard)
    dist.all_reduce(y, group=group)
    return y


def _lockstep_time(call, buf, leader, device, min_run_time, chunk=32):
    """Time a collective `call()` with `bench.time_fn` on the leader rank while the other
    ranks keep joining it.

    The timer decides how many calls to make as it goes, so the ranks cannot agree on a
    count in advance. Instead the followers call in chunks of `chunk` and, after each
    chunk, read a stop flag carried in the last element of the all-reduced `buf` (zero
    until the leader raises it). After timing, the leader raises the flag and pads its
    calls to the end of the followers' chunk. Nobody reads the flag between calls, so no
    host synchronisation is added to the timed calls. Returns the leader's Timing (None on
    the others)."""
    from . import bench

    if not leader:
        while True:
            for _ in range(chunk):
                call()
            if float(buf[-1]) > 0.5:
                return None
    calls = [0]

    def counted():
        call()
        calls[0] += 1

    timing = bench.time_fn(counted, device=device, min_run_time=min_run_time)
    buf[-1] = 1.0  # the sum stays >= 1 from here on: zeros elsewhere stay zero
    for _ in range(chunk - calls[0] % chunk):
        call()
    bench.synchronize(device)
    return timing


def _timed_allreduce(n_elems, group, leader, device, tdtype, min_run_time):
    import torch
    import torch.distributed as dist

    buf = torch.zeros(n_elems + 1, device=device, dtype=tdtype)  # payload + stop flag

    def call():
        dist.all_reduce(buf, group=group)

    return _lockstep_time(call, buf, leader, device, min_run_time)


def _timed_tp_step(x, w_in, w_out, group, leader, device, min_run_time):
    import torch
    import torch.distributed as dist

    batch, d_model = x.shape[0], w_out.shape[1]
    buf = torch.zeros(batch * d_model + 1, device=device, dtype=x.dtype)  # + stop flag
    out = buf[:-1].view(batch, d_model)  # the partial sum is written in place

    def call():
        tp_mlp_partial(x, w_in, w_out, out=out)
        dist.all_reduce(buf, group=group)

    return _lockstep_time(call, buf, leader, device, min_run_time)


def _worker(rank, world_size, port, config, results):
    """One rank of `run_tp_lab` (or of `torchrun -m gpuinfer.parallel`): join the group, check the sharded layer against the
    unsharded one, then time the all-reduces and the sharded step for every group size."""
    import datetime
    import os

    import torch
    import torch.distributed as dist

    from . import bench

    backend = config["backend"]
    if port is not None:  # spawned by run_tp_lab; under torchrun the launcher sets these
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    if backend == "nccl":
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        torch.set_num_threads(config["threads_per_rank"])
        device = torch.device("cpu")
    dist.init_process_group(backend, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=config["timeout_s"]))
    try:
        tdtype = _dtypes.torch_dtype(config["dtype"])
        bpe = _dtypes.bytes_per_element(config["dtype"])
        rows = []
        sizes = [n for n in config["group_sizes"] if n > 1]
        groups = {n: dist.new_group(list(range(n))) for n in sizes}  # every rank creates all
        d_model, d_ff, batch = config["d_model"], config["d_ff"], config["batch"]
        gen = torch.Generator().manual_seed(config["seed"])  # the same weights on every rank
        x = torch.randn(batch, d_model, generator=gen)
        w_in = torch.randn(d_model, d_ff, generator=gen) * d_model ** -0.5
        w_out = torch.randn(d_ff, d_model, generator=gen) * d_ff ** -0.5
        ref = mlp_reference(x, w_in, w_out)  # [batch, d_model], unsharded, fp32
        x_dev = x.to(device, tdtype)
        min_t = config["min_run_time"]

        for n in [1, *sizes]:
            member = rank < n
            group = groups.get(n)
            if member:
                w_in_s = column_shard(w_in, rank, n).to(device, tdtype)
                w_out_s = row_shard(w_out, rank, n).to(device, tdtype)
                # Correctness: the sharded layer against the unsharded one.
                if n > 1:
                    y = tp_mlp_forward(x_dev, w_in_s, w_out_s, group=group)
                else:
                    y = tp_mlp_partial(x_dev, w_in_s, w_out_s)
                err = float((y.float().cpu() - ref).abs().max())
                # Compute only: the rank's shard without the all-reduce.
                compute = bench.time_fn(lambda: tp_mlp_partial(x_dev, w_in_s, w_out_s),
                                        device=device, min_run_time=min_t)
                step = _timed_tp_step(x_dev, w_in_s, w_out_s, group, rank == 0, device,
                                      min_t) if n > 1 else compute
                if rank == 0:
                    rows.append({"kind": "step", "n_devices": n, "batch": batch,
                                 "d_model": d_model, "d_ff": d_ff,
                                 "message_bytes": batch * d_model * bpe,
                                 "max_abs_error": err, "compute_s": compute.median_s,
                                 "seconds": step.median_s})
                for n_bytes in (config["message_bytes"] if n > 1 else []):
                    n_elems = max(1, int(n_bytes // bpe))
                    t = _timed_allreduce(n_elems, group, rank == 0, device, tdtype, min_t)
                    if rank == 0:
                        rows.append({"kind": "allreduce", "n_devices": n,
                                     "message_bytes": n_elems * bpe, "seconds": t.median_s})
            dist.barrier()  # ranks outside this group wait here
        if rank == 0:
            results.put(rows)
    finally:
        dist.destroy_process_group()


def default_backend() -> str:
    """"nccl" when at least two GPUs are visible (and torch has NCCL), else "gloo"."""
    import torch
    import torch.distributed as dist

    if torch.cuda.is_available() and torch.cuda.device_count() >= 2 and dist.is_nccl_available():
        return "nccl"
    return "gloo"


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _lab_config(world_size, backend, d_model, d_ff, batch, message_bytes, dtype,
                min_run_time, seed, timeout_s, gpus_visible) -> dict:
    """Check the lab's settings and fill in the defaults for a CPU (gloo) or GPU (nccl) run."""
    import os

    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'gloo' or 'nccl', got {backend!r}")
    gpu = backend == "nccl"
    world_size = _devices(world_size, "world_size")
    if world_size < 2:
        raise ValueError("world_size must be at least 2 to measure communication")
    if gpu and gpus_visible < 2:
        raise ValueError("the nccl backend needs at least two visible GPUs")
    dtype = _dtypes.canonical(dtype or ("fp16" if gpu else "fp32"))
    d_model = d_model or (8192 if gpu else 512)
    d_ff = d_ff or 4 * d_model
    batch = batch or (16 if gpu else 8)
    if message_bytes is None:
        top = 256 * 2**20 if gpu else 8 * 2**20
        message_bytes = [int(s) for s in np.geomspace(4096, top, 9 if gpu else 7)]
    for name, v in (("d_model", d_model), ("d_ff", d_ff), ("batch", batch)):
        _devices(v, name)
    for v in message_bytes:
        _positive("message_bytes", v)
    group_sizes = [n for n in (2 ** k for k in range(world_size.bit_length()))
                   if n <= world_size]
    for n in group_sizes:
        if d_ff % n:
            raise ValueError(f"{n} ranks do not divide d_ff = {d_ff}")
    return {"backend": backend, "dtype": dtype, "d_model": int(d_model), "d_ff": int(d_ff),
            "batch": int(batch), "message_bytes": [int(v) for v in message_bytes],
            "group_sizes": group_sizes, "seed": int(seed), "timeout_s": timeout_s,
            "min_run_time": min_run_time or (0.1 if gpu else 0.05),
            "threads_per_rank": max(1, (os.cpu_count() or 2) // world_size)}


def _frame(rows, config):
    import pandas as pd

    df = pd.DataFrame(rows)
    df.insert(0, "backend", config["backend"])
    df.insert(1, "dtype", config["dtype"])
    return df


def run_tp_lab(world_size=None, *, backend=None, d_model=None, d_ff=None, batch=None,
               message_bytes=None, dtype=None, min_run_time=None, seed=0, timeout_s=120):
    """Start `world_size` ranks once (torch.multiprocessing spawn) and, in that one start,
    for each group size N = 1, 2, 4, ... up to world_size:
    shard an MLP (column- then row-parallel), check its output against the unsharded
    layer, time the shard's compute alone and the whole step (compute + all-reduce), and
    time all-reduces of each size in `message_bytes` (bytes). Returns a pandas DataFrame,
    one row a measurement (`kind` "step" or "allreduce"), seconds as medians of rank 0's
    timings.

    Defaults: gloo on CPU processes (2 ranks, fp32, small sizes) unless several GPUs are
    visible, then NCCL, one rank a GPU, fp16, larger sizes. The same measurement runs
    under torchrun: `torchrun --standalone --nproc-per-node 8 -m gpuinfer.parallel`."""
    import torch
    import torch.multiprocessing as mp

    backend = backend or default_backend()
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if world_size is None:
        world_size = gpus if backend == "nccl" else 2
    if backend == "nccl" and _devices(world_size, "world_size") > gpus:
        raise ValueError(f"world_size {world_size} exceeds the {gpus} visible GPUs")
    config = _lab_config(world_size, backend, d_model, d_ff, batch, message_bytes, dtype,
                         min_run_time, seed, timeout_s, gpus)
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    mp.spawn(_worker, args=(int(world_size), _free_port(), config, results),
             nprocs=int(world_size), join=True)
    return _frame(results.get(), config)


class _Report:
    """Rank 0's results under torchrun: printed, and written to CSV if asked."""

    def __init__(self, config, csv_path):
        self.config, self.csv_path = config, csv_path

    def put(self, rows):
        df = _frame(rows, self.config)
        print(df.to_string())
        if self.csv_path:
            df.to_csv(self.csv_path, index=False)


def main(argv=None) -> int:
    """`torchrun --standalone --nproc-per-node N -m gpuinfer.parallel [options]`: the lab's
    measurement, one process a rank, started by torchrun instead of from a notebook."""
    import argparse
    import os

    import torch

    parser = argparse.ArgumentParser(prog="python -m gpuinfer.parallel", description=main.__doc__)
    parser.add_argument("--backend", choices=("gloo", "nccl"), default=None)
    parser.add_argument("--d-model", type=int, default=None)
    parser.add_argument("--d-ff", type=int, default=None)
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--message-bytes", type=int, nargs="+", default=None)
    parser.add_argument("--min-run-time", type=float, default=None)
    parser.add_argument("--csv", default=None, help="write rank 0's rows to this CSV file")
    args = parser.parse_args(argv)
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        parser.error("start it with torchrun, which sets RANK and WORLD_SIZE: "
                     "torchrun --standalone --nproc-per-node 2 -m gpuinfer.parallel")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    config = _lab_config(world, args.backend or default_backend(), args.d_model, args.d_ff,
                         args.batch, args.message_bytes, args.dtype, args.min_run_time, 0,
                         120, gpus)
    _worker(rank, world, None, config, _Report(config, args.csv) if rank == 0 else None)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
