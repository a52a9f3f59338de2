"""The accelerator catalogue: dense datasheet peaks, one cited row per device.

Chapter: *The roofline model*. Every number is in SI units: bytes, bytes/s (decimal:
1 GB/s = 1e9 B/s), FLOP/s (integer formats: operations/s).

Traps this table gets right (see the course's hardware reference):
- NVIDIA quotes A10, A100, L4, L40S, H100, H200 and B200 tensor-core figures *with 2:4
  structured sparsity*; an ordinary matmul sees half. The table holds the dense figures.
- T4 and V100 have no fast bf16 (Turing emulates it); they have no "bf16" entry, so
  `peak_flops("bf16")` raises rather than returning a number no kernel reaches.
- Memory sizes are the datasheet's marketing gigabytes (1e9 B); `detect()` replaces them
  with what torch reports for the card in front of you.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import warnings
from dataclasses import dataclass, field

from . import dtypes as _dtypes

GB = 1e9
TB = 1e12
TFLOPS = 1e12
MiB = 2**20


@dataclass(frozen=True)
class Accelerator:
    """One device: memory, bandwidth and dense peak rates, with the source of each.

    `peaks` maps a dtype ("fp16", ...) to dense FLOP/s (ops/s for integer formats).
    `cache_bytes` is the last-level cache (L2 on a GPU, L3 on a CPU), or None if unknown.
    """

    name: str
    memory_bytes: float
    bandwidth: float  # bytes/s, datasheet peak
    peaks: dict = field(default_factory=dict)
    tdp_w: float | None = None
    cache_bytes: float | None = None
    kind: str = "gpu"  # "gpu" or "cpu"
    source: str = ""
    note: str = ""
    aliases: tuple = ()

    def peak_flops(self, dtype="fp16") -> float:
        """Dense peak FLOP/s for `dtype` (never the sparse figure)."""
        name = _dtypes.canonical(dtype)
        if name not in self.peaks:
            have = ", ".join(self.peaks) or "none"
            raise ValueError(
                f"{self.name} has no {name} peak in the catalogue; it has: {have}")
        return self.peaks[name]

    def ridge_point(self, dtype="fp16") -> float:
        """Arithmetic intensity (FLOP/byte) where the compute and memory roofs meet."""
        if not self.bandwidth > 0:
            raise ValueError(f"{self.name} has no known bandwidth, so no ridge point")
        return self.peak_flops(dtype) / self.bandwidth

    @property
    def dtypes(self) -> tuple:
        return tuple(self.peaks)


def _peaks(**tflops) -> dict:
    return {k: v * TFLOPS for k, v in tflops.items()}


NVIDIA_SPARSITY = ("Tensor-core figures are dense: half the datasheet's "
                   "'with sparsity' numbers.")

_ENTRIES = [
    Accelerator(
        "T4", 16 * GB, 320 * GB, _peaks(fp16=65, int8=130, fp32=8.1), tdp_w=70,
        cache_bytes=4 * MiB, aliases=("tesla t4",),
        source="https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf",
        note="Colab free tier. No fast bf16 (Turing emulates it, ~2.5 TFLOP/s measured): use fp16."),
    Accelerator(
        "L4", 24 * GB, 300 * GB,
        _peaks(fp16=121, bf16=121, fp8=242, int8=242, tf32=60, fp32=30.3), tdp_w=72,
        cache_bytes=48 * MiB, aliases=("nvidia l4",),
        source="https://www.nvidia.com/en-us/data-center/l4/",
        note="Colab paid tier. " + NVIDIA_SPARSITY),
    Accelerator(
        "A10", 24 * GB, 600 * GB, _peaks(fp16=125, bf16=125, int8=250, tf32=62.5, fp32=31.2),
        tdp_w=150, cache_bytes=6 * MiB, aliases=("nvidia a10",),
        source="https://www.nvidia.com/en-us/data-center/products/a10-gpu/",
        note=NVIDIA_SPARSITY),
    Accelerator(
        "A10G", 24 * GB, 600 * GB, _peaks(fp16=70, bf16=70, fp32=31), tdp_w=150,
        cache_bytes=6 * MiB, aliases=("nvidia a10g",),
        source="https://aws.amazon.com/ec2/instance-types/g5/",
        note="UNCERTAIN: AWS's variant of the A10 has no public datasheet; the tensor "
             "figures are community estimates (~70 TFLOP/s fp16)."),
    Accelerator(
        "L40S", 48 * GB, 864 * GB,
        _peaks(fp16=362, bf16=362, fp8=733, int8=733, tf32=183, fp32=91.6), tdp_w=350,
        cache_bytes=96 * MiB, aliases=("nvidia l40s",),
        source="https://www.nvidia.com/en-us/data-center/l40s/",
        note=NVIDIA_SPARSITY),
    Accelerator(
        "V100 SXM2", 16 * GB, 900 * GB, _peaks(fp16=125, fp32=15.7), tdp_w=300,
        cache_bytes=6 * MiB, aliases=("tesla v100-sxm2-16gb", "tesla v100-sxm2-32gb", "v100"),
        source="https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf",
        note="No sparsity mode: the datasheet figures are dense. No bf16."),
    Accelerator(
        "A100 40GB", 40 * GB, 1555 * GB,
        _peaks(fp16=312, bf16=312, int8=624, tf32=156, fp32=19.5), tdp_w=400,
        cache_bytes=40 * MiB,
        aliases=("nvidia a100-sxm4-40gb", "nvidia a100-pcie-40gb", "a100 40gb sxm", "a100-40gb"),
        source="https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
        note="SXM figures (the 40GB PCIe card has the same bandwidth and peaks, 250 W). "
             + NVIDIA_SPARSITY),
    Accelerator(
        "A100 80GB", 80 * GB, 2039 * GB,
        _peaks(fp16=312, bf16=312, int8=624, tf32=156, fp32=19.5), tdp_w=400,
        cache_bytes=40 * MiB, aliases=("nvidia a100-sxm4-80gb", "a100 80gb sxm", "a100"),
        source="https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
        note="SXM. " + NVIDIA_SPARSITY),
    Accelerator(
        "A100 80GB PCIe", 80 * GB, 1935 * GB,
        _peaks(fp16=312, bf16=312, int8=624, tf32=156, fp32=19.5), tdp_w=300,
        cache_bytes=40 * MiB, aliases=("nvidia a100 80gb pcie",),
        source="https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
        note=NVIDIA_SPARSITY),
    Accelerator(
        "H100 SXM", 80 * GB, 3350 * GB,
        _peaks(fp16=989, bf16=989, fp8=1979, int8=1979, tf32=494.5, fp32=67), tdp_w=700,
        cache_bytes=50 * MiB, aliases=("nvidia h100 80gb hbm3", "h100", "nvidia h100"),
        source="https://www.nvidia.com/en-us/data-center/h100/",
        note=NVIDIA_SPARSITY),
    Accelerator(
        "H100 PCIe", 80 * GB, 2000 * GB,
        _peaks(fp16=756, bf16=756, fp8=1513, int8=1513, tf32=378, fp32=51), tdp_w=350,
        cache_bytes=50 * MiB, aliases=("nvidia h100 pcie",),
        source="https://www.nvidia.com/en-us/data-center/h100/",
        note=NVIDIA_SPARSITY),
    Accelerator(
        "H200", 141 * GB, 4800 * GB,
        _peaks(fp16=989, bf16=989, fp8=1979, int8=1979, tf32=494.5, fp32=67), tdp_w=700,
        cache_bytes=50 * MiB, aliases=("nvidia h200", "h200 sxm", "nvidia h200 sxm"),
        source="https://www.nvidia.com/en-us/data-center/h200/",
        note="SXM. Same compute as the H100 SXM, more and faster memory. " + NVIDIA_SPARSITY),
    Accelerator(
        "B200", 180 * GB, 8000 * GB,
        _peaks(fp16=2250, bf16=2250, fp8=4500, int8=4500, fp32=80), tdp_w=1000,
        aliases=("nvidia b200",),
        source="https://www.nvidia.com/en-us/data-center/hgx/",
        note="HGX B200, per GPU. " + NVIDIA_SPARSITY),
    Accelerator(
        "MI300X", 192 * GB, 5300 * GB,
        _peaks(fp16=1307, bf16=1307, fp8=2615, int8=2615, fp32=163.4), tdp_w=750,
        aliases=("amd instinct mi300x",),
        source="https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html",
        note="AMD. Dense figures (AMD also quotes sparse ones at twice these)."),
]


def _cpu_entry(name, cores, clock_hz, fp32_flop_per_cycle, channels, mega_transfers,
               source, note, aliases=()) -> Accelerator:
    """A CPU row derived from its parts: DRAM channels x 8 bytes x transfers/s, and
    cores x clock x FLOP/cycle (two 8-wide fp32 FMA pipes = 32 FLOP/cycle)."""
    bandwidth = channels * 8 * mega_transfers * 1e6
    fp32 = cores * clock_hz * fp32_flop_per_cycle
    return Accelerator(name, memory_bytes=64 * GB, bandwidth=bandwidth,
                       peaks={"fp32": fp32}, kind="cpu", source=source, note=note,
                       aliases=aliases)


_ENTRIES += [
    _cpu_entry(
        "CPU", cores=8, clock_hz=4.0e9, fp32_flop_per_cycle=32, channels=2,
        mega_transfers=5600, aliases=("cpu reference", "desktop cpu"),
        source="https://www.jedec.org/standards-documents/docs/jesd79-5c",
        note="Reference desktop CPU, not yours: 8 cores at 4 GHz with two 8-wide fp32 "
             "FMA pipes, dual-channel DDR5-5600 (89.6 GB/s; STREAM typically sustains "
             "75-85%). 64 GB of RAM assumed."),
    _cpu_entry(
        "EPYC 9654", cores=96, clock_hz=2.4e9, fp32_flop_per_cycle=32, channels=12,
        mega_transfers=4800, aliases=("amd epyc 9654", "genoa"),
        source="https://www.amd.com/en/products/processors/server/epyc/4th-generation-9004-and-8004-series/amd-epyc-9654.html",
        note="AMD Genoa server socket at base clock: 12 channels of DDR5-4800 "
             "(460.8 GB/s). Zen 4 runs AVX-512 on two 256-bit FMA pipes."),
]


def _key(name: str) -> str:
    """Normalise a device name: lower case, no vendor prefix, alphanumerics only."""
    name = name.lower().strip()
    name = re.sub(r"^(nvidia|tesla|amd instinct|amd)\s+", "", name)
    return re.sub(r"[^a-z0-9]", "", name)


class _Table:
    """Look-up by name for a catalogue table: names and aliases, normalised by `_key`;
    an unknown name raises KeyError listing the closest entries."""

    def __init__(self, entries, what):
        self.entries, self.what = entries, what
        self.by_key = {}
        for entry in entries:
            for alias in (entry.name, *entry.aliases):
                self.by_key.setdefault(_key(alias), entry)

    def names(self) -> list[str]:
        return [e.name for e in self.entries]

    def get(self, name):
        if not isinstance(name, str) or not name.strip():
            raise KeyError(f"{self.what} name must be a non-empty string, got {name!r}")
        hit = self.by_key.get(_key(name))
        if hit is not None:
            return hit
        close = difflib.get_close_matches(_key(name), list(self.by_key), n=5, cutoff=0.4)
        closest = list(dict.fromkeys(self.by_key[c].name for c in close)) or self.names()
        raise KeyError(f"unknown {self.what} {name!r}; closest catalogue entries: "
                       f"{', '.join(closest)}")


_DEVICES = _Table(_ENTRIES, "device")


def names() -> list[str]:
    """The catalogue's device names."""
    return _DEVICES.names()


def get(name) -> Accelerator:
    """Look up a device by catalogue name ("H100 SXM"), short name ("h100") or the
    name torch reports ("NVIDIA H100 80GB HBM3"). An Accelerator passes through."""
    return name if isinstance(name, Accelerator) else _DEVICES.get(name)


def catalogue():
    """The catalogue as a pandas DataFrame: one row per device, SI units, with sources."""
    import pandas as pd

    all_dtypes = [d for d in _dtypes.DTYPES if any(d in a.peaks for a in _ENTRIES)]
    rows = []
    for a in _ENTRIES:
        row = {"name": a.name, "kind": a.kind, "memory_bytes": a.memory_bytes,
               "bandwidth_bytes_per_s": a.bandwidth}
        for d in all_dtypes:
            row[f"peak_{d}_flops"] = a.peaks.get(d, math.nan)
        row.update({"tdp_w": a.tdp_w, "cache_bytes": a.cache_bytes,
                    "source": a.source, "note": a.note})
        rows.append(row)
    return pd.DataFrame(rows)


def _cpu_cache_bytes() -> float | None:
    for key in ("SC_LEVEL3_CACHE_SIZE", "SC_LEVEL2_CACHE_SIZE"):
        try:
            size = os.sysconf(key)
        except (ValueError, OSError, AttributeError):
            continue
        if size and size > 0:
            return float(size)
    return None


def cpu() -> Accelerator:
    """The reference CPU entry, with this machine's last-level cache size."""
    entry = get("CPU")
    return dataclasses.replace(entry, cache_bytes=_cpu_cache_bytes() or entry.cache_bytes)


def detect() -> Accelerator:
    """The device torch runs on now: the GPU's catalogue entry (with the memory and L2
    size torch reports for this card), or the reference CPU entry.

    A GPU that is not in the catalogue gets an entry built from what torch reports,
    with a warning: its peaks are unknown, so ceilings need a catalogue name instead.
    """
    import torch

    if not torch.cuda.is_available():
        return cpu()
    props = torch.cuda.get_device_properties(0)
    torch_name = torch.cuda.get_device_name(0)
    l2 = getattr(props, "L2_cache_size", 0) or None
    try:
        acc = get(torch_name)
    except KeyError:
        return _from_torch_properties(torch_name, props, l2)
    return dataclasses.replace(acc, memory_bytes=float(props.total_memory),
                               cache_bytes=float(l2) if l2 else acc.cache_bytes)


def _from_torch_properties(torch_name, props, l2) -> Accelerator:
    clock_khz = getattr(props, "memory_clock_rate", 0) or 0
    bus_bits = getattr(props, "memory_bus_width", 0) or 0
    # Double data rate: two transfers per clock, bus width in bits.
    bandwidth = 2 * clock_khz * 1e3 * bus_bits / 8 if clock_khz and bus_bits else math.nan
    warnings.warn(
        f"{torch_name!r} is not in the gpuinfer catalogue: its peak FLOP/s are unknown "
        f"and its bandwidth is {'estimated from clocks' if bandwidth == bandwidth else 'unknown'}. "
        f"Measurements still work; ceilings need a catalogue entry "
        f"(closest: {', '.join(difflib.get_close_matches(_key(torch_name), list(_DEVICES.by_key), n=3, cutoff=0.0))}).",
        stacklevel=3)
    return Accelerator(torch_name, memory_bytes=float(props.total_memory),
                       bandwidth=bandwidth, peaks={}, cache_bytes=float(l2) if l2 else None,
                       source="torch.cuda.get_device_properties",
                       note="Not in the catalogue: built from what torch reports.")


# --- interconnects ----------------------------------------------------------------------
# Chapter: *Beyond one GPU*. A separate table: the links between devices, not the devices.
#
# Bandwidth is stated PER DIRECTION (bytes/s a device can send while it also receives as
# much). NVIDIA datasheets quote NVLink and PCIe as the *bidirectional* total (send plus
# receive: "900 GB/s" for H100 NVLink is 450 GB/s each way); a ring all-reduce sends one
# way round the ring, so its time uses the per-direction figure, as nccl-tests' "bus
# bandwidth" does. `bidirectional_bytes_per_s` gives the datasheet's number back.
#
# Latency: NCCL's own cost model for its small-message ring protocol (LL), from
# src/graph/tuning.cc: a fixed cost per call (`base_latency_s`) plus a cost per ring step
# (`step_latency_s`; an all-reduce on N devices takes 2(N-1) steps). The values are
# NCCL's estimates at the commit cited, not measurements, and change between versions.

_NCCL_TUNING = ("https://github.com/NVIDIA/nccl/blob/"
                "b6475625fbcaa2c3c0e50eed2fa1255d7514d4a2/src/graph/tuning.cc")
_NCCL_RING_LL_BASE_S = 6.6e-6   # baseLat[Ring][LL], microseconds in the source
_NCCL_STEP_S = {"nvlink": 0.6e-6, "pcie": 1.0e-6, "network": 2.7e-6}  # hwLat[..][Ring][LL]


@dataclass(frozen=True)
class Interconnect:
    """A link between devices: per-direction bandwidth (bytes/s), NCCL's latency model (s),
    and where each number comes from. `scope` says what the bandwidth belongs to: one GPU's
    links ("per GPU") or one server's network ports together ("per node")."""

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

    @property
    def bidirectional_bytes_per_s(self) -> float:
        """Send plus receive: the figure datasheets quote for NVLink and PCIe."""
        return 2 * self.bandwidth_bytes_per_s


def _nvlink(generation, bidirectional_gb_per_s, gpus, source, note, aliases=()):
    return Interconnect(
        f"NVLink {generation}", "nvlink", "per GPU", bidirectional_gb_per_s * GB / 2,
        _NCCL_STEP_S["nvlink"], _NCCL_RING_LL_BASE_S, source,
        note=f"Datasheet: {bidirectional_gb_per_s:,} GB/s per GPU, bidirectional. " + note,
        gpus=gpus, aliases=aliases)


def _pcie(generation, giga_transfers_per_s, lanes=16):
    """PCIe from the specification: lanes x transfer rate x 128/130 (the 128b/130b line
    code of Gen3 to Gen5) / 8 bits, per direction."""
    per_direction = lanes * giga_transfers_per_s * 1e9 * 128 / 130 / 8
    return Interconnect(
        f"PCIe Gen{generation} x{lanes}", "pcie", "per GPU", per_direction,
        _NCCL_STEP_S["pcie"], _NCCL_RING_LL_BASE_S, "https://pcisig.com/specifications",
        note=f"{giga_transfers_per_s} GT/s a lane, 128b/130b encoding. NVIDIA datasheets "
             f"round it to {2 * lanes * giga_transfers_per_s // 8} GB/s bidirectional.",
        aliases=(f"pcie{generation}", f"pcie gen{generation}"))


def _network(name, ports, gbit_per_s, source, note, aliases=()):
    """A server's network: ports x line rate (Gb/s) / 8, per direction, for the node."""
    return Interconnect(
        name, "network", "per node", ports * gbit_per_s * 1e9 / 8, _NCCL_STEP_S["network"],
        _NCCL_RING_LL_BASE_S, source,
        note=f"{ports} x {gbit_per_s} Gb/s port{'s' if ports > 1 else ''}, line rate "
             "(protocol headers take a few percent). " + note, aliases=aliases)


_INTERCONNECTS = [
    _nvlink(2, 300, ("V100 SXM2",),
            "https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf",
            "Six links of 25 GB/s each way.", aliases=("nvlink2", "nvlink v100")),
    _nvlink(3, 600, ("A100 40GB", "A100 80GB"),
            "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
            "A100 SXM: twelve links of 25 GB/s each way.", aliases=("nvlink3", "nvlink a100")),
    _nvlink(4, 900, ("H100 SXM", "H200"), "https://www.nvidia.com/en-us/data-center/h100/",
            "H100 SXM and H200 SXM (https://www.nvidia.com/en-us/data-center/h200/): "
            "eighteen links of 25 GB/s each way.",
            aliases=("nvlink4", "nvlink h100", "nvlink h200")),
    _nvlink(5, 1800, ("B200",), "https://www.nvidia.com/en-us/data-center/hgx/",
            "HGX B200, per GPU.", aliases=("nvlink5", "nvlink b200")),
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

_LINKS = _Table(_INTERCONNECTS, "interconnect")


def interconnect_names() -> list[str]:
    """The interconnect table's names."""
    return _LINKS.names()


def get_interconnect(name) -> Interconnect:
    """Look up a link by name ("NVLink 4", "PCIe Gen5 x16", "InfiniBand NDR x8") or alias
    ("nvlink4", "ndr"). An Interconnect passes through."""
    return name if isinstance(name, Interconnect) else _LINKS.get(name)


def interconnect_for(accelerator) -> Interconnect:
    """The NVLink generation of a catalogue GPU (H100 SXM -> NVLink 4). GPUs without
    NVLink in the table (T4, L4, PCIe cards) raise KeyError: name a PCIe entry instead."""
    acc = get(accelerator)
    for ic in _INTERCONNECTS:
        if acc.name in ic.gpus:
            return ic
    raise KeyError(f"{acc.name} has no NVLink entry in the interconnect table (cards "
                   f"without NVLink, or bridged only in pairs, talk over PCIe): name the "
                   f"link, e.g. get_interconnect('PCIe Gen4 x16')")


def interconnects():
    """The interconnect table as a DataFrame: per-direction and bidirectional bytes/s,
    NCCL's latency model, the scope of each figure, and its sources."""
    import pandas as pd

    return pd.DataFrame([{
        "name": i.name, "kind": i.kind, "scope": i.scope,
        "bandwidth_bytes_per_s_per_direction": i.bandwidth_bytes_per_s,
        "bandwidth_bytes_per_s_bidirectional": i.bidirectional_bytes_per_s,
        "step_latency_s": i.step_latency_s, "base_latency_s": i.base_latency_s,
        "gpus": ", ".join(i.gpus), "source": i.source, "note": i.note}
        for i in _INTERCONNECTS])
