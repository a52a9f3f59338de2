"""What real code reaches: published measured ceilings beside the datasheet's
(`achievable`, `achievable_table`), and a device with them in place of its peaks
(`derated`). Decisions rest on these; the datasheet's ceiling stands beside."""

from __future__ import annotations

import dataclasses
import math

from .. import validate as _v
from .devices import ZZC, Accelerator
from .lookup import get

_MAMF = ("https://github.com/stas00/ml-engineering/blob/744d01e18b79512572f64a6bbd8b5f4a725203a7/"
         "compute/accelerator/README.md#maximum-achievable-matmul-flops-comparison-table")
_GPT_FAST = ("https://github.com/pytorch-labs/gpt-fast/blob/32971d3129541c5bfb4f715abc33d1c5f408d204/"
             "README.md")
_ZZC_NOTE = ("square torch.mm, sizes 1024-10240, best size, crowd-sourced (rough)")

#: Bekman's MAMF table (`_MAMF`, at the commit cited), bf16 and fp8, TFLOP/s as published:
#: each figure lives here once; `_ACHIEVABLE` and `reference.PUBLISHED` read it.
MAMF_TFLOPS = {"bf16": {"NVIDIA A100 SXM": 271.2, "NVIDIA A100 PCIe": 252.9,
                        "NVIDIA H100 SXM": 794.5, "NVIDIA GH200 SXM": 828.6,
                        "NVIDIA B200 SXM": 1745.0, "AMD MI300X": 668.4},
               "fp8": {"NVIDIA H100 SXM": 1402.6, "NVIDIA GH200 SXM": 1535.0,
                       "NVIDIA B200 SXM": 3432.5, "NVIDIA H200 SXM": 1453.4}}
MAMF_SOURCE = _MAMF


def _mamf(row, dtype="bf16"):
    return MAMF_TFLOPS[dtype][row] * 1e12


# name -> {quantity: (value, source)}
_ACHIEVABLE = {
    "T4": {"matmul_fp16_flops": (41.91e12, f"{ZZC} (Colab, torch 2.8; Kaggle runs: 42.71, 41.93); {_ZZC_NOTE}")},
    "L4": {"matmul_fp16_flops": (68.83e12, f"{ZZC}; {_ZZC_NOTE}"),
           "matmul_bf16_flops": (70.89e12, f"{ZZC}; {_ZZC_NOTE}")},
    "L40S": {"matmul_fp16_flops": (264.02e12, f"{ZZC}; {_ZZC_NOTE}"),
             "matmul_bf16_flops": (269.15e12, f"{ZZC}; {_ZZC_NOTE}")},
    "V100 SXM2": {"matmul_fp16_flops": (94.84e12, f"{ZZC} (Tesla V100-SXM2-16GB); {_ZZC_NOTE}")},
    "P100 PCIe": {"matmul_fp16_flops": (8.39e12, f"{ZZC} (Kaggle); {_ZZC_NOTE}; below its "
                                                 "fp32 8.63 TFLOP/s")},
    "A100 40GB": {"matmul_bf16_flops": (_mamf("NVIDIA A100 SXM"), f"{_MAMF} (row 'NVIDIA A100 SXM', memory size not stated)"),
                  "matmul_fp16_flops": (247.63e12, f"{ZZC} ('NVIDIA A100 40GB'); {_ZZC_NOTE}")},
    "A100 80GB": {"matmul_bf16_flops": (_mamf("NVIDIA A100 SXM"), f"{_MAMF} (row 'NVIDIA A100 SXM', memory size not stated)"),
                  "matmul_fp16_flops": (258.74e12, f"{ZZC} ('NVIDIA A100 SXM4 80GB'); {_ZZC_NOTE}"),
                  "bandwidth_bytes_per_s": (1700e9, f"{_GPT_FAST}: 'Running on an A100 80GB, albeit "
                                                    "power-limited to 330 watts. Empirically, seems like "
                                                    "peak bandwidth is about 1700 GB/s.'")},
    "A100 80GB PCIe": {"matmul_bf16_flops": (_mamf("NVIDIA A100 PCIe"), f"{_MAMF} (row 'NVIDIA A100 PCIe', memory size not stated)")},
    "H100 SXM": {"matmul_bf16_flops": (_mamf("NVIDIA H100 SXM"), _MAMF),
                 "matmul_fp8_flops": (_mamf("NVIDIA H100 SXM", "fp8"), _MAMF),
                 "matmul_fp16_flops": (760.04e12, f"{ZZC} ('NVIDIA H100 80GB HBM3'); {_ZZC_NOTE}")},
    "H100 PCIe": {"matmul_fp16_flops": (458.03e12, f"{ZZC}; {_ZZC_NOTE}"),
                  "matmul_bf16_flops": (495.93e12, f"{ZZC}; {_ZZC_NOTE}")},
    "H200": {"matmul_bf16_flops": (_mamf("NVIDIA H100 SXM"), f"{_MAMF} (H100 SXM row, whose note says 'H200 is the same')"),
             "matmul_fp8_flops": (_mamf("NVIDIA H200 SXM", "fp8"), _MAMF),
             "matmul_fp16_flops": (759.40e12, f"{ZZC}; {_ZZC_NOTE}")},
    "GH200": {"bandwidth_bytes_per_s": (3614.60e9, "OpenCL coalesced read on an 'NVIDIA GH200 480GB': "
                                                   "https://github.com/mredenti/PowerCapping/blob/HEAD/"
                                                   "configuration/OpenCL_benchmark.md")},
    "GH200 144GB": {"matmul_bf16_flops": (_mamf("NVIDIA GH200 SXM"), f"{_MAMF} ('900W 141GiB HBM3e version')"),
                    "matmul_fp8_flops": (_mamf("NVIDIA GH200 SXM", "fp8"), f"{_MAMF} ('900W 141GiB HBM3e version')")},
    "B200": {"matmul_bf16_flops": (_mamf("NVIDIA B200 SXM"), _MAMF),
             "matmul_fp8_flops": (_mamf("NVIDIA B200 SXM", "fp8"), _MAMF),
             "matmul_fp16_flops": (1627.64e12, f"{ZZC} (GCP a4-highgpu-8g); {_ZZC_NOTE}")},
    "MI300X": {"matmul_bf16_flops": (_mamf("AMD MI300X"), _MAMF)},
    "RTX 4090": {"matmul_fp16_flops": (165.08e12, f"{ZZC} (one of eight 4090 submissions, "
                                                  f"162-172 TFLOP/s); {_ZZC_NOTE}")},
    "RTX 3090": {"matmul_fp16_flops": (75.64e12, f"{ZZC}; {_ZZC_NOTE}")},
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


