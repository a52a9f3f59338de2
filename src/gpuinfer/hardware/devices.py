"""The cited device table: one record per device (GPUs and two reference CPUs), each fact
with its source beside it: dense datasheet peaks, the memory each card really has, the SM
clocks, and for a GPU its NVLink and PCIe generation, its MIG profiles, the matmul and
copy rates measured on it, and the example instances that price it. Adding a GPU is one
`_gpu(...)` entry here and its values in tests/test_gpu_records.py; `links`, `mig`,
`measured` and `cost` read these fields (CONTRIBUTING.md, "Adding a GPU").

Every number is in SI units: bytes, bytes/s (decimal: 1 GB/s = 1e9 B/s), FLOP/s (integer
formats: operations/s), Hz.

Traps this table gets right (see the course's hardware reference):
- NVIDIA quotes A10, A100, L4, L40S, H100, H200 and B200 tensor-core figures *with 2:4
  structured sparsity*; an ordinary matmul sees half. The table holds the dense figures.
- T4 and V100 have no fast bf16 (Turing emulates it); they have no "bf16" entry, so
  `peak_flops("bf16")` raises rather than returning a number no kernel reaches.
- GeForce cards run fp16 tensor-core math with fp32 accumulation at half the rate of fp16
  accumulation; a torch fp16 matmul accumulates in fp32 (cuBLAS `CUDA_R_32F`,
  pytorch/pytorch#123157), so their "fp16" peak is the fp32-accumulate one.
- Memory (`memory_bytes`) is what the card has for CUDA: the `total_memory` torch reports
  (= `cudaDeviceProp.totalGlobalMem`, which deviceQuery prints), cited per row in
  `memory_source`. HBM is sized in binary units, so an "80 GB" H100 reports 85.0e9 B;
  ECC and the driver's reservation take a little (a 16 GB T4 reports 15.8e9). The
  datasheet's figure (decimal GB) is kept in `memory_marketing_bytes`. Where no published
  torch/deviceQuery/nvidia-smi figure was found, `memory_source` starts with "UNSOURCED"
  and the row falls back to the datasheet figure. `detect()` replaces the memory with what
  torch reports for the card in front of you. No reserve is subtracted here: `llm`
  subtracts a stated one.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import difflib
import math
import re
from dataclasses import dataclass, field

from gpuinfer import dtypes as _dtypes
from gpuinfer import validate as _v

GB = 1e9
TFLOPS = 1e12
MiB = 2**20
GiB = 2**30

_KINDS = ("gpu", "cpu")


def _optional_positive(name, value):
    return None if value is None else _v.positive(name, value)


def check_text(name, value):
    """`value` if it is a string, else TypeError naming `name`."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {value!r}")
    return value


#: The measured figures a catalogue entry may hold (`Accelerator.measured`): the best
#: 16-bit and fp8 matmuls found (FLOP/s) and the copy bandwidth reached (bytes/s).
MEASURED_KEYS = ("matmul_fp16_flops", "matmul_bf16_flops", "matmul_fp8_flops",
                 "bandwidth_bytes_per_s")


@dataclass(frozen=True)
class MigProfile:
    """One MIG profile ("1g.10gb"): `compute_slices` of the GPU's 7, `memory_slices` of its
    8, the most instances one GPU holds, and the SMs and memory (bytes) `nvidia-smi mig
    -lgip` reports for it (NaN where no published output shows them)."""

    profile: str
    compute_slices: int  # of 7
    memory_slices: int  # of 8
    max_instances: int
    sm_count: float = math.nan
    memory_bytes: float = math.nan


@dataclass(frozen=True)
class MigTable:
    """A GPU's MIG profiles (`Accelerator.mig`): the whole card's SMs (`card_sms`), its
    `profiles` (MigProfile), where they come from and what is assumed (`note`)."""

    card_sms: int
    profiles: tuple
    source: str
    note: str = ""

    def __post_init__(self):
        _v.count("card_sms", self.card_sms)
        profiles = tuple(self.profiles)
        for p in profiles:
            _v.ensure(isinstance(p, MigProfile), f"profiles must hold MigProfile records, "
                      f"got {p!r}", TypeError)
        object.__setattr__(self, "profiles", profiles)
        check_text("source", self.source)
        check_text("note", self.note)


@dataclass(frozen=True)
class ExamplePrice:
    """An hourly price to start from: edit it for your provider, region and discount.
    `hardware` says what the instance holds ("8x NVIDIA H100 SXM": `cost` reads the GPU
    count and the GPU from it)."""

    name: str
    hardware: str
    price_per_hour: float
    currency: str
    as_of: str
    source: str
    note: str = ""


def _optional_text(name, value):
    return None if value is None else check_text(name, value)


@dataclass(frozen=True)
class Accelerator:
    """One device: memory, bandwidth and dense peak rates, with the source of each.

    `memory_bytes`: what the card has for CUDA (torch's `total_memory`); the datasheet's
    decimal figure is `memory_marketing_bytes`, and `memory_source` says where
    `memory_bytes` comes from. `bandwidth`: DRAM bytes/s (datasheet peak). `peaks` maps a
    peak name (`dtypes.PEAKS`: "fp16", "fp8", ...) to dense FLOP/s (ops/s for integer
    formats). `boost_clock_hz`/`base_clock_hz`: the SM clocks (Hz) the peaks are quoted at
    and the card guarantees, cited in `clock_source` (None where no source was read).
    `cache_bytes` is the last-level cache (L2 on a GPU, L3 on a CPU), or None if
    unknown. `estimated` marks an entry built from what a device reports (torch, NVML)
    rather than from a datasheet. Everything is checked on construction: a negative, NaN
    or infinite number, or a peak for a format the package does not know, is refused. The
    one exception is an unknown device's bandwidth (NaN when torch cannot tell it and the
    entry has no peaks at all: `detect()` on a GPU missing from the catalogue).
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
    memory_marketing_bytes: float | None = None
    memory_source: str = ""
    estimated: bool = False
    cores: int | None = None  # CPU cores the peaks count (None for a GPU)
    boost_clock_hz: float | None = None  # SM clock the datasheet's peaks are quoted at
    base_clock_hz: float | None = None  # SM clock the card guarantees under load
    clock_source: str = ""
    # A GPU's other facts, each with its source (left out of the repr: long tables).
    nvlink: str | None = field(default=None, repr=False)  # its NVLink, by `links` name
    pcie_generation: int | None = field(default=None, repr=False)  # its host link, x16
    pcie_source: str = field(default="", repr=False)
    mig: MigTable | None = field(default=None, repr=False)
    measured: dict = field(default_factory=dict, repr=False)  # MEASURED_KEYS -> (value, source)
    measured_note: str = field(default="", repr=False)
    prices: tuple = field(default=(), repr=False)  # ExamplePrice: instances that hold it

    def __post_init__(self):
        name = check_text("name", self.name)
        if not name.strip():
            raise ValueError("name must be a non-empty string")
        _v.choice("kind", self.kind, _KINDS)
        peaks = self.peaks
        if not isinstance(peaks, collections.abc.Mapping):
            raise TypeError(f"peaks must be a dict of format name -> dense FLOP/s, got "
                            f"{peaks!r}")
        clean = {}
        for key, value in peaks.items():
            clean[_peak_key(key)] = _v.positive(f"peaks[{key!r}] of {name}", value)
        object.__setattr__(self, "peaks", clean)
        object.__setattr__(self, "memory_bytes", _v.positive("memory_bytes", self.memory_bytes))
        bw = self.bandwidth
        if _v.is_number(bw) and math.isnan(float(bw)) and not clean:
            object.__setattr__(self, "bandwidth", math.nan)  # an unknown device, no peaks
        else:
            try:
                object.__setattr__(self, "bandwidth", _v.positive("bandwidth", bw))
            except ValueError as err:
                raise ValueError(f"{err} (bytes/s; NaN, 'unknown', is allowed only for an "
                                 f"entry with no peaks, as detect() builds for an unknown "
                                 f"GPU)") from None
        for attr in ("tdp_w", "cache_bytes", "memory_marketing_bytes", "boost_clock_hz",
                     "base_clock_hz"):
            object.__setattr__(self, attr, _optional_positive(attr, getattr(self, attr)))
        for attr in ("source", "note", "memory_source", "clock_source"):
            check_text(attr, getattr(self, attr))
        if (self.base_clock_hz is not None and self.boost_clock_hz is not None
                and self.base_clock_hz > self.boost_clock_hz):
            raise ValueError(f"base_clock_hz={self.base_clock_hz!r} is above boost_clock_hz="
                             f"{self.boost_clock_hz!r}; the base clock is the lower one")
        aliases = self.aliases
        if isinstance(aliases, str) or not isinstance(aliases, (tuple, list)):
            raise TypeError(f"aliases must be a tuple of names, got {aliases!r}")
        for alias in aliases:
            check_text("each alias", alias)
        object.__setattr__(self, "aliases", tuple(aliases))
        if not isinstance(self.estimated, bool):
            raise TypeError(f"estimated must be True or False, got {self.estimated!r}")
        self._check_records()

    def _check_records(self):
        """The GPU's links, MIG table, measured figures and prices: well-formed, sourced."""
        _optional_text("nvlink", self.nvlink)
        if self.pcie_generation is not None:
            _v.count("pcie_generation", self.pcie_generation, minimum=1, maximum=7)
            _v.ensure(check_text("pcie_source", self.pcie_source).strip() != "",
                      f"pcie_generation={self.pcie_generation} of {self.name} needs a "
                      "pcie_source saying where it comes from")
        _v.ensure(self.mig is None or isinstance(self.mig, MigTable),
                  f"mig must be a MigTable or None, got {self.mig!r}", TypeError)
        _v.ensure(isinstance(self.measured, collections.abc.Mapping), f"measured must be a "
                  f"dict of {', '.join(MEASURED_KEYS)} -> (value, source), got "
                  f"{self.measured!r}", TypeError)
        measured = {}
        for key, pair in self.measured.items():
            _v.choice("measured key", key, MEASURED_KEYS)
            _v.ensure(isinstance(pair, tuple) and len(pair) == 2, f"measured[{key!r}] of "
                      f"{self.name} must be (value, source), got {pair!r}", TypeError)
            value, source = pair
            measured[key] = (_v.positive(f"measured[{key!r}] of {self.name}", value),
                             check_text(f"the source of measured[{key!r}]", source))
        object.__setattr__(self, "measured", measured)
        check_text("measured_note", self.measured_note)
        prices = self.prices
        _v.ensure(isinstance(prices, (tuple, list)) and all(
            isinstance(p, ExamplePrice) for p in prices), f"prices must be a tuple of "
            f"ExamplePrice, got {prices!r}", TypeError)
        object.__setattr__(self, "prices", tuple(prices))

    def peak_flops(self, dtype="fp16") -> float:
        """Dense peak FLOP/s for `dtype` (never the sparse figure). A format without a
        catalogue peak on this device raises ValueError naming the peaks it has."""
        name = _dtypes.peak_dtype(dtype)
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


def _peak_key(key) -> str:
    """A peak's name in `dtypes.PEAKS` ("fp16", "fp8", ...); spellings of a format
    ("half", "fp8_e4m3") map to the peak that format computes in."""
    if not isinstance(key, str):
        raise TypeError(f"peak names must be format names such as 'fp16', got {key!r}")
    if key in _dtypes.PEAKS:
        return key
    try:
        return _dtypes.peak_dtype(key)
    except (KeyError, ValueError):
        raise _v.UnknownName(f"peaks has an unknown format {key!r}; the catalogue knows "
                             f"peaks for: {', '.join(_dtypes.PEAKS)}") from None


def _peaks(**tflops) -> dict:
    return {k: v * TFLOPS for k, v in tflops.items()}


NVIDIA_SPARSITY = ("Tensor-core figures are dense: half the datasheet's "
                   "'with sparsity' numbers.")
_UNSOURCED_MEMORY = ("UNSOURCED: no published torch/deviceQuery/nvidia-smi total found; "
                     "the datasheet's decimal figure is used, so torch will report a "
                     "different number")

# Where the memory figures come from. deviceQuery prints cudaDeviceProp.totalGlobalMem,
# which is what torch's get_device_properties().total_memory returns.
_THAMADA = "https://github.com/thamada/nvidia-smi/blob/c4c8a463a61e4ac67e3d7956da104b302760a498/gls/"
_MODAL_SMI = "https://github.com/modal-labs/modal-client/pull/2797"
MIG_GUIDE_GPUS = "https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-gpus.html"
ZZC = ("https://github.com/zzc0721/torch-performance-test-data/blob/"
        "9d82827637262c4351e3f9483f96b8cff57a601f/database.md")
A100_DATASHEET = ("https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
                   "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf")
V100_DATASHEET = ("https://images.nvidia.com/content/technologies/volta/pdf/"
                   "volta-v100-datasheet-update-us-1165301-r5.pdf")
BLACKWELL_DATASHEET = ("https://nvdam.widen.net/s/wwnsxrhm2w/blackwell-datasheet-3384703 "
                        "(table as reproduced in https://github.com/atineoSE/coding-model-seeks-gpu/"
                        "blob/cbdfc2fb1d6363eabc8aeadf6f5aac297bfc0def/pipeline/pipeline/sources/"
                        "gb200_specs.md)")
_GH200_DATASHEET = ("https://nvdam.widen.net/s/rrgqqnpbz8/grace-datasheet-gh200-grace-hopper-"
                    "superchip-3773000 (table as reproduced in https://github.com/atineoSE/"
                    "coding-model-seeks-gpu/blob/cbdfc2fb1d6363eabc8aeadf6f5aac297bfc0def/"
                    "pipeline/pipeline/sources/gh200_specs.md)")
_TORCH_FP32_ACCUMULATE = ("torch's fp16 matmul accumulates in fp32 (cuBLAS CUDA_R_32F; "
                          "https://github.com/pytorch/pytorch/issues/123157, which quotes "
                          "the RTX 4090 at 330.3 TFLOP/s with fp16 accumulate and 165.2 with "
                          "fp32 accumulate); GeForce cards run the fp32-accumulate rate at "
                          "half the fp16-accumulate rate, and that is the peak stored here.")


#: Sources of the SM clock each datasheet peak is quoted at (the boost clock): the peak
#: must equal tensor cores x dense FLOP per clock per tensor core x that clock
#: (tests/test_hardware.py checks every row that has one).
_A100_CLOCKS = ("1410 MHz boost, 1095 MHz base: https://glennklockwood.com/garden/peak-FLOPS "
                "(and deviceQuery's 'GPU Max Clock rate: 1410 MHz', https://upb-pc2.atlassian."
                "net/wiki/spaces/PC2DOK/pages/1900609/NVIDIA+A100+40GB+with+NVLINK); 108 SMs, "
                "432 tensor cores of 256 fp16 FMA a clock (the A100 whitepaper, as quoted in "
                "https://forums.developer.nvidia.com/t/how-to-calculate-the-tensor-core-fp16-"
                "performance-of-h100/244727)")
_H100_CLOCKS = ("1830 MHz for tensor-core work (1980 MHz is NVML's max, the clock of "
                "non-tensor work): https://glennklockwood.com/garden/processors/h100 and "
                "https://glennklockwood.com/garden/peak-FLOPS (528 tensor cores x 1024 FLOP a "
                "clock x 1.83 GHz = 989.4 TFLOP/s)")
_L4_CLOCKS = ("2040 MHz boost, 795 MHz base: https://fpsbench.com/compare/gpu/nvidia-l4-vs-"
              "nvidia-tesla-m40 (7,424 shading units = 58 SMs, 232 tensor cores) and "
              "https://cputronic.com/de/gpu/nvidia-l4 (third-party spec tables)")

# What real code reaches on a GPU (each entry's `measured`): Bekman's MAMF search and
# crowd-sourced square torch.mm runs.
#: Stas Bekman's maximum achievable matmul FLOPS (MAMF) table, at a commit.
MAMF_SOURCE = ("https://github.com/stas00/ml-engineering/blob/744d01e18b79512572f64a6bbd8b5f4a725203a7/"
         "compute/accelerator/README.md#maximum-achievable-matmul-flops-comparison-table")
_GPT_FAST = ("https://github.com/pytorch-labs/gpt-fast/blob/32971d3129541c5bfb4f715abc33d1c5f408d204/"
             "README.md")
_ZZC_NOTE = ("square torch.mm, sizes 1024-10240, best size, crowd-sourced (rough)")

#: Bekman's MAMF table (`MAMF_SOURCE`, at the commit cited), bf16 and fp8, TFLOP/s as published:
#: each figure lives here once; the entries' `measured` and `reference.PUBLISHED` read it.
MAMF_TFLOPS = {"bf16": {"NVIDIA A100 SXM": 271.2, "NVIDIA A100 PCIe": 252.9,
                        "NVIDIA H100 SXM": 794.5, "NVIDIA GH200 SXM": 828.6,
                        "NVIDIA B200 SXM": 1745.0, "AMD MI300X": 668.4},
               "fp8": {"NVIDIA H100 SXM": 1402.6, "NVIDIA GH200 SXM": 1535.0,
                       "NVIDIA B200 SXM": 3432.5, "NVIDIA H200 SXM": 1453.4}}


def _mamf(row, dtype="bf16"):
    return MAMF_TFLOPS[dtype][row] * 1e12


#: NVIDIA's MIG user guide (profiles of each GPU); `MIG_GUIDE_GPUS` lists the GPUs.
MIG_GUIDE_PROFILES = ("https://docs.nvidia.com/datacenter/tesla/mig-user-guide/"
                      "supported-mig-profiles.html")
_NAN = math.nan


def _lgip(*rows):
    """MIG profiles from `nvidia-smi mig -lgip` rows: (profile, g, memory slices,
    instances, SMs, GiB)."""
    return [MigProfile(p, g, m, n, sm, gib * GiB if gib == gib else math.nan)
            for p, g, m, n, sm, gib in rows]


# The MIG tables of the GPUs that have MIG (each entry's `mig`).
_MIG_A100_40GB = MigTable(
    card_sms=108,
    profiles=_lgip(("1g.5gb", 1, 1, 7, 14, 4.75), ("1g.5gb+me", 1, 1, 1, 14, _NAN),
                   ("1g.10gb", 1, 2, 4, 14, _NAN), ("2g.10gb", 2, 2, 3, 28, 9.75),
                   ("3g.20gb", 3, 4, 2, 42, 19.62), ("4g.20gb", 4, 4, 1, 56, 19.62),
                   ("7g.40gb", 7, 8, 1, 98, 39.50)),
    source=MIG_GUIDE_PROFILES + "; nvidia-smi mig -lgip on an A100-SXM4-40GB (Argonne ALCF's "
           "ThetaGPU documentation, 'Nvidia Multi-Instance GPU (MIG) mode'): 14/28/42/"
           "56/98 SMs and 4.75/9.75/19.62/19.62/39.50 GiB; an A100 has 108 SMs "
           "(https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/nvidia-ampere"
           "-architecture-whitepaper.pdf)",
    note="The guide prints 1/8 of memory for 1g.10gb; a 10 GB slice of a 40 GB card "
         "is 2/8, and 2/8 is used here. 1g.5gb+me and 1g.10gb (newer drivers, not in "
         "that -lgip) take the 1g's 14 SMs; their memory_bytes is DERIVED. Even 7g "
         "has 98 of the 108 SMs: MIG leaves ten idle.")
_MIG_A100_80GB = MigTable(
    card_sms=108,
    profiles=[MigProfile("1g.10gb", 1, 1, 7, 14, 10.2e9),
              MigProfile("1g.10gb+me", 1, 1, 1, 14),
              MigProfile("1g.20gb", 1, 2, 4, 14),
              MigProfile("2g.20gb", 2, 2, 3, 28, 20.9e9),
              MigProfile("3g.40gb", 3, 4, 2, 42, 42.4e9),
              MigProfile("4g.40gb", 4, 4, 1, 56),
              MigProfile("7g.80gb", 7, 8, 1, 98)],
    source=MIG_GUIDE_PROFILES + " (the guide names the 80GB profiles after the 40GB table); "
           "memory and SMs of 1g.10gb/2g.20gb/3g.40gb: https://arcs-njit-edu.github.io/"
           "Docs/MIG/profile-comparison (deviceQuery, decimal GB to 3 figures)",
    note="memory_bytes of the other profiles is DERIVED (memory slices / 8 x the card's "
         "memory_bytes); their SMs are the A100 40GB's -lgip counts (the same GA100 "
         "partitions: 14 per compute slice, 98 for 7g).")
_MIG_H100_SXM = MigTable(
    card_sms=132,
    profiles=_lgip(("1g.10gb", 1, 1, 7, 16, 9.75), ("1g.10gb+me", 1, 1, 1, 16, 9.75),
                   ("1g.20gb", 1, 2, 4, 26, 19.62), ("2g.20gb", 2, 2, 3, 32, 19.62),
                   ("3g.40gb", 3, 4, 2, 60, 39.50), ("4g.40gb", 4, 4, 1, 64, 39.50),
                   ("7g.80gb", 7, 8, 1, 132, 79.25)),
    source=MIG_GUIDE_PROFILES + "; nvidia-smi mig -lgip on an H100 80GB: "
           "https://jbarrow.ai/field_notes/nvidia-mig/",
    note="")
_MIG_H100_NVL = MigTable(
    card_sms=132,
    profiles=_lgip(("1g.12gb", 1, 1, 7, 16, 10.75), ("1g.12gb+me", 1, 1, 1, 16, 10.75),
                   ("1g.24gb", 1, 2, 4, 26, 21.62), ("2g.24gb", 2, 2, 3, 32, 21.62),
                   ("3g.47gb", 3, 4, 2, 60, 46.38), ("4g.47gb", 4, 4, 1, 64, _NAN),
                   ("7g.94gb", 7, 8, 1, 132, _NAN)),
    source=MIG_GUIDE_PROFILES + "; nvidia-smi mig -lgip on an H100 NVL: "
           "https://github.com/NVIDIA/gpu-operator/pull/900 and "
           "https://github.com/NVIDIA/mig-parted/pull/101",
    note="The 4g.47gb name and the instance counts of 3g/4g/7g follow the other Hopper "
         "tables (not seen in a published -lgip); their memory_bytes are DERIVED. The "
         "SMs of 2g-7g are the H100 SXM's (the same 132-SM GH100).")
_MIG_H200 = MigTable(
    card_sms=132,
    profiles=_lgip(("1g.18gb", 1, 1, 7, 16, 16.00), ("1g.18gb+me", 1, 1, 1, 16, 16.00),
                   ("1g.35gb", 1, 2, 4, 26, 32.25), ("2g.35gb", 2, 2, 3, 32, 32.25),
                   ("3g.71gb", 3, 4, 2, 60, 69.50), ("4g.71gb", 4, 4, 1, 64, 69.50),
                   ("7g.141gb", 7, 8, 1, 132, 139.75)),
    source=MIG_GUIDE_PROFILES + "; nvidia-smi mig -lgip on an H200: "
           "https://github.com/NVIDIA/mig-parted/issues/120",
    note="")
_MIG_H100_PCIE = dataclasses.replace(
    _MIG_H100_SXM,
    card_sms=114,
    profiles=[dataclasses.replace(p, sm_count=math.nan) for p in _MIG_H100_SXM.profiles],
    note="ASSUMED the H100 SXM's table: the guide lists H100-PCIE 80GB with 7 instances "
         f"({MIG_GUIDE_GPUS}); the -lgip figures were read on an H100 80GB. Its 114 SMs "
         "split differently from the SXM's 132 and no -lgip was found: compute is "
         "compute slices / 7.")
_MIG_H200_NVL = dataclasses.replace(
    _MIG_H200,
    note="ASSUMED the H200 SXM's table (the guide lists H200 NVL 141GB, 7 instances, "
         f"{MIG_GUIDE_GPUS}).")


def _gpu(name, memory_bytes, bandwidth_gb, peaks, *, marketing_gb, memory_source, source,
         note="", aliases=(), tdp_w=None, cache_bytes=None, clocks_mhz=None, clock_source="",
         nvlink=None, pcie=None, mig=None, measured=None, measured_note="", prices=()):
    """A GPU row, everything about the card in one place:

    `clocks_mhz`: (boost, base) SM clocks in MHz, with `clock_source` (base None where no
    source gives it); `nvlink`: the name of its NVLink in `links` ("NVLink 4"), None
    without one; `pcie`: (generation, source) of its x16 host link, where a source gives
    it; `mig`: its MigTable; `measured`: {MEASURED_KEYS key: (value in SI units,
    source)}, with `measured_note` for caveats; `prices`: the ExamplePrice instances
    that hold it (`cost.EXAMPLE_PRICES`)."""
    boost, base = (None, None) if clocks_mhz is None else (
        None if c is None else c * 1e6 for c in clocks_mhz)
    generation, pcie_source = (None, "") if pcie is None else pcie
    return Accelerator(name, memory_bytes, bandwidth_gb * GB, peaks, tdp_w=tdp_w,
                       cache_bytes=cache_bytes, source=source, note=note, aliases=aliases,
                       memory_marketing_bytes=marketing_gb * GB, memory_source=memory_source,
                       boost_clock_hz=boost, base_clock_hz=base, clock_source=clock_source,
                       nvlink=nvlink, pcie_generation=generation, pcie_source=pcie_source,
                       mig=mig, measured=measured or {}, measured_note=measured_note,
                       prices=prices)


_ENTRIES = [
    _gpu("T4", 15_843_721_216, 320, _peaks(fp16=65, int8=130, fp32=8.1), tdp_w=70,
         cache_bytes=4 * MiB, marketing_gb=16, aliases=("tesla t4", "nvidia t4"),
         clocks_mhz=(1590, 585), clock_source="https://sysrqmts.com/en/gpus/nvidia/tesla/t4",
         memory_source="deviceQuery 15110 MiB (15,843,721,216 B), "
                       "https://chiemon.github.io/2024/12/25/%E6%98%BE%E5%8D%A1%E4%BF%A1%E6%81%AF.html; "
                       "ECC is on by default (PNY/NVIDIA T4 user guide, https://manualmachine.com/"
                       "pny/tcst4mpb/8129101-user-manual); nvidia-smi shows 15360 MiB "
                       f"({_MODAL_SMI}); other drivers report 15,642,329,088 B",
         source="https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/tesla-t4/t4-tensor-core-datasheet-951643.pdf",
         note="Colab free tier. No fast bf16 (Turing emulates it, ~2.5 TFLOP/s measured): use "
              "fp16. PCIe Gen3 x16, 70 W. The 65 TFLOP/s is at the 1590 MHz boost clock (base "
              "585 MHz, https://sysrqmts.com/en/gpus/nvidia/tesla/t4); a 70 W T4 does not hold "
              "it (an MLPerf T4 run dropped to ~900 MHz, https://github.com/mlcommons/"
              "inference_results_v0.5/issues/20): see achievable('T4').",
         pcie=(3, "https://manualmachine.com/pny/tcst4mpb/8129101-user-manual"),
         measured={"matmul_fp16_flops": (41.91e12, f"{ZZC} (Colab, torch 2.8; Kaggle runs: 42.71, 41.93); {_ZZC_NOTE}")},
         measured_note="The 65 TFLOP/s datasheet peak is at the 1590 MHz boost clock; at the 585 MHz base "
                       "clock the same tensor cores give 65 x 585/1590 = 23.9 TFLOP/s, and a 70 W T4 under "
                       "load runs between (an MLPerf T4 fell to ~900 MHz: 36.8 TFLOP/s, https://github.com/"
                       "mlcommons/inference_results_v0.5/issues/20). Measured fp16 torch.mm: ~42 TFLOP/s, "
                       "64% of the datasheet. Jia et al. benchmarked the T4's memory hierarchy "
                       "(arXiv:1903.07486); no figure is quoted here, and lab 1 measures yours. The "
                       "practical ridge assumes the datasheet's 320 GB/s: ~131 FLOP/byte (datasheet: 203).",
         prices=(ExamplePrice(
                     "AWS g4dn.xlarge", "1x NVIDIA T4, 4 vCPU", 0.526, "USD", "list price since 2019, "
                     "read 2026-12", "https://aws.amazon.com/ec2/instance-types/g4/",
                     "us-east-1 On-Demand, Linux. Check the live price page before relying on it."),)),
    _gpu("L4", 23_570_219_008, 300,
         _peaks(fp16=121, bf16=121, fp8=242, int8=242, tf32=60, fp32=30.3), tdp_w=72,
         cache_bytes=48 * MiB, marketing_gb=24, aliases=("nvidia l4",),
         memory_source=f"deviceQuery 22478 MiB, {_THAMADA}L4_deviceQuery.py "
                       "(nvidia-smi: 23034 MiB)",
         source="https://www.nvidia.com/en-us/data-center/l4/",
         note="Colab paid tier. " + NVIDIA_SPARSITY,
         clocks_mhz=(2040, 795), clock_source=_L4_CLOCKS,
         pcie=(4, "https://store.sourcecode.com/en-us/bg-bucket-compare/125/9820"),
         measured={"matmul_fp16_flops": (68.83e12, f"{ZZC}; {_ZZC_NOTE}"),
                   "matmul_bf16_flops": (70.89e12, f"{ZZC}; {_ZZC_NOTE}")}),
    _gpu("A10", 23_609_475_072, 600,
         _peaks(fp16=125, bf16=125, int8=250, tf32=62.5, fp32=31.2), tdp_w=150,
         cache_bytes=6 * MiB, marketing_gb=24, aliases=("nvidia a10",),
         memory_source="cudaGetDeviceProperties 23,609,475,072 B, https://github.com/"
                       "aalanwyr/face2cuda/blob/HEAD/step2cuda/README.md (nvidia-smi: "
                       f"23028 MiB, {_MODAL_SMI})",
         source="https://www.nvidia.com/en-us/data-center/products/a10-gpu/",
         note=NVIDIA_SPARSITY,
         pcie=(4, "https://sysrqmts.com/vi/gpus/compare/nvidia-a10-pcie-vs-nvidia-a2")),
    _gpu("A10G", 23028 * MiB, 600, _peaks(fp16=70, bf16=70, fp32=31), tdp_w=300,
         cache_bytes=6 * MiB, marketing_gb=24, aliases=("nvidia a10g",),
         memory_source="nvidia-smi 23028 MiB converted (https://github.com/vllm-project/vllm/"
                       "issues/9373): nvidia-smi's total includes what the driver reserves, "
                       "so torch reports ~0.5 GiB less (the A10 shows the same gap)",
         source="https://aws.amazon.com/ec2/instance-types/g5/",
         note="UNCERTAIN: AWS's variant of the A10 has no public datasheet; the tensor "
              "figures are community estimates (~70 TFLOP/s fp16). nvidia-smi on a g5 shows a "
              "300 W power cap (https://github.com/vllm-project/vllm/issues/9373).",
         prices=(ExamplePrice(
                     "AWS g5.xlarge", "1x NVIDIA A10G, 4 vCPU", 1.006, "USD", "list price since 2021, "
                     "read 2026-12", "https://aws.amazon.com/ec2/instance-types/g5/",
                     "us-east-1 On-Demand, Linux. Check the live price page before relying on it."),)),
    _gpu("L40S", 47_803_596_800, 864,
         _peaks(fp16=362, bf16=362, fp8=733, int8=733, tf32=183, fp32=91.6), tdp_w=350,
         cache_bytes=96 * MiB, marketing_gb=48, aliases=("nvidia l40s",),
         memory_source=f"deviceQuery 45589 MiB, {_THAMADA}L40S_deviceQuery.py "
                       "(nvidia-smi: 46068 MiB)",
         source="https://www.nvidia.com/en-us/data-center/l40s/",
         note=NVIDIA_SPARSITY,
         pcie=(4, "https://www.mullet.se/product.html?product_id=355414"),
         measured={"matmul_fp16_flops": (264.02e12, f"{ZZC}; {_ZZC_NOTE}"),
                   "matmul_bf16_flops": (269.15e12, f"{ZZC}; {_ZZC_NOTE}")}),
    _gpu("L40", 48 * GB, 864,
         _peaks(fp16=181.05, bf16=181.05, fp8=362, int8=362, tf32=90.5, fp32=90.5),
         tdp_w=300, marketing_gb=48, aliases=("nvidia l40",),
         memory_source=_UNSOURCED_MEMORY,
         source="https://www.nvidia.com/en-us/data-center/l40/ (table as reproduced in "
                "https://www.mullet.se/product.html?product_id=355414)",
         note=NVIDIA_SPARSITY,
         pcie=(4, "https://www.mullet.se/product.html?product_id=355414")),
    _gpu("A40", 47_608_692_736, 696,
         _peaks(fp16=149.7, bf16=149.7, tf32=74.8, int8=299.3, fp32=37.4), tdp_w=300,
         cache_bytes=6 * MiB, marketing_gb=48, aliases=("nvidia a40",),
         memory_source=f"deviceQuery 45403 MiB, {_THAMADA}A40x10_deviceQuery.py",
         source="NVIDIA A40 datasheet, as reproduced in https://www.ecer.com/corp/details-"
                "uuuedqa-p1bsay9-multi-display-setups-supported-by-48gb-gddr6-ecc-memory-"
                "nvidia-a40-gpu-and-vga-outputs.html",
         note=NVIDIA_SPARSITY + " A data-centre GA102: fp16 with fp32 accumulate at the "
              "full rate (149.7 for both).",
         pcie=(4, "NVIDIA A40 datasheet as reproduced in https://www.ecer.com/corp/details-"
      "uuuedqa-p1bsay9-multi-display-setups-supported-by-48gb-gddr6-ecc-memory-"
      "nvidia-a40-gpu-and-vga-outputs.html")),
    _gpu("V100 SXM2", 16 * GB, 900, _peaks(fp16=125, fp32=15.7), tdp_w=300,
         cache_bytes=6 * MiB, marketing_gb=16,
         aliases=("tesla v100-sxm2-16gb", "v100", "v100 sxm2 16gb"),
         memory_source=_UNSOURCED_MEMORY, source=V100_DATASHEET,
         note="16 GB. No sparsity mode: the datasheet figures are dense. No bf16.",
         nvlink="NVLink 2",
         measured={"matmul_fp16_flops": (94.84e12, f"{ZZC} (Tesla V100-SXM2-16GB); {_ZZC_NOTE}")}),
    _gpu("V100 SXM2 32GB", 32 * GB, 900, _peaks(fp16=125, fp32=15.7), tdp_w=300,
         cache_bytes=6 * MiB, marketing_gb=32, aliases=("tesla v100-sxm2-32gb",),
         memory_source=_UNSOURCED_MEMORY, source=V100_DATASHEET,
         note="No sparsity mode: the datasheet figures are dense. No bf16.",
         nvlink="NVLink 2"),
    _gpu("V100 PCIe 16GB", 16 * GB, 897, _peaks(fp16=113.0, fp32=14.13),
         cache_bytes=6 * MiB, marketing_gb=16, aliases=("tesla v100-pcie-16gb", "v100 pcie"),
         memory_source=_UNSOURCED_MEMORY,
         source="https://sysrqmts.com/it/gpus/compare/nvidia-tesla-t10-processor-vs-nvidia-"
                "tesla-v100-pcie-16-gb (1380 MHz boost, 897 GB/s, 14.13 TFLOP/s fp32)",
         note="DERIVED fp16: 640 tensor cores x 128 FLOP/clock x 1.38 GHz = 113.0 TFLOP/s "
              "(the same arithmetic at the SXM2's 1.53 GHz gives its datasheet 125); NVIDIA's "
              "PCIe datasheet figure was not read here. No bf16. TDP not sourced here.",
         pcie=(3, "https://sysrqmts.com/it/gpus/compare/nvidia-tesla-t10-processor-"
                 "vs-nvidia-tesla-v100-pcie-16-gb")),
    _gpu("V100 PCIe 32GB", 32 * GB, 897, _peaks(fp16=113.0, fp32=14.13),
         cache_bytes=6 * MiB, marketing_gb=32, aliases=("tesla v100-pcie-32gb",),
         memory_source=_UNSOURCED_MEMORY,
         source="https://sysrqmts.com/it/gpus/compare/nvidia-tesla-t10-processor-vs-nvidia-"
                "tesla-v100-pcie-16-gb (the 16 GB card's clocks; assumed the same)",
         note="DERIVED fp16 as for the V100 PCIe 16GB. No bf16. TDP not sourced here.",
         pcie=(3, "the V100 PCIe 16GB's, assumed")),
    _gpu("P100 PCIe", 16 * GB, 732, _peaks(fp16=18.7, fp32=9.3), tdp_w=250,
         cache_bytes=4 * MiB, marketing_gb=16, aliases=("tesla p100-pcie-16gb", "p100"),
         memory_source=_UNSOURCED_MEMORY,
         source="https://images.nvidia.com/content/tesla/pdf/nvidia-tesla-p100-datasheet.pdf "
                "(732 GB/s, as xformers' device_limits.py cites it); fp16/fp32/250 W: "
                "https://tech4gamers.com/nvidia-tesla-p100-will-be-available-in-two-variants-"
                "of-16gb-12gb-hbm2/ (which gives 720 GB/s)",
         note="Kaggle's P100. No tensor cores: fp16 runs on the CUDA cores at 2x fp32. A "
              "measured square fp16 torch.mm reached only 8.4 TFLOP/s (achievable('P100 "
              "PCIe')). Recent torch builds (cu128) ship no sm_60 kernels, so CUDA ops fail on "
              "it (https://github.com/Kaggle/kaggle-cli/issues/1151). L2: 4 MB "
              "(https://teckknow.com/nvidia-unveils-tesla-p100-hpc-board-based-pascal-gpu-"
              "architecture/).",
         pcie=(3, "https://cputronic.com/gpu/nvidia-tesla-p100-pcie-16-gb"),
         measured={"matmul_fp16_flops": (8.39e12, f"{ZZC} (Kaggle); {_ZZC_NOTE}; below its "
                                                  "fp32 8.63 TFLOP/s")},
         measured_note="No tensor cores; the measured fp16 matmul is half the 18.7 TFLOP/s datasheet "
                       "fp16 rate and no faster than fp32."),
    _gpu("A30", 24 * GB, 933, _peaks(fp16=165, bf16=165, int8=330, tf32=82),
         marketing_gb=24, aliases=("nvidia a30",), memory_source=_UNSOURCED_MEMORY,
         source="https://www.nvidia.com/content/dam/en-zz/Solutions/data-center/products/a30-gpu/"
                "pdf/a30-datasheet.pdf (dense figures as xformers' device_limits.py lists them, "
                "https://github.com/facebookresearch/xformers/blob/ca6d2aa0d43241fc8a8dcd872debc2406160160d/"
                "xformers/profiler/device_limits.py)",
         note=NVIDIA_SPARSITY + " Non-tensor fp32 and TDP not sourced here."),
    _gpu("A100 40GB", 42_298_834_944, 1555,
         _peaks(fp16=312, bf16=312, int8=624, tf32=156, fp32=19.5), tdp_w=400,
         cache_bytes=40 * MiB, marketing_gb=40,
         aliases=("nvidia a100-sxm4-40gb", "a100 40gb sxm", "a100-40gb"),
         memory_source="deviceQuery 40339 MiB (42,298,834,944 B), https://github.com/"
                       "bottlerocket-os/bottlerocket/pull/3873; another driver reports "
                       "42,405,855,232 B (https://upb-pc2.atlassian.net/wiki/spaces/PC2DOK/"
                       "pages/1900609/NVIDIA+A100+40GB+with+NVLINK); nvidia-smi: 40960 MiB",
         source=A100_DATASHEET,
         note="SXM (the 40GB PCIe card is 'A100 40GB PCIe'). " + NVIDIA_SPARSITY,
         clocks_mhz=(1410, 1095), clock_source=_A100_CLOCKS,
         nvlink="NVLink 3",
         mig=_MIG_A100_40GB,
         measured={"matmul_bf16_flops": (_mamf("NVIDIA A100 SXM"), f"{MAMF_SOURCE} (row 'NVIDIA A100 SXM', memory size not stated)"),
                   "matmul_fp16_flops": (247.63e12, f"{ZZC} ('NVIDIA A100 40GB'); {_ZZC_NOTE}")}),
    _gpu("A100 80GB", 85_100_068_864, 2039,
         _peaks(fp16=312, bf16=312, int8=624, tf32=156, fp32=19.5), tdp_w=400,
         cache_bytes=40 * MiB, marketing_gb=80,
         aliases=("nvidia a100-sxm4-80gb", "a100 80gb sxm", "a100"),
         memory_source=f"deviceQuery 81158 MiB, {_THAMADA}A100SXMx4_deviceQuery.py "
                       "(nvidia-smi: 81920 MiB)",
         source=A100_DATASHEET, note="SXM. " + NVIDIA_SPARSITY,
         clocks_mhz=(1410, 1095), clock_source=_A100_CLOCKS,
         nvlink="NVLink 3",
         mig=_MIG_A100_80GB,
         measured={"matmul_bf16_flops": (_mamf("NVIDIA A100 SXM"), f"{MAMF_SOURCE} (row 'NVIDIA A100 SXM', memory size not stated)"),
                   "matmul_fp16_flops": (258.74e12, f"{ZZC} ('NVIDIA A100 SXM4 80GB'); {_ZZC_NOTE}"),
                   "bandwidth_bytes_per_s": (1700e9, f"{_GPT_FAST}: 'Running on an A100 80GB, albeit "
                                                     "power-limited to 330 watts. Empirically, seems like "
                                                     "peak bandwidth is about 1700 GB/s.'")},
         measured_note="gpt-fast's A100 ran power-capped at 330 W (of 400): its 1,397 GB/s of "
                       "weights at batch 1 is 69% of the datasheet's 2,039 GB/s and 82% of the "
                       "~1,700 GB/s it could reach."),
    _gpu("A100 80GB PCIe", 81049 * MiB, 1935,
         _peaks(fp16=312, bf16=312, int8=624, tf32=156, fp32=19.5), tdp_w=300,
         cache_bytes=40 * MiB, marketing_gb=80,
         aliases=("nvidia a100 80gb pcie", "nvidia a100-pcie-80gb", "a100 pcie 80gb"),
         memory_source="mixbench 'Total global mem: 81049 MB' (https://github.com/ekondis/"
                       "mixbench/issues/47), read as MiB: the same output gives the 40 MiB L2 "
                       "as 40960 KB",
         source=A100_DATASHEET,
         note="PCIe Gen4 card, 300 W; no NVLink unless bridged in pairs. " + NVIDIA_SPARSITY,
         clocks_mhz=(1410, 1095), clock_source=_A100_CLOCKS,
         pcie=(4, A100_DATASHEET + " ('PCIe Gen4: 64GB/s')"),
         mig=_MIG_A100_80GB,
         measured={"matmul_bf16_flops": (_mamf("NVIDIA A100 PCIe"), f"{MAMF_SOURCE} (row 'NVIDIA A100 PCIe', memory size not stated)")}),
    _gpu("A100 40GB PCIe", 42_298_834_944, 1555,
         _peaks(fp16=312, bf16=312, int8=624, tf32=156, fp32=19.5), tdp_w=250,
         cache_bytes=40 * MiB, marketing_gb=40,
         aliases=("nvidia a100-pcie-40gb", "a100 pcie 40gb", "a100-pcie-40gb"),
         memory_source="ASSUMED the A100 40GB SXM's deviceQuery figure (40339 MiB; the same "
                       "40 GB of HBM2); detect() replaces it with the card's own",
         source=A100_DATASHEET,
         note="PCIe Gen4 card: the datasheet's 1,555 GB/s and peaks (those of the SXM "
              "40GB), 250 W; no NVLink unless bridged in pairs. " + NVIDIA_SPARSITY,
         clocks_mhz=(1410, 1095), clock_source=_A100_CLOCKS,
         pcie=(4, A100_DATASHEET + " ('PCIe Gen4: 64GB/s')"),
         mig=_MIG_A100_40GB),
    _gpu("H100 SXM", 85_045_477_376, 3350,
         _peaks(fp16=989, bf16=989, fp8=1979, int8=1979, tf32=494.5, fp32=67), tdp_w=700,
         cache_bytes=50 * MiB, marketing_gb=80,
         aliases=("nvidia h100 80gb hbm3", "h100", "nvidia h100"),
         memory_source=f"deviceQuery 81106 MiB, {_THAMADA}H100SXMx8_deviceQuery.py "
                       f"(nvidia-smi: 81559 MiB, {_MODAL_SMI})",
         source="https://www.nvidia.com/en-us/data-center/h100/", note=NVIDIA_SPARSITY,
         clocks_mhz=(1830, None), clock_source=_H100_CLOCKS,
         nvlink="NVLink 4",
         mig=_MIG_H100_SXM,
         measured={"matmul_bf16_flops": (_mamf("NVIDIA H100 SXM"), MAMF_SOURCE),
                   "matmul_fp8_flops": (_mamf("NVIDIA H100 SXM", "fp8"), MAMF_SOURCE),
                   "matmul_fp16_flops": (760.04e12, f"{ZZC} ('NVIDIA H100 80GB HBM3'); {_ZZC_NOTE}")},
         prices=(ExamplePrice(
                     "AWS p5.48xlarge (Capacity Block)", "8x NVIDIA H100 SXM", 39.33, "USD",
                     "reservation rate listed before 2025-01-01, read 2026-12",
                     "https://aws.amazon.com/ec2/capacityblocks/pricing/",
                     "EC2 Capacity Blocks for ML, 4.916 USD per GPU-hour. Rates change; check the live page."),)),
    _gpu("H100 PCIe", 80 * GB, 2000,
         _peaks(fp16=756, bf16=756, fp8=1513, int8=1513, tf32=378, fp32=51), tdp_w=350,
         cache_bytes=50 * MiB, marketing_gb=80, aliases=("nvidia h100 pcie",),
         memory_source=_UNSOURCED_MEMORY,
         source="https://www.nvidia.com/en-us/data-center/h100/", note=NVIDIA_SPARSITY,
         pcie=(5, "https://docs.nvidia.com/launchpad/ai/h100-mig/latest/h100-mig-gpu.html"),
         mig=_MIG_H100_PCIE,
         measured={"matmul_fp16_flops": (458.03e12, f"{ZZC}; {_ZZC_NOTE}"),
                   "matmul_bf16_flops": (495.93e12, f"{ZZC}; {_ZZC_NOTE}")}),
    _gpu("H100 NVL", 99_861_594_112, 3900,
         _peaks(fp16=835.5, bf16=835.5, fp8=1671), tdp_w=400, cache_bytes=60 * MiB,
         marketing_gb=94, aliases=("nvidia h100 nvl",),
         memory_source=f"deviceQuery 95235 MiB, {_THAMADA}H100NVLx2_deviceQuery.py "
                       "(nvidia-smi: 95830 MiB)",
         source="bf16 1,671 TFLOP/s with sparsity from NVIDIA's H100 page "
                "(https://www.nvidia.com/en-us/data-center/h100/, quoted in "
                "https://github.com/KellerJordan/modded-nanogpt/issues/116); 3.9 TB/s and "
                "350-400 W: https://www.aiminingco.com/gpu/h100-nvl/specs",
         note=NVIDIA_SPARSITY + " fp8 is DERIVED as 2x bf16 (as on every Hopper part); tf32, "
              "int8 and fp32 not sourced here. deviceQuery's clock x bus width (2619 MHz x "
              "6144 bit) gives 4.02 TB/s, above the 3.9 quoted. PCIe card, NVLink-bridged in "
              "pairs.",
         nvlink="NVLink bridge (H100 NVL pair)",
         mig=_MIG_H100_NVL),
    _gpu("H200", 139.75 * GiB, 4800,
         _peaks(fp16=989, bf16=989, fp8=1979, int8=1979, tf32=494.5, fp32=67), tdp_w=700,
         cache_bytes=50 * MiB, marketing_gb=141,
         aliases=("nvidia h200", "h200 sxm", "nvidia h200 sxm"),
         memory_source="nvidia-smi mig -lgip: the whole-GPU instance 7g.141gb has 139.75 GiB "
                       "(https://github.com/NVIDIA/mig-parted/issues/120); no published "
                       "non-MIG torch figure found (on an H100 the same comparison is 79.25 "
                       "GiB for 7g.80gb against torch's 79.21 GiB)",
         source="https://www.nvidia.com/en-us/data-center/h200/",
         note="SXM. Same compute as the H100 SXM, more and faster memory. " + NVIDIA_SPARSITY,
         clocks_mhz=(1830, None),
         clock_source="same GH100 compute as the H100 SXM (989 TFLOP/s fp16 at the same clock; "
                      "https://glennklockwood.com/garden/processors/h100): " + _H100_CLOCKS,
         nvlink="NVLink 4",
         pcie=(5, "https://raw.githubusercontent.com/mlcommons/inference_results_v4.1/main/closed/"
       "NVIDIA/systems/H200-SXM-141GBx8_TRT_MaxQ.json"),
         mig=_MIG_H200,
         measured={"matmul_bf16_flops": (_mamf("NVIDIA H100 SXM"), f"{MAMF_SOURCE} (H100 SXM row, whose note says 'H200 is the same')"),
                   "matmul_fp8_flops": (_mamf("NVIDIA H200 SXM", "fp8"), MAMF_SOURCE),
                   "matmul_fp16_flops": (759.40e12, f"{ZZC}; {_ZZC_NOTE}")},
         prices=(ExamplePrice(
                     "AWS p5e.48xlarge (Capacity Block)", "8x NVIDIA H200", 43.26, "USD",
                     "reservation rate listed before 2025-01-01, read 2026-12",
                     "https://aws.amazon.com/ec2/capacityblocks/pricing/",
                     "EC2 Capacity Blocks for ML, US East (Ohio), 5.408 USD per GPU-hour. Rates change; "
                     "check the live page."),)),
    _gpu("H200 NVL", 139.75 * GiB, 4800, _peaks(fp16=835.5, bf16=835.5, fp8=1671),
         tdp_w=600, cache_bytes=50 * MiB, marketing_gb=141, aliases=("nvidia h200 nvl",),
         memory_source="ASSUMED the H200 SXM's (same 141 GB part; the MIG guide lists both "
                       f"at 141GB, {MIG_GUIDE_GPUS}); no published H200 NVL figure found",
         source="141 GB at 4.8 TB/s on SXM and NVL boards: https://aiwiki.ai/wiki/nvidia_h200/raw; "
                "600 W for the PCIe version: https://www.saulelectric.com/nvidia-h200.html",
         note="UNSOURCED peaks: ASSUMED equal to the H100 NVL's (same GH100 silicon in a PCIe "
              "card); NVIDIA's H200 NVL table was not read here. " + NVIDIA_SPARSITY,
         mig=_MIG_H200_NVL),
    _gpu("GH200", 97280 * MiB, 4000,
         _peaks(fp16=990, bf16=990, fp8=1979, int8=1979, tf32=494, fp32=67),
         cache_bytes=None, marketing_gb=96, aliases=("nvidia gh200 480gb", "gh200 480gb"),
         memory_source="OpenCL CL_DEVICE_GLOBAL_MEM_SIZE 97280 MB (MiB) on an 'NVIDIA GH200 "
                       "480GB', https://github.com/mredenti/PowerCapping/blob/HEAD/configuration/"
                       "OpenCL_benchmark.md; no CUDA/torch figure found",
         source=_GH200_DATASHEET,
         note="The GPU of a GH200 Grace Hopper superchip with 96 GB HBM3 (torch names it "
              "'NVIDIA GH200 480GB', counting the Grace CPU's LPDDR5X). " + NVIDIA_SPARSITY
              + " Power: 450-1000 W for the whole module (CPU + GPU + memory), so no GPU TDP.",
         nvlink="NVLink 4 (GH200 NVL32)",
         measured={"bandwidth_bytes_per_s": (3614.60e9, "OpenCL coalesced read on an 'NVIDIA GH200 480GB': "
                                                        "https://github.com/mredenti/PowerCapping/blob/HEAD/"
                                                        "configuration/OpenCL_benchmark.md")}),
    _gpu("GH200 144GB", 144 * GB, 4900,
         _peaks(fp16=990, bf16=990, fp8=1979, int8=1979, tf32=494, fp32=67),
         marketing_gb=144, aliases=("nvidia gh200 144g hbm3e", "gh200 144g hbm3e"),
         memory_source=_UNSOURCED_MEMORY, source=_GH200_DATASHEET,
         note="The GH200 with 144 GB HBM3e (name from https://github.com/NVIDIA/mig-parted/"
              "pull/139). " + NVIDIA_SPARSITY,
         nvlink="NVLink 4 (GH200 NVL32)",
         measured={"matmul_bf16_flops": (_mamf("NVIDIA GH200 SXM"), f"{MAMF_SOURCE} ('900W 141GiB HBM3e version')"),
                   "matmul_fp8_flops": (_mamf("NVIDIA GH200 SXM", "fp8"), f"{MAMF_SOURCE} ('900W 141GiB HBM3e version')")}),
    _gpu("B200", 178.35 * GiB, 7700,
         _peaks(fp16=2250, bf16=2250, fp8=4500, int8=4500, fp4=9000, tf32=1100, fp32=75),
         tdp_w=1000, cache_bytes=126.5 * MiB, marketing_gb=180, aliases=("nvidia b200",),
         memory_source="cudaGetDeviceProperties 'Total Global Memory: 178.35 GB' in "
                       "https://github.com/pytorch/ao/pull/4002, read as GiB (nvidia-smi's "
                       "183359 MiB is 179.06 GiB, https://github.com/NVIDIA/TensorRT-LLM/"
                       "issues/10278; 178.35 decimal GB would be 9 GiB below it)",
         source=BLACKWELL_DATASHEET,
         note="HGX B200, per GPU. " + NVIDIA_SPARSITY + " fp4 is dense NVFP4/FP4 (18 PFLOPS "
              "sparse). The datasheet gives 7.7 TB/s; NVIDIA's HGX page gave 8 TB/s, and CUDA 13 "
              "reports a 7680-bit bus, 7.672 TB/s at 3996 MHz (https://github.com/pytorch/ao/"
              "pull/4002).",
         nvlink="NVLink 5",
         pcie=(5, BLACKWELL_DATASHEET),
         measured={"matmul_bf16_flops": (_mamf("NVIDIA B200 SXM"), MAMF_SOURCE),
                   "matmul_fp8_flops": (_mamf("NVIDIA B200 SXM", "fp8"), MAMF_SOURCE),
                   "matmul_fp16_flops": (1627.64e12, f"{ZZC} (GCP a4-highgpu-8g); {_ZZC_NOTE}")}),
    _gpu("GB200", 186 * GB, 8000,
         _peaks(fp16=2500, bf16=2500, fp8=5000, int8=5000, fp4=10000, tf32=1250, fp32=80),
         tdp_w=1200, marketing_gb=186, aliases=("nvidia gb200",),
         memory_source=_UNSOURCED_MEMORY, source=BLACKWELL_DATASHEET,
         note="One Blackwell GPU of a GB200 superchip (NVL72 rack), per GPU. " + NVIDIA_SPARSITY,
         nvlink="NVLink 5 (GB200 NVL72)",
         pcie=(5, BLACKWELL_DATASHEET)),
    _gpu("B300", 288 * GB, 8000,
         _peaks(fp16=2250, bf16=2250, fp8=4500, fp4=13500, tf32=1100, fp32=75),
         tdp_w=1100, marketing_gb=288, aliases=("nvidia b300",),
         memory_source=_UNSOURCED_MEMORY,
         source="NVIDIA DGX B300 (8 GPUs): FP4 Tensor Core 144 PFLOPS sparse | 108 dense, "
                "FP8 72 PFLOPS sparse, 2.3 TB HBM3e, https://www.nvidia.com/en-us/data-center/"
                "dgx-b300/ (per GPU: /8); 8 TB/s and fp16/bf16 2,250 dense: "
                "https://glennklockwood.com/garden/processors/B300",
         note="HGX/DGX B300 (Blackwell Ultra), per GPU. " + NVIDIA_SPARSITY + " fp4 is dense "
              "NVFP4 (108 PFLOPS / 8 GPUs = 13.5; sources differ: 13.1 to 14 PFLOPS). INT8 "
              "tensor throughput was cut on Blackwell Ultra (about 0.15 POPS dense, "
              "https://verda.com/blog/gb300-nvl72-architecture), so no int8 peak is stored. "
              "One source gives 7.7 TB/s."),
    _gpu("GB300", 279 * GB, 8000,
         _peaks(fp16=2500, bf16=2500, fp8=5000, fp4=15000, tf32=1250, fp32=80),
         tdp_w=1400, marketing_gb=288, aliases=("nvidia gb300",),
         memory_source=_UNSOURCED_MEMORY + " (20 TB HBM3e over 72 GPUs: about 279 GB each)",
         source="NVIDIA GB300 NVL72 (72 GPUs): FP4 1,080 PFLOPS dense, FP8 360 PFLOPS dense, "
                "FP16/BF16 180 PFLOPS dense, 20 TB HBM3e at 576 TB/s, "
                "https://www.nvidia.com/en-us/data-center/gb300-nvl72/ (per GPU: /72; the "
                "same per-GPU table in https://verda.com/blog/gb300-nvl72-architecture)",
         note="One Blackwell Ultra GPU of a GB300 superchip (NVL72 rack), per GPU. "
              + NVIDIA_SPARSITY + " fp4 is dense NVFP4. No int8 peak stored (cut on "
              "Blackwell Ultra: about 0.165 POPS dense, verda.com)."),
    _gpu("MI355X", 288 * GB, 8000,
         _peaks(fp16=2516.6, bf16=2516.6, fp8=5033.2, int8=5033.2, fp4=10066.3, fp32=157.3),
         tdp_w=1400, marketing_gb=288, aliases=("amd instinct mi355x",),
         memory_source=_UNSOURCED_MEMORY,
         source="https://www.amd.com/en/products/accelerators/instinct/mi350/mi355x.html "
                "(288 GB HBM3E, 8 TB/s, FP16 2.5 PF, FP8 5.0 PF, MXFP4 10 PF dense, 1,400 W)",
         note="AMD, CDNA 4. Dense figures: 256 CUs x 8,192 FP8 FLOP a clock x 2.4 GHz = "
              "5,033 TFLOP/s (ISSCC 2026: 32 CUs an XCD, 8,192 FP8 FLOP a clock a CU), fp16 "
              "half, MXFP4 (stored as fp4) twice; AMD quotes sparse figures at twice these. "
              "fp32 is the vector rate AMD lists."),
    _gpu("MI300X", 196592 * MiB, 5300,
         _peaks(fp16=1307, bf16=1307, fp8=2615, int8=2615, fp32=163.4), tdp_w=750,
         cache_bytes=None, marketing_gb=192, aliases=("amd instinct mi300x",),
         memory_source="torch _CudaDeviceProperties total_memory=196592MB (MiB), "
                       "https://github.com/ROCm/legacy-rocm-build/issues/4203",
         source="https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html",
         note="AMD. Dense figures (AMD also quotes sparse ones at twice these).",
         measured={"matmul_bf16_flops": (_mamf("AMD MI300X"), MAMF_SOURCE)}),
    # Workstation and consumer cards learners meet (cloud marketplaces, desks).
    _gpu("RTX 4090", 25_386_352_640, 1008.1,
         _peaks(fp16=165.2, bf16=165.2, fp8=330.3, int8=660.6, fp32=82.58), tdp_w=450,
         cache_bytes=72 * MiB, marketing_gb=24,
         aliases=("nvidia geforce rtx 4090", "geforce rtx 4090", "rtx4090"),
         memory_source=f"deviceQuery 24210 MiB, {_THAMADA}RTX4090_deviceQuery.py "
                       "(nvidia-smi: 24564 MiB)",
         source="fp16: https://github.com/pytorch/pytorch/issues/123157 (the Ada whitepaper, "
                "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-"
                "architecture.pdf); fp8/int8/fp32: https://waredb.com/processor/nvidia-geforce-"
                "rtx-4090; bandwidth = deviceQuery 10501 MHz x 384 bit x 2; 450 W: "
                "https://huggingface.co/datasets/ohdoking/gpu_spec",
         note="GeForce (Ada): " + _TORCH_FP32_ACCUMULATE + " bf16 ASSUMED the same rate (a "
              "measured bf16 torch.mm matches fp16). fp8 is the fp32-accumulate rate. Dense.",
         measured={"matmul_fp16_flops": (165.08e12, f"{ZZC} (one of eight 4090 submissions, "
                                                    f"162-172 TFLOP/s); {_ZZC_NOTE}")}),
    _gpu("RTX 3090", 25_327_697_920, 936.1, _peaks(fp16=71, bf16=71, fp32=35.58),
         tdp_w=350, cache_bytes=6 * MiB, marketing_gb=24,
         aliases=("nvidia geforce rtx 3090", "geforce rtx 3090", "rtx3090"),
         memory_source=f"deviceQuery 24154 MiB, {_THAMADA}RTX3090_deviceQuery.py "
                       "(nvidia-smi: 24576 MiB)",
         source="fp16 71 with fp32 accumulate (143 with fp16 accumulate): https://github.com/"
                "modula-systems/modula/pull/1, citing the GA102 whitepaper (https://images."
                "nvidia.com/aem-dam/en-zz/Solutions/geforce/ampere/pdf/NVIDIA-ampere-GA102-GPU-"
                "Architecture-Whitepaper-V1.pdf); fp32/350 W: https://huggingface.co/datasets/"
                "ohdoking/gpu_spec; bandwidth = deviceQuery 9751 MHz x 384 bit x 2",
         note="GeForce (Ampere): " + _TORCH_FP32_ACCUMULATE + " bf16 ASSUMED the same rate "
              "(measured bf16 76.3 vs fp16 75.6 TFLOP/s in square torch.mm). Dense.",
         measured={"matmul_fp16_flops": (75.64e12, f"{ZZC}; {_ZZC_NOTE}")}),
    _gpu("RTX 6000 Ada", 51_002_867_712, 960,
         _peaks(fp16=364.25, bf16=364.25, fp8=728.5, fp32=91.1), tdp_w=300,
         cache_bytes=96 * MiB, marketing_gb=48,
         aliases=("nvidia rtx 6000 ada generation", "rtx 6000 ada generation"),
         memory_source=f"deviceQuery 48640 MiB, {_THAMADA}RTX6000Ada_x8_deviceQuery.py "
                       "(nvidia-smi: 49140 MiB)",
         source="datasheet as reproduced in https://github.com/atineoSE/coding-model-seeks-gpu/"
                "blob/cbdfc2fb1d6363eabc8aeadf6f5aac297bfc0def/pipeline/pipeline/sources/"
                "rtx6000ada_specs.md (960 GB/s, 91.1 TFLOP/s fp32, 1457 TFLOP/s fp8 with "
                "sparsity, 300 W); fp16 364.25: https://github.com/modula-systems/modula/pull/1",
         note="Workstation Ada: fp16 with fp32 accumulate at the full rate. fp8 = 1457/2. "
              "bf16 ASSUMED equal to fp16. Dense.",
         pcie=(4, "https://github.com/atineoSE/coding-model-seeks-gpu/blob/"
               "cbdfc2fb1d6363eabc8aeadf6f5aac297bfc0def/pipeline/pipeline/sources/"
               "rtx6000ada_specs.md")),
    _gpu("RTX A6000", 48 * GB, 768, _peaks(fp16=154.8, bf16=154.8, int8=309.7, fp32=38.7),
         tdp_w=300, cache_bytes=6 * MiB, marketing_gb=48, aliases=("nvidia rtx a6000",),
         memory_source=_UNSOURCED_MEMORY,
         source="48 GB, 768 GB/s, 300 W: https://servethehome.com/nvidia-rtx-a6000-48gb-gpu-drops-"
                "quadro-designation; 154.8 TFLOP/s fp16/bf16 dense, 309.7 TOPS int8 (Microway, "
                "as quoted in https://llmperf.net/categories/gpu/Nvidia-A6000-GPUs)",
         note="Workstation Ampere: fp16 with fp32 accumulate at the full rate. Some tools quote "
              "309.7 TFLOP/s bf16 (e.g. https://github.com/pytorch/torchtitan/pull/2884): that "
              "is the sparse figure. Dense here.",
         pcie=(4, "https://servethehome.com/nvidia-rtx-a6000-48gb-gpu-drops-quadro-designation")),
]


def _cpu_entry(name, cores, clock_hz, fp32_flop_per_cycle, channels, mega_transfers,
               memory_bytes, memory_source, source, note, aliases=()) -> Accelerator:
    """A CPU row derived from its parts: DRAM channels x 8 bytes x transfers/s, and
    cores x clock x FLOP/cycle (two 8-wide fp32 FMA pipes = 32 FLOP/cycle)."""
    bandwidth = channels * 8 * mega_transfers * 1e6
    fp32 = cores * clock_hz * fp32_flop_per_cycle
    return Accelerator(name, memory_bytes=memory_bytes, bandwidth=bandwidth,
                       peaks={"fp32": fp32}, kind="cpu", source=source, note=note,
                       aliases=aliases, memory_marketing_bytes=memory_bytes,
                       memory_source=memory_source, cores=cores)


_ENTRIES += [
    _cpu_entry(
        "CPU", cores=8, clock_hz=4.0e9, fp32_flop_per_cycle=32, channels=2,
        mega_transfers=5600, aliases=("cpu reference", "desktop cpu"),
        memory_bytes=64 * GB,
        memory_source="ASSUMED: 64 GB (two 32 GB DDR5 DIMMs), a typical desktop "
                      "configuration, not a measured or cited figure",
        source="https://www.jedec.org/standards-documents/docs/jesd79-5c",
        note="Reference desktop CPU, not yours: 8 cores at 4 GHz with two 8-wide fp32 "
             "FMA pipes, dual-channel DDR5-5600 (89.6 GB/s; STREAM typically sustains "
             "75-85%). 64 GB of RAM assumed."),
    _cpu_entry(
        "EPYC 9654", cores=96, clock_hz=2.4e9, fp32_flop_per_cycle=32, channels=12,
        mega_transfers=4800, aliases=("amd epyc 9654", "genoa"),
        memory_bytes=12 * 64 * GB,
        memory_source="ASSUMED: one 64 GB RDIMM on each of the 12 channels (768 GB), a "
                      "common one-DIMM-per-channel configuration, not a cited figure",
        source="https://www.amd.com/en/products/processors/server/epyc/4th-generation-9004-and-8004-series/amd-epyc-9654.html",
        note="AMD Genoa server socket at base clock: 12 channels of DDR5-4800 "
             "(460.8 GB/s). Zen 4 runs AVX-512 on two 256-bit FMA pipes. 768 GB assumed."),
]


def _key(name: str) -> str:
    """Normalise a device name: lower case, no vendor prefix, alphanumerics only."""
    name = name.lower().strip()
    name = re.sub(r"^(nvidia|tesla|amd instinct|amd)\s+", "", name)
    return re.sub(r"[^a-z0-9]", "", name)


class Table:
    """Look-up by name for a catalogue table: names and aliases, normalised by `_key`;
    a non-string raises TypeError, an unknown name `validate.UnknownName` (a KeyError)
    listing the closest entries."""

    def __init__(self, entries, what, param):
        self.entries, self.what, self.param = entries, what, param
        self.by_key = {}
        for entry in entries:
            for alias in (entry.name, *entry.aliases):
                self.by_key.setdefault(_key(alias), entry)

    def names(self) -> list[str]:
        return [e.name for e in self.entries]

    def lookup(self, name):
        """The entry for `name`, or None (no error)."""
        return self.by_key.get(_key(name))

    def closest(self, name, n=5) -> list[str]:
        """Up to `n` entries' names close to `name`: first those whose normalised name
        begins the query or is begun by it ("T4 16GB": T4), then difflib's closest at a
        ratio of 0.6 or more; [] when nothing is that close ("nope")."""
        k = _key(name)
        prefix = [c for c in self.by_key if len(c) >= 2 and len(k) >= 2
                  and (k.startswith(c) or c.startswith(k))]
        prefix.sort(key=lambda c: -difflib.SequenceMatcher(None, k, c).ratio())
        close = prefix + difflib.get_close_matches(k, list(self.by_key), n=n, cutoff=0.6)
        return list(dict.fromkeys(self.by_key[c].name for c in close))[:n]

    def get(self, name):
        if not isinstance(name, str):
            raise TypeError(f"{self.param} must be a {self.what} name (a string) or a "
                            f"{self.what} object, got {name!r}")
        if not name.strip():
            raise _v.UnknownName(f"{self.param} must be a non-empty {self.what} name, "
                                 f"got {name!r}")
        hit = self.lookup(name)
        if hit is not None:
            return hit
        closest = self.closest(name)
        hint = (f"closest catalogue entries: {', '.join(closest)}" if closest else
                f"none is close; the catalogue's {self.what}s: {', '.join(self.names())}")
        raise _v.UnknownName(f"{self.param}={name!r} is not a known {self.what}; {hint}")


_DEVICES = Table(_ENTRIES, "device", "accelerator")


def names() -> list[str]:
    """The catalogue's device names."""
    return _DEVICES.names()


def catalogue_entry(name) -> Accelerator:
    """The catalogue row for a device name ("H100 SXM"), short name ("h100") or the name
    torch reports ("NVIDIA H100 80GB HBM3"); an Accelerator passes through. A non-string
    raises TypeError; an unknown name a KeyError listing the closest entries.
    (`gpuinfer.hardware.get` also knows MIG slice names.)"""
    if isinstance(name, Accelerator):
        return name
    return _DEVICES.get(name)


def find(name) -> Accelerator | None:
    """The catalogue row for `name`, or None (no error)."""
    return _DEVICES.lookup(name)


def closest(name, n=5) -> list[str]:
    """The catalogue names closest to `name` (for an error message or a warning)."""
    return _DEVICES.closest(name, n=n)


def catalogue():
    """The catalogue as a pandas DataFrame: one row per device, SI units, with sources.
    `memory_bytes` is what the card has for CUDA; `memory_marketing_bytes` the datasheet's;
    `boost_clock_hz`/`base_clock_hz` NaN where no source was read."""
    import pandas as pd

    all_peaks = [d for d in _dtypes.PEAKS if any(d in a.peaks for a in _ENTRIES)]
    rows = []
    for a in _ENTRIES:
        row = {"name": a.name, "kind": a.kind, "memory_bytes": a.memory_bytes,
               "memory_marketing_bytes": a.memory_marketing_bytes,
               "bandwidth_bytes_per_s": a.bandwidth}
        for d in all_peaks:
            row[f"peak_{d}_flops"] = a.peaks.get(d, math.nan)
        row.update({"tdp_w": a.tdp_w, "cache_bytes": a.cache_bytes,
                    "boost_clock_hz": a.boost_clock_hz or math.nan,
                    "base_clock_hz": a.base_clock_hz or math.nan,
                    "clock_source": a.clock_source,
                    "estimated": a.estimated, "source": a.source,
                    "memory_source": a.memory_source, "note": a.note})
        rows.append(row)
    return pd.DataFrame(rows)


