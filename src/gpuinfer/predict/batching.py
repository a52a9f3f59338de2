"""Batching under load: discrete-event simulators of a GPU server that batches requests.

Chapters: *Batching, latency and SLOs*, *Serving systems and sharing a GPU*,
*Benchmarking*; lab *Batching under load*. Times are seconds, rates requests/s. The LLM
server (prefill and decode, a paged KV cache) is `gpuinfer.predict.llm_serving`.

**Request-level batching** (`simulate`, `simulate_shared`, `simulate_closed_loop`,
`capacity`). A request is one forward pass (an embedding, a classification, one step of
a model); the GPU runs one batch at a time (non-preemptive). Requests queue per model;
the policy is Triton's dynamic batcher: when the GPU is free, a model's batch starts as
soon as either `max_batch` requests wait (or a preferred batch size can be formed) or its
oldest request has waited `max_queue_delay`; the batch takes every waiting request up to
`max_batch`, or, with preferred sizes, the largest preferred size that can be formed (12
waiting with preferred sizes [8, 16] start a batch of 8). `max_queue_delay=0` starts with whatever is waiting (greedy batching);
`max_batch=1` is a plain single-server queue (M/D/1 for Poisson arrivals and a fixed
service time). Several models sharing one GPU queue separately and take turns: the GPU
serves the batch that can start first (ties: the oldest request). One event loop
(`_serve`) runs all of them; a closed loop adds each client's next request when its
previous one finishes.

**Text generation, simply** (`simulate_generation`): a request is a number of equal
decode steps, batched statically or continuously. `gpuinfer.predict.llm_serving.simulate_llm` is
the full model.
"""

from __future__ import annotations

import bisect
import math
from typing import Callable, Mapping, Sequence

import numpy as np

from gpuinfer.predict import achievable as _achievable
from gpuinfer import dtypes as _dtypes
from gpuinfer import hardware as _hardware
from gpuinfer.predict import llm as _llm
from gpuinfer.predict import architectures
from gpuinfer.predict import step_cost
from gpuinfer import validate as _v

COLUMNS = ["arrival", "start", "finish", "latency", "batch_size"]


#: Largest trace the simulators accept: more requests would take minutes and gigabytes.
MAX_REQUESTS = 10_000_000
#: Largest batch limit accepted (no GPU runs a million sequences in one step).
MAX_BATCH = 1 << 20
#: Largest batch limit `capacity` (and `sweep`) search over: each rate it tries simulates
#: at least 200 full batches, about 20 s of simulation at this size on one core.
CAPACITY_MAX_BATCH = 4096
#: Largest prompt or output length accepted, in tokens.
MAX_TOKENS = 1 << 24
#: Iterations after which a rate search stops (each halves the bracket at least).
MAX_SEARCH_STEPS = 200


# --- arguments --------------------------------------------------------------------------

def _seed(seed) -> int:
    return _v.count("seed", seed, minimum=0, maximum=2**63 - 1)


def check_trace_length(name, n) -> int:
    """`n` as a count of requests, 1 to `MAX_REQUESTS` (the simulators' shared check)."""
    return _v.count(name, n, maximum=MAX_REQUESTS,
                    why_maximum="a trace this long would take minutes to simulate")


def check_arrivals(arrivals, name="arrivals") -> np.ndarray:
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


def check_per_request(name, values, n) -> np.ndarray:
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
    n = check_trace_length("n", n)
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


def model_service_s(model, accelerator, context=0, dtype="fp16", *, tokens_per_request=1,
                       lm_head=True, overhead_s=0.0, achievable=True) -> Callable:
    """Service time (s) of a batch of requests, each one forward pass of `model`, plus a
    fixed `overhead_s` per batch (launches, scheduling). Returns a function batch ->
    seconds (vectorised over batch).

    On what an engine achieves by default (`achievable.step_s`: the same forward pass on
    the fitted fractions of the device's rates, plus the fitted fixed cost of a step;
    `achievable` may also be an `achievable.Efficiency`); `achievable=False` gives the
    ceiling, the per-operation roofline (`llm.step_timer`: weights read once per batch,
    FLOPs and activations per token, attention per sequence).

    A request brings `tokens_per_request` new tokens on top of `context` cached ones:
    the default (1 token, LM head) is one decode step of one sequence; an embedding
    request is a forward pass over its text (`tokens_per_request` = its length,
    `context=0`, `lm_head=False`: pooled hidden states, no logits). The model, device,
    format and `achievable` are checked here, not at the first call."""
    m = architectures.get(model)
    acc = _hardware.get(accelerator)
    _dtypes.formats(dtype)  # an unknown format fails now
    c = _v.count("context", context, minimum=0, maximum=MAX_TOKENS)
    q = _v.count("tokens_per_request", tokens_per_request, maximum=MAX_TOKENS)
    if not isinstance(lm_head, (bool, np.bool_)):
        raise TypeError(f"lm_head must be True or False, got {lm_head!r}")
    overhead = _v.non_negative("overhead_s", overhead_s)
    eff = _achievable.as_efficiency(achievable)
    ceiling = eff is _achievable.CEILING
    if ceiling:
        timer = step_cost.step_timer(m, acc, dtype)
    else:
        def timer(new, cached, logits):
            return _achievable.step_s(m, acc, new, cached, dtype, logits=logits,
                                      achievable=eff)
    cache: dict[int, float] = {}

    def one(b):
        if b not in cache:
            cache[b] = timer(np.full(b, q), np.full(b, c), np.full(b, float(lm_head)))
        return cache[b] + overhead

    def service(batch):
        b = _v.positive("batch", batch, integer=True, array=True)
        if np.any(b > MAX_BATCH):
            raise ValueError(f"batch must be <= {MAX_BATCH:,}, got {b.max():,.0f}")
        if ceiling and q == 1 and lm_head:  # a decode step: the vectorised form
            return _v.scalar_or_array(
                np.asarray(_llm.decode_step_s(m, acc, b, c, dtype)) + overhead)
        out = np.array([one(int(x)) for x in b.ravel()]).reshape(b.shape)
        return _v.scalar_or_array(out)

    if not math.isfinite(one(1)):
        raise ValueError(f"{acc.name} has no {dtype} peak in the catalogue: no "
                         f"{'roofline' if ceiling else 'achievable'} time for {m.name} "
                         f"in that format")
    return service


def roofline_service_s(model, accelerator, context=0, dtype="fp16", *,
                          tokens_per_request=1, lm_head=True, overhead_s=0.0) -> Callable:
    """The ceiling's service time: `model_service_s(..., achievable=False)`, the
    per-operation roofline of each batch's forward pass (plus `overhead_s`)."""
    return model_service_s(model, accelerator, context, dtype,
                              tokens_per_request=tokens_per_request, lm_head=lm_head,
                              overhead_s=overhead_s, achievable=False)


def _service_array(service_s, max_batch) -> np.ndarray:
    """Seconds for batches 0..max_batch (index = batch size; index 0 unused)."""
    sizes = np.arange(1, max_batch + 1)
    if isinstance(service_s, Mapping):
        table = dict(service_s)
        service_s = service_table(list(table), list(table.values()))
    elif hasattr(service_s, "to_dict") and not callable(service_s):
        return _service_array(service_s.to_dict(), max_batch)  # a pandas Series
    if callable(service_s):
        try:
            s = np.asarray(service_s(sizes), dtype=float)
            if s.shape != sizes.shape:
                raise TypeError
        except (TypeError, AttributeError):
            s = np.array([float(service_s(int(b))) for b in sizes])
    elif _v.is_number(service_s):
        s = np.full(max_batch, _v.positive("service_s", service_s))
    else:
        raise TypeError("service_s must be seconds (a number), a callable batch -> "
                        f"seconds, or a table {{batch: seconds}}; got "
                        f"{type(service_s).__name__}")
    bad = ~(np.isfinite(s) & (s > 0))
    if np.any(bad):
        first = int(sizes[bad][0])
        raise ValueError(f"service times must be positive seconds; service_s({first}) "
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


def simulate(arrivals, service_s, max_batch, max_queue_delay=0.0, *,
             preferred_batch_sizes=None):
    """Simulate Triton's dynamic batcher on one GPU. Returns a DataFrame, one row per
    request: `arrival`, `start`, `finish`, `latency` (s), `batch_size`, `batch_id`.

    `service_s`: seconds (a number), a callable batch -> seconds, or a table
    {batch: seconds} (interpolated). `max_queue_delay` (s) is Triton's
    `max_queue_delay_microseconds` / 1e6; `math.inf` is static batching (wait for a
    full batch; the last, partial one goes when the trace ends).
    `preferred_batch_sizes`: batch sizes the batcher starts at without waiting for
    `max_batch` (Triton's `preferred_batch_size`).
    """
    a = check_arrivals(arrivals)
    max_batch, delay, pref = _policy(max_batch, max_queue_delay, preferred_batch_sizes)
    q = _Batcher(a, _service_array(service_s, max_batch), max_batch, delay, pref)
    _serve([q])
    return q.frame()


def simulate_shared(models: Mapping[str, dict]):
    """Several models, each with its own queue and dynamic batcher, sharing one GPU that
    runs one batch at a time. `models` maps a name to the keyword arguments of
    `simulate` (`arrivals`, `service_s`, `max_batch`, optional `max_queue_delay`,
    `preferred_batch_sizes`). Returns one DataFrame with a `model` column, by arrival."""
    if not isinstance(models, Mapping):
        raise TypeError(f"models must be a dict {{name: {{arrivals, service_s, "
                        f"max_batch}}}}, got {type(models).__name__}")
    if not models:
        raise ValueError("models is empty: give at least one {name: {arrivals, ...}}")
    queues = {}
    for name, kw in models.items():
        if not isinstance(kw, Mapping):
            raise TypeError(f"model {name!r} needs a dict of settings, got {kw!r}")
        unknown = set(kw) - {"arrivals", "service_s", "max_batch", "max_queue_delay",
                             "preferred_batch_sizes"}
        if unknown or not {"arrivals", "service_s", "max_batch"} <= set(kw):
            raise ValueError(f"model {name!r} needs arrivals, service_s and max_batch "
                             f"(optional max_queue_delay, preferred_batch_sizes); got "
                             f"{sorted(kw)}")
        mb, delay, pref = _policy(kw["max_batch"], kw.get("max_queue_delay", 0.0),
                                  kw.get("preferred_batch_sizes"))
        queues[name] = _Batcher(check_arrivals(kw["arrivals"], f"arrivals of {name!r}"),
                                _service_array(kw["service_s"], mb), mb, delay, pref)
    _serve(list(queues.values()))
    import pandas as pd

    df = pd.concat([q.frame(name) for name, q in queues.items()], ignore_index=True)
    return df.sort_values(["arrival", "model"], kind="stable").reset_index(drop=True)


def simulate_closed_loop(n_clients, service_s, max_batch, *, think_s=0.0,
                         max_queue_delay=0.0, n=10_000, seed=0):
    """A closed-loop load generator against the same server as `simulate`: `n_clients`
    clients each send a request, wait for its answer, think for an exponentially
    distributed time of mean `think_s` s (0: none, as perf_analyzer's concurrency
    mode), and send the next, until `n` requests have been sent. Every client sends its
    first request at 0. Returns `simulate`'s frame plus a `client` column.

    The load a closed loop offers falls as the server slows down (a client waiting for a
    late answer sends nothing), so its latencies miss the queueing an open-loop
    (Poisson) stream of the same throughput would meet: coordinated omission."""
    clients = _v.count("n_clients", n_clients, maximum=MAX_REQUESTS)
    think = _v.non_negative("think_s", think_s)
    total = check_trace_length("n", n)
    max_batch, delay, pref = _policy(max_batch, max_queue_delay, None)
    service = _service_array(service_s, max_batch)
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

def check_frame(df, columns, what):
    """TypeError, KeyError or ValueError unless `df` is a non-empty DataFrame with
    `columns` (the simulators' result frames; `what` names the function that makes it)."""
    import pandas as pd

    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"df must be the DataFrame {what} returns, got {type(df).__name__}")
    missing = set(columns) - set(df.columns)
    if missing:
        raise KeyError(f"df lacks the columns {sorted(missing)}; pass what {what} returns")
    if len(df) == 0:
        raise ValueError("df has no requests")


def _times_in_order(df):
    """ValueError naming the column unless every time is finite and each request
    arrives, starts and finishes in that order, its latency finish - arrival >= 0."""
    for col in ("arrival", "start", "finish", "latency", "batch_size"):
        _v.number(f"df[{col!r}]", df[col].to_numpy(), array=True,
                  lo=0 if col in ("latency", "batch_size") else None,
                  expected="finite numbers" + (" >= 0" if col in ("latency", "batch_size")
                                               else ""))
    for first, then in (("arrival", "start"), ("start", "finish")):
        late = df[first].to_numpy() > df[then].to_numpy()
        if late.any():
            raise ValueError(f"df[{then!r}] must not precede df[{first!r}]: "
                             f"{int(late.sum())} request(s) do")


def summarize(df, slo_s=None) -> dict:
    """Latency percentiles (s), throughput (requests/s), mean batch size, the GPU's busy
    fraction, and, with an `slo_s` (s), the fraction of requests within it
    (`slo_met_fraction`) and their rate (`slo_met_per_s`). Rates are over the span from
    the first arrival to the last finish. (Goodput in DistServe's sense is not this
    rate: it is the highest arrival rate at which the SLO is still met, `capacity`.)"""
    check_frame(df, COLUMNS, "simulate")
    _times_in_order(df)
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
    if slo_s is not None:
        slo_s = _v.positive("slo_s", slo_s)
        met = int(np.count_nonzero(lat <= slo_s))
        out.update({"slo_s": float(slo_s), "slo_met_fraction": met / len(df),
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


def saturation_throughput(service_s, max_batch) -> float:
    """Requests/s the GPU serves when every batch is full: max_batch / service(max_batch)."""
    max_batch = _v.count("max_batch", max_batch, maximum=MAX_BATCH)
    s = _service_array(service_s, max_batch)
    return float(max_batch / s[max_batch])


def _latencies(arrivals, service, max_batch, delay, pref) -> np.ndarray:
    """Per-request latency (s) of `simulate`, without building a DataFrame."""
    q = _Batcher(arrivals, service, max_batch, delay, pref)
    _serve([q])
    return np.asarray(q.finish) - np.asarray(q.alist)


def check_rel_tol(rel_tol):
    """`rel_tol` as a fraction in (0, 1): the relative width at which a rate search stops."""
    return _v.number("rel_tol", rel_tol, lo=0, hi=1, lo_open=True, hi_open=True,
                     expected="a fraction in (0, 1): the relative width at which the "
                              "search stops")


def bisect_bracket(ok, lo, hi, rel_tol):
    """(lo, hi): ok(lo) and not ok(hi), from a bracket with lo known to be ok and hi not,
    narrowed by geometric bisection until hi - lo <= rel_tol x lo, at most
    MAX_SEARCH_STEPS halvings. Its lo is the largest rate found with ok(rate)."""
    for _ in range(MAX_SEARCH_STEPS):
        if hi - lo <= rel_tol * lo:
            break
        mid = math.sqrt(lo * hi)
        if not lo < mid < hi:  # the floats cannot split the bracket further
            break
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo, hi


def capacity(service_s, max_batch, max_queue_delay=0.0, *, slo_s, quantile=99.0,
             n=4000, seed=0, preferred_batch_sizes=None, rel_tol=0.01) -> float:
    """Goodput in DistServe's sense for one request-level server: the highest Poisson
    arrival rate (requests/s) at which the `quantile` latency stays within `slo_s` (s)
    under this policy. A bisection over the rate below the saturation throughput (where
    the queue stops being stable), the same random gaps rescaled at every rate, stopped
    when the bracket is narrower than `rel_tol` (a fraction) of the rate. 0.0 if even a
    lone request misses the SLO.

    The trace has at least `n` requests and 200 full batches. Close to saturation a
    finite trace has not reached steady state and understates the queue, so treat a
    capacity within a few percent of saturation as an upper bound. The default `n` is
    quick, not precise: from 4,000 requests the capacity moves by a few percent from one
    `seed` to the next (up to 5% for chapter 6's fleet server); pass tens of thousands (chapter 6 uses 40,000) where a decision rests on
    the last few percent, and about ten times more for a p99.9.
    """
    slo_s = _v.positive("slo_s", slo_s)
    quantile = _v.number("quantile", quantile, lo=0, hi=100, lo_open=True, hi_open=True,
                         expected="a percentile in (0, 100)")
    rel_tol = check_rel_tol(rel_tol)
    n = check_trace_length("n", n)
    max_batch, delay, pref = _policy(max_batch, max_queue_delay, preferred_batch_sizes)
    _v.count("max_batch", max_batch, maximum=CAPACITY_MAX_BATCH,
             why_maximum=f"capacity simulates at least 200 full batches at each of ~10 "
                         f"rates ({200 * CAPACITY_MAX_BATCH:,} requests at the largest): "
                         f"a larger batch would run for many minutes")
    service = _service_array(service_s, max_batch)
    unit = poisson_arrivals(1.0, min(max(n, 200 * max_batch), MAX_REQUESTS), seed)

    def ok(rate):
        lat = _latencies(unit / rate, service, max_batch, delay, pref)
        return np.percentile(lat, quantile) <= slo_s

    hi = max_batch / service[max_batch]
    lo = hi * 1e-3
    if not ok(lo):
        return 0.0
    return bisect_bracket(ok, lo, hi, rel_tol)[0]


def sweep(service_s, max_batches: Sequence[int], max_queue_delays: Sequence[float], *,
          slo_s, quantile=99.0, n=4000, seed=0):
    """Every (max_batch, max_queue_delay) policy, a DataFrame row each: max_batch,
    max_queue_delay_s, capacity_per_s (requests/s within the SLO, `capacity`),
    saturation_per_s (every batch full) and capacity_fraction_of_saturation; highest
    capacity first (ties: the shorter delay, then the smaller batch)."""
    import pandas as pd

    batches = np.atleast_1d(_v.positive("max_batches", max_batches, integer=True,
                                        array=True)).ravel()
    delays = np.atleast_1d(_v.number("max_queue_delays", max_queue_delays, lo=0,
                                     allow_inf=True, array=True)).ravel()
    rows = [{"max_batch": int(b), "max_queue_delay_s": float(d),
             "capacity_per_s": capacity(service_s, int(b), float(d), slo_s=slo_s,
                                        quantile=quantile, n=n, seed=seed),
             "saturation_per_s": saturation_throughput(service_s, int(b))}
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
    check_frame(table, {"max_batch", "max_queue_delay_s", "capacity_per_s"}, "sweep")
    top = table["capacity_per_s"].max()
    if not top > 0:
        raise ValueError("no policy meets the SLO at any rate: loosen the SLO or batch less")
    ok = table[table["capacity_per_s"] >= (1 - within) * top]
    return ok.sort_values(["max_batch", "max_queue_delay_s"], kind="stable").iloc[0]


def load_curve(arrival_rates, service_s, max_batch, max_queue_delay=0.0, *, n=4000,
               seed=0, slo_s=None):
    """`summarize` at each arrival rate (requests/s), one row per rate: the
    latency-throughput curve of one policy."""
    import pandas as pd

    rates = np.atleast_1d(_v.positive("arrival_rates", arrival_rates, array=True)).ravel()
    unit = poisson_arrivals(1.0, n, seed)
    rows = []
    for rate in rates:
        s = summarize(simulate(unit / rate, service_s, max_batch, max_queue_delay), slo_s)
        rows.append({"arrival_rate_per_s": float(rate), **s})
    return pd.DataFrame(rows)


# --- token-level generation: static vs continuous batching -----------------------------

def simulate_generation(arrivals, output_tokens, step_s, max_batch, policy="continuous"):
    """Text generation, one decode step at a time, for requests that each need
    `output_tokens[i]` steps (prefill counted as one step: `llm_serving.simulate_llm` times it).
    Returns a DataFrame per request: `arrival`, `start`, `finish`, `latency` (s),
    `output_tokens`, `batch_size` (sequences in the step that started it), `batch_id`
    (the step that started it).

    `policy="static"`: a batch of up to `max_batch` waiting requests runs until its
    longest sequence finishes and returns together; finished sequences keep their slot
    (padding) and nobody joins.
    `policy="continuous"`: after every step finished sequences leave and waiting ones
    join (token-level, "in-flight" batching). `step_s`: seconds per step for a batch
    of b sequences (number, callable or table, as in `simulate`).
    """
    import pandas as pd

    a = check_arrivals(arrivals)
    tokens = check_per_request("output_tokens", output_tokens, a.size)
    policy = _v.choice("policy", policy, ("static", "continuous"))
    max_batch, _, _ = _policy(max_batch, 0.0, None)
    s = _service_array(step_s, max_batch).tolist()
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
