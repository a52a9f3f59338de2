"""What real code reaches: published measured ceilings beside the datasheet's
(`achievable`, `achievable_table`), and a device with them in place of its peaks
(`derated`). Decisions rest on these; the datasheet's ceiling stands beside."""

from __future__ import annotations

import dataclasses
import math

from gpuinfer import validate as _v
from gpuinfer.hardware.devices import MEASURED_KEYS, Accelerator, catalogue_entry, names
from gpuinfer.hardware import get

# name -> {quantity: (value, source)} and name -> note, read from the catalogue entries
# (each GPU's `measured` and `measured_note`).
_ACHIEVABLE = {name: catalogue_entry(name).measured for name in names()
               if catalogue_entry(name).measured}
_ACHIEVABLE_NOTES = {name: catalogue_entry(name).measured_note for name in names()
                     if catalogue_entry(name).measured_note}


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
    for key in MEASURED_KEYS:
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
    used = [k for k in MEASURED_KEYS if a[k] == a[k]]
    if bw != bw:  # none published
        bw = acc.bandwidth * (fraction if fraction is not None else 1.0)
    return dataclasses.replace(
        acc, name=f"{acc.name} (achievable)", peaks=peaks, bandwidth=float(bw),
        note=("Published measured ceilings in place of the datasheet's: "
              + (", ".join(f"{k} ({a[k + '_source']})" for k in used) or "none published")
              + ". " + a["note"]).strip())


