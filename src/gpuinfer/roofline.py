"""The roofline model (Williams, Waterman & Patterson 2009). Chapter: *The roofline model*.

attainable FLOP/s = min(peak FLOP/s, bandwidth x arithmetic intensity)

Intensity is FLOP per byte moved to or from DRAM; the ridge point is the intensity where
the two roofs meet, peak / bandwidth.
"""

from __future__ import annotations

import numpy as np

from . import dtypes as _dtypes
from . import hardware as _hardware


def _positive(name, value):
    arr = np.asarray(value, dtype=float)
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{name} must be positive and finite, got {value!r}")
    return arr


def attainable_flops(intensity, peak_flops, bandwidth):
    """Roofline FLOP/s at `intensity` (FLOP/byte; scalar or array), given the peak
    (FLOP/s) and the memory bandwidth (bytes/s). Vectorised over numpy arrays."""
    intensity = np.asarray(intensity, dtype=float)
    if np.any(intensity < 0) or np.any(np.isnan(intensity)):
        raise ValueError(f"intensity must be >= 0 FLOP/byte, got {intensity!r}")
    peak = _positive("peak_flops", peak_flops)
    bw = _positive("bandwidth", bandwidth)
    out = np.minimum(peak, bw * intensity)
    return float(out) if out.ndim == 0 else out


def _dims(m, n, k):
    for name, v in (("m", m), ("n", n), ("k", k)):
        if not float(v).is_integer() or v <= 0:
            raise ValueError(f"matmul size {name} must be a positive integer, got {v!r}")
    return int(m), int(n), int(k)


def matmul_flops(m, n, k) -> float:
    """FLOPs of [m, k] @ [k, n]: one multiply and one add per (i, j, l)."""
    m, n, k = _dims(m, n, k)
    return 2.0 * m * n * k


def matmul_bytes(m, n, k, dtype="fp16") -> float:
    """Fewest DRAM bytes for [m, k] @ [k, n] -> [m, n]: read A and B once, write C once."""
    m, n, k = _dims(m, n, k)
    return (m * k + k * n + m * n) * _dtypes.bytes_per_element(dtype)


def matmul_intensity(m, n, k, dtype="fp16") -> float:
    """Arithmetic intensity of the matmul in FLOP/byte (its best case: each operand moved once)."""
    return matmul_flops(m, n, k) / matmul_bytes(m, n, k, dtype)


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
