"""Collectives: what an all-reduce (and the ring under it) costs on NCCL's own model.

Chapter: *Beyond one GPU*; lab: *Tensor-parallel layers*. SI units: bytes, bytes/s, s.
The decode models that pay these costs are `gpuinfer.predict.parallel` (tensor and pipeline
parallelism) and `gpuinfer.predict.expert_parallel` (mixtures of experts).

An all-reduce of S bytes on N devices costs, in NCCL's own model (src/graph/tuning.cc,
via `gpuinfer.hardware`), for each protocol p (LL, LL128, Simple) of its ring algorithm
    base_p + 2(N-1) x step_p + 2(N-1)/N x S / (bandwidth x fraction_p)
and NCCL picks the fastest: LL's low latency comes with half the bandwidth (and at most
its llMaxBw), Simple has the full bandwidth at a higher latency per step
(`allreduce_protocols`). A ring that spans more GPUs than a link's domain (8 on an HGX
board's NVLink) crosses the network for 2(n-1) of its steps, n nodes, at up to the node's
network bandwidth (NCCL runs a channel through each NIC); across nodes NCCL's tree
competes too. NVLink SHARP (NVLS, in-switch reduction) is not modelled: on NVSwitch
systems it beats the ring for large messages (`gpuinfer.predict.multinode` prices NVLS_TREE
across servers). The engines' own one-shot and two-shot all-reduces, which replace NCCL's
ring for decode's small messages inside an NVLink domain, are `custom_allreduce_s` (vLLM's
custom all-reduce kernels, with NCCL's NVLink constants and a fixed cost a call calibrated
on SGLang's measurement, `CUSTOM_ALLREDUCE_MEASURED`).

Two prices, as everywhere in the course: `allreduce_floor_s`, a lower bound (the bytes
at NCCL's bus bandwidth, no latency), and `interconnect_allreduce_s` /
`fastest_allreduce`, NCCL's model of its fastest ring or tree, latency included.
`allreduce_s`, `allreduce_crossover_bytes`, `allreduce_bus_bandwidth` and
`fit_allreduce` are the textbook ring and what a measurement gives (nccl-tests' bus
bandwidth, a fitted latency and bandwidth).

Prediction layer: no torch, no measurement.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from gpuinfer.hardware import device_links
from gpuinfer import validate as _v
from gpuinfer.hardware import device_links as _links

#: The network a ring takes past an NVLink domain, unless told (HGX H100/H200 nodes:
#: eight ConnectX-7 400 Gb/s ports, one per GPU).
DEFAULT_NETWORK = "InfiniBand NDR x8"


def check_devices(n_devices, name="n_devices") -> int:
    """`n_devices` as a count of devices, 1 to 2**20; ValueError naming `name` otherwise."""
    return _v.count(name, n_devices, maximum=1 << 20,
                    why_maximum="no machine has more devices than that")


def allreduce_bytes_sent(n_bytes, n_devices):
    """Bytes each device sends (and receives) in a ring all-reduce of `n_bytes`:
    2(N-1)/N x n_bytes (reduce-scatter, then all-gather). 0 on one device."""
    n = check_devices(n_devices)
    s = _v.non_negative("n_bytes", n_bytes, array=True)
    return _v.scalar_or_array(2.0 * (n - 1) / n * s)


def allreduce_s(n_bytes, n_devices, bandwidth, latency=0.0, *, base_latency=0.0):
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
    (`interconnect_allreduce_s`): more, always."""
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
    ic = device_links.get_interconnect(interconnect)
    if n <= ic.domain_gpus or ic.kind == "network":
        return ic, None, 1
    net = device_links.get_interconnect(DEFAULT_NETWORK if network is None else network)
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
                    bandwidth = min(bandwidth, device_links.NCCL_LL_MAX_BUS_BANDWIDTH[arch])
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
    (`device_links.nccl_tree_correction`), and a Simple ring's latency x1.4 (x1.9 on
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


def fastest_allreduce(n_bytes, n_devices, interconnect, *, network=None) -> dict:
    """NCCL's fastest all-reduce of `n_bytes` on `n_devices` over `interconnect` (past its
    domain, `network`): a dict with `seconds`, `algorithm` and `protocol` (None on one
    device, 0 seconds) and the route (`interconnect`, `network`, `nodes`). The row of
    `allreduce_protocols` marked `fastest`, without the table: the decode models ask for
    the same message thousands of times, so the answer is cached."""
    s = _v.non_negative("n_bytes", n_bytes)
    n = check_devices(n_devices)
    ic = device_links.get_interconnect(interconnect)
    seconds, alg, proto, (ic_name, net_name, nodes) = _fastest_allreduce(
        float(s), n, ic.name, network)
    return {"seconds": seconds, "algorithm": alg, "protocol": proto,
            "interconnect": ic_name, "network": net_name, "nodes": nodes}


def interconnect_allreduce_s(n_bytes, n_devices, interconnect, *, network=None,
                                protocol=None):
    """Seconds of an all-reduce of `n_bytes` on `n_devices` over a catalogue link (a
    name such as "NVLink 4", or a `hardware.Interconnect`): NCCL's fastest algorithm
    (ring, or across nodes its tree) and protocol, latency included (or, with
    `protocol` "LL", "LL128" or "Simple", the faster algorithm under that protocol);
    see `allreduce_protocols`. Vectorised over `n_bytes`."""
    sizes = _v.non_negative("n_bytes", n_bytes, array=True)
    n = check_devices(n_devices)
    ic = device_links.get_interconnect(interconnect)
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


# --- the engines' own all-reduce: one-shot and two-shot inside an NVLink domain -----------

#: vLLM's custom all-reduce (csrc/custom_all_reduce.cuh, `CustomAllreduce::allreduce`;
#: vllm-project/vllm pull request 2192, references.bib: vllm_pr2192_allreduce), which
#: SGLang and TensorRT-LLM's ONESHOT/TWOSHOT strategies follow: a group of 2, 4, 6 or 8
#: GPUs with peer access over full NVLink. One stage (`cross_device_reduce_1stage`): after
#: a start barrier every rank reads each peer's whole buffer over NVLink and sums, then an
#: end barrier: (N-1) x S bytes in a rank, 2 barriers. Two stages
#: (`cross_device_reduce_2stage`): a reduce-scatter (each rank sums its 1/N slice from every
#: peer), a barrier, an all-gather of the slices: 2 (N-1)/N x S bytes in, 3 barriers. vLLM
#: takes one stage on 2 GPUs always, and below 512 KiB on up to 4 and below 256 KiB on up
#: to 8; two stages above. vLLM turns it off for a group that spans nodes.
CUSTOM_ALLREDUCE = {
    "world_sizes": (2, 4, 6, 8),
    "one_stage_below_bytes": {2: math.inf, 4: 512 * 1024, 6: 256 * 1024, 8: 256 * 1024},
    "barriers": {"one-shot": 2, "two-shot": 3},
    "source": "https://github.com/vllm-project/vllm/blob/036bb685581dbedcd6cf7fc845fe87268c7d1191/"
              "csrc/custom_all_reduce.cuh",
}

#: SGLang's timing of its one-shot custom all-reduce on 8 H100 SXM (pull request 2904,
#: references.bib: sglang2904; TensorRT-LLM's kernel, one kernel a call, as vLLM's is under
#: CUDA graphs): seconds by message bytes. The test's sizes are fp32 values
#: (sgl-kernel/tests/test_trt_reduce.py: 512, 4,096 and 32,768 of them, x 4 B); 5,000 calls
#: timed back to back without CUDA graphs. 16,384 B is Llama-2-70B's [1, 8192] fp16
#: message, batch 1's, and calibrates the fixed cost (`custom_allreduce_fixed_s`).
CUSTOM_ALLREDUCE_MEASURED = {
    "accelerator": "H100 SXM", "interconnect": "NVLink 4", "n_devices": 8,
    "seconds_by_bytes": {2_048: 5.9e-6, 16_384: 5.7e-6, 131_072: 7.8e-6},
    "calibration_bytes": 16_384,
    "source": "https://github.com/sgl-project/sglang/pull/2904",
}


def _barriers_and_bytes(s, n, ic):
    """(kind, bytes_in, barrier seconds, byte seconds) of vLLM's kernel for `s` bytes on
    `n` GPUs over `ic`: each barrier one NVLink step of NCCL's LL protocol, the bytes a
    rank reads at NCCL's bus bandwidth."""
    kind = "one-shot" if s < CUSTOM_ALLREDUCE["one_stage_below_bytes"][n] else "two-shot"
    bytes_in = (n - 1) * s if kind == "one-shot" else 2.0 * (n - 1) / n * s
    barriers = CUSTOM_ALLREDUCE["barriers"][kind] * ic.nccl("LL").step_latency_s
    return kind, bytes_in, barriers, bytes_in / ic.nccl_bus_bandwidth_bytes_per_s


@functools.cache
def custom_allreduce_fixed_s() -> float:
    """Seconds a custom all-reduce costs a call besides its barriers and bytes: its launch
    and the kernel's own work (reading the barrier flags, the sums). Calibrated on SGLang's
    one-shot at batch 1's message (`CUSTOM_ALLREDUCE_MEASURED`): 5.7 us on 8 H100s, less
    the model's 2 barriers (1.2 us) and 7 x 16,384 B at NCCL's 370.8 GB/s (0.31 us), 4.19
    us. Timed without CUDA graphs, so part of it may be host launch that a graph removes;
    the model keeps all of it, as NCCL's model charges its own base latency a call. One
    measurement (H100s, 8 GPUs): the same cost is assumed for every NVLink and group size."""
    m = CUSTOM_ALLREDUCE_MEASURED
    s = m["calibration_bytes"]
    _, _, barriers, moved = _barriers_and_bytes(
        s, m["n_devices"], device_links.get_interconnect(m["interconnect"]))
    return m["seconds_by_bytes"][s] - barriers - moved


def custom_allreduce_parts(n_bytes, n_devices, interconnect) -> dict:
    """An engine's custom all-reduce of `n_bytes` on `n_devices` inside one NVLink domain
    (`CUSTOM_ALLREDUCE`: vLLM's kernels), modelled with NCCL's own NVLink constants: a
    barrier costs one NVLink step of NCCL's LL protocol (a flag written to each peer and
    waited for: `interconnect.nccl("LL").step_latency_s`, 0.6 us on NVLink), the bytes a
    rank reads from its peers move at NCCL's bus bandwidth for the link
    (`nccl_bus_bandwidth_bytes_per_s`, 370.8 GB/s a direction on an H100), and each call
    pays a fixed cost, its launch and kernel (`custom_allreduce_fixed_s`, 4.19 us,
    calibrated so that batch 1's one-shot on 8 H100s takes SGLang's measured 5.7 us).
    Returns `kind` ("one-shot" or "two-shot", vLLM's choice for the size), `seconds`,
    `latency_s` (fixed cost and barriers), `fixed_s`, `bandwidth_s` and `bytes_in` (per
    rank); ValueError where vLLM would not run it (a group size other than 2, 4, 6, 8, or
    past the link's domain)."""
    s = _v.non_negative("n_bytes", n_bytes)
    n = check_devices(n_devices)
    ic = device_links.get_interconnect(interconnect)
    _v.ensure(n in CUSTOM_ALLREDUCE["world_sizes"],
              f"n_devices={n}: the custom all-reduce runs on groups of "
              f"{CUSTOM_ALLREDUCE['world_sizes']} GPUs")
    _v.ensure(n <= ic.domain_gpus and ic.kind == "nvlink",
              f"n_devices={n} on {ic.name}: the custom all-reduce needs every GPU on one "
              f"NVLink domain ({ic.domain_gpus:g} GPUs here)")
    kind, bytes_in, barriers, bandwidth = _barriers_and_bytes(s, n, ic)
    fixed = custom_allreduce_fixed_s()
    return {"kind": kind, "seconds": fixed + barriers + bandwidth,
            "latency_s": fixed + barriers, "fixed_s": fixed, "bandwidth_s": bandwidth,
            "bytes_in": bytes_in}


def custom_allreduce_s(n_bytes, n_devices, interconnect) -> float:
    """Seconds of an engine's custom all-reduce (`custom_allreduce_parts`' `seconds`)."""
    return custom_allreduce_parts(n_bytes, n_devices, interconnect)["seconds"]


def engine_allreduce(n_bytes, n_devices, interconnect, *, network=None,
                     allreduce="nccl") -> dict:
    """The all-reduce a tensor-parallel step pays: `allreduce="nccl"`, NCCL's fastest ring
    or tree (`fastest_allreduce`); "custom", the engines' one-shot/two-shot kernel
    (`custom_allreduce_parts`) where vLLM would run it (2, 4, 6 or 8 GPUs on one NVLink
    domain) and NCCL's otherwise, as vLLM falls back. A dict with `seconds`, `algorithm`
    ("one-shot", "two-shot" or NCCL's), `protocol` (None for the custom kernel) and the
    route."""
    choice = _v.choice("allreduce", allreduce, ("nccl", "custom"))
    best = fastest_allreduce(n_bytes, n_devices, interconnect, network=network)
    n = check_devices(n_devices)
    ic = device_links.get_interconnect(interconnect)
    if (choice == "custom" and n in CUSTOM_ALLREDUCE["world_sizes"]
            and n <= ic.domain_gpus and ic.kind == "nvlink"):
        parts = custom_allreduce_parts(n_bytes, n, ic)
        return {**best, "seconds": parts["seconds"], "algorithm": parts["kind"],
                "protocol": None}
    return best
