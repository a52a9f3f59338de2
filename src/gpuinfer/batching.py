"""Batching under load: discrete-event simulators of a GPU server.

Chapters: *Batching, latency and SLOs*, *Serving LLMs: prefill, decode and the KV cache*,
*Serving systems and sharing a GPU*, *Benchmarking*; lab *Batching under load*. Times
are seconds, rates requests/s, memory bytes.

Two servers are simulated here.

**Request-level batching** (`simulate`, `simulate_shared`, `simulate_closed_loop`,
`capacity`). A request is one forward pass (an embedding, a classification, one step of
a model); the GPU runs one batch at a time (non-preemptive). Requests queue per model;
the policy is Triton's dynamic batcher: when the GPU is free, a model's batch starts as
soon as either `max_batch` requests wait (or a preferred batch size can be formed) or its
oldest request has waited `max_queue_delay`; the batch takes every waiting request up to
`max_batch`. `max_queue_delay=0` starts with whatever is waiting (greedy batching);
`max_batch=1` is a plain single-server queue (M/D/1 for Poisson arrivals and a fixed
service time). Several models sharing one GPU queue separately and take turns: the GPU
serves the batch that can start first (ties: the oldest request). One event loop
(`_serve`) runs all of them; a closed loop adds each client's next request when its
previous one finishes.

**Text generation** (`simulate_generation`, `simulate_llm`, `simulate_disaggregated`).
`simulate_generation` is the simple model: a request is a number of equal decode steps.
`simulate_llm` is a continuous-batching LLM server: prefill and decode in the same
steps, each step timed by the per-operation roofline of its own mix of tokens (the
operations table of `llm.forward_step_breakdown`, the sum `llm.step_timer` computes,
evaluated fast by `_StepCost`), admission bounded by a paged KV cache, preemption by
recomputation when the cache runs out (vLLM's default).
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from typing import Callable, Mapping, Sequence

import numpy as np

from . import dtypes as _dtypes
from . import hardware as _hardware
from . import llm as _llm
from . import roofline as _roofline
from . import validate as _v

COLUMNS = ["arrival", "start", "finish", "latency", "batch_size"]

#: Columns of `simulate_llm`'s result, one row per request.
LLM_COLUMNS = ["arrival", "prompt_tokens", "output_tokens", "start", "first_token",
               "finish", "ttft", "tpot", "max_gap", "latency", "preemptions"]

#: Largest trace the simulators accept: more requests would take minutes and gigabytes.
MAX_REQUESTS = 10_000_000
#: Largest batch limit accepted (no GPU runs a million sequences in one step).
MAX_BATCH = 1 << 20
#: Largest prompt or output length accepted, in tokens.
MAX_TOKENS = 1 << 24
#: vLLM's default KV-cache block size, in tokens (`--block-size`, CacheConfig
#: DEFAULT_BLOCK_SIZE = 16: https://docs.vllm.ai/en/stable/api/vllm/config/cache/).
DEFAULT_BLOCK_SIZE = 16
#: Shortest run of same-shaped steps `simulate_llm` times at once rather than one by one.
_FAST_FORWARD_MIN = 3
#: Iterations after which a rate search stops (each halves the bracket at least).
_MAX_SEARCH_STEPS = 200


# --- arguments --------------------------------------------------------------------------

def _seed(seed) -> int:
    return _v.count("seed", seed, minimum=0, maximum=2**63 - 1)


def _n(name, n) -> int:
    return _v.count(name, n, maximum=MAX_REQUESTS,
                    why_maximum="a trace this long would take minutes to simulate")


def _arrivals(arrivals, name="arrivals") -> np.ndarray:
    """Arrival times (s) as a sorted 1-D float array."""
    a = _v.number(name, arrivals, array=True,
                  expected="finite arrival times in seconds (an array)")
    if a.ndim > 1:
        raise ValueError(f"{name} must be a 1-D array of times, got shape {a.shape}")
    a = np.atleast_1d(a)
    if a.size > MAX_REQUESTS:
        raise ValueError(f"{name} holds {a.size:,} requests; at most {MAX_REQUESTS:,}")
    if np.any(np.diff(a) < 0):
        raise ValueError(f"{name} must be sorted (non-decreasing times in seconds)")
    return a


def _per_request(name, values, n) -> np.ndarray:
    """A whole number >= 1 per request (an array of n, or one number for all)."""
    arr = _v.positive(name, values, integer=True, array=True)
    if arr.ndim > 1:
        raise ValueError(f"{name} must be a 1-D array, got shape {arr.shape}")
    if arr.ndim == 0:
        arr = np.full(n, float(arr))
    if arr.size != n:
        raise ValueError(f"{name} needs one count per arrival: {arr.size} counts for "
                         f"{n} arrivals")
    if np.any(arr > MAX_TOKENS):
        raise ValueError(f"{name} must be <= {MAX_TOKENS:,} tokens, got {arr.max():,.0f}")
    return arr.astype(np.int64)


def _policy(max_batch, max_queue_delay, preferred_batch_sizes):
    max_batch = _v.count("max_batch", max_batch, maximum=MAX_BATCH)
    # math.inf is allowed: static batching, always wait for max_batch.
    d = _v.number("max_queue_delay", max_queue_delay, lo=0, allow_inf=True,
                  expected="a number of seconds >= 0 (math.inf: wait for a full batch)")
    pref = set()
    if preferred_batch_sizes is not None:
        if isinstance(preferred_batch_sizes, (str, bytes)) or not hasattr(
                preferred_batch_sizes, "__iter__"):
            raise TypeError(f"preferred_batch_sizes must be a list of batch sizes, got "
                            f"{preferred_batch_sizes!r}")
        for p in preferred_batch_sizes:
            p = _v.count("each of preferred_batch_sizes", p, maximum=MAX_BATCH)
            if p > max_batch:
                raise ValueError(f"preferred_batch_sizes must lie in 1..max_batch="
                                 f"{max_batch}, got {list(preferred_batch_sizes)!r}")
            pref.add(p)
    return max_batch, d, sorted(pref | {max_batch})


# --- arrivals ---------------------------------------------------------------------------

def poisson_arrivals(rate, n, seed=0) -> np.ndarray:
    """`n` arrival times (s) of a Poisson process of `rate` requests/s, starting at 0:
    cumulative sums of exponential gaps of mean 1/rate. Same seed, same times."""
    rate = _v.positive("rate", rate)
    n = _n("n", n)
    gaps = np.random.default_rng(_seed(seed)).exponential(1.0 / rate, size=n)
    return np.cumsum(gaps) - gaps[0]


# --- service times ----------------------------------------------------------------------

def service_table(batches, seconds) -> Callable:
    """A service time (s) from a measured table: `seconds[i]` for a batch of
    `batches[i]`; linear in between; a batch outside the table raises ValueError."""
    b = np.atleast_1d(_v.positive("batches", batches, integer=True, array=True)).ravel()
    s = np.atleast_1d(_v.positive("seconds", seconds, array=True)).ravel()
    if b.size != s.size:
        raise ValueError(f"batches and seconds must have the same length, got {b.size} "
                         f"batch sizes and {s.size} times")
    order = np.argsort(b)
    b, s = b[order], s[order]
    if np.any(np.diff(b) == 0):
        raise ValueError(f"batches must be distinct sizes, got {batches!r}")

    def service(batch):
        x = _v.positive("batch", batch, array=True)
        if np.any(x < b[0]) or np.any(x > b[-1]):
            raise ValueError(f"batch {batch!r} is outside the measured table "
                             f"({b[0]:g}..{b[-1]:g}); measure it or lower max_batch")
        return _v.scalar_or_array(np.interp(x, b, s))

    service.table = dict(zip(b.tolist(), s.tolist()))
    return service


def roofline_service_time(model, accelerator, context=0, dtype="fp16", *,
                          tokens_per_request=1, lm_head=True, overhead_s=0.0) -> Callable:
    """Service time (s) of a batch of requests, each one forward pass of `model`, from
    the per-operation roofline (`llm.step_timer`: weights read once per batch, FLOPs and
    activations per token, attention per sequence), plus a fixed `overhead_s` per batch
    (launches, scheduling).

    A request brings `tokens_per_request` new tokens on top of `context` cached ones:
    the default (1 token, 512 cached, LM head) is one decode step of one sequence; an
    embedding request is a forward pass over its text (`tokens_per_request` = its
    length, `context=0`, `lm_head=False`: pooled hidden states, no logits). Returns a
    function batch -> seconds (vectorised over batch). The model, device and format
    are checked here, not at the first call."""
    m = _llm.get(model)
    acc = _hardware.get(accelerator)
    _dtypes.formats(dtype)  # an unknown format fails now
    c = _v.count("context", context, minimum=0, maximum=MAX_TOKENS)
    q = _v.count("tokens_per_request", tokens_per_request, maximum=MAX_TOKENS)
    if not isinstance(lm_head, (bool, np.bool_)):
        raise TypeError(f"lm_head must be True or False, got {lm_head!r}")
    overhead = _v.non_negative("overhead_s", overhead_s)
    timer = _llm.step_timer(m, acc, dtype)
    cache: dict[int, float] = {}

    def one(b):
        if b not in cache:
            cache[b] = timer(np.full(b, q), np.full(b, c), np.full(b, float(lm_head)))
        return cache[b] + overhead

    def service(batch):
        b = _v.positive("batch", batch, integer=True, array=True)
        if np.any(b > MAX_BATCH):
            raise ValueError(f"batch must be <= {MAX_BATCH:,}, got {b.max():,.0f}")
        if q == 1 and lm_head:  # a decode step: the vectorised form of the same table
            return _v.scalar_or_array(
                np.asarray(_llm.decode_step_time(m, acc, b, c, dtype)) + overhead)
        out = np.array([one(int(x)) for x in b.ravel()]).reshape(b.shape)
        return _v.scalar_or_array(out)

    if not math.isfinite(one(1)):
        raise ValueError(f"{acc.name} has no {dtype} peak in the catalogue: no roofline "
                         f"time for {m.name} in that format")
    return service


def _service_array(service_time, max_batch) -> np.ndarray:
    """Seconds for batches 0..max_batch (index = batch size; index 0 unused)."""
    sizes = np.arange(1, max_batch + 1)
    if isinstance(service_time, Mapping):
        table = dict(service_time)
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
    elif _v.is_number(service_time):
        s = np.full(max_batch, _v.positive("service_time", service_time))
    else:
        raise TypeError("service_time must be seconds (a number), a callable batch -> "
                        f"seconds, or a table {{batch: seconds}}; got "
                        f"{type(service_time).__name__}")
    bad = ~(np.isfinite(s) & (s > 0))
    if np.any(bad):
        first = int(sizes[bad][0])
        raise ValueError(f"service times must be positive seconds; service_time({first}) "
                         f"gave {s[bad][0]!r}")
    return np.concatenate([[np.nan], s])


# --- the request-level batcher: one event loop ------------------------------------------

class _Batcher:
    """One model's queue and batcher: when could its next batch start, and how big.
    Arrivals can be added while the simulation runs (a closed loop's next request)."""

    def __init__(self, arrivals, service, max_batch, delay, preferred, tags=None):
        self.alist = list(arrivals)
        self.tags = None if tags is None else list(tags)
        self.s = service.tolist()
        self.max_batch, self.delay, self.pref = max_batch, delay, preferred
        self.head = 0  # the oldest request not yet served
        self.start, self.finish, self.size, self.batch_id = [], [], [], []

    def pending(self):
        return self.head < len(self.alist)

    def add(self, t, tag=None):
        """A request arriving at `t`, no earlier than any request already served."""
        i = bisect.bisect_right(self.alist, t, self.head)
        self.alist.insert(i, t)
        if self.tags is not None:
            self.tags.insert(i, tag)

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
        if j < len(self.alist) and self.alist[j] <= deadline:
            t = max(t0, self.alist[j])
            return t, self._preferred(self._waiting(t))
        if deadline == math.inf:  # static batching: the trace ends, flush what is left
            deadline = self.alist[-1]
        t = max(t0, deadline)
        return t, self._waiting(t)

    def _preferred(self, k):
        return self.pref[bisect.bisect_right(self.pref, k) - 1]

    def run(self, t, k, batch_id):
        end = t + self.s[k]
        self.start += [t] * k
        self.finish += [end] * k
        self.size += [k] * k
        self.batch_id += [batch_id] * k
        self.head += k
        return end

    def frame(self, model=None):
        import pandas as pd

        a = np.asarray(self.alist, dtype=float)
        finish = np.asarray(self.finish, dtype=float)
        df = pd.DataFrame({"arrival": a, "start": np.asarray(self.start, dtype=float),
                           "finish": finish, "latency": finish - a,
                           "batch_size": np.asarray(self.size, dtype=np.int64),
                           "batch_id": np.asarray(self.batch_id, dtype=np.int64)})
        if self.tags is not None:
            df["client"] = np.asarray(self.tags, dtype=np.int64)
        if model is not None:
            df.insert(0, "model", model)
        return df


def _serve(batchers, after=None):
    """The event loop: while any queue holds a request, run the batch that can start
    first (ties: the oldest request), one at a time. `after(batcher, first, k, end)`
    is called after each batch of k requests (from index `first`) that ends at `end`:
    a closed loop adds its clients' next requests there."""
    free, b = -math.inf, 0
    live = [q for q in batchers if q.pending()]
    while live:
        best = None
        for q in live:
            t, k = q.next_start(free)
            key = (t, q.alist[q.head])
            if best is None or key < best[0]:
                best = (key, q, t, k)
        _, q, t, k = best
        first = q.head
        free = q.run(t, k, b)
        b += 1
        if after is not None:
            after(q, first, k, free)
        live = [q for q in batchers if q.pending()]


def simulate(arrivals, service_time, max_batch, max_queue_delay=0.0, *,
             preferred_batch_sizes=None):
    """Simulate Triton's dynamic batcher on one GPU. Returns a DataFrame, one row per
    request: `arrival`, `start`, `finish`, `latency` (s), `batch_size`, `batch_id`.

    `service_time`: seconds (a number), a callable batch -> seconds, or a table
    {batch: seconds} (interpolated). `max_queue_delay` (s) is Triton's
    `max_queue_delay_microseconds` / 1e6; `math.inf` is static batching (wait for a
    full batch; the last, partial one goes when the trace ends).
    `preferred_batch_sizes`: batch sizes the batcher starts at without waiting for
    `max_batch` (Triton's `preferred_batch_size`).
    """
    a = _arrivals(arrivals)
    max_batch, delay, pref = _policy(max_batch, max_queue_delay, preferred_batch_sizes)
    q = _Batcher(a, _service_array(service_time, max_batch), max_batch, delay, pref)
    _serve([q])
    return q.frame()


def simulate_shared(models: Mapping[str, dict]):
    """Several models, each with its own queue and dynamic batcher, sharing one GPU that
    runs one batch at a time. `models` maps a name to the keyword arguments of
    `simulate` (`arrivals`, `service_time`, `max_batch`, optional `max_queue_delay`,
    `preferred_batch_sizes`). Returns one DataFrame with a `model` column, by arrival."""
    if not isinstance(models, Mapping):
        raise TypeError(f"models must be a dict {{name: {{arrivals, service_time, "
                        f"max_batch}}}}, got {type(models).__name__}")
    if not models:
        raise ValueError("models is empty: give at least one {name: {arrivals, ...}}")
    queues = {}
    for name, kw in models.items():
        if not isinstance(kw, Mapping):
            raise TypeError(f"model {name!r} needs a dict of settings, got {kw!r}")
        unknown = set(kw) - {"arrivals", "service_time", "max_batch", "max_queue_delay",
                             "preferred_batch_sizes"}
        if unknown or not {"arrivals", "service_time", "max_batch"} <= set(kw):
            raise ValueError(f"model {name!r} needs arrivals, service_time and max_batch "
                             f"(optional max_queue_delay, preferred_batch_sizes); got "
                             f"{sorted(kw)}")
        mb, delay, pref = _policy(kw["max_batch"], kw.get("max_queue_delay", 0.0),
                                  kw.get("preferred_batch_sizes"))
        queues[name] = _Batcher(_arrivals(kw["arrivals"], f"arrivals of {name!r}"),
                                _service_array(kw["service_time"], mb), mb, delay, pref)
    _serve(list(queues.values()))
    import pandas as pd

    df = pd.concat([q.frame(name) for name, q in queues.items()], ignore_index=True)
    return df.sort_values(["arrival", "model"], kind="stable").reset_index(drop=True)


def simulate_closed_loop(n_clients, service_time, max_batch, *, think_time=0.0,
                         max_queue_delay=0.0, n=10_000, seed=0):
    """A closed-loop load generator against the same server as `simulate`: `n_clients`
    clients each send a request, wait for its answer, think for an exponentially
    distributed time of mean `think_time` s (0: none, as perf_analyzer's concurrency
    mode), and send the next, until `n` requests have been sent. Every client sends its
    first request at 0. Returns `simulate`'s frame plus a `client` column.

    The load a closed loop offers falls as the server slows down (a client waiting for a
    late answer sends nothing), so its latencies miss the queueing an open-loop
    (Poisson) stream of the same throughput would meet: coordinated omission."""
    clients = _v.count("n_clients", n_clients, maximum=MAX_REQUESTS)
    think = _v.non_negative("think_time", think_time)
    total = _n("n", n)
    max_batch, delay, pref = _policy(max_batch, max_queue_delay, None)
    service = _service_array(service_time, max_batch)
    rng = np.random.default_rng(_seed(seed))
    first = min(clients, total)
    q = _Batcher([0.0] * first, service, max_batch, delay, pref, tags=range(first))
    sent = [first]

    def after(q, i, k, end):
        done = q.tags[i:i + k]
        k = min(k, total - sent[0])
        if k <= 0:
            return
        gaps = rng.exponential(think, size=k) if think > 0 else np.zeros(k)
        for client, gap in zip(done[:k], gaps.tolist()):
            q.add(end + gap, client)
        sent[0] += k

    _serve([q], after)
    return q.frame()


# --- summaries --------------------------------------------------------------------------

def _frame_with(df, columns, what):
    import pandas as pd

    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"df must be the DataFrame {what} returns, got {type(df).__name__}")
    missing = set(columns) - set(df.columns)
    if missing:
        raise KeyError(f"df lacks the columns {sorted(missing)}; pass what {what} returns")
    if len(df) == 0:
        raise ValueError("df has no requests")


def summarize(df, slo=None) -> dict:
    """Latency percentiles (s), throughput (requests/s), mean batch size, the GPU's busy
    fraction, and, with an `slo` (s), the fraction of requests within it
    (`slo_met_fraction`) and their rate (`slo_met_per_s`). Rates are over the span from
    the first arrival to the last finish. (Goodput in DistServe's sense is not this
    rate: it is the highest arrival rate at which the SLO is still met, `capacity`.)"""
    _frame_with(df, COLUMNS, "simulate")
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
        slo = _v.positive("slo", slo)
        met = int(np.count_nonzero(lat <= slo))
        out.update({"slo_s": float(slo), "slo_met_fraction": met / len(df),
                    "slo_met_per_s": met / span})
    return {k: (float(v) if isinstance(v, (np.floating, float)) else v) for k, v in out.items()}


def md1_mean_wait(rate, service_s) -> float:
    """Mean time (s) a request waits before service in an M/D/1 queue (Poisson arrivals
    at `rate`/s, one server, fixed `service_s`), Pollaczek-Khinchine:
    W_q = rho / (2 mu (1 - rho)), rho = rate x service_s, mu = 1 / service_s.
    math.inf when rho >= 1 (the queue grows without bound)."""
    rate = _v.positive("rate", rate)
    service_s = _v.positive("service_s", service_s)
    rho = rate * service_s
    if rho >= 1:
        return math.inf
    return rho / (2 * (1 / service_s) * (1 - rho))


def saturation_throughput(service_time, max_batch) -> float:
    """Requests/s the GPU serves when every batch is full: max_batch / service(max_batch)."""
    max_batch = _v.count("max_batch", max_batch, maximum=MAX_BATCH)
    s = _service_array(service_time, max_batch)
    return float(max_batch / s[max_batch])


def _latencies(arrivals, service, max_batch, delay, pref) -> np.ndarray:
    """Per-request latency (s) of `simulate`, without building a DataFrame."""
    q = _Batcher(arrivals, service, max_batch, delay, pref)
    _serve([q])
    return np.asarray(q.finish) - np.asarray(q.alist)


def _rel_tol(rel_tol):
    return _v.number("rel_tol", rel_tol, lo=0, hi=1, lo_open=True, hi_open=True,
                     expected="a fraction in (0, 1): the relative width at which the "
                              "search stops")


def _bisect_rate(ok, lo, hi, rel_tol):
    """Largest rate in [lo, hi) with ok(rate), lo known to be ok and hi not: geometric
    bisection until hi - lo <= rel_tol x lo, at most _MAX_SEARCH_STEPS halvings."""
    for _ in range(_MAX_SEARCH_STEPS):
        if hi - lo <= rel_tol * lo:
            break
        mid = math.sqrt(lo * hi)
        if not lo < mid < hi:  # the floats cannot split the bracket further
            break
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def capacity(service_time, max_batch, max_queue_delay=0.0, *, slo, quantile=99.0,
             n=4000, seed=0, preferred_batch_sizes=None, rel_tol=0.01) -> float:
    """Goodput in DistServe's sense for one request-level server: the highest Poisson
    arrival rate (requests/s) at which the `quantile` latency stays within `slo` (s)
    under this policy. A bisection over the rate below the saturation throughput (where
    the queue stops being stable), the same random gaps rescaled at every rate, stopped
    when the bracket is narrower than `rel_tol` (a fraction) of the rate. 0.0 if even a
    lone request misses the SLO.

    The trace has at least `n` requests and 200 full batches. Close to saturation a
    finite trace has not reached steady state and understates the queue, so treat a
    capacity within a few percent of saturation as an upper bound.
    """
    slo = _v.positive("slo", slo)
    quantile = _v.number("quantile", quantile, lo=0, hi=100, lo_open=True, hi_open=True,
                         expected="a percentile in (0, 100)")
    rel_tol = _rel_tol(rel_tol)
    n = _n("n", n)
    max_batch, delay, pref = _policy(max_batch, max_queue_delay, preferred_batch_sizes)
    service = _service_array(service_time, max_batch)
    unit = poisson_arrivals(1.0, min(max(n, 200 * max_batch), MAX_REQUESTS), seed)

    def ok(rate):
        lat = _latencies(unit / rate, service, max_batch, delay, pref)
        return np.percentile(lat, quantile) <= slo

    hi = max_batch / service[max_batch]
    lo = hi * 1e-3
    if not ok(lo):
        return 0.0
    return _bisect_rate(ok, lo, hi, rel_tol)


def sweep(service_time, max_batches: Sequence[int], max_queue_delays: Sequence[float], *,
          slo, quantile=99.0, n=4000, seed=0):
    """Every (max_batch, max_queue_delay) policy with its capacity under the SLO
    (requests/s, from `capacity`), its saturation throughput and the ratio of the
    two; best first (ties: the shorter delay, then the smaller batch)."""
    import pandas as pd

    batches = np.atleast_1d(_v.positive("max_batches", max_batches, integer=True,
                                        array=True)).ravel()
    delays = np.atleast_1d(_v.number("max_queue_delays", max_queue_delays, lo=0,
                                     allow_inf=True, array=True)).ravel()
    rows = [{"max_batch": int(b), "max_queue_delay_s": float(d),
             "capacity_per_s": capacity(service_time, int(b), float(d), slo=slo,
                                        quantile=quantile, n=n, seed=seed),
             "saturation_per_s": saturation_throughput(service_time, int(b))}
            for b in batches for d in delays]
    df = pd.DataFrame(rows)
    df["capacity_fraction_of_saturation"] = df["capacity_per_s"] / df["saturation_per_s"]
    return df.sort_values(["capacity_per_s", "max_queue_delay_s", "max_batch"],
                          ascending=[False, True, True], kind="stable").reset_index(drop=True)


def best_policy(table, within=0.02):
    """The row of a `sweep` table to deploy: among policies whose capacity is within
    `within` (a fraction) of the best, the smallest `max_batch` (less memory held for
    batch slots), then the shortest queue delay. Differences smaller than the
    simulation's noise (about a percent) should not decide."""
    within = _v.number("within", within, lo=0, hi=1, hi_open=True,
                       expected="a fraction in [0, 1)")
    _frame_with(table, {"max_batch", "max_queue_delay_s", "capacity_per_s"}, "sweep")
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

    rates = np.atleast_1d(_v.positive("arrival_rates", arrival_rates, array=True)).ravel()
    unit = poisson_arrivals(1.0, n, seed)
    rows = []
    for rate in rates:
        s = summarize(simulate(unit / rate, service_time, max_batch, max_queue_delay), slo)
        rows.append({"arrival_rate_per_s": float(rate), **s})
    return pd.DataFrame(rows)


# --- token-level generation: static vs continuous batching -----------------------------

def simulate_generation(arrivals, output_tokens, step_time, max_batch, policy="continuous"):
    """Text generation, one decode step at a time, for requests that each need
    `output_tokens[i]` steps (prefill counted as one step: `simulate_llm` times it).
    Returns a DataFrame per request: `arrival`, `start`, `finish`, `latency` (s),
    `output_tokens`, `batch_size` (sequences in the step that started it), `batch_id`
    (the step that started it).

    `policy="static"`: a batch of up to `max_batch` waiting requests runs until its
    longest sequence finishes and returns together; finished sequences keep their slot
    (padding) and nobody joins.
    `policy="continuous"`: after every step finished sequences leave and waiting ones
    join (token-level, "in-flight" batching). `step_time`: seconds per step for a batch
    of b sequences (number, callable or table, as in `simulate`).
    """
    import pandas as pd

    a = _arrivals(arrivals)
    tokens = _per_request("output_tokens", output_tokens, a.size)
    policy = _v.choice("policy", policy, ("static", "continuous"))
    max_batch, _, _ = _policy(max_batch, 0.0, None)
    s = _service_array(step_time, max_batch).tolist()
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


# --- LLM serving: prefill and decode on one GPU, a paged KV cache ----------------------

def kv_cache_budget(model, accelerator, dtype="fp16", *, gpu_memory_utilization=None,
                    free_gpu_memory_fraction=None, reserve_bytes=None) -> float:
    """Bytes of device memory a server gives its KV cache, as real servers size it.

    - Neither fraction: all the card has (`Accelerator.memory_bytes`, what torch
      reports) less `reserve_bytes` (default `llm.DEFAULT_RESERVE_BYTES`) and the
      weights: `llm.max_batch`'s budget.
    - `gpu_memory_utilization=u` (vLLM): the instance may use u x the card's memory
      for weights, activations and KV cache; the KV cache gets u x memory - weights -
      reserve (the reserve standing in for the activations vLLM profiles). A
      per-instance limit: two instances on one GPU each take their own u, and each
      holds its own copy of the weights.
    - `free_gpu_memory_fraction=f` (TensorRT-LLM's KvCacheConfig, default 0.9): the KV
      cache gets f x the memory still free after the weights and the reserve.

    0.0 when nothing is left (the weights do not fit).
    """
    m, acc = _llm.get(model), _hardware.get(accelerator)
    weights = _llm.weight_bytes(m, dtype)
    reserve = _llm.DEFAULT_RESERVE_BYTES if reserve_bytes is None else _v.non_negative(
        "reserve_bytes", reserve_bytes)
    if gpu_memory_utilization is not None and free_gpu_memory_fraction is not None:
        raise ValueError("give gpu_memory_utilization (vLLM) or free_gpu_memory_fraction "
                         "(TensorRT-LLM), not both: they size the cache differently")
    total = acc.memory_bytes
    if gpu_memory_utilization is not None:
        u = _v.fraction("gpu_memory_utilization", gpu_memory_utilization)
        return max(0.0, u * total - weights - reserve)
    free = max(0.0, total - weights - reserve)
    if free_gpu_memory_fraction is not None:
        return _v.fraction("free_gpu_memory_fraction", free_gpu_memory_fraction) * free
    return free


def kv_blocks(tokens, block_size=DEFAULT_BLOCK_SIZE):
    """KV-cache blocks a sequence of `tokens` holds under paged allocation:
    ceil(tokens / block_size). Vectorised over `tokens`."""
    t = _v.non_negative("tokens", tokens, integer=True, array=True)
    b = _v.count("block_size", block_size, maximum=MAX_TOKENS)
    return _v.scalar_or_array(np.ceil(t / b))


def kv_memory_use(tokens, *, max_len, block_size=DEFAULT_BLOCK_SIZE) -> dict:
    """How much of the reserved KV-cache memory holds tokens, for sequences of
    `tokens` (an array, one length per sequence) under two allocators:

    - contiguous pre-allocation reserves `max_len` tokens per sequence (a slab for the
      longest reply it may give, as serving systems before vLLM did);
    - paged allocation holds ceil(tokens / block_size) blocks per sequence; only the
      last block of each sequence is partly empty.

    Returns token counts reserved and the fraction used by each (`contiguous_used`,
    `paged_used`) and how many more sequences paging fits in the same memory
    (`paged_capacity_ratio`)."""
    t = np.atleast_1d(_v.positive("tokens", tokens, integer=True, array=True)).ravel()
    max_len = _v.count("max_len", max_len, maximum=MAX_TOKENS)
    if t.max() > max_len:
        raise ValueError(f"a sequence of {t.max():,.0f} tokens is longer than "
                         f"max_len={max_len:,}")
    block = _v.count("block_size", block_size, maximum=MAX_TOKENS)
    used = float(t.sum())
    contiguous = float(max_len * t.size)
    paged = float(np.ceil(t / block).sum() * block)
    return {"sequences": int(t.size), "tokens": used,
            "contiguous_reserved": contiguous, "paged_reserved": paged,
            "contiguous_used": used / contiguous, "paged_used": used / paged,
            "paged_capacity_ratio": contiguous / paged}


def _aggregates(q, c, lg):
    """What a step's operations table depends on (`llm.forward_step_breakdown`): 1, new
    tokens, LM-head rows, causal (query, key) pairs (a sequence's q new tokens attend to
    its c cached ones and to the earlier new ones: q c + q (q + 1) / 2), cached tokens."""
    t = q.sum()
    return np.array([1.0, t, lg.sum(), q @ c + (q @ q + t) / 2, c.sum()])


class _StepCost:
    """Seconds of a forward step, the sum of its operations' rooflines, fast enough for
    a simulator that times tens of thousands of steps. Each operation's FLOPs and bytes
    in `llm.forward_step_breakdown` are affine in the step's aggregates (`_aggregates`;
    the LM head's bytes drop to zero when no sequence needs logits), so the table is
    read at a few probe steps once, its coefficients solved for exactly (checked), and
    every step is then one matrix product and `roofline`'s formula over the rows."""

    # (new tokens, context, logits) per probe: with logits, then without.
    _PROBES = {True: [([1], [0], [1]), ([1], [5], [1]), ([4], [0], [1]), ([1, 1], [0, 0], [1, 1]),
                      ([3, 2], [7, 0], [1, 0]), ([2, 1], [3, 9], [1, 1])],
               False: [([1], [0], [0]), ([1], [5], [0]), ([4], [0], [0]),
                       ([3, 2], [7, 0], [0, 0]), ([2, 2], [1, 4], [0, 0])]}

    def __init__(self, model, accelerator, dtype="fp16", kv_dtype=None):
        self.coef = {}
        for with_logits, probes in self._PROBES.items():
            z, f, b = [], [], []
            for q, c, lg in probes:
                table = _llm.forward_step_breakdown(model, accelerator, q, c, dtype,
                                                    logits=lg, kv_dtype=kv_dtype)
                z.append(_aggregates(np.array(q, float), np.array(c, float),
                                     np.array(lg, float)))
                f.append(table["flops"].to_numpy(dtype=float))
                b.append(table["bytes"].to_numpy(dtype=float))
            z, f, b = np.array(z), np.array(f), np.array(b)
            cf = np.linalg.lstsq(z, f, rcond=None)[0]
            cb = np.linalg.lstsq(z, b, rcond=None)[0]
            for fit, seen in ((z @ cf, f), (z @ cb, b)):
                if not np.allclose(fit, seen, rtol=1e-9, atol=1e-6):  # pragma: no cover
                    raise RuntimeError("llm's step table is no longer affine in the step's "
                                       "aggregates: batching._StepCost must change")
            self.coef[with_logits] = (cf.T.copy(), cb.T.copy())
        self.peaks = np.array([_roofline.peak_or_nan(accelerator, d) for d in table["dtype"]])
        self.bw = _roofline.bandwidth_or_nan(accelerator)

    def many(self, z, with_logits):
        """Seconds of several steps at once: `z` holds one step's aggregates per column
        (5 x k); every step has logits (`with_logits`) or none."""
        cf, cb = self.coef[bool(with_logits)]
        return _roofline._seconds(cf @ z, cb @ z, self.peaks[:, None], self.bw).sum(axis=0)

    def __call__(self, q, c, lg):
        z = _aggregates(np.asarray(q, dtype=float), np.asarray(c, dtype=float),
                        np.asarray(lg, dtype=float))
        cf, cb = self.coef[bool(z[2] > 0)]
        return float(_roofline._seconds(cf @ z, cb @ z, self.peaks, self.bw).sum())


class _LLMServer:
    """One GPU's continuous-batching scheduler and paged KV cache, step by step.

    A request i has P[i] prompt tokens and wants O[i] output tokens. `done[i]` tokens
    of it have their K and V in the cache; `gen[i]` tokens have been generated. Its
    known tokens are P + gen; a step feeds it q of the known tokens not yet in the
    cache (all of them for a whole prefill, a chunk, or the last generated token in
    decode); when a step reaches the last known token, the LM head gives it a token.
    """

    def __init__(self, a, P, O, timer, *, max_batch, chunk, blocks_total, block,
                 prefix, max_prefill, prefilled=None, log=False):
        self.a, self.P, self.O = a, P, O
        n = a.size
        self.n = n
        self.timer = timer
        self.max_batch, self.chunk, self.block = max_batch, chunk, block
        self.max_prefill = max_prefill
        # Prefix caching: whole blocks of the shared prefix are cached once, held by no
        # request, and never computed (a warm cache). At least one prompt token is
        # always computed: the first output token needs its logits.
        self.cached = np.minimum(prefix, P - 1) // block * block
        self.cached_blocks = self.cached // block
        self.blocks_free = blocks_total - int(prefix // block)
        self.done = self.cached.copy()
        self.gen = np.zeros(n, dtype=np.int64)
        self.held = np.zeros(n, dtype=np.int64)
        self.first = np.full(n, np.nan)
        self.last = np.full(n, np.nan)
        self.max_gap = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.start = np.full(n, np.nan)
        self.preempted = np.zeros(n, dtype=np.int64)
        if prefilled is not None:  # disaggregation: the cache arrives from a prefill GPU
            self.done = P.copy()
            self.gen[:] = 1
            self.first = prefilled.copy()
            self.last = prefilled.copy()
        self.log = [] if log else None

    # -- memory --
    def _blocks_for(self, r, tokens):
        return -(-tokens // self.block) - self.cached_blocks[r]

    def _preempt(self, running, waiting, t):
        """Free the youngest running request's blocks; it waits to be recomputed."""
        r = running.pop()
        self.blocks_free += int(self.held[r])
        self.held[r] = 0
        self.done[r] = self.cached[r]
        self.preempted[r] += 1
        waiting.appendleft(r)
        return r

    def _admit(self, r):
        need = int(self._blocks_for(r, self.P[r] + self.gen[r]))
        if need > self.blocks_free:
            return False
        self.blocks_free -= need
        self.held[r] = need
        if math.isnan(self.start[r]):
            self.start[r] = self._t
        return True

    def _grow_decodes(self, running, decodes, waiting):
        """Give each decoding sequence (an id array) the block its next token needs;
        preempt the youngest running requests (vLLM's recompute) while the cache is
        short. Returns the decodes still running."""
        while True:
            d = decodes
            need = d[self._blocks_for(d, self.done[d] + 1) > self.held[d]] if d.size else d
            if need.size <= self.blocks_free:
                self.held[need] += 1
                self.blocks_free -= need.size
                return decodes
            victim = self._preempt(running, waiting, self._t)
            decodes = decodes[decodes != victim]

    # -- one step --
    def _schedule(self, run, rem, running, waiting):
        """(ids, new tokens) of the next step, or None if nothing can run. `run` is the
        running requests as an array, `rem` their known tokens not yet in the cache."""
        P, gen, done = self.P, self.gen, self.done
        if self.chunk is None:
            # Prefill first (vLLM V0 without chunked prefill): if waiting prompts fit,
            # a step prefills them whole and every running sequence waits.
            ids, qs, total = [], [], 0
            while waiting and len(running) < self.max_batch:
                r = waiting[0]
                q = int(P[r] + gen[r] - done[r])
                if self.max_prefill is not None and ids and total + q > self.max_prefill:
                    break
                if not self._admit(r):
                    break
                waiting.popleft()
                running.append(r)
                if q > 1 or gen[r] == 0:
                    ids.append(r)
                    qs.append(q)
                    total += q
            if ids:
                return ids, qs
            decodes = self._grow_decodes(running, np.asarray(running, dtype=np.int64),
                                         waiting)
            return (decodes, np.ones(decodes.size, dtype=np.int64)) if decodes.size else None
        # Chunked prefill (Sarathi-Serve, vLLM's chunked prefill): a token budget per
        # step; decodes first, then prompts already started, then new ones, in order.
        budget = self.chunk
        decodes = self._grow_decodes(running, run[rem == 1][:budget], waiting)
        ids, qs = decodes.tolist(), [1] * decodes.size
        budget -= decodes.size
        if budget > 0:
            started = run[rem > 1]
            if len(running) < run.size:  # someone was preempted: skip them
                still = set(running)
                started = [r for r in started.tolist() if r in still]
            for r in started:
                take = min(int(P[r] + gen[r] - done[r]), budget)
                ids.append(r)
                qs.append(take)
                budget -= take
                if budget <= 0:
                    break
        while budget > 0 and waiting and len(running) < self.max_batch:
            r = waiting[0]
            if not self._admit(r):
                break
            waiting.popleft()
            running.append(r)
            take = min(int(P[r] + gen[r] - done[r]), budget)
            ids.append(r)
            qs.append(take)
            budget -= take
        return (ids, qs) if ids else None

    def _run_length(self, run, rem, running, waiting, head):
        """Plan a run of steps that all have the same shape, to time them at once:
        (k steps, the arrival that may cut it short, the prompt being chunked or -1,
        its chunk). Either decode-only steps, or (chunked prefill) the decodes plus a
        full chunk of the first started prompt, until that prompt's last chunk. k is 0
        if the next step has another shape or the run would be short."""
        no = (0, math.inf, -1, 0)
        if not running:
            return no
        P, gen, done = self.P, self.gen, self.done
        decoding = rem == 1
        dec = run[decoding]
        slots = run.size < self.max_batch
        prompt, chunk = -1, 0
        if self.chunk is None:
            if not decoding.all():
                return no
            free_budget = True
        else:
            if dec.size >= self.chunk:
                return no
            started = run[~decoding]
            if started.size:  # the decodes and a full chunk of the first started prompt
                prompt, chunk = int(started[0]), self.chunk - dec.size
            free_budget = started.size == 0
        if waiting and slots and free_budget:
            r = waiting[0]
            if self._blocks_for(r, P[r] + gen[r]) <= self.blocks_free:
                return no  # the next step admits a prompt
        k = int((self.O[dec] - gen[dec]).min()) if dec.size else 1 << 30
        if prompt >= 0:  # stop before the chunk that ends the prompt
            k = min(k, int(P[prompt] + gen[prompt] - done[prompt] - 1) // chunk)
        if k < _FAST_FORWARD_MIN:
            return no
        # An arrival can join only if the steps leave room and it does not queue behind
        # a blocked request.
        arrival = self.a[head] if (head < self.n and not waiting and slots and free_budget) \
            else math.inf

        # Memory: every block the run will need must be free now (no preemption inside).
        def need(steps):
            return int(np.maximum(0, self._blocks_for(dec, done[dec] + steps)
                                  - self.held[dec]).sum())
        if need(k) > self.blocks_free:
            lo, hi = 0, k  # need(lo) fits, need(hi) does not
            while hi - lo > 1:
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if need(mid) <= self.blocks_free else (lo, mid)
            k = lo
        return (k, arrival, prompt, chunk) if k >= _FAST_FORWARD_MIN else no

    def _fast_forward(self, dec, k, arrival, prompt, chunk, t, n_running):
        """Run k steps of one shape at once (fewer if an arrival can join earlier): the
        decodes `dec` (one token each) and, if `prompt` >= 0, a chunk of `chunk` of its
        tokens. Each step's aggregates are known in closed form (contexts grow by one a
        step, the prompt's by a chunk), so every step is timed exactly, in one call.
        Returns the time at the end of the run."""
        gen, done = self.gen, self.done
        B = dec.size
        j = np.arange(k, dtype=float)
        c = float(done[dec].sum())
        ones = np.ones(k)
        z = np.array([ones, ones * (B + chunk), ones * B,
                      c + B * (j + 1), c + B * j])           # the decodes' aggregates
        if prompt >= 0:  # its chunk: q = chunk new tokens on a growing context
            cp = float(done[prompt]) + chunk * j
            z[3] += chunk * cp + chunk * (chunk + 1) / 2
            z[4] += cp
        dt = self.timer.many(z, B > 0)
        ends = t + np.cumsum(dt)
        if arrival < math.inf:  # the per-step loop would admit it at the first step
            starts = ends - dt  # boundary at or after it: stop there
            later = np.flatnonzero(starts[1:] >= arrival)
            if later.size:
                k = int(later[0]) + 1
                dt, ends = dt[:k], ends[:k]
        if prompt >= 0:
            done[prompt] += k * chunk
        if self.log is not None:
            self.log.extend((float(s), float(d), B, chunk, n_running)
                            for s, d in zip(ends - dt, dt))
        if B:
            grow = np.maximum(0, self._blocks_for(dec, done[dec] + k) - self.held[dec])
            self.held[dec] += grow
            self.blocks_free -= int(grow.sum())
            gap = np.where(gen[dec] >= 1, ends[0] - self.last[dec], np.nan)
            if k >= 2:
                gap = np.fmax(gap, dt[1:].max())
            self.max_gap[dec] = np.fmax(self.max_gap[dec], gap)
            self.first[dec] = np.where(np.isnan(self.first[dec]), ends[0], self.first[dec])
            done[dec] += k
            gen[dec] += k
            self.last[dec] = ends[-1]
        return float(ends[-1])

    def run(self):
        a, n = self.a, self.n
        P, O, done, gen = self.P, self.O, self.done, self.gen
        t, head, finished = 0.0, 0, 0
        waiting, running = deque(), []
        while finished < n:
            while head < n and a[head] <= t:
                waiting.append(head)
                head += 1
            if not running and not waiting:
                t = float(a[head])
                continue
            self._t = t
            run = np.asarray(running, dtype=np.int64)
            rem = P[run] + gen[run] - done[run]
            k, arrival, prompt, chunk = self._run_length(run, rem, running, waiting, head)
            if k:
                dec = run[rem == 1]
                t = self._fast_forward(dec, k, arrival, prompt, chunk, t, run.size)
                out = dec[self.gen[dec] >= self.O[dec]]
                if out.size:
                    finished += self._finish(out, running, t)
                continue
            step = self._schedule(run, rem, running, waiting)
            if step is None:  # only when a request cannot fit even an empty cache
                raise RuntimeError("the scheduler found nothing to run")  # pragma: no cover
            ids = np.asarray(step[0], dtype=np.int64)
            q = np.asarray(step[1], dtype=np.int64)
            ends = (done[ids] + q) == (P[ids] + gen[ids])   # the step ends the known tokens
            dt = self.timer(q, done[ids], ends)
            if self.log is not None:
                self.log.append((t, dt, int(np.count_nonzero(q == 1)),
                                 int(q[q > 1].sum()), len(running)))
            t += dt
            done[ids] += q
            e = ids[ends]
            gen[e] += 1
            gap = t - self.last[e]
            self.max_gap[e] = np.fmax(self.max_gap[e], np.where(gen[e] >= 2, gap, np.nan))
            self.first[e] = np.where(np.isnan(self.first[e]), t, self.first[e])
            self.last[e] = t
            out = e[gen[e] >= O[e]]
            if out.size:
                finished += self._finish(out, running, t)
        return self

    def _finish(self, out, running, t):
        self.finish[out] = t
        self.blocks_free += int(self.held[out].sum())
        self.held[out] = 0
        gone = set(out.tolist())
        running[:] = [r for r in running if r not in gone]
        return out.size

    def frame(self):
        import pandas as pd

        a, O = self.a, self.O
        df = pd.DataFrame({
            "arrival": a, "prompt_tokens": self.P, "output_tokens": O, "start": self.start,
            "first_token": self.first, "finish": self.finish,
            "ttft": self.first - a,
            "tpot": np.where(O > 1, (self.finish - self.first) / np.maximum(O - 1, 1), np.nan),
            "max_gap": self.max_gap, "latency": self.finish - a,
            "preemptions": self.preempted})
        df.attrs["kind"] = "llm"
        return df

    def steps(self):
        import pandas as pd

        return pd.DataFrame(self.log, columns=["start", "seconds", "decode_tokens",
                                               "prefill_tokens", "running"])


def _llm_setup(arrivals, prompt_tokens, output_tokens, model, accelerator, max_batch,
               prefill_chunk, dtype, kv_dtype, block_size, kv_cache_bytes, prefix_tokens,
               max_prefill_tokens):
    a = _arrivals(arrivals)
    P = _per_request("prompt_tokens", prompt_tokens, a.size)
    O = _per_request("output_tokens", output_tokens, a.size)
    m, acc = _llm.get(model), _hardware.get(accelerator)
    max_batch = _v.count("max_batch", max_batch, maximum=MAX_BATCH)
    chunk = None if prefill_chunk is None else _v.count("prefill_chunk", prefill_chunk,
                                                        maximum=MAX_TOKENS)
    max_prefill = None if max_prefill_tokens is None else _v.count(
        "max_prefill_tokens", max_prefill_tokens, maximum=MAX_TOKENS)
    block = _v.count("block_size", block_size, maximum=MAX_TOKENS)
    prefix = _v.count("prefix_tokens", prefix_tokens, minimum=0, maximum=MAX_TOKENS)
    _, kv, _ = _dtypes.formats(dtype, kv_dtype)
    budget = kv_cache_budget(m, acc, dtype) if kv_cache_bytes is None else _v.positive(
        "kv_cache_bytes", kv_cache_bytes)
    block_bytes = block * _llm.kv_cache_bytes_per_token(m, kv)
    blocks_total = int(budget // block_bytes)
    shared = prefix // block
    # The most a request ever holds: its prompt and every output token but the last.
    cached_blocks = np.minimum(prefix, P - 1) // block
    need = -(-(P + O - 1) // block) - cached_blocks
    worst = int(np.argmax(need))
    if need[worst] + shared > blocks_total:
        raise ValueError(
            f"request {worst} ({P[worst]:,} prompt + {O[worst]:,} output tokens) needs "
            f"{need[worst] + shared:,} KV blocks of {block} tokens, more than the "
            f"{blocks_total:,} the cache holds ({budget / 1e9:.3g} GB): it could never "
            f"run. Shorten it, or give the cache more memory")
    timer = _StepCost(m, acc, dtype, kv_dtype)
    if not math.isfinite(timer([1], [0], [1])):
        raise ValueError(f"{acc.name} has no {dtype} peak in the catalogue: no roofline "
                         f"time for {m.name} in that format")
    return a, P, O, timer, dict(max_batch=max_batch, chunk=chunk, blocks_total=blocks_total,
                                block=block, prefix=prefix, max_prefill=max_prefill)


def simulate_llm(arrivals, prompt_tokens, output_tokens, model, accelerator, *, max_batch,
                 prefill_chunk=None, dtype="fp16", kv_dtype=None,
                 block_size=DEFAULT_BLOCK_SIZE, kv_cache_bytes=None, prefix_tokens=0,
                 max_prefill_tokens=None, return_steps=False):
    """Chapter *Serving LLMs*: a continuous-batching server for one model on one GPU.
    Request i arrives at `arrivals[i]` (s) with `prompt_tokens[i]` tokens and wants
    `output_tokens[i]` (an array each, or one number for all). Every step is one forward
    pass timed by the per-operation roofline of that step's mix (what `llm.step_timer`
    returns, to rounding: weights read once per step, FLOPs per token, attention per
    sequence at its own context). At most `max_batch` requests run at once (vLLM's
    `max_num_seqs`). Thousands of requests take about a second of CPU: runs of
    decode-only steps are timed together (their time is affine in the context).

    Scheduling:
    - `prefill_chunk=None` (vLLM V0 without chunked prefill): prefill first. When
      waiting prompts fit (a batch slot, and KV blocks for the whole prompt), the next
      step prefills them whole, oldest first, at most `max_prefill_tokens` prompt
      tokens a step (no cap by default; a longer prompt runs alone), and every running
      sequence waits that step out. Otherwise the step decodes every running sequence.
    - `prefill_chunk=k` (Sarathi-Serve; vLLM's chunked prefill, `max_num_batched_tokens`):
      a budget of k tokens a step. Decodes go first (one token each), then prompts
      already started, then new ones, each cut to what is left of the budget, so a
      prompt chunk has at most k tokens and shares its step with the decodes.

    Memory: a paged KV cache of `kv_cache_bytes` (default `kv_cache_budget`: the card's
    memory less `llm.DEFAULT_RESERVE_BYTES` and the weights), in blocks of `block_size`
    tokens (16, vLLM's default). A request is admitted when blocks for its whole prompt
    are free; a decoding sequence takes a new block when its last one is full. When none
    is free, the youngest running request is preempted by recomputation (vLLM's default):
    its blocks are freed, it returns to the head of the queue, and it is prefilled
    again (prompt and tokens so far) when it fits. A request that could not fit an
    empty cache is refused with ValueError before the run. `prefix_tokens`: a system
    prompt shared by every request, already in the cache (its whole blocks are held
    once and never recomputed: prefix caching with a warm cache).

    Returns one row per request (`LLM_COLUMNS`): `arrival`, `start` (admitted),
    `first_token`, `finish` (s); `ttft` (first_token - arrival), `tpot` (mean seconds
    per output token after the first: (finish - first_token) / (output_tokens - 1),
    NaN for one token), `max_gap` (the longest wait between two of its tokens),
    `latency`, `preemptions`. With `return_steps=True`, also a frame of the steps
    (`start`, `seconds`, `decode_tokens`, `prefill_tokens`, `running`).
    """
    a, P, O, timer, kw = _llm_setup(arrivals, prompt_tokens, output_tokens, model,
                                    accelerator, max_batch, prefill_chunk, dtype, kv_dtype,
                                    block_size, kv_cache_bytes, prefix_tokens,
                                    max_prefill_tokens)
    server = _LLMServer(a, P, O, timer, log=bool(return_steps), **kw).run()
    df = server.frame()
    return (df, server.steps()) if return_steps else df


def simulate_disaggregated(arrivals, prompt_tokens, output_tokens, model, accelerator, *,
                           max_batch, prefill_gpus=1, decode_gpus=1, decode_accelerator=None,
                           dtype="fp16", kv_dtype=None, transfer_bytes_per_s=None,
                           block_size=DEFAULT_BLOCK_SIZE, max_prefill_tokens=None):
    """Chapter *Serving LLMs*: prefill and decode on separate GPUs (DistServe, Splitwise).
    `prefill_gpus` GPUs (`accelerator`) only prefill: each is a `simulate_llm` server
    whose requests end at their first token (whole prefills, up to `max_prefill_tokens`
    a step). The prompt's KV cache then travels to one of `decode_gpus` GPUs
    (`decode_accelerator`, default the same) at `transfer_bytes_per_s` (None: no
    transfer time, as within one NVLink domain), where continuous batching decodes up
    to `max_batch` sequences a step. Requests go round-robin to each pool, in arrival
    order and in prefill-finish order. Each GPU has its own copy of the weights and its
    own KV cache (`kv_cache_budget`).

    Returns `simulate_llm`'s columns: `ttft` ends on the prefill GPU; `tpot` and
    `max_gap` include the transfer and the wait for a decode slot."""
    a, P, O, timer, kw = _llm_setup(arrivals, prompt_tokens, output_tokens, model,
                                    accelerator, max_batch, None, dtype, kv_dtype,
                                    block_size, None, 0, max_prefill_tokens)
    n_p = _v.count("prefill_gpus", prefill_gpus, maximum=1 << 16)
    n_d = _v.count("decode_gpus", decode_gpus, maximum=1 << 16)
    m = _llm.get(model)
    _, kv, _ = _dtypes.formats(dtype, kv_dtype)
    bw = None if transfer_bytes_per_s is None else _v.positive("transfer_bytes_per_s",
                                                               transfer_bytes_per_s)
    # Prefill pool: each request leaves with its first token.
    first = np.full(a.size, np.nan)
    start = np.full(a.size, np.nan)
    pre_kw = dict(kw, max_batch=kw["max_batch"])
    for g in range(n_p):
        idx = np.arange(g, a.size, n_p)
        if idx.size:
            s = _LLMServer(a[idx], P[idx], np.ones(idx.size, dtype=np.int64), timer,
                           **pre_kw).run()
            first[idx], start[idx] = s.first, s.start
    ready = first + (0.0 if bw is None else P * _llm.kv_cache_bytes_per_token(m, kv) / bw)
    # Decode pool: requests with more than one token, by the time their cache lands.
    dec = _hardware.get(decode_accelerator) if decode_accelerator is not None else None
    _, _, _, dtimer, dkw = (a, P, O, timer, kw) if dec is None else _llm_setup(
        np.sort(ready), P, O, m, dec, max_batch, None, dtype, kv_dtype, block_size, None, 0,
        max_prefill_tokens)
    finish = first.copy()
    last = first.copy()
    max_gap = np.full(a.size, np.nan)
    pre = np.zeros(a.size, dtype=np.int64)
    more = np.flatnonzero(O > 1)
    order = more[np.argsort(ready[more], kind="stable")]
    for g in range(n_d):
        idx = order[g::n_d]
        if idx.size:
            s = _LLMServer(ready[idx], P[idx], O[idx], dtimer, prefilled=first[idx],
                           **dkw).run()
            finish[idx], max_gap[idx], pre[idx] = s.finish, s.max_gap, s.preempted
    import pandas as pd

    df = pd.DataFrame({
        "arrival": a, "prompt_tokens": P, "output_tokens": O, "start": start,
        "first_token": first, "finish": finish, "ttft": first - a,
        "tpot": np.where(O > 1, (finish - first) / np.maximum(O - 1, 1), np.nan),
        "max_gap": max_gap, "latency": finish - a, "preemptions": pre})
    df.attrs["kind"] = "llm"
    return df


def slo_attainment(df, *, ttft_slo, tpot_slo) -> float:
    """The fraction of requests that met both SLOs: TTFT <= `ttft_slo` and TPOT <=
    `tpot_slo` (s; a one-token reply has no TPOT and meets that one). DistServe's
    "SLO attainment"."""
    _frame_with(df, {"ttft", "tpot"}, "simulate_llm")
    ttft = _v.positive("ttft_slo", ttft_slo)
    tpot = _v.positive("tpot_slo", tpot_slo)
    t = df["ttft"].to_numpy(dtype=float)
    p = df["tpot"].to_numpy(dtype=float)
    ok = (t <= ttft) & (np.isnan(p) | (p <= tpot))
    return float(np.count_nonzero(ok) / len(df))


def summarize_llm(df, *, ttft_slo=None, tpot_slo=None) -> dict:
    """p50/p99 of TTFT, TPOT and the worst inter-token gap (s), throughput (requests/s
    and output tokens/s, over the span from the first arrival to the last finish), the
    requests preempted, and with both SLOs the attainment (`slo_attainment`)."""
    _frame_with(df, set(LLM_COLUMNS), "simulate_llm")
    if (ttft_slo is None) != (tpot_slo is None):
        raise ValueError("give both ttft_slo and tpot_slo (s), or neither")
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
    if ttft_slo is not None:
        out["slo_attainment"] = slo_attainment(df, ttft_slo=ttft_slo, tpot_slo=tpot_slo)
    return out


def goodput(serve, n, *, ttft_slo, tpot_slo, attainment=0.9, seed=0, rel_tol=0.02,
            rate=None) -> float:
    """Goodput in DistServe's sense (Zhong et al. 2024): the highest Poisson request
    rate (requests/s) at which at least `attainment` of the requests (a fraction: 0.9
    for DistServe's 90%) meet both the TTFT and the TPOT SLO (s).

    `serve(arrivals) -> frame` runs the server on `n` arrival times (a `simulate_llm` or
    `simulate_disaggregated` with the other arguments fixed, e.g. by
    `functools.partial`). The same random gaps are rescaled at every rate. The search
    starts from `rate` (requests/s; default: a light load found from the server's lone
    latency), grows it fourfold until attainment fails, then bisects until the bracket
    is narrower than `rel_tol` of the rate. 0.0 if even a light load misses the target.
    Divide by the GPUs the server uses for DistServe's per-GPU goodput."""
    serve = _v.callable_("serve", serve)
    n = _n("n", n)
    target = _v.fraction("attainment", attainment)
    ttft, tpot = _v.positive("ttft_slo", ttft_slo), _v.positive("tpot_slo", tpot_slo)
    rel_tol = _rel_tol(rel_tol)
    unit = poisson_arrivals(1.0, n, seed)

    def run(arrivals):
        df = serve(arrivals)
        _frame_with(df, {"ttft", "tpot", "latency"}, "simulate_llm")
        return df

    def ok(r):
        return slo_attainment(run(unit / r), ttft_slo=ttft, tpot_slo=tpot) >= target

    if rate is None:
        # A light load: requests far enough apart that each runs alone.
        lone = float(run(unit * 1e6)["latency"].max())
        lo = 0.01 / lone
    else:
        lo = _v.positive("rate", rate)
    if not ok(lo):
        if rate is None:
            return 0.0
        for _ in range(_MAX_SEARCH_STEPS):  # a given rate too high: come down
            lo /= 4
            if ok(lo):
                break
        else:
            return 0.0
    hi = lo * 4
    for _ in range(_MAX_SEARCH_STEPS):
        if not ok(hi):
            break
        lo, hi = hi, hi * 4
    else:
        raise ValueError("attainment never failed: the server kept up at every rate "
                         "tried; check that serve uses the arrivals it is given")
    return _bisect_rate(ok, lo, hi, rel_tol)
