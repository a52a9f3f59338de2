"""Sharding a model across devices: the communication roofline, and tensor- and
pipeline-parallel decode. (The lab's layers on torch.distributed: `gpuinfer.distributed`.)

Chapter: *Beyond one GPU*; lab: *Tensor-parallel layers*. SI units: bytes, bytes/s, s.

A tensor-parallel (TP) decode step on N devices (Megatron-LM's layout, Shoeybi et al.
2019; Pope et al. 2023 call it 1D weight-stationary):
- each device holds a *shard* of the model (`shard`): a 1/N slice of the query heads, of
  the MLP's hidden size and of the vocabulary; the KV heads are split too, but a KV head
  cannot be split, so when N exceeds the number of KV heads each head (and its K/V
  projections) is *replicated* on N / n_kv_heads devices;
- each device runs the per-operation roofline of `gpuinfer.llm` on its shard (the shard's
  matmuls, its heads' attention, its slice of the LM head);
- each layer needs two all-reduces of the activations, [batch, d_model] each (after the
  attention block's output projection and after the MLP's down projection), and the
  vocabulary-parallel embedding one more per step: 2 x layers + 1;
- the all-reduces sit on the critical path (the next layer needs their result), so
  their time is *added*: step = the shard's step + communication.

An all-reduce of S bytes on N devices costs, in NCCL's own model (src/graph/tuning.cc,
via `gpuinfer.hardware`), for each protocol p (LL, LL128, Simple) of its ring algorithm
    base_p + 2(N-1) x step_p + 2(N-1)/N x S / (bandwidth x fraction_p)
and NCCL picks the fastest: LL's low latency comes with half the bandwidth (and at most
its llMaxBw), Simple has the full bandwidth at a higher latency per step
(`allreduce_protocols`). A ring that spans more GPUs than a link's domain (8 on an HGX
board's NVLink) crosses the network for 2(n-1) of its steps, n nodes, at up to the node's
network bandwidth (NCCL runs a channel through each NIC); across nodes NCCL's tree
competes too. NVLink SHARP (NVLS, in-switch
reduction) and custom one-shot all-reduces (vLLM, TensorRT-LLM) are not modelled: on
NVSwitch systems they beat the ring for large and small messages, so this model's
communication time is an upper bound there.

Two numbers, as everywhere in the course. The *ceiling* is a lower bound on a step's
time: the shard's per-operation roofline plus each all-reduce at NCCL's bus bandwidth
for the link and no latency (`allreduce_floor_s`; `llm_serving`'s simulator prices TP
steps the same way, `llm_serving.tp_step_s`), returned as `ceiling_s`. The
decode functions' `total_s` (and `tp_decode_step_time`) is a *model*, not a bound: the
shard on the roofline (or, with `achievable=True`, on the calibrated achievable model,
`gpuinfer.achievable`) plus NCCL's own cost model of its fastest ring or tree, latency
included. Real libraries add kernel launches and synchronisation; NVLS and one-shot
all-reduces can beat the ring.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from . import achievable as _achievable
from . import dtypes as _dtypes
from . import hardware as _hardware
from . import llm as _llm
from . import validate as _v
from .hardware import links as _links

#: The network a ring takes past an NVLink domain, unless told (HGX H100/H200 nodes:
#: eight ConnectX-7 400 Gb/s ports, one per GPU).
DEFAULT_NETWORK = "InfiniBand NDR x8"


def check_devices(n_devices, name="n_devices") -> int:
    """`n_devices` as a count of devices, 1 to 2**20; ValueError naming `name` otherwise."""
    return _v.count(name, n_devices, maximum=1 << 20,
                    why_maximum="no machine has more devices than that")


# --- collectives -------------------------------------------------------------------------

def allreduce_bytes_sent(n_bytes, n_devices):
    """Bytes each device sends (and receives) in a ring all-reduce of `n_bytes`:
    2(N-1)/N x n_bytes (reduce-scatter, then all-gather). 0 on one device."""
    n = check_devices(n_devices)
    s = _v.non_negative("n_bytes", n_bytes, array=True)
    return _v.scalar_or_array(2.0 * (n - 1) / n * s)


def allreduce_time(n_bytes, n_devices, bandwidth, latency=0.0, *, base_latency=0.0):
    """Seconds for a ring all-reduce of `n_bytes` (bytes, scalar or array) on `n_devices`:
    2(N-1)/N x n_bytes / bandwidth + 2(N-1) x latency + base_latency; 0 for one device.

    `bandwidth`: bytes/s each device's link carries in ONE direction (NVLink 4: 450e9, not
    the datasheet's bidirectional 900e9); `latency`: seconds per ring step; `base_latency`:
    seconds per call, whatever N."""
    n = check_devices(n_devices)
    s = _v.non_negative("n_bytes", n_bytes, array=True)
    bw = _v.positive("bandwidth", bandwidth)
    lat = _v.non_negative("latency", latency)
    base = _v.non_negative("base_latency", base_latency)
    if n == 1:
        return _v.scalar_or_array(np.zeros_like(s))
    return _v.scalar_or_array(2.0 * (n - 1) / n * s / bw + 2 * (n - 1) * lat + base)


def allreduce_floor_s(n_bytes, n_devices, interconnect, *, network=None) -> float:
    """Seconds no all-reduce of `n_bytes` on `n_devices` can beat (the ceiling's price,
    a lower bound on time): every GPU sends and receives the message once at NCCL's bus
    bandwidth for the link (`Interconnect.nccl_bus_bandwidth_bytes_per_s`, in-switch
    reduction's best case), no latency; across nodes, at least each node's 2(k-1)/k x
    n_bytes over its network bandwidth (k nodes), whichever is longer. 0 on one device.
    `parallel`'s decode models price NCCL's ring or tree with its latency instead
    (`interconnect_allreduce_time`): more, always."""
    n = check_devices(n_devices)
    s = _v.non_negative("n_bytes", n_bytes)
    if n == 1:
        return 0.0
    ic, net, nodes = ring_route(n, interconnect, network)
    t = s / ic.nccl_bus_bandwidth_bytes_per_s
    if net is not None:
        node_bw = net.bandwidth_bytes_per_s * (1 if net.scope == "per node" else ic.domain_gpus)
        t = max(t, 2.0 * (nodes - 1) / nodes * s / node_bw)
    return float(t)


def ring_route(n, interconnect, network=None):
    """How a ring of `n` GPUs is wired: (link inside a domain, network or None, nodes).
    Past the link's domain (8 GPUs of an HGX board's NVLink) it spans ceil(n / 8) nodes
    joined by `network` (default `DEFAULT_NETWORK`)."""
    ic = _hardware.get_interconnect(interconnect)
    if n <= ic.domain_gpus or ic.kind == "network":
        return ic, None, 1
    net = _hardware.get_interconnect(DEFAULT_NETWORK if network is None else network)
    if net.kind != "network":
        raise ValueError(f"network must be a network link (InfiniBand, Ethernet), got {net.name}")
    return ic, net, math.ceil(n / ic.domain_gpus)


#: The GPU generation behind each NVLink generation: NCCL caps LL's bandwidth per
#: generation on one node (`hardware.NCCL_LL_MAX_BUS_BANDWIDTH`).
_NVLINK_ARCHITECTURE = {"NVLink 2": "volta", "NVLink 3": "ampere", "NVLink 4": "hopper",
                        "NVLink 5": "blackwell"}
#: NCCL's floor on an intra-node step of a *ring* once it spans nodes ("inter-node rings
#: still have to launch nsteps * net overhead", tuning.cc: 1 us on Intel hosts, x3 for
#: the Simple protocol). Its tree pays no such floor.
_NET_OVERHEAD_S = 1e-6
#: NCCL's llMaxBws across nodes (tuning.cc, Intel hosts): LL never beats 39 GB/s of bus
#: bandwidth on 2 nodes, 20.4 GB/s on more, whatever the links.
_LL_MAX_MULTINODE = {2: 39.0e9, "more": 20.4e9}
ALGORITHMS = ("ring", "tree")
#: The channels a multi-node ring runs, for NCCL's x1.4 latency on Simple rings (it
#: applies when bytes / (channels x ranks) >= 64): one ring a NIC on an HGX node (8),
#: doubled as NCCL doubles the channels its graph search finds
#: (https://github.com/NVIDIA/nccl/issues/524). An assumption: it only sets the message
#: size (16 KB on 16 GPUs) below which the factor is off, where LL wins anyway.
_RING_CHANNELS_MULTINODE = 16
_RING_PLATEAU = _links.NCCL_RING_SIMPLE_MULTINODE_LATENCY


def _protocol_rows(n_bytes, n, ic, net, nodes, algorithms):
    """NCCL's cost model (tuning.cc, as `hardware.nccl_protocols` states it) of each
    (algorithm, protocol) for an all-reduce of `n_bytes` on `n` ranks over `nodes`."""
    arch = next((a for k, a in _NVLINK_ARCHITECTURE.items() if ic.name.startswith(k)), None)
    rows = {}
    for alg in algorithms:
        if alg == "tree" and nodes == 1:
            continue  # NCCL's tree pays off across nodes; inside one it is a chain
        for proto in ic.protocols:
            cost = ic.nccl(proto, alg)
            intra = cost.step_latency_s
            bandwidth = cost.bandwidth_bytes_per_s
            if net is None:
                inter, net_steps = 0.0, 0
                if proto == "LL" and arch:  # LL never beats NCCL's llMaxBw on one node
                    bandwidth = min(bandwidth, _hardware.NCCL_LL_MAX_BUS_BANDWIDTH[arch])
            else:
                ncost = net.nccl(proto, alg)
                inter = ncost.step_latency_s
                fraction = ncost.bandwidth_fraction
                if alg == "tree" and proto == "LL128":  # 120/128 across nodes, not 7/9
                    fraction = _links.NCCL_TREE_LL128_MULTINODE_FRACTION
                    bandwidth = ic.nccl_bus_bandwidth_bytes_per_s * fraction
                if alg == "ring":
                    intra = max(intra, _NET_OVERHEAD_S * (3 if proto == "Simple" else 1))
                # NCCL runs several channels, each through its own NIC: a collective across
                # nodes moves at up to the node's network bandwidth (all its ports), and
                # at most the NVLink rate inside the node.
                bandwidth = min(bandwidth, net.bandwidth_bytes_per_s * fraction)
                if proto == "LL":
                    bandwidth = min(bandwidth, _LL_MAX_MULTINODE[2 if nodes == 2 else "more"])
            if alg == "ring":
                net_steps = 2 * (nodes - 1)
                latency = cost.base_latency_s + (2 * (n - 1) - net_steps) * intra + net_steps * inter
                if (net is not None and proto == "Simple"
                        and n_bytes / (_RING_CHANNELS_MULTINODE * n)
                        >= _RING_PLATEAU["min_bytes_per_channel_rank"]):
                    # NCCL's "plateau effect of ring" (ncclTopoGetAlgoTime): x1.9 before
                    # Ampere, x1.4 after, on the whole latency of a multi-node Simple ring
                    latency *= _RING_PLATEAU["volta" if arch == "volta" else "later"]
                moved = 2.0 * (n - 1) / n * n_bytes / bandwidth
            else:  # up and down a tree: NCCL halves its bus bandwidth into algorithm bandwidth
                latency = cost.base_latency_s + 2 * ((n / nodes - 1) * intra
                                                      + math.log2(nodes) * inter)
                # and corrects it for medium sizes (treeCorrectionFactor, ncclTopoGetAlgoTime)
                bandwidth *= _links.nccl_tree_correction(n_bytes, proto)
                moved = 2.0 * n_bytes / bandwidth
            rows[(alg, proto)] = {"base_s": cost.base_latency_s, "latency_s": latency,
                                  "bandwidth_s": moved, "seconds": latency + moved,
                                  "bandwidth_bytes_per_s": bandwidth}
    return rows


def allreduce_protocols(n_bytes, n_devices, interconnect, *, network=None,
                        algorithms=ALGORITHMS):
    """NCCL's all-reduce of `n_bytes` on `n_devices` over `interconnect` under each
    algorithm and protocol (ring and, across nodes, tree; LL, LL128, Simple), from NCCL's
    own cost model: a DataFrame indexed by (algorithm, protocol) with `base_s`,
    `latency_s` (base + steps), `bandwidth_s`, `seconds` and `fastest` (the one NCCL
    would pick). On one node LL's bandwidth is capped at NCCL's llMaxBw for the GPU
    generation. Past the link's domain (8 GPUs of an HGX board) the ring crosses
    `network` (default `DEFAULT_NETWORK`) for 2(n-1) of its 2(N-1) steps (n nodes), each
    of its intra-node steps costs at least NCCL's net overhead, and the tree (2 x (N/n - 1)
    intra + 2 log2(n) network steps) competes; both move at up to the node's network
    bandwidth (NCCL's channels each take their own NIC), LL at most NCCL's multi-node
    llMaxBw; the tree's LL128 at .92 x 120/128, its bandwidth x NCCL's size correction
    (`hardware.links.nccl_tree_correction`), and a Simple ring's latency x1.4 (x1.9 on
    Volta) once the message is 64 B a channel a rank."""
    import pandas as pd

    n = check_devices(n_devices)
    s = _v.non_negative("n_bytes", n_bytes)
    algorithms = tuple(_v.choice("algorithm", a, ALGORITHMS) for a in algorithms)
    if not algorithms:
        raise ValueError("algorithms is empty: give 'ring', 'tree' or both")
    ic, net, nodes = ring_route(n, interconnect, network)
    if n == 1:
        rows = {(a, p): {"base_s": 0.0, "latency_s": 0.0, "bandwidth_s": 0.0, "seconds": 0.0,
                         "bandwidth_bytes_per_s": math.inf}
                for a in algorithms[:1] for p in ic.protocols}
    else:
        rows = _protocol_rows(s, n, ic, net, nodes, algorithms)
        if not rows:
            raise ValueError(f"no algorithm of {algorithms} applies to {n} GPUs on one node")
    df = pd.DataFrame.from_dict(rows, orient="index")
    df.index = pd.MultiIndex.from_tuples(df.index, names=["algorithm", "protocol"])
    df["fastest"] = False
    df.loc[df["seconds"].idxmin(), "fastest"] = True
    df.attrs.update(interconnect=ic.name, network=net.name if net else None, nodes=nodes)
    return df


@functools.lru_cache(maxsize=4096)
def _fastest_allreduce(n_bytes, n, ic_name, network):
    """(seconds, algorithm, protocol, route) of NCCL's fastest all-reduce: cached, for
    the decode models that ask for the same message thousands of times."""
    ic, net, nodes = ring_route(n, ic_name, network)
    if n == 1:
        return 0.0, None, None, (ic.name, None, 1)
    rows = _protocol_rows(n_bytes, n, ic, net, nodes, ALGORITHMS)
    (alg, proto), best = min(rows.items(), key=lambda kv: kv[1]["seconds"])
    return best["seconds"], alg, proto, (ic.name, net.name if net else None, nodes)


def interconnect_allreduce_time(n_bytes, n_devices, interconnect, *, network=None,
                                protocol=None):
    """Seconds of an all-reduce of `n_bytes` on `n_devices` over a catalogue link (a
    name such as "NVLink 4", or a `hardware.Interconnect`): NCCL's fastest ring protocol
    (or `protocol`: "LL", "LL128", "Simple"); see `allreduce_protocols`. Vectorised over
    `n_bytes`."""
    sizes = _v.non_negative("n_bytes", n_bytes, array=True)
    n = check_devices(n_devices)
    ic = _hardware.get_interconnect(interconnect)
    out = []
    for s in np.atleast_1d(sizes):
        if protocol is None:
            out.append(_fastest_allreduce(float(s), n, ic.name, network)[0])
        else:
            df = allreduce_protocols(float(s), n, ic, network=network)
            proto = _v.choice("protocol", protocol, list(ic.protocols), normalise=str.lower)
            out.append(df.xs(proto, level="protocol")["seconds"].min())
    return float(out[0]) if np.ndim(sizes) == 0 else np.array(out)


def allreduce_crossover_bytes(n_devices, bandwidth, latency=0.0, *, base_latency=0.0):
    """Message size (bytes) at which a ring all-reduce's bandwidth term equals its latency
    terms: below it the all-reduce is latency-bound, above it bandwidth-bound (the
    communication roofline's ridge). 0 when there is no latency; inf on one device."""
    n = check_devices(n_devices)
    bw = _v.positive("bandwidth", bandwidth)
    fixed = 2 * (n - 1) * _v.non_negative("latency", latency) \
        + _v.non_negative("base_latency", base_latency)
    if n == 1:
        return math.inf
    return fixed * bw * n / (2.0 * (n - 1))


def allreduce_bus_bandwidth(n_bytes, n_devices, seconds):
    """nccl-tests' "bus bandwidth" of a measured all-reduce: n_bytes / seconds x 2(N-1)/N,
    bytes/s. It compares directly with a link's per-direction bandwidth."""
    n = check_devices(n_devices)
    if n == 1:
        raise ValueError("bus bandwidth needs n_devices >= 2: one device moves nothing")
    t = _v.positive("seconds", seconds, array=True)
    s = _v.non_negative("n_bytes", n_bytes, array=True)
    _v.same_shape(n_bytes=s, seconds=t)
    return _v.scalar_or_array(allreduce_bytes_sent(s, n) / t)


def fit_allreduce(n_bytes, seconds, n_devices) -> dict:
    """Fit measured all-reduce times to time = latency + 2(N-1)/N x n_bytes / bandwidth,
    by least squares on the *relative* error (weights 1 / time), so that sizes spanning
    decades count alike. Returns {"bandwidth_bytes_per_s", "latency_s"}; the latency is
    the whole fixed cost of one call (use it as `base_latency`)."""
    n = check_devices(n_devices)
    if n == 1:
        raise ValueError("fitting an all-reduce needs n_devices >= 2")
    s = np.ravel(_v.non_negative("n_bytes", n_bytes, array=True))
    t = np.ravel(_v.positive("seconds", seconds, array=True))
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
    n = check_devices(n_devices)
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
    m = _llm.get(model)
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
    m = _llm.get(model)
    n = check_tp_degree(m, n_devices)
    return max(1, m.n_kv_heads // n)


def shard(model, n_devices) -> _llm.ModelSpec:
    """One device's part of `model` under N-way tensor parallelism, as a `ModelSpec` that
    `gpuinfer.llm` times and sizes: 1/N of the query heads, of the MLP's hidden size and
    of the vocabulary (rounded up, as Megatron pads it), `kv_heads_per_device` KV heads
    (replicated past n_kv_heads), the full d_model (activations are whole on every
    device between the all-reduces). An MoE model's experts are split the same way, 1/N
    of each expert's width on every device (vLLM's default without
    `enable_expert_parallel`); latent attention's down-projections and cached latent are
    whole on every device (only the heads split), as vLLM replicates them."""
    m = _llm.get(model)
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
    m = _llm.get(model)
    n = check_tp_degree(m, n_devices)
    _v.choice("kv_sharding", kv_sharding, _KV_SHARDINGS)
    if kv_sharding == "batch":
        return _llm.kv_cache_bytes_per_token(m, dtype) / n
    return _llm.kv_cache_bytes_per_token(shard(m, n), dtype)


def tp_weight_bytes_per_device(model, n_devices, dtype="fp16") -> float:
    """Weight bytes on each device: the shard's weights (`llm.weight_bytes` of `shard`),
    replicated K/V projections included past n_kv_heads devices."""
    return _llm.weight_bytes(shard(model, n_devices), dtype)


def tp_max_batch(model, accelerator, n_devices, context, dtype="fp16", *, kv_dtype=None,
                 reserve_bytes=None, kv_sharding="heads") -> int:
    """Largest batch whose weight shard plus KV cache (`context` tokens a sequence) fits in
    each of N devices' memory (what the card has) less `reserve_bytes` a device (default
    `llm.DEFAULT_RESERVE_BYTES`). 0 if the shard alone does not fit. With N = 1 this is
    `llm.max_batch`. With kv_sharding="batch" the result is a multiple of N."""
    m, acc = _llm.get(model), _hardware.get(accelerator)
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
        return _hardware.interconnect_for(accelerator)
    return _hardware.get_interconnect(interconnect)


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


def _shard_step(part, acc, b, c, dtype, kv_dtype, compute_dtype, achievable):
    """(ops table, seconds) of one device's decode step: the roofline's (`achievable`
    False) or the achievable model's rows plus its step overheads."""
    eff = _achievable.as_efficiency(achievable)
    if eff.is_ceiling:
        ops = _llm.decode_step_breakdown(part, acc, b, c, dtype, kv_dtype=kv_dtype,
                                         compute_dtype=compute_dtype)
        return ops, float(ops["seconds"].sum())
    ops = _achievable.step_breakdown(part, acc, np.ones(b, dtype=int), np.full(b, c), dtype,
                                     kv_dtype=kv_dtype, compute_dtype=compute_dtype,
                                     achievable=eff)
    return ops, float(_achievable.overheads(ops["seconds"].sum(), part.n_layers, eff))


def tp_decode_breakdown(model, accelerator, n_devices, batch=1, context=0, dtype="fp16",
                        interconnect=None, *, network=None, kv_dtype=None,
                        compute_dtype=None, achievable=False) -> dict:
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
    link's domain the ring takes `network` (default `DEFAULT_NETWORK`)."""
    m, acc = _llm.get(model), _hardware.get(accelerator)
    n = check_tp_degree(m, n_devices)
    b = _v.count("batch", batch, maximum=1 << 30)
    c = _v.count("context", context, minimum=0, maximum=1 << 30)
    part = shard(m, n)
    ops, shard_s = _shard_step(part, acc, b, c, dtype, kv_dtype, compute_dtype, achievable)
    roofline_s = float(ops["ceiling_s" if "ceiling_s" in ops else "seconds"].sum())
    _, kv, compute = _dtypes.formats(dtype, kv_dtype, compute_dtype)
    message = b * m.d_model * tp_message_bytes_per_value(compute, achievable)
    n_allreduces = 2 * m.n_layers + 1
    route = {"interconnect": None, "network": None, "nodes": 1}
    one, protocol, algorithm, floor = 0.0, None, None, 0.0
    if n > 1:
        ic = link_for(interconnect, acc)
        one, algorithm, protocol, (ic_name, net_name, nodes) = _fastest_allreduce(
            float(message), n, ic.name, network)
        route = {"interconnect": ic_name, "network": net_name, "nodes": nodes}
        # The bound all-reduces the smallest message: the compute format's.
        floor = allreduce_floor_s(b * m.d_model * tp_message_bytes_per_value(compute), n, ic,
                                  network=network)
    comm_s = n_allreduces * one
    return {"model": m.name, "accelerator": acc.name, "n_devices": n, "batch": b,
            "context": c, "ops": ops,
            "weight_bytes_per_device": _llm.weight_bytes(part, dtype),
            "kv_bytes_per_device": b * c * _llm.kv_cache_bytes_per_token(part, kv),
            "shard_s": shard_s, "n_allreduces": n_allreduces, "allreduce_bytes": message,
            "allreduce_s": one, "algorithm": algorithm, "protocol": protocol,
            "comm_s": comm_s, "total_s": shard_s + comm_s,
            "ceiling_s": roofline_s + n_allreduces * floor, **route}


def tp_decode_step_time(model, accelerator, n_devices, batch=1, context=0, dtype="fp16",
                        interconnect=None, *, network=None, kv_dtype=None,
                        compute_dtype=None, achievable=False) -> float:
    """Seconds for one tensor-parallel decode step on N devices: the shard's step (on
    the roofline, or with `achievable` the achievable model's) plus 2 x layers + 1
    all-reduces at NCCL's modelled cost, latency included. A model, not a lower bound:
    the bound is `tp_decode_breakdown(...)["ceiling_s"]`, and the serving simulator's
    ceiling (`llm_serving.tp_step_s`) prices the all-reduces that way."""
    return tp_decode_breakdown(model, accelerator, n_devices, batch, context, dtype,
                               interconnect, network=network, kv_dtype=kv_dtype,
                               compute_dtype=compute_dtype, achievable=achievable)["total_s"]


def tp_tradeoff(model, accelerator, batch=1, context=0, dtype="fp16", interconnect=None, *,
                degrees=None, network=None, kv_dtype=None):
    """Chapter *Beyond one GPU*: what each TP degree buys, one row per degree N (that
    fits `batch` sequences of `context` tokens): ms per token (a sequence's latency),
    tokens/s in total and per GPU, the share of the step spent communicating. Compare
    with data-parallel replicas: `replicas_of_min_tp` copies of the smallest degree that
    fits, each serving `batch` sequences, on the same N GPUs."""
    import pandas as pd

    m = _llm.get(model)
    degrees = valid_tp_degrees(m) if degrees is None else [check_tp_degree(m, n) for n in degrees]
    fits = [n for n in degrees if tp_max_batch(m, accelerator, n, max(context, 1), dtype,
                                               kv_dtype=kv_dtype) >= batch]
    if not fits:
        raise ValueError(f"no TP degree among {degrees} holds {m.name} at batch {batch}, "
                         f"context {context} on {_hardware.get(accelerator).name}")
    base = fits[0]
    base_t = tp_decode_step_time(m, accelerator, base, batch, context, dtype, interconnect,
                                 network=network, kv_dtype=kv_dtype)
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
    m, acc = _llm.get(model), _hardware.get(accelerator)
    s = check_devices(n_stages, "n_stages")
    if m.n_layers % s:
        raise ValueError(f"{s} stages do not divide {m.name}'s {m.n_layers} layers")
    b = _v.count("batch", batch, maximum=1 << 30)
    _, _, compute = _dtypes.formats(dtype)
    c = _v.count("context", context, minimum=0, maximum=1 << 30)
    whole_s = _shard_step(m, acc, b, c, dtype, None, None, achievable)[1]
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
    m = _llm.get(model)
    t = _v.positive("per_kernel_s", per_kernel_s)
    k = _v.count("kernels_per_layer", kernels_per_layer, maximum=10_000)
    return m.n_layers * k * t


# --- expert parallelism (mixtures of experts) ---------------------------------------------
#
# Chapter *Mixtures of experts*. An MoE model served on N devices keeps its routed experts
# whole and spreads them, E/N per device (expert parallelism, EP), while the rest (attention,
# dense layers, shared experts, LM head) is either replicated with each device serving its own
# sequences (data-parallel attention, "DP-attention") or tensor-parallel. The engines' switches:
# vLLM `--enable-expert-parallel` with `--data-parallel-size N` (DP-attention) or
# `--tensor-parallel-size N` (TP attention); SGLang `--enable-dp-attention --dp N --ep N` with
# DeepEP (`--moe-a2a-backend deepep`, `--deepep-mode normal|low_latency|auto`); TensorRT-LLM
# `moe_expert_parallel_size` with `enable_attention_dp`. With DP-attention each MoE layer pays
# two all-to-alls: *dispatch* (each token's hidden state to the devices of its k experts) and
# *combine* (the experts' outputs back, weighted and summed). DeepEP (DeepSeek's library)
# dispatches in fp8 (plus a scale per 128 values) and combines in bf16; its *normal* kernels
# (NVLink + RDMA forwarding, for prefill) measured 153/158 GB/s (dispatch/combine) inside an
# H800 node (EP8) and 43-58 GB/s per GPU across nodes (EP16-64, CX7 400 Gb/s NICs), and its
# *low-latency* kernels (pure RDMA, for decode; 128 tokens a GPU, 7168 hidden, top-8) 77 us /
# 114 us at EP8 and 194 us / 360 us at EP256 (deepseek-ai/DeepEP, docs/legacy.md).

#: Format of the dispatch all-to-all unless told (DeepEP, SGLang and vLLM's DeepEP backends
#: dispatch DeepSeek's activations in fp8; the combine stays bf16).
DEFAULT_DISPATCH_DTYPE = "fp8_e4m3"
DEFAULT_COMBINE_DTYPE = "bf16"
EP_ATTENTION = ("dp", "tp")


def _moe(model):
    m = _llm.get(model)
    if not m.is_moe:
        raise ValueError(f"expert parallelism needs a mixture-of-experts model; {m.name} is "
                         f"dense (n_experts=0): use tp_decode_breakdown")
    return m


def _check_ep_degree(m, n, redundant_experts=0) -> int:
    slots = m.n_experts + redundant_experts
    if slots % n:
        raise ValueError(f"n_devices ({n}) must divide {m.name}'s {m.n_experts} routed experts"
                         f" (+ {redundant_experts} redundant) so each device holds as many")
    return slots // n


def moe_all_to_all_bytes(model, tokens, n_devices, *, dispatch_dtype=DEFAULT_DISPATCH_DTYPE,
                         combine_dtype=DEFAULT_COMBINE_DTYPE) -> dict:
    """Bytes one device sends in one MoE layer's two all-to-alls, for the `tokens` tokens
    its attention produced: dispatch = tokens x k x d_model x bytes(dispatch_dtype), combine
    = tokens x k x d_model x bytes(combine_dtype), each a copy per (token, expert) pair
    (an upper bound: DeepEP sends one copy per destination *device* when two of a token's
    experts share one). Under uniform routing (N - 1)/N of them leave the device
    (`remote_fraction`); `*_sent_bytes` are those. fp8's scales (4 bytes per 128 values in
    DeepEP: 3%) are not counted."""
    m = _moe(model)
    n = check_devices(n_devices)
    t = _v.non_negative("tokens", tokens)
    per_pair = t * m.experts_per_token * m.d_model
    d = per_pair * _dtypes.bytes_per_element(dispatch_dtype)
    c = per_pair * _dtypes.bytes_per_element(combine_dtype)
    remote = (n - 1) / n
    return {"dispatch_bytes": d, "combine_bytes": c, "remote_fraction": remote,
            "dispatch_sent_bytes": d * remote, "combine_sent_bytes": c * remote}


def all_to_all_time(sent_bytes, n_devices, interconnect, *, network=None) -> float:
    """Seconds of an all-to-all in which each device sends `sent_bytes` spread evenly over
    the other N - 1 devices: inside a link domain (8 GPUs on an HGX board's NVLink) the
    bytes go at the link's per-direction bandwidth; past it, the share bound for other
    nodes ((N - G) / (N - 1) for G GPUs a node) goes at the node's network bandwidth split
    over its G GPUs, the rest over NVLink at the same time: the slower of the two, plus
    NCCL's LL base latency and one step (a network step across nodes). A ceiling: no
    kernel launch, synchronisation or congestion (DeepEP's measured kernels: module
    comment)."""
    n = check_devices(n_devices)
    s = _v.non_negative("sent_bytes", sent_bytes)
    if n == 1 or s == 0:
        return 0.0
    ic, net, nodes = ring_route(n, interconnect, network)
    latency = ic.nccl("LL").base_latency_s + ic.nccl("LL").step_latency_s
    if net is None:
        return latency + s / ic.bandwidth_bytes_per_s
    g = ic.domain_gpus
    per_gpu = net.bandwidth_bytes_per_s / (g if net.scope == "per node" else 1)
    inter = s * (n - g) / (n - 1)
    intra = s - inter
    return (latency + net.nccl("LL").step_latency_s
            + max(intra / ic.bandwidth_bytes_per_s, inter / per_gpu))


def uniform_routing_imbalance(tokens, n_devices, experts_per_token=1, local_experts=None) -> float:
    """The busiest device's routed (token, expert) pairs over the mean, expected under
    uniform routing: each of the tokens x k pairs lands on one of N devices at random, so
    a device's load is about Poisson with mean mu = tokens x k / N and the largest of N
    such loads is about mu + sqrt(2 mu ln N) (the Gaussian maximum): 1 + sqrt(2 ln N / mu).
    Small batches are the most uneven: 64 tokens, top-8, EP 64 (mu = 8): 1 + sqrt(2 ln 64
    / 8) = 2.02. It never exceeds the busiest possible device, every token sending it
    min(k, `local_experts`) pairs: N x min(k, local) / k. Real routing is skewed beyond
    this; measure and pass `imbalance` to `ep_decode_breakdown`."""
    n = check_devices(n_devices)
    t = _v.positive("tokens", tokens)
    k = _v.count("experts_per_token", experts_per_token, maximum=1 << 20)
    local = k if local_experts is None else _v.count("local_experts", local_experts,
                                                      maximum=1 << 20)
    if n == 1:
        return 1.0
    mu = t * k / n
    return float(min(1.0 + math.sqrt(2.0 * math.log(n) / mu), n * min(k, local) / k))


def ep_decode_breakdown(model, accelerator, n_devices, batch=1, context=0, dtype="fp16",
                        interconnect=None, *, attention="dp", network=None, kv_dtype=None,
                        dispatch_dtype=DEFAULT_DISPATCH_DTYPE,
                        combine_dtype=DEFAULT_COMBINE_DTYPE, imbalance=None,
                        redundant_experts=0, new_tokens=1, overlap=False) -> dict:
    """One decode step of an MoE model on N devices with its routed experts spread whole,
    E/N per device (expert parallelism), `batch` sequences in all, at `context` cached
    tokens each. The step takes its slowest device: the busiest one.

    attention="dp" (DP-attention, as DeepSeek, SGLang and vLLM's --data-parallel-size
    serve DeepSeek-V3): every device holds the attention, dense layers, shared experts
    and LM head and runs them for its own batch / N sequences; each MoE layer dispatches
    its tokens to the experts' devices and combines the results (`moe_all_to_all_bytes`,
    `all_to_all_time`): 2 all-to-alls a MoE layer, added to the step. DeepSeek's and
    SGLang's two-batch overlap run one micro-batch's communication under the other's
    computation: `overlap=True` takes the step as max(computation, communication), the
    ideal of that overlap (the default, no overlap, is then not an upper bound on what an
    overlapped engine reaches).
    attention="tp" (vLLM's --enable-expert-parallel with --tensor-parallel-size N): the
    non-expert part is tensor-parallel (`shard`) over the whole batch, every device sees
    every token, so no all-to-all: each device runs its experts on the tokens routed to
    them, and the MoE output joins the layer's all-reduce (2 x layers + 1 of them, as TP).
    A latent-attention cache is then whole on every device (vLLM replicates it).

    The busiest device runs its local experts on `imbalance` x the mean number of routed
    (token, expert) pairs, batch x k / N (default `uniform_routing_imbalance`: the least
    unevenness random routing gives; pass a measured max/mean, e.g. from SGLang's expert
    distribution recorder or EPLB's statistics, for real traffic), and reads the weights
    of the local experts the batch touches ((E/N) x (1 - (1 - k/E)^batch) of them).
    `redundant_experts`: extra expert replicas (DeepSeek's decode: 32 over 144 GPUs),
    held in memory; their balancing effect goes into `imbalance`. `new_tokens`: tokens
    each sequence brings (1 to decode; a prompt's length for a prefill step, whose
    routed tokens and all-to-all bytes scale with it).

    Returns a dict: `ops` (the busiest device's operations table), `attention_s` (its
    non-expert rows), `experts_s`, `comm_s`, `total_s`, `tokens_per_s` (all devices),
    `tokens_per_s_per_gpu`, `imbalance`, `weight_bytes_per_device`,
    `kv_bytes_per_device`, `fits` (with `llm.DEFAULT_RESERVE_BYTES` held back) and the
    communication's parts."""
    m, acc = _moe(model), _hardware.get(accelerator)
    n = check_devices(n_devices)
    b = _v.count("batch", batch, maximum=1 << 30)
    c = _v.count("context", context, minimum=0, maximum=1 << 30)
    mode = _v.choice("attention", attention, EP_ATTENTION)
    r = _v.count("redundant_experts", redundant_experts, minimum=0, maximum=1 << 20)
    q = _v.count("new_tokens", new_tokens, maximum=1 << 30)
    local_experts = _check_ep_degree(m, n, r)
    k, E = m.experts_per_token, m.n_experts
    tokens = b * q
    imb = uniform_routing_imbalance(tokens, n, k, local_experts) if imbalance is None else float(
        _v.positive("imbalance", imbalance))
    if imb < 1:
        raise ValueError(f"imbalance is the busiest device's load over the mean, at least 1;"
                         f" got {imbalance}")
    _, kv, compute = _dtypes.formats(dtype, kv_dtype)
    if mode == "dp":
        part, local_b = m, math.ceil(b / n)
    else:
        check_tp_degree(m, n)
        part, local_b = shard(m, n), b
    sm = _llm.StepModel(part, dtype, kv_dtype)
    terms = sm.step_terms(np.full(local_b, float(q)), np.full(local_b, float(c)),
                          np.ones(local_b))
    terms.pop("experts")
    # The busiest device's experts: whole experts (the full model's), its share of pairs.
    full = _llm.StepModel(m, dtype, kv_dtype)
    pairs = tokens * k / n * imb
    touched = min(local_experts, E) * (1.0 - (1.0 - k / E) ** tokens)
    experts = (pairs / k * full.expert_flops_per_token,
               touched * full.expert_bytes + pairs / k * full.expert_act_bytes_per_token,
               compute)
    ordered = {}
    for op, t in terms.items():
        if op == "lm_head":
            ordered["experts"] = experts
        ordered[op] = t
    ops = _llm.breakdown(ordered, acc)
    experts_s = float(ops.loc["experts", "seconds"])
    attention_s = float(ops["seconds"].sum()) - experts_s
    route = {"interconnect": None, "network": None, "nodes": 1}
    comm = {"dispatch_s": 0.0, "combine_s": 0.0, "n_all_to_alls": 0, "allreduce_s": 0.0,
            "n_allreduces": 0}
    if n > 1:
        ic = link_for(interconnect, acc)
        _, net, nodes = ring_route(n, ic, network)
        route = {"interconnect": ic.name, "network": net.name if net else None,
                 "nodes": nodes}
        if mode == "dp":
            a2a = moe_all_to_all_bytes(m, local_b * q, n, dispatch_dtype=dispatch_dtype,
                                       combine_dtype=combine_dtype)
            comm.update(a2a)
            comm["dispatch_s"] = all_to_all_time(a2a["dispatch_sent_bytes"], n, ic,
                                                 network=network)
            comm["combine_s"] = all_to_all_time(a2a["combine_sent_bytes"], n, ic,
                                                network=network)
            comm["n_all_to_alls"] = 2 * m.n_moe_layers
        else:
            message = tokens * m.d_model * _dtypes.bytes_per_element(compute)
            comm["allreduce_s"] = _fastest_allreduce(float(message), n, ic.name, network)[0]
            comm["n_allreduces"] = 2 * m.n_layers + 1
    comm_s = (m.n_moe_layers * (comm["dispatch_s"] + comm["combine_s"])
              + comm["n_allreduces"] * comm["allreduce_s"])
    total = (max(float(ops["seconds"].sum()), comm_s) if overlap
             else float(ops["seconds"].sum()) + comm_s)
    # Memory: the non-expert part (replicated, or its TP shard) plus E/N whole experts.
    expert_all = m.n_moe_layers * E * m.expert_params * _llm.expert_bytes(
        m, _dtypes.formats(dtype)[0])
    non_expert = _llm.weight_bytes(part, dtype) - (
        expert_all if mode == "dp" else expert_all / n)
    weights = non_expert + expert_all * local_experts / E
    kv_bytes = local_b * c * _llm.kv_cache_bytes_per_token(part, kv)
    fits = weights + kv_bytes + _llm.DEFAULT_RESERVE_BYTES <= acc.memory_bytes
    return {"model": m.name, "accelerator": acc.name, "n_devices": n, "attention": mode,
            "batch": b, "context": c, "local_batch": local_b, "imbalance": imb,
            "overlap": bool(overlap),
            "local_experts": local_experts, "ops": ops, "attention_s": attention_s,
            "experts_s": experts_s, "comm_s": comm_s, "total_s": total,
            "new_tokens": q, "tokens_per_s": tokens / total,
            "tokens_per_s_per_gpu": tokens / total / n,
            "weight_bytes_per_device": weights, "kv_bytes_per_device": kv_bytes,
            "fits": bool(fits), **comm, **route}


def moe_layouts(model, accelerator, n_devices, batch=1, context=0, dtype="fp16",
                interconnect=None, *, network=None, kv_dtype=None, imbalance=None,
                dispatch_dtype=DEFAULT_DISPATCH_DTYPE):
    """Chapter *Mixtures of experts*: the three ways engines lay an MoE model over
    `n_devices` GPUs, side by side for one decode step of `batch` sequences in all:
    "TP" (every expert split 1/N, `tp_decode_breakdown`), "EP + TP attention" and
    "EP + DP attention" (`ep_decode_breakdown`). One row each: ms per step (a sequence's
    time per output token), tokens/s in all and per GPU, the step's parts (non-expert,
    experts, communication, ms), GB of weights and KV cache per GPU and whether they fit.
    A layout the model's shapes do not allow is left out (its reason in `attrs`)."""
    import pandas as pd

    m = _moe(model)
    rows, skipped = {}, {}
    try:
        tp = tp_decode_breakdown(m, accelerator, n_devices, batch, context, dtype,
                                 interconnect, network=network, kv_dtype=kv_dtype)
        ops = tp["ops"]["seconds"]
        expert_s = float(ops.get("experts", 0.0))
        fits = (tp["weight_bytes_per_device"] + tp["kv_bytes_per_device"]
                + _llm.DEFAULT_RESERVE_BYTES <= _hardware.get(accelerator).memory_bytes)
        rows["TP"] = {"ms_per_step": 1e3 * tp["total_s"], "tokens_per_s": batch / tp["total_s"],
                      "tokens_per_s_per_gpu": batch / tp["total_s"] / tp["n_devices"],
                      "non_expert_ms": 1e3 * (tp["shard_s"] - expert_s),
                      "experts_ms": 1e3 * expert_s, "comm_ms": 1e3 * tp["comm_s"],
                      "weight_GB_per_gpu": tp["weight_bytes_per_device"] / 1e9,
                      "kv_GB_per_gpu": tp["kv_bytes_per_device"] / 1e9, "fits": bool(fits)}
    except ValueError as e:
        skipped["TP"] = str(e)
    for label, mode in (("EP + TP attention", "tp"), ("EP + DP attention", "dp")):
        try:
            ep = ep_decode_breakdown(m, accelerator, n_devices, batch, context, dtype,
                                     interconnect, attention=mode, network=network,
                                     kv_dtype=kv_dtype, imbalance=imbalance,
                                     dispatch_dtype=dispatch_dtype)
        except ValueError as e:
            skipped[label] = str(e)
            continue
        rows[label] = {"ms_per_step": 1e3 * ep["total_s"], "tokens_per_s": ep["tokens_per_s"],
                       "tokens_per_s_per_gpu": ep["tokens_per_s_per_gpu"],
                       "non_expert_ms": 1e3 * ep["attention_s"],
                       "experts_ms": 1e3 * ep["experts_s"], "comm_ms": 1e3 * ep["comm_s"],
                       "weight_GB_per_gpu": ep["weight_bytes_per_device"] / 1e9,
                       "kv_GB_per_gpu": ep["kv_bytes_per_device"] / 1e9, "fits": ep["fits"]}
    df = pd.DataFrame.from_dict(rows, orient="index")
    df.index.name = "layout"
    df.attrs["skipped"] = skipped
    return df
