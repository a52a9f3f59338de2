"""The roofline model (Williams, Waterman & Patterson 2009). Chapter: *The roofline model*.

    attainable FLOP/s = min(peak FLOP/s, bandwidth x arithmetic intensity)

Intensity is FLOP per byte moved to or from DRAM; the ridge point is the intensity where
the two roofs meet, peak / bandwidth. The same statement as a time, for one operation
that does `flops` of arithmetic on `bytes` of memory traffic:

    seconds = max(bytes / bandwidth, flops / peak)                  (`op_seconds`)

This module is the only place that formula is written. A model's step is a table of
operations (the matmuls, attention, ...), each with its FLOPs, its bytes and the format
it computes in; `evaluate` puts every row on a device's roofline, and the step takes the
*sum* of the rows' times, because the kernels run one after another (Pope et al. 2023;
the JAX scaling book's inference chapter; per-layer tools such as LLM-Viewer). Every
model in the package (`llm`, `parallel`, `tabular`, `serving`) builds its operations and
asks `evaluate`. A device without a catalogue peak (or bandwidth) for a format gets NaN
times, never a made-up number (`peak_or_nan`).
"""

from __future__ import annotations

import math

import numpy as np

from . import dtypes as _dtypes
from . import hardware as _hardware
from . import validate as _v

#: Columns an operations table must have.
OP_COLUMNS = ("flops", "bytes", "dtype")


def attainable_flops(intensity, peak_flops, bandwidth):
    """Roofline FLOP/s at `intensity` (FLOP/byte; scalar or array), given the peak
    (FLOP/s) and the memory bandwidth (bytes/s). Vectorised over numpy arrays."""
    intensity = _v.non_negative("intensity", intensity, array=True)
    peak = _v.positive("peak_flops", peak_flops, array=True)
    bw = _v.positive("bandwidth", bandwidth, array=True)
    return _v.scalar_or_array(np.minimum(peak, bw * intensity))


def op_seconds(flops, bytes_, peak_flops, bandwidth):
    """Seconds for an operation on the roofline: max(bytes / bandwidth, flops / peak).
    Vectorised; a NaN peak or bandwidth (unknown) gives NaN, not a number."""
    flops = _v.non_negative("flops", flops, array=True)
    bytes_ = _v.non_negative("bytes", bytes_, array=True)
    peak = _positive_or_nan("peak_flops", peak_flops)
    bw = _positive_or_nan("bandwidth", bandwidth)
    return _v.scalar_or_array(_seconds(flops, bytes_, peak, bw))


def _seconds(flops, nbytes, peak, bandwidth):
    """The roofline, unchecked: for callers that built their arguments themselves."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.maximum(nbytes / bandwidth, flops / peak)


def _positive_or_nan(name, value):
    """A positive number or array; NaN passes (it means "unknown" and gives NaN times)."""
    if value is None or isinstance(value, (str, bool)):
        raise TypeError(f"{name} must be a positive number (or NaN: unknown), got {value!r}")
    arr = np.asarray(value, dtype=float)
    known = arr[~np.isnan(arr)]
    if np.any(known <= 0) or np.any(np.isinf(known)):
        raise ValueError(f"{name} must be positive and finite (or NaN: unknown), got {value!r}")
    return arr


def peak_or_nan(accelerator, dtype) -> float:
    """The device's dense peak FLOP/s for `dtype`, or NaN when the catalogue has none
    (a T4 has no bf16 peak; a GPU missing from the catalogue has no peaks at all)."""
    acc = _hardware.get(accelerator)
    peak = _dtypes.peak_dtype(dtype)  # an unknown format is an error, not a NaN
    try:
        return acc.peak_flops(peak)
    except ValueError:
        return math.nan


def bandwidth_or_nan(accelerator) -> float:
    acc = _hardware.get(accelerator)
    bw = acc.bandwidth
    return float(bw) if bw and bw > 0 and math.isfinite(bw) else math.nan


def evaluate(ops, accelerator):
    """Put each operation of a table on `accelerator`'s roofline.

    `ops`: a DataFrame (or a mapping {name: {"flops", "bytes", "dtype"}}) with one row per
    operation: `flops` (FLOP), `bytes` (bytes moved to or from DRAM), `dtype` (the format
    the operation computes in: its peak). Returns a copy with `intensity` (FLOP/byte),
    `memory_s`, `compute_s`, `seconds` = max of the two, and `bound` ("memory" or
    "compute"; "unknown" where the device lacks the peak). The step's time is
    `seconds.sum()`: operations run one after another.
    """
    import pandas as pd

    acc = _hardware.get(accelerator)
    if isinstance(ops, dict):
        ops = pd.DataFrame.from_dict(ops, orient="index")
    if not isinstance(ops, pd.DataFrame):
        raise TypeError(f"ops must be a DataFrame (or a mapping of rows) with columns "
                        f"{', '.join(OP_COLUMNS)}, got {type(ops).__name__}")
    missing = [c for c in OP_COLUMNS if c not in ops.columns]
    if missing:
        raise ValueError(f"ops lacks the columns {missing}; each operation needs "
                         f"{', '.join(OP_COLUMNS)}")
    out = ops.copy()
    flops = _v.non_negative("ops['flops']", out["flops"].to_numpy(dtype=float), array=True)
    nbytes = _v.non_negative("ops['bytes']", out["bytes"].to_numpy(dtype=float), array=True)
    bw = bandwidth_or_nan(acc)
    peaks = np.array([peak_or_nan(acc, d) for d in out["dtype"]], dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        out["intensity"] = flops / nbytes
        out["memory_s"] = nbytes / bw
        out["compute_s"] = flops / peaks
    out["seconds"] = op_seconds(flops, nbytes, peaks, bw) if len(out) else []
    bound = np.where(out["compute_s"] > out["memory_s"], "compute", "memory")
    unknown = np.isnan(out["memory_s"]) | np.isnan(out["compute_s"])
    out["bound"] = np.where(unknown, "unknown", bound)
    return out


def total_seconds(ops, accelerator) -> float:
    """The step time of an operations table: the sum of its rows' roofline times."""
    return float(evaluate(ops, accelerator)["seconds"].sum())


def step_seconds(terms, accelerator):
    """Vectorised form of `total_seconds` for tables whose FLOPs and bytes are arrays
    (a sweep over batch or context): `terms` maps an operation name to (flops, bytes,
    dtype); returns sum over operations of `op_seconds`, broadcast over the arrays."""
    acc = _hardware.get(accelerator)
    bw = bandwidth_or_nan(acc)
    total = 0.0
    for flops, nbytes, dtype in terms.values():
        total = total + _seconds(np.asarray(flops, dtype=float), np.asarray(nbytes, dtype=float),
                                 peak_or_nan(acc, dtype), bw)
    return _v.scalar_or_array(total)


def _dims(m, n, k):
    return tuple(_v.count(name, v, maximum=1 << 40) for name, v in (("m", m), ("n", n), ("k", k)))


def matmul_flops(m, n, k) -> float:
    """FLOPs of [m, k] @ [k, n]: one multiply and one add per (i, j, l)."""
    m, n, k = _dims(m, n, k)
    return 2.0 * m * n * k


def matmul_bytes(m, n, k, dtype="fp16") -> float:
    """Fewest DRAM bytes for [m, k] @ [k, n] -> [m, n]: read A and B once, write C once
    (the compulsory traffic; a real kernel re-reads tiles of a large GEMM, so this is a
    lower bound on its bytes and an upper bound on its intensity)."""
    m, n, k = _dims(m, n, k)
    return (m * k + k * n + m * n) * _dtypes.bytes_per_element(dtype)


def matmul_intensity(m, n, k, dtype="fp16") -> float:
    """Arithmetic intensity of the matmul in FLOP/byte (its best case: each operand moved once)."""
    return matmul_flops(m, n, k) / matmul_bytes(m, n, k, dtype)


def ridge_rows(n, k, accelerator, dtype="fp16") -> int:
    """Labs *fp16 matmuls on the roofline*: the smallest m at which [m, k] @ [k, n] in
    `dtype` reaches the device's ridge point (compute-bound on the roofline). From
    2mnk / ((mk + kn + mn) b) >= R: m >= R b k n / (2 n k - R b (k + n)). For a square
    weight of 8192 that is a little above the ridge itself. Raises ValueError when no m
    reaches it (a tiny k, n), math.inf never."""
    n, k = _dims(1, n, k)[1:]
    acc = _hardware.get(accelerator)
    ridge = acc.ridge_point(dtype)
    b = _dtypes.bytes_per_element(dtype)
    margin = 2.0 * n * k - ridge * b * (k + n)
    if margin <= 0:
        raise ValueError(f"no m makes [m, {k}] @ [{k}, {n}] compute-bound on {acc.name}: "
                         f"even m -> infinity reaches {2 * n * k / (b * (k + n)):.3g} FLOP/byte, "
                         f"below the ridge {ridge:.3g}")
    return max(1, math.ceil(ridge * b * k * n / margin - 1e-9))


def plot(accelerator, dtype="fp16", points=None, ax=None, *, label=None,
         intensity_range=(0.1, 10_000.0)):
    """Draw the roofline of `accelerator` for `dtype` on log-log axes.

    `points`: optional shapes or measurements to place on it, either a mapping
    {label: intensity} (placed on the roof), or a DataFrame / list of dicts with
    `intensity` and `flops` columns (measured FLOP/s), and optionally `label`.
    Returns the matplotlib Axes.
    """
    import matplotlib.pyplot as plt

    acc = _hardware.get(accelerator)
    peak = acc.peak_flops(dtype)
    ridge = acc.ridge_point(dtype)
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    lo, hi = intensity_range
    x = np.logspace(np.log10(lo), np.log10(hi), 400)
    line, = ax.loglog(x, attainable_flops(x, peak, acc.bandwidth) / 1e12, lw=2,
                      label=label or f"{acc.name} {_dtypes.canonical(dtype)} roofline")
    ax.axvline(ridge, color=line.get_color(), ls=":", lw=1)
    ax.annotate(f"ridge {ridge:.0f} FLOP/B", (ridge, peak / 1e12), xytext=(5, -15),
                textcoords="offset points", fontsize=8, color=line.get_color())
    if points is not None:
        _place_points(ax, points, peak, acc.bandwidth)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("TFLOP/s")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return ax


_MARKERS = "osD^vP*X"


def _place_points(ax, points, peak, bandwidth):
    if isinstance(points, dict):
        rows = [{"label": k, "intensity": v} for k, v in points.items()]
    elif hasattr(points, "to_dict"):
        rows = points.to_dict("records")
    else:
        rows = list(points)
    for i, row in enumerate(rows):
        intensity = row["intensity"]
        flops = row.get("flops", attainable_flops(intensity, peak, bandwidth))
        ax.loglog([intensity], [flops / 1e12], _MARKERS[i % len(_MARKERS)], ms=7,
                  mfc="none" if "flops" not in row else None, label=row.get("label"))
