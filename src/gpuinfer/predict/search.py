"""Searches over a monotone yes/no question: the largest whole number for which it holds.

Every sizing decision in the course is one: the largest batch whose step meets a time per
output token, the largest chunk budget within a step objective, the largest batch that fits
in memory under a layout. Each asks "does n still work?", the answer is yes up to some n and
no after, and a bisection finds the last yes in about log2(range) questions. Written once
here so that each decision states its question, not its loop.

Prediction layer: no torch, no measurement.
"""

from __future__ import annotations

from gpuinfer import validate as _v

#: The largest number an open-ended search (`hi=None`) will try before it stops and
#: returns what it has: 2**30, a billion sequences or tokens, far past any GPU's memory.
MAX_OPEN_ENDED = 1 << 30


def largest_meeting(ok, lo=1, hi=None) -> int:
    """The largest integer n in [`lo`, `hi`] with `ok(n)` true, for an `ok` that is true up
    to some n and false after (monotone); `lo - 1` if `ok(lo)` is already false.

    `hi=None` searches upward without a bound: it doubles n from `lo` until `ok` fails (or
    `MAX_OPEN_ENDED` is reached, which is then returned), then bisects. `ok` is called
    about 2 log2(answer) times; it is never called outside [`lo`, `hi`].

    >>> largest_meeting(lambda n: n * n <= 50, 1, 100)
    7
    >>> largest_meeting(lambda n: n <= 1000)
    1000
    >>> largest_meeting(lambda n: False, 1, 10)
    0
    """
    if not callable(ok):
        raise TypeError(f"ok must be a function of one integer, got {type(ok).__name__}")
    lo = _v.count("lo", lo, minimum=0, maximum=MAX_OPEN_ENDED)
    if hi is not None:
        hi = _v.count("hi", hi, minimum=0, maximum=MAX_OPEN_ENDED)
        if hi < lo:
            return lo - 1
    if not ok(lo):
        return lo - 1
    good = lo
    if hi is None:                   # bracket: double until a no (or the cap)
        step = max(lo, 1)
        while True:
            probe = min(good + step, MAX_OPEN_ENDED)
            if probe == good:
                return good
            if not ok(probe):
                bad = probe
                break
            good, step = probe, step * 2
    else:
        if ok(hi):
            return hi
        bad = hi
    while bad - good > 1:            # invariant: ok(good), not ok(bad)
        mid = (good + bad) // 2
        good, bad = (mid, bad) if ok(mid) else (good, mid)
    return good
