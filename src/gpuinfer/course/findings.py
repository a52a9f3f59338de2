"""Findings: sentences a page prints about its own measurements, branching on the data so that the
text beside a table never contradicts it (chapters *Serving systems* and *How to
benchmark*). Each function takes the numbers the page measured and returns one sentence
(no final full stop), saying "too noisy to tell" where the data cannot decide.

A measurement on a shared machine can come out in any order; these functions state what
this run shows, not what the physics promises. Those that read timings take them as
`lab_verdicts.Spread`s (a median and its relative spread) and order two numbers only
through the shared noise gate, `lab_verdicts.compare`; otherwise they print its
inconclusive sentence.
"""

from __future__ import annotations

import numpy as np

from gpuinfer import validate as _v
from gpuinfer.measure.spread import TOO_NOISY, Spread, compare
from gpuinfer.measure.spread import inconclusive as _inconclusive_sentence

#: Two timings whose ratio stays within this factor of 1 are not told apart.
NOISE_RATIO = 1.15
#: MBU bands (a fraction of the datasheet bandwidth): from `MBU_NEAR` a step is near the
#: roof (gpt-fast's compiled decode reached 0.68 on an A100); under `MBU_FAR` it is far
#: below it, a tenth of the bandwidth, which only per-operation costs explain at batch 1.
MBU_NEAR, MBU_FAR = 0.5, 0.1
#: A step whose bytes, at the bandwidth this machine measured, take at least this share
#: of its time is mostly a memory read, whatever its MBU against a catalogue entry.
BYTES_BIND = 0.5


def inconclusive(what, *spreads) -> str:
    """`lab_verdicts.inconclusive`'s sentence, without its final full stop (as every
    finding here)."""
    return _inconclusive_sentence(what, *spreads).rstrip(".")


def _spread(name, x):
    if not isinstance(x, Spread):
        raise TypeError(f"{name} must be a lab_verdicts.Spread, got {x!r}")
    return x


def fusion(bytes_ratio, time_ratio, *, tolerance=0.25) -> str:
    """Compare the unfused/fused byte ratio with the measured time ratio (chapter
    *Serving systems*). Within `tolerance` (a fraction) of each other: time followed
    bytes; below: something other than bytes bound the fused kernel; above: each small
    kernel paid more than its bytes; a time ratio within noise of 1: too noisy to tell."""
    b = _v.positive("bytes_ratio", bytes_ratio)
    t = _v.positive("time_ratio", time_ratio)
    tol = _v.number("tolerance", tolerance, lo=0, lo_open=True, hi=1,
                    expected="a fraction between 0 and 1")
    if t < NOISE_RATIO:
        return (f"On this run the fused kernel was not clearly faster ({t:.2f}x): this run "
                "was too noisy to tell")
    if abs(t / b - 1) <= tol:
        return (f"On this run the time ratio, {t:.1f}, came within {tol:.0%} of the byte "
                f"ratio, {b:.0f}: time followed bytes")
    if t < b:
        return (f"On this run the time ratio, {t:.1f}, fell short of the byte ratio, {b:.0f}: "
                "something other than bytes bound the fused kernel (tanh's instructions, "
                "or a machine whose cores compute little per byte)")
    return (f"On this run the time ratio, {t:.1f}, exceeded the byte ratio, {b:.0f}: each of "
            "the small kernels paid more than its bytes (a dispatch or launch each, or "
            "intermediates spilling out of a cache the fused kernel's data fit in)")


def cache(sizes_bytes, reread_gb_per_s, flushed_gb_per_s, *, gap=1.5, reread_spread=None,
          flushed_spread=None) -> str:
    """What a re-read/flushed bandwidth table shows (chapter *How to benchmark*, mistake 5).
    Re-reads faster by at least `gap`, and beyond both rows' spreads (`compare`), somewhere:
    the cache served them (the largest such gap named). Flushed reads faster than re-reads
    beyond the spreads: no cache does that, so those rows are named as noise. Neither: too
    noisy to tell. `reread_spread`, `flushed_spread`: each row's relative spread (IQR /
    median); without them each side counts 5%, a margin of `NOISE_RATIO` (1.15)."""
    size = np.asarray(_v.positive("sizes_bytes", sizes_bytes, array=True), dtype=float)
    rr = np.asarray(_v.positive("reread_gb_per_s", reread_gb_per_s, array=True), dtype=float)
    fl = np.asarray(_v.positive("flushed_gb_per_s", flushed_gb_per_s, array=True), dtype=float)
    if not (size.shape == rr.shape == fl.shape) or size.ndim != 1 or size.size == 0:
        raise ValueError(f"sizes_bytes, reread_gb_per_s and flushed_gb_per_s must be "
                         f"1-D arrays of one length, got {size.shape}, {rr.shape}, {fl.shape}")
    gap = _v.number("gap", gap, lo=1, lo_open=True, expected="a factor above 1")
    default = (NOISE_RATIO - 1 - 0.05) / 2     # each side's share of the 1.15 margin
    srr, sfl = (np.broadcast_to(default if x is None else _v.number(
        name, x, lo=0, allow_inf=True, array=True), size.shape)
        for name, x in (("reread_spread", reread_spread), ("flushed_spread", flushed_spread)))
    ratio = rr / fl
    order = np.array([compare(Spread(a, sa), Spread(b, sb))
                      for a, sa, b, sb in zip(rr, srr, fl, sfl)])
    mib = lambda xs: " and ".join(f"{x / 2**20:g} MiB" for x in xs)  # noqa: E731
    parts = []
    served = np.where((order == "larger") & (ratio >= gap), ratio, 0.0)
    best = int(np.argmax(served))
    if served[best] > 0:
        parts.append(f"re-reads of {mib([size[best]])} ran {ratio[best]:.1f}x as fast as "
                     "flushed reads: the cache served them")
    inverted = size[order == "smaller"]
    if inverted.size:
        parts.append(f"at {mib(inverted)} the flushed reads came out faster than the "
                     "re-reads, which no cache causes: "
                     + ("those rows are" if inverted.size > 1 else "that row is")
                     + " noise from other work on this machine")
    if served[best] == 0:
        parts.append(f"no re-read ran clearly ({gap:g}x and beyond the spread of both "
                     "timings) faster than its flushed read: this run was too noisy to "
                     "tell (rerun on an idle machine)")
    return "On this run " + "; ".join(parts)


def mbu(fraction, *, on_gpu, spread=0.0, bytes_share=None) -> str:
    """One line on a measured MBU (a fraction of the catalogue bandwidth; chapter *How to
    benchmark*), decided beyond its relative `spread` (that of the step's timing): above 1,
    a bug; from `MBU_NEAR`, near the roof; from `MBU_FAR`, well below; under it, far below.
    `bytes_share` (a `Spread`, or None): the time the step's bytes take at the bandwidth
    measured on this machine, over the step's time. Where it is clearly `BYTES_BIND` or
    more, the memory sets the step, not per-operation overhead, whatever the MBU against a
    catalogue entry says. `on_gpu=False` adds that the CPU entry is a reference desktop."""
    f = _v.non_negative("fraction", fraction)
    if not isinstance(on_gpu, (bool, np.bool_)):
        raise TypeError(f"on_gpu must be True or False, got {on_gpu!r}")
    s = _v.number("spread", spread, lo=0, allow_inf=True)
    share = None if bytes_share is None else _spread("bytes_share", bytes_share)
    measured = Spread(max(f, 1e-12), s)
    near, far = (compare(measured, Spread(x, 0.0)) for x in (MBU_NEAR, MBU_FAR))
    binds = None if share is None else compare(share, Spread(BYTES_BIND, 0.0))
    if compare(measured, Spread(1.0, 0.0)) == "larger":
        text = (f"MBU {f:.0%} is above the ceiling: a cache served the bytes, or the "
                "catalogue entry is the wrong device")
    elif near == "larger":
        text = (f"MBU {f:.0%}: near the roof, where bytes bind (gpt-fast's compiled decode "
                "reached 68% on an A100)")
    elif near == "smaller" and binds == "larger":
        text = (f"MBU {f:.1%} of the catalogue's bandwidth, yet at the bandwidth measured on "
                f"this machine the step's bytes alone take {share.median:.0%} of its time: "
                "this machine's memory, not per-operation overhead, sets most of the step")
    elif near == "smaller" and far == "larger":
        text = f"MBU {f:.0%}: well below the roof; overhead and bandwidth both count"
        if binds == "smaller":
            text += (f" (at the bandwidth measured here the bytes take {share.median:.0%} of "
                     "the step)")
    elif far == "smaller" and binds in (None, "smaller"):
        text = (f"MBU {f:.1%}: far below the roof; at batch 1 an eager stack is bound by "
                "the cost of each operation (Python, dispatch, launches), not by its bytes")
    else:
        return inconclusive(f"MBU {f:.1%}", s, *([] if share is None else [share.spread]))
    if not on_gpu:
        text += ("; and the ceiling is the catalogue's reference CPU, not this machine, so "
                 "the fraction is indicative only")
    return text


def more_work(label, baseline, changed, predicted_ratio) -> str:
    """A change that adds work (a longer context): `baseline` and `changed` are the two
    steps' seconds as `Spread`s (a median over repeated runs and its spread);
    `predicted_ratio` (>= 1) is the changed step's time over the baseline's on the ceiling,
    the extra work. Says whether the extra time shows beyond the noise, and whether it is
    what the extra work explains. Returns the verdict."""
    if not isinstance(label, str) or not label.strip():
        raise TypeError(f"label must be a non-empty string, got {label!r}")
    b, c = _spread("baseline", baseline), _spread("changed", changed)
    pred = _v.number("predicted_ratio", predicted_ratio, lo=1,
                     expected="a time ratio of at least 1 (the change adds work)")
    speed, spreads = b.median / c.median, (b.spread, c.spread)
    vs_base = compare(c, b)
    vs_pred = compare(c, Spread(b.median * pred, b.spread))
    extra = f"{pred - 1:.0%} more time on the ceiling"
    if max(spreads) > TOO_NOISY or vs_base == "smaller":
        return inconclusive(f"{label} ran {speed:.2f}x as fast as the baseline with more work",
                            *spreads)
    if vs_pred == "larger":
        return (f"{label} ran {speed:.2f}x as fast as the baseline: slower than its extra work "
                f"explains ({extra}), beyond the noise: something else cost time (the load "
                "on this machine changed between the rows, or the longer KV cache no longer "
                "fits a cache); repeat both rows")
    if vs_base == "larger":
        return (f"{label} ran {speed:.2f}x as fast as the baseline: the extra work shows, "
                + ("about as the ceiling predicts" if vs_pred == "inconclusive" else
                   "though less than the ceiling predicts") + f" ({extra})")
    if vs_pred == "smaller":
        return (f"{label} ran within noise of the baseline ({speed:.2f}x) although the ceiling "
                f"predicts {extra}: here the extra work cost less than its bytes")
    return (f"{label} ran within noise of the baseline ({speed:.2f}x): its extra work "
            f"({extra}) is smaller than this run's spread ({max(spreads):.0%}) can show")


def first_call(calls_s, steady) -> str:
    """Chapter *How to benchmark*, mistake 1: the first of `calls_s` (single calls in
    order, seconds; at least 4) against the median after warm-up (`steady`, a `Spread`
    from `time_fn`): did it pay for set-up, beyond the noise? One call has no spread of its
    own: it is given the later calls' interquartile range over their median."""
    x = np.asarray(_v.positive("calls_s", calls_s, array=True), dtype=float).ravel()
    _v.ensure(x.size >= 4, f"calls_s must hold at least 4 timings, got {x.size}")
    steady = _spread("steady", steady)
    q1, med, q3 = np.percentile(x[1:], [25, 50, 75])
    first = Spread(float(x[0]), float(q3 - q1) / med)
    if compare(first, steady) == "larger":
        return (f"the first call took {first.median / steady.median:,.0f} times as long as "
                "the median after warm-up: it paid for set-up")
    return inconclusive("the first call against the median after warm-up", first.spread,
                        steady.spread)


def slow_calls(calls_s) -> str:
    """Chapter *How to benchmark*, mistake 2: did the slow calls among `calls_s` (single
    timings, seconds) pull the mean above the median, beyond the calls' own spread (their
    interquartile range over the median)?"""
    x = np.asarray(_v.positive("calls_s", calls_s, array=True), dtype=float).ravel()
    _v.ensure(x.size >= 4, f"calls_s must hold at least 4 timings, got {x.size}")
    med = float(np.median(x))
    q1, q3 = np.percentile(x, [25, 75])
    s = float(q3 - q1) / med
    mean = float(x.mean())
    if compare(Spread(mean, s), Spread(med, s)) == "larger":
        return (f"the slow calls pulled the mean to {mean / med:.1f}x the median, beyond the "
                "calls' own spread; the median did not follow them")
    return inconclusive("the mean against the median", s)


def threads(one, many, n_threads) -> str:
    """Chapter *How to benchmark*, mistake 3: a matmul timed on one thread (`one`) and on
    the `n_threads` torch would use (`many`), as `Spread`s of seconds."""
    one, many = _spread("one", one), _spread("many", many)
    n = _v.count("n_threads", n_threads)
    if n == 1:
        return "This machine gives torch one thread, so the two are the same measurement"
    order = compare(one, many)
    if order == "smaller":
        return ("Here one thread was faster, beyond the noise: other jobs hold the cores, "
                "and torch's threads wait for each other. That is a finding about the "
                "machine, not the code: benchmark on an idle machine, and say how many "
                "threads you used")
    if order == "larger":
        return (f"{n} threads were {one.median / many.median:.1f}x as fast as one: on an idle "
                "machine the gap approaches the number of cores; other jobs shrink it")
    return inconclusive(f"one thread against {n}", one.spread, many.spread)


def prefill_stalls(steps):
    """The stalls in a simulated LLM server's step log (`llm_serving.simulate_llm(...,
    return_steps=True)`: columns start, seconds, decode_tokens, prefill_tokens): each run
    of consecutive steps that prefill and decode nothing, when every running sequence
    waits. Returns a DataFrame, one row a stall, in order: start (s), seconds, steps and
    prefill_tokens. Chapter *How to benchmark*: what a long gap between tokens is made of."""
    import pandas as pd

    if not isinstance(steps, pd.DataFrame):
        raise TypeError(f"steps must be a DataFrame (simulate_llm's step log), got "
                        f"{type(steps).__name__}")
    missing = {"start", "seconds", "decode_tokens", "prefill_tokens"} - set(steps.columns)
    if missing:
        raise ValueError(f"steps lacks the columns {sorted(missing)}")
    stall = (steps["prefill_tokens"] > 0) & (steps["decode_tokens"] == 0)
    run = (stall != stall.shift()).cumsum()[stall]
    out = steps[stall].groupby(run).agg(
        start=("start", "first"), seconds=("seconds", "sum"), steps=("seconds", "size"),
        prefill_tokens=("prefill_tokens", "sum"))
    return out.reset_index(drop=True)
