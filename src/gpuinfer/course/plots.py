"""Figures that put a measurement beside its ceiling. Labs: *Weight reads*, *A decode step,
batched*; the workshop's results sheet.

Every figure here follows the course's rules: labelled axes with units, log scales where
the quantity spans decades, and series told apart by marker and line style as well as
colour, so a greyscale print still reads. Inputs are the tidy rows `gpuinfer.measure.bench`
returns (pandas DataFrames or lists of dicts); sizes in bytes, rates in bytes/s, times
in seconds. Each function returns the matplotlib Axes it drew on.
"""

from __future__ import annotations

import math

import numpy as np

from gpuinfer import validate as _validate

# Series styles: (marker, line style). Marker *and* dash differ, so greyscale works.
_STYLES = [("o", "-"), ("s", "--"), ("^", "-."), ("D", ":"), ("v", "-"), ("P", "--")]


def _frame(rows, required, what, positive=()):
    """`rows` as a DataFrame with the `required` columns; the `positive` ones must hold
    numbers > 0 (a log axis; NaN, a missing measurement, is left out of the line)."""
    import pandas as pd

    if rows is None or isinstance(rows, (str, bytes, int, float, dict)):
        raise TypeError(f"rows must be a DataFrame or a list of dicts ({what}), "
                        f"got {rows!r:.80}")
    df = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    if df.empty:
        raise ValueError(f"{what}: no rows to plot (was every size out of memory?)")
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ValueError(f"{what}: rows lack the column(s) {', '.join(missing)}; "
                         f"they have {', '.join(map(str, df.columns))}")
    for col in positive:
        values = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)
        known = values[~pd.isna(df[col]).to_numpy()]
        if np.isnan(known).any() or (known <= 0).any() or np.isinf(known).any():
            raise ValueError(f"{what}: rows[{col!r}] must be positive, finite numbers "
                             f"(NaN: not measured), got {df[col].tolist()[:6]!r}")
    return df


def _optional_positive(name, value):
    """None, or a positive finite number (checked by `validate`)."""
    return None if value is None else _validate.positive(name, value)


def _axes(ax):
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.2))
    return ax


def bytes_label(value, _pos=None) -> str:
    """A size in bytes with a binary prefix, for tick labels: 65536 -> '64 KiB'."""
    value = _validate.number("value", value, expected="a size in bytes")
    for exponent, unit in ((40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")):
        if value >= 2**exponent:
            return f"{value / 2**exponent:.3g} {unit}"
    return f"{value:g} B"


def _binary_size_ticks(ax, sizes):
    """Major ticks at powers of 4 (or 16, if there would be too many) spanning `sizes`."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    lo = math.floor(math.log2(min(sizes)))
    hi = math.ceil(math.log2(max(sizes)))
    step = 2 if (hi - lo) <= 16 else 4
    ticks = [2.0**k for k in range(lo - lo % step, hi + 1, step)]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(bytes_label))
    ax.xaxis.set_minor_formatter(NullFormatter())


def bandwidth_vs_size(rows, bandwidth_bytes_per_s=None, cache_bytes=None, ax=None, *,
                      peak_label="datasheet peak", cache_label="last-level cache"):
    """Achieved read bandwidth (GB/s) against buffer size (bytes, log axis), one series
    per `flush_cache` setting, with the datasheet bandwidth (bytes/s) as a horizontal
    line and the last-level cache size (bytes) as a vertical one.

    `rows`: `bench.weight_read_bandwidth` output (columns `bytes`, `achieved_gb_per_s`,
    optionally `flush_cache`), or several such frames concatenated.
    """
    df = _frame(rows, ["bytes", "achieved_gb_per_s"], "bandwidth_vs_size",
                positive=["bytes", "achieved_gb_per_s"])
    peak = _optional_positive("bandwidth_bytes_per_s", bandwidth_bytes_per_s)
    cache = _optional_positive("cache_bytes", cache_bytes)
    ax = _axes(ax)
    groups = df.groupby("flush_cache", sort=True) if "flush_cache" in df.columns else [(None, df)]
    # flush_cache=True first: the honest measurement gets the solid line.
    for i, (flush, g) in enumerate(sorted(groups, key=lambda kv: kv[0] is not None and not kv[0])):
        g = g.sort_values("bytes")
        marker, dash = _STYLES[i % len(_STYLES)]
        label = {True: "cache flushed (reads from DRAM)",
                 False: "same buffer re-read (cache can help)"}.get(flush, "measured")
        ax.plot(g["bytes"], g["achieved_gb_per_s"], marker=marker, ls=dash, color=f"C{i}",
                mfc="none" if flush is not None and not flush else None, label=label)
    if peak is not None:
        ax.axhline(peak / 1e9, color="black", ls="--", lw=1.2,
                   label=f"{peak_label}: {peak / 1e9:,.0f} GB/s")
    if cache is not None:
        ax.axvline(cache, color="grey", ls=":", lw=1.5,
                   label=f"{cache_label}: {cache / 2**20:,.0f} MiB")
    ax.set_xscale("log")
    sizes = list(df["bytes"]) + ([cache] if cache is not None else [])
    _binary_size_ticks(ax, sizes)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("buffer size read (bytes, binary prefixes, log scale)")
    ax.set_ylabel("achieved bandwidth (GB/s)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="best", framealpha=0.9)
    return ax


def step_time_vs_batch(rows, floor_s=None, ax=None, *, floor_label="weight-read floor"):
    """Measured seconds per decode step against the batch size (log axis), with the
    weight-read floor (seconds: the step's weight bytes / datasheet bandwidth) drawn
    as a horizontal line. Time is shown in milliseconds.

    `rows`: `lab_measurements.decode_step` rows (columns `batch`, `seconds`, optionally
    `cuda_graph`, one series per value).
    """
    df = _frame(rows, ["batch", "seconds"], "step_time_vs_batch",
                positive=["batch", "seconds"])
    floor = _optional_positive("floor_s", floor_s)
    ax = _axes(ax)
    groups = df.groupby("cuda_graph", sort=True) if "cuda_graph" in df.columns else [(None, df)]
    for i, (graphed, g) in enumerate(groups):
        g = g.sort_values("batch")
        marker, dash = _STYLES[i % len(_STYLES)]
        label = {True: "measured, CUDA graph", False: "measured, eager"}.get(graphed, "measured")
        ax.plot(g["batch"], g["seconds"] * 1e3, marker=marker, ls=dash, color=f"C{i}",
                label=label)
    if floor is not None:
        ax.axhline(floor * 1e3, color="black", ls="--", lw=1.2,
                   label=f"{floor_label}: {floor * 1e3:.3g} ms")
    from matplotlib.ticker import FixedLocator, ScalarFormatter

    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(sorted(set(df["batch"]))))
    ax.xaxis.set_major_formatter(ScalarFormatter())
    ax.set_ylim(bottom=0)
    ax.set_xlabel("batch size (sequences, log scale)")
    ax.set_ylabel("time per decode step (ms)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return ax


def room_fractions(sheet, ax=None):
    """The workshop's debrief plot: each row of the room's results sheet
    (`reference.SHEET_COLUMNS`) as the percentage of its own device's ceiling reached,
    against the lab, one marker shape per catalogue entry, a line at 100%."""
    df = _frame(sheet, ["lab", "catalogue_entry", "fraction_of_ceiling"], "room_fractions",
                positive=["fraction_of_ceiling"])
    ax = _axes(ax)
    df = df.dropna(subset=["fraction_of_ceiling"])
    markers = dict(zip(sorted(df.catalogue_entry.unique()), "osD^vP*X"))
    for entry, g in df.groupby("catalogue_entry"):
        ax.scatter(g.lab, 100 * g.fraction_of_ceiling, marker=markers.get(entry, "o"), s=45,
                   facecolor="white", edgecolor="black", label=entry)
    ax.axhline(100, color="black", lw=1)
    ax.set_xticks(range(1, 10))
    ax.set_xlabel("lab")
    ax.set_ylabel("% of the ceiling reached")
    ax.set_ylim(bottom=0)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(title="catalogue entry", fontsize=8, loc="upper right")
    return ax
