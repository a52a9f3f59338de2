"""Across servers: NCCL's NVLS_TREE all-reduce, and tensor parallelism inside a server
with pipeline parallelism between servers (TP x PP). Chapter: *Beyond one GPU*. SI
units: bytes, bytes/s, seconds, tokens/s.

Both build on `gpuinfer.predict.collectives` (ring and tree all-reduces, the ring's route) and
`gpuinfer.predict.parallel` (`tp_step_s`, `pp_decode_breakdown`); they stay a module
of their own, the one idea of crossing servers.

NVLS_TREE (NCCL, tuning.cc at the commit `hardware.NCCL_NVLS_TREE` cites): NVLink SHARP
reduces inside each node and a tree joins the nodes; NCCL enables it only across nodes,
Simple protocol only. Its latency is one NVLS step and 2 log2(nodes) network steps. Its
bus bandwidth depends on the channels NCCL's graph search finds, which a model cannot
know, so `nvls_tree_allreduce` prices its *best case*: the NVLS bound inside the node
(2 x nvlsEfficiency x NCCL's NVLink bus bandwidth, the channels' (nCh-1)/nCh taken as 1)
and the node's network (doubled on two nodes, as tuning.cc does). A time from it is a
lower bound: where even it loses to the ring or tree, NCCL will not pick NVLS_TREE.
"""

from __future__ import annotations

import math

from gpuinfer.predict import collectives as _collectives
from gpuinfer import dtypes as _dtypes
from gpuinfer import hardware as _hardware
from gpuinfer.hardware import device_links
from gpuinfer.predict import architectures
from gpuinfer.predict import parallel as _parallel
from gpuinfer import validate as _v

_ARCHITECTURE = {"NVLink 4": "hopper", "NVLink 5": "blackwell"}


def _nvls_architecture(ic) -> str:
    arch = next((a for k, a in _ARCHITECTURE.items() if ic.name.startswith(k)), None)
    if arch is None:
        raise ValueError(f"NVLS needs third-generation NVSwitch (Hopper or Blackwell "
                         f"NVLink); {ic.name} has none")
    return arch


def nvls_tree_allreduce(n_bytes, n_devices, interconnect="NVLink 4", *, network=None) -> dict:
    """NCCL's NVLS_TREE all-reduce of `n_bytes` on `n_devices` GPUs spanning more than one
    NVLink domain, at its best case (see the module's docstring). Returns latency_s
    (25 us + 2 log2(nodes) x 20.9 us on Hopper; 14 us a network step with one GPU a
    node), bus_bandwidth_bytes_per_s, bandwidth_bytes_per_s (algorithm bandwidth: bus x
    N / (2(N-1)), as NCCL converts it), seconds (latency + bytes / algorithm bandwidth),
    and nodes. Raises ValueError on one node (NCCL disables NVLS_TREE there)."""
    n = _v.count("n_devices", n_devices, maximum=1 << 20)
    s = _v.non_negative("n_bytes", n_bytes)
    ic = device_links.get_interconnect(interconnect)
    arch = _nvls_architecture(ic)
    _, net, nodes = _collectives.ring_route(n, ic, network)
    if net is None:
        raise ValueError(f"{n} GPUs fit in one {ic.name} domain of {ic.domain_gpus:g}: NCCL "
                         "runs NVLS_TREE only across nodes (use NVLS inside one)")
    t = device_links.NCCL_NVLS_TREE
    per_node = n / nodes
    net_step = t["latency_net_s"] if per_node > 1 else t["latency_net_one_gpu_a_node_s"]
    latency = t["latency_intra_s"] + 2 * int(math.log2(nodes)) * net_step
    intra = 2 * device_links.NCCL_NVLS["efficiency"][arch] * ic.nccl_bus_bandwidth_bytes_per_s
    inter = net.bandwidth_bytes_per_s * (2 if nodes <= 2 else 1)
    bus = min(intra, inter)
    algorithm_bw = bus * n / (2 * (n - 1))
    return {"latency_s": latency, "bus_bandwidth_bytes_per_s": bus,
            "bandwidth_bytes_per_s": algorithm_bw, "seconds": latency + s / algorithm_bw,
            "nodes": nodes, "interconnect": ic.name, "network": net.name}


def tp_pp_decode(model, accelerator, n_devices, pp, batch=1, context=0, micro_batches=None,
                 dtype="fp16", interconnect=None, *, network=None, achievable=True) -> dict:
    """Decode with tensor parallelism over `n_devices` GPUs inside each NVLink domain and `pp`
    pipeline stages, one a domain (TP8 x PP2: two HGX servers). Each stage holds
    n_layers / pp layers and runs them as a TP group of `n_devices`: its time is
    `n_devices`-way TP's step
    (shard plus all-reduces, `parallel.tp_step_s`) over `pp` (the embedding and
    LM head, in the end stages, are spread evenly: a small error). Between stages one
    [batch, d_model] send crosses the network (`parallel.pp_decode_breakdown`'s crossing
    hand-off, NCCL's Simple protocol over one NIC).

    A token of one micro-batch passes every stage: latency_s = pp x stage + (pp-1) sends.
    With `micro_batches` (default `pp`) of `batch` sequences each in flight, a stage
    serves one micro-batch per (stage + send), so tokens_per_s = micro_batches x batch /
    max(latency_s, micro_batches x (stage + send)). `achievable`: False a stage
    is its 1/pp share of the TP group's ceiling (`tp_step_s(..., achievable=False)`: the
    shard's roofline, each all-reduce at `allreduce_floor_s`); True (the default, or an
    `achievable.Efficiency`) of its step on the achievable model. The send is NCCL's
    Simple protocol, latency included, either way. Returns stage_s, send_s, latency_s, tokens_per_s,
    sequences (micro_batches x batch) and the TP group's breakdown."""
    m, acc = architectures.get(model), _hardware.get(accelerator)
    n_devices = _parallel.check_tp_degree(m, n_devices)
    pp = _v.count("pp", pp, maximum=m.n_layers)
    if m.n_layers % pp:
        raise ValueError(f"{pp} stages do not divide {m.name}'s {m.n_layers} layers")
    b = _v.count("batch", batch, maximum=1 << 30)
    mb = pp if micro_batches is None else _v.count("micro_batches", micro_batches,
                                                   maximum=1 << 20)
    ic = _parallel.link_for(interconnect, acc)
    if n_devices > ic.domain_gpus:
        raise ValueError(f"tp={n_devices} exceeds {ic.name}'s domain of {ic.domain_gpus:g} GPUs: "
                         "a TP group spans one domain here")
    group = _parallel.tp_step_s(m, acc, n_devices, b, context, dtype=dtype, interconnect=ic,
                                network=network, achievable=achievable, parts=True)
    stage_s = group["total_s"] / pp
    send_s = 0.0
    if pp > 1:
        # The crossing hand-off of a pipeline that spans two domains (the model's first
        # stage count that divides its layers and exceeds one domain), for this batch.
        crossing = next(s for s in range(int(ic.domain_gpus) + 1, m.n_layers + 1)
                        if m.n_layers % s == 0)
        send_s = _parallel.pp_decode_breakdown(m, acc, crossing, b, context, dtype, ic,
                                               network=network, achievable=False)["send_s"]
    latency_s = pp * stage_s + (pp - 1) * send_s
    tokens_per_s = mb * b / max(latency_s, mb * (stage_s + send_s))
    return {"tp": n_devices, "pp": pp, "batch": b, "micro_batches": mb, "sequences": mb * b,
            "stage_s": stage_s, "send_s": send_s, "latency_s": latency_s,
            "tokens_per_s": tokens_per_s, "group": group,
            "send_bytes": float(b) * m.d_model * _dtypes.bytes_per_element(
                _dtypes.formats(dtype)[2])}
