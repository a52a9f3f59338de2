"""Expert parallelism: a mixture-of-experts model spread over devices, its all-to-alls,
the routing imbalance, the three layouts engines use, and what each serves within a
time-per-output-token objective.

Chapter: *Mixtures of experts*. SI units: bytes, bytes/s, seconds, tokens/s.

An MoE model served on N devices keeps its routed experts whole and spreads them, E/N per
device (expert parallelism, EP), while the rest (attention, dense layers, shared experts,
LM head) is either replicated with each device serving its own sequences (data-parallel
attention, "DP-attention") or tensor-parallel (`gpuinfer.predict.parallel.shard`). The engines'
switches: vLLM `--enable-expert-parallel` with `--data-parallel-size N` (DP-attention) or
`--tensor-parallel-size N` (TP attention); SGLang `--enable-dp-attention --dp N --ep N` with
DeepEP (`--moe-a2a-backend deepep`, `--deepep-mode normal|low_latency|auto`); TensorRT-LLM
`moe_expert_parallel_size` with `enable_attention_dp`. With DP-attention each MoE layer pays
two all-to-alls: *dispatch* (each token's hidden state to the devices of its k experts) and
*combine* (the experts' outputs back, weighted and summed). DeepEP (DeepSeek's library)
dispatches in fp8 (plus a scale per 128 values) and combines in bf16; its *normal* kernels
(NVLink + RDMA forwarding, for prefill) measured 153/158 GB/s (dispatch/combine) inside an
H800 node (EP8) and 43-58 GB/s per GPU across nodes (EP16-64, CX7 400 Gb/s NICs), and its
*low-latency* kernels (for decode; 128 tokens a GPU, 7168 hidden, top-8) 77 us / 114 us at
EP8 and 194 us / 360 us at EP256 (deepseek-ai/DeepEP, docs/legacy.md: the table published
with the 2025-06-05 change that has them use NVLink where they can, PR #173; EP8 sends
6.4 MB a GPU, 128 us or more through one 400 Gb/s NIC, so its 77 us went over NVLink).
DeepEP's GB/s divide the logical bytes a GPU dispatches by the time, not the bytes on the
wire, so its "RDMA" figures can exceed what a NIC carries.

Built on `gpuinfer.predict.parallel` (the tensor-parallel shard and step, which the "TP" layout and
TP attention use) and `gpuinfer.predict.collectives` (NCCL's all-reduce, the ring's route).
With `achievable=False` every step is a ceiling, a lower bound on time: the per-operation
roofline, each all-reduce at `collectives.allreduce_floor_s` and each all-to-all at
`all_to_all_floor_s` (bytes at the link's bandwidth, no latency). With `achievable=True`
each GPU's operations run on the achievable model (`gpuinfer.predict.achievable`: derated
rates, kernel gaps, a fixed cost a step), the all-reduces at NCCL's fastest ring or tree
with its latency (as `parallel.tp_step_s` prices them), and the all-to-alls at
`all_to_all_s`, a link model (the link's bandwidth plus NCCL's LL latency: not a bound;
`achievable.Efficiency`'s `all_to_all="link"` means this model), or with an
`achievable.Efficiency` whose `all_to_all` is "measured" (as in `achievable.REFIT`) at that
link model over `deepep_fraction`: the link model's time over DeepEP's measured
low-latency time at that EP degree (0.28 at EP8, whose measurement ran over an H800's
NVLink, about 160 GB/s, at about half of that link's bound; most of the link model across
servers), i.e. DeepEP's measured time scaled to the bytes sent. Decisions (`moe_options`)
take `achievable=True` with the ceiling's columns beside.

Prediction layer: no torch, no measurement.
"""

from __future__ import annotations

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
from gpuinfer.predict.collectives import (allreduce_floor_s, check_devices, fastest_allreduce,
                                          ring_route)
from gpuinfer.predict.parallel import (check_gpu_prices, check_tp_degree, link_for, shard,
                                       tp_step_s, tp_message_bytes_per_value)

#: Format of the dispatch all-to-all unless told (DeepEP, SGLang and vLLM's DeepEP backends
#: dispatch DeepSeek's activations in fp8; the combine stays bf16).
DEFAULT_DISPATCH_DTYPE = "fp8_e4m3"
DEFAULT_COMBINE_DTYPE = "bf16"
EP_ATTENTION = ("dp", "tp")
#: The layouts `moe_layouts` compares, in its rows' order: every expert split 1/N (TP),
#: whole experts with tensor-parallel attention, whole experts with data-parallel attention.
LAYOUTS = ("TP", "EP + TP attention", "EP + DP attention")


def _moe(model):
    m = architectures.get(model)
    if not m.is_moe:
        raise ValueError(f"expert parallelism needs a mixture-of-experts model; {m.name} is "
                         f"dense (n_experts=0): use tp_step_s")
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


def all_to_all_s(sent_bytes, n_devices, interconnect, *, network=None) -> float:
    """Seconds of an all-to-all in which each device sends `sent_bytes` spread evenly over
    the other N - 1 devices: inside a link domain (8 GPUs on an HGX board's NVLink) the
    bytes go at the link's per-direction bandwidth; past it, the share bound for other
    nodes ((N - G) / (N - 1) for G GPUs a node) goes at the node's network bandwidth split
    over its G GPUs, the rest over NVLink at the same time: the slower of the two, plus
    NCCL's LL base latency and one step (a network step across nodes). A link model, not a
    bound (the bound, without the latency, is `all_to_all_floor_s`): no kernel launch,
    synchronisation or congestion. It is the achievable model's price when its
    `Efficiency.all_to_all` is "link" (the default) and the
    reference `deepep_fraction` divides by (DeepEP's measured kernels: module comment)."""
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


def all_to_all_floor_s(sent_bytes, n_devices, interconnect, *, network=None) -> float:
    """Seconds no all-to-all of `sent_bytes` a device can beat (the ceiling's price, a
    lower bound on time, as `collectives.allreduce_floor_s` is for an all-reduce):
    `all_to_all_s`'s bytes at the link's and the network's bandwidth, without its latency
    (NCCL's LL base latency and step, which at decode's few kilobytes are most of it)."""
    n = check_devices(n_devices)
    s = _v.non_negative("sent_bytes", sent_bytes)
    if n == 1 or s == 0:
        return 0.0
    ic, net, _ = ring_route(n, interconnect, network)
    if net is None:
        return s / ic.bandwidth_bytes_per_s
    g = ic.domain_gpus
    per_gpu = net.bandwidth_bytes_per_s / (g if net.scope == "per node" else 1)
    inter = s * (n - g) / (n - 1)
    return max((s - inter) / ic.bandwidth_bytes_per_s, inter / per_gpu)


#: DeepEP's low-latency kernels (deepseek-ai/DeepEP, docs/legacy.md; H800s, ~160 GB/s
#: NVLink, a CX7 400 Gb/s NIC each; 128 tokens a GPU, hidden 7168, top-8, fp8 dispatch, bf16
#: combine): (dispatch, combine) microseconds by EP degree. The table published with the
#: 2025-06-05 note that the kernels "now leverage NVLink as much as possible" (PR #173):
#: EP8 ran over NVLink, wider EP over NVLink inside a node and RDMA across nodes.
DEEPEP_LOW_LATENCY_US = {8: (77, 114), 16: (118, 195), 32: (155, 273), 64: (173, 314),
                         128: (192, 369), 256: (194, 360)}


@functools.lru_cache(maxsize=64)
def deepep_fraction(n_devices, interconnect="NVLink 4") -> tuple:
    """(dispatch, combine): the link model's time (`all_to_all_s` on `interconnect`, 8 GPUs
    a domain, the network past it: bandwidth plus NCCL's latency, not a bound) over
    DeepEP's measured low-latency time (`DEEPEP_LOW_LATENCY_US`, DeepSeek-V3's 128 tokens a
    GPU) at the largest measured EP degree at most `n_devices` (EP8's below 8). An
    expert-parallel step on an `Efficiency` with `all_to_all="measured"` divides each
    all-to-all's link-model time by it: DeepEP's measured time, scaled to the bytes sent.
    Against the bound (`all_to_all_floor_s`) on the measuring H800s' own NVLink (about
    160 GB/s) EP8's kernel reached about half; the default `interconnect` is an H100's."""
    n = check_devices(n_devices)
    key = max([k for k in DEEPEP_LOW_LATENCY_US if k <= n], default=8)
    d_us, c_us = DEEPEP_LOW_LATENCY_US[key]
    a2a = moe_all_to_all_bytes(architectures.get("deepseek-v3"), 128, key)
    ic = device_links.get_interconnect(interconnect)
    return (all_to_all_s(a2a["dispatch_sent_bytes"], key, ic) / (d_us * 1e-6),
            all_to_all_s(a2a["combine_sent_bytes"], key, ic) / (c_us * 1e-6))


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



def nodes_touched(n_experts, experts_per_token, n_nodes, max_nodes=None) -> float:
    """Expected number of distinct nodes a token's `experts_per_token` (k) routed experts
    sit on, with `n_experts` (E) spread evenly over `n_nodes` (N), g = E/N a node, under
    uniform routing among the nodes the token may use. DeepSeek-V3's node-limited routing
    lets each token use at most `max_nodes` (M) nodes (M = 4 of 8 expert groups: the
    report's "each token is sent to at most 4 nodes"); None lets it use all N. The k
    experts are then k of the M g on its M nodes, each node missed with probability
    C((M - 1) g, k) / C(M g, k):

        M x (1 - C((M - 1) g, k) / C(M g, k)),

    at most M. Inter-node dispatch sends one copy a destination node (DeepEP forwards over
    NVLink inside it), so this, x (N - 1)/N for the nodes other than the token's own (each
    node equally likely), counts a token's network copies, against k (N - 1)/N copies sent
    one a (token, expert) pair."""
    e = _v.count("n_experts", n_experts, maximum=1 << 20)
    k = _v.count("experts_per_token", experts_per_token, maximum=e)
    nodes = _v.count("n_nodes", n_nodes, maximum=e)
    if e % nodes:
        raise ValueError(f"n_nodes ({nodes}) must divide n_experts ({e}) so each node holds"
                         f" as many experts")
    m = nodes if max_nodes is None else _v.count("max_nodes", max_nodes, maximum=nodes)
    g = e // nodes
    if m * g < k:
        raise ValueError(f"max_nodes ({m}) x {g} experts a node is fewer than the "
                         f"{k} experts a token needs (experts_per_token)")
    return m * (1.0 - math.comb((m - 1) * g, k) / math.comb(m * g, k))


def eplb_imbalance(expert_loads, n_devices, redundant_experts=0) -> float:
    """The busiest device's load over the mean once DeepSeek's expert-parallelism load
    balancer (EPLB, its global policy) has placed `expert_loads` (one layer's tokens per
    expert, measured or modelled) on `n_devices` with `redundant_experts` extra replicas:
    each replica goes, one at a time, to the expert with the most load per replica (its
    load then splits evenly over its replicas); then the (E + r) replicas, heaviest first,
    each go to the least-loaded device that still has a free slot, (E + r)/N slots a
    device. 1 is perfect balance. Pass the result as `imbalance` to
    `ep_decode_breakdown` (with the same `redundant_experts`)."""
    loads = np.asarray(expert_loads, dtype=float)
    if loads.ndim != 1 or loads.size < 1:
        raise ValueError(f"expert_loads must be a 1-D sequence of loads, one an expert; "
                         f"got shape {loads.shape}")
    if not np.all(np.isfinite(loads)) or np.any(loads < 0) or loads.sum() <= 0:
        raise ValueError("expert_loads must be finite, non-negative and not all zero")
    n = check_devices(n_devices)
    r = _v.count("redundant_experts", redundant_experts, minimum=0, maximum=1 << 20)
    slots = loads.size + r
    if slots % n:
        raise ValueError(f"n_devices ({n}) must divide the {loads.size} experts + {r} "
                         f"redundant ({slots} slots) so each device holds as many")
    replicas = np.ones(loads.size)
    for _ in range(r):
        replicas[np.argmax(loads / replicas)] += 1
    share = np.repeat(loads / replicas, replicas.astype(int))   # one load a replica
    device, used = np.zeros(n), np.zeros(n, dtype=int)
    for x in np.sort(share)[::-1]:
        free = np.flatnonzero(used < slots // n)
        d = free[np.argmin(device[free])]
        device[d] += x
        used[d] += 1
    return float(device.max() / device.mean())

def ep_decode_breakdown(model, accelerator, n_devices, batch=1, context=0, dtype="fp16",
                        interconnect=None, *, attention="dp", network=None, kv_dtype=None,
                        dispatch_dtype=DEFAULT_DISPATCH_DTYPE,
                        combine_dtype=DEFAULT_COMBINE_DTYPE, imbalance=None,
                        redundant_experts=0, new_tokens=1, overlap=False,
                        achievable=True, compute_dtype=None) -> dict:
    """One decode step of an MoE model on N devices with its routed experts spread whole,
    E/N per device (expert parallelism), `batch` sequences in all, at `context` cached
    tokens each. The step takes its slowest device: the busiest one.

    attention="dp" (DP-attention, as DeepSeek, SGLang and vLLM's --data-parallel-size
    serve DeepSeek-V3): every device holds the attention, dense layers, shared experts
    and LM head and runs them for its own batch / N sequences; each MoE layer dispatches
    its tokens to the experts' devices and combines the results (`moe_all_to_all_bytes`,
    `all_to_all_s`): 2 all-to-alls a MoE layer, added to the step. DeepSeek's and
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
    `achievable`: False, a bound: the busiest device's rows on the roofline, the
    all-to-alls at `all_to_all_floor_s` and the all-reduces at
    `collectives.allreduce_floor_s` (as `parallel.tp_step_s(achievable=False)`); True
    (the default, or an `achievable.Efficiency`) on the achievable model, its step
    overheads counted in `attention_s` and the ceiling's row times kept in
    `ops["ceiling_s"]`; the all-to-alls at `all_to_all_s` (latency included), or, where
    the Efficiency's `all_to_all` is "measured", at that over `deepep_fraction(n_devices)`;
    the all-reduces at NCCL's fastest ring or tree, latency included. `compute_dtype`: the matmuls' format where it is not
    the weights' default (`dtypes.formats`: a 4-bit weight format computes at the 16-bit
    peak unless told; NVFP4 weights with fp8 matmuls: compute_dtype="fp8").

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
    _, kv, compute = _dtypes.formats(dtype, kv_dtype, compute_dtype)
    if mode == "dp":
        part, local_b = m, math.ceil(b / n)
    else:
        check_tp_degree(m, n)
        part, local_b = shard(m, n), b
    sm = step_model.StepModel(part, dtype, kv_dtype, compute_dtype)
    terms = sm.step_terms(np.full(local_b, float(q)), np.full(local_b, float(c)),
                          np.ones(local_b))
    terms.pop("experts")
    # The busiest device's experts: whole experts (the full model's), its share of pairs.
    full = step_model.StepModel(m, dtype, kv_dtype, compute_dtype)
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
    eff = _achievable.as_efficiency(achievable)
    compute_s = float(ops["seconds"].sum())
    if not eff.is_ceiling:
        ops["ceiling_s"] = ops["seconds"]
        ops["seconds"] = _achievable.table_s(ops, acc, eff, _dtypes.formats(dtype)[0])
        compute_s = float(_achievable.overheads(ops["seconds"].sum(), m.n_layers, eff,
                                                sequences=local_b))
        ops["share"] = ops["seconds"] / ops["seconds"].sum()
    experts_s = float(ops.loc["experts", "seconds"])
    attention_s = compute_s - experts_s
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
            # The bound: bandwidth alone; the achievable model: with NCCL's latency.
            price = all_to_all_floor_s if eff.is_ceiling else all_to_all_s
            comm["dispatch_s"] = price(a2a["dispatch_sent_bytes"], n, ic, network=network)
            comm["combine_s"] = price(a2a["combine_sent_bytes"], n, ic, network=network)
            if eff.all_to_all == "measured":
                f_d, f_c = deepep_fraction(n)
                comm["dispatch_s"] /= f_d
                comm["combine_s"] /= f_c
            comm["n_all_to_alls"] = 2 * m.n_moe_layers
        else:
            message = tokens * m.d_model * tp_message_bytes_per_value(compute, eff)
            # As `parallel.tp_step_s`: the bound at NCCL's bus bandwidth with no latency
            # (its message in the compute format), the achievable model at NCCL's fastest
            # ring or tree, latency included (its message in 16 bits).
            comm["allreduce_s"] = (
                allreduce_floor_s(float(message), n, ic, network=network) if eff.is_ceiling
                else fastest_allreduce(float(message), n, ic, network=network)["seconds"])
            comm["n_allreduces"] = 2 * m.n_layers + 1
    comm_s = (m.n_moe_layers * (comm["dispatch_s"] + comm["combine_s"])
              + comm["n_allreduces"] * comm["allreduce_s"])
    total = max(compute_s, comm_s) if overlap else compute_s + comm_s
    # Memory: the non-expert part (replicated, or its TP shard) plus E/N whole experts.
    expert_all = m.n_moe_layers * E * m.expert_params * step_model.expert_bytes(
        m, _dtypes.formats(dtype)[0])
    non_expert = step_model.weight_bytes(part, dtype) - (
        expert_all if mode == "dp" else expert_all / n)
    weights = non_expert + expert_all * local_experts / E
    kv_bytes = local_b * c * step_model.kv_cache_bytes_per_token(part, kv)
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
                dispatch_dtype=DEFAULT_DISPATCH_DTYPE, achievable=True):
    """Chapter *Mixtures of experts*: the three ways engines lay an MoE model over
    `n_devices` GPUs, side by side for one decode step of `batch` sequences in all:
    "TP" (every expert split 1/N, `tp_step_s`), "EP + TP attention" and
    "EP + DP attention" (`ep_decode_breakdown`). One row each: ms per step (a sequence's
    time per output token), tokens/s in all and per GPU, the step's parts (non-expert,
    experts, communication, ms), GB of weights and KV cache per GPU and whether they fit.
    A layout the model's shapes do not allow is left out (its reason in `attrs`).
    `achievable`: False the ceilings; True (the default, or an `achievable.Efficiency`) each
    layout's step on the achievable model (`ep_decode_breakdown`, `tp_step_s`)."""
    import pandas as pd

    m = _moe(model)
    rows, skipped = {}, {}
    try:
        tp = tp_step_s(m, accelerator, n_devices, batch, context, dtype=dtype,
                       interconnect=interconnect, network=network, kv_dtype=kv_dtype,
                       achievable=achievable, parts=True)
        ops = tp["ops"]["seconds"]
        expert_s = float(ops.get("experts", 0.0))
        fits = (tp["weight_bytes_per_device"] + tp["kv_bytes_per_device"]
                + _llm.DEFAULT_RESERVE_BYTES <= _hardware.get(accelerator).memory_bytes)
        rows[LAYOUTS[0]] = {"ms_per_step": 1e3 * tp["total_s"], "tokens_per_s": batch / tp["total_s"],
                      "tokens_per_s_per_gpu": batch / tp["total_s"] / tp["n_devices"],
                      "non_expert_ms": 1e3 * (tp["shard_s"] - expert_s),
                      "experts_ms": 1e3 * expert_s, "comm_ms": 1e3 * tp["comm_s"],
                      "weight_GB_per_gpu": tp["weight_bytes_per_device"] / 1e9,
                      "kv_GB_per_gpu": tp["kv_bytes_per_device"] / 1e9, "fits": bool(fits)}
    except ValueError as e:
        skipped[LAYOUTS[0]] = str(e)
    for label, mode in zip(LAYOUTS[1:], ("tp", "dp")):
        try:
            ep = ep_decode_breakdown(m, accelerator, n_devices, batch, context, dtype,
                                     interconnect, attention=mode, network=network,
                                     kv_dtype=kv_dtype, imbalance=imbalance,
                                     dispatch_dtype=dispatch_dtype, achievable=achievable)
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


@functools.lru_cache(maxsize=4096)
def _layouts_cached(model, accelerator, n_devices, batch, context, dtype, achievable):
    return moe_layouts(model, accelerator, n_devices, batch, context, dtype,
                       achievable=achievable)


def _layout_row(m, acc, n, batch, context, dtype, layout, achievable=False):
    """`moe_layouts`' row for `layout` (None where the layout does not apply), cached for
    the catalogue's accelerators: a search asks for the same step several times."""
    eff = _achievable.as_efficiency(achievable)
    if isinstance(acc, str):
        table = _layouts_cached(m, _hardware.get(acc).name, n, batch, context, dtype, eff)
    else:
        table = moe_layouts(m, acc, n, batch, context, dtype, achievable=eff)
    return table.loc[layout] if layout in table.index else None


def moe_max_batch_within(model, accelerator, n_devices, context, tpot_s, *, dtype="fp16",
                         layout="EP + DP attention", achievable=True) -> int:
    """The largest batch (sequences, all `n_devices` together, each at `context` cached
    tokens) whose decode step in `layout` (one of `LAYOUTS`, as `moe_layouts` prices it)
    fits in every device's memory (less `llm.DEFAULT_RESERVE_BYTES`) and takes at most
    `tpot_s` seconds; `tpot_s=None` asks for memory alone. 0 if batch 1 already fails, or
    the layout does not apply to the model's shapes. The step grows with the batch and
    memory fills, so the question is monotone: `search.largest_meeting` doubles, then
    bisects. `achievable`: False the ceiling's step; True (the default, or an
    `achievable.Efficiency`) the achievable model's, the step an engine would take."""
    m = _moe(model)
    n = check_devices(n_devices)
    c = _v.count("context", context, minimum=0, maximum=1 << 30)
    layout = _v.choice("layout", layout, LAYOUTS)
    limit_ms = None if tpot_s is None else 1e3 * _v.positive("tpot_s", tpot_s)
    if limit_ms is None and c == 0:
        raise ValueError("context=0 with tpot_s=None: with nothing cached, memory alone "
                         "bounds no batch; give a context of at least 1 token or a tpot_s")
    _dtypes.formats(dtype)
    eff = _achievable.as_efficiency(achievable)

    def ok(batch):
        r = _layout_row(m, accelerator, n, batch, c, dtype, layout, eff)
        return r is not None and bool(r["fits"]) and (
            limit_ms is None or r["ms_per_step"] <= limit_ms)
    return _search.largest_meeting(ok, 1, None)


def _weight_format(name, dtype):
    """A weight format's name, checked against `dtypes` (for `moe_options`' `formats`)."""
    if not isinstance(dtype, str):
        raise TypeError(f"{name} must be a weight format's name (a string), got {dtype!r}")
    _dtypes.formats(dtype)
    return dtype


def moe_options(model, options=LAYOUTS, *, tpot_s, context, prices, n_devices,
                formats=("fp16",), achievable=True):
    """Every (GPU, weight format, layout) for serving an MoE `model` on `n_devices` GPUs,
    every sequence at `context` cached tokens, each decode step within `tpot_s` seconds,
    cheapest first: a DataFrame with `GPU`, `format`, `layout`, `batch` (the largest that
    fits and meets the objective, `moe_max_batch_within`), `memory_batch` (the largest
    memory alone allows), `step_ms`, `tokens_per_s` (all GPUs) and `usd_per_million`
    (the group's N GPUs at their price, fully busy: `cost.cost_per_million`), and beside
    them `ceiling_step_ms` and `ceiling_tokens_per_s`, the roofline's step at that batch
    (the bound the achievable figures stay under); NaN where no batch meets the objective.
    `achievable`: True (default) decides on the achievable model (`ep_decode_breakdown`),
    as every decision in the course does; False on the ceilings (more batch and tokens
    than an engine reaches: a bound, not a plan).

    `prices` maps each accelerator to compare to its price in USD (or any currency) per
    GPU-hour, e.g. {"H200": cost.price_per_gpu_hour("AWS p5e.48xlarge (Capacity Block)")}.
    `options`: the layouts to compare, some of `LAYOUTS`; `formats`: weight formats
    (`dtypes`)."""
    import pandas as pd

    m = _moe(model)
    n = check_devices(n_devices)
    prices = check_gpu_prices(prices)
    formats = _v.each("formats", formats, _weight_format)
    layouts = _v.each("options", options, lambda name, x: _v.choice(name, x, LAYOUTS))
    c = _v.count("context", context, minimum=0, maximum=1 << 30)
    eff = _achievable.as_efficiency(achievable)
    rows = []
    for acc, price in prices.items():
        for dtype in formats:
            for layout in layouts:
                b = moe_max_batch_within(m, acc, n, c, tpot_s, dtype=dtype,
                                         layout=layout, achievable=eff)
                # memory alone: at least one cached token a sequence (as tp_options counts)
                mem = moe_max_batch_within(m, acc, n, max(c, 1), None, dtype=dtype,
                                           layout=layout, achievable=False)
                r = _layout_row(m, acc, n, b, c, dtype, layout, eff) if b else None
                top = _layout_row(m, acc, n, b, c, dtype, layout) if b else None
                tps = float(r["tokens_per_s"]) if b else float("nan")
                rows.append({"GPU": _hardware.get(acc).name, "format": dtype,
                             "layout": layout, "batch": b, "memory_batch": mem,
                             "step_ms": float(r["ms_per_step"]) if b else float("nan"),
                             "tokens_per_s": tps,
                             "usd_per_million": (float(_cost.cost_per_million(n * price, tps))
                                                 if b else float("nan")),
                             "ceiling_step_ms": float(top["ms_per_step"]) if b else float("nan"),
                             "ceiling_tokens_per_s": (float(top["tokens_per_s"]) if b
                                                      else float("nan"))})
    return pd.DataFrame(rows).sort_values("usd_per_million").reset_index(drop=True)

