"""Serving LLMs: a continuous-batching server of prefill and decode on one GPU, with a
paged KV cache; disaggregated prefill and decode; SLO attainment and goodput.

Chapter: *Serving LLMs: prefill, decode and the KV cache*; also *How to benchmark your
own traffic*. Times are seconds, rates requests/s, memory bytes.

`simulate_llm` is a continuous-batching LLM server: prefill and decode in the same
steps, each step timed by the per-operation roofline of its own mix of tokens (the
operations table of `llm.forward_step_breakdown`, summed in closed form by
`llm.StepCost`, the class `llm.step_timer` returns; mixtures of experts included),
admission bounded by a paged KV cache, preemption by recomputation when the cache runs
out (vLLM's default). The request-level batcher (Triton's) is `gpuinfer.batching`.

The configuration engines run: a compute format (`compute_dtype`: W8A8 fp8/int8, W4A4
fp4 at that format's peak), tensor parallelism (`tp`: `parallel.shard` plus the step's
all-reduces), and two numbers for everything: `achievable=False`, the ceiling (the
roofline, an upper bound on throughput), or True, the calibrated achievable model
(`gpuinfer.achievable`). `offline_throughput` answers what `trtllm-bench throughput` and
`vllm bench throughput` report; `paging_gain` what paging the KV cache buys.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from . import achievable as _achievable
from . import dtypes as _dtypes
from . import hardware as _hardware
from . import llm as _llm
from . import parallel as _parallel
from . import validate as _v
from .batching import (
    MAX_BATCH,
    MAX_SEARCH_STEPS,
    MAX_TOKENS,
    bisect_rate,
    check_arrivals,
    check_frame,
    check_per_request,
    check_rel_tol,
    check_trace_length,
    poisson_arrivals,
)

#: Columns of `simulate_llm`'s result, one row per request.
LLM_COLUMNS = ["arrival", "prompt_tokens", "output_tokens", "start", "first_token",
               "finish", "ttft", "tpot", "max_gap", "latency", "preemptions"]
#: vLLM's default KV-cache block size, in tokens (`--block-size`, CacheConfig
#: DEFAULT_BLOCK_SIZE = 16: https://docs.vllm.ai/en/stable/api/vllm/config/cache/).
DEFAULT_BLOCK_SIZE = 16
#: vLLM's `gpu_memory_utilization` default: 0.92 in current releases (vllm/entrypoints/
#: llm.py, `LLM.__init__(..., gpu_memory_utilization: float = 0.92)`), 0.9 before.
VLLM_GPU_MEMORY_UTILIZATION = 0.92
#: The fraction `offline_throughput`'s achievable model gives a server unless told: vLLM's
#: older default, 0.9, the one the achievable model's constants were fitted with
#: (`achievable.FITTED`); pass `gpu_memory_utilization=VLLM_GPU_MEMORY_UTILIZATION` for
#: a current vLLM.
ACHIEVABLE_GPU_MEMORY_UTILIZATION = 0.9
#: Shortest run of same-shaped steps `simulate_llm` times at once rather than one by one.
_FAST_FORWARD_MIN = 3


# --- LLM serving: prefill and decode on one GPU, a paged KV cache ----------------------

def _shard(model, tp):
    m = _llm.get(model)
    n = _parallel.check_tp_degree(m, tp)
    return _parallel.shard(m, n) if n > 1 else m


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
      holds its own copy of the weights. vLLM's default u is 0.92 in current
      releases (`VLLM_GPU_MEMORY_UTILIZATION`), 0.9 before; here no u is assumed.
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


def paging_gain(model, accelerator, lengths, *, max_len, block_size=DEFAULT_BLOCK_SIZE,
                context=None, dtype="fp16", kv_dtype=None, compute_dtype=None,
                achievable=False, kv_cache_bytes=None) -> dict:
    """Chapter *Serving LLMs*: what paging the KV cache buys in decode throughput, not
    only in batch. Sequences ending at `lengths` tokens (an array) fit the cache
    (`kv_cache_budget`, or `kv_cache_bytes`) `max_len` tokens each when reserved
    contiguously, or their blocks' worth each when paged (`kv_memory_use`); a decode
    step of each batch, every sequence at `context` cached tokens (default the mean
    length: the cache full), is timed by `simulate_llm`'s step model. A bigger batch
    shares the weight read but adds its own KV reads, so the throughput grows by less
    than the batch. Returns `batch_contiguous`, `batch_paged`, `batch_ratio`, the decode
    tokens/s of each (`tokens_per_s_contiguous`, `tokens_per_s_paged`) and
    `throughput_gain` (their ratio)."""
    m, acc = _llm.get(model), _hardware.get(accelerator)
    use = kv_memory_use(lengths, max_len=max_len, block_size=block_size)
    _, kv, _ = _dtypes.formats(dtype, kv_dtype, compute_dtype)
    per_token = _llm.kv_cache_bytes_per_token(m, kv)
    budget = kv_cache_budget(m, acc, dtype) if kv_cache_bytes is None else _v.positive(
        "kv_cache_bytes", kv_cache_bytes)
    n = use["sequences"]
    c = use["tokens"] / n if context is None else _v.non_negative("context", context)
    batches = {"contiguous": float(budget // (max_len * per_token)),
               "paged": float(budget // (use["paged_reserved"] / n * per_token))}
    if batches["contiguous"] < 1:
        raise ValueError(f"{m.name}'s cache on {acc.name} ({budget / 1e9:.3g} GB) holds no "
                         f"sequence of max_len={max_len:,} tokens")
    timer = _EngineStep(m, acc, dtype, kv_dtype, compute_dtype,
                        efficiency=_achievable.as_efficiency(achievable))
    out = {}
    for k, b in batches.items():
        z = np.array([1.0, b, b, b * (c + 1), b * c, b * (c + 1)])  # llm.STEP_AGGREGATES
        out[f"batch_{k}"] = b
        out[f"tokens_per_s_{k}"] = b / float(timer.many(z[:, None])[0])
    out["batch_ratio"] = out["batch_paged"] / out["batch_contiguous"]
    out["throughput_gain"] = out["tokens_per_s_paged"] / out["tokens_per_s_contiguous"]
    return out


class _EngineStep(_llm.StepCost):
    """`llm.StepCost` as an engine runs the step: `compute_dtype` (W8A8: "fp8"/"int8";
    W4A4: "fp4") sets the peak the matmuls run at; `tp` > 1 times one device's shard
    (`parallel.shard`: an MoE model's experts split 1/N in width) and adds its 2 x layers
    + 1 all-reduces of [tokens, d_model] (the ceiling, a lower bound on time:
    `parallel.allreduce_floor_s`, each GPU sending and receiving the message once at
    NCCL's bus bandwidth for the link, no latency; the achievable model: NCCL's fastest
    ring with its latency, `parallel.interconnect_allreduce_time`). `efficiency` (an
    `achievable.Efficiency`; default the ceiling) derates each row's peak and bandwidth
    (`achievable.row_rates`) and adds the step's overheads (`achievable.overheads`)."""

    def __init__(self, model, accelerator, dtype="fp16", kv_dtype=None, compute_dtype=None,
                 tp=1, efficiency=None, interconnect=None):
        m = _llm.get(model)
        acc = _hardware.get(accelerator)
        self.tp = _parallel.check_tp_degree(m, tp)
        self.eff = eff = _achievable.CEILING if efficiency is None else efficiency
        weight, _, compute = _dtypes.formats(dtype, kv_dtype, compute_dtype)
        super().__init__(_parallel.shard(m, self.tp) if self.tp > 1 else m, acc, dtype,
                         kv_dtype=kv_dtype, compute_dtype=compute_dtype,
                         rates=lambda rows: _achievable.row_rates(rows, acc, eff, weight))
        self.n_layers = m.n_layers
        # Tensor parallelism: the all-reduces of each step, by its token count.
        self.n_allreduces = 2 * m.n_layers + 1 if self.tp > 1 else 0
        # The ceiling all-reduces in the compute format; engines in 16 bits (the matmuls'
        # output), whatever the matmuls' input format: parallel's rule.
        self.message_per_token = m.d_model * _parallel.tp_message_bytes_per_value(compute, eff)
        self._comm = {}
        if self.tp > 1:
            ic = (_hardware.interconnect_for(acc) if interconnect is None
                  else _hardware.get_interconnect(interconnect))

            def one(tokens):
                s = tokens * self.message_per_token
                if eff.is_ceiling:
                    return _parallel.allreduce_floor_s(s, self.tp, ic)
                return _parallel.interconnect_allreduce_time(s, self.tp, ic)
            self._one = one

    def comm_s(self, tokens):
        """Seconds of one step's all-reduces for steps of `tokens` new tokens (array)."""
        t = np.atleast_1d(np.asarray(tokens, dtype=float))
        if not self.n_allreduces:
            return np.zeros(t.shape)
        out = np.empty(t.shape)
        for i, x in enumerate(t):
            if x not in self._comm:
                self._comm[x] = self.n_allreduces * self._one(float(x))
            out[i] = self._comm[x]
        return out

    def many(self, z):
        """Seconds of several steps at once: `z` holds one step's aggregates a column
        (`llm.step_aggregates`): the shard's rows, the all-reduces, the overheads."""
        z = np.asarray(z, dtype=float)
        device = super().many(z) + self.comm_s(z[1])
        return _achievable.overheads(device, self.n_layers, self.eff)


def tp_step_s(model, accelerator, tp, new_tokens, context=0, logits=None, *,
              dtype="fp16", kv_dtype=None, compute_dtype=None, interconnect=None,
              achievable=False, parts=False):
    """Chapter *Beyond one GPU*: seconds of one forward step of a tensor-parallel group of
    `tp` GPUs, as `simulate_llm` and `offline_throughput` time it: sequence i brings
    `new_tokens[i]` tokens on top of `context[i]` cached ones (arrays, or numbers for
    one sequence), `logits[i]` rows of the LM head (default: one each). One device's
    shard (`parallel.shard`) on the per-operation roofline, plus 2 x layers + 1
    all-reduces of [tokens, d_model].

    `achievable=False`: the ceiling, a lower bound on the step's time: the roofline,
    and each all-reduce at `parallel.allreduce_floor_s` (NCCL's bus bandwidth for the
    link, no latency, messages in the compute format). True (or an
    `achievable.Efficiency`): the achievable model (derated rates, kernel gaps, the
    step's fixed cost) and NCCL's fastest ring with its latency
    (`parallel.interconnect_allreduce_time`), messages in 16 bits. `parallel`'s
    `tp_decode_step_time` prices NCCL's latency in both, so it is a model, not this
    bound. With `parts=True` returns {"total_s", "comm_s", "n_allreduces"}."""
    q = np.atleast_1d(_v.positive("new_tokens", new_tokens, integer=True, array=True))
    c = np.atleast_1d(_v.non_negative("context", context, integer=True, array=True))
    lg = (np.ones_like(q) if logits is None else
          np.atleast_1d(_v.non_negative("logits", logits, integer=True, array=True)))
    q, c, lg = np.broadcast_arrays(q.astype(float), c.astype(float), lg.astype(float))
    if np.any(lg > q):
        raise ValueError("logits must be at most new_tokens for each sequence")
    timer = _EngineStep(model, accelerator, dtype, kv_dtype, compute_dtype, tp=tp,
                        efficiency=_achievable.as_efficiency(achievable),
                        interconnect=interconnect)
    z = _llm.step_aggregates(q, c, lg)
    total = float(timer.many(z[:, None])[0])
    if not math.isfinite(total):
        raise ValueError(f"{_hardware.get(accelerator).name} has no peak for "
                         f"{_dtypes.formats(dtype, kv_dtype, compute_dtype)[2]} in the catalogue")
    if not parts:
        return total
    return {"total_s": total, "comm_s": float(timer.comm_s([q.sum()])[0]),
            "n_allreduces": timer.n_allreduces}


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
    m, acc = _llm.get(model), _hardware.get(accelerator)
    max_batch = _v.count("max_batch", max_batch, maximum=MAX_BATCH)
    chunk = None if prefill_chunk is None else _v.count("prefill_chunk", prefill_chunk,
                                                        maximum=MAX_TOKENS)
    max_prefill = None if max_prefill_tokens is None else _v.count(
        "max_prefill_tokens", max_prefill_tokens, maximum=MAX_TOKENS)
    block = _v.count("block_size", block_size, maximum=MAX_TOKENS)
    prefix = _v.count("prefix_tokens", prefix_tokens, minimum=0, maximum=MAX_TOKENS)
    _, kv, _ = _dtypes.formats(dtype, kv_dtype, compute_dtype)
    part = _shard(m, tp)
    budget = kv_cache_budget(part, acc, dtype) if kv_cache_bytes is None else _v.positive(
        "kv_cache_bytes", kv_cache_bytes)
    block_bytes = block * _llm.kv_cache_bytes_per_token(part, kv)
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
    timer = _EngineStep(m, acc, dtype, kv_dtype, compute_dtype, tp=tp,
                        efficiency=_achievable.as_efficiency(achievable),
                        interconnect=interconnect)
    if not math.isfinite(timer([1], [0], [1])):
        fmt = dtype if compute_dtype is None else f"{dtype} (computing in {compute_dtype})"
        raise ValueError(f"{acc.name} has no peak for {fmt} in the catalogue: no roofline "
                         f"time for {m.name} in that format")
    return a, P, O, timer, dict(max_batch=max_batch, chunk=chunk, blocks_total=blocks_total,
                                block=block, prefix=prefix, max_prefill=max_prefill)


def simulate_llm(arrivals, prompt_tokens, output_tokens, model, accelerator, *, max_batch,
                 prefill_chunk=None, dtype="fp16", kv_dtype=None, compute_dtype=None, tp=1,
                 achievable=False, interconnect=None,
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
    `dtypes.formats`); `tp` > 1 is one tensor-parallel group of `tp` GPUs (each holds
    `parallel.shard` and its part of the KV cache; every step adds its all-reduces over
    `interconnect`, default the GPU's NVLink). `achievable=False` times steps on the
    ceiling (the roofline); True on the fitted achievable model (`achievable.FITTED`:
    derated peaks and bandwidth, per-step and per-kernel overheads); or pass an
    `achievable.Efficiency`.
    """
    a, P, O, timer, kw = _llm_setup(arrivals, prompt_tokens, output_tokens, model,
                                    accelerator, max_batch, prefill_chunk, dtype, kv_dtype,
                                    block_size, kv_cache_bytes, prefix_tokens,
                                    max_prefill_tokens, compute_dtype, tp, achievable,
                                    interconnect)
    server = _LLMServer(a, P, O, timer, log=bool(return_steps), **kw).run()
    df = server.frame()
    return (df, server.steps()) if return_steps else df


def offline_throughput(model, accelerator, input_tokens, output_tokens, *, dtype="fp16",
                       kv_dtype=None, compute_dtype=None, tp=1, ep=1, achievable=False,
                       max_num_seqs=None, max_num_batched_tokens=None,
                       gpu_memory_utilization=None, block_size=DEFAULT_BLOCK_SIZE,
                       interconnect=None) -> dict:
    """What `trtllm-bench throughput` and `vllm bench throughput` report: output tokens/s
    under maximum load (every request queued at once, all of `input_tokens` prompt and
    `output_tokens` output tokens), in total and per GPU, for one tensor-parallel group
    of `tp` GPUs (`tp=1`: one GPU).

    The steady state of a continuous-batching server that mixes prefill and decode in
    its steps: B sequences run; each occupies the batch for `output_tokens` steps (its
    prefill, which gives its first token, then O - 1 decodes), so an average step
    prefills B / O prompts and decodes B (O - 1) / O sequences at the mean context
    I + (O - 2) / 2, and yields B output tokens. Its time is `simulate_llm`'s step model
    (`llm.StepCost`: the per-operation roofline of the shard, the all-reduces, and with
    `achievable` the derated rates and overheads) at those average aggregates. For the
    ceiling of a dense model this is a lower bound on the mean step: by convexity of the
    roofline's max, no schedule of uneven steps is faster on average than the averaged
    step.

    B is the largest batch the KV cache holds: a sequence holds I + (O - 1) / 2 tokens on
    average over its life (rounded up to `block_size` blocks in the achievable model),
    so B = KV budget / (that x KV bytes a token on one GPU), capped by `max_num_seqs`
    (vLLM's --max-num-seqs, TensorRT-LLM's max_batch_size; None: no cap) and by
    `max_num_batched_tokens` (a token budget per step: B (I + O - 1) / O <= it). The
    KV budget: for the ceiling, the card's whole memory less one GPU's weights (no
    reserve); for the achievable model, vLLM's `gpu_memory_utilization` (`kv_cache_budget`;
    default `ACHIEVABLE_GPU_MEMORY_UTILIZATION`, 0.9: vLLM's default before it became
    0.92, the value the model was fitted with). Throughput grows with B (the weights are read once per step),
    so the largest B that fits is the best.

    `compute_dtype`: W8A8 ("fp8", "int8") or W4A4 ("fp4") runs the matmuls at that
    format's peak. A mixture-of-experts model runs too (its average step reads the
    experts its routed tokens touch, `llm.experts_touched`; under `tp` each expert is
    split 1/tp in width, vLLM's default); as that count is concave in the step's tokens,
    the averaged step's experts are an upper bound on the mean step's, by at most what
    a few more touched experts read once the batch touches most of them. `ep` > 1
    (expert parallelism across a serving run) is not modelled: ValueError pointing to
    `parallel.ep_decode_breakdown`, which prices one step of it. Returns a dict: `batch`, `step_s`,
    `tokens_per_s` (the group's output tokens/s), `tokens_per_s_per_gpu`,
    `requests_per_s`, `limited_by` ("memory", "max_num_seqs" or
    "max_num_batched_tokens"), `prefill_tokens_per_step`, `decode_tokens_per_step`,
    `comm_s` (all-reduces a step), `kv_budget_bytes` (per GPU), `gpus`."""
    m, acc = _llm.get(model), _hardware.get(accelerator)
    i = _v.count("input_tokens", input_tokens, maximum=MAX_TOKENS)
    o = _v.count("output_tokens", output_tokens, maximum=MAX_TOKENS)
    e = _v.count("ep", ep, maximum=1 << 16)
    if e != 1:
        what = ("a dense model has no experts to spread" if not m.is_moe else
                "expert parallelism is modelled for one decode or prefill step "
                "(parallel.ep_decode_breakdown, parallel.moe_layouts), not for a "
                "serving run")
        raise ValueError(f"ep={e}: {what}; {m.name} runs here with ep=1 (use tp, which "
                         f"splits each expert's width: parallel.shard)")
    eff = _achievable.as_efficiency(achievable)
    part = _shard(m, tp)
    n = _v.count("tp", tp, maximum=1 << 16)
    block = _v.count("block_size", block_size, maximum=MAX_TOKENS)
    _, kv, _ = _dtypes.formats(dtype, kv_dtype, compute_dtype)
    kv_token = _llm.kv_cache_bytes_per_token(part, kv)
    if gpu_memory_utilization is None and eff.is_ceiling:
        budget = kv_cache_budget(part, acc, dtype, reserve_bytes=0)
    else:
        u = (ACHIEVABLE_GPU_MEMORY_UTILIZATION if gpu_memory_utilization is None
             else gpu_memory_utilization)
        budget = kv_cache_budget(part, acc, dtype, gpu_memory_utilization=u)
    held = i + (o - 1) / 2
    if not eff.is_ceiling:
        held = math.ceil(held / block) * block + block / 2  # whole blocks, the last half-full
    if budget < kv_token * (i + o):
        raise ValueError(
            f"{m.name} on {n} x {acc.name} ({dtype}): {budget / 1e9:.3g} GB of KV cache per "
            f"GPU cannot hold one sequence of {i:,} + {o:,} tokens "
            f"({kv_token * (i + o) / 1e9:.3g} GB): raise tp or shorten the sequence")
    limits = {"memory": budget / (kv_token * held)}
    if max_num_seqs is not None:
        limits["max_num_seqs"] = _v.count("max_num_seqs", max_num_seqs, maximum=MAX_BATCH)
    if max_num_batched_tokens is not None:
        cap = _v.count("max_num_batched_tokens", max_num_batched_tokens, maximum=MAX_TOKENS)
        limits["max_num_batched_tokens"] = cap * o / (i + o - 1)
    limited_by = min(limits, key=limits.get)
    b = float(limits[limited_by])
    timer = _EngineStep(m, acc, dtype, kv_dtype, compute_dtype, tp=n, efficiency=eff,
                        interconnect=interconnect)
    prefills, decodes = b / o, b * (o - 1) / o
    context = i + (o - 2) / 2
    z = np.array([1.0, prefills * i + decodes, b,       # llm.STEP_AGGREGATES
                  prefills * i * (i + 1) / 2 + decodes * (context + 1), decodes * context,
                  prefills * i * i + decodes * (context + 1)])
    step = float(timer.many(z[:, None])[0])
    if not math.isfinite(step):
        raise ValueError(f"{acc.name} has no peak for {dtype} (compute "
                         f"{_dtypes.formats(dtype, kv_dtype, compute_dtype)[2]}) in the "
                         f"catalogue")
    return {"model": m.name, "accelerator": acc.name, "gpus": n, "batch": b,
            "limited_by": limited_by, "step_s": step, "tokens_per_s": b / step,
            "tokens_per_s_per_gpu": b / step / n, "requests_per_s": b / o / step,
            "prefill_tokens_per_step": prefills * i, "decode_tokens_per_step": decodes,
            "comm_s": float(timer.comm_s(z[1])[0]), "kv_budget_bytes": budget}


def simulate_disaggregated(arrivals, prompt_tokens, output_tokens, model, accelerator, *,
                           max_batch, prefill_gpus=1, decode_gpus=1, decode_accelerator=None,
                           dtype="fp16", kv_dtype=None, transfer_bytes_per_s=None,
                           block_size=DEFAULT_BLOCK_SIZE, max_prefill_tokens=None,
                           achievable=False):
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


def slo_attainment(df, *, ttft_slo, tpot_slo, itl_slo=None) -> float:
    """The fraction of requests that met both SLOs: TTFT <= `ttft_slo` and TPOT <=
    `tpot_slo` (s; a one-token reply has no TPOT and meets that one). DistServe's
    "SLO attainment". With `itl_slo` (s), an inter-token objective as well: the
    request's longest gap between two tokens (`max_gap`) must not exceed it, which a
    mean TPOT lets through (a prefill that stalls a decode for 300 ms in a 500-token
    reply adds only 0.6 ms to its TPOT). Stricter than a p99 of all gaps: one stall
    fails the request."""
    cols = {"ttft", "tpot"} | ({"max_gap"} if itl_slo is not None else set())
    check_frame(df, cols, "simulate_llm")
    ttft = _v.positive("ttft_slo", ttft_slo)
    tpot = _v.positive("tpot_slo", tpot_slo)
    t = df["ttft"].to_numpy(dtype=float)
    p = df["tpot"].to_numpy(dtype=float)
    ok = (t <= ttft) & (np.isnan(p) | (p <= tpot))
    if itl_slo is not None:
        g = df["max_gap"].to_numpy(dtype=float)
        ok &= np.isnan(g) | (g <= _v.positive("itl_slo", itl_slo))
    return float(np.count_nonzero(ok) / len(df))


def summarize_llm(df, *, ttft_slo=None, tpot_slo=None, itl_slo=None) -> dict:
    """p50/p99 of TTFT, TPOT and the worst inter-token gap (s), throughput (requests/s
    and output tokens/s, over the span from the first arrival to the last finish), the
    requests preempted, and with both SLOs the attainment (`slo_attainment`; with
    `itl_slo` too, the inter-token objective on each request's `max_gap`)."""
    check_frame(df, set(LLM_COLUMNS), "simulate_llm")
    if (ttft_slo is None) != (tpot_slo is None):
        raise ValueError("give both ttft_slo and tpot_slo (s), or neither")
    if itl_slo is not None and ttft_slo is None:
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
    if ttft_slo is not None:
        out["slo_attainment"] = slo_attainment(df, ttft_slo=ttft_slo, tpot_slo=tpot_slo,
                                               itl_slo=itl_slo)
    return out


def goodput(serve, n, *, ttft_slo, tpot_slo, itl_slo=None, attainment=0.9, seed=0,
            rel_tol=0.02, rate=None) -> float:
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
    busy should stay below 1), and pass a longer trace or other seeds when it is close."""
    serve = _v.callable_("serve", serve)
    n = check_trace_length("n", n)
    target = _v.fraction("attainment", attainment)
    ttft, tpot = _v.positive("ttft_slo", ttft_slo), _v.positive("tpot_slo", tpot_slo)
    itl = None if itl_slo is None else _v.positive("itl_slo", itl_slo)
    rel_tol = check_rel_tol(rel_tol)
    unit = poisson_arrivals(1.0, n, seed)

    def run(arrivals):
        df = serve(arrivals)
        check_frame(df, {"ttft", "tpot", "latency"}, "simulate_llm")
        return df

    def ok(r):
        return slo_attainment(run(unit / r), ttft_slo=ttft, tpot_slo=tpot,
                              itl_slo=itl) >= target

    if rate is None:
        # A light load: requests far enough apart that each runs alone.
        lone = float(run(unit * 1e6)["latency"].max())
        lo = 0.01 / lone
    else:
        lo = _v.positive("rate", rate)
    if not ok(lo):
        if rate is None:
            return 0.0
        for _ in range(MAX_SEARCH_STEPS):  # a given rate too high: come down
            lo /= 4
            if ok(lo):
                break
        else:
            return 0.0
    hi = lo * 4
    for _ in range(MAX_SEARCH_STEPS):
        if not ok(hi):
            break
        lo, hi = hi, hi * 4
    else:
        raise ValueError("attainment never failed: the server kept up at every rate "
                         "tried; check that serve uses the arrivals it is given")
    return bisect_rate(ok, lo, hi, rel_tol)


# Names before the seconds suffix became `_s` everywhere (issue 25).
tp_step_seconds = tp_step_s  # deprecated alias, kept for one release
