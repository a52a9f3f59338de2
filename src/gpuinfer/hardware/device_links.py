"""Links between devices (NVLink, PCIe, networks) and NCCL's cost model per protocol.
Chapter: *Beyond one GPU*. A separate table: the links between devices, not the devices.

Bandwidth is stated PER DIRECTION (bytes/s a device can send while it also receives as
much). NVIDIA datasheets quote NVLink and PCIe as the *bidirectional* total (send plus
receive: "900 GB/s" for H100 NVLink is 450 GB/s each way); a ring all-reduce sends one
way round the ring, so its time uses the per-direction figure, as nccl-tests' "bus
bandwidth" does. `bidirectional_bytes_per_s` gives the datasheet's number back.

`domain_gpus`: how many GPUs share the link's domain, i.e. the largest group that talks
over it. HGX/DGX A100, H100, H200 and B200 connect 8 GPUs by NVLink/NVSwitch; beyond 8,
traffic crosses the network (InfiniBand), unless the system is an NVLink-switch rack
(GH200 NVL32: 32; GB200 NVL72: 72). A network reaches any number of nodes (math.inf).

Latency: NCCL's own cost model (src/graph/tuning.cc at the commit cited), per algorithm
and protocol: a fixed cost per call (`base_latency_s`) plus a cost per ring step
(`step_latency_s`; an all-reduce on N devices takes 2(N-1) steps). The attributes
`step_latency_s`/`base_latency_s` of an Interconnect are the Ring/LL values (the
small-message protocol); `Interconnect.nccl(protocol)` and `nccl_protocols()` give all
of them. They are NCCL's estimates at that commit, not measurements.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from dataclasses import dataclass

from gpuinfer import validate as _v
from gpuinfer.hardware.devices import (A100_DATASHEET, BLACKWELL_DATASHEET, GB, V100_DATASHEET,
                                       Table, catalogue_entry, check_text, names)
from gpuinfer.hardware import get

_NCCL_COMMIT = "5067397c2676d5aed50042fc39e5c8ee96eb0027"
_NCCL_TUNING = f"https://github.com/NVIDIA/nccl/blob/{_NCCL_COMMIT}/src/graph/tuning.cc"
_NCCL_LL128 = "https://github.com/NVIDIA/nccl/issues/281"
_NCCL_NVLS = "https://github.com/NVIDIA/nccl/issues/1031"
_NCCL_TOPO = f"https://github.com/NVIDIA/nccl/blob/{_NCCL_COMMIT}/src/graph/topo.h"
#: The bandwidth NCCL's topology gives one NVLink, GB/s a direction, by GPU generation
#: (topo.h: SM70_NVLINK_BW 20.0, SM80 20.0, SM90 20.6, SM100 40.1), against the 25, 25,
#: 25 and 50 GB/s the datasheets quote. topo.cc connects a GPU's links at count x this
#: figure, and the ring's bus bandwidth (nChannels x bwIntra, tuning.cc) cannot exceed
#: it: on an H100, 18 x 20.6 = 370.8 GB/s, not 450.
NCCL_NVLINK_GB_PER_S = {"volta": 20.0, "ampere": 20.0, "hopper": 20.6, "blackwell": 40.1}

_US = 1e-6
_PROTOCOLS_ALL = ("LL", "LL128", "Simple")
#: NCCL's baseLatencies (us) per algorithm and protocol (LL, LL128, Simple), tuning.cc.
_NCCL_BASE_US = {"ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4},
                 "tree": {"LL": 6.8, "LL128": 14.0, "Simple": 8.4}}
#: NCCL's hwLatencies (us per step) per link kind, algorithm and protocol, tuning.cc.
_NCCL_HW_US = {
    "nvlink": {"ring": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4},
               "tree": {"LL": 0.6, "LL128": 1.25, "Simple": 4.0}},
    "pcie": {"ring": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7},
             "tree": {"LL": 1.0, "LL128": 1.9, "Simple": 4.0}},
    "network": {"ring": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0},
                "tree": {"LL": 5.0, "LL128": 8.5, "Simple": 14.0}},
}
#: The share of a link's bandwidth each protocol reaches in NCCL's model (tuning.cc).
_NCCL_FRACTION = {
    "ring": {"LL": (0.5, "busBw * .5, and at most llMaxBws (NCCL_LL_MAX_BUS_BANDWIDTH): LL "
                         "sends 4 B of data with a 4 B flag in each 8 B store (" + _NCCL_LL128 + ")"),
             "LL128": (0.92, "busBw * 0.92 (the source comments 120.0/128.0: 120 B of data per "
                             "128 B line; NCCL's maintainer gives ~95%, " + _NCCL_LL128 + "), and "
                             "at most perChMaxRingLL128Bws x channels"),
             "Simple": (1.0, "the full bus bandwidth")},
    "tree": {"LL": (0.92 / 3.8, "all-reduce busBw * .92, then * 1/3.8 for LL"),
             "LL128": (0.92 * 7 / 9, "all-reduce busBw * .92, then * 7/9 on one node "
                                     "(* 120/128 across nodes)"),
             "Simple": (0.92, "all-reduce busBw * .92")},
}
#: The tree's LL128 share across nodes: busBw * .92 * 120/128 (tuning.cc: 7/9 is for
#: one node only, "nNodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0").
NCCL_TREE_LL128_MULTINODE_FRACTION = 0.92 * 120 / 128
# tuning.cc also multiplies a tree's bus bandwidth by .85 when the topology search ends
# on the plain TREE pattern (all of a node's network traffic through one GPU): the search
# starts from BALANCED_TREE (init.cc) and falls back to TREE only when that fails (on
# Hopper and later, search.cc) or with one GPU a node. The course models the HGX node's
# default balanced tree (8 GPUs a node), so it does not apply the .85.

#: NCCL's treeCorrectionFactor (tuning.cc, at the commit cited): "Trees are not perfectly
#: sticking to the model for medium sizes". `ncclTopoGetAlgoTime` multiplies the TREE
#: all-reduce's bandwidth by [protocol][log2i(nBytes >> 6)] when that index is 0..22
#: (64 B up to 512 MB - 1; 1.0 outside). The table has 24 columns; the 24th serves only
#: NVLS_TREE on Blackwell x86 hosts.
NCCL_TREE_CORRECTION = {
    "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9,
           1.0, 1.0, 1.0, 1.0, 1.0),
    "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9,
              .9, .9, .9, 1.0, 1.0, 1.0),
    "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7,
               .7, .8, .9, .9, .9),
}
NCCL_TREE_CORRECTION_SOURCE = _NCCL_TUNING + " (treeCorrectionFactor, ncclTopoGetAlgoTime)"


def nccl_tree_correction(n_bytes, protocol) -> float:
    """The factor NCCL multiplies into a tree all-reduce's bandwidth for `n_bytes`
    (`NCCL_TREE_CORRECTION`): index log2i(n_bytes >> 6), i.e. floor(log2(n_bytes // 64)),
    used when 0 <= index < 23, else 1.0 (under 64 B, or 512 MB and over)."""
    proto = _v.choice("protocol", protocol, _PROTOCOLS_ALL, normalise=lambda s: s.lower())
    chunks = int(_v.non_negative("n_bytes", n_bytes)) >> 6
    if chunks == 0:
        return 1.0
    index = chunks.bit_length() - 1
    return NCCL_TREE_CORRECTION[proto][index] if index < 23 else 1.0


#: NCCL's latency factor for a multi-node ring all-reduce on the Simple protocol
#: ("Plateau effect of ring", ncclTopoGetAlgoTime): x1.9 below compute capability 8.0
#: (Volta), x1.4 from Ampere on, when nBytes / (nChannels x nRanks) >= 64.
NCCL_RING_SIMPLE_MULTINODE_LATENCY = {"volta": 1.9, "later": 1.4, "min_bytes_per_channel_rank": 64,
                                      "source": _NCCL_TUNING + " (ncclTopoGetAlgoTime)"}
#: NCCL's llMaxBws on one node (GB/s of bus bandwidth), by GPU architecture (tuning.cc):
#: LL never exceeds these however fast the link.
NCCL_LL_MAX_BUS_BANDWIDTH = {"volta": 39.0e9, "ampere": 87.7e9, "hopper": 141.0e9,
                             "blackwell": 282.0e9}
#: NVLink SHARP (NVLS): NVSwitch reduces in the network, NVLink only, Hopper and later.
#: In tuning.cc its latency is one hwLatencies[NVLINK][NVLS][Simple] = 25 us (no per-step
#: term) and its bus bandwidth is the NVLink bandwidth x nvlsEfficiency (0.85 Hopper,
#: 0.74 Blackwell) x (channels - 1)/channels, doubled for an all-reduce.
NCCL_NVLS = {"latency_s": 25 * _US, "efficiency": {"hopper": 0.85, "blackwell": 0.74},
             "source": f"{_NCCL_TUNING}; what NVLS is: {_NCCL_NVLS}"}
#: NVLS_TREE: NVLS inside each node, a tree between nodes (all-reduce across nodes only;
#: tuning.cc disables it on one node). Simple protocol only. Latency: baseLatencies 0 +
#: hwLatencies[NVLINK][NVLS_TREE] 25 us + 2 log2(nodes) x hwLatencies[NET][NVLS_TREE]
#: 20.9 us (the tree's 14 us when one GPU a node), plus the graph's network latency twice
#: a network step (latencyInter, 0 unless the NIC reports one). Bus bandwidth a channel:
#: min(NVLink bwIntra x nvlsEfficiency x (nCh-1)/nCh x 2 (all-reduce), bwInter (x2 on two
#: nodes), perChMaxNVLSTreeBws: Hopper 57.7 GB/s on 2 nodes, 45.5 on more; Blackwell 96,
#: 80); algorithm bandwidth = busBw x N / (2(N-1)), as for the ring.
NCCL_NVLS_TREE = {"latency_intra_s": 25 * _US, "latency_net_s": 20.9 * _US,
                  "latency_net_one_gpu_a_node_s": 14 * _US,
                  "per_channel_max_bus_bytes_per_s": {"hopper": {2: 57.7e9, "more": 45.5e9},
                                                      "blackwell": {2: 96.0e9, "more": 80.0e9}},
                  "source": _NCCL_TUNING}
#: One-shot all-reduce: each rank writes its whole input to every peer's buffer and
#: reduces locally, one round instead of 2(N-1) ring steps: lower latency for small
#: messages, N-1 times the bytes sent. Two-shot: reduce-scatter then all-gather by direct
#: writes. Used by vLLM's and TensorRT-LLM's custom all-reduce kernels.
ONE_SHOT_ALLREDUCE_NOTE = (
    "One-shot: each rank stores its shard to all others, then reduces locally (small "
    "messages, lowest latency); two-shot: scatter, reduce, broadcast (larger messages). "
    "https://docs.flashinfer.ai/generated/flashinfer.comm.trtllm_mnnvl_ar.trtllm_mnnvl_allreduce.html; "
    "vLLM's custom all-reduce for decode (NCCL's ring is O(n) steps of latency): "
    "https://github.com/vllm-project/vllm/pull/2192")

NcclCost = collections.namedtuple(
    "NcclCost", "algorithm protocol base_latency_s step_latency_s bandwidth_fraction "
                "bandwidth_bytes_per_s")
NcclCost.__doc__ = ("NCCL's model of one (algorithm, protocol) on a link: a call costs "
                    "base_latency_s + steps x step_latency_s + bytes / bandwidth_bytes_per_s "
                    "(= the link's per-direction bandwidth x bandwidth_fraction).")

#: NCCL's protocols by (algorithm, protocol): base latency (s), per-step latency (s) on
#: NVLink, PCIe and the network, and the share of the link bandwidth reached.
NCCL_PROTOCOLS = {
    (alg, proto): {"base_latency_s": _NCCL_BASE_US[alg][proto] * _US,
                   **{f"step_latency_s_{kind}": _NCCL_HW_US[kind][alg][proto] * _US
                      for kind in ("nvlink", "pcie", "network")},
                   "bandwidth_fraction": _NCCL_FRACTION[alg][proto][0],
                   "bandwidth_note": _NCCL_FRACTION[alg][proto][1]}
    for alg in ("ring", "tree") for proto in ("LL", "LL128", "Simple")}
_PROTOCOLS = ("LL", "LL128", "Simple")

# NCCL's Ring/LL model: the latency every link in the table carries by default.
_NCCL_RING_LL_BASE_S = NCCL_PROTOCOLS[("ring", "LL")]["base_latency_s"]
_NCCL_STEP_S = {kind: NCCL_PROTOCOLS[("ring", "LL")][f"step_latency_s_{kind}"]
                for kind in ("nvlink", "pcie", "network")}

_LINK_KINDS = ("nvlink", "pcie", "network")
_SCOPES = ("per GPU", "per node")


def nccl_protocols():
    """NCCL's cost model per (algorithm, protocol) as a DataFrame: base latency (s),
    per-step latency on NVLink, PCIe and the network (s), and the bandwidth fraction each
    protocol reaches, from src/graph/tuning.cc (`latency_source` of every link).

    How NCCL combines them (tuning.cc): a ring all-reduce on N ranks over n nodes costs
    base + (2(N-1) - 2(n-1)) x intra-node step + 2(n-1) x network step (an intra step
    is at least NCCL's net overhead, 1 us on Intel hosts, 2 us on AMD, x3 for Simple,
    when n > 1); a tree all-reduce costs base + 2 x ((N/n - 1) x intra step + log2(n) x
    network step), and NCCL halves a tree's bus bandwidth into its algorithm bandwidth,
    then scales it by `nccl_tree_correction` (medium sizes); a multi-node Simple ring's
    latency is x1.4 (x1.9 on Volta), `NCCL_RING_SIMPLE_MULTINODE_LATENCY`.
    LL128 is enabled by default only over NVLink (and, on Hopper and later, across
    nodes): NCCL relies on 128-byte stores arriving in order (https://github.com/NVIDIA/nccl/issues/786).
    NVLS and one-shot all-reduce are described by `NCCL_NVLS` and
    `ONE_SHOT_ALLREDUCE_NOTE`."""
    import pandas as pd

    df = pd.DataFrame([{"algorithm": a, "protocol": p, **v}
                       for (a, p), v in NCCL_PROTOCOLS.items()])
    df["source"] = _NCCL_TUNING
    return df.set_index(["algorithm", "protocol"])


@dataclass(frozen=True)
class Interconnect:
    """A link between devices: per-direction bandwidth (bytes/s), NCCL's latency model (s),
    the size of its domain, and where each number comes from. `scope` says what the
    bandwidth belongs to: one GPU's links ("per GPU") or one server's network ports
    together ("per node"). `step_latency_s`/`base_latency_s` are NCCL's Ring/LL values;
    `nccl(protocol, algorithm)` gives the others. `domain_gpus`: how many GPUs share the
    link's domain (8 for HGX NVLink; math.inf for a network). `nccl_bandwidth_bytes_per_s`:
    the bus bandwidth NCCL's topology assigns the link (NVLink: links x
    `NCCL_NVLINK_GB_PER_S`, below the datasheet); NCCL's protocols scale that, not the
    datasheet (math.inf: the link's own figure)."""

    name: str
    kind: str  # "nvlink", "pcie" or "network"
    scope: str  # "per GPU" or "per node"
    bandwidth_bytes_per_s: float  # per direction
    step_latency_s: float
    base_latency_s: float
    source: str
    latency_source: str = _NCCL_TUNING
    note: str = ""
    gpus: tuple = ()  # catalogue GPUs that carry this link (NVLink generations)
    aliases: tuple = ()
    domain_gpus: float = math.inf
    domain_source: str = ""
    nccl_bandwidth_bytes_per_s: float = math.inf

    def __post_init__(self):
        name = check_text("name", self.name)
        if not name.strip():
            raise ValueError("name must be a non-empty string")
        _v.choice("kind", self.kind, _LINK_KINDS)
        _v.choice("scope", self.scope, _SCOPES)
        object.__setattr__(self, "bandwidth_bytes_per_s",
                           _v.positive("bandwidth_bytes_per_s", self.bandwidth_bytes_per_s))
        for attr in ("step_latency_s", "base_latency_s"):
            object.__setattr__(self, attr, _v.non_negative(attr, getattr(self, attr)))
        if self.nccl_bandwidth_bytes_per_s != math.inf:
            object.__setattr__(self, "nccl_bandwidth_bytes_per_s", _v.positive(
                "nccl_bandwidth_bytes_per_s", self.nccl_bandwidth_bytes_per_s))
        for attr in ("source", "latency_source", "note", "domain_source"):
            check_text(attr, getattr(self, attr))
        if self.domain_gpus != math.inf:
            object.__setattr__(self, "domain_gpus",
                               _v.count("domain_gpus", self.domain_gpus, minimum=1))
        for attr in ("gpus", "aliases"):
            value = getattr(self, attr)
            if isinstance(value, str) or not isinstance(value, (tuple, list)):
                raise TypeError(f"{attr} must be a tuple of names, got {value!r}")
            object.__setattr__(self, attr, tuple(check_text(f"each of {attr}", x) for x in value))

    @property
    def bidirectional_bytes_per_s(self) -> float:
        """Send plus receive: the figure datasheets quote for NVLink and PCIe."""
        return 2 * self.bandwidth_bytes_per_s

    @property
    def nccl_bus_bandwidth_bytes_per_s(self) -> float:
        """The bus bandwidth NCCL's cost model starts from (bytes/s a direction): the
        smaller of the datasheet's and NCCL's topology figure (H100 NVLink 4: 370.8e9)."""
        return min(self.bandwidth_bytes_per_s, self.nccl_bandwidth_bytes_per_s)

    def nccl(self, protocol="LL", algorithm="ring") -> NcclCost:
        """NCCL's cost model of `protocol` ("LL", "LL128", "Simple") and `algorithm`
        ("ring", "tree") on this link: base latency, per-step latency and the bandwidth
        it reaches (NCCL's bus bandwidth for the link, `nccl_bus_bandwidth_bytes_per_s`,
        x the protocol's fraction)."""
        alg = _v.choice("algorithm", algorithm.lower() if isinstance(algorithm, str)
                        else algorithm, ("ring", "tree"))
        proto = _v.choice("protocol", protocol, _PROTOCOLS,
                          normalise=lambda s: s.lower())
        row = NCCL_PROTOCOLS[(alg, proto)]
        return NcclCost(alg, proto, row["base_latency_s"], row[f"step_latency_s_{self.kind}"],
                        row["bandwidth_fraction"],
                        self.nccl_bus_bandwidth_bytes_per_s * row["bandwidth_fraction"])

    @property
    def protocols(self) -> dict:
        """Ring protocols NCCL uses on this link by default: {"LL": NcclCost, ...}.
        LL128 is left out on PCIe (NCCL enables it by default only over NVLink and,
        on Hopper+, the network)."""
        kinds = [p for p in _PROTOCOLS if not (p == "LL128" and self.kind == "pcie")]
        return {p: self.nccl(p) for p in kinds}


_HGX_DOMAIN = ("8 GPUs per HGX/DGX board by NVLink/NVSwitch; beyond it, the network: "
               "'NVLink is only supported within a single node (e.g. 8 or 16 GPUs)', "
               f"{_NCCL_NVLS}; 'Only eight GPUs could be integrated with NVLink into a "
               "single GPU in the previous generation', NVIDIA on DGX GH200, "
               "https://thefederalnewswire.com/stories/643307572-huang-dgx-gh200-ai-"
               "supercomputers-expands-the-frontier-of-ai")


def _nvlink(name, bidirectional_gb_per_s, source, note, aliases=(), domain_gpus=8,
            domain_source=_HGX_DOMAIN, *, links, architecture):
    """`links` NVLinks a GPU; NCCL's topology prices each at NCCL_NVLINK_GB_PER_S of its
    `architecture` (topo.h), which bounds every NCCL bus bandwidth on the link. The GPUs
    that carry it are the catalogue entries whose `nvlink` names it."""
    per_link = NCCL_NVLINK_GB_PER_S[architecture]
    gpus = tuple(n for n in names() if catalogue_entry(n).nvlink == name)
    return Interconnect(
        name, "nvlink", "per GPU", bidirectional_gb_per_s * GB / 2,
        _NCCL_STEP_S["nvlink"], _NCCL_RING_LL_BASE_S, source,
        note=f"Datasheet: {bidirectional_gb_per_s:,} GB/s per GPU, bidirectional. " + note
             + f" NCCL's topology: {links} links x {per_link} GB/s = {links * per_link:,.1f} "
               f"GB/s a direction ({_NCCL_TOPO}).",
        gpus=gpus, aliases=aliases, domain_gpus=domain_gpus, domain_source=domain_source,
        nccl_bandwidth_bytes_per_s=links * per_link * GB)


def _pcie(generation, giga_transfers_per_s, lanes=16, source="https://pcisig.com/specifications",
          note="", gpus=()):
    """PCIe from the specification: lanes x transfer rate x 128/130 (the 128b/130b line
    code of Gen3 to Gen5) / 8 bits, per direction."""
    per_direction = lanes * giga_transfers_per_s * 1e9 * 128 / 130 / 8
    return Interconnect(
        f"PCIe Gen{generation} x{lanes}", "pcie", "per GPU", per_direction,
        _NCCL_STEP_S["pcie"], _NCCL_RING_LL_BASE_S, source,
        note=f"{giga_transfers_per_s} GT/s a lane, 128b/130b encoding. NVIDIA datasheets "
             f"round it to {2 * lanes * giga_transfers_per_s // 8} GB/s bidirectional. " + note,
        aliases=(f"pcie{generation}", f"pcie gen{generation}"), gpus=gpus, domain_gpus=8,
        domain_source="ASSUMED: an 8-GPU PCIe server; a limit of the chassis, not of PCIe "
                      "(no source read)")


def _network(name, ports, gbit_per_s, source, note, aliases=()):
    """A server's network: ports x line rate (Gb/s) / 8, per direction, for the node."""
    return Interconnect(
        name, "network", "per node", ports * gbit_per_s * 1e9 / 8, _NCCL_STEP_S["network"],
        _NCCL_RING_LL_BASE_S, source,
        note=f"{ports} x {gbit_per_s} Gb/s port{'s' if ports > 1 else ''}, line rate "
             "(protocol headers take a few percent). " + note, aliases=aliases,
        domain_gpus=math.inf, domain_source="a network reaches any number of nodes")


_INTERCONNECTS = [
    _nvlink("NVLink 2", 300, V100_DATASHEET,
            "Six links of 25 GB/s each way. DGX-1 joins 8 V100s in a hybrid cube-mesh: "
            "not every pair is directly linked.", aliases=("nvlink2", "nvlink v100"),
            domain_source="8 GPUs (DGX-1): UNSOURCED here", links=6, architecture="volta"),
    _nvlink("NVLink 3", 600, A100_DATASHEET,
            "A100 SXM: twelve links of 25 GB/s each way.", aliases=("nvlink3", "nvlink a100"),
            links=12, architecture="ampere"),
    _nvlink("NVLink 4", 900, "https://www.nvidia.com/en-us/data-center/h100/",
            "H100 SXM and H200 SXM (https://www.nvidia.com/en-us/data-center/h200/): "
            "eighteen links of 25 GB/s each way.",
            aliases=("nvlink4", "nvlink h100", "nvlink h200"), links=18, architecture="hopper"),
    _nvlink("NVLink 5", 1800, BLACKWELL_DATASHEET,
            "HGX B200, per GPU (8 GPUs, 14.4 TB/s total): eighteen links of 50 GB/s each way.",
            aliases=("nvlink5", "nvlink b200"), links=18, architecture="blackwell"),
    _nvlink("NVLink bridge (H100 NVL pair)", 600,
            "https://www.aiminingco.com/gpu/h100-nvl/specs",
            "H100 NVL cards are bridged in pairs (600 GB/s bidirectional: twelve NVLink 4 "
            "links of 25 GB/s each way, derived from the total).",
            aliases=("h100 nvl bridge",), domain_gpus=2,
            domain_source="a pair of cards: https://www.aiminingco.com/gpu/h100-nvl/specs",
            links=12, architecture="hopper"),
    _nvlink("NVLink 4 (GH200 NVL32)", 900,
            "https://developer.nvidia.com/blog/one-giant-superchip-for-llms-recommenders-and-"
            "gnns-introducing-nvidia-gh200-nvl32/",
            "NVLink-switch rack of 32 GH200 superchips; the GPU's NVLink 4 is 900 GB/s "
            "(https://en.wikipedia.org/wiki/NVLink), eighteen links. A GH200 rented alone has "
            "no NVLink peer.", links=18, architecture="hopper",
            aliases=("gh200 nvl32", "nvl32"), domain_gpus=32,
            domain_source="'a 32-GPU NVIDIA NVLink domain': https://developer.nvidia.com/blog/"
                          "one-giant-superchip-for-llms-recommenders-and-gnns-introducing-"
                          "nvidia-gh200-nvl32/"),
    _nvlink("NVLink 5 (GB200 NVL72)", 1800, BLACKWELL_DATASHEET,
            "NVLink-switch rack: 72 Blackwell GPUs, 130 TB/s of NVLink in total (eighteen "
            "links a GPU).", aliases=("gb200 nvl72", "nvl72"), domain_gpus=72,
            links=18, architecture="blackwell",
            domain_source="72 GPUs, 130 TB/s: " + BLACKWELL_DATASHEET),
    _pcie(3, 8, source="https://pcisig.com/specifications; the T4 is a PCI Express Gen3 "
                       "card (x8 and x16 supported): https://manualmachine.com/pny/tcst4mpb/"
                       "8129101-user-manual",
          note="The T4's host link. Copies reach less: OpenCL on a T4 measured 8.9 GB/s "
               "host-to-device and 7.9 GB/s back (https://github.com/GPGPUCourse/"
               "GPGPUTasks2025/pull/309)."),
    _pcie(4, 16),
    _pcie(5, 32),
    _network("InfiniBand HDR x8", 8, 200,
             "https://docs.nvidia.com/dgx/dgxa100-user-guide/introduction-to-dgxa100.html",
             "A DGX A100 node: eight ConnectX-6 HDR ports, one per GPU.",
             aliases=("hdr", "infiniband hdr", "dgx a100 network")),
    _network("InfiniBand NDR x8", 8, 400,
             "https://docs.nvidia.com/dgx/dgxh100-user-guide/introduction-to-dgxh100.html",
             "A DGX H100 node: eight ConnectX-7 NDR ports, one per GPU.",
             aliases=("ndr", "infiniband ndr", "dgx h100 network")),
    _network("Ethernet 100GbE", 1, 100, "https://www.ieee802.org/3/ba/",
             "One 100 Gb/s port (IEEE 802.3ba): a typical cloud or on-premise node.",
             aliases=("100gbe", "100 gbe")),
    _network("Ethernet 400GbE", 1, 400, "https://www.ieee802.org/3/bs/",
             "One 400 Gb/s port (IEEE 802.3bs).", aliases=("400gbe", "400 gbe")),
]

_LINKS = Table(_INTERCONNECTS, "interconnect", "interconnect")
_UNKNOWN_NVLINKS = sorted({catalogue_entry(n).nvlink for n in names()} - {None}
                          - {i.name for i in _INTERCONNECTS if i.kind == "nvlink"})
if _UNKNOWN_NVLINKS:
    raise ValueError(f"catalogue entries name NVLinks the link table does not have: "
                     f"{', '.join(_UNKNOWN_NVLINKS)}")


def interconnect_names() -> list[str]:
    """The interconnect table's names."""
    return _LINKS.names()


def get_interconnect(name) -> Interconnect:
    """Look up a link by name ("NVLink 4", "PCIe Gen5 x16", "InfiniBand NDR x8") or alias
    ("nvlink4", "ndr"). An Interconnect passes through."""
    return name if isinstance(name, Interconnect) else _LINKS.get(name)


def interconnect_for(accelerator) -> Interconnect:
    """The NVLink a catalogue GPU carries (H100 SXM -> NVLink 4, H100 NVL -> its pair
    bridge, GH200 -> the NVL32 rack). GPUs without NVLink (T4, L4, PCIe cards without a
    bridge, MIG slices) raise KeyError: name a PCIe entry (`host_link` gives the one a
    card sits on: a T4's is PCIe Gen3 x16)."""
    acc = get(accelerator)
    for ic in _INTERCONNECTS:
        if acc.name in ic.gpus:
            return ic
    raise _v.UnknownName(
        f"{acc.name} has no NVLink entry in the interconnect table (cards without NVLink, "
        f"or bridged only in pairs, talk over PCIe): name the link, e.g. "
        f"get_interconnect('PCIe Gen4 x16')")


# The host link (PCIe generation, x16) of catalogue GPUs, where a source says it (each
# entry's `pcie_generation` and `pcie_source`): how a card's host-to-device copies are
# bounded (`host_link`).
_HOST_LINKS = {n: (catalogue_entry(n).pcie_generation, catalogue_entry(n).pcie_source)
               for n in names() if catalogue_entry(n).pcie_generation is not None}


def host_link(accelerator) -> Interconnect:
    """The PCIe link (x16) between a catalogue GPU and its host, where a source gives its
    generation (T4: PCIe Gen3 x16): what bounds host-to-device copies. Others raise a
    KeyError naming the PCIe entries to choose from."""
    acc = get(accelerator)
    if acc.name not in _HOST_LINKS:
        raise _v.UnknownName(
            f"{acc.name}'s host link is not in the table; name one: "
            f"{', '.join(i.name for i in _INTERCONNECTS if i.kind == 'pcie')}")
    generation, source = _HOST_LINKS[acc.name]
    link = get_interconnect(f"PCIe Gen{generation} x16")
    return dataclasses.replace(link, note=f"{acc.name}'s host link ({source}). " + link.note)


def interconnects():
    """The interconnect table as a DataFrame: per-direction and bidirectional bytes/s,
    the bus bandwidth NCCL's topology gives the link, NCCL's Ring/LL latency model, the domain size, the scope of each figure, and sources."""
    import pandas as pd

    return pd.DataFrame([{
        "name": i.name, "kind": i.kind, "scope": i.scope,
        "bandwidth_bytes_per_s_per_direction": i.bandwidth_bytes_per_s,
        "bandwidth_bytes_per_s_bidirectional": i.bidirectional_bytes_per_s,
        "nccl_bus_bandwidth_bytes_per_s": i.nccl_bus_bandwidth_bytes_per_s,
        "step_latency_s": i.step_latency_s, "base_latency_s": i.base_latency_s,
        "domain_gpus": i.domain_gpus, "gpus": ", ".join(i.gpus), "source": i.source,
        "domain_source": i.domain_source, "note": i.note}
        for i in _INTERCONNECTS])
