"""Batching under load: a discrete-event simulator of a GPU server and its batcher.

Chapters: *Batching, latency and SLOs*, *Serving systems and sharing a GPU*; lab
*Batching under load*. Times are seconds, rates requests/s.

The server is one GPU that runs one batch at a time (non-preemptive). Requests queue
per model; the policy is Triton's dynamic batcher: when the GPU is free, a model's batch
starts as soon as either `max_batch` requests wait (or a preferred batch size can be
formed) or its oldest request has waited `max_queue_delay`; the batch takes every
waiting request up to `max_batch`. `max_queue_delay=0` starts with whatever is waiting
(greedy batching); `max_batch=1` is a plain single-server queue (M/D/1 for Poisson
arrivals and a fixed service time). Several models sharing one GPU queue separately and
take turns: the GPU serves the batch that can start first (ties: the oldest request).

Token-level (continuous) batching of text generation is simulated step by step in
`simulate_generation`, beside static batching that runs each batch to its longest
sequence.
"""

from __future__ import annotations

import bisect
import math
from typing import Callable, Mapping, Sequence

import numpy as np

from . import llm as _llm

COLUMNS = ["arrival", "start", "finish", "latency", "batch_size"]


# --- arrivals ---------------------------------------------------------------------------

def poisson_arrivals(rate, n, seed=0) -> np.ndarray:
    """`n` arrival times (s) of a Poisson process of `rate` requests/s, starting at 0:
    cumulative sums of exponential gaps of mean 1/rate. Same seed, same times."""
    rate = float(rate)
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"rate must be a positive number of requests/s, got {rate!r}")
    if int(n) != n or n < 1:
        raise ValueError(f"n must be a positive whole number of requests, got {n!r}")
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=int(n))
    return np.cumsum(gaps) - gaps[0]


def _arrivals(arrivals, name="arrivals") -> np.ndarray:
    a = np.asarray(arrivals, dtype=float).ravel()
    if a.size == 0:
        raise ValueError(f"{name} is empty: give at least one arrival time")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite times in seconds")
    if np.any(np.diff(a) < 0):
        raise ValueError(f"{name} must be sorted (non-decreasing times in seconds)")
    return a


# --- service times ----------------------------------------------------------------------

def service_table(batches, seconds) -> Callable:
    """A service time (s) from a measured table: `seconds[i]` for a batch of
    `batches[i]`; linear in between; a batch outside the table raises ValueError."""
    b = np.asarray(batches, dtype=float).ravel()
    s = np.asarray(seconds, dtype=float).ravel()
    if b.size == 0 or b.size != s.size:
        raise ValueError(f"batches and seconds must be non-empty and the same length, got "
                         f"{b.size} and {s.size}")
    if not (np.all(np.isfinite(s)) and np.all(s > 0)):
        raise ValueError(f"seconds must be positive and finite, got {seconds!r}")
    order = np.argsort(b)
    b, s = b[order], s[order]
    if np.any(np.diff(b) == 0) or b[0] < 1:
        raise ValueError(f"batches must be distinct sizes >= 1, got {batches!r}")

    def service(batch):
        x = np.asarray(batch, dtype=float)
        if np.any(x < b[0]) or np.any(x > b[-1]):
            raise ValueError(f"batch {batch!r} is outside the measured table "
                             f"({b[0]:g}..{b[-1]:g}); measure it or lower max_batch")
        out = np.interp(x, b, s)
        return float(out) if out.ndim == 0 else out

    service.table = dict(zip(b.tolist(), s.tolist()))
    return service


def roofline_service_time(model, accelerator, context=0, dtype="fp16", *,
                          overhead_s=0.0) -> Callable:
    """Service time (s) of one forward step of `model` for a batch, from the roofline
    (`llm.decode_step_time`: weights read once per batch, FLOPs per sequence), plus a
    fixed `overhead_s` per batch (launches, scheduling)."""
    if not (math.isfinite(overhead_s) and overhead_s >= 0):
        raise ValueError(f"overhead_s must be >= 0 seconds, got {overhead_s!r}")

    def service(batch):
        return _llm.decode_step_time(model, accelerator, batch, context, dtype) + overhead_s

    return service


def _service_array(service_time, max_batch) -> np.ndarray:
    """Seconds for batches 0..max_batch (index = batch size; index 0 unused)."""
    sizes = np.arange(1, max_batch + 1)
    if isinstance(service_time, Mapping):
        table = {int(k): v for k, v in service_time.items()}
        service_time = service_table(list(table), list(table.values()))
    elif hasattr(service_time, "to_dict") and not callable(service_time):
        return _service_array(service_time.to_dict(), max_batch)  # a pandas Series
    if callable(service_time):
        try:
            s = np.asarray(service_time(sizes), dtype=float)
            if s.shape != sizes.shape:
                raise TypeError
        except (TypeError, AttributeError):
            s = np.array([float(service_time(int(b))) for b in sizes])
    elif isinstance(service_time, (int, float, np.number)) and not isinstance(service_time, bool):
        s = np.full(max_batch, float(service_time))
    else:
        raise ValueError("service_time must be seconds (a number), a callable batch -> "
                         f"seconds, or a table {{batch: seconds}}; got {type(service_time).__name__}")
    if not (np.all(np.isfinite(s)) and np.all(s > 0)):
        raise ValueError(f"service times must be positive seconds, got {s[:8]}...")
    return np.concatenate([[np.nan], s])


def _policy(max_batch, max_queue_delay, preferred_batch_sizes):
    if int(max_batch) != max_batch or max_batch < 1:
        raise ValueError(f"max_batch must be a whole number >= 1, got {max_batch!r}")
    max_batch = int(max_batch)
    d = float(max_queue_delay)
    if not d >= 0:  # math.inf allowed: static batching, always wait for max_batch
        raise ValueError(f"max_queue_delay must be >= 0 seconds, got {max_queue_delay!r}")
    pref = sorted({int(p) for p in (preferred_batch_sizes or ())} | {max_batch})
    if pref[0] < 1 or pref[-1] > max_batch:
        raise ValueError(f"preferred_batch_sizes must lie in 1..max_batch={max_batch}, "
                         f"got {preferred_batch_sizes!r}")
    return max_batch, d, pref


# --- the simulator ----------------------------------------------------------------------

class _Queue:
    """One model's queue and batcher: when could its next batch start, and how big."""

    def __init__(self, arrivals, service, max_batch, delay, preferred):
        self.a = arrivals
        self.alist = arrivals.tolist()
        self.n = len(arrivals)
        self.s = service.tolist()
        self.max_batch, self.delay, self.pref = max_batch, delay, preferred
        self.head = 0  # the oldest request not yet served
        self.start = np.empty(self.n)
        self.finish = np.empty(self.n)
        self.size = np.empty(self.n, dtype=np.int64)
        self.batch_id = np.empty(self.n, dtype=np.int64)

    def _waiting(self, t):
        """Requests waiting at time t (arrived at or before t), capped at max_batch."""
        return min(bisect.bisect_right(self.alist, t, self.head) - self.head, self.max_batch)

    def next_start(self, free):
        """(start time, batch size) of the next batch if the GPU is free from `free`."""
        i = self.head
        t0 = max(free, self.alist[i])
        k = self._waiting(t0)
        if k >= self.pref[0]:  # a preferred size (or max_batch) is ready: go now
            return t0, self._preferred(k)
        # Wait for the smallest preferred size or for the oldest to time out.
        deadline = self.alist[i] + self.delay
        j = i + self.pref[0] - 1
        if j < self.n and self.alist[j] <= deadline:
            t = max(t0, self.alist[j])
            return t, self._preferred(self._waiting(t))
        if deadline == math.inf:  # static batching: the trace ends, flush what is left
            deadline = self.alist[-1]
        t = max(t0, deadline)
        return t, self._waiting(t)

    def _preferred(self, k):
        return self.pref[bisect.bisect_right(self.pref, k) - 1]

    def run(self, t, k, batch_id):
        i, j = self.head, self.head + k
        end = t + self.s[k]
        self.start[i:j], self.finish[i:j] = t, end
        self.size[i:j], self.batch_id[i:j] = k, batch_id
        self.head = j
        return end


def _frame(q, model=None):
    import pandas as pd

    df = pd.DataFrame({"arrival": q.a, "start": q.start, "finish": q.finish,
                       "latency": q.finish - q.a, "batch_size": q.size,
                       "batch_id": q.batch_id})
    if model is not None:
        df.insert(0, "model", model)
    return df


def simulate(arrivals, service_time, max_batch, max_queue_delay=0.0, *,
             preferred_batch_sizes=None):
    """Simulate Triton's dynamic batcher on one GPU. Returns a DataFrame, one row per
    request: `arrival`, `start`, `finish`, `latency` (s), `batch_size`, `batch_id`.

    `service_time`: seconds (a number), a callable batch -> seconds, or a table
    {batch: seconds} (interpolated). `max_queue_delay` (s) is Triton's
    `max_queue_delay_microseconds` / 1e6; `math.inf` is static batching (wait for a
    full batch; the last, partial one goes when the trace ends). `preferred_batch_sizes`: batch sizes the
    batcher starts at without waiting for `max_batch` (Triton's `preferred_batch_size`).
    """
    a = _arrivals(arrivals)
    max_batch, delay, pref = _policy(max_batch, max_queue_delay, preferred_batch_sizes)
    q = _Queue(a, _service_array(service_time, max_batch), max_batch, delay, pref)
    free, b = -math.inf, 0
    while q.head < q.n:
        t, k = q.next_start(free)
        free = q.run(t, k, b)
        b += 1
    return _frame(q)


def simulate_shared(models: Mapping[str, dict]):
    """Several models, each with its own queue and dynamic batcher, sharing one GPU that
    runs one batch at a time. `models` maps a name to the keyword arguments of
    `simulate` (`arrivals`, `service_time`, `max_batch`, optional `max_queue_delay`,
    `preferred_batch_sizes`). Returns one DataFrame with a `model` column, by arrival."""
    if not models:
        raise ValueError("models is empty: give at least one {name: {arrivals, ...}}")
    queues = {}
    for name, kw in models.items():
        unknown = set(kw) - {"arrivals", "service_time", "max_batch", "max_queue_delay",
                             "preferred_batch_sizes"}
        if unknown or not {"arrivals", "service_time", "max_batch"} <= set(kw):
            raise ValueError(f"model {name!r} needs arrivals, service_time and max_batch "
                             f"(optional max_queue_delay, preferred_batch_sizes); got "
                             f"{sorted(kw)}")
        mb, delay, pref = _policy(kw["max_batch"], kw.get("max_queue_delay", 0.0),
                                  kw.get("preferred_batch_sizes"))
        queues[name] = _Queue(_arrivals(kw["arrivals"], f"arrivals of {name!r}"),
                              _service_array(kw["service_time"], mb), mb, delay, pref)
    free, b = -math.inf, 0
    active = [q for q in queues.values() if q.n]
    while active:
        best = None
        for q in active:
            t, k = q.next_start(free)
            key = (t, q.alist[q.head])
            if best is None or key < best[0]:
                best = (key, q, t, k)
        _, q, t, k = best
        free = q.run(t, k, b)
        b += 1
        if q.head >= q.n:
            active.remove(q)
    import pandas as pd

    df = pd.concat([_frame(q, name) for name, q in queues.items()], ignore_index=True)
    return df.sort_values(["arrival", "model"], kind="stable").reset_index(drop=True)


# --- summaries --------------------------------------------------------------------------

def summarize(df, slo=None) -> dict:
    """Latency percentiles (s), throughput (requests/s), mean batch size, the GPU's busy
    fraction, and, with an `slo` (s), goodput: requests/s that finished within it.
    Rates are over the span from the first arrival to the last finish."""
    missing = set(COLUMNS) - set(df.columns)
    if missing:
        raise KeyError(f"df lacks the columns {sorted(missing)}; pass what simulate returns")
    if len(df) == 0:
        raise ValueError("df has no requests")
    span = float(df["finish"].max() - df["arrival"].min())
    if not span > 0:
        raise ValueError("the requests span no time (first arrival == last finish)")
    lat = df["latency"].to_numpy()
    p50, p95, p99 = np.percentile(lat, [50, 95, 99])
    out = {"requests": len(df), "p50_s": p50, "p95_s": p95, "p99_s": p99,
           "mean_latency_s": float(lat.mean()),
           "mean_wait_s": float((df["start"] - df["arrival"]).mean()),
           "throughput_per_s": len(df) / span,
           "mean_batch": float(df["batch_size"].mean())}
    if df.attrs.get("kind") != "generation":  # one batch = one busy interval
        batches = (df.drop_duplicates("batch_id") if "batch_id" in df
                   else df.drop_duplicates(["start", "finish"]))
        busy = float((batches["finish"] - batches["start"]).sum())
        out.update({"mean_batch_per_batch": float(batches["batch_size"].mean()),
                    "busy_fraction": busy / span})
    if slo is not None:
        if not (math.isfinite(slo) and slo > 0):
            raise ValueError(f"slo must be positive seconds, got {slo!r}")
        met = int(np.count_nonzero(lat <= slo))
        out.update({"slo_s": float(slo), "slo_met_fraction": met / len(df),
                    "goodput_per_s": met / span})
    return {k: (float(v) if isinstance(v, (np.floating, float)) else v) for k, v in out.items()}


def md1_mean_wait(rate, service_s) -> float:
    """Mean time (s) a request waits before service in an M/D/1 queue (Poisson arrivals
    at `rate`/s, one server, fixed `service_s`), Pollaczek-Khinchine:
    W_q = rho / (2 mu (1 - rho)), rho = rate x service_s, mu = 1 / service_s.
    math.inf when rho >= 1 (the queue grows without bound)."""
    rate, service_s = float(rate), float(service_s)
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"rate must be positive requests/s, got {rate!r}")
    if not (math.isfinite(service_s) and service_s > 0):
        raise ValueError(f"service_s must be positive seconds, got {service_s!r}")
    rho = rate * service_s
    if rho >= 1:
        return math.inf
    return rho / (2 * (1 / service_s) * (1 - rho))


def saturation_throughput(service_time, max_batch) -> float:
    """Requests/s the GPU serves when every batch is full: max_batch / service(max_batch)."""
    s = _service_array(service_time, int(max_batch))
    return float(max_batch / s[int(max_batch)])


def _latencies(arrivals, service, max_batch, delay, pref) -> np.ndarray:
    """Per-request latency (s) of `simulate`, without building a DataFrame."""
    q = _Queue(arrivals, service, max_batch, delay, pref)
    free, b = -math.inf, 0
    while q.head < q.n:
        t, k = q.next_start(free)
        free = q.run(t, k, b)
        b += 1
    return q.finish - q.a


def capacity(service_time, max_batch, max_queue_delay=0.0, *, slo, quantile=99.0,
             n=4000, seed=0, preferred_batch_sizes=None, rel_tol=0.01) -> float:
    """The highest Poisson arrival rate (requests/s) at which the `quantile` latency
    stays within `slo` (s) under this policy: a bisection over the rate below the
    saturation throughput (where the queue stops being stable), the same random gaps
    rescaled at every rate. 0.0 if even a lone request misses the SLO.

    The trace has at least `n` requests and 200 full batches. Close to saturation a
    finite trace has not reached steady state and understates the queue, so treat a
    capacity within a few percent of saturation as an upper bound.
    """
    if not (math.isfinite(slo) and slo > 0):
        raise ValueError(f"slo must be positive seconds, got {slo!r}")
    if not 0 < quantile < 100:
        raise ValueError(f"quantile is a percentile in (0, 100), got {quantile!r}")
    max_batch, delay, pref = _policy(max_batch, max_queue_delay, preferred_batch_sizes)
    service = _service_array(service_time, max_batch)
    unit = poisson_arrivals(1.0, max(int(n), 200 * max_batch), seed)

    def ok(rate):
        lat = _latencies(unit / rate, service, max_batch, delay, pref)
        return np.percentile(lat, quantile) <= slo

    hi = max_batch / service[max_batch]
    lo = hi * 1e-3
    if not ok(lo):
        return 0.0
    while hi - lo > rel_tol * lo:
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def sweep(service_time, max_batches: Sequence[int], max_queue_delays: Sequence[float], *,
          slo, quantile=99.0, n=4000, seed=0):
    """Every (max_batch, max_queue_delay) policy with its capacity under the SLO
    (requests/s, from `capacity`), its saturation throughput and the ratio of the
    two; best first (ties: the shorter delay, then the smaller batch)."""
    import pandas as pd

    rows = [{"max_batch": int(b), "max_queue_delay_s": float(d),
             "capacity_per_s": capacity(service_time, b, d, slo=slo, quantile=quantile,
                                        n=n, seed=seed),
             "saturation_per_s": saturation_throughput(service_time, b)}
            for b in max_batches for d in max_queue_delays]
    if not rows:
        raise ValueError("give at least one max_batch and one max_queue_delay")
    df = pd.DataFrame(rows)
    df["capacity_fraction_of_saturation"] = df["capacity_per_s"] / df["saturation_per_s"]
    return df.sort_values(["capacity_per_s", "max_queue_delay_s", "max_batch"],
                          ascending=[False, True, True], kind="stable").reset_index(drop=True)


def best_policy(table, within=0.02):
    """The row of a `sweep` table to deploy: among policies whose capacity is within
    `within` (a fraction) of the best, the smallest `max_batch` (less memory held for
    batch slots), then the shortest queue delay. Differences smaller than the
    simulation's noise (about a percent) should not decide."""
    if not 0 <= within < 1:
        raise ValueError(f"within is a fraction in [0, 1), got {within!r}")
    missing = {"max_batch", "max_queue_delay_s", "capacity_per_s"} - set(table.columns)
    if missing:
        raise KeyError(f"table lacks the columns {sorted(missing)}; pass what sweep returns")
    top = table["capacity_per_s"].max()
    if not top > 0:
        raise ValueError("no policy meets the SLO at any rate: loosen the SLO or batch less")
    ok = table[table["capacity_per_s"] >= (1 - within) * top]
    return ok.sort_values(["max_batch", "max_queue_delay_s"], kind="stable").iloc[0]


def load_curve(arrival_rates, service_time, max_batch, max_queue_delay=0.0, *, n=4000,
               seed=0, slo=None):
    """`summarize` at each arrival rate (requests/s), one row per rate: the
    latency-throughput curve of one policy."""
    import pandas as pd

    unit = poisson_arrivals(1.0, n, seed)
    rows = []
    for rate in np.atleast_1d(np.asarray(arrival_rates, dtype=float)):
        if not (math.isfinite(rate) and rate > 0):
            raise ValueError(f"arrival rates must be positive requests/s, got {rate!r}")
        s = summarize(simulate(unit / rate, service_time, max_batch, max_queue_delay), slo)
        rows.append({"arrival_rate_per_s": float(rate), **s})
    return pd.DataFrame(rows)


# --- token-level generation: static vs continuous batching -----------------------------

def simulate_generation(arrivals, output_tokens, step_time, max_batch, policy="continuous"):
    """Text generation, one decode step at a time, for requests that each need
    `output_tokens[i]` steps (prefill counted as one step). Returns a DataFrame per
    request: `arrival`, `start`, `finish`, `latency` (s), `output_tokens`, `batch_size`
    (sequences in the step that started it), `batch_id` (the step that started it).

    `policy="static"`: a batch of up to `max_batch` waiting requests runs until its
    longest sequence finishes and returns together; finished sequences keep their slot
    (padding) and nobody joins.
    `policy="continuous"`: after every step finished sequences leave and waiting ones
    join (token-level, "in-flight" batching). `step_time`: seconds per step for a batch
    of b sequences (number, callable or table, as in `simulate`).
    """
    import pandas as pd

    a = _arrivals(arrivals)
    tokens = np.asarray(output_tokens).ravel()
    if tokens.shape != a.shape:
        raise ValueError(f"output_tokens needs one count per arrival: {tokens.size} vs {a.size}")
    if np.any(tokens < 1) or np.any(tokens != np.round(tokens)):
        raise ValueError("output_tokens must be whole numbers >= 1")
    if policy not in ("static", "continuous"):
        raise ValueError(f"policy must be 'static' or 'continuous', got {policy!r}")
    max_batch, _, _ = _policy(max_batch, 0.0, None)
    s = _service_array(step_time, max_batch).tolist()
    tokens = tokens.astype(np.int64)
    n = a.size
    alist = a.tolist()
    start, finish = np.full(n, np.nan), np.full(n, np.nan)
    size, sid = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    t, head, step = 0.0, 0, 0
    slots = np.empty(0, dtype=np.int64)  # requests in the running batch
    left = np.empty(0, dtype=np.int64)   # steps each still needs
    while head < n or slots.size:
        if slots.size == 0:
            t = max(t, alist[head])
        if policy == "continuous" or slots.size == 0:
            k = min(bisect.bisect_right(alist, t, head) - head, max_batch - slots.size)
            if k > 0:
                new = np.arange(head, head + k)
                head += k
                slots = np.concatenate([slots, new])
                left = np.concatenate([left, tokens[new]])
                start[new], sid[new] = t, step
                size[new] = slots.size
        if policy == "static":
            # The whole batch runs for its longest sequence, padded slots included.
            steps = int(left.max())
            t += steps * s[slots.size]
            finish[slots] = t  # the batch returns together, as one padded generate()
            step += steps
            slots, left = slots[:0], left[:0]
            continue
        # Continuous: run steps until someone finishes or a waiting request can join.
        dt = s[slots.size]
        steps = int(left.min())
        if head < n and slots.size < max_batch:
            steps = max(1, min(steps, math.ceil((alist[head] - t) / dt)))
        t += steps * dt
        step += steps
        left = left - steps
        done = left == 0
        finish[slots[done]] = t
        slots, left = slots[~done], left[~done]
    df = pd.DataFrame({"arrival": a, "start": start, "finish": finish,
                       "latency": finish - a, "output_tokens": tokens,
                       "batch_size": size, "batch_id": sid})
    df.attrs["kind"] = "generation"
    return df
