"""Service-level objectives of an LLM server: SLO attainment, a summary of a simulated
run, and goodput.

Chapter: *Serving LLMs: prefill, decode and the KV cache*; also *How to benchmark your
own traffic*. Times are seconds, rates requests/s.

Each reads the frame of one request a row that `llm_simulator.simulate_llm` or
`simulate_disaggregated` returns (or a measured run with the same columns): time to first
token (TTFT), time per output token after it (TPOT), and the longest gap between two
tokens. DistServe's goodput (Zhong et al. 2024) is the highest request rate at which a
given fraction of the requests meets both objectives.

Prediction layer: no torch, no measurement.
"""

from __future__ import annotations

import math

import numpy as np

from gpuinfer import validate as _v
from gpuinfer.predict.batching import (MAX_SEARCH_STEPS, bisect_bracket, check_frame,
                                       check_rel_tol, check_trace_length, poisson_arrivals)
from gpuinfer.predict.llm_simulator import LLM_COLUMNS


def slo_attainment(df, *, ttft_slo_s, tpot_slo_s, itl_slo=None) -> float:
    """The fraction of requests that met both SLOs: TTFT <= `ttft_slo_s` and TPOT <=
    `tpot_slo_s` (s; a one-token reply has no TPOT and meets that one). DistServe's
    "SLO attainment". With `itl_slo` (s), an inter-token objective as well: the
    request's longest gap between two tokens (`max_gap`) must not exceed it, which a
    mean TPOT lets through (a prefill that stalls a decode for 300 ms in a 500-token
    reply adds only 0.6 ms to its TPOT). Stricter than a p99 of all gaps: one stall
    fails the request."""
    cols = {"ttft", "tpot"} | ({"max_gap"} if itl_slo is not None else set())
    check_frame(df, cols, "simulate_llm")
    ttft = _v.positive("ttft_slo_s", ttft_slo_s)
    tpot = _v.positive("tpot_slo_s", tpot_slo_s)
    t = df["ttft"].to_numpy(dtype=float)
    p = df["tpot"].to_numpy(dtype=float)
    ok = (t <= ttft) & (np.isnan(p) | (p <= tpot))
    if itl_slo is not None:
        g = df["max_gap"].to_numpy(dtype=float)
        ok &= np.isnan(g) | (g <= _v.positive("itl_slo", itl_slo))
    return float(np.count_nonzero(ok) / len(df))


def summarize_llm(df, *, ttft_slo_s=None, tpot_slo_s=None, itl_slo=None) -> dict:
    """p50/p99 of TTFT, TPOT and the worst inter-token gap (s), throughput (requests/s
    and output tokens/s, over the span from the first arrival to the last finish), the
    requests preempted, and with both SLOs the attainment (`slo_attainment`; with
    `itl_slo` too, the inter-token objective on each request's `max_gap`)."""
    check_frame(df, set(LLM_COLUMNS), "simulate_llm")
    if (ttft_slo_s is None) != (tpot_slo_s is None):
        raise ValueError("give both ttft_slo and tpot_slo (s), or neither")
    if itl_slo is not None and ttft_slo_s is None:
        raise ValueError("itl_slo is checked beside ttft_slo and tpot_slo: give all three")
    span = float(df["finish"].max() - df["arrival"].min())
    if not span > 0:
        raise ValueError("the requests span no time (first arrival == last finish)")
    out = {"requests": len(df)}
    for col in ("ttft", "tpot", "max_gap"):
        x = df[col].to_numpy(dtype=float)
        x = x[~np.isnan(x)]
        p50, p99 = np.percentile(x, [50, 99]) if x.size else (math.nan, math.nan)
        out[f"{col}_p50_s"], out[f"{col}_p99_s"] = float(p50), float(p99)
    out["throughput_per_s"] = len(df) / span
    out["output_tokens_per_s"] = float(df["output_tokens"].sum()) / span
    out["preempted_fraction"] = float((df["preemptions"] > 0).mean())
    if ttft_slo_s is not None:
        out["slo_attainment"] = slo_attainment(df, ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s,
                                               itl_slo=itl_slo)
    return out


def goodput_bracket(serve, n, *, ttft_slo_s, tpot_slo_s, itl_slo=None, attainment=0.9, seed=0,
                    rel_tol=0.02, rate=None) -> tuple:
    """Goodput in DistServe's sense (Zhong et al. 2024): the highest Poisson request
    rate (requests/s) at which at least `attainment` of the requests (a fraction: 0.9
    for DistServe's 90%) meet both the TTFT and the TPOT SLO (s).

    `serve(arrivals) -> frame` runs the server on `n` arrival times (a `simulate_llm` or
    `simulate_disaggregated` with the other arguments fixed, e.g. by
    `functools.partial`). The same random gaps are rescaled at every rate. The search
    starts from `rate` (requests/s; default: a light load found from the server's lone
    latency), grows it fourfold until attainment fails, then bisects until the bracket
    is narrower than `rel_tol` of the rate. 0.0 if even a light load misses the target.
    Divide by the GPUs the server uses for DistServe's per-GPU goodput. `itl_slo` (s)
    adds an inter-token objective: each request's longest gap between tokens
    (`slo_attainment`).

    A trace starts with an empty queue, so a short one overstates goodput near
    saturation: a queue that would grow without bound has not grown far yet (chapter 9
    found 300 requests passing a rate above what its prefill GPU can serve at all).
    Check the answer against the server's capacity (the busiest GPU's share of time
    busy should stay below 1), and pass a longer trace or other seeds when it is close.

    Returns the bracket the search ends with, (lo, hi): the trace met the goal at `lo`
    and missed it at `hi`, hi / lo <= 1 + `rel_tol` ((0.0, lo) if even a light load
    misses it). The search moves on a grid: from `rate` it multiplies by 4 and then by
    square roots of the bracket, so every answer it can give is rate x 4^(j / 2^m), and
    with `rel_tol` 0.05 the grid's step is 4^(1/32), 4.4%. Two goodputs from the same
    start differ by a whole number of steps: their ratio is known only to within one
    step either way, [lo1 / hi2, hi1 / lo2]. Print them at that resolution (`goodput`
    is `lo`)."""
    serve = _v.callable_("serve", serve)
    n = check_trace_length("n", n)
    target = _v.fraction("attainment", attainment)
    ttft, tpot = _v.positive("ttft_slo_s", ttft_slo_s), _v.positive("tpot_slo_s", tpot_slo_s)
    itl = None if itl_slo is None else _v.positive("itl_slo", itl_slo)
    rel_tol = check_rel_tol(rel_tol)
    unit = poisson_arrivals(1.0, n, seed)

    def run(arrivals):
        df = serve(arrivals)
        check_frame(df, {"ttft", "tpot", "latency"}, "simulate_llm")
        return df

    def ok(r):
        return slo_attainment(run(unit / r), ttft_slo_s=ttft, tpot_slo_s=tpot,
                              itl_slo=itl) >= target

    if rate is None:
        # A light load: requests far enough apart that each runs alone.
        lone = float(run(unit * 1e6)["latency"].max())
        lo = 0.01 / lone
    else:
        lo = _v.positive("rate", rate)
    if not ok(lo):
        if rate is None:
            return 0.0, lo
        for _ in range(MAX_SEARCH_STEPS):  # a given rate too high: come down
            lo /= 4
            if ok(lo):
                break
        else:
            return 0.0, lo
    hi = lo * 4
    for _ in range(MAX_SEARCH_STEPS):
        if not ok(hi):
            break
        lo, hi = hi, hi * 4
    else:
        raise ValueError("attainment never failed: the server kept up at every rate "
                         "tried; check that serve uses the arrivals it is given")
    return bisect_bracket(ok, lo, hi, rel_tol)



def goodput(serve, n, *, ttft_slo_s, tpot_slo_s, itl_slo=None, attainment=0.9, seed=0,
            rel_tol=0.02, rate=None) -> float:
    """Goodput in DistServe's sense (Zhong et al. 2024): the highest Poisson request
    rate (requests/s) at which at least `attainment` of the requests meet both the TTFT
    and the TPOT SLO (s), found to within `rel_tol`: the lower end of
    `goodput_bracket` (which explains the arguments, and the grid the answer lies on).
    0.0 if even a light load misses the target."""
    return goodput_bracket(serve, n, ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s, itl_slo=itl_slo,
                           attainment=attainment, seed=seed, rel_tol=rel_tol, rate=rate)[0]

