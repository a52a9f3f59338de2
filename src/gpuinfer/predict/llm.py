"""The time of a catalogue model's forward step on a device, and what follows from it:
decode and prefill seconds, the tokens/s ceilings, the largest batch and context that fit,
and the fraction of the machine a measured speed used.

Chapters: *The roofline model*, *Decoding is a weight read*, *Serving LLMs*, *Mixtures of
experts*. SI units.

A forward step is a table of operations (`gpuinfer.predict.step_model`: each one's FLOPs and
bytes), and its time is the sum of each operation's own roofline, max(bytes / bandwidth,
FLOPs / peak) (`roofline.evaluate`): the kernels run one after another, so attention's
KV-cache reads do not hide under the matmuls' arithmetic (Pope et al. 2023; the JAX
scaling book's inference chapter; LLM-Viewer). `forward_step_breakdown` and
`decode_step_breakdown` show the table; `gpuinfer.predict.step_cost` times it in closed form for
simulators.

The models' shapes are `gpuinfer.predict.architectures`', the operations' FLOPs and bytes
`gpuinfer.predict.step_model`'s, the closed-form step cost `gpuinfer.predict.step_cost`'s.

These are ceilings, not predictions of a measured speed: `gpuinfer.predict.achievable` times the
same tables on derated rates, with a step's overheads, for the numbers decisions rest on.
"""

from __future__ import annotations

import math

import numpy as np

from gpuinfer import dtypes as _dtypes
from gpuinfer import hardware as _hardware
from gpuinfer.predict import roofline as _roofline
from gpuinfer.predict import search as _search
from gpuinfer import validate as _v
from gpuinfer.predict.architectures import get
from gpuinfer.predict.step_cost import (step_timer)
from gpuinfer.predict.step_model import (StepModel,
                                         kv_cache_bytes_per_token,
                                         step_weight_bytes, weight_bytes)

#: Bytes of device memory a server cannot give to weights or the KV cache, unless told:
#: the CUDA context (a few hundred MB) and the framework's workspace (cuBLAS, NCCL,
#: allocator slack). An illustrative setting, not a measurement: real servers hold back
#: more for activations (vLLM's default gpu_memory_utilization, 0.9 in earlier releases and
#: 0.92 in current ones, leaves 8-10% unused).
DEFAULT_RESERVE_BYTES = 2**30


# --- ceilings from the weights alone ---------------------------------------------------

def _is_number(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def weight_read_ceiling(model, accelerator, *args, **kwargs):
    """Chapter *The roofline model*: tokens/s across the batch if a decode step took only
    the time to read its weights: batch x bandwidth / `step_weight_bytes(model, dtype,
    batch)`, called as weight_read_ceiling(model, accelerator, batch=1, dtype="fp16") like
    every other function here. It counts every layer's matmul weights and the LM head
    (not the embedding table, which a step gathers a row of); for an MoE model the
    routed experts the batch touches (`experts_touched`: at batch 1, k per MoE layer, the
    active weights), so its ceiling does not grow in proportion to the batch.
    Vectorised over `batch`.

    The formula form, weight_read_ceiling(n_params, bytes_per_param, bandwidth,
    batch=1), still works (numbers first); it is `weight_read_ceiling_from`."""
    if _is_number(model):
        return weight_read_ceiling_from(model, accelerator, *args, **kwargs)
    if _is_number(accelerator) or isinstance(accelerator, np.ndarray):
        raise TypeError(f"weight_read_ceiling(model, accelerator, batch=1, dtype='fp16') "
                        f"takes a catalogue model and device; got model={model!r}, "
                        f"accelerator={accelerator!r}. For numbers use "
                        f"weight_read_ceiling_from(n_params, bytes_per_param, bandwidth)")
    return _weight_read_ceiling_model(model, accelerator, *args, **kwargs)


def _weight_read_ceiling_model(model, accelerator, batch=1, dtype="fp16"):
    acc = _hardware.get(accelerator)
    b = _v.positive("batch", batch, integer=True, array=True)
    return _v.scalar_or_array(b * _roofline.bandwidth_or_nan(acc)
                              / np.asarray(step_weight_bytes(model, dtype, b)))


def weight_read_ceiling_from(n_params, bytes_per_param, bandwidth, batch=1):
    """Tokens/s if every decode step reads every weight once and nothing else counts:
    batch x bandwidth / (n_params x bytes_per_param). Vectorised over `batch`.

    7e9 fp16 parameters (14 GB) at 2 TB/s: 142.9 tokens/s; batch 16: 2,286 tokens/s.
    (For a catalogue model on a catalogue device: `weight_read_ceiling`.)
    """
    n = _v.positive("n_params", n_params)
    b_per = _v.positive("bytes_per_param", bytes_per_param)
    bw = _v.positive("bandwidth", bandwidth)
    b = _v.positive("batch", batch, integer=True, array=True)
    return _v.scalar_or_array(b * bw / (n * b_per))


# --- a step's table on a device -------------------------------------------------------------

def _table(terms):
    import pandas as pd

    rows = {name: {"flops": float(f), "bytes": float(b), "dtype": d}
            for name, (f, b, d) in terms.items()}
    return pd.DataFrame.from_dict(rows, orient="index")


def breakdown(terms, accelerator):
    """The operations table of `terms` ({operation: (FLOPs, bytes, dtype)}, as
    `StepModel.step_terms` returns) timed on `accelerator`'s roofline
    (`roofline.evaluate`: `intensity`, `memory_s`, `compute_s`, `seconds`, `bound`), with
    `share`, each row's fraction of the summed seconds (NaN when the step takes none)."""
    out = _roofline.evaluate(_table(terms), accelerator)
    total = out["seconds"].sum()
    out["share"] = out["seconds"] / total if total > 0 else np.nan
    return out


def _decode_args(batch, context):
    b = _v.positive("batch", batch, integer=True, array=True)
    c = _v.non_negative("context", context, integer=True, array=True)
    _v.same_shape(batch=b, context=c)
    return b, c


def decode_step_breakdown(model, accelerator, batch=1, context=0, dtype="fp16", *,
                          kv_dtype=None, compute_dtype=None):
    """Chapter *Decoding is a weight read*: one decode step (one new token for each of
    `batch` sequences with `context` cached tokens) as a table of operations on the
    roofline. Returns a DataFrame indexed by operation (`embedding`, `linear`,
    `attention`, `lm_head`; an MoE model adds `router`, `shared_experts` and `experts`
    before the LM head: `operations(model)`) with `flops`, `bytes`, `dtype` (the format it computes in),
    `intensity` (FLOP/byte), `memory_s`, `compute_s`, `seconds` (that row's own
    roofline: the larger), `bound` and `share` (of the step's time). The step takes
    `seconds.sum()`. `batch` and `context` are single numbers here; `decode_step_s`
    and `decode_ceiling` take arrays."""
    b = _v.count("batch", batch, maximum=1 << 30)
    c = _v.count("context", context, minimum=0, maximum=1 << 30)
    sm = StepModel(model, dtype, kv_dtype, compute_dtype)
    return breakdown(sm.decode_terms(b, c), accelerator)


def decode_step_s(model, accelerator, batch=1, context=0, dtype="fp16", *,
                     kv_dtype=None, compute_dtype=None):
    """Roofline seconds of one decode step: the sum over its operations of each one's
    max(bytes / bandwidth, FLOPs / peak) (see `decode_step_breakdown`). Vectorised over
    `batch` and `context`."""
    b, c = _decode_args(batch, context)
    sm = StepModel(model, dtype, kv_dtype, compute_dtype)
    return _roofline.step_s(sm.decode_terms(b, c), accelerator)


def decode_ceiling(model, accelerator, batch=1, context=0, dtype="fp16", *,
                   kv_dtype=None, compute_dtype=None):
    """Total tokens/s across the batch under the per-operation roofline. Divide by
    `batch` for tokens/s per sequence. Vectorised over batch and context."""
    b, c = _decode_args(batch, context)
    t = decode_step_s(model, accelerator, b, c, dtype, kv_dtype=kv_dtype,
                         compute_dtype=compute_dtype)
    return _v.scalar_or_array(b / t)


def decode_step_time_overlapped(model, accelerator, batch=1, context=0, dtype="fp16", *,
                                kv_dtype=None, compute_dtype=None):
    """What a decode step would take if every operation's traffic overlapped every
    other's arithmetic: max(all bytes / bandwidth, all FLOPs / peak), pooled over the
    step. No real step runs like this (attention's KV reads and the matmuls are separate
    kernels); it is a lower bound on `decode_step_s`, shown to explain why the pooled
    model used to be too optimistic at large batches. Vectorised."""
    acc = _hardware.get(accelerator)
    b, c = _decode_args(batch, context)
    sm = StepModel(model, dtype, kv_dtype, compute_dtype)
    terms = sm.decode_terms(b, c)
    flops = sum(f for f, _, _ in terms.values())
    nbytes = sum(x for _, x, _ in terms.values())
    return _roofline.op_time_s(flops, nbytes, _roofline.peak(acc, sm.compute),
                                _roofline.bandwidth(acc))


def decode_step_bytes(model, batch=1, context=0, dtype="fp16", kv_dtype=None):
    """DRAM bytes of one decode step, summed over its operations: the matmul weights
    once, the batch's KV caches, the activations, the gathered embedding rows."""
    b, c = _decode_args(batch, context)
    terms = StepModel(model, dtype, kv_dtype).decode_terms(b, c)
    return _v.scalar_or_array(sum(x for _, x, _ in terms.values()))


def decode_step_flops(model, batch=1, context=0):
    """FLOPs of one decode step: 2 per matmul weight per sequence (the embedding is
    gathered, not multiplied), plus attention: 4 x layers x query heads x head_dim per
    (query, key) pair, context + 1 keys per sequence (the cache and the token itself)."""
    b, c = _decode_args(batch, context)
    terms = StepModel(model).decode_terms(b, c)
    return _v.scalar_or_array(sum(f for f, _, _ in terms.values()))


def decode_intensity(model, batch=1, context=0, dtype="fp16", kv_dtype=None):
    """The whole step's FLOPs over its bytes (FLOP/byte): about `batch` for fp16 weights
    at short context (twice that for int8 weights). An average over operations whose
    own intensities differ: the breakdown's `intensity` column shows each."""
    return _v.scalar_or_array(np.asarray(decode_step_flops(model, batch, context))
                              / decode_step_bytes(model, batch, context, dtype, kv_dtype))


def _affine_root(f1, f2, x1, x2):
    """Where the straight line through (x1, f1), (x2, f2) crosses zero (inf if never)."""
    slope = (f2 - f1) / (x2 - x1)
    if not slope > 0:
        return math.inf
    return x1 - f1 / slope


def compute_bound_batch(model, accelerator, dtype="fp16", *, kv_dtype=None,
                        compute_dtype=None) -> float:
    """The smallest batch at which a decode step's weight matmuls (`linear` and
    `lm_head`, and an MoE model's `shared_experts` and `experts`) are all
    compute-bound: about the ridge point for fp16 weights, half of it for int8 and a
    quarter for int4 weight-only formats (each weight byte then serves 2 or 4 times the
    FLOPs). Finite, and the same at every context: attention, whose intensity stays near
    n_heads / n_kv_heads FLOP per byte, never turns compute-bound at decode.
    `roofline.MissingPeak` if the device has no peak for the compute format.

    For an MoE model the routed experts decide it, at about ridge x E / k: a batch of B
    tokens sends B x k / E tokens to each expert (uniform routing), and once the batch
    touches every expert the expert matmuls read all E experts' weights to do B x k
    experts' worth of FLOPs, so their intensity is about 2 B k / (E x bytes per weight),
    E/k times less than a dense matmul's at the same batch (DeepSeek-V3, 256/8: 32x;
    Mixtral, 8/2: 4x). The exact batch, found here by search, differs: the activations
    each routed token reads and writes lower the experts' intensity (most for narrow
    experts: Qwen3-30B-A3B's 768-wide ones put it 1.7x above ridge x E / k on an H100),
    and before the batch touches every expert it reads fewer bytes.""" 
    acc = _hardware.get(accelerator)
    sm = StepModel(model, dtype, kv_dtype, compute_dtype)
    peak = _roofline.peak(acc, sm.compute)
    bw = _roofline.bandwidth(acc)
    worst = 0.0
    # The router (d_model x E, E of 8 to 256 outputs) is left out: its activations, not
    # its weights, are most of its bytes at a large batch, so like attention it stays
    # memory-bound; it is under 1% of a step.
    for op in ("linear", "lm_head", "shared_experts"):
        if op == "lm_head" and sm.m.vocab_size == 0:
            continue
        if op not in sm.decode_terms(1.0, 0):
            continue
        # compute_s - memory_s is affine in the batch: find where it crosses zero.
        f = []
        for b in (1.0, 2.0):
            flops, nbytes, _ = sm.decode_terms(b, 0)[op]
            f.append(flops / peak - nbytes / bw)
        worst = max(worst, _affine_root(f[0], f[1], 1.0, 2.0))
    out = float(max(1, math.floor(worst) + 1)) if math.isfinite(worst) else math.inf
    if sm.n_experts and math.isfinite(out):
        out = max(out, _experts_compute_bound(sm, peak, bw))
    return out


def _experts_compute_bound(sm, peak, bw) -> float:
    """The first batch at which the `experts` row is compute-bound. Its bytes grow as
    E(1 - (1 - k/E)^B) (concave) while its FLOPs grow as B, so compute_s - memory_s falls
    and then rises through zero once: double the batch until it is, then bisect."""
    def bound(b):
        flops, nbytes, _ = sm.moe_terms(float(b))["experts"]
        return flops / peak > nbytes / bw
    if bound(1):
        return 1.0
    hi = 2
    while not bound(hi):
        hi *= 2
        if hi > 1 << 40:
            return math.inf
    lo = hi // 2  # not bound at lo, bound at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if bound(mid) else (mid, hi)
    return float(hi)


def attention_dominant_context(model, accelerator, batch=None, dtype="fp16", *,
                               kv_dtype=None, compute_dtype=None) -> float:
    """Chapter *Decoding is a weight read*: the context (cached tokens per sequence) at
    which a decode step's attention takes as long as its weight matmuls, at `batch`
    (default: `compute_bound_batch`, where the matmuls stop being a weight read). Beyond
    it the KV cache, which batching cannot share, is most of the step: decode speed is
    bought with KV bytes (fewer KV heads, a quantised cache), not with a bigger batch."""
    acc = _hardware.get(accelerator)
    b = compute_bound_batch(model, acc, dtype, kv_dtype=kv_dtype, compute_dtype=compute_dtype) \
        if batch is None else _v.count("batch", batch, maximum=1 << 30)
    if not math.isfinite(b):
        return math.nan
    diff = []
    for c in (0.0, 1.0):
        t = breakdown(StepModel(model, dtype, kv_dtype, compute_dtype).decode_terms(b, c),
                       acc)["seconds"]
        weights = t["linear"] + t["lm_head"]
        for op in ("router", "shared_experts", "experts"):
            weights = weights + (t[op] if op in t else 0.0)
        diff.append(t["attention"] - weights)
    return _affine_root(diff[0], diff[1], 0.0, 1.0)


def max_batch(model, accelerator, context, dtype="fp16", *, kv_dtype=None,
              reserve_bytes=None) -> int:
    """Largest batch whose weights plus KV cache (`context` tokens per sequence) fit in
    the accelerator's memory (the bytes the card has) less `reserve_bytes` (default
    `DEFAULT_RESERVE_BYTES`: the CUDA context and workspace). 0 if the weights alone do
    not fit."""
    m, acc = get(model), _hardware.get(accelerator)
    _, kv, _ = _dtypes.formats(dtype, kv_dtype)
    c = _v.count("context", context, maximum=1 << 30)
    reserve = DEFAULT_RESERVE_BYTES if reserve_bytes is None else _v.non_negative(
        "reserve_bytes", reserve_bytes)
    free = acc.memory_bytes - reserve - weight_bytes(m, dtype)
    if free <= 0:
        return 0
    return int(free // (c * kv_cache_bytes_per_token(m, kv)))


def max_context(model, accelerator, batch=1, dtype="fp16", *, kv_dtype=None,
                reserve_bytes=None) -> int:
    """The longest context (tokens per sequence) at which `batch` sequences fit in the
    accelerator's memory beside the weights, less the reserve (`max_batch`'s
    arithmetic solved for the context). 0 if the weights alone do not fit."""
    m, acc = get(model), _hardware.get(accelerator)
    b = _v.count("batch", batch, maximum=1 << 30)
    _, kv, _ = _dtypes.formats(dtype, kv_dtype)
    reserve = DEFAULT_RESERVE_BYTES if reserve_bytes is None else _v.non_negative(
        "reserve_bytes", reserve_bytes)
    free = acc.memory_bytes - reserve - weight_bytes(m, dtype)
    if free <= 0:
        return 0
    return int(free // (b * kv_cache_bytes_per_token(m, kv)))


def max_batch_within(model, accelerator, context, step_s, dtype="fp16", *, kv_dtype=None,
                     compute_dtype=None, reserve_bytes=None) -> int:
    """The largest batch whose decode step (every sequence at `context` cached tokens)
    takes at most `step_s` seconds (a time-per-output-token objective) and fits in
    memory (`max_batch`); 0 if none does. The step time grows with the batch, so the
    question is monotone: `search.largest_meeting` bisects the batches that fit."""
    limit = _v.positive("step_s", step_s)
    fits = max_batch(model, accelerator, context, dtype, kv_dtype=kv_dtype,
                     reserve_bytes=reserve_bytes)
    sm = StepModel(model, dtype, kv_dtype, compute_dtype)

    def meets(b):
        return _roofline.step_s(sm.decode_terms(b, context), accelerator) <= limit
    return _search.largest_meeting(meets, 1, min(fits, _search.MAX_OPEN_ENDED))


# --- prefill, and steps that mix prefill and decode ---------------------------------------

def _step_args(new_tokens, context, logits):
    q = _v.positive("new_tokens", new_tokens, integer=True, array=True)
    c = _v.non_negative("context", context, integer=True, array=True)
    lg = np.ones_like(q) if logits is None else np.asarray(logits, dtype=bool).astype(float)
    q, c, lg = _v.same_shape(new_tokens=q, context=c, logits=lg)
    return q.ravel(), c.ravel(), lg.ravel()


def forward_step_breakdown(model, accelerator, new_tokens, context=0, dtype="fp16", *,
                           logits=None, kv_dtype=None, compute_dtype=None, flash=True):
    """Chapter *Serving LLMs*: one forward step of a batch that mixes prefill and
    decode. `new_tokens[i]` tokens of sequence i enter the step (1 for a decode, a
    prompt or a chunk of one for prefill) on top of `context[i]` cached tokens;
    `logits[i]` (default: every sequence) says whether it needs a token out of this step
    (False for a chunk that does not end its prompt). Weights are read once for the
    step; attention is per sequence at its own context. Returns the operations table
    of `decode_step_breakdown`. `flash=False`: an attention kernel that writes the score
    matrix (bytes FlashAttention saves)."""
    q, c, lg = _step_args(new_tokens, context, logits)
    sm = StepModel(model, dtype, kv_dtype, compute_dtype, flash)
    return breakdown(sm.step_terms(q, c, lg), accelerator)


def forward_step_s(model, accelerator, new_tokens, context=0, dtype="fp16", *,
                      logits=None, kv_dtype=None, compute_dtype=None, flash=True) -> float:
    """Seconds of one mixed forward step: the sum of `forward_step_breakdown`'s rows."""
    q, c, lg = _step_args(new_tokens, context, logits)
    return step_timer(model, accelerator, dtype, kv_dtype=kv_dtype,
                      compute_dtype=compute_dtype, flash=flash)(q, c, lg)


def prefill_s(model, accelerator, prompt_tokens, batch=1, dtype="fp16", *,
                 kv_dtype=None, compute_dtype=None, flash=True) -> float:
    """Roofline seconds to prefill `batch` prompts of `prompt_tokens` each in one step:
    the weights read once while 2 FLOPs per weight are spent on every prompt token,
    causal attention over the prompt, the LM head once per prompt (for its first
    token). Usually compute-bound; short prompts on a fast GPU are not."""
    p = _v.count("prompt_tokens", prompt_tokens, maximum=1 << 30)
    b = _v.count("batch", batch, maximum=1 << 30)
    return forward_step_s(model, accelerator, np.full(b, p), np.zeros(b), dtype,
                             kv_dtype=kv_dtype, compute_dtype=compute_dtype, flash=flash)


# --- how much of the machine a measurement used ---------------------------------------------

@_v.checked(tokens_per_s=_v.rule(_v.positive, array=True), batch=_v.rule(
    _v.positive, integer=True, array=True), returns=_v.scalar_or_array)
def mbu(model, accelerator, tokens_per_s, batch=1, context=0, dtype="fp16", *,
        kv_dtype=None):
    """Chapter *Decoding is a weight read*: model bandwidth utilisation, the fraction of
    the datasheet bandwidth a measured decode speed implies.

    `tokens_per_s` is the measured total across the batch (tokens/s); steps/s =
    tokens_per_s / batch, and each step moves `decode_step_bytes` (the weights, every
    sequence's KV cache, the activations). Result: a fraction (0.69, not 69%).
    """
    steps_per_s = tokens_per_s / batch
    bytes_per_s = steps_per_s * decode_step_bytes(model, batch, context, dtype, kv_dtype)
    return bytes_per_s / _roofline.bandwidth(accelerator)


def mfu(model, accelerator, tokens_per_s, batch=1, context=0, dtype="fp16", *,
        compute_dtype=None):
    """Chapter *Decoding is a weight read*: model FLOPs utilisation, the fraction of the
    dense peak FLOP/s (in the compute format: fp16 for fp16 or weight-only quantised
    weights) that a measured decode speed implies. `tokens_per_s` is the total across
    the batch; FLOPs per token are `decode_step_flops` / batch. Result: a fraction.
    """
    acc = _hardware.get(accelerator)
    _, _, compute = _dtypes.formats(dtype, None, compute_dtype)
    t = _v.positive("tokens_per_s", tokens_per_s, array=True)
    b, _ = _decode_args(batch, context)
    flops_per_token = np.asarray(decode_step_flops(model, batch, context)) / b
    return _v.scalar_or_array(flops_per_token * t / _roofline.peak(acc, compute))
