"""The LLM server's event simulator: continuous batching of prefill and decode on one
GPU (or one tensor-parallel group) with a paged KV cache, and disaggregated prefill and
decode on separate GPUs.

Chapter: *Serving LLMs: prefill, decode and the KV cache*; also *How to benchmark your
own traffic*. Times are seconds.

`simulate_llm` runs a vLLM-like scheduler step by step: prefill and decode in the same
steps (or prefill first), each step timed by the engine's step model
(`engine_step.EngineStep`: the per-operation roofline of that step's mix of tokens, or
the achievable model), admission bounded by a paged KV cache (`paged_kv`), preemption by
recomputation when the cache runs out (vLLM's default). `simulate_disaggregated` runs
pools of prefill and decode GPUs (DistServe, Splitwise). Both return one row per request
(`LLM_COLUMNS`), which `llm_slo` summarises. The request-level batcher (Triton's) is
`gpuinfer.predict.batching`.

Prediction layer: no torch, no measurement.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from gpuinfer.predict import achievable as _achievable
from gpuinfer import dtypes as _dtypes
from gpuinfer import hardware as _hardware
from gpuinfer.predict import architectures
from gpuinfer.predict import step_model
from gpuinfer import validate as _v
from gpuinfer.predict.batching import MAX_BATCH, MAX_TOKENS, check_arrivals, check_per_request
from gpuinfer.predict.engine_step import EngineStep, tp_shard
from gpuinfer.predict.paged_kv import DEFAULT_BLOCK_SIZE, kv_cache_budget

#: Columns of `simulate_llm`'s result, one row per request.
LLM_COLUMNS = ["arrival", "prompt_tokens", "output_tokens", "start", "first_token",
               "finish", "ttft", "tpot", "max_gap", "latency", "preemptions"]
#: Shortest run of same-shaped steps `simulate_llm` times at once rather than one by one
#: (their time is affine in the context, so a run is timed exactly in one call). A very
#: large value makes the simulator step one by one: the fast path's own check.
FAST_FORWARD_MIN = 3


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
        if k < FAST_FORWARD_MIN:
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
        return (k, arrival, prompt, chunk) if k >= FAST_FORWARD_MIN else no

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
        z = np.array([ones, ones * (B + chunk), ones * B,     # the decodes' aggregates
                      c + B * (j + 1), c + B * j, c + B * (j + 1)])  # (llm.STEP_AGGREGATES)
        if prompt >= 0:  # its chunk: q = chunk new tokens on a growing context
            cp = float(done[prompt]) + chunk * j
            z[3] += chunk * cp + chunk * (chunk + 1) / 2
            z[4] += cp
            z[5] += chunk * (cp + chunk)
        dt = self.timer.many(z)
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
               max_prefill_tokens, compute_dtype=None, tp=1, achievable=False,
               interconnect=None):
    a = check_arrivals(arrivals)
    P = check_per_request("prompt_tokens", prompt_tokens, a.size)
    O = check_per_request("output_tokens", output_tokens, a.size)
    m, acc = architectures.get(model), _hardware.get(accelerator)
    max_batch = _v.count("max_batch", max_batch, maximum=MAX_BATCH)
    chunk = None if prefill_chunk is None else _v.count("prefill_chunk", prefill_chunk,
                                                        maximum=MAX_TOKENS)
    max_prefill = None if max_prefill_tokens is None else _v.count(
        "max_prefill_tokens", max_prefill_tokens, maximum=MAX_TOKENS)
    block = _v.count("block_size", block_size, maximum=MAX_TOKENS)
    prefix = _v.count("prefix_tokens", prefix_tokens, minimum=0, maximum=MAX_TOKENS)
    _, kv, _ = _dtypes.formats(dtype, kv_dtype, compute_dtype)
    part = tp_shard(m, tp)
    budget = kv_cache_budget(part, acc, dtype) if kv_cache_bytes is None else _v.positive(
        "kv_cache_bytes", kv_cache_bytes)
    block_bytes = block * step_model.kv_cache_bytes_per_token(part, kv)
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
    timer = EngineStep(m, acc, dtype, kv_dtype, compute_dtype, n_devices=tp,
                        achievable=_achievable.as_efficiency(achievable),
                        interconnect=interconnect)
    if not math.isfinite(timer([1], [0], [1])):
        fmt = dtype if compute_dtype is None else f"{dtype} (computing in {compute_dtype})"
        raise ValueError(f"{acc.name} has no peak for {fmt} in the catalogue: no roofline "
                         f"time for {m.name} in that format")
    return a, P, O, timer, dict(max_batch=max_batch, chunk=chunk, blocks_total=blocks_total,
                                block=block, prefix=prefix, max_prefill=max_prefill)


def simulate_llm(arrivals, prompt_tokens, output_tokens, model, accelerator, *, max_batch,
                 prefill_chunk=None, dtype="fp16", kv_dtype=None, compute_dtype=None, n_devices=1,
                 achievable=True, interconnect=None,
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

    The configuration engines run: `compute_dtype` runs the matmuls in that format
    (W8A8 "fp8" or "int8", W4A4 "fp4": its catalogue peak; the default is weight-only,
    `dtypes.formats`); `n_devices` > 1 is one tensor-parallel group of `n_devices` GPUs (each holds
    `parallel.shard` and its part of the KV cache; every step adds its all-reduces over
    `interconnect`, default the GPU's NVLink: on the ceiling at NCCL's bus bandwidth with
    no latency, on the achievable model at NCCL's cost with its latency, as
    `parallel.tp_step_s` times them). `achievable=False` times steps on the
    ceiling (the roofline); True on the fitted achievable model (`achievable.FITTED`:
    derated peaks and bandwidth, per-step and per-kernel overheads); or pass an
    `achievable.Efficiency`.
    """
    a, P, O, timer, kw = _llm_setup(arrivals, prompt_tokens, output_tokens, model,
                                    accelerator, max_batch, prefill_chunk, dtype, kv_dtype,
                                    block_size, kv_cache_bytes, prefix_tokens,
                                    max_prefill_tokens, compute_dtype, n_devices, achievable,
                                    interconnect)
    server = _LLMServer(a, P, O, timer, log=bool(return_steps), **kw).run()
    df = server.frame()
    return (df, server.steps()) if return_steps else df



def simulate_disaggregated(arrivals, prompt_tokens, output_tokens, model, accelerator, *,
                           max_batch, prefill_gpus=1, decode_gpus=1, decode_accelerator=None,
                           dtype="fp16", kv_dtype=None, transfer_bytes_per_s=None,
                           block_size=DEFAULT_BLOCK_SIZE, max_prefill_tokens=None,
                           achievable=True):
    """Chapter *Serving LLMs*: prefill and decode on separate GPUs (DistServe, Splitwise).
    `prefill_gpus` GPUs (`accelerator`) only prefill: each is a `simulate_llm` server
    whose requests end at their first token (whole prefills, up to `max_prefill_tokens`
    a step). The prompt's KV cache then travels to one of `decode_gpus` GPUs
    (`decode_accelerator`, default the same) at `transfer_bytes_per_s` (None: no
    transfer time, as within one NVLink domain), where continuous batching decodes up
    to `max_batch` sequences a step. Requests go round-robin to each pool, in arrival
    order and in prefill-finish order. Each GPU has its own copy of the weights and its
    own KV cache (`kv_cache_budget`).

    `achievable` as in `simulate_llm`: False times both pools' steps on the ceiling,
    True on the fitted achievable model, or pass an `achievable.Efficiency`.

    Returns `simulate_llm`'s columns: `ttft` ends on the prefill GPU; `tpot` and
    `max_gap` include the transfer and the wait for a decode slot."""
    a, P, O, timer, kw = _llm_setup(arrivals, prompt_tokens, output_tokens, model,
                                    accelerator, max_batch, None, dtype, kv_dtype,
                                    block_size, None, 0, max_prefill_tokens,
                                    achievable=achievable)
    n_p = _v.count("prefill_gpus", prefill_gpus, maximum=1 << 16)
    n_d = _v.count("decode_gpus", decode_gpus, maximum=1 << 16)
    m = architectures.get(model)
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
    ready = first + (0.0 if bw is None else P * step_model.kv_cache_bytes_per_token(m, kv) / bw)
    # Decode pool: requests with more than one token, by the time their cache lands.
    dec = _hardware.get(decode_accelerator) if decode_accelerator is not None else None
    _, _, _, dtimer, dkw = (a, P, O, timer, kw) if dec is None else _llm_setup(
        np.sort(ready), P, O, m, dec, max_batch, None, dtype, kv_dtype, block_size, None, 0,
        max_prefill_tokens, achievable=achievable)
    finish = first.copy()
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

