"""What a lab's measurement means, read from the numbers in front of the learner.

A lab's printed numbers depend on the machine: a CPU thread, a T4, an H100. Its fixed
prose cannot say which way a result went, so labs 1-4 and 9-11 ask these functions for the
verdict, and they branch on the data (tests/test_lab_takeaways.py feeds each function
every outcome). They return text; the labs print it. Nothing here measures; the facts of
the labs' decode stack live in `decoding`. (`gpuinfer.course.findings` does the
same for the chapters' sentences.)
"""

from __future__ import annotations

import math


from gpuinfer import validate as _v
from gpuinfer.predict import achievable as _achievable
from gpuinfer.measure.lab_measurements import GOOD_STREAM
from gpuinfer.measure.spread import (MIN_EFFECT, NOISY_SPREAD, TOO_NOISY, Spread, compare,
                                     inconclusive)

#: A fusion removes one elementwise pass (or a scalar multiply) next to matrix products:
#: a saving above this fraction of the step says the machine's load changed, not the graph.
TOO_LARGE_FOR_ONE_FUSION = 0.25




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
