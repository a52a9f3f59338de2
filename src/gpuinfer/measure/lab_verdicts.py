"""What a lab's measurement means, read from the numbers in front of the learner.

A lab's printed numbers depend on the machine: a CPU thread, a T4, an H100. Its fixed
prose cannot say which way a result went, so labs 3, 4 and 9 ask these functions for the
verdict, and they branch on the data (tests/test_lab_takeaways.py feeds each function
every outcome). They return text; the labs print it. Nothing here measures; the facts of
the labs' decode stack live in `decoding`. (`gpuinfer.course.findings` does the
same for the chapters' sentences.)
"""

from __future__ import annotations

import dataclasses
import math

from gpuinfer.predict import achievable as _achievable
from gpuinfer import validate as _v
# Facts of the measurement stack, kept where they are measured; the labs read them here.

#: A timing whose interquartile range is over this fraction of its median is noisy.
NOISY_SPREAD = 0.25
#: A fusion removes one elementwise pass (or a scalar multiply) next to matrix products:
#: a saving above this fraction of the step says the machine's load changed, not the graph.
TOO_LARGE_FOR_ONE_FUSION = 0.25


#: The noise gate (`compare`). A ratio of two medians is read as a difference only when
#: it clears the two timings' spreads added up (each the interquartile range, or the
#: range over reruns, as a fraction of its median) plus `MIN_EFFECT`: a quartile of one
#: timing can sit at the other's median when the load changes between them, so the
#: spreads add rather than combine in quadrature.
MIN_EFFECT = 0.05
#: A timing whose spread exceeds this fraction of its median is too noisy to order
#: against anything: no verdict but "inconclusive" is drawn from it.
TOO_NOISY = 0.5


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
        import numpy as np

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


# --- labs 1, 2 and 10: verdicts behind the noise gate -----------------------------------------
# Each takes `Spread`s (a median over repeated runs and its spread,
# `lab_measurements.repeated`), states a conclusion only where `compare` orders the numbers
# beyond their spreads, and otherwise returns `inconclusive(...)`.

#: A memory-bound kernel at this fraction of its bandwidth ceiling or more streams well:
#: large reads reach 60-90% of a datasheet bandwidth (STREAM sustains 75-85%; `read_share`).
GOOD_STREAM = 0.6
#: A measured ridge point within this factor of the datasheet's has not moved: it is the
#: ratio of two bests over a dozen shapes (the best FLOP/s over the best bytes/s), each a
#: few tens of percent off on a shared machine, so a smaller shift is not read as one.
RIDGE_MOVED = 1.5
#: A decode step is "flat" in the batch while it takes at most this multiple of the
#: batch-1 step: the extra sequences then cost less than half a step between them.
FLAT = 1.5


def _spreads(name, values):
    items = list(values)
    for i, x in enumerate(items):
        _v.ensure(isinstance(x, Spread), f"{name}[{i}] must be a Spread, got {x!r}",
                  TypeError)
    return items


def gemv_ceiling(fraction, *, on_gpu, pool_beyond_cache=True) -> str:
    """Lab 2: what the GEMV's fraction of its own ceiling (a `Spread`: its median over the
    sweeps and their spread) says. `pool_beyond_cache`: the operands rotated through a
    pool larger than the last-level cache (`matmul_tflops`' "fits_in_cache" is False)."""
    (fraction,) = _spreads("fraction", [fraction])
    if compare(fraction, Spread(1.0, 0.0)) == "larger":
        if not pool_beyond_cache:
            return ("Above its ceiling: the operands fit in the cache, so they were served "
                    "from it, faster than\nmemory.")
        if on_gpu:
            return ("Above its ceiling, with a weight far larger than L2: the catalogue "
                    "entry is not this GPU's\n(or its memory clock), since no cache held "
                    "the weight.")
        return ("Above its ceiling, and not from a cache: the operands rotated through a "
                "pool larger than the\nlast-level cache. The CPU ceiling is a convention "
                "(one core's share, an eighth, of a reference\ndesktop's bandwidth), not a "
                "bound: one core here drew more than that share.")
    good = compare(fraction, Spread(GOOD_STREAM, 0.0))
    if good == "larger":
        return ("At or near its ceiling: a good GEMV. A tiny share of the peak is all any "
                "kernel can do\nat this intensity; grade each shape against its own ceiling.")
    if good == "smaller":
        return ("Well below even its memory ceiling: this GEMV does not stream the weight at "
                "the\nbandwidth the ceiling assumes" + (
                    " (check the clocks, and lab 1's measured bandwidth)." if on_gpu else
                    " (one CPU core often does not: compare lab 1's read)."))
    return inconclusive("the GEMV against its ceiling", fraction.spread)


def measured_ridge(ridge, datasheet_ridge) -> str:
    """Lab 2: the ridge point a sweep measured (a `Spread` over the sweeps) against the
    datasheet's (FLOP/byte). Its direction follows from the ratio alone: a ridge to the
    right means the bandwidth fell further short of its ceiling than the arithmetic did."""
    (ridge,) = _spreads("ridge", [ridge])
    sheet = _v.positive("datasheet_ridge", datasheet_ridge)
    right = compare(ridge, Spread(RIDGE_MOVED * sheet, 0.0))
    left = compare(ridge, Spread(sheet / RIDGE_MOVED, 0.0))
    if right == "larger":
        return ("The ridge moved right: this run's bandwidth fell further short of its "
                "ceiling than its\narithmetic did.")
    if left == "smaller":
        return ("The ridge moved left: this run's arithmetic fell further short of its "
                "ceiling than its\nbandwidth did.")
    if right == "smaller" and left == "larger":
        return (f"The two ridges are within {RIDGE_MOVED:g}x: both roofs fell short by "
                "about as much.")
    return inconclusive("the measured ridge against the datasheet's", ridge.spread)


def decode_view(batches, times, ridge_rows) -> str:
    """Lab 2: does the step through one weight stay flat (within `FLAT` x batch 1's time)
    up to half the measured ridge? `batches`: the rows m, rising from 1; `times`: a
    `Spread` of seconds for each; `ridge_rows`: the batch of the measured ridge."""
    ms = [_v.count("batches", m) for m in batches]
    ts = _spreads("times", times)
    _v.ensure(len(ms) == len(ts) and bool(ms) and ms[0] == 1 and ms == sorted(set(ms)),
              f"batches must rise from 1, one time each, got {ms} and {len(ts)} times")
    half = max(1.0, _v.positive("ridge_rows", ridge_rows) / 2)
    upto = [(m, t) for m, t in zip(ms, ts) if 1 < m <= half]
    if not upto:
        return (f"The measured ridge is at batch {ridge_rows:,.0f}: no batch above 1 and "
                "below half of it was\nmeasured, so this sweep cannot say how flat the "
                "step stays.")
    bar = Spread(FLAT * ts[0].median, ts[0].spread)     # 1.5x batch 1, as steady as it
    said = [compare(t, bar) for _, t in upto]
    worst = max([ts[0].spread] + [t.spread for _, t in upto])
    if "larger" in said:
        m, t = upto[said.index("larger")]
        return (f"The time rose well before the ridge: batch {m} took "
                f"{t.median / ts[0].median:.1f}x batch 1's time, below half\nthe measured "
                f"ridge ({half:,.0f}). At small m this device's matmul kernels do not reach "
                "the\nroofline (per-row work or poor tiling at small shapes): batching is "
                "less free here than\nthe roofline promises.")
    if all(s == "smaller" for s in said):
        m, t = upto[-1]
        return (f"Flat about as far as the measured roofline says: batch {m} took "
                f"{t.median / ts[0].median:.1f}x batch 1's time\n(within {FLAT:g}x) up to half "
                "the measured ridge: up to there a bigger batch multiplies the\ntokens per "
                "second at almost no cost in latency.")
    return inconclusive(f"the step against {FLAT:g}x batch 1's, up to batch {half:,.0f}",
                        worst)


#: Lab 1: re-reads of a buffer inside the cache at least this many times as fast as
#: flushed reads of it are the cache's speed (the issue's runs swung from 2.2x to 9.7x,
#: and a gap under 1.5x is within what two timings on a shared machine drift apart).
CACHE_FLATTERS = 1.5
#: Lab 1: a decode step at this fraction of the bandwidth the lab's own read test measured
#: (a sum over the bytes, the least a kernel can do) or more is a weight read: the matmul
#: adds arithmetic and a write per matrix, which costs a sum's speed some tens of percent.
READ_BOUND = 0.7
#: Lab 1: a decode step that grows by at most this factor from batch 1 to the largest
#: batch is flat: the extra sequences cost under a third of a step between them.
FLAT_GROWTH = 1.3


def _cores(threads):
    n = _v.count("threads", threads)
    return (f"{n} core{'s' if n > 1 else ''}", f"{n} of the reference desktop's 8 cores'")


def largest_read(share, *, on_gpu, threads=1) -> str:
    """Lab 1: the largest flushed read as a fraction of the ceiling (a `Spread`). On a CPU
    the ceiling is `threads` cores' share of the reference desktop's bandwidth."""
    (share,) = _spreads("share", [share])
    cores, of = _cores(threads)
    if compare(share, Spread(1.0, 0.0)) == "larger":
        if on_gpu:
            return ("Above the datasheet bandwidth, with a read far larger than L2: the "
                    "catalogue entry is\nnot this GPU's (or its memory clock).")
        return (f"Above the ceiling, and not from a cache (the pool is 4x the last-level "
                f"cache): {cores} drew more\nthan {of} share of its bandwidth. On a CPU "
                "runtime the ceiling is a convention, not a bound.")
    close = compare(share, Spread(GOOD_STREAM, 0.0))
    if close == "larger":
        return (f"At {GOOD_STREAM:.0%} of the ceiling or more, as well-written streaming "
                "code gets (STREAM sustains\n75-85% of a DRAM's peak): this is the "
                "bandwidth the rest of the lab uses.")
    if close == "smaller":
        return "Well below the ceiling: " + (
            "check the clocks line above (sampled during the sweep), and that\nnothing "
            "else runs on the GPU." if on_gpu else
            f"{cores} keep{'s' if cores.startswith('1 ') else ''} too few reads in flight "
            "to fill the memory's channels\n(the last section tries more threads), or "
            "other work shares this machine.")
    return inconclusive("the largest read against the ceiling", share.spread)


def cache_flattery(ratios) -> str:
    """Lab 1: re-read over flushed bandwidth for each buffer inside the cache, as `Spread`s
    (the ratio of the medians; spread, the two timings' spreads added)."""
    rs = _spreads("ratios", ratios)
    if not rs:
        return "No buffer in this sweep fits in the cache: nothing for it to flatter."
    said = [compare(r, Spread(CACHE_FLATTERS, 0.0)) for r in rs]
    if "larger" in said:
        best = max(r.median for r, s in zip(rs, said) if s == "larger")
        return (f"The cache's speed, not the memory's: re-reads ran up to {best:.1f}x the "
                "flushed reads, beyond\nthe noise. A benchmark whose buffers fit in the "
                "cache overstates the bandwidth a model's\nweights, far bigger than any "
                "cache, will get.")
    if all(s == "smaller" for s in said):
        return (f"The cache barely flattered this run (every ratio clearly under "
                f"{CACHE_FLATTERS:g}x): reads this short are\ndominated by their fixed "
                "cost (starting the kernel or waking the core), which is the same\nfrom "
                "cache or DRAM.")
    return inconclusive("re-reads against flushed reads inside the cache",
                        *(r.spread for r in rs))


def step_vs_read(reached, *, on_gpu) -> str:
    """Lab 1: a batch-1 decode step's tokens/s over what the bandwidth the lab's read test
    measured allows for its bytes (a `Spread`). The stack is at least 4x the cache."""
    (reached,) = _spreads("reached", [reached])
    if compare(reached, Spread(1.0, 0.0)) == "larger":
        return ("Faster than the read test allows, and not from a cache (the stack is at "
                "least 4x it):\nthe matmuls streamed memory better than a plain sum did.")
    bound = compare(reached, Spread(READ_BOUND, 0.0))
    if bound == "larger":
        return "A weight read: the step runs at about the bandwidth this memory delivers."
    if bound == "smaller":
        return ("Well below what this memory delivers: something besides the read costs "
                "time, " + ("most likely\nlaunching one kernel per matrix from Python "
                            "(next cell)." if on_gpu else
                            "the fixed cost of\neach of its matrix products on this CPU."))
    return inconclusive("the step against the read test", reached.spread)


def batch_growth(growth, top, ridge_batch) -> str:
    """Lab 1: the step at batch `top` over the step at batch 1 (a `Spread`), beside the
    batch `ridge_batch` at which the roofline turns compute-bound."""
    (growth,) = _spreads("growth", [growth])
    top = _v.count("top", top)
    ridge = _v.count("ridge_batch", ridge_batch)
    flat = compare(growth, Spread(FLAT_GROWTH, 0.0))
    steep = compare(growth, Spread(top / 2, 0.0))
    if flat == "smaller":
        return ("A flat line: the step is memory-bound, every sequence shares one read of "
                "the weights,\nand batching multiplies tokens/s almost for free.")
    if flat == "larger" and steep == "smaller":
        return (f"Not flat, though batching still paid: the roofline expected a flat line "
                f"up to batch {ridge:,}\n(on the catalogue's ceilings), but this device's "
                "matmuls at small batches fall short of its\narithmetic ceiling (lab 2 "
                "measures how far).")
    if steep == "larger":
        return ("The time grew about as fast as the batch: batching bought little here. "
                "The step is bound\nby arithmetic (or by matmul kernels poor at small "
                "batches), not by the read.")
    return inconclusive(f"the batch-{top} step against batch 1's", growth.spread)


#: Lab 10: an MoE layer whose time grows at least this many times as much as its dense
#: twin's from 1 to 16 tokens shows the routing: uniform routing touches 7.92 of 8
#: Mixtral-shaped experts at 16 tokens against 2 at 1 (`llm.experts_touched`: 8 x (1 -
#: (6/8)^16) = 7.92, 3.96x the bytes), and the margin leaves room for costs that grow with
#: both.
MOE_OUTGROWS = 1.5
#: Lab 10: a measured growth within this factor of the roofline's (either way) is the
#: bytes' growth; beyond it, something else grew (or did not).
BYTES_MATCH = 2.0
#: Lab 10: a layer at this fraction of its roofline or more has its time set mostly by
#: what the roofline counts (its bytes, at small batches).
ROOF_SHARE = 0.3


def moe_growth(moe, dense, *, predicted, predicted_dense, of_ceiling, on_gpu) -> str:
    """Lab 10: from 1 to 16 tokens, did the touched experts' bytes set the MoE layer's
    time? `moe`, `dense`: (time at 1 token, time at 16) as `Spread`s, for the layer and its
    dense twin; `predicted`, `predicted_dense`: the roofline's growth of each over the
    same tokens; `of_ceiling`: the layer's fraction of its roofline at 16 tokens (a
    `Spread`). Returns two lines: the layer, then its dense twin."""
    m1, m16 = _spreads("moe", moe)
    d1, d16 = _spreads("dense", dense)
    (of_ceiling,) = _spreads("of_ceiling", [of_ceiling])
    pred = _v.positive("predicted", predicted)
    pred_d = _v.positive("predicted_dense", predicted_dense)
    g_moe = Spread(m16.median / m1.median, m1.spread + m16.spread)
    g_dense = Spread(d16.median / d1.median, d1.spread + d16.spread)
    outgrew = compare(g_moe, Spread(MOE_OUTGROWS * g_dense.median, g_dense.spread))
    high, low = (compare(g_moe, Spread(x, 0.0)) for x in (BYTES_MATCH * pred,
                                                           pred / BYTES_MATCH))
    share = compare(of_ceiling, Spread(ROOF_SHARE, 0.0))
    if outgrew == "larger" and high == "smaller" and low == "larger" and share == "larger":
        first = ("As predicted: more tokens touched more experts, so more weight bytes, "
                 f"while the dense\ntwin read the same weights; at 16 tokens the layer ran "
                 f"at {of_ceiling.median:.0%} of its roofline, so the bytes\nplausibly set "
                 "its time.")
    elif outgrew == "larger" and high == "smaller" and low == "larger" and share == "smaller":
        first = (f"The growth follows the touched experts ({g_moe.median:.1f}x against the "
                 f"bytes' {pred:.1f}x, the dense twin\n{g_dense.median:.1f}x), but at 16 "
                 f"tokens the layer ran at {of_ceiling.median:.0%} of its roofline: " + (
                     "per-expert kernel\nlaunches (three matmuls and their gather and "
                     "scatter for each touched expert), not the bytes,\nset its time; they "
                     "grow with the experts touched as the bytes do." if on_gpu else
                     "each touched\nexpert's fixed cost (its small matmuls' call "
                     "overheads), not the bytes, set its time;\nit grows with the experts "
                     "touched as the bytes do."))
    elif outgrew == "larger" and (high == "larger" or low == "smaller"):
        first = (f"The predicted direction (the MoE layer grew {g_moe.median / g_dense.median:.1f}x "
                 f"as much as its dense twin), but\n{g_moe.median:.1f}x against the bytes' "
                 f"{pred:.1f}x: more than the weight bytes set the time. " + (
                     "Grown more: a fixed cost\nper touched expert (" + (
                         "kernel launches, several per expert" if on_gpu else
                         "each small matmul's call overhead") + ") grows with the experts "
                     "touched as the bytes do."
                     if high == "larger" else
                     "Grown less: a fixed cost that does not\ngrow with the experts (the "
                     "call overheads of a step) already padded the 1-token time."))
    elif outgrew == "smaller":
        first = ("Not the predicted shape here: the MoE layer grew less than "
                 f"{MOE_OUTGROWS:g}x its dense twin's growth\n({g_moe.median:.1f}x against "
                 f"{g_dense.median:.1f}x), so the experts' bytes did not set its time: " + (
                     "the loop over experts launches three matmuls per\ntouched expert, "
                     "and at these sizes the launches set the time." if on_gpu else
                     "each small matmul's fixed cost on this CPU\ndoes."))
    else:
        first = inconclusive("the MoE layer's growth against its dense twin's and the bytes'",
                             g_moe.spread, g_dense.spread, of_ceiling.spread)
    flat = compare(g_dense, Spread(FLAT_GROWTH, 0.0))
    if flat == "smaller":
        second = (f"Its dense twin stayed flat ({g_dense.median:.1f}x): one read of the same "
                  "weights served every token.")
    elif flat == "larger":
        second = (f"Its dense twin reads the same weight bytes at every batch, so its "
                  f"{g_dense.median:.1f}x is the cost of\ncomputing more rows, not of "
                  f"reading more bytes (the roofline grows it {pred_d:.1f}x on these "
                  "ceilings):\n" + (
                      "small-batch matmul kernels fall short of the peak (lab 2's decode "
                      "view)." if on_gpu else "one CPU core's matmuls on a few rows reach "
                      "little of its peak (lab 2's decode view\nmeasures how little)."))
    else:
        second = inconclusive("the dense twin's growth", g_dense.spread)
    return first + "\n" + second


def above_roofline(best, *, on_gpu) -> str:
    """Lab 10: the highest fraction of its roofline any row reached (a `Spread`): says why
    when it is clearly above 1, that it cannot tell when it is above 1 only within the
    noise, and nothing ("") otherwise."""
    (best,) = _spreads("best", [best])
    if compare(best, Spread(1.0, 0.0)) == "larger":
        if on_gpu:
            return ("Above the roofline with weights far larger than L2: the catalogue entry "
                    "is not this GPU's.")
        return ("Above the roofline, and not from a cache (each timed call read the next "
                "copy of a pool four\ntimes the last-level cache): on a CPU runtime the "
                "ceiling is one core's share of a reference\ndesktop, a convention, not a "
                "bound.")
    if best.median > 1:
        if best.spread <= TOO_NOISY and best.median - 1 <= MIN_EFFECT:
            # Not the noise's fault: a few percent over is as close as a run can tell.
            return (f"At its roofline: the best row reached {best.median:.0%} of it, within "
                    f"{MIN_EFFECT:.0%} (spread {best.spread:.0%}): as close as a measurement "
                    "can tell.")
        return inconclusive("the best row against its roofline", best.spread)
    return ""


#: The achievable model for a lab's bare loop (`achievable.FITTED` less its fixed
#: `step_s`): the fitted kernels' bandwidth and the gaps between them, but no scheduler,
#: no sampling, no host bookkeeping, which an engine pays every step and a lab's loop
#: of matmuls does not. The labs grade their loop against this and the ceiling, and show
#: the engine's (`achievable.FITTED`) beside them.
LOOP = dataclasses.replace(_achievable.FITTED, step_s=0.0)


def against_achievable(of_ceiling, of_achievable, *, on_gpu, spread=None) -> str:
    """Labs 1 and 3: what a measured step's fractions of the ceiling (`of_ceiling`) and of
    the achievable model for a bare loop (`of_achievable`, `LOOP`) say. The achievable
    model is fitted on GPU engines: on a CPU it shows the shape, not a target. With the
    step's relative `spread`, each band is decided beyond it (`compare`), else
    inconclusive."""
    _v.positive("of_ceiling", of_ceiling)
    a = _v.positive("of_achievable", of_achievable)
    if not on_gpu:
        return ("On a CPU the achievable model is a GPU engine's derating (fitted on "
                "published GPU\nruns), shown for its shape: grade this run by the ceiling "
                "and by the read it measured.")
    if spread is not None:
        return _against_achievable_gated(of_ceiling, a, spread)
    if of_ceiling > 1.05:
        return ("Above the ceiling: a cache held part of the weights, or the catalogue "
                "entry is not this GPU.")
    if a >= 0.9:
        return ("At what a tuned engine's kernels reach for these bytes: this loop streams "
                "its weights\nas well as an engine would (before the engine's own "
                "per-step costs).")
    if a >= 0.6:
        return ("Short of what a tuned engine's kernels reach for these bytes, but in "
                "reach: launches\nor a kernel that does not stream at full speed.")
    return ("Far below what a tuned engine's kernels reach for these bytes: launch "
            "overhead (try the\nCUDA-graph step) or throttled clocks (the clocks line).")


def _against_achievable_gated(of_ceiling, a, spread):
    s = _v.number("spread", spread, lo=0, allow_inf=True)
    if compare(Spread(of_ceiling, s), Spread(1.0, 0.0)) == "larger":
        return ("Above the ceiling: a cache held part of the weights, or the catalogue "
                "entry is not this GPU.")
    at, near = (compare(Spread(a, s), Spread(x, 0.0)) for x in (0.9, GOOD_STREAM))
    if at == "larger":
        return ("At what a tuned engine's kernels reach for these bytes: this loop streams "
                "its weights\nas well as an engine would (before the engine's own "
                "per-step costs).")
    if at == "smaller" and near == "larger":
        return ("Short of what a tuned engine's kernels reach for these bytes, but in "
                "reach: launches\nor a kernel that does not stream at full speed.")
    if near == "smaller":
        return ("Far below what a tuned engine's kernels reach for these bytes: launch "
                "overhead (try the\nCUDA-graph step) or throttled clocks (the clocks line).")
    return inconclusive("the step against the achievable model", s)


def knee_batch(model, accelerator, context=0, dtype="fp16", *, achievable=True,
               share=0.8, max_batch=4096) -> int:
    """Lab 3: the largest power-of-two batch (up to `max_batch`) at which each sequence
    still decodes at `share` of its batch-1 tokens/s, on the achievable model (an
    engine: `achievable.FITTED`) or the ceiling (`achievable=False`): how far batching is
    almost free."""
    share = _v.fraction("share", share)
    top = _v.count("max_batch", max_batch, maximum=1 << 20)

    def per_sequence(b):
        return _achievable.decode_tokens_per_s(model, accelerator, b, context, dtype,
                                               achievable=achievable) / b

    base, knee, b = per_sequence(1), 1, 2
    while b <= top and per_sequence(b) >= share * base:
        knee, b = b, 2 * b
    return knee


def read_share(share, *, on_gpu) -> str:
    """Labs 3 and 4: what a large read's bandwidth, as a fraction `share` of the device's
    catalogue ceiling, says. On a CPU above 1 is common: the lab's one-thread ceiling is an
    eighth of the reference desktop's bandwidth, one core draws more than its share, and a
    buffer that fits in the L2/L3 cache is read faster than memory."""
    share = _v.positive("share", share)
    if share > 1:
        if on_gpu:
            return ("Above the datasheet bandwidth: part of the read was served from the GPU's "
                    "L2 cache\n(a buffer too small to leave it), or the catalogue entry is "
                    "not this GPU's.")
        return ("Above the ceiling, and not a bug: the ceiling is one core's share (an "
                "eighth) of the\nreference desktop's bandwidth, and one core can draw more "
                "than its share; data that\nfits in this CPU's L2/L3 cache is read faster "
                "still. The ceilings 'at the achieved\nfigures' use what this run measured, "
                "so they stay comparable.")
    if share < 0.6:
        return ("Well under the ceiling: other programs share this machine, or power and "
                "clocks hold it\nback (a T4, a laptop). The steps below are set beside "
                "this measured figure too.")
    return "A usual fraction: large reads reach 60-90% of a datasheet bandwidth."


def batching(knee, top_gain, turn_achieved) -> str:
    """Lab 3: what the batch sweep says. `knee`: the largest batch at which each sequence
    kept 80% of its batch-1 speed; `top_gain`: the most total tokens/s over batch 1's;
    `turn_achieved`: the batch at which the roofline (at the achieved figures) turns the
    weight matmuls compute-bound (inf if unknown)."""
    knee = _v.positive("knee", knee)
    top_gain = _v.positive("top_gain", top_gain)
    turn_achieved = _v.positive("turn_achieved", turn_achieved, allow_inf=True)
    if top_gain < 1.5:
        return ("Batching bought almost nothing here: the step grew with the batch about as "
                "fast as the\ntokens did, so this device's matmuls were not waiting on the "
                "weight read.")
    if knee >= turn_achieved / 2:
        return (f"Batching was almost free up to batch {knee:,.0f}: the measured bend sits near "
                "the roofline's,\nso until the matmuls ran out of arithmetic the extra "
                "sequences rode on one weight read.")
    return (f"Batching multiplied the total by {top_gain:,.1f}x, but not for free: each sequence "
            f"slowed from batch\n{knee:,.0f} on, long before the roofline's turn at "
            f"{turn_achieved:,.0f}. This device's matmul kernels at small\nbatches fall short "
            "of its peak (lab 2's decode view showed it for one matrix), so\nthe step grew "
            "with the batch earlier than the model predicts: throughput rose, and so\ndid "
            "every sequence's latency.")


def quantised_kernel(speedup, bytes_ratio, predicted) -> str:
    """Lab 4: one quantised kernel's measured speed-up over the dense step against the
    bytes ratio (what a pure read would gain) and its traffic model's prediction (NaN
    where the traffic is not modelled)."""
    speedup = _v.positive("speedup", speedup)
    bytes_ratio = _v.positive("bytes_ratio", bytes_ratio)
    if not (isinstance(predicted, (int, float)) and math.isnan(predicted)):
        predicted = _v.positive("predicted", predicted)
    slower = "Slower than" if speedup < 0.95 else "No faster than"
    if speedup >= 0.8 * bytes_ratio:
        return "Near the bytes ratio: the kernel reads the small format; the step stays a read."
    if speedup > 1.05 and predicted < 1:
        return ("Faster than its traffic model: each layer's temporary stays in the cache "
                "here, so the\nextra passes cost less than the memory bytes saved.")
    if speedup > 1.05:
        return "Faster, by less than the bytes ratio: converting the weights costs time."
    if predicted < 1:
        return f"{slower} dense, as its traffic model predicts: it moves more than it saves."
    if math.isnan(predicted):
        return (f"{slower} dense: its kernels do work the byte count leaves out (a chain\n"
                "of temporaries, or a reference kernel's arithmetic).")
    return (f"{slower} dense although it reads fewer bytes: its arithmetic or its access\n"
            "pattern, not the memory, sets its speed on this device and torch.")


def eager_int8(dequant_speedup, pack_speedup=None) -> str:
    """Lab 4's takeaway on this run: did the eager dequantise-then-multiply (`int8-dequant`)
    make the step slower, and did the kernel that reads int8 directly (`int8-pack`, None
    if not measured) do better?"""
    d = _v.positive("dequant_speedup", dequant_speedup)
    if d < 0.95:
        text = (f"Here the eager dequantise-then-multiply ran at {d:.2f}x the dense speed: "
                "slower, the trap\nits traffic model predicts (the int8 read, the temporary "
                "written, the temporary read).")
    elif d <= 1.05:
        text = (f"Here the eager dequantise-then-multiply ran at {d:.2f}x the dense speed: "
                "the bytes it saved\nand the temporaries it added about cancelled.")
    else:
        text = (f"Here the eager dequantise-then-multiply ran {d:.2f}x as fast as dense: "
                "each layer's temporary\nstayed in this CPU's cache, so only the int8 read "
                "went to memory. On a GPU the temporary\ngoes to DRAM and the same code runs "
                "slower than fp16, as the traffic model predicts.")
    if pack_speedup is not None:
        p = _v.positive("pack_speedup", pack_speedup)
        if p < d:
            text += (f"\nThe kernel that reads int8 directly ran at {p:.2f}x: slower still, so "
                     "its arithmetic, not\nits bytes, set its speed; reading fewer bytes pays "
                     "only through a fast kernel.")
        else:
            text += (f"\nThe kernel that reads int8 directly ran at {p:.2f}x: reading the "
                     "small format is what pays.")
    return text


def fusions(saved) -> str:
    """Lab 9: what the fusions measured one by one say. `saved`: rows of (model, fusion,
    saved fraction of the time without it, noise as a fraction of that time)."""
    rows = [(m, f, float(s), abs(float(n))) for m, f, s, n in saved]
    if not rows:
        return "ONNX Runtime applied no fusion this lab knows to these graphs."
    real = [(m, f, s) for m, f, s, n in rows if abs(s) > n]
    if not real:
        biggest = max(rows, key=lambda r: abs(r[2]))
        return (f"No fusion's effect rose above this run's noise (the largest, {biggest[1]} "
                f"on the {biggest[0]},\n{biggest[2]:+.1%} against a noise of "
                f"+-{biggest[3]:.1%}): on this machine they are too small to measure;\nrun "
                "again on a quiet machine before crediting or blaming one.")
    lines = [f"{f} on the {m} {'saved' if s > 0 else 'cost'} {abs(s):.1%}, beyond the noise."
             for m, f, s in real]
    if max(abs(s) for _, _, s in real) > TOO_LARGE_FOR_ONE_FUSION:
        lines.append("More than the one pass a fusion removes can cost: the load on this "
                     "machine probably\nchanged between the two timings (the IQR measures "
                     "the noise within one). Run the cell\nagain before believing it.")
    elif max(s for _, _, s in real) > 0.05:
        lines.append("More than a few percent: here the pass a fusion removed was a real share "
                     "of the time\n(a separate pass over an activation, and a dispatch of "
                     "its own).")
    else:
        lines.append("A few percent at most: the time goes to the matrix products.")
    return "\n".join(lines)


def levels(table) -> str:
    """Lab 9: ONNX Runtime's optimisation levels against 'off'. `table`: {(model, level):
    (speed-up over off, iqr_s / seconds)}. Says which level ran slower than 'off' and
    whether the spread of its timings, or of the 'off' timings it is divided by, makes that
    noise."""
    lines = []
    off = {model: spread for (model, level), (_, spread) in table.items() if level == "off"}
    for (model, level), (speedup, spread) in table.items():
        speedup = _v.positive("speed-up", speedup)
        if level == "off" or speedup >= 0.9:
            continue
        # The ratio is only as steady as both timings: the level's and 'off''s.
        spread_off = off.get(model, 0.0)
        if spread > NOISY_SPREAD:
            why = ("its timings spread over a quarter of their median,\nso that is noise: "
                   "rerun the cell.")
        elif spread_off > NOISY_SPREAD:
            why = (f"but the 'off' timings it is divided by spread over a quarter of their "
                   f"median\n({spread_off:.0%}), so that is noise: rerun the cell.")
        else:
            why = ("its timings and 'off''s are steady, so the optimised graph really is "
                   "slower\nhere (a layout or kernel choice that does not suit this CPU).")
        lines.append(f"The {model} at level '{level}' ran at {speedup:.2f}x of 'off': slower; "
                     + why)
    if not lines:
        return "No optimisation level ran slower than 'off' by more than a tenth."
    return "\n".join(lines)


def int8_speedup(best, fp32_spread, int8_spread, *, vnni) -> str:
    """Lab 9: int8's best speed-up over fp32 on this CPU, with each timing's spread
    (interquartile range over median; `int8_spread` the largest of the int8 rows'):
    decides from the spread, not from the size of the gain, which timing is noisy."""
    best = _v.positive("best", best)
    fp32_spread = _v.non_negative("fp32_spread", fp32_spread)
    int8_spread = _v.non_negative("int8_spread", int8_spread)
    noisy = [name for name, s in (("fp32", fp32_spread), ("int8", int8_spread))
             if s > NOISY_SPREAD]
    if noisy:
        return (f"The {' and '.join(noisy)} timing{'s' if len(noisy) > 1 else ''} spread over "
                "a quarter of the median (the IQR column):\nsomething else shares this "
                "machine; run the cell again before reading the speed-up.")
    if best > 4:
        return ("Over 4x, with steady timings: " + (
            "VNNI does four int8 multiply-adds per 32-bit lane where\nfp32 does one, and the "
            "int8 weights are a quarter of the bytes, so compute-bound and\nmemory-bound "
            "layers both gain." if vnni else "more than a quarter of the bytes explains; "
            "the int8 weights may fit\nin a cache the fp32 ones do not."))
    if best < 1.1:
        return ("That is no gain: int8 kernels pay only where the CPU has fast int8 dot "
                "products (VNNI)\nor the model is bound by reading its weights.")
    return "A real gain, and less than 4x: the quantise and dequantise steps between layers cost."


# --- labs 5-8: serving and scaling (lab 5 CPU or GPU, lab 6 batching under load, lab 7
# tensor parallel, lab 8 Triton). Each verdict reads `Spread`s, orders them only through
# `compare`, and prints `inconclusive` where the numbers beside it cannot carry a claim,
# including where they contradict each other (a part timed longer than its whole).

#: Lab 5: a batch-1 pass is "mostly dispatch" when its kernels' fixed cost (kernels x one
#: tiny kernel) is over this share of it: past half, fewer launches shorten it more than
#: any faster chip could.
MOSTLY_DISPATCH = 0.5
#: Labs 5 and 6: batching is "nearly free" when the largest batch's throughput gain over
#: batch 1 is at least this share of the batch: a step that grew at most 4x for the whole
#: batch is read as fixed cost, not work.
NEARLY_FREE_SHARE = 0.25
#: Labs 5 and 6: batching "helps" when that gain is at least this: twice batch 1's
#: throughput, the least gain worth a batching server's queue and its latency.
HELPS_GAIN = 2.0
#: Lab 5: threads scale "near perfectly" at this share of the thread count (the usual
#: mark for a parallel efficiency worth counting on when sizing a CPU fleet).
GOOD_SCALING = 0.8
#: Lab 6: batching "raised capacity" when the chosen policy serves at least this many
#: times max_batch 1's requests within the SLO; below it the gain is too small to pay for
#: a batching server's memory and complexity.
CAPACITY_GAIN = 1.5
#: Lab 8: a light-load request that spends more than this outside the model (seconds) pays
#: far more than its work there (64 floats serialised, a few system calls: well under a
#: millisecond on an idle machine), so its cores were busy with something else.
OUTSIDE_MODEL_S = 0.005
#: Two-sided 95% normal quantile, for the order-statistic interval of a percentile.
_Z95 = 1.96


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
    import numpy as np

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
    import numpy as np

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
    import numpy as np

    x = _v.number("samples", samples, array=True).ravel()
    whole = quantile_spread(x, quantile)
    if x.size < 4:
        return whole
    halves = [float(np.percentile(h, quantile)) for h in np.array_split(x, 2)]
    return Spread(whole.median, max(whole.spread, (max(halves) - min(halves)) / whole.median))


def _vs(x: Spread, bound: float) -> str:
    """`compare` of a measurement with a fixed bound (no spread of its own)."""
    return compare(x, Spread(_v.positive("bound", bound), 0.0))


def _largest(*spreads) -> float:
    return max(s.spread for s in spreads)


# Lab 5: CPU or GPU -----------------------------------------------------------------------

def dispatch_share(kernel: Spread, pass_: Spread, n_kernels) -> str:
    """Lab 5: is a batch-1 pass (`pass_`, s) mostly its `n_kernels` kernels' fixed cost
    (`kernel`: one tiny kernel, s) or work? Inconclusive when the kernels alone took
    longer than the pass that contains them."""
    n = _v.count("n_kernels", n_kernels)
    dispatch = Spread(n * kernel.median, kernel.spread)
    if dispatch.median > pass_.median:
        return inconclusive(f"{n} tiny kernels took longer than the whole pass",
                            kernel.spread, pass_.spread)
    half = Spread(MOSTLY_DISPATCH * pass_.median, pass_.spread)
    order = compare(dispatch, half)
    if order == "larger":
        return ("Mostly dispatch: a faster chip would barely change batch-1 latency; fewer "
                "launches would\n(CUDA graphs: one launch for the whole pass; fusion).")
    if order == "smaller":
        return ("Mostly work (reading the weights): more bandwidth, or smaller weights, would "
                "lower it.")
    return inconclusive("dispatch against work", kernel.spread, pass_.spread)


def batching_gain(one: Spread, top: Spread, batch, *, serving=False) -> str:
    """Labs 5 and 6: what batch `batch`'s step (`top`, s) against batch 1's (`one`, s)
    says: nearly free, helps, or buys little, each only beyond the noise. `serving`
    adds what it means for a batching server's capacity (lab 6)."""
    batch = _v.positive("batch", batch)
    gain = Spread(batch * one.median / top.median, one.spread + top.spread)
    if gain.median > batch:
        return inconclusive(f"batch {batch:,.0f} ran faster than batch 1", one.spread,
                            top.spread)
    free = _vs(gain, NEARLY_FREE_SHARE * batch)
    helps = _vs(gain, HELPS_GAIN)
    if free == "larger":
        text = (f"Nearly free: throughput rose {gain.median:,.1f}x; the step is fixed cost "
                "(or one read of the\nweights every sequence shares), not work.")
        then = "Expect batching to raise capacity a lot."
    elif free == "smaller" and helps == "larger":
        text = (f"Batching helps, less than in proportion: throughput rose {gain.median:,.1f}x; "
                "the work grows\nwith the batch too.")
        then = "Expect batching to raise capacity, by less than the batch size."
    elif helps == "smaller":
        text = (f"Batching buys little here ({gain.median:,.1f}x the throughput): the time "
                "grows with the work.")
        then = "Expect the policy sweep to keep max_batch small."
    else:
        return inconclusive("the throughput batching bought", one.spread, top.spread)
    return f"{text}\n{then}" if serving else text


def faster_than_ceiling(measured: Spread, ceiling_s) -> bool:
    """Labs 5 and 6: did a step (`measured`, s) beat its roofline ceiling (`ceiling_s`, s)
    beyond its spread (a cache served what the ceiling reads from memory)?"""
    return compare(Spread(_v.positive("ceiling_s", ceiling_s), 0.0), measured) == "larger"


def gpu_at_batch_one(cpu: Spread, gpu, *, predicted) -> str:
    """Lab 5: the GPU's batch-1 pass (`gpu`: one measured Spread, or the ends of a
    predicted range, s) against one CPU core's (`cpu`, s). A range is stated only where
    both ends fall on the same side of the CPU beyond its noise."""
    gpu = sorted(gpu, key=lambda s: s.median)
    _v.ensure(len(gpu) >= 1, "gpu must hold at least one time")
    orders = {compare(cpu, g) for g in gpu}
    ratios = [cpu.median / g.median for g in gpu]
    what = "predicted for a T4" if predicted else "measured"
    if orders == {"larger"}:
        shown = " to ".join(f"{r:,.1f}x" for r in sorted(ratios))
        return f"At batch 1 the GPU ({what}) is {shown} faster than one CPU core."
    if orders == {"smaller"}:
        shown = " to ".join(f"{1 / r:,.1f}x" for r in sorted(ratios, reverse=True))
        return f"At batch 1 the GPU ({what}) is {shown} slower than one CPU core."
    if orders == {"larger", "smaller"}:
        return ("At batch 1 the GPU's predicted range straddles one CPU core: faster when "
                "launches overlap\nthe GPU's work, slower when the host waits for each.")
    return inconclusive("the GPU at batch 1 against one CPU core", cpu.spread,
                        *(g.spread for g in gpu))


def threads_speedup(one: Spread, together: Spread, n_threads) -> str:
    """Lab 5: one batch on `n_threads` threads (`together`, s) against one thread
    (`one`, s), timed side by side."""
    n = _v.count("n_threads", n_threads)
    if n == 1:
        return "torch has one thread here: there is no second thread to compare with."
    speed = ratio(one, together)
    head = (f"CPU: {n} threads on one batch ran {speed.median:.2g}x as fast as one "
            f"(perfect: {n}x).")
    order = compare(one, together)
    if order == "smaller":
        return (f"{head}\n  Slower than one thread: the threads contend (hyperthreads of one "
                "core, or other work\n  here). Size a CPU fleet by cores x one thread.")
    if order != "larger":
        return inconclusive(f"{n} threads against one", one.spread, together.spread)
    if _vs(speed, GOOD_SCALING * n) == "smaller":
        return (f"{head}\n  Faster, less than perfect: threads share caches, memory or "
                "(hyperthreads) a core, or\n  other work runs here. Check the "
                "cores-times-one-thread assumption on your CPU machine.")
    return f"{head}\n  Near perfect: cores x one thread is a fair estimate on this machine."


# Lab 6: batching under load -------------------------------------------------------------

def policy_choice(chosen, spread) -> str:
    """Lab 6: the max_batch `batching.best_policy` chose from each version of the measured
    table (`chosen`: {which table: max_batch}, e.g. the median, fastest and slowest of
    the runs), `spread` the table's largest. One answer is stated only if all agree."""
    chosen = {str(k): int(_v.count("max_batch", b, minimum=0))
              for k, b in dict(chosen).items()}
    _v.ensure(len(chosen) >= 1, "chosen must name at least one table")
    if len(set(chosen.values())) == 1:
        b = next(iter(chosen.values()))
        if b == 0:
            return "No policy meets the SLO on any version of the table: loosen it."
        return (f"max_batch {b} is chosen from every version of the table ("
                f"{', '.join(chosen)} timings).")
    shown = ", ".join(f"{b or 'none'} from the {k} timings" for k, b in chosen.items())
    return (inconclusive("the chosen max_batch", _v.non_negative("spread", spread))
            + f"\nmax_batch {shown}: the choice sits on an edge the noise moves.")


def capacity_gain(best, one, *, kept, chosen, two_steps_s, slo_s) -> str:
    """Lab 6: what the chosen policy's capacity (`best`: requests/s within the SLO, one
    per version of the measured table) against max_batch 1's (`one`, the same; 0 where
    batch 1 never meets the SLO) says, and why max_batch stops where it does. `kept`: the
    chosen capacity over its full-batch throughput; `two_steps_s`: {max_batch: two steps
    of that batch, s} (a request may wait for the batch in service, then run in its own);
    `slo_s`: the p99 objective, s."""
    kept = _v.positive("kept", kept)
    slo_s = _v.positive("slo_s", slo_s)
    steps = {int(b): _v.positive("two_steps_s", s) for b, s in dict(two_steps_s).items()}
    chosen = int(_v.count("max_batch", chosen))
    one = [_v.non_negative("one", c) for c in one]
    if max(one, default=0.0) == 0:
        return "Without batching the SLO cannot be met at any rate: loosen it, or batch."
    best = [_v.positive("best", c) for c in best]
    _v.ensure(len(best) == len(one), "best and one must hold one capacity per table")
    if min(one) == 0:
        return inconclusive("max_batch 1 meets the SLO on some versions of the table, not "
                            "on others", Spread.of(best).spread)
    # Paired: each table's gain, so a load that slowed every batch cancels out.
    gain = Spread.of([b / o for b, o in zip(best, one)])
    if kept > 1 + MIN_EFFECT:
        return inconclusive("a capacity above its full-batch throughput", gain.spread)
    if gain.median < 1 / (1 + MIN_EFFECT):
        return inconclusive("the chosen policy serves less than max_batch 1", gain.spread)
    fits = max([b for b, s in steps.items() if s <= slo_s], default=0)
    above = [b for b in sorted(steps) if b > fits]
    order = _vs(gain, CAPACITY_GAIN)
    if order == "larger":
        text = f"Batching raised capacity {gain.median:.1f}x."
        if chosen == fits and above:
            text += (f" max_batch stops at {chosen}: a request may wait for the\nbatch in "
                     f"service, then run in its own, and two steps of batch {chosen} "
                     f"({steps[chosen] * 1e3:.1f} ms) fit in\nthe {slo_s * 1e3:.1f} ms SLO; "
                     f"two of batch {above[0]} ({steps[above[0]] * 1e3:.1f} ms) do not.")
        elif chosen < fits:
            text += (f" Batches up to {fits} fit twice in the SLO, but none serves\nmore than "
                     f"2% above max_batch {chosen}, so the smaller is kept.")
        return text + (f"\nWithin the SLO it runs at {kept:.0%} of its full-batch throughput: "
                       "the rest is the headroom\nits queue needs to keep the p99 short.")
    if order == "smaller":
        return (f"Batching raised capacity only {gain.median:.2f}x under this SLO. A request "
                f"may wait for\nthe batch in service, then run in its own: two steps fit in "
                f"{slo_s * 1e3:.1f} ms only up to batch {fits},\nso the larger batches' gain "
                "(the saturation column) is out of reach; a looser SLO reaches it.")
    return inconclusive("capacity with batching against without", gain.spread)


def two_models(ratios, loads) -> str:
    """Lab 6: two models sharing one device against one model, at each total load in
    `loads` (requests/s): `ratios`, one Spread a load of the simulated p99 with two models
    over the p99 with one, over the versions of the measured table (paired: the same
    table on both sides). Only loads where the two differ beyond the noise are named."""
    ratios, loads = list(ratios), [float(x) for x in loads]
    _v.ensure(len(ratios) == len(loads) >= 1, "ratios and loads must be as long as each other")
    orders = [_vs(r, 1.0) for r in ratios]
    higher = [f"{x:,.0f}" for x, o in zip(loads, orders) if o == "larger"]
    lower = [f"{x:,.0f}" for x, o in zip(loads, orders) if o == "smaller"]
    if higher and lower:
        return (f"Splitting costs latency at {', '.join(higher)}/s and lowers it at "
                f"{', '.join(lower)}/s: where\nbatches fill, halving them hurts; where they "
                "stay small, two queues finish sooner.")
    if higher:
        return (f"Splitting costs latency at {', '.join(higher)}/s: each model's batches "
                "carry half the requests,\nbut each step still reads a full set of weights, "
                "so halving batches hurts"
                + ("." if len(higher) == len(loads) else
                   " (at the other loads the two are within the noise)."))
    if lower:
        return (f"Splitting lowers the p99 at {', '.join(lower)}/s: where batching buys "
                "little there is little\nto lose, and two queues' smaller batches finish "
                "sooner.")
    return inconclusive("two models' p99 against one's", *(r.spread for r in ratios))


# Lab 7: tensor parallel -----------------------------------------------------------------

def tp_step(one_step: Spread, top_step: Spread, one_compute: Spread, top_compute: Spread,
            allreduce_s, n) -> str:
    """Lab 7: did sharding over `n` ranks pay? The unsharded step (`one_step`, s) against
    the sharded one (`top_step`), explained by the parts the lab prints: each rank's
    compute (`one_compute` unsharded, `top_compute` sharded) and the fitted all-reduce
    (`allreduce_s`). Inconclusive when a rank's compute alone took longer than the whole
    step that contains it (the load changed between the timings)."""
    n = _v.count("n", n)
    allreduce_s = _v.non_negative("allreduce_s", allreduce_s)
    spreads = (one_step.spread, top_step.spread, one_compute.spread, top_compute.spread)
    if compare(top_compute, top_step) == "larger" or top_compute.median > 1.5 * top_step.median:
        return inconclusive(f"each rank's compute ({top_compute.median * 1e3:.3g} ms) took "
                            f"longer than the whole step\n({top_step.median * 1e3:.3g} ms) "
                            "that contains it: the load changed between the timings",
                            *spreads)
    saved = one_compute.median - top_compute.median
    parts = (f"compute {'saved' if saved >= 0 else 'grew by'} {abs(saved) * 1e3:.3g} ms, "
             f"all-reduce added {allreduce_s * 1e3:.3g} ms (fit)")
    speed = one_step.median / top_step.median
    cost = compare(Spread(top_compute.median + allreduce_s, top_compute.spread), one_compute)
    noisy = "its parts, timed apart, are too noisy to say which outweighs the other"
    order = compare(one_step, top_step)
    if order == "larger":
        why = {"smaller": "the compute saved exceeds the all-reduce added",
               "larger": "although its parts predict a loss: the parts were timed apart, "
                         "under\nanother load"}.get(cost, noisy)
        return f"Sharding paid on this run ({speed:.2f}x; {parts}):\n{why}."
    if order == "smaller":
        why = {"larger": "the all-reduce costs more than the compute saved" if saved > 0 else
               "each rank's shard took no less than the whole layer (the ranks share\n"
               "cores), and the all-reduce came on top",
               "smaller": "although its parts predict a gain: the step pays more than its "
                          "compute and\nits all-reduce, ranks waiting for each other (on a "
                          "shared CPU, for a descheduled one)"}.get(cost, noisy)
        return f"Sharding made the step slower on this run ({speed:.2f}x; {parts}):\n{why}."
    return inconclusive(f"the {n}-rank step against the unsharded one; {parts}", *spreads)


def tp_split(one_compute: Spread, top_compute: Spread, n, top_step=None) -> str:
    """Lab 7: how far each of `n` ranks' compute (`top_compute`, s) fell from the
    unsharded compute (`one_compute`): near 1/n, or much less than that (ranks sharing
    cores or memory bandwidth). Empty when nothing beyond the noise needs saying, or when
    the shard's timing outlasts the sharded step (`top_step`, s) that contains it: then
    the timings disagree, and `tp_step` says so."""
    n = _v.count("n", n)
    share = top_compute.median / one_compute.median
    if top_step is not None and (compare(top_compute, top_step) == "larger"
                                 or top_compute.median > 1.5 * top_step.median):
        return ""
    if compare(top_compute, one_compute) == "larger":
        return (f"Each rank's shard took longer ({share:.0%}) than the whole layer did on "
                "its own: the ranks\ncompete for the same cores (and memory bandwidth), "
                "so the split bought nothing here.")
    if _vs(ratio(top_compute, one_compute), 1.5 / n) == "larger":
        return (f"Each rank's compute fell only to {share:.0%} of the whole (a perfect split: "
                f"{1 / n:.0%}): the ranks\nshare cores (or memory bandwidth), so the split "
                "bought less than it divides.")
    return ""


def tp_accounting(predicted: Spread, measured: Spread) -> str:
    """Lab 7: does compute + all-reduce (`predicted`, s) account for the measured sharded
    step (`measured`, s)? Parts that add up to more than their whole are inconsistent:
    they were timed apart, under another load."""
    share = predicted.median / measured.median
    order = compare(predicted, measured)
    if order == "larger":
        return inconclusive(f"compute + all-reduce add up to {share:.0%} of the measured "
                            "step: the parts were timed apart,\nunder another load",
                            predicted.spread, measured.spread)
    if order == "smaller":
        return (f"Compute + all-reduce accounts for {share:.0%} of the measured step: the "
                "rest is\nsynchronisation, a collective waiting for the slowest rank (and, "
                "on a shared CPU,\nfor a descheduled one).")
    if _largest(predicted, measured) > TOO_NOISY:
        return inconclusive("the step against its parts", predicted.spread, measured.spread)
    return (f"Compute + all-reduce accounts for the measured step ({share:.0%}), within this "
            "run's noise.")


# Lab 8: Triton's dynamic batcher ----------------------------------------------------------

def p50_gap(real: Spread, simulated: Spread) -> str:
    """Lab 8: the real server's light-load p50 against the simulator's (s)."""
    gap = real.median - simulated.median
    order = compare(real, simulated)
    if order == "larger":
        return (f"At the lightest load the real p50 is {gap * 1e3:.2f} ms above the "
                "simulator's: time the\nsimulator does not know about (gRPC, Triton's queue, "
                "PyTriton's hop back to this process).")
    if order == "smaller":
        return (f"At the lightest load the real p50 is {-gap * 1e3:.2f} ms below the "
                "simulator's: the model ran\nfaster inside the server than in the timing "
                "above (a noisy or shared machine).")
    return inconclusive("the real p50 against the simulator's", real.spread, simulated.spread)


def fell_behind(early: Spread, late: Spread):
    """Lab 8: did a server fall behind its load? `early`, `late`: the median latency (s,
    `quantile_spread(..., 50)`) of the first and the last third of a run's requests, by
    arrival. A server that falls behind queues, and its latency grows over the run. True
    (it grew beyond the noise), False (it did not, and the thirds are steady enough that
    a growing queue would have shown: within `NOISY_SPREAD` together), None (too noisy)."""
    order = compare(late, early)
    if order == "larger":
        return True
    if order == "smaller" or early.spread + late.spread <= NOISY_SPREAD:
        return False
    return None


def kept_up(early: Spread, late: Spread, rate) -> str:
    """Lab 8: did the server keep up with `rate` requests/s (`fell_behind`)? The run's
    tail (answers still coming back after the last request was sent), which pulls an
    answered-over-span rate below the load on a short run, does not enter."""
    rate = _v.positive("rate", rate)
    behind = fell_behind(early, late)
    shown = f"{early.median * 1e3:.1f} ms in the first third, {late.median * 1e3:.1f} ms in the last"
    if behind is None:
        return inconclusive(f"whether the server kept up at {rate:,.0f}/s", early.spread,
                            late.spread)
    if behind:
        return (f"At {rate:,.0f}/s the median latency grew over the run ({shown}):\nthe queue "
                "grew, so the server fell behind the load.")
    if compare(late, early) == "smaller":
        return (f"At {rate:,.0f}/s the median latency fell over the run ({shown}):\nno queue "
                "built up, so the server kept up (its first requests paid for a cold start).")
    return (f"At {rate:,.0f}/s the median latency held over the run ({shown}):\nno queue "
            "built up: the server kept up, within this run's noise.")


def calibrated_throughput(behind, calibrated: Spread, real: Spread, capacity) -> str:
    """Lab 8: does the calibrated simulator's throughput (`calibrated`, requests/s) match
    the real server's (`real`) at the heaviest load? Only a server that fell behind
    (`behind`, from `fell_behind`) tests it; one that kept up leaves the predicted
    `capacity` (requests/s) untested."""
    if behind is None:
        return inconclusive("whether the server kept up, so whether its throughput tests "
                            "the calibration", calibrated.spread, real.spread)
    if not behind:
        return ("The real server kept up with every rate offered, so matching its throughput "
                "tests little:\nthe latencies are the test here, and the capacity predicted "
                f"above ({capacity:,.0f}/s) is untested. To test it,\noffer more than it: this "
                "client sends about 2,000 requests/s at most, so serve a slower model\n(see "
                "below).")
    order = compare(calibrated, real)
    shown = f"{calibrated.median:,.0f} against {real.median:,.0f} requests/s"
    if order == "inconclusive":
        if _largest(calibrated, real) > TOO_NOISY:
            return inconclusive("the calibrated throughput against the real",
                                calibrated.spread, real.spread)
        return (f"The server fell behind; the calibrated simulator's throughput matches the "
                f"real server's\nwithin this run's noise ({shown}).")
    return (f"The calibrated simulator {'over' if order == 'larger' else 'under'}states the "
            f"real throughput ({shown}):\nthe client fell behind, or the hand-off changes with "
            "the load.")


def capacity_with_handoff(model: Spread, server) -> str:
    """Lab 8: capacity within the p99 objective from the model's own times (`model`,
    requests/s) against the calibrated server's (`server`: one capacity for each of the
    hand-off's quartiles and its median, 0 where none meets the objective)."""
    server = [_v.non_negative("server", c) for c in server]
    _v.ensure(len(server) >= 1, "server must hold at least one capacity")
    if max(server) == 0:
        return ("With the hand-off and the transport no rate meets the objective: the "
                "capacity changed,\nnot only the latency, and no offset on the latencies "
                "repairs that.")
    if min(server) == 0:
        return inconclusive("the capacity with the hand-off: some of its quartiles meet the "
                            "objective, some do not", model.spread)
    s = Spread.of(server)
    order = compare(model, Spread(CAPACITY_GAIN * s.median, s.spread))
    if order == "larger":
        return ("The capacity changed, not only the latency: no offset on the latencies "
                "repairs that.\nRe-derive the policy (lab 6's sweep) from the calibrated "
                "table before trusting it.")
    if order == "smaller":
        return ("Here the hand-off is small next to the model: an offset on the latencies is "
                "nearly enough.")
    return inconclusive("the capacity with the hand-off against without", model.spread,
                        s.spread)


def p99_trend(p99s, rates, n_requests) -> str:
    """Lab 8: how the measured p99 (Spreads, s, one per rate in `rates`, requests/s)
    moved from the lightest to the heaviest load, over runs of `n_requests` each."""
    p99s, rates = list(p99s), [float(r) for r in rates]
    _v.ensure(len(p99s) == len(rates) >= 2, "p99s and rates must match, two or more")
    n = _v.count("n_requests", n_requests)
    lo, hi = p99s[0], p99s[-1]
    order = compare(lo, hi)
    if order == "larger":
        return (f"The p99 fell as the load rose ({lo.median * 1e3:.1f} ms at {rates[0]:,.0f}/s, "
                f"{hi.median * 1e3:.1f} ms at {rates[-1]:,.0f}/s): not what\nqueueing does. "
                f"A p99 of {n} requests is set by its three or four slowest, so a few stalls "
                f"set it,\nand the run at {rates[0]:,.0f}/s lasts {rates[-1] / rates[0]:.1f}x "
                f"as long as the one at {rates[-1]:,.0f}/s: it likely met more of\nthe stalls "
                "a shared machine has (another process taking the cores, a garbage "
                "collection).\nRerun before reading the light-load p99 as the server's.")
    if order == "smaller":
        return (f"The p99 rose with the load ({lo.median * 1e3:.1f} to {hi.median * 1e3:.1f} "
                "ms): requests queue behind fuller batches.")
    return inconclusive("the p99 from the lightest to the heaviest load", lo.spread, hi.spread)


def handoff_vs_outside(hop: Spread, outside: Spread) -> str:
    """Lab 8: the per-batch hand-off measured under load (`hop`, s) against all a
    light-load request paid outside the model (`outside`, s)."""
    order = compare(hop, outside)
    if order == "larger":
        return (f"The hand-off under load ({hop.median * 1e3:.1f} ms) exceeds all a light-load "
                f"request paid outside the model\n({outside.median * 1e3:.1f} ms): it grows "
                "with the load (each hop waits longer for a busy core), so the calibrated\n"
                "table overstates light-load latency, and no transport is left for the offset.")
    if order == "smaller":
        return (f"The hand-off ({hop.median * 1e3:.1f} ms) is part of what a light-load request "
                f"paid outside the model\n({outside.median * 1e3:.1f} ms); the rest is the "
                "transport, added to every latency below.")
    return inconclusive("the hand-off against the light-load time outside the model",
                        hop.spread, outside.spread)


def calibration(measured_p50s, calibrated_p50s, rates, *, calibrated_at) -> str:
    """Lab 8: the calibrated simulator's p50 (Spreads, s) against the measured p50
    (Spreads, s) at each rate in `rates` (requests/s); `calibrated_at`: the rate whose
    batch-to-batch gaps gave the hand-off. Says where the calibration holds."""
    measured_p50s, calibrated_p50s = list(measured_p50s), list(calibrated_p50s)
    rates = [float(r) for r in rates]
    _v.ensure(len(measured_p50s) == len(calibrated_p50s) == len(rates) >= 1,
              "measured_p50s, calibrated_p50s and rates must match")
    orders = [compare(c, m) for m, c in zip(measured_p50s, calibrated_p50s)]
    if all(o == "inconclusive" for o in orders):
        if max(_largest(m, c) for m, c in zip(measured_p50s, calibrated_p50s)) > TOO_NOISY:
            return inconclusive("the calibrated p50 against the measured", *(
                s.spread for s in measured_p50s + calibrated_p50s))
        return ("The calibrated simulator's p50 matches the measured one at every rate, "
                "within this run's noise.")
    words = {"larger": "overstates", "smaller": "understates", "inconclusive": "matches"}
    lines = [f"at {r:,.0f}/s it {words[o]} the p50 ({c.median * 1e3:.1f} against "
             f"{m.median * 1e3:.1f} ms)" for r, o, m, c in
             zip(rates, orders, measured_p50s, calibrated_p50s)]
    return ("The calibrated simulator does not match everywhere: " + ";\n".join(lines)
            + f".\nIts hand-off was measured at {calibrated_at:,.0f}/s: a calibration holds "
            "near the load it was taken at,\nnot at every load (here the hand-off itself "
            "changes with the load).")


def outside_model(outside: Spread, n_cores) -> str:
    """Lab 8: a light-load request's time outside the model (`outside`, s): far more than
    its work there (`OUTSIDE_MODEL_S`) means the cores were busy elsewhere."""
    order = _vs(outside, OUTSIDE_MODEL_S)
    if order == "larger":
        return (f"A light-load request spends {outside.median * 1e3:.0f} ms outside the model, "
                "far more than its work there\n(serialising 64 floats, a few system calls): "
                f"client, Triton, stub and model share {n_cores} cores\nhere, and each hop "
                "waits for one. On a machine with cores to spare it is far smaller.")
    if order == "smaller":
        return (f"A light-load request spends {outside.median * 1e3:.1f} ms outside the model: "
                "the transport and the hops\nare cheap on this machine.")
    return inconclusive("the time outside the model", outside.spread)


def two_models_on_server(one_p99s, two_p99s, rates, hop_s) -> str:
    """Lab 8: the real server's p99 with two models against one (Spreads, s, one per rate
    in `rates`); `hop_s`: the per-batch hand-off measured under load, s."""
    one_p99s, two_p99s = list(one_p99s), list(two_p99s)
    rates = [float(r) for r in rates]
    _v.ensure(len(one_p99s) == len(two_p99s) == len(rates) >= 1,
              "one_p99s, two_p99s and rates must match")
    orders = [compare(t, o) for o, t in zip(one_p99s, two_p99s)]
    lower = [f"{r:,.0f}" for r, o in zip(rates, orders) if o == "smaller"]
    higher = [f"{r:,.0f}" for r, o in zip(rates, orders) if o == "larger"]
    text = []
    if lower:
        text.append(f"At {', '.join(lower)}/s two models had a lower p99 than one, beyond "
                    "the noise: each model has\nits own stub and hand-off, and where the "
                    f"hand-off ({hop_s * 1e3:.1f} ms a batch here), not the model, sets\n"
                    "the pace, two pipelines beat one. The simulator runs both models' "
                    "batches in turn on one\ndevice, the case of a GPU that the model fills.")
    if higher:
        text.append(f"At {', '.join(higher)}/s two models had a higher p99 than one: the "
                    "batches they split cost more\nthan the second hand-off pipeline bought.")
    if not text:
        return inconclusive("two models' p99 against one's",
                            *(s.spread for s in one_p99s + two_p99s))
    return "\n".join(text)
