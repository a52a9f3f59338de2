"""The noise gate: a measurement as a median and its spread, and the one rule that orders
two of them (`compare`) or says it cannot (`inconclusive`). Every verdict a lab or a page
prints about its own run is built on this, so that none states an order its numbers do
not support. Spreads of repeated runs (`Spread.of`), of one timing's blocks
(`Spread.of_timing`), pooled, of a quantile, and of ratios and differences.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from gpuinfer import validate as _v

#: A timing whose interquartile range is over this fraction of its median is noisy.
NOISY_SPREAD = 0.25


#: The noise gate (`compare`). A ratio of two medians is read as a difference only when
#: it clears the two timings' spreads added up (each the interquartile range, or the
#: range over reruns, as a fraction of its median) plus `MIN_EFFECT`: a quartile of one
#: timing can sit at the other's median when the load changes between them, so the
#: spreads add rather than combine in quadrature.
MIN_EFFECT = 0.05


#: A timing whose spread exceeds this fraction of its median is too noisy to order
#: against anything: no verdict but "inconclusive" is drawn from it.
TOO_NOISY = 0.5


#: Two-sided 95% normal quantile, for the order-statistic interval of a percentile.
_Z95 = 1.96


@dataclasses.dataclass(frozen=True)
class Spread:
    """A measurement as a verdict reads it: the median and its relative spread (the
    interquartile range over the median of one timing's blocks, or (max - min) / median
    over repeated runs). Dimensionless `spread`; `median` in the measurement's unit."""

    median: float
    spread: float

    @classmethod
    def of(cls, samples) -> "Spread":
        """From repeated measurements of one quantity (at least one, each positive):
        the median and (max - min) / median. One sample has no spread to show: its
        spread is infinite, so nothing is concluded from it."""
        x = _v.number("samples", samples, array=True).ravel()
        _v.ensure(x.size >= 1 and bool(np.all(x > 0)),
                  f"samples must hold at least one positive number, got {x.tolist()}")
        med = float(np.median(x))
        return cls(med, math.inf if x.size == 1 else float((x.max() - x.min()) / med))

    @classmethod
    def of_timing(cls, timing) -> "Spread":
        """From one `bench.Timing` (or anything with median_s and iqr_s): IQR / median."""
        med = _v.positive("timing.median_s", timing.median_s)
        return cls(med, _v.non_negative("timing.iqr_s", timing.iqr_s) / med)


def compare(a: Spread, b: Spread) -> str:
    """Is `a` larger than `b`, beyond the noise? "larger", "smaller", or "inconclusive"
    (either spread over `TOO_NOISY`, or the ratio a/b within 1 +- (a.spread + b.spread +
    `MIN_EFFECT`)). A verdict built on this never states an order its numbers do not
    support: two timings whose quartiles overlap are never ordered."""
    ma, mb = _v.positive("a.median", a.median), _v.positive("b.median", b.median)
    # An infinite spread (one sample: `Spread.of`) is allowed, and orders nothing.
    sa = _v.number("a.spread", a.spread, lo=0, allow_inf=True)
    sb = _v.number("b.spread", b.spread, lo=0, allow_inf=True)
    if max(sa, sb) > TOO_NOISY:
        return "inconclusive"
    margin = 1 + sa + sb + MIN_EFFECT
    ratio = ma / mb
    if ratio > margin:
        return "larger"
    if ratio < 1 / margin:
        return "smaller"
    return "inconclusive"


def inconclusive(what, *spreads) -> str:
    """The sentence a verdict prints when `compare` cannot order its numbers: names
    `what` and the largest spread (a fraction) it saw."""
    worst = max((_v.number("spreads", s, lo=0, allow_inf=True) for s in spreads),
                default=math.inf)
    shown = "too few runs to tell" if math.isinf(worst) else f"{worst:.0%} of the median"
    return (f"Inconclusive on this run ({what}): the spread is {shown}; rerun, or run on a "
            "quiet machine (nothing else running on its GPU or CPU).")


def ratio(a: Spread, b: Spread) -> Spread:
    """a / b, its spread the two spreads added (as `compare` adds them)."""
    return Spread(_v.positive("a.median", a.median) / _v.positive("b.median", b.median),
                  a.spread + b.spread)


def difference(a: Spread, b: Spread):
    """a - b as a Spread, its absolute spread the two absolute spreads added; None where
    a - b is not positive (nothing to compare)."""
    gap = a.median - b.median
    if not gap > 0:
        return None
    return Spread(gap, (a.spread * a.median + b.spread * b.median) / gap)


def pooled(timings) -> Spread:
    """One quantity timed more than once (`bench.Timing`s, or anything with median_s and
    iqr_s): the median of the medians, and as spread the larger of their range over that
    median and the widest IQR / median. One timing keeps its IQR: its blocks are the
    repeats. The range catches a load that changed between timings, which no single
    timing's IQR shows."""
    timings = list(timings)
    _v.ensure(len(timings) >= 1, "timings must hold at least one timing")
    parts = [Spread.of_timing(t) for t in timings]
    medians = np.array([p.median for p in parts])
    med = float(np.median(medians))
    spread = max(p.spread for p in parts)
    if len(parts) > 1:
        spread = max(spread, float((medians.max() - medians.min()) / med))
    return Spread(med, spread)


def pooled_runs(frames, by="batch"):
    """Several runs of one sweep (DataFrames with columns `by`, `seconds` and `iqr_s`,
    e.g. `DecodeStack.sweep`), pooled per `by` value that every run measured: the first
    run's row with `seconds` the median over the runs, `spread` (`pooled`), and
    `fastest_s` / `slowest_s`, the least and most of the runs' medians (s)."""
    import types

    frames = list(frames)
    _v.ensure(len(frames) >= 1, "frames must hold at least one run")
    keys = set(frames[0][by])
    for f in frames[1:]:
        keys &= set(f[by])
    out = frames[0][frames[0][by].isin(keys)].copy().reset_index(drop=True)
    rows = [[f.set_index(by).loc[k] for f in frames] for k in out[by]]
    spreads = [pooled(types.SimpleNamespace(median_s=r.seconds, iqr_s=r.iqr_s) for r in rs)
               for rs in rows]
    out["seconds"] = [s.median for s in spreads]
    out["spread"] = [s.spread for s in spreads]
    out["fastest_s"] = [min(r.seconds for r in rs) for rs in rows]
    out["slowest_s"] = [max(r.seconds for r in rs) for rs in rows]
    return out


def quantile_spread(samples, quantile=99.0) -> Spread:
    """The `quantile` (in percent) of `samples` and how well so few samples fix it: the
    distribution-free 95% interval between the order statistics at ranks
    n q +- 1.96 sqrt(n q (1 - q)), over the quantile. A p99 of 300 latencies rests on
    its few largest: its interval runs from about the 98th percentile to the largest."""
    x = np.sort(_v.number("samples", samples, array=True).ravel())
    _v.ensure(x.size >= 1 and bool(np.all(x > 0)),
              f"samples must hold at least one positive number, got {x.size} values")
    q = _v.number("quantile", quantile, lo=0, hi=100) / 100
    value = float(np.percentile(x, 100 * q))
    half = _Z95 * math.sqrt(x.size * q * (1 - q))
    lo = max(int(math.floor(x.size * q - half)) - 1, 0)
    hi = min(int(math.ceil(x.size * q + half)) - 1, x.size - 1)
    return Spread(value, float((x[hi] - x[lo]) / value))


def run_quantile_spread(samples, quantile=99.0) -> Spread:
    """`quantile_spread` of one run's latencies, given in arrival order, its spread
    widened to the range between the same quantile of the run's two halves where that
    is wider: the order statistics assume every latency drawn alike, and a stall that hit
    one half of a run (a shared machine's, a cold start's) breaks that."""
    x = _v.number("samples", samples, array=True).ravel()
    whole = quantile_spread(x, quantile)
    if x.size < 4:
        return whole
    halves = [float(np.percentile(h, quantile)) for h in np.array_split(x, 2)]
    return Spread(whole.median, max(whole.spread, (max(halves) - min(halves)) / whole.median))


def faster_than_ceiling(measured: Spread, ceiling_s) -> bool:
    """Labs 5 and 6: did a step (`measured`, s) beat its roofline ceiling (`ceiling_s`, s)
    beyond its spread (a cache served what the ceiling reads from memory)?"""
    return compare(Spread(_v.positive("ceiling_s", ceiling_s), 0.0), measured) == "larger"
