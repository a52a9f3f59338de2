"""The accelerator catalogue: dense datasheet peaks, the memory each card really has, one
cited row per device; MIG slices, achievable ceilings, and the links between devices.

Chapter: *The roofline model* (and *Beyond one GPU* for the interconnects). Every number
is in SI units: bytes, bytes/s (decimal: 1 GB/s = 1e9 B/s), FLOP/s (integer formats:
operations/s).

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

Also here: `mig_profiles(name)` (MIG slices from NVIDIA's MIG user guide), `achievable(name)`
(published measured ceilings beside the datasheet's), `interconnects()` with NCCL's cost
model per protocol (`nccl_protocols()`), and `detect(device)`, which never fails on a GPU
it does not know: it builds a labelled estimate from torch (and NVML when available).
"""

from __future__ import annotations

import collections
import collections.abc
import dataclasses
import difflib
import math
import os
import pathlib
import re
import warnings
from dataclasses import dataclass, field

from . import dtypes as _dtypes
from . import validate as _v

GB = 1e9
TB = 1e12
TFLOPS = 1e12
MiB = 2**20
GiB = 2**30

_KINDS = ("gpu", "cpu")


def _optional_positive(name, value):
    return None if value is None else _v.positive(name, value)


def _text(name, value):
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {value!r}")
    return value


@dataclass(frozen=True)
class Accelerator:
    """One device: memory, bandwidth and dense peak rates, with the source of each.

    `memory_bytes`: what the card has for CUDA (torch's `total_memory`); the datasheet's
    decimal figure is `memory_marketing_bytes`, and `memory_source` says where
    `memory_bytes` comes from. `bandwidth`: DRAM bytes/s (datasheet peak). `peaks` maps a
    peak name (`dtypes.PEAKS`: "fp16", "fp8", ...) to dense FLOP/s (ops/s for integer
    formats). `cache_bytes` is the last-level cache (L2 on a GPU, L3 on a CPU), or None if
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

    def __post_init__(self):
        name = _text("name", self.name)
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
        for attr in ("tdp_w", "cache_bytes", "memory_marketing_bytes"):
            object.__setattr__(self, attr, _optional_positive(attr, getattr(self, attr)))
        for attr in ("source", "note", "memory_source"):
            _text(attr, getattr(self, attr))
        aliases = self.aliases
        if isinstance(aliases, str) or not isinstance(aliases, (tuple, list)):
            raise TypeError(f"aliases must be a tuple of names, got {aliases!r}")
        for alias in aliases:
            _text("each alias", alias)
        object.__setattr__(self, "aliases", tuple(aliases))
        if not isinstance(self.estimated, bool):
            raise TypeError(f"estimated must be True or False, got {self.estimated!r}")

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
_MIG_GUIDE_GPUS = "https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-gpus.html"
_ZZC = ("https://github.com/zzc0721/torch-performance-test-data/blob/"
        "9d82827637262c4351e3f9483f96b8cff57a601f/database.md")
_A100_DATASHEET = ("https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
                   "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf")
_V100_DATASHEET = ("https://images.nvidia.com/content/technologies/volta/pdf/"
                   "volta-v100-datasheet-update-us-1165301-r5.pdf")
_BLACKWELL_DATASHEET = ("https://nvdam.widen.net/s/wwnsxrhm2w/blackwell-datasheet-3384703 "
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


def _gpu(name, memory_bytes, bandwidth_gb, peaks, *, marketing_gb, memory_source, source,
         note="", aliases=(), tdp_w=None, cache_bytes=None):
    return Accelerator(name, memory_bytes, bandwidth_gb * GB, peaks, tdp_w=tdp_w,
                       cache_bytes=cache_bytes, source=source, note=note, aliases=aliases,
                       memory_marketing_bytes=marketing_gb * GB, memory_source=memory_source)


_ENTRIES = [
    _gpu("T4", 15_843_721_216, 320, _peaks(fp16=65, int8=130, fp32=8.1), tdp_w=70,
         cache_bytes=4 * MiB, marketing_gb=16, aliases=("tesla t4", "nvidia t4"),
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
              "inference_results_v0.5/issues/20): see achievable('T4')."),
    _gpu("L4", 23_570_219_008, 300,
         _peaks(fp16=121, bf16=121, fp8=242, int8=242, tf32=60, fp32=30.3), tdp_w=72,
         cache_bytes=48 * MiB, marketing_gb=24, aliases=("nvidia l4",),
         memory_source=f"deviceQuery 22478 MiB, {_THAMADA}L4_deviceQuery.py "
                       "(nvidia-smi: 23034 MiB)",
         source="https://www.nvidia.com/en-us/data-center/l4/",
         note="Colab paid tier. " + NVIDIA_SPARSITY),
    _gpu("A10", 23_609_475_072, 600,
         _peaks(fp16=125, bf16=125, int8=250, tf32=62.5, fp32=31.2), tdp_w=150,
         cache_bytes=6 * MiB, marketing_gb=24, aliases=("nvidia a10",),
         memory_source="cudaGetDeviceProperties 23,609,475,072 B, https://github.com/"
                       "aalanwyr/face2cuda/blob/HEAD/step2cuda/README.md (nvidia-smi: "
                       f"23028 MiB, {_MODAL_SMI})",
         source="https://www.nvidia.com/en-us/data-center/products/a10-gpu/",
         note=NVIDIA_SPARSITY),
    _gpu("A10G", 23028 * MiB, 600, _peaks(fp16=70, bf16=70, fp32=31), tdp_w=300,
         cache_bytes=6 * MiB, marketing_gb=24, aliases=("nvidia a10g",),
         memory_source="nvidia-smi 23028 MiB converted (https://github.com/vllm-project/vllm/"
                       "issues/9373): nvidia-smi's total includes what the driver reserves, "
                       "so torch reports ~0.5 GiB less (the A10 shows the same gap)",
         source="https://aws.amazon.com/ec2/instance-types/g5/",
         note="UNCERTAIN: AWS's variant of the A10 has no public datasheet; the tensor "
              "figures are community estimates (~70 TFLOP/s fp16). nvidia-smi on a g5 shows a "
              "300 W power cap (https://github.com/vllm-project/vllm/issues/9373)."),
    _gpu("L40S", 47_803_596_800, 864,
         _peaks(fp16=362, bf16=362, fp8=733, int8=733, tf32=183, fp32=91.6), tdp_w=350,
         cache_bytes=96 * MiB, marketing_gb=48, aliases=("nvidia l40s",),
         memory_source=f"deviceQuery 45589 MiB, {_THAMADA}L40S_deviceQuery.py "
                       "(nvidia-smi: 46068 MiB)",
         source="https://www.nvidia.com/en-us/data-center/l40s/",
         note=NVIDIA_SPARSITY),
    _gpu("L40", 48 * GB, 864,
         _peaks(fp16=181.05, bf16=181.05, fp8=362, int8=362, tf32=90.5, fp32=90.5),
         tdp_w=300, marketing_gb=48, aliases=("nvidia l40",),
         memory_source=_UNSOURCED_MEMORY,
         source="https://www.nvidia.com/en-us/data-center/l40/ (table as reproduced in "
                "https://www.mullet.se/product.html?product_id=355414)",
         note=NVIDIA_SPARSITY),
    _gpu("A40", 47_608_692_736, 696,
         _peaks(fp16=149.7, bf16=149.7, tf32=74.8, int8=299.3, fp32=37.4), tdp_w=300,
         cache_bytes=6 * MiB, marketing_gb=48, aliases=("nvidia a40",),
         memory_source=f"deviceQuery 45403 MiB, {_THAMADA}A40x10_deviceQuery.py",
         source="NVIDIA A40 datasheet, as reproduced in https://www.ecer.com/corp/details-"
                "uuuedqa-p1bsay9-multi-display-setups-supported-by-48gb-gddr6-ecc-memory-"
                "nvidia-a40-gpu-and-vga-outputs.html",
         note=NVIDIA_SPARSITY + " A data-centre GA102: fp16 with fp32 accumulate at the "
              "full rate (149.7 for both)."),
    _gpu("V100 SXM2", 16 * GB, 900, _peaks(fp16=125, fp32=15.7), tdp_w=300,
         cache_bytes=6 * MiB, marketing_gb=16,
         aliases=("tesla v100-sxm2-16gb", "v100", "v100 sxm2 16gb"),
         memory_source=_UNSOURCED_MEMORY, source=_V100_DATASHEET,
         note="16 GB. No sparsity mode: the datasheet figures are dense. No bf16."),
    _gpu("V100 SXM2 32GB", 32 * GB, 900, _peaks(fp16=125, fp32=15.7), tdp_w=300,
         cache_bytes=6 * MiB, marketing_gb=32, aliases=("tesla v100-sxm2-32gb",),
         memory_source=_UNSOURCED_MEMORY, source=_V100_DATASHEET,
         note="No sparsity mode: the datasheet figures are dense. No bf16."),
    _gpu("V100 PCIe 16GB", 16 * GB, 897, _peaks(fp16=113.0, fp32=14.13),
         cache_bytes=6 * MiB, marketing_gb=16, aliases=("tesla v100-pcie-16gb", "v100 pcie"),
         memory_source=_UNSOURCED_MEMORY,
         source="https://sysrqmts.com/it/gpus/compare/nvidia-tesla-t10-processor-vs-nvidia-"
                "tesla-v100-pcie-16-gb (1380 MHz boost, 897 GB/s, 14.13 TFLOP/s fp32)",
         note="DERIVED fp16: 640 tensor cores x 128 FLOP/clock x 1.38 GHz = 113.0 TFLOP/s "
              "(the same arithmetic at the SXM2's 1.53 GHz gives its datasheet 125); NVIDIA's "
              "PCIe datasheet figure was not read here. No bf16. TDP not sourced here."),
    _gpu("V100 PCIe 32GB", 32 * GB, 897, _peaks(fp16=113.0, fp32=14.13),
         cache_bytes=6 * MiB, marketing_gb=32, aliases=("tesla v100-pcie-32gb",),
         memory_source=_UNSOURCED_MEMORY,
         source="https://sysrqmts.com/it/gpus/compare/nvidia-tesla-t10-processor-vs-nvidia-"
                "tesla-v100-pcie-16-gb (the 16 GB card's clocks; assumed the same)",
         note="DERIVED fp16 as for the V100 PCIe 16GB. No bf16. TDP not sourced here."),
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
              "architecture/)."),
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
         source=_A100_DATASHEET,
         note="SXM (the 40GB PCIe card is 'A100 40GB PCIe'). " + NVIDIA_SPARSITY),
    _gpu("A100 80GB", 85_100_068_864, 2039,
         _peaks(fp16=312, bf16=312, int8=624, tf32=156, fp32=19.5), tdp_w=400,
         cache_bytes=40 * MiB, marketing_gb=80,
         aliases=("nvidia a100-sxm4-80gb", "a100 80gb sxm", "a100"),
         memory_source=f"deviceQuery 81158 MiB, {_THAMADA}A100SXMx4_deviceQuery.py "
                       "(nvidia-smi: 81920 MiB)",
         source=_A100_DATASHEET, note="SXM. " + NVIDIA_SPARSITY),
    _gpu("A100 80GB PCIe", 81049 * MiB, 1935,
         _peaks(fp16=312, bf16=312, int8=624, tf32=156, fp32=19.5), tdp_w=300,
         cache_bytes=40 * MiB, marketing_gb=80,
         aliases=("nvidia a100 80gb pcie", "nvidia a100-pcie-80gb", "a100 pcie 80gb"),
         memory_source="mixbench 'Total global mem: 81049 MB' (https://github.com/ekondis/"
                       "mixbench/issues/47), read as MiB: the same output gives the 40 MiB L2 "
                       "as 40960 KB",
         source=_A100_DATASHEET,
         note="PCIe Gen4 card, 300 W; no NVLink unless bridged in pairs. " + NVIDIA_SPARSITY),
    _gpu("A100 40GB PCIe", 42_298_834_944, 1555,
         _peaks(fp16=312, bf16=312, int8=624, tf32=156, fp32=19.5), tdp_w=250,
         cache_bytes=40 * MiB, marketing_gb=40,
         aliases=("nvidia a100-pcie-40gb", "a100 pcie 40gb", "a100-pcie-40gb"),
         memory_source="ASSUMED the A100 40GB SXM's deviceQuery figure (40339 MiB; the same "
                       "40 GB of HBM2); detect() replaces it with the card's own",
         source=_A100_DATASHEET,
         note="PCIe Gen4 card: the datasheet's 1,555 GB/s and peaks (those of the SXM "
              "40GB), 250 W; no NVLink unless bridged in pairs. " + NVIDIA_SPARSITY),
    _gpu("H100 SXM", 85_045_477_376, 3350,
         _peaks(fp16=989, bf16=989, fp8=1979, int8=1979, tf32=494.5, fp32=67), tdp_w=700,
         cache_bytes=50 * MiB, marketing_gb=80,
         aliases=("nvidia h100 80gb hbm3", "h100", "nvidia h100"),
         memory_source=f"deviceQuery 81106 MiB, {_THAMADA}H100SXMx8_deviceQuery.py "
                       f"(nvidia-smi: 81559 MiB, {_MODAL_SMI})",
         source="https://www.nvidia.com/en-us/data-center/h100/", note=NVIDIA_SPARSITY),
    _gpu("H100 PCIe", 80 * GB, 2000,
         _peaks(fp16=756, bf16=756, fp8=1513, int8=1513, tf32=378, fp32=51), tdp_w=350,
         cache_bytes=50 * MiB, marketing_gb=80, aliases=("nvidia h100 pcie",),
         memory_source=_UNSOURCED_MEMORY,
         source="https://www.nvidia.com/en-us/data-center/h100/", note=NVIDIA_SPARSITY),
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
              "pairs."),
    _gpu("H200", 139.75 * GiB, 4800,
         _peaks(fp16=989, bf16=989, fp8=1979, int8=1979, tf32=494.5, fp32=67), tdp_w=700,
         cache_bytes=50 * MiB, marketing_gb=141,
         aliases=("nvidia h200", "h200 sxm", "nvidia h200 sxm"),
         memory_source="nvidia-smi mig -lgip: the whole-GPU instance 7g.141gb has 139.75 GiB "
                       "(https://github.com/NVIDIA/mig-parted/issues/120); no published "
                       "non-MIG torch figure found (on an H100 the same comparison is 79.25 "
                       "GiB for 7g.80gb against torch's 79.21 GiB)",
         source="https://www.nvidia.com/en-us/data-center/h200/",
         note="SXM. Same compute as the H100 SXM, more and faster memory. " + NVIDIA_SPARSITY),
    _gpu("H200 NVL", 139.75 * GiB, 4800, _peaks(fp16=835.5, bf16=835.5, fp8=1671),
         tdp_w=600, cache_bytes=50 * MiB, marketing_gb=141, aliases=("nvidia h200 nvl",),
         memory_source="ASSUMED the H200 SXM's (same 141 GB part; the MIG guide lists both "
                       f"at 141GB, {_MIG_GUIDE_GPUS}); no published H200 NVL figure found",
         source="141 GB at 4.8 TB/s on SXM and NVL boards: https://aiwiki.ai/wiki/nvidia_h200/raw; "
                "600 W for the PCIe version: https://www.saulelectric.com/nvidia-h200.html",
         note="UNSOURCED peaks: ASSUMED equal to the H100 NVL's (same GH100 silicon in a PCIe "
              "card); NVIDIA's H200 NVL table was not read here. " + NVIDIA_SPARSITY),
    _gpu("GH200", 97280 * MiB, 4000,
         _peaks(fp16=990, bf16=990, fp8=1979, int8=1979, tf32=494, fp32=67),
         cache_bytes=None, marketing_gb=96, aliases=("nvidia gh200 480gb", "gh200 480gb"),
         memory_source="OpenCL CL_DEVICE_GLOBAL_MEM_SIZE 97280 MB (MiB) on an 'NVIDIA GH200 "
                       "480GB', https://github.com/mredenti/PowerCapping/blob/HEAD/configuration/"
                       "OpenCL_benchmark.md; no CUDA/torch figure found",
         source=_GH200_DATASHEET,
         note="The GPU of a GH200 Grace Hopper superchip with 96 GB HBM3 (torch names it "
              "'NVIDIA GH200 480GB', counting the Grace CPU's LPDDR5X). " + NVIDIA_SPARSITY
              + " Power: 450-1000 W for the whole module (CPU + GPU + memory), so no GPU TDP."),
    _gpu("GH200 144GB", 144 * GB, 4900,
         _peaks(fp16=990, bf16=990, fp8=1979, int8=1979, tf32=494, fp32=67),
         marketing_gb=144, aliases=("nvidia gh200 144g hbm3e", "gh200 144g hbm3e"),
         memory_source=_UNSOURCED_MEMORY, source=_GH200_DATASHEET,
         note="The GH200 with 144 GB HBM3e (name from https://github.com/NVIDIA/mig-parted/"
              "pull/139). " + NVIDIA_SPARSITY),
    _gpu("B200", 178.35 * GiB, 7700,
         _peaks(fp16=2250, bf16=2250, fp8=4500, int8=4500, fp4=9000, tf32=1100, fp32=75),
         tdp_w=1000, cache_bytes=126.5 * MiB, marketing_gb=180, aliases=("nvidia b200",),
         memory_source="cudaGetDeviceProperties 'Total Global Memory: 178.35 GB' in "
                       "https://github.com/pytorch/ao/pull/4002, read as GiB (nvidia-smi's "
                       "183359 MiB is 179.06 GiB, https://github.com/NVIDIA/TensorRT-LLM/"
                       "issues/10278; 178.35 decimal GB would be 9 GiB below it)",
         source=_BLACKWELL_DATASHEET,
         note="HGX B200, per GPU. " + NVIDIA_SPARSITY + " fp4 is dense NVFP4/FP4 (18 PFLOPS "
              "sparse). The datasheet gives 7.7 TB/s; NVIDIA's HGX page gave 8 TB/s, and CUDA 13 "
              "reports a 7680-bit bus, 7.672 TB/s at 3996 MHz (https://github.com/pytorch/ao/"
              "pull/4002)."),
    _gpu("GB200", 186 * GB, 8000,
         _peaks(fp16=2500, bf16=2500, fp8=5000, int8=5000, fp4=10000, tf32=1250, fp32=80),
         tdp_w=1200, marketing_gb=186, aliases=("nvidia gb200",),
         memory_source=_UNSOURCED_MEMORY, source=_BLACKWELL_DATASHEET,
         note="One Blackwell GPU of a GB200 superchip (NVL72 rack), per GPU. " + NVIDIA_SPARSITY),
    _gpu("MI300X", 196592 * MiB, 5300,
         _peaks(fp16=1307, bf16=1307, fp8=2615, int8=2615, fp32=163.4), tdp_w=750,
         cache_bytes=None, marketing_gb=192, aliases=("amd instinct mi300x",),
         memory_source="torch _CudaDeviceProperties total_memory=196592MB (MiB), "
                       "https://github.com/ROCm/legacy-rocm-build/issues/4203",
         source="https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html",
         note="AMD. Dense figures (AMD also quotes sparse ones at twice these)."),
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
              "measured bf16 torch.mm matches fp16). fp8 is the fp32-accumulate rate. Dense."),
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
              "(measured bf16 76.3 vs fp16 75.6 TFLOP/s in square torch.mm). Dense."),
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
              "bf16 ASSUMED equal to fp16. Dense."),
    _gpu("RTX A6000", 48 * GB, 768, _peaks(fp16=154.8, bf16=154.8, int8=309.7, fp32=38.7),
         tdp_w=300, cache_bytes=6 * MiB, marketing_gb=48, aliases=("nvidia rtx a6000",),
         memory_source=_UNSOURCED_MEMORY,
         source="48 GB, 768 GB/s, 300 W: https://servethehome.com/nvidia-rtx-a6000-48gb-gpu-drops-"
                "quadro-designation; 154.8 TFLOP/s fp16/bf16 dense, 309.7 TOPS int8 (Microway, "
                "as quoted in https://llmperf.net/categories/gpu/Nvidia-A6000-GPUs)",
         note="Workstation Ampere: fp16 with fp32 accumulate at the full rate. Some tools quote "
              "309.7 TFLOP/s bf16 (e.g. https://github.com/pytorch/torchtitan/pull/2884): that "
              "is the sparse figure. Dense here."),
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


class _Table:
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
        close = difflib.get_close_matches(_key(name), list(self.by_key), n=n, cutoff=0.4)
        return list(dict.fromkeys(self.by_key[c].name for c in close))

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
        closest = self.closest(name) or self.names()
        raise _v.UnknownName(f"unknown {self.what} {name!r}; closest catalogue entries: "
                             f"{', '.join(closest)}")


_DEVICES = _Table(_ENTRIES, "device", "accelerator")


def names() -> list[str]:
    """The catalogue's device names."""
    return _DEVICES.names()


def get(name) -> Accelerator:
    """Look up a device by catalogue name ("H100 SXM"), short name ("h100") or the
    name torch reports ("NVIDIA H100 80GB HBM3"); a MIG slice's name ("NVIDIA
    A100-SXM4-80GB MIG 1g.10gb") gives the slice (`mig_slice`). An Accelerator passes
    through. A non-string raises TypeError; an unknown name a KeyError listing the
    closest entries."""
    if isinstance(name, Accelerator):
        return name
    if isinstance(name, str):
        parsed = _parse_mig_name(name)
        if parsed is not None and _DEVICES.lookup(name) is None:
            return mig_slice(*parsed)
    return _DEVICES.get(name)


def catalogue():
    """The catalogue as a pandas DataFrame: one row per device, SI units, with sources.
    `memory_bytes` is what the card has for CUDA; `memory_marketing_bytes` the datasheet's."""
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
                    "estimated": a.estimated, "source": a.source,
                    "memory_source": a.memory_source, "note": a.note})
        rows.append(row)
    return pd.DataFrame(rows)


_SYSFS_CACHE = "/sys/devices/system/cpu/cpu0/cache"


def _parse_cache_size(text: str) -> float | None:
    """Linux's sysfs cache size ("32768K", "1M") in bytes, or None."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)\s*", text or "")
    if not match:
        return None
    return float(int(match[1]) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[match[2]])


def _cpu_cache_bytes() -> float | None:
    """The last-level cache one core sees: sysconf where the C library knows it, else
    Linux's sysfs (the highest cache level of CPU 0), else None."""
    for key in ("SC_LEVEL3_CACHE_SIZE", "SC_LEVEL2_CACHE_SIZE"):
        try:
            size = os.sysconf(key)
        except (ValueError, OSError, AttributeError):
            continue
        if size and size > 0:
            return float(size)
    best = (0, None)
    for index in sorted(pathlib.Path(_SYSFS_CACHE).glob("index*")):
        try:
            level = int((index / "level").read_text())
            size = _parse_cache_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if size and level > best[0]:
            best = (level, size)
    return best[1]


def cpu(threads=None) -> Accelerator:
    """The reference CPU entry, with this machine's last-level cache size. `threads`:
    the ceilings of that many of its cores (a lab timing one thread compares with one
    core's share): peaks and bandwidth scaled by threads / cores. The bandwidth share is
    a simplification: one core of a desktop reaches more than its share of the DRAM
    bandwidth, though not all of it, so a one-thread read can beat this ceiling."""
    entry = get("CPU")
    entry = dataclasses.replace(entry, cache_bytes=_cpu_cache_bytes() or entry.cache_bytes)
    if threads is None:
        return entry
    t = _v.count("threads", threads, maximum=entry.cores)
    share = t / entry.cores
    return dataclasses.replace(
        entry, name=f"{entry.name} ({t} of {entry.cores} cores)", cores=t,
        bandwidth=share * entry.bandwidth, peaks={k: share * v for k, v in entry.peaks.items()},
        note=f"The reference CPU's ceilings scaled to {t} of its {entry.cores} cores. "
             + entry.note)


def derated(name, *, bandwidth_fraction=None) -> Accelerator:
    """A catalogue device with its published *achievable* ceilings in place of the
    datasheet's (`achievable`): the best measured 16-bit matmul as its fp16/bf16 peak and
    the measured bandwidth where one was published; where none was, the datasheet
    bandwidth times `bandwidth_fraction` (an assumption the caller states, e.g. the
    A100's published 1,700 / 2,039 = 0.83), or the datasheet's. A realistic device to
    predict with (a T4 at its measured 42, not its boost-clock 65, TFLOP/s), named
    "<name> (achievable)"."""
    acc = get(name)
    fraction = None if bandwidth_fraction is None else _v.fraction(
        "bandwidth_fraction", bandwidth_fraction)
    a = achievable(acc.name)
    peaks = dict(acc.peaks)
    known = lambda key: a[key] == a[key]  # noqa: E731 - NaN means unpublished
    best16 = max((a[k] for k in ("matmul_fp16_flops", "matmul_bf16_flops") if known(k)),
                 default=None)  # the best 16-bit rate serves fp16 and bf16 alike
    for peak in ("fp16", "bf16"):
        if peak in peaks and best16 is not None:
            peaks[peak] = float(best16)
    if "fp8" in peaks and known("matmul_fp8_flops"):
        peaks["fp8"] = float(a["matmul_fp8_flops"])
    bw = a["bandwidth_bytes_per_s"]
    used = [k for k in ("matmul_fp16_flops", "matmul_bf16_flops", "matmul_fp8_flops",
                        "bandwidth_bytes_per_s") if a[k] == a[k]]
    if bw != bw:  # none published
        bw = acc.bandwidth * (fraction if fraction is not None else 1.0)
    return dataclasses.replace(
        acc, name=f"{acc.name} (achievable)", peaks=peaks, bandwidth=float(bw),
        note=("Published measured ceilings in place of the datasheet's: "
              + (", ".join(f"{k} ({a[k + '_source']})" for k in used) or "none published")
              + ". " + a["note"]).strip())


# --- MIG: slices of one GPU -------------------------------------------------------------
# Chapter: *Serving* (sharing a GPU). NVIDIA's MIG user guide: a GPU has 7 compute slices
# (SM groups) and 8 memory slices (memory controllers with their L2 and DRAM); a profile
# "<g>g.<m>gb" takes g compute slices and some memory slices. The guide's tables give each
# profile's fraction of SMs (g/7), fraction of memory (slices/8) and the most instances;
# `nvidia-smi mig -lgip` (NVIDIA's own issue threads) gives the GiB and SMs each reports.

_MIG_GUIDE = "https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html"


@dataclass(frozen=True)
class _MigProfile:
    profile: str
    compute_slices: int  # of 7
    memory_slices: int  # of 8
    max_instances: int
    sm_count: float = math.nan  # from nvidia-smi mig -lgip, where seen
    memory_bytes: float = math.nan  # reported by nvidia-smi mig -lgip / deviceQuery


def _lgip(*rows):
    """Profiles from `nvidia-smi mig -lgip` rows: (profile, g, memory slices, instances,
    SMs, GiB)."""
    return [_MigProfile(p, g, m, n, sm, gib * GiB if gib == gib else math.nan)
            for p, g, m, n, sm, gib in rows]


_NAN = math.nan
_MIG_TABLES = {
    "A100 40GB": dict(
        card_sms=108,
        profiles=_lgip(("1g.5gb", 1, 1, 7, 14, 4.75), ("1g.5gb+me", 1, 1, 1, 14, _NAN),
                       ("1g.10gb", 1, 2, 4, 14, _NAN), ("2g.10gb", 2, 2, 3, 28, 9.75),
                       ("3g.20gb", 3, 4, 2, 42, 19.62), ("4g.20gb", 4, 4, 1, 56, 19.62),
                       ("7g.40gb", 7, 8, 1, 98, 39.50)),
        source=_MIG_GUIDE + "; nvidia-smi mig -lgip on an A100-SXM4-40GB (Argonne ALCF's "
               "ThetaGPU documentation, 'Nvidia Multi-Instance GPU (MIG) mode'): 14/28/42/"
               "56/98 SMs and 4.75/9.75/19.62/19.62/39.50 GiB; an A100 has 108 SMs "
               "(https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/nvidia-ampere"
               "-architecture-whitepaper.pdf)",
        note="The guide prints 1/8 of memory for 1g.10gb; a 10 GB slice of a 40 GB card "
             "is 2/8, and 2/8 is used here. 1g.5gb+me and 1g.10gb (newer drivers, not in "
             "that -lgip) take the 1g's 14 SMs; their memory_bytes is DERIVED. Even 7g "
             "has 98 of the 108 SMs: MIG leaves ten idle."),
    "A100 80GB": dict(
        card_sms=108,
        profiles=[_MigProfile("1g.10gb", 1, 1, 7, 14, 10.2e9),
                  _MigProfile("1g.10gb+me", 1, 1, 1, 14),
                  _MigProfile("1g.20gb", 1, 2, 4, 14),
                  _MigProfile("2g.20gb", 2, 2, 3, 28, 20.9e9),
                  _MigProfile("3g.40gb", 3, 4, 2, 42, 42.4e9),
                  _MigProfile("4g.40gb", 4, 4, 1, 56),
                  _MigProfile("7g.80gb", 7, 8, 1, 98)],
        source=_MIG_GUIDE + " (the guide names the 80GB profiles after the 40GB table); "
               "memory and SMs of 1g.10gb/2g.20gb/3g.40gb: https://arcs-njit-edu.github.io/"
               "Docs/MIG/profile-comparison (deviceQuery, decimal GB to 3 figures)",
        note="memory_bytes of the other profiles is DERIVED (memory slices / 8 x the card's "
             "memory_bytes); their SMs are the A100 40GB's -lgip counts (the same GA100 "
             "partitions: 14 per compute slice, 98 for 7g)."),
    "H100 SXM": dict(
        card_sms=132,
        profiles=_lgip(("1g.10gb", 1, 1, 7, 16, 9.75), ("1g.10gb+me", 1, 1, 1, 16, 9.75),
                       ("1g.20gb", 1, 2, 4, 26, 19.62), ("2g.20gb", 2, 2, 3, 32, 19.62),
                       ("3g.40gb", 3, 4, 2, 60, 39.50), ("4g.40gb", 4, 4, 1, 64, 39.50),
                       ("7g.80gb", 7, 8, 1, 132, 79.25)),
        source=_MIG_GUIDE + "; nvidia-smi mig -lgip on an H100 80GB: "
               "https://jbarrow.ai/field_notes/nvidia-mig/",
        note=""),
    "H100 NVL": dict(
        card_sms=132,
        profiles=_lgip(("1g.12gb", 1, 1, 7, 16, 10.75), ("1g.12gb+me", 1, 1, 1, 16, 10.75),
                       ("1g.24gb", 1, 2, 4, 26, 21.62), ("2g.24gb", 2, 2, 3, 32, 21.62),
                       ("3g.47gb", 3, 4, 2, 60, 46.38), ("4g.47gb", 4, 4, 1, 64, _NAN),
                       ("7g.94gb", 7, 8, 1, 132, _NAN)),
        source=_MIG_GUIDE + "; nvidia-smi mig -lgip on an H100 NVL: "
               "https://github.com/NVIDIA/gpu-operator/pull/900 and "
               "https://github.com/NVIDIA/mig-parted/pull/101",
        note="The 4g.47gb name and the instance counts of 3g/4g/7g follow the other Hopper "
             "tables (not seen in a published -lgip); their memory_bytes are DERIVED. The "
             "SMs of 2g-7g are the H100 SXM's (the same 132-SM GH100)."),
    "H200": dict(
        card_sms=132,
        profiles=_lgip(("1g.18gb", 1, 1, 7, 16, 16.00), ("1g.18gb+me", 1, 1, 1, 16, 16.00),
                       ("1g.35gb", 1, 2, 4, 26, 32.25), ("2g.35gb", 2, 2, 3, 32, 32.25),
                       ("3g.71gb", 3, 4, 2, 60, 69.50), ("4g.71gb", 4, 4, 1, 64, 69.50),
                       ("7g.141gb", 7, 8, 1, 132, 139.75)),
        source=_MIG_GUIDE + "; nvidia-smi mig -lgip on an H200: "
               "https://github.com/NVIDIA/mig-parted/issues/120",
        note=""),
}
_MIG_TABLES["H100 PCIe"] = dict(
    _MIG_TABLES["H100 SXM"],
    card_sms=114,
    profiles=[dataclasses.replace(p, sm_count=math.nan) for p in _MIG_TABLES["H100 SXM"]["profiles"]],
    note="ASSUMED the H100 SXM's table: the guide lists H100-PCIE 80GB with 7 instances "
         f"({_MIG_GUIDE_GPUS}); the -lgip figures were read on an H100 80GB. Its 114 SMs "
         "split differently from the SXM's 132 and no -lgip was found: compute is "
         "compute slices / 7.")
# The PCIe A100s are the same GA100 with the same memory: the SXM cards' MIG tables.
_MIG_TABLES["A100 40GB PCIe"] = _MIG_TABLES["A100 40GB"]
_MIG_TABLES.setdefault("A100 80GB PCIe", _MIG_TABLES["A100 80GB"])
_MIG_TABLES["H200 NVL"] = dict(
    _MIG_TABLES["H200"],
    note="ASSUMED the H200 SXM's table (the guide lists H200 NVL 141GB, 7 instances, "
         f"{_MIG_GUIDE_GPUS}).")

_MIG_NAME = re.compile(r"^(?P<parent>.*?)\s+MIG\s+(?P<profile>\d+g\.\d+gb(?:\+me)?)\s*$",
                       re.IGNORECASE)


def _parse_mig_name(name: str):
    """("NVIDIA A100-SXM4-80GB", "1g.10gb") from a MIG device's name, or None."""
    m = _MIG_NAME.match(name.strip())
    return (m["parent"], m["profile"].lower()) if m else None


def _mig_table(name):
    acc = get(name)
    table = _MIG_TABLES.get(acc.name)
    if table is None:
        have = ", ".join(_MIG_TABLES)
        raise ValueError(f"{acc.name} has no MIG (Multi-Instance GPU) profiles in the "
                         f"catalogue; MIG is an A100/A30/H100/H200/Blackwell data-centre "
                         f"feature. Profiles are tabulated for: {have}")
    return acc, table


def _compute_fraction(table, profile, sm_count=None):
    """The slice's share of the card's peaks: its SMs over the card's where known (a
    1g slice of an H100 has 16 of 132 SMs, 0.121, not 1/7), else compute slices / 7."""
    sms = sm_count if sm_count is not None else profile.sm_count
    if sms == sms and table.get("card_sms"):
        return min(1.0, sms / table["card_sms"])
    return profile.compute_slices / 7


def mig_profiles(name):
    """The MIG profiles of a GPU as a DataFrame indexed by profile ("1g.10gb" ...
    "7g.80gb" on an A100 80GB). Chapter: *Serving* (sharing a GPU).

    Columns: `compute_fraction` (the slice's SMs over the card's: 16/132 = 0.121 for an
    H100's 1g, 14/108 for an A100's, and 98/108 for an A100's 7g; compute slices / 7
    where the SMs are not known), `sm_count` (SMs `nvidia-smi mig -lgip` reports, NaN
    where not seen), `memory_fraction` and
    `bandwidth_fraction` (memory slices out of 8: a slice gets that share of the memory
    controllers, their L2 and their DRAM bandwidth), `memory_bytes` (what the slice
    reports where a published output gives it, else DERIVED as memory_fraction x the
    card's memory_bytes; `memory_source` says which), `max_instances`, `source`, `note`.
    A GPU without MIG raises ValueError."""
    import pandas as pd

    acc, table = _mig_table(name)
    rows = []
    for p in table["profiles"]:
        reported = p.memory_bytes == p.memory_bytes
        rows.append({
            "profile": p.profile,
            "compute_fraction": _compute_fraction(table, p),
            "sm_count": p.sm_count,
            "memory_fraction": p.memory_slices / 8,
            "bandwidth_fraction": p.memory_slices / 8,
            "memory_bytes": p.memory_bytes if reported else p.memory_slices / 8 * acc.memory_bytes,
            "memory_source": "reported" if reported else "derived",
            "max_instances": p.max_instances,
            "source": table["source"], "note": table["note"]})
    return pd.DataFrame(rows).set_index("profile")


def mig_slice(name, profile, *, memory_bytes=None, sm_count=None) -> Accelerator:
    """A MIG slice of a catalogue GPU as an Accelerator: peaks x compute_fraction (the
    slice's SMs over the card's; `sm_count` is what torch reports for the slice, else the
    profile's -lgip count), bandwidth and L2 x bandwidth_fraction, memory from the
    profile (or `memory_bytes`, what torch reports for the slice). Labelled an estimate:
    the scaling follows the slice's share of SMs and memory slices, not a datasheet."""
    acc, table = _mig_table(name)
    if not isinstance(profile, str):
        raise TypeError(f"profile must be a MIG profile name such as '1g.10gb', got {profile!r}")
    rows = {p.profile: p for p in table["profiles"]}
    key = _v.choice("profile", profile.strip().lower(), list(rows))
    p = rows[key]
    if sm_count is not None:
        card = table.get("card_sms")
        sm_count = _v.count("sm_count", sm_count, maximum=card,
                            why_maximum=f"the SMs of a whole {acc.name}" if card else "")
    compute, memory_share = _compute_fraction(table, p, sm_count), p.memory_slices / 8
    sms = sm_count if sm_count is not None else p.sm_count
    compute_how = (f"{sms:g} of {table['card_sms']} SMs" if sms == sms and table.get("card_sms")
                   else f"{p.compute_slices}/7 compute slices")
    if memory_bytes is not None:
        memory, how = _v.positive("memory_bytes", memory_bytes), "torch total_memory of this slice"
    elif p.memory_bytes == p.memory_bytes:
        memory, how = p.memory_bytes, "reported for the profile (see source)"
    else:
        memory, how = memory_share * acc.memory_bytes, "DERIVED: memory slices / 8 x the card's"
    return Accelerator(
        f"{acc.name} MIG {key}", memory, acc.bandwidth * memory_share,
        {d: v * compute for d, v in acc.peaks.items()}, tdp_w=None,
        cache_bytes=acc.cache_bytes * memory_share if acc.cache_bytes else None,
        source=table["source"], memory_source=how, estimated=True,
        note=f"ESTIMATE: MIG slice {key} of {acc.name}: peaks x {compute_how}, bandwidth "
             f"and L2 x {p.memory_slices}/8 memory slices, per the MIG user guide "
             f"({_MIG_GUIDE}). A slice has no NVLink/peer access.")


# --- What real code reaches ---------------------------------------------------------------
# Published measurements beside the datasheet's ceilings (issue: "ceilings you can reach").
_MAMF = ("https://github.com/stas00/ml-engineering/blob/744d01e18b79512572f64a6bbd8b5f4a725203a7/"
         "compute/accelerator/README.md#maximum-achievable-matmul-flops-comparison-table")
_GPT_FAST = ("https://github.com/pytorch-labs/gpt-fast/blob/32971d3129541c5bfb4f715abc33d1c5f408d204/"
             "README.md")
_ZZC_NOTE = ("square torch.mm, sizes 1024-10240, best size, crowd-sourced (rough)")

# name -> {quantity: (value, source)}
_ACHIEVABLE = {
    "T4": {"matmul_fp16_flops": (41.91e12, f"{_ZZC} (Colab, torch 2.8; Kaggle runs: 42.71, 41.93); {_ZZC_NOTE}")},
    "L4": {"matmul_fp16_flops": (68.83e12, f"{_ZZC}; {_ZZC_NOTE}"),
           "matmul_bf16_flops": (70.89e12, f"{_ZZC}; {_ZZC_NOTE}")},
    "L40S": {"matmul_fp16_flops": (264.02e12, f"{_ZZC}; {_ZZC_NOTE}"),
             "matmul_bf16_flops": (269.15e12, f"{_ZZC}; {_ZZC_NOTE}")},
    "V100 SXM2": {"matmul_fp16_flops": (94.84e12, f"{_ZZC} (Tesla V100-SXM2-16GB); {_ZZC_NOTE}")},
    "P100 PCIe": {"matmul_fp16_flops": (8.39e12, f"{_ZZC} (Kaggle); {_ZZC_NOTE}; below its "
                                                 "fp32 8.63 TFLOP/s")},
    "A100 40GB": {"matmul_bf16_flops": (271.2e12, f"{_MAMF} (row 'NVIDIA A100 SXM', memory size not stated)"),
                  "matmul_fp16_flops": (247.63e12, f"{_ZZC} ('NVIDIA A100 40GB'); {_ZZC_NOTE}")},
    "A100 80GB": {"matmul_bf16_flops": (271.2e12, f"{_MAMF} (row 'NVIDIA A100 SXM', memory size not stated)"),
                  "matmul_fp16_flops": (258.74e12, f"{_ZZC} ('NVIDIA A100 SXM4 80GB'); {_ZZC_NOTE}"),
                  "bandwidth_bytes_per_s": (1700e9, f"{_GPT_FAST}: 'Running on an A100 80GB, albeit "
                                                    "power-limited to 330 watts. Empirically, seems like "
                                                    "peak bandwidth is about 1700 GB/s.'")},
    "A100 80GB PCIe": {"matmul_bf16_flops": (252.9e12, f"{_MAMF} (row 'NVIDIA A100 PCIe', memory size not stated)")},
    "H100 SXM": {"matmul_bf16_flops": (794.5e12, _MAMF),
                 "matmul_fp8_flops": (1402.6e12, _MAMF),
                 "matmul_fp16_flops": (760.04e12, f"{_ZZC} ('NVIDIA H100 80GB HBM3'); {_ZZC_NOTE}")},
    "H100 PCIe": {"matmul_fp16_flops": (458.03e12, f"{_ZZC}; {_ZZC_NOTE}"),
                  "matmul_bf16_flops": (495.93e12, f"{_ZZC}; {_ZZC_NOTE}")},
    "H200": {"matmul_bf16_flops": (794.5e12, f"{_MAMF} (H100 SXM row, whose note says 'H200 is the same')"),
             "matmul_fp8_flops": (1453.4e12, _MAMF),
             "matmul_fp16_flops": (759.40e12, f"{_ZZC}; {_ZZC_NOTE}")},
    "GH200": {"bandwidth_bytes_per_s": (3614.60e9, "OpenCL coalesced read on an 'NVIDIA GH200 480GB': "
                                                   "https://github.com/mredenti/PowerCapping/blob/HEAD/"
                                                   "configuration/OpenCL_benchmark.md")},
    "GH200 144GB": {"matmul_bf16_flops": (828.6e12, f"{_MAMF} ('900W 141GiB HBM3e version')"),
                    "matmul_fp8_flops": (1535.0e12, f"{_MAMF} ('900W 141GiB HBM3e version')")},
    "B200": {"matmul_bf16_flops": (1745.0e12, _MAMF),
             "matmul_fp8_flops": (3432.5e12, _MAMF),
             "matmul_fp16_flops": (1627.64e12, f"{_ZZC} (GCP a4-highgpu-8g); {_ZZC_NOTE}")},
    "MI300X": {"matmul_bf16_flops": (668.4e12, _MAMF)},
    "RTX 4090": {"matmul_fp16_flops": (165.08e12, f"{_ZZC} (one of eight 4090 submissions, "
                                                  f"162-172 TFLOP/s); {_ZZC_NOTE}")},
    "RTX 3090": {"matmul_fp16_flops": (75.64e12, f"{_ZZC}; {_ZZC_NOTE}")},
}
_ACHIEVABLE_KEYS = ("matmul_fp16_flops", "matmul_bf16_flops", "matmul_fp8_flops",
                    "bandwidth_bytes_per_s")
_ACHIEVABLE_NOTES = {
    "T4": ("The 65 TFLOP/s datasheet peak is at the 1590 MHz boost clock; at the 585 MHz base "
           "clock the same tensor cores give 65 x 585/1590 = 23.9 TFLOP/s, and a 70 W T4 under "
           "load runs between (an MLPerf T4 fell to ~900 MHz: 36.8 TFLOP/s, https://github.com/"
           "mlcommons/inference_results_v0.5/issues/20). Measured fp16 torch.mm: ~42 TFLOP/s, "
           "64% of the datasheet. Jia et al. benchmarked the T4's memory hierarchy "
           "(arXiv:1903.07486); no figure is quoted here, and lab 1 measures yours. The "
           "practical ridge assumes the datasheet's 320 GB/s: ~131 FLOP/byte (datasheet: 203)."),
    "A100 80GB": ("gpt-fast's A100 ran power-capped at 330 W (of 400): its 1,397 GB/s of "
                  "weights at batch 1 is 69% of the datasheet's 2,039 GB/s and 82% of the "
                  "~1,700 GB/s it could reach."),
    "P100 PCIe": "No tensor cores; the measured fp16 matmul is half the 18.7 TFLOP/s datasheet "
                 "fp16 rate and no faster than fp32.",
}


def achievable(name):
    """Published measured ceilings of a catalogue device beside its datasheet's, as a
    pandas Series: `matmul_fp16_flops`, `matmul_bf16_flops`, `matmul_fp8_flops` (FLOP/s,
    best matmul found: Stas Bekman's MAMF search, or square torch.mm community runs),
    `bandwidth_bytes_per_s`, each with a `<quantity>_source`; NaN (source "") where no
    measurement was found. `ridge_point` = best 16-bit matmul / achievable bandwidth
    (NaN unless both are known); `ridge_point_datasheet_bandwidth` = best 16-bit matmul /
    the datasheet bandwidth. `note` explains device-specific caveats (the T4's clocks)."""
    import pandas as pd

    acc = get(name)
    data = _ACHIEVABLE.get(acc.name, {})
    out = {"name": acc.name}
    for key in _ACHIEVABLE_KEYS:
        value, source = data.get(key, (math.nan, ""))
        out[key], out[f"{key}_source"] = value, source
    matmul16 = max((v for v in (out["matmul_fp16_flops"], out["matmul_bf16_flops"])
                    if v == v), default=math.nan)
    bw = out["bandwidth_bytes_per_s"]
    out["ridge_point"] = matmul16 / bw if matmul16 == matmul16 and bw == bw else math.nan
    out["ridge_point_datasheet_bandwidth"] = (
        matmul16 / acc.bandwidth if matmul16 == matmul16 and acc.bandwidth > 0 else math.nan)
    out["note"] = _ACHIEVABLE_NOTES.get(acc.name, "")
    return pd.Series(out, name=acc.name)


def achievable_table():
    """`achievable` for every catalogue device that has a published measurement."""
    import pandas as pd

    return pd.DataFrame([achievable(n) for n in _ACHIEVABLE]).set_index("name")


# --- The device torch runs on ---------------------------------------------------------


def _cuda_index(device, torch):
    """(kind, index) for `device`: None (the current device, GPU when there is one), an
    int (a GPU index), "cpu", "cuda", "cuda:1" or a torch.device."""
    if device is None:
        if not torch.cuda.is_available():
            return "cpu", None
        try:
            return "cuda", int(torch.cuda.current_device())
        except Exception:  # a mocked or half-initialised torch.cuda: GPU 0
            return "cuda", 0
    if isinstance(device, bool):
        raise TypeError(f"device must be None, a GPU index, 'cpu', 'cuda[:n]' or a "
                        f"torch.device, got {device!r}")
    if isinstance(device, int):
        return "cuda", _v.count("device", device, minimum=0)
    if isinstance(device, str):
        try:
            device = torch.device(device)
        except (RuntimeError, ValueError):
            raise ValueError(f"device={device!r} is not a device torch knows; use 'cpu', "
                             f"'cuda' or 'cuda:<index>'") from None
    if not isinstance(device, torch.device):
        raise TypeError(f"device must be None, a GPU index, 'cpu', 'cuda[:n]' or a "
                        f"torch.device, got {device!r}")
    if device.type != "cuda":
        return "cpu", None
    if device.index is not None:
        return "cuda", device.index
    try:
        return "cuda", int(torch.cuda.current_device())
    except Exception:
        return "cuda", 0


def detect(device=None) -> Accelerator:
    """The device torch runs on: the GPU's catalogue entry (with the memory and L2 size
    torch reports for this card), a MIG slice of it, or the reference CPU entry.

    `device`: None (the current device), a GPU index, "cuda:1", a torch.device, or
    "cpu". The index asked for is the GPU read (torch.device("cuda:1") reads GPU 1).

    Never fails on a GPU it does not know: it warns and builds an entry from what torch
    reports (memory, L2, bandwidth from memory clock x bus width; NVML fills gaps when
    `nvidia-ml-py` is installed), labelled an estimate, with no peaks (ceilings become
    NaN: measure instead)."""
    import torch

    kind, index = _cuda_index(device, torch)
    if kind == "cpu":
        return cpu()
    if not torch.cuda.is_available():
        raise ValueError(f"device={device!r} asks for a CUDA GPU, but "
                         f"torch.cuda.is_available() is False on this machine")
    try:
        count = int(torch.cuda.device_count())
    except Exception:
        count = 0
    if count and index >= count:
        raise ValueError(f"device={device!r} asks for GPU {index}, but torch sees {count} "
                         f"GPU{'s' if count > 1 else ''} (indices 0-{count - 1})")
    return from_torch(torch.cuda.get_device_name(index),
                      torch.cuda.get_device_properties(index), index=index)


def from_torch(torch_name, props, *, index=0) -> Accelerator:
    """The catalogue entry for a GPU as torch describes it (`get_device_name`,
    `get_device_properties`), with this card's memory and L2; a MIG slice of a known GPU
    is scaled from its parent; an unknown GPU gets a labelled estimate."""
    if not isinstance(torch_name, str):
        raise TypeError(f"torch_name must be the string torch.cuda.get_device_name() "
                        f"returns, got {torch_name!r}")
    total = getattr(props, "total_memory", None)
    memory = float(total) if _v.is_number(total) and total > 0 else None
    l2 = getattr(props, "L2_cache_size", 0) or 0
    l2 = float(l2) if _v.is_number(l2) and l2 > 0 else None
    mig = _parse_mig_name(torch_name)
    if mig is not None and _DEVICES.lookup(torch_name) is None:
        parent, profile = mig
        try:
            sms = getattr(props, "multi_processor_count", None)
            return mig_slice(parent, profile, memory_bytes=memory,
                             sm_count=sms if _v.is_number(sms) and sms > 0 else None)
        except (KeyError, ValueError):
            pass  # an unknown parent or profile: estimate from what torch reports
    acc = _DEVICES.lookup(torch_name)
    if acc is None:
        return _estimate(torch_name, props, index, memory, l2)
    return dataclasses.replace(
        acc, memory_bytes=memory or acc.memory_bytes,
        cache_bytes=l2 or acc.cache_bytes,
        memory_source="torch total_memory of this card" if memory else acc.memory_source)


def _bandwidth_from_clock(memory_clock_khz, bus_width_bits) -> float:
    """Peak DRAM bytes/s from the memory clock (kHz, as CUDA and torch report it) and the
    bus width (bits): two transfers a clock. Matches the datasheets: T4 5001 MHz x 256 bit
    = 320 GB/s, H100 SXM 2619 MHz x 5120 bit = 3.35 TB/s (deviceQuery outputs)."""
    if not (_v.is_number(memory_clock_khz) and _v.is_number(bus_width_bits)
            and memory_clock_khz > 0 and bus_width_bits > 0):
        return math.nan
    return 2 * float(memory_clock_khz) * 1e3 * float(bus_width_bits) / 8


def _nvml_facts(props, index) -> dict:
    """What NVML adds for a GPU (memory total, max memory clock, bus width, power limit),
    or {} when `nvidia-ml-py` is not installed or NVML fails. The handle is found by the
    UUID torch reports (CUDA_VISIBLE_DEVICES can renumber GPUs), else by index."""
    try:
        import pynvml
    except ImportError:
        return {}
    facts = {}
    try:
        pynvml.nvmlInit()
    except Exception:
        return {}
    try:
        handle = None
        uuid = getattr(props, "uuid", None)
        if uuid:
            text = str(uuid)
            try:
                handle = pynvml.nvmlDeviceGetHandleByUUID(
                    text if text.startswith(("GPU-", "MIG-")) else "GPU-" + text)
            except Exception:
                handle = None
        if handle is None:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        for key, call in (
                ("memory_bytes", lambda: pynvml.nvmlDeviceGetMemoryInfo(handle).total),
                ("memory_clock_mhz", lambda: pynvml.nvmlDeviceGetMaxClockInfo(
                    handle, pynvml.NVML_CLOCK_MEM)),
                ("bus_width_bits", lambda: pynvml.nvmlDeviceGetMemoryBusWidth(handle)),
                ("power_limit_w", lambda: pynvml.nvmlDeviceGetPowerManagementDefaultLimit(
                    handle) / 1000)):
            try:
                value = call()
            except Exception:
                continue
            if _v.is_number(value) and value > 0:
                facts[key] = float(value)
    except Exception:
        return facts
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return facts


def _estimate(torch_name, props, index, memory, l2) -> Accelerator:
    """An entry for a GPU the catalogue does not know, from torch (and NVML)."""
    nvml = _nvml_facts(props, index)
    bandwidth = _bandwidth_from_clock(getattr(props, "memory_clock_rate", 0),
                                      getattr(props, "memory_bus_width", 0))
    how = ["memory and L2 from torch"]
    if bandwidth == bandwidth:
        how.append("bandwidth = 2 x memory clock x bus width from torch")
    elif "memory_clock_mhz" in nvml and "bus_width_bits" in nvml:
        bandwidth = _bandwidth_from_clock(nvml["memory_clock_mhz"] * 1e3, nvml["bus_width_bits"])
        how.append("bandwidth = 2 x max memory clock x bus width from NVML")
    if memory is None and "memory_bytes" in nvml:
        memory = nvml["memory_bytes"]
        how.append("memory from NVML")
    if memory is None:
        raise ValueError(f"cannot describe {torch_name!r}: torch reports no total_memory "
                         f"and NVML is not available")
    sms = getattr(props, "multi_processor_count", None)
    cc = (getattr(props, "major", None), getattr(props, "minor", None))
    facts = [f"{sms} SMs" if sms else "", f"compute capability {cc[0]}.{cc[1]}"
             if None not in cc else "", f"{getattr(props, 'clock_rate', 0) / 1e3:g} MHz SM clock"
             if _v.is_number(getattr(props, "clock_rate", None)) and props.clock_rate else ""]
    closest = _DEVICES.closest(torch_name, n=3) or ["none"]
    warnings.warn(
        f"{torch_name!r} is not in the gpuinfer catalogue: its peak FLOP/s are unknown and "
        f"its bandwidth is {'an estimate' if bandwidth == bandwidth else 'unknown'}. "
        f"Measurements still work; ceilings need a catalogue entry (closest: "
        f"{', '.join(closest)}).", stacklevel=3)
    return Accelerator(
        torch_name, memory_bytes=memory, bandwidth=bandwidth, peaks={},
        cache_bytes=l2, tdp_w=nvml.get("power_limit_w"), estimated=True,
        source="torch.cuda.get_device_properties" + (" + NVML" if nvml else ""),
        memory_source="torch total_memory of this card",
        note="ESTIMATE, not a datasheet: not in the catalogue; " + "; ".join(how)
             + (f" ({', '.join(f for f in facts if f)})" if any(facts) else "")
             + ". No peaks: ceilings are NaN; measure them.")


# --- interconnects ----------------------------------------------------------------------
# Chapter: *Beyond one GPU*. A separate table: the links between devices, not the devices.
#
# Bandwidth is stated PER DIRECTION (bytes/s a device can send while it also receives as
# much). NVIDIA datasheets quote NVLink and PCIe as the *bidirectional* total (send plus
# receive: "900 GB/s" for H100 NVLink is 450 GB/s each way); a ring all-reduce sends one
# way round the ring, so its time uses the per-direction figure, as nccl-tests' "bus
# bandwidth" does. `bidirectional_bytes_per_s` gives the datasheet's number back.
#
# `domain_gpus`: how many GPUs share the link's domain, i.e. the largest group that talks
# over it. HGX/DGX A100, H100, H200 and B200 connect 8 GPUs by NVLink/NVSwitch; beyond 8,
# traffic crosses the network (InfiniBand), unless the system is an NVLink-switch rack
# (GH200 NVL32: 32; GB200 NVL72: 72). A network reaches any number of nodes (math.inf).
#
# Latency: NCCL's own cost model (src/graph/tuning.cc at the commit cited), per algorithm
# and protocol: a fixed cost per call (`base_latency_s`) plus a cost per ring step
# (`step_latency_s`; an all-reduce on N devices takes 2(N-1) steps). The attributes
# `step_latency_s`/`base_latency_s` of an Interconnect are the Ring/LL values (the
# small-message protocol); `Interconnect.nccl(protocol)` and `nccl_protocols()` give all
# of them. They are NCCL's estimates at that commit, not measurements.

_NCCL_COMMIT = "5067397c2676d5aed50042fc39e5c8ee96eb0027"
_NCCL_TUNING = f"https://github.com/NVIDIA/nccl/blob/{_NCCL_COMMIT}/src/graph/tuning.cc"
_NCCL_LL128 = "https://github.com/NVIDIA/nccl/issues/281"
_NCCL_LL128_NVLINK = "https://github.com/NVIDIA/nccl/issues/786"
_NCCL_NVLS = "https://github.com/NVIDIA/nccl/issues/1031"
_NCCL_TOPO = f"https://github.com/NVIDIA/nccl/blob/{_NCCL_COMMIT}/src/graph/topo.h"
#: The bandwidth NCCL's topology gives one NVLink, GB/s a direction, by GPU generation
#: (topo.h: SM70_NVLINK_BW 20.0, SM80 20.0, SM90 20.6, SM100 40.1), against the 25, 25,
#: 25 and 50 GB/s the datasheets quote. topo.cc connects a GPU's links at count x this
#: figure, and the ring's bus bandwidth (nChannels x bwIntra, tuning.cc) cannot exceed
#: it: on an H100, 18 x 20.6 = 370.8 GB/s, not 450.
NCCL_NVLINK_GB_PER_S = {"volta": 20.0, "ampere": 20.0, "hopper": 20.6, "blackwell": 40.1}

_US = 1e-6
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
             "Simple": (0.92, "all-reduce busBw * .92 (* .85 more for a pure tree pattern)")},
}
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

# Kept for code that imported them: NCCL's Ring/LL model.
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
    network step), and NCCL halves a tree's bus bandwidth into its algorithm bandwidth.
    LL128 is enabled by default only over NVLink (and, on Hopper and later, across
    nodes): NCCL relies on 128-byte stores arriving in order (""" + _NCCL_LL128_NVLINK + """).
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
        name = _text("name", self.name)
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
            _text(attr, getattr(self, attr))
        if self.domain_gpus != math.inf:
            object.__setattr__(self, "domain_gpus",
                               _v.count("domain_gpus", self.domain_gpus, minimum=1))
        for attr in ("gpus", "aliases"):
            value = getattr(self, attr)
            if isinstance(value, str) or not isinstance(value, (tuple, list)):
                raise TypeError(f"{attr} must be a tuple of names, got {value!r}")
            object.__setattr__(self, attr, tuple(_text(f"each of {attr}", x) for x in value))

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


def _nvlink(name, bidirectional_gb_per_s, gpus, source, note, aliases=(), domain_gpus=8,
            domain_source=_HGX_DOMAIN, *, links, architecture):
    """`links` NVLinks a GPU; NCCL's topology prices each at NCCL_NVLINK_GB_PER_S of its
    `architecture` (topo.h), which bounds every NCCL bus bandwidth on the link."""
    per_link = NCCL_NVLINK_GB_PER_S[architecture]
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
    _nvlink("NVLink 2", 300, ("V100 SXM2", "V100 SXM2 32GB"), _V100_DATASHEET,
            "Six links of 25 GB/s each way. DGX-1 joins 8 V100s in a hybrid cube-mesh: "
            "not every pair is directly linked.", aliases=("nvlink2", "nvlink v100"),
            domain_source="8 GPUs (DGX-1): UNSOURCED here", links=6, architecture="volta"),
    _nvlink("NVLink 3", 600, ("A100 40GB", "A100 80GB"), _A100_DATASHEET,
            "A100 SXM: twelve links of 25 GB/s each way.", aliases=("nvlink3", "nvlink a100"),
            links=12, architecture="ampere"),
    _nvlink("NVLink 4", 900, ("H100 SXM", "H200"), "https://www.nvidia.com/en-us/data-center/h100/",
            "H100 SXM and H200 SXM (https://www.nvidia.com/en-us/data-center/h200/): "
            "eighteen links of 25 GB/s each way.",
            aliases=("nvlink4", "nvlink h100", "nvlink h200"), links=18, architecture="hopper"),
    _nvlink("NVLink 5", 1800, ("B200",), _BLACKWELL_DATASHEET,
            "HGX B200, per GPU (8 GPUs, 14.4 TB/s total): eighteen links of 50 GB/s each way.",
            aliases=("nvlink5", "nvlink b200"), links=18, architecture="blackwell"),
    _nvlink("NVLink bridge (H100 NVL pair)", 600, ("H100 NVL",),
            "https://www.aiminingco.com/gpu/h100-nvl/specs",
            "H100 NVL cards are bridged in pairs (600 GB/s bidirectional: twelve NVLink 4 "
            "links of 25 GB/s each way, derived from the total).",
            aliases=("h100 nvl bridge",), domain_gpus=2,
            domain_source="a pair of cards: https://www.aiminingco.com/gpu/h100-nvl/specs",
            links=12, architecture="hopper"),
    _nvlink("NVLink 4 (GH200 NVL32)", 900, ("GH200", "GH200 144GB"),
            "https://developer.nvidia.com/blog/one-giant-superchip-for-llms-recommenders-and-"
            "gnns-introducing-nvidia-gh200-nvl32/",
            "NVLink-switch rack of 32 GH200 superchips; the GPU's NVLink 4 is 900 GB/s "
            "(https://en.wikipedia.org/wiki/NVLink), eighteen links. A GH200 rented alone has "
            "no NVLink peer.", links=18, architecture="hopper",
            aliases=("gh200 nvl32", "nvl32"), domain_gpus=32,
            domain_source="'a 32-GPU NVIDIA NVLink domain': https://developer.nvidia.com/blog/"
                          "one-giant-superchip-for-llms-recommenders-and-gnns-introducing-"
                          "nvidia-gh200-nvl32/"),
    _nvlink("NVLink 5 (GB200 NVL72)", 1800, ("GB200",), _BLACKWELL_DATASHEET,
            "NVLink-switch rack: 72 Blackwell GPUs, 130 TB/s of NVLink in total (eighteen "
            "links a GPU).", aliases=("gb200 nvl72", "nvl72"), domain_gpus=72,
            links=18, architecture="blackwell",
            domain_source="72 GPUs, 130 TB/s: " + _BLACKWELL_DATASHEET),
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

_LINKS = _Table(_INTERCONNECTS, "interconnect", "interconnect")


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


# The host link (PCIe generation, x16) of catalogue GPUs, where a source says it: how a
# card's host-to-device copies are bounded (`host_link`).
_HOST_LINKS = {
    "T4": (3, "https://manualmachine.com/pny/tcst4mpb/8129101-user-manual"),
    "V100 PCIe 16GB": (3, "https://sysrqmts.com/it/gpus/compare/nvidia-tesla-t10-processor-"
                          "vs-nvidia-tesla-v100-pcie-16-gb"),
    "V100 PCIe 32GB": (3, "the V100 PCIe 16GB's, assumed"),
    "P100 PCIe": (3, "https://cputronic.com/gpu/nvidia-tesla-p100-pcie-16-gb"),
    "L4": (4, "https://store.sourcecode.com/en-us/bg-bucket-compare/125/9820"),
    "L40": (4, "https://www.mullet.se/product.html?product_id=355414"),
    "L40S": (4, "https://www.mullet.se/product.html?product_id=355414"),
    "A40": (4, "NVIDIA A40 datasheet as reproduced in https://www.ecer.com/corp/details-"
               "uuuedqa-p1bsay9-multi-display-setups-supported-by-48gb-gddr6-ecc-memory-"
               "nvidia-a40-gpu-and-vga-outputs.html"),
    "A10": (4, "https://sysrqmts.com/vi/gpus/compare/nvidia-a10-pcie-vs-nvidia-a2"),
    "RTX A6000": (4, "https://servethehome.com/nvidia-rtx-a6000-48gb-gpu-drops-quadro-designation"),
    "RTX 6000 Ada": (4, "https://github.com/atineoSE/coding-model-seeks-gpu/blob/"
                        "cbdfc2fb1d6363eabc8aeadf6f5aac297bfc0def/pipeline/pipeline/sources/"
                        "rtx6000ada_specs.md"),
    "A100 40GB PCIe": (4, _A100_DATASHEET + " ('PCIe Gen4: 64GB/s')"),
    "A100 80GB PCIe": (4, _A100_DATASHEET + " ('PCIe Gen4: 64GB/s')"),
    "H100 PCIe": (5, "https://docs.nvidia.com/launchpad/ai/h100-mig/latest/h100-mig-gpu.html"),
    "H200": (5, "https://raw.githubusercontent.com/mlcommons/inference_results_v4.1/main/closed/"
                "NVIDIA/systems/H200-SXM-141GBx8_TRT_MaxQ.json"),
    "B200": (5, _BLACKWELL_DATASHEET),
    "GB200": (5, _BLACKWELL_DATASHEET),
}


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
