"""Findings: sentences a page prints about its own measurements, branching on the data so that the
text beside a table never contradicts it (chapters *Serving systems* and *How to
benchmark*). Each function takes the numbers the page measured and returns one sentence
(no final full stop), saying "too noisy to tell" where the data cannot decide.

A measurement on a shared machine can come out in any order; these functions state what
this run shows, not what the physics promises.
"""

from __future__ import annotations

import numpy as np

from . import validate as _v

#: Two timings whose ratio stays within this factor of 1 are not told apart.
NOISE_RATIO = 1.15


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


def cache(sizes_bytes, reread_gb_per_s, flushed_gb_per_s, *, gap=1.5) -> str:
    """What a re-read/flushed bandwidth table shows (chapter *How to benchmark*, mistake 5).
    Re-reads faster by at least `gap` somewhere: the cache served them (the largest gap
    named). Flushed reads faster than re-reads by more than noise (`NOISE_RATIO`): no
    cache does that, so those rows are named as noise. Neither: too noisy to tell."""
    size = np.asarray(_v.positive("sizes_bytes", sizes_bytes, array=True), dtype=float)
    rr = np.asarray(_v.positive("reread_gb_per_s", reread_gb_per_s, array=True), dtype=float)
    fl = np.asarray(_v.positive("flushed_gb_per_s", flushed_gb_per_s, array=True), dtype=float)
    if not (size.shape == rr.shape == fl.shape) or size.ndim != 1 or size.size == 0:
        raise ValueError(f"sizes_bytes, reread_gb_per_s and flushed_gb_per_s must be "
                         f"1-D arrays of one length, got {size.shape}, {rr.shape}, {fl.shape}")
    gap = _v.number("gap", gap, lo=1, lo_open=True, expected="a factor above 1")
    ratio = rr / fl
    mib = lambda xs: " and ".join(f"{x / 2**20:g} MiB" for x in xs)  # noqa: E731
    parts = []
    best = int(np.argmax(ratio))
    if ratio[best] >= gap:
        parts.append(f"re-reads of {mib([size[best]])} ran {ratio[best]:.1f}x as fast as "
                     "flushed reads: the cache served them")
    inverted = size[ratio < 1 / NOISE_RATIO]
    if inverted.size:
        parts.append(f"at {mib(inverted)} the flushed reads came out faster than the "
                     "re-reads, which no cache causes: "
                     + ("those rows are" if inverted.size > 1 else "that row is")
                     + " noise from other work on this machine")
    if ratio[best] < gap:
        parts.append("no re-read ran clearly faster than its flushed read: this run was too "
                     "noisy to tell (rerun on an idle machine)")
    return "On this run " + "; ".join(parts)


def mbu(fraction, *, on_gpu) -> str:
    """One line on a measured MBU (a fraction of the catalogue bandwidth; chapter *How to
    benchmark*): above 1, a bug; from 0.5, near the roof; from 0.1, well below; under 0.1,
    far below, bound by per-operation overhead. `on_gpu=False` adds that the CPU entry is
    a reference desktop, not the machine measured."""
    f = _v.non_negative("fraction", fraction)
    if not isinstance(on_gpu, (bool, np.bool_)):
        raise TypeError(f"on_gpu must be True or False, got {on_gpu!r}")
    if f > 1:
        text = (f"MBU {f:.0%} is above the ceiling: a cache served the bytes, or the "
                "catalogue entry is the wrong device")
    elif f >= 0.5:
        text = (f"MBU {f:.0%}: near the roof, where bytes bind (gpt-fast's compiled decode "
                "reached 68% on an A100)")
    elif f >= 0.1:
        text = f"MBU {f:.0%}: well below the roof; overhead and bandwidth both count"
    else:
        text = (f"MBU {f:.1%}: far below the roof; at batch 1 an eager stack is bound by "
                "the cost of each operation (Python, dispatch, launches), not by its bytes")
    if not on_gpu:
        text += ("; and the ceiling is the catalogue's reference CPU, not this machine, so "
                 "the fraction is indicative only")
    return text


def more_work(label, speedup, *, noise=NOISE_RATIO) -> str:
    """A change that adds work (a longer context) measured `speedup` times the baseline's
    speed: faster by more than `noise` cannot be the change's doing. Returns the verdict."""
    if not isinstance(label, str) or not label.strip():
        raise TypeError(f"label must be a non-empty string, got {label!r}")
    s = _v.positive("speedup", speedup)
    noise = _v.number("noise", noise, lo=1, expected="a factor of at least 1")
    if s > noise:
        return (f"{label} did more work yet ran {s:.2f}x as fast as the baseline: this run "
                "was too noisy to tell (repeat both rows)")
    if s >= 1 / noise:
        return (f"{label} ran within noise of the baseline ({s:.2f}x): at this size the "
                "extra work is small beside the rest of the step")
    return f"{label} ran {s:.2f}x as fast as the baseline: the extra work shows"


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
