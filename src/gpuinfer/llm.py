"""Transformer shapes, weight and KV-cache bytes, and decode ceilings.

Chapters: *The roofline model*, *Decoding is a weight read*. All results in SI units.

The model of one decode step (one new token for each of `batch` sequences):
- bytes moved = every weight once + each sequence's KV cache (its `context` tokens);
- FLOPs       = 2 per weight per sequence + attention over the context
                (4 x layers x query heads x head_dim x context per sequence);
- time        = max(bytes / bandwidth, FLOPs / peak)  (the roofline; overlap assumed).
The input embedding is counted as read in full and as 2 FLOPs a weight, as in "each new
token reads every weight once": a ~2% overstatement of a 7B model's work, kept for
simplicity. These are ceilings, not predictions of a measured speed.

Quantised weights (int8, int4, fp8) are weight-only by default: the KV cache stays fp16
and the matmuls run in fp16 after dequantising (`kv_dtype`, `compute_dtype` override).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import dtypes as _dtypes
from . import hardware as _hardware


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer as its published config describes it (Llama layout:
    gated MLP of three matrices, RMSNorm, untied input and output embeddings)."""

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    vocab_size: int
    source: str = ""
    tied_embeddings: bool = False

    @property
    def n_params(self) -> int:
        """Parameter count computed from the shapes (matches the published totals)."""
        d, q, kv = self.d_model, self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        per_layer = d * q + 2 * d * kv + q * d + 3 * d * self.d_ff + 2 * d
        embeddings = self.vocab_size * d * (1 if self.tied_embeddings else 2)
        return self.n_layers * per_layer + embeddings + d

    @property
    def attention(self) -> str:
        if self.n_kv_heads == self.n_heads:
            return "multi-head"
        return "multi-query" if self.n_kv_heads == 1 else "grouped-query"


_HF = "https://huggingface.co/{}/blob/main/config.json"

_MODELS = [
    ModelSpec("llama-2-7b", 32, 4096, 32, 32, 128, 11008, 32000, _HF.format("meta-llama/Llama-2-7b-hf")),
    ModelSpec("llama-2-13b", 40, 5120, 40, 40, 128, 13824, 32000, _HF.format("meta-llama/Llama-2-13b-hf")),
    ModelSpec("llama-2-70b", 80, 8192, 64, 8, 128, 28672, 32000, _HF.format("meta-llama/Llama-2-70b-hf")),
    ModelSpec("llama-3-8b", 32, 4096, 32, 8, 128, 14336, 128256, _HF.format("meta-llama/Meta-Llama-3-8B")),
    ModelSpec("llama-3-70b", 80, 8192, 64, 8, 128, 28672, 128256, _HF.format("meta-llama/Meta-Llama-3-70B")),
    ModelSpec("mistral-7b", 32, 4096, 32, 8, 128, 14336, 32000, _HF.format("mistralai/Mistral-7B-v0.1")),
]
_BY_NAME = {m.name: m for m in _MODELS}


def names() -> list[str]:
    return list(_BY_NAME)


def get(name) -> ModelSpec:
    """A model by name ("llama-2-7b"); a ModelSpec passes through."""
    if isinstance(name, ModelSpec):
        return name
    key = str(name).strip().lower().replace("_", "-").replace(" ", "-")
    if key not in _BY_NAME:
        raise KeyError(f"unknown model {name!r}; known models: {', '.join(_BY_NAME)}")
    return _BY_NAME[key]


def catalogue():
    """The model table as a DataFrame, with the parameter count computed from the shapes."""
    import pandas as pd

    return pd.DataFrame([{**m.__dict__, "n_params": m.n_params, "attention": m.attention}
                         for m in _MODELS])


# --- validation ---------------------------------------------------------------------

def _check(name, value, *, allow_zero=False, integer=False):
    arr = np.asarray(value, dtype=float)
    bad = (arr < 0) if allow_zero else (arr <= 0)
    if np.any(bad) or not np.all(np.isfinite(arr)):
        kind = "non-negative" if allow_zero else "positive"
        raise ValueError(f"{name} must be {kind} and finite, got {value!r}")
    if integer and np.any(arr != np.round(arr)):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    return arr


def _scalar(x):
    return float(x) if np.ndim(x) == 0 else x


def _formats(dtype, kv_dtype, compute_dtype):
    dtype = _dtypes.canonical(dtype)
    quantised = dtype in ("fp8", "int8", "int4")
    kv = _dtypes.canonical(kv_dtype) if kv_dtype else ("fp16" if quantised else dtype)
    compute = _dtypes.canonical(compute_dtype) if compute_dtype else ("fp16" if quantised else dtype)
    return dtype, kv, compute


# --- bytes ----------------------------------------------------------------------------

def weight_bytes(model, dtype="fp16") -> float:
    """Bytes of all the model's weights stored in `dtype`."""
    return get(model).n_params * _dtypes.bytes_per_element(dtype)


def kv_cache_bytes_per_token(model, dtype="fp16") -> float:
    """KV-cache bytes one token adds: 2 (K and V) x layers x KV heads x head_dim x bytes.

    Uses the *KV* heads: grouped-query models (Llama-3, Mistral) cache fewer heads than
    they query; counting query heads overstates their cache (n_heads / n_kv_heads times).
    """
    m = get(model)
    return 2 * m.n_layers * m.n_kv_heads * m.head_dim * _dtypes.bytes_per_element(dtype)


def weight_read_ceiling(n_params, bytes_per_param, bandwidth, batch=1):
    """Tokens/s if every decode step reads every weight once and nothing else counts:
    batch x bandwidth / (n_params x bytes_per_param). Vectorised over `batch`.

    7e9 fp16 parameters (14 GB) at 2 TB/s: 142.9 tokens/s; batch 16: 2,286 tokens/s.
    """
    _check("n_params", n_params)
    _check("bytes_per_param", bytes_per_param)
    _check("bandwidth", bandwidth)
    b = _check("batch", batch, integer=True)
    return _scalar(b * bandwidth / (n_params * bytes_per_param))


def decode_step_bytes(model, batch=1, context=0, dtype="fp16", kv_dtype=None):
    """DRAM bytes of one decode step: all weights + each sequence's KV cache."""
    m = get(model)
    dtype, kv, _ = _formats(dtype, kv_dtype, None)
    b = _check("batch", batch, integer=True)
    c = _check("context", context, allow_zero=True, integer=True)
    return _scalar(weight_bytes(m, dtype) + b * c * kv_cache_bytes_per_token(m, kv))


def decode_step_flops(model, batch=1, context=0):
    """FLOPs of one decode step: 2 per weight per sequence, plus attention scores and
    weighted values over `context` cached tokens (4 x layers x n_heads x head_dim each)."""
    m = get(model)
    b = _check("batch", batch, integer=True)
    c = _check("context", context, allow_zero=True, integer=True)
    attention = 4.0 * m.n_layers * m.n_heads * m.head_dim * c
    return _scalar(b * (2.0 * m.n_params + attention))


def decode_step_time(model, accelerator, batch=1, context=0, dtype="fp16", *,
                     kv_dtype=None, compute_dtype=None):
    """Roofline seconds for one decode step: max(bytes / bandwidth, FLOPs / peak)."""
    acc = _hardware.get(accelerator)
    dtype, kv, compute = _formats(dtype, kv_dtype, compute_dtype)
    memory_s = decode_step_bytes(model, batch, context, dtype, kv) / acc.bandwidth
    compute_s = decode_step_flops(model, batch, context) / acc.peak_flops(compute)
    return _scalar(np.maximum(memory_s, compute_s))


def decode_ceiling(model, accelerator, batch=1, context=0, dtype="fp16", *,
                   kv_dtype=None, compute_dtype=None):
    """Total tokens/s across the batch under the roofline (weights, KV reads and FLOPs
    counted). Divide by `batch` for tokens/s per sequence. Vectorised over batch/context.
    `model` and `accelerator` are names or objects."""
    t = decode_step_time(model, accelerator, batch, context, dtype,
                         kv_dtype=kv_dtype, compute_dtype=compute_dtype)
    return _scalar(np.asarray(batch, dtype=float) / t)


def decode_intensity(model, batch=1, context=0, dtype="fp16", kv_dtype=None):
    """Arithmetic intensity (FLOP/byte) of a decode step: about `batch` for fp16 weights
    at short context; twice that for int8 weights, four times for int4."""
    return _scalar(np.asarray(decode_step_flops(model, batch, context))
                   / decode_step_bytes(model, batch, context, dtype, kv_dtype))


def compute_bound_batch(model, accelerator, context=0, dtype="fp16", *,
                        kv_dtype=None, compute_dtype=None) -> float:
    """The smallest batch at which a decode step is compute-bound on `accelerator`
    (math.inf if it never is: at long context the KV reads grow as fast as the FLOPs)."""
    m, acc = get(model), _hardware.get(accelerator)
    dtype, kv, compute = _formats(dtype, kv_dtype, compute_dtype)
    c = float(_check("context", context, allow_zero=True, integer=True))
    per_seq_compute_s = decode_step_flops(m, 1, c) / acc.peak_flops(compute)
    per_seq_kv_s = c * kv_cache_bytes_per_token(m, kv) / acc.bandwidth
    margin = per_seq_compute_s - per_seq_kv_s
    if margin <= 0:
        return math.inf
    return float(math.ceil(weight_bytes(m, dtype) / acc.bandwidth / margin))


def max_batch(model, accelerator, context, dtype="fp16", *, kv_dtype=None,
              reserve_bytes=0.0) -> int:
    """Largest batch whose weights plus KV cache (`context` tokens per sequence) fit in
    the accelerator's memory, less `reserve_bytes` (activations, workspace). 0 if the
    weights alone don't fit."""
    m, acc = get(model), _hardware.get(accelerator)
    dtype, kv, _ = _formats(dtype, kv_dtype, None)
    c = float(_check("context", context, integer=True))
    _check("reserve_bytes", reserve_bytes, allow_zero=True)
    free = acc.memory_bytes - reserve_bytes - weight_bytes(m, dtype)
    if free <= 0:
        return 0
    return int(free // (c * kv_cache_bytes_per_token(m, kv)))


def prefill_time(model, accelerator, prompt_tokens, batch=1, dtype="fp16", *,
                 compute_dtype=None) -> float:
    """Roofline seconds to process a prompt of `prompt_tokens` for `batch` sequences:
    the weights are read once while 2 x n_params FLOPs are spent per token, plus causal
    attention (on average half the prompt in context). Usually compute-bound."""
    m, acc = get(model), _hardware.get(accelerator)
    dtype, kv, compute = _formats(dtype, None, compute_dtype)
    p = float(_check("prompt_tokens", prompt_tokens, integer=True))
    b = float(_check("batch", batch, integer=True))
    flops = b * p * (2.0 * m.n_params + 4.0 * m.n_layers * m.n_heads * m.head_dim * p / 2)
    bytes_ = weight_bytes(m, dtype) + b * p * kv_cache_bytes_per_token(m, kv)
    return max(bytes_ / acc.bandwidth, flops / acc.peak_flops(compute))


# --- where a decode step's time goes, and how much of the machine a measurement used ---

def decode_step_breakdown(model, accelerator, batch=1, context=0, dtype="fp16", *,
                          kv_dtype=None, compute_dtype=None) -> dict:
    """Chapter *Decoding is a weight read*: one decode step taken apart under the roofline.

    Returns a dict (arrays when `batch` or `context` is an array): `weight_bytes`,
    `kv_bytes` and their sum `bytes` (bytes), `flops` (FLOP), `memory_s` (bytes /
    bandwidth), `compute_s` (FLOPs / peak), `step_s` (the larger, seconds),
    `memory_bound` (bool), and total tokens/s: `tokens_per_s` under the roofline,
    `memory_ceiling_tokens_per_s` (batch / memory_s) and `compute_ceiling_tokens_per_s`
    (batch / compute_s), the two roofs drawn separately.
    """
    m, acc = get(model), _hardware.get(accelerator)
    dtype, kv, compute = _formats(dtype, kv_dtype, compute_dtype)
    b = _check("batch", batch, integer=True)
    c = _check("context", context, allow_zero=True, integer=True)
    weights = weight_bytes(m, dtype) * np.ones(np.broadcast(b, c).shape)
    kv_bytes = b * c * kv_cache_bytes_per_token(m, kv)
    flops = np.asarray(decode_step_flops(m, b, c), dtype=float)
    memory_s = (weights + kv_bytes) / acc.bandwidth
    compute_s = flops / acc.peak_flops(compute)
    step_s = np.maximum(memory_s, compute_s)
    out = {"weight_bytes": weights, "kv_bytes": kv_bytes, "bytes": weights + kv_bytes,
           "flops": flops, "memory_s": memory_s, "compute_s": compute_s, "step_s": step_s,
           "memory_bound": memory_s >= compute_s, "tokens_per_s": b / step_s,
           "memory_ceiling_tokens_per_s": b / memory_s,
           "compute_ceiling_tokens_per_s": b / compute_s}
    return {k: (v.item() if np.ndim(v) == 0 else v) for k, v in out.items()}


def mbu(model, accelerator, tokens_per_s, batch=1, context=0, dtype="fp16", *,
        kv_dtype=None):
    """Chapter *Decoding is a weight read*: model bandwidth utilisation, the fraction of
    the datasheet bandwidth a measured decode speed implies.

    `tokens_per_s` is the measured total across the batch (tokens/s); steps/s =
    tokens_per_s / batch, and each step must move the weights plus every sequence's KV
    cache (`context` tokens each). Result: a fraction (0.69, not 69%).
    """
    acc = _hardware.get(accelerator)
    t = _check("tokens_per_s", tokens_per_s)
    b = _check("batch", batch, integer=True)
    step_bytes = np.asarray(decode_step_bytes(model, batch, context, dtype, kv_dtype))
    return _scalar(step_bytes * t / b / acc.bandwidth)


def mfu(model, accelerator, tokens_per_s, batch=1, context=0, dtype="fp16", *,
        compute_dtype=None):
    """Chapter *Decoding is a weight read*: model FLOPs utilisation, the fraction of the
    dense peak FLOP/s (in the compute format: fp16 for fp16 or quantised weights) that a
    measured decode speed implies. `tokens_per_s` is the total across the batch; FLOPs
    per token are 2 per weight plus attention over `context`. Result: a fraction.
    """
    acc = _hardware.get(accelerator)
    _, _, compute = _formats(dtype, None, compute_dtype)
    t = _check("tokens_per_s", tokens_per_s)
    b = _check("batch", batch, integer=True)
    flops_per_token = np.asarray(decode_step_flops(model, batch, context)) / b
    return _scalar(flops_per_token * t / acc.peak_flops(compute))


def compute_bound_context_limit(model, accelerator, dtype="fp16", *, kv_dtype=None,
                                compute_dtype=None) -> float:
    """Chapter *Decoding is a weight read*: the context (tokens per sequence) below which
    some batch makes a decode step compute-bound, and at or above which none does
    (`compute_bound_batch` is then math.inf). math.inf if every context can.

    Each sequence adds (2 x n_params + a x context) FLOPs and context x KV bytes per
    token; the batch can only outgrow the weight read while the first, over the peak,
    takes longer than the second over the bandwidth:
    context < (2 n_params / peak) / (kv_bytes_per_token / bandwidth - a / peak),
    with a = 4 x layers x n_heads x head_dim (attention FLOPs per cached token).
    """
    m, acc = get(model), _hardware.get(accelerator)
    _, kv, compute = _formats(dtype, kv_dtype, compute_dtype)
    peak = acc.peak_flops(compute)
    attention_flops_per_token = 4.0 * m.n_layers * m.n_heads * m.head_dim
    per_token_s = (kv_cache_bytes_per_token(m, kv) / acc.bandwidth
                   - attention_flops_per_token / peak)
    if per_token_s <= 0:
        return math.inf
    return 2.0 * m.n_params / peak / per_token_s
