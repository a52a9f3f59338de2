"""Transformer shapes, weight and KV-cache bytes, and the time of a forward step.

Chapters: *The roofline model*, *Decoding is a weight read*, *Serving LLMs*. SI units.

A forward step is a table of operations, and its time is the sum of each operation's own
roofline, max(bytes / bandwidth, FLOPs / peak) (`roofline.evaluate`): the kernels run one
after another, so attention's KV-cache reads do not hide under the matmuls' arithmetic
(Pope et al. 2023; the JAX scaling book's inference chapter; LLM-Viewer). The operations,
for a step in which the sequences of a batch bring `new_tokens` tokens each (1 in decode,
the prompt or a chunk of it in prefill) on top of `context` cached tokens:

- `embedding`: a gather of one row per new token (read the rows, write the activations);
- `linear`: the layers' Q/K/V, output and MLP matmuls (gated MLP: gate, up, down): every
  weight read once per step, 2 FLOPs per weight per new token, each matmul reading its
  input activation and writing its output;
- `attention`: per layer, each new token's query against the cached keys and values
  (and the causal part of its own chunk): 4 x heads x head_dim FLOPs per (query, key)
  pair (scores and weighted values), the cached K and V read once per sequence, the new
  Q, K, V read and the output written, the new tokens' K and V appended to the cache.
  Its intensity is about n_heads / n_kv_heads FLOP per byte of fp16 cache, whatever the
  batch: decode attention never turns compute-bound. With `flash=False` the score
  matrix is written and read back (FlashAttention's saving, Dao et al. 2022);
- `lm_head`: the output matmul, only for the sequences that need a token this step (the
  last chunk of a prompt, and every decode).

Left out: RMSNorm, RoPE, SiLU and residual adds (assumed fused into the matmuls around
them: under 1% of the FLOPs, their bytes are the activations counted above), softmax's
exponentials, sampling, and the norm weights (0.004% of a 7B model).

Formats (`gpuinfer.dtypes`): `dtype` is the format of the matmul weights; a quantised
format is weight-only unless `compute_dtype` says otherwise, and the KV cache stays fp16
unless `kv_dtype` says otherwise. Embeddings and norms stay in the activation format
(as gpt-fast's int8/int4 do). int4 counts its group scales (0.5625 B a weight).

These are ceilings, not predictions of a measured speed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import dtypes as _dtypes
from . import hardware as _hardware
from . import roofline as _roofline
from . import validate as _v

#: Bytes of device memory a server cannot give to weights or the KV cache, unless told:
#: the CUDA context (a few hundred MB) and the framework's workspace (cuBLAS, NCCL,
#: allocator slack). An illustrative setting, not a measurement: real servers hold back
#: more for activations (vLLM's default gpu_memory_utilization=0.9 leaves 10% unused).
DEFAULT_RESERVE_BYTES = 2**30

#: Rows of a step's operations table, in the order they run.
OPERATIONS = ("embedding", "linear", "attention", "lm_head")


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer as its published config describes it (Llama layout:
    gated MLP of three matrices, RMSNorm, untied input and output embeddings unless
    `tied_embeddings`). `vocab_size=0` describes a bare layer stack (the labs' model)."""

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

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.strip():
            raise TypeError(f"ModelSpec name must be a non-empty string, got {self.name!r}")
        for field in ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff"):
            _v.count(f"{self.name}: {field}", getattr(self, field), maximum=1 << 24)
        _v.count(f"{self.name}: vocab_size", self.vocab_size, minimum=0, maximum=1 << 24)
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"{self.name}: n_kv_heads ({self.n_kv_heads}) must divide "
                             f"n_heads ({self.n_heads}): each KV head serves a whole group")

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def linear_params_per_layer(self) -> int:
        """Weights of one layer's matmuls: Q, K, V, output, gate, up, down."""
        d = self.d_model
        return d * (self.q_dim + 2 * self.kv_dim) + self.q_dim * d + 3 * d * self.d_ff

    @property
    def activations_per_token_per_layer(self) -> int:
        """Elements one token's activations cost a layer's matmuls: each reads its input
        and writes its output (QKV: d in, q+2kv out; O: q in, d out; gate/up: d in,
        2 d_ff out; down: d_ff in, d out)."""
        d = self.d_model
        return 4 * d + 2 * self.q_dim + 2 * self.kv_dim + 3 * self.d_ff

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.d_model

    @property
    def n_params(self) -> int:
        """Parameter count computed from the shapes (matches the published totals)."""
        d = self.d_model
        per_layer = self.linear_params_per_layer + 2 * d  # + two norm weights
        embeddings = self.embedding_params * (1 if self.tied_embeddings else 2)
        return self.n_layers * per_layer + embeddings + d

    @property
    def attention(self) -> str:
        if self.n_kv_heads == self.n_heads:
            return "multi-head"
        return "multi-query" if self.n_kv_heads == 1 else "grouped-query"


_HF = "https://huggingface.co/{}/blob/main/config.json"

# Keyword tables, as gpt-fast keeps its configs.
_MODELS = [ModelSpec(**kw) for kw in [
    dict(name="llama-2-7b", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=32,
         head_dim=128, d_ff=11008, vocab_size=32000, source=_HF.format("meta-llama/Llama-2-7b-hf")),
    dict(name="llama-2-13b", n_layers=40, d_model=5120, n_heads=40, n_kv_heads=40,
         head_dim=128, d_ff=13824, vocab_size=32000, source=_HF.format("meta-llama/Llama-2-13b-hf")),
    dict(name="llama-2-70b", n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8,
         head_dim=128, d_ff=28672, vocab_size=32000, source=_HF.format("meta-llama/Llama-2-70b-hf")),
    dict(name="llama-3-8b", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8,
         head_dim=128, d_ff=14336, vocab_size=128256, source=_HF.format("meta-llama/Meta-Llama-3-8B")),
    dict(name="llama-3-70b", n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8,
         head_dim=128, d_ff=28672, vocab_size=128256, source=_HF.format("meta-llama/Meta-Llama-3-70B")),
    dict(name="mistral-7b", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8,
         head_dim=128, d_ff=14336, vocab_size=32000, source=_HF.format("mistralai/Mistral-7B-v0.1")),
    # A small model: the draft of chapter *Serving LLMs*'s speculative decoding.
    dict(name="llama-3.2-1b", n_layers=16, d_model=2048, n_heads=32, n_kv_heads=8,
         head_dim=64, d_ff=8192, vocab_size=128256, tied_embeddings=True,
         source=_HF.format("meta-llama/Llama-3.2-1B")),
]]
_BY_NAME = {m.name: m for m in _MODELS}


def names() -> list[str]:
    return list(_BY_NAME)


def get(name) -> ModelSpec:
    """A model by name ("llama-2-7b"); a ModelSpec passes through."""
    if isinstance(name, ModelSpec):
        return name
    if not isinstance(name, str):
        raise TypeError(f"model must be a catalogue name such as 'llama-2-7b' or a "
                        f"ModelSpec, got {name!r}")
    return _BY_NAME[_v.choice("model", name, list(_BY_NAME),
                              normalise=lambda s: s.strip().lower().replace("_", "-").replace(" ", "-"))]


def catalogue():
    """The model table as a DataFrame, with the parameter count computed from the shapes."""
    import pandas as pd

    return pd.DataFrame([{**m.__dict__, "n_params": m.n_params, "attention": m.attention}
                         for m in _MODELS])


# --- bytes ------------------------------------------------------------------------------

def weight_bytes(model, dtype="fp16") -> float:
    """Bytes of all the model's weights: the matmul weights (LM head included) in
    `dtype`, the embedding table and norms in the activation format (fp16 when `dtype`
    is quantised). For fp16 this is n_params x 2."""
    m = get(model)
    weight, _, act = _dtypes.formats(dtype)
    w, a = _dtypes.bytes_per_element(weight), _dtypes.bytes_per_element(act)
    matmuls = m.n_layers * m.linear_params_per_layer + (
        0 if m.tied_embeddings else m.embedding_params)
    table = m.embedding_params
    norms = (2 * m.n_layers + 1) * m.d_model
    if m.tied_embeddings:  # one table serves as embedding and head: stored as the head
        return float(matmuls * w + table * w + norms * a)
    return float(matmuls * w + (table + norms) * a)


def step_weight_bytes(model, dtype="fp16") -> float:
    """Bytes of weights one decode step reads: every layer's linear weights and the LM
    head, in `dtype`. The embedding is a gather of one row per token, not a read of its
    table, and the norms are a rounding error, so this is a little less than
    `weight_bytes` (Llama-2-7B fp16: 13.21 GB of 13.48 GB; Llama-3-8B, whose 128k-entry
    embedding is 1.05 GB: 15.01 of 16.06 GB). Batch x bandwidth / this is the
    weights-only ceiling the calculator shows."""
    m = get(model)
    weight, _, _ = _dtypes.formats(dtype)
    w = _dtypes.bytes_per_element(weight)
    return float((m.n_layers * m.linear_params_per_layer + m.embedding_params) * w)


def kv_cache_bytes_per_token(model, dtype="fp16") -> float:
    """KV-cache bytes one token adds: 2 (K and V) x layers x KV heads x head_dim x bytes.

    Uses the *KV* heads: grouped-query models (Llama-3, Mistral) cache fewer heads than
    they query; counting query heads overstates their cache (n_heads / n_kv_heads times).
    """
    m = get(model)
    return 2.0 * m.n_layers * m.kv_dim * _dtypes.bytes_per_element(dtype)


def weight_read_ceiling(n_params, bytes_per_param, bandwidth, batch=1):
    """Tokens/s if every decode step reads every weight once and nothing else counts:
    batch x bandwidth / (n_params x bytes_per_param). Vectorised over `batch`.

    7e9 fp16 parameters (14 GB) at 2 TB/s: 142.9 tokens/s; batch 16: 2,286 tokens/s.
    """
    n = _v.positive("n_params", n_params)
    b_per = _v.positive("bytes_per_param", bytes_per_param)
    bw = _v.positive("bandwidth", bandwidth)
    b = _v.positive("batch", batch, integer=True, array=True)
    return _v.scalar_or_array(b * bw / (n * b_per))


# --- the operations of a forward step ------------------------------------------------------

class _StepModel:
    """The constants of one (model, formats) pair, and the operations table of a step as
    arrays: built once, evaluated many times (the serving simulator calls it per step)."""

    def __init__(self, model, dtype="fp16", kv_dtype=None, compute_dtype=None, flash=True):
        self.m = m = get(model)
        self.weight, self.kv, self.compute = _dtypes.formats(dtype, kv_dtype, compute_dtype)
        _, _, embed = _dtypes.formats(dtype)
        self.flash = bool(flash)
        w = _dtypes.bytes_per_element(self.weight)
        self.a = a = _dtypes.bytes_per_element(self.compute)   # activations
        e = _dtypes.bytes_per_element(embed if not m.tied_embeddings else self.weight)
        L = m.n_layers
        self.linear_weight_bytes = L * m.linear_params_per_layer * w
        self.linear_flops_per_token = 2.0 * L * m.linear_params_per_layer
        self.linear_act_bytes_per_token = L * m.activations_per_token_per_layer * a
        has_vocab = m.vocab_size > 0  # a bare layer stack has no embedding and no head
        self.head_weight_bytes = m.embedding_params * w
        self.head_flops_per_row = 2.0 * m.embedding_params
        self.head_act_bytes_per_row = (m.d_model + m.vocab_size) * a * has_vocab
        self.embed_bytes_per_token = m.d_model * (e + a) * has_vocab
        self.kv_per_token = kv_cache_bytes_per_token(m, self.kv)
        # Attention, per layer summed over layers:
        self.attn_flops_per_pair = 4.0 * L * m.q_dim            # scores + weighted values
        self.attn_act_bytes_per_token = L * (2 * m.q_dim + 2 * m.kv_dim) * a  # Q,K,V in, O out
        self.score_bytes_per_pair = 4.0 * L * m.n_heads * a     # naive: S and P, written and read

    def terms(self, tokens, logits, pairs, cached, pairs_full):
        """{operation: (flops, bytes, compute dtype)} for a step with `tokens` new tokens,
        `logits` rows through the LM head, `pairs` (query, key) pairs of causal attention,
        `cached` KV-cache tokens read, `pairs_full` score-matrix entries (naive kernel)."""
        c = self.compute
        attn_bytes = (cached * self.kv_per_token + tokens * self.kv_per_token
                      + tokens * self.attn_act_bytes_per_token)
        if not self.flash:
            attn_bytes = attn_bytes + pairs_full * self.score_bytes_per_pair
        head_runs = (np.asarray(logits, dtype=float) > 0) & (self.head_weight_bytes > 0)
        return {
            "embedding": (tokens * 0.0, tokens * self.embed_bytes_per_token, c),
            "linear": (tokens * self.linear_flops_per_token,
                       self.linear_weight_bytes + tokens * self.linear_act_bytes_per_token, c),
            "attention": (pairs * self.attn_flops_per_pair, attn_bytes, c),
            "lm_head": (logits * self.head_flops_per_row,
                        np.where(head_runs, self.head_weight_bytes
                                 + logits * self.head_act_bytes_per_row, 0.0), c),
        }

    def decode_terms(self, batch, context):
        """Terms of a decode step: `batch` sequences, one new token each, `context`
        cached tokens each (arrays broadcast)."""
        b = np.asarray(batch, dtype=float)
        c = np.asarray(context, dtype=float)
        return self.terms(tokens=b, logits=b, pairs=b * (c + 1), cached=b * c,
                          pairs_full=b * (c + 1))

    def step_terms(self, new_tokens, context, logits):
        """Terms of a mixed step: per-sequence arrays of new tokens, cached context and
        whether the sequence runs the LM head (its prompt ends here, or it decodes)."""
        q = np.asarray(new_tokens, dtype=float)
        c = np.asarray(context, dtype=float)
        lg = np.asarray(logits, dtype=float)
        return self.terms(tokens=q.sum(), logits=lg.sum(),
                          pairs=float(np.sum(q * c + q * (q + 1) / 2)), cached=c.sum(),
                          pairs_full=float(np.sum(q * (c + q))))


#: The constants of `_StepModel` that `decode_terms` reads: what the website's calculator
#: (_static/calculator.js, `decodeTerms`) needs to rebuild a decode step in the browser.
STEP_CONSTANTS = ("linear_weight_bytes", "linear_flops_per_token", "linear_act_bytes_per_token",
                  "head_weight_bytes", "head_flops_per_row", "head_act_bytes_per_row",
                  "embed_bytes_per_token", "kv_per_token", "attn_flops_per_pair",
                  "attn_act_bytes_per_token")


def step_constants(model, dtype="fp16", *, kv_dtype=None, compute_dtype=None) -> dict:
    """Appendix *Calculator*: the per-model constants of the operations table (bytes,
    FLOPs per token, per (query, key) pair, ...), with the formats and the weights'
    bytes. The website's calculator rebuilds a decode step from them in JavaScript; a
    test checks it against this module on every model x device x format x (batch,
    context) of a grid."""
    sm = _StepModel(model, dtype, kv_dtype, compute_dtype)
    return {"weight_dtype": sm.weight, "kv_dtype": sm.kv, "compute_dtype": sm.compute,
            "weight_bytes": weight_bytes(model, dtype),
            **{k: float(getattr(sm, k)) for k in STEP_CONSTANTS}}


def _table(terms):
    import pandas as pd

    rows = {name: {"flops": float(f), "bytes": float(b), "dtype": d}
            for name, (f, b, d) in terms.items()}
    return pd.DataFrame.from_dict(rows, orient="index").reindex(list(OPERATIONS))


def _breakdown(terms, accelerator):
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
    `attention`, `lm_head`) with `flops`, `bytes`, `dtype` (the format it computes in),
    `intensity` (FLOP/byte), `memory_s`, `compute_s`, `seconds` (that row's own
    roofline: the larger), `bound` and `share` (of the step's time). The step takes
    `seconds.sum()`. `batch` and `context` are single numbers here; `decode_step_time`
    and `decode_ceiling` take arrays."""
    b = _v.count("batch", batch, maximum=1 << 30)
    c = _v.count("context", context, minimum=0, maximum=1 << 30)
    sm = _StepModel(model, dtype, kv_dtype, compute_dtype)
    return _breakdown(sm.decode_terms(b, c), accelerator)


def decode_step_time(model, accelerator, batch=1, context=0, dtype="fp16", *,
                     kv_dtype=None, compute_dtype=None):
    """Roofline seconds of one decode step: the sum over its operations of each one's
    max(bytes / bandwidth, FLOPs / peak) (see `decode_step_breakdown`). Vectorised over
    `batch` and `context`."""
    b, c = _decode_args(batch, context)
    sm = _StepModel(model, dtype, kv_dtype, compute_dtype)
    return _roofline.step_seconds(sm.decode_terms(b, c), accelerator)


def decode_ceiling(model, accelerator, batch=1, context=0, dtype="fp16", *,
                   kv_dtype=None, compute_dtype=None):
    """Total tokens/s across the batch under the per-operation roofline. Divide by
    `batch` for tokens/s per sequence. Vectorised over batch and context."""
    b, c = _decode_args(batch, context)
    t = decode_step_time(model, accelerator, b, c, dtype, kv_dtype=kv_dtype,
                         compute_dtype=compute_dtype)
    return _v.scalar_or_array(b / t)


def decode_step_time_overlapped(model, accelerator, batch=1, context=0, dtype="fp16", *,
                                kv_dtype=None, compute_dtype=None):
    """What a decode step would take if every operation's traffic overlapped every
    other's arithmetic: max(all bytes / bandwidth, all FLOPs / peak), pooled over the
    step. No real step runs like this (attention's KV reads and the matmuls are separate
    kernels); it is a lower bound on `decode_step_time`, shown to explain why the pooled
    model used to be too optimistic at large batches. Vectorised."""
    acc = _hardware.get(accelerator)
    b, c = _decode_args(batch, context)
    sm = _StepModel(model, dtype, kv_dtype, compute_dtype)
    terms = sm.decode_terms(b, c)
    flops = sum(f for f, _, _ in terms.values())
    nbytes = sum(x for _, x, _ in terms.values())
    return _roofline.op_seconds(flops, nbytes, _roofline.peak_or_nan(acc, sm.compute),
                                _roofline.bandwidth_or_nan(acc))


def decode_step_bytes(model, batch=1, context=0, dtype="fp16", kv_dtype=None):
    """DRAM bytes of one decode step, summed over its operations: the matmul weights
    once, the batch's KV caches, the activations, the gathered embedding rows."""
    b, c = _decode_args(batch, context)
    terms = _StepModel(model, dtype, kv_dtype).decode_terms(b, c)
    return _v.scalar_or_array(sum(x for _, x, _ in terms.values()))


def decode_step_flops(model, batch=1, context=0):
    """FLOPs of one decode step: 2 per matmul weight per sequence (the embedding is
    gathered, not multiplied), plus attention: 4 x layers x query heads x head_dim per
    (query, key) pair, context + 1 keys per sequence (the cache and the token itself)."""
    b, c = _decode_args(batch, context)
    terms = _StepModel(model).decode_terms(b, c)
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
    `lm_head`) are compute-bound: about the ridge point for fp16 weights, half of it
    for int8 and a quarter for int4 weight-only formats (each weight byte then serves 2
    or 4 times the FLOPs). Finite, and the same at every context: attention, whose
    intensity stays near n_heads / n_kv_heads FLOP per byte, never turns compute-bound
    at decode. math.inf if the device's peaks are unknown."""
    acc = _hardware.get(accelerator)
    sm = _StepModel(model, dtype, kv_dtype, compute_dtype)
    peak = _roofline.peak_or_nan(acc, sm.compute)
    bw = _roofline.bandwidth_or_nan(acc)
    if math.isnan(peak) or math.isnan(bw):
        return math.inf
    worst = 0.0
    for op in ("linear", "lm_head"):
        if op == "lm_head" and sm.m.vocab_size == 0:
            continue
        # compute_s - memory_s is affine in the batch: find where it crosses zero.
        f = []
        for b in (1.0, 2.0):
            flops, nbytes, _ = sm.decode_terms(b, 0)[op]
            f.append(flops / peak - nbytes / bw)
        worst = max(worst, _affine_root(f[0], f[1], 1.0, 2.0))
    return float(max(1, math.floor(worst) + 1)) if math.isfinite(worst) else math.inf


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
        t = _breakdown(_StepModel(model, dtype, kv_dtype, compute_dtype).decode_terms(b, c),
                       acc)["seconds"]
        diff.append(t["attention"] - t["linear"] - t["lm_head"])
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
    memory (`max_batch`); 0 if none does. The step time grows with the batch, so this
    is a search over the batches that fit."""
    limit = _v.positive("step_s", step_s)
    fits = max_batch(model, accelerator, context, dtype, kv_dtype=kv_dtype,
                     reserve_bytes=reserve_bytes)
    if fits < 1:
        return 0
    lo, hi = 0, fits  # step(lo) <= limit (or lo = 0); find the last batch that meets it
    sm = _StepModel(model, dtype, kv_dtype, compute_dtype)
    def meets(b):
        return _roofline.step_seconds(sm.decode_terms(b, context), accelerator) <= limit
    if meets(hi):
        return hi
    while hi - lo > 1:  # bisection: about 30 steps for a billion
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if meets(mid) else (lo, mid)
    return lo


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
    sm = _StepModel(model, dtype, kv_dtype, compute_dtype, flash)
    return _breakdown(sm.step_terms(q, c, lg), accelerator)


def step_timer(model, accelerator, dtype="fp16", *, kv_dtype=None, compute_dtype=None,
               flash=True):
    """A fast function (new_tokens, context, logits=None) -> seconds of a forward step,
    the sum of `forward_step_breakdown`'s rows, for a simulator that times thousands of
    steps. The model, device and formats are fixed when it is made."""
    acc = _hardware.get(accelerator)
    sm = _StepModel(model, dtype, kv_dtype, compute_dtype, flash)
    bw = _roofline.bandwidth_or_nan(acc)
    peak = _roofline.peak_or_nan(acc, sm.compute)

    def seconds(new_tokens, context, logits=None):
        q = np.asarray(new_tokens, dtype=float)
        c = np.asarray(context, dtype=float)
        lg = np.ones_like(q) if logits is None else np.asarray(logits, dtype=float)
        terms = sm.step_terms(q, c, lg)
        return float(sum(_roofline._seconds(f, b, peak, bw) for f, b, _ in terms.values()))

    return seconds


def forward_step_time(model, accelerator, new_tokens, context=0, dtype="fp16", *,
                      logits=None, kv_dtype=None, compute_dtype=None, flash=True) -> float:
    """Seconds of one mixed forward step: the sum of `forward_step_breakdown`'s rows."""
    q, c, lg = _step_args(new_tokens, context, logits)
    return step_timer(model, accelerator, dtype, kv_dtype=kv_dtype,
                      compute_dtype=compute_dtype, flash=flash)(q, c, lg)


def prefill_time(model, accelerator, prompt_tokens, batch=1, dtype="fp16", *,
                 kv_dtype=None, compute_dtype=None, flash=True) -> float:
    """Roofline seconds to prefill `batch` prompts of `prompt_tokens` each in one step:
    the weights read once while 2 FLOPs per weight are spent on every prompt token,
    causal attention over the prompt, the LM head once per prompt (for its first
    token). Usually compute-bound; short prompts on a fast GPU are not."""
    p = _v.count("prompt_tokens", prompt_tokens, maximum=1 << 30)
    b = _v.count("batch", batch, maximum=1 << 30)
    return forward_step_time(model, accelerator, np.full(b, p), np.zeros(b), dtype,
                             kv_dtype=kv_dtype, compute_dtype=compute_dtype, flash=flash)


# --- how much of the machine a measurement used ---------------------------------------------

def mbu(model, accelerator, tokens_per_s, batch=1, context=0, dtype="fp16", *,
        kv_dtype=None):
    """Chapter *Decoding is a weight read*: model bandwidth utilisation, the fraction of
    the datasheet bandwidth a measured decode speed implies.

    `tokens_per_s` is the measured total across the batch (tokens/s); steps/s =
    tokens_per_s / batch, and each step moves `decode_step_bytes` (the weights, every
    sequence's KV cache, the activations). Result: a fraction (0.69, not 69%).
    """
    acc = _hardware.get(accelerator)
    t = _v.positive("tokens_per_s", tokens_per_s, array=True)
    b, _ = _decode_args(batch, context)
    step_bytes = np.asarray(decode_step_bytes(model, batch, context, dtype, kv_dtype))
    return _v.scalar_or_array(step_bytes * t / b / _roofline.bandwidth_or_nan(acc))


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
    return _v.scalar_or_array(flops_per_token * t / _roofline.peak_or_nan(acc, compute))
