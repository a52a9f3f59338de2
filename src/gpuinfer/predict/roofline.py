"""The roofline model (Williams, Waterman & Patterson 2009). Chapter: *The roofline model*.

    attainable FLOP/s = min(peak FLOP/s, bandwidth x arithmetic intensity)

Intensity is FLOP per byte moved to or from DRAM; the ridge point is the intensity where
the two roofs meet, peak / bandwidth. The same statement as a time, for one operation
that does `flops` of arithmetic on `bytes` of memory traffic:

    seconds = max(bytes / bandwidth, flops / peak)                  (`op_time_s`)

This module is the only place that formula is written. A model's step is a table of
operations (the matmuls, attention, ...), each with its FLOPs, its bytes and the format
it computes in; `evaluate` puts every row on a device's roofline, and the step takes the
*sum* of the rows' times, because the kernels run one after another (Pope et al. 2023;
the JAX scaling book's inference chapter; per-layer tools such as LLM-Viewer). Every
model in the package (`llm`, `parallel`, `tabular`, `serving`) builds its operations and
asks `evaluate`. A device without a catalogue peak (or bandwidth) for a format raises
`MissingPeak` naming both, never a made-up number (`missing="nan"` gives NaN times, for a
table that shows every device).
"""

from __future__ import annotations

import math

import numpy as np

from gpuinfer import dtypes as _dtypes
from gpuinfer import hardware as _hardware
from gpuinfer import validate as _v

#: Columns an operations table must have.
OP_COLUMNS = ("flops", "bytes", "dtype")


#: How the roofline's arguments are checked (`validate.checked`), so the bodies below
#: are the formulas alone: amounts (FLOP, bytes, FLOP/byte) are numbers or arrays >= 0;
#: rates (FLOP/s, bytes/s) are > 0, and in `op_time_s` NaN means "unknown".
_amount = _v.rule(_v.non_negative, array=True)
_rate = _v.rule(_v.positive, array=True)
_rate_or_nan = _v.positive_or_nan


@_v.checked(intensity=_amount, peak_flops=_rate, bandwidth=_rate, returns=_v.scalar_or_array)
def attainable_flops(intensity, peak_flops, bandwidth):
    """Roofline FLOP/s at `intensity` (FLOP/byte; scalar or array), given the peak
    (FLOP/s) and the memory bandwidth (bytes/s). Vectorised over numpy arrays."""
    return np.minimum(peak_flops, bandwidth * intensity)


@_v.checked(flops=_amount, bytes_=_amount, peak_flops=_rate_or_nan, bandwidth=_rate_or_nan,
            returns=_v.scalar_or_array)
def op_time_s(flops, bytes_, peak_flops, bandwidth):
    """Seconds for an operation on the roofline: max(bytes / bandwidth, flops / peak).
    Vectorised; a NaN peak or bandwidth (unknown) gives NaN, not a number."""
    return np.maximum(bytes_ / bandwidth, flops / peak_flops)


#: `op_time_s` without the argument checks, for callers that built and checked their
#: arrays themselves (a simulator timing thousands of steps): the same formula,
#: max(bytes / bandwidth, flops / peak), broadcast over numpy arrays.
op_time_s_unchecked = op_time_s.__wrapped__


class MissingPeak(ValueError):
    """The catalogue has no peak FLOP/s (or no bandwidth) for this device and format, so
    the roofline has no answer: the error names both (a ValueError)."""


def peak_or_nan(accelerator, dtype) -> float:
    """The device's dense peak FLOP/s for `dtype`, or NaN when the catalogue has none
    (a T4 has no bf16 peak; a GPU missing from the catalogue has no peaks at all).
    `peak` raises instead."""
    acc = _hardware.get(accelerator)
    peak = _dtypes.peak_dtype(dtype)  # an unknown format is an error, not a NaN
    try:
        return acc.peak_flops(peak)
    except ValueError:
        return math.nan


def bandwidth_or_nan(accelerator) -> float:
    """The device's DRAM bandwidth (bytes/s), or NaN when the catalogue has none."""
    acc = _hardware.get(accelerator)
    bw = acc.bandwidth
    return float(bw) if bw and bw > 0 and math.isfinite(bw) else math.nan


def peak(accelerator, dtype) -> float:
    """The device's dense peak FLOP/s for `dtype`; `MissingPeak` naming the device and the
    format when the catalogue has none (a T4 computes no bf16)."""
    acc = _hardware.get(accelerator)
    value = peak_or_nan(acc, dtype)
    if math.isnan(value):
        have = ", ".join(acc.peaks) or "none"
        raise MissingPeak(f"{acc.name} has no {_dtypes.peak_dtype(dtype)} peak in the "
                          f"catalogue (dtype/compute_dtype={dtype!r}), so no roofline time: "
                          f"pick a format it has a peak for ({have})")
    return value


def bandwidth(accelerator) -> float:
    """The device's DRAM bandwidth (bytes/s); `MissingPeak` when the catalogue has none."""
    acc = _hardware.get(accelerator)
    value = bandwidth_or_nan(acc)
    if math.isnan(value):
        raise MissingPeak(f"{acc.name} has no memory bandwidth in the catalogue, so no "
                          f"roofline time")
    return value


def _roofs(acc, formats, missing):
    """(bandwidth, peaks for each format): NaN where unknown (`missing="nan"`), or
    `MissingPeak` (`missing="raise"`)."""
    _v.choice("missing", missing, ("raise", "nan"))
    if missing == "nan":
        return bandwidth_or_nan(acc), [peak_or_nan(acc, d) for d in formats]
    return bandwidth(acc), [peak(acc, d) for d in formats]


def evaluate(ops, accelerator, *, missing="raise"):
    """Put each operation of a table on `accelerator`'s roofline.

    `ops`: a DataFrame (or a mapping {name: {"flops", "bytes", "dtype"}}) with one row per
    operation: `flops` (FLOP), `bytes` (bytes moved to or from DRAM), `dtype` (the format
    the operation computes in: its peak). Returns a copy with `intensity` (FLOP/byte),
    `memory_s`, `compute_s`, `seconds` = max of the two, and `bound` ("memory" or
    "compute"). The step's time is `seconds.sum()`: operations run one after another.
    A device without a catalogue peak for a row's format raises `MissingPeak`; with
    `missing="nan"` its times are NaN and its bound "unknown" instead.
    """
    import pandas as pd

    acc = _hardware.get(accelerator)
    if isinstance(ops, dict):
        ops = pd.DataFrame.from_dict(ops, orient="index")
    if not isinstance(ops, pd.DataFrame):
        raise TypeError(f"ops must be a DataFrame (or a mapping of rows) with columns "
                        f"{', '.join(OP_COLUMNS)}, got {type(ops).__name__}")
    missing_columns = [c for c in OP_COLUMNS if c not in ops.columns]
    if missing_columns:
        raise ValueError(f"ops lacks the columns {missing_columns}; each operation needs "
                         f"{', '.join(OP_COLUMNS)}")
    out = ops.copy()
    flops = _v.non_negative("ops['flops']", _column(out, "flops"), array=True)
    nbytes = _v.non_negative("ops['bytes']", _column(out, "bytes"), array=True)
    bw, peaks = _roofs(acc, out["dtype"], missing)
    peaks = np.array(peaks, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        out["intensity"] = flops / nbytes
        out["memory_s"] = nbytes / bw
        out["compute_s"] = flops / peaks
    out["seconds"] = op_time_s(flops, nbytes, peaks, bw) if len(out) else []
    bound = np.where(out["compute_s"] > out["memory_s"], "compute", "memory")
    unknown = np.isnan(out["memory_s"]) | np.isnan(out["compute_s"])
    out["bound"] = np.where(unknown, "unknown", bound)
    return out


def _column(df, name):
    """A numeric column as floats; TypeError naming it when it holds text."""
    try:
        return df[name].to_numpy(dtype=float)
    except (TypeError, ValueError):
        raise TypeError(f"ops['{name}'] must hold numbers, got "
                        f"{df[name].tolist()[:3]!r}") from None


def total_s(ops, accelerator, *, missing="raise") -> float:
    """The step time of an operations table: the sum of its rows' roofline times."""
    return float(evaluate(ops, accelerator, missing=missing)["seconds"].sum())


def step_s(terms, accelerator, *, missing="raise"):
    """Vectorised form of `total_s` for tables whose FLOPs and bytes are arrays
    (a sweep over batch or context): `terms` maps an operation name to (flops, bytes,
    dtype); returns sum over operations of `op_time_s`, broadcast over the arrays.
    `missing`: as in `evaluate`."""
    acc = _hardware.get(accelerator)
    if not isinstance(terms, dict):
        raise TypeError(f"terms must be a mapping {{operation: (flops, bytes, "
                        f"dtype)}}, got {terms!r:.80}")
    bw, peaks = _roofs(acc, [t[2] for t in terms.values()], missing)
    total = 0.0
    for (flops, nbytes, _), peak_flops in zip(terms.values(), peaks):
        total = total + op_time_s_unchecked(np.asarray(flops, dtype=float),
                                            np.asarray(nbytes, dtype=float), peak_flops, bw)
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
    lo, hi = (_v.positive("intensity_range", x) for x in intensity_range)
    _v.ensure(lo < hi, f"intensity_range must be (low, high) with low < high, got "
                       f"{intensity_range!r}")
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
        if not isinstance(row, dict) or "intensity" not in row:
            raise TypeError(f"points must be {{label: intensity}} or rows with an "
                            f"'intensity' (and optionally 'flops'), got {row!r:.80}")
        where = f"points[{row.get('label', i)!r}]"
        intensity = _v.positive(f"{where}['intensity'] (FLOP/byte)", row["intensity"])
        flops = _v.positive(f"{where}['flops'] (FLOP/s)", row["flops"]) if "flops" in row \
            else attainable_flops(intensity, peak, bandwidth)
        ax.loglog([intensity], [flops / 1e12], _MARKERS[i % len(_MARKERS)], ms=7,
                  mfc="none" if "flops" not in row else None, label=row.get("label"))


# Names before the seconds suffix became `_s` everywhere (issue 25).
