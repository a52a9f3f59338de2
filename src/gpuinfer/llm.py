"""Weight and KV-cache bytes, and the time of a forward step, of a catalogue model.

The models (`ModelSpec`, the table of published configs, `get`, `names`, `catalogue`)
live in `gpuinfer.models` and are re-exported here. Chapters: *The roofline model*,
*Decoding is a weight read*, *Serving LLMs*. SI units.

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

A mixture-of-experts (MoE) model replaces the MLP of its MoE layers by a router and experts
(chapter *Mixtures of experts*). Its step adds three rows, and `linear` keeps the attention
projections and the dense layers' MLPs:

- `router`: the gate matmul, d_model x routed experts per MoE layer, every token;
- `shared_experts`: experts every token passes through (DeepSeek-V3's one, Llama 4's one);
- `experts`: the routed experts. Each token runs k (top-k) of E; the step reads the
  weights of the distinct experts its tokens touch (`experts_touched`: k at one token, all
  E once the batch is large) and spends 2 x k x tokens x expert weights FLOPs. Memory holds
  every expert (`weight_bytes`); a step reads only what it touches.

Multi-head latent attention (MLA, DeepSeek-V2/V3) caches one compressed latent and a shared
RoPE key per token and layer (`mla_kv_cache_bytes_per_token`), and decodes in the
"absorbed" form (FlashMLA's): each query head scores the latent and RoPE key (kv_lora_rank
+ qk_rope_head_dim) and sums the latent values (kv_lora_rank).

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

import numpy as np

from . import dtypes as _dtypes
from . import hardware as _hardware
from . import roofline as _roofline
from . import validate as _v
# The model catalogue's home is `gpuinfer.models`: ModelSpec (shapes and derived counts),
# the table of published models, names(), get(), catalogue(). Re-exported here, so
# `llm.get("llama-2-7b")` and every other use of these names work as before.
from .models import ModelSpec, catalogue, get, names  # noqa: F401

#: Bytes of device memory a server cannot give to weights or the KV cache, unless told:
#: the CUDA context (a few hundred MB) and the framework's workspace (cuBLAS, NCCL,
#: allocator slack). An illustrative setting, not a measurement: real servers hold back
#: more for activations (vLLM's default gpu_memory_utilization, 0.9 in earlier releases and
#: 0.92 in current ones, leaves 8-10% unused).
DEFAULT_RESERVE_BYTES = 2**30

#: Rows of a dense model's step table, in the order they run.
OPERATIONS = ("embedding", "linear", "attention", "lm_head")
#: Rows of a mixture-of-experts model's step table (`operations(model)` gives a model's):
#: the router and experts run after attention in each MoE layer, the LM head last.
MOE_OPERATIONS = ("embedding", "linear", "attention", "router", "shared_experts", "experts",
                  "lm_head")


def operations(model) -> tuple:
    """The rows of `model`'s step table: `OPERATIONS` for a dense model,
    `MOE_OPERATIONS` for an MoE one (without `shared_experts` if it has none)."""
    m = get(model)
    if not m.is_moe:
        return OPERATIONS
    return tuple(op for op in MOE_OPERATIONS
                 if op != "shared_experts" or m.n_shared_experts)


# --- bytes ------------------------------------------------------------------------------

def weight_bytes(model, dtype="fp16") -> float:
    """Bytes of all the model's weights: the matmul weights (LM head included) in
    `dtype`, the embedding table and norms in the activation format (fp16 when `dtype`
    is quantised). For fp16 this is n_params x 2."""
    m = get(model)
    weight, _, act = _dtypes.formats(dtype)
    w, a = _dtypes.bytes_per_element(weight), _dtypes.bytes_per_element(act)
    matmuls = _dense_matmul_params(m) + (0 if m.tied_embeddings else m.embedding_params)
    table = m.embedding_params
    norms = (2 * m.n_layers + 1) * m.d_model + m.n_layers * (
        m.q_lora_rank + m.kv_lora_rank if m.is_mla else 0)
    experts = m.n_moe_layers * m.n_experts * m.expert_params * expert_bytes(m, weight)
    router = m.n_moe_layers * m.router_params_per_layer  # kept in the activation format
    if m.tied_embeddings:  # one table serves as embedding and head: stored as the head
        return float(matmuls * w + experts + table * w + (norms + router) * a)
    return float(matmuls * w + experts + (table + norms + router) * a)


def _dense_matmul_params(m) -> int:
    """Matmul weights every token runs through, LM head aside: attention in every layer,
    the dense layers' MLPs, the shared experts."""
    return (m.n_layers * m.attention_params_per_layer + m.n_dense_layers * 3 * m.d_model * m.d_ff
            + m.n_moe_layers * m.n_shared_experts * m.expert_params)


def expert_bytes(m, weight) -> float:
    """Bytes of one routed-expert weight of model `m` (a `ModelSpec`): `weight`'s, or
    the shipped `expert_dtype`'s if narrower (gpt-oss's MXFP4 experts are not widened
    by asking for bf16)."""
    w = _dtypes.bytes_per_element(weight)
    return min(w, _dtypes.bytes_per_element(m.expert_dtype)) if m.expert_dtype else w


def step_weight_bytes(model, dtype="fp16", tokens=1):
    """Bytes of weights one decode step of `tokens` tokens (the batch) reads: every
    layer's linear weights and the LM head, in `dtype`. The embedding is a gather of one
    row per token, not a read of its table, and the norms are a rounding error, so this
    is a little less than `weight_bytes` (Llama-2-7B fp16: 13.21 GB of 13.48 GB;
    Llama-3-8B, whose 128k-entry embedding is 1.05 GB: 15.01 of 16.06 GB). Batch x
    bandwidth / this is the weights-only ceiling the calculator shows.

    A dense model reads the same bytes whatever `tokens` is. An MoE model reads its
    attention, dense layers, shared experts, routers and LM head, plus the routed experts
    its tokens touch (`experts_touched`: k per MoE layer for one token, up to all E), so
    the bytes grow with `tokens`. Vectorised over `tokens`."""
    m = get(model)
    weight, _, act = _dtypes.formats(dtype)
    w = _dtypes.bytes_per_element(weight)
    dense = float((_dense_matmul_params(m) + m.embedding_params) * w)
    if not m.is_moe:
        return dense
    t = _v.positive("tokens", tokens, integer=True, array=True)
    routed = (m.n_moe_layers * m.expert_params * expert_bytes(m, weight)
              * experts_touched(m, t))
    router = m.n_moe_layers * m.router_params_per_layer * _dtypes.bytes_per_element(act)
    return _v.scalar_or_array(dense + router + routed)


def routed_expert_weight_bytes(model, tokens, dtype="fp16"):
    """Bytes of routed-expert weights a step of `tokens` tokens reads, over all MoE
    layers: experts_touched x MoE layers x expert weights x bytes a weight (`dtype`, or
    the shipped `expert_dtype` if narrower). The one term of a step's table that is not
    affine in the step's token count (0 for a dense model). Vectorised over `tokens`."""
    m = get(model)
    if not m.is_moe:
        return _v.scalar_or_array(np.zeros(np.shape(tokens)))
    weight, _, _ = _dtypes.formats(dtype)
    return _v.scalar_or_array(m.n_moe_layers * m.expert_params * expert_bytes(m, weight)
                              * np.asarray(experts_touched(m, tokens)))


def experts_touched(model, tokens, *, touched=None):
    """Chapter *Mixtures of experts*: how many distinct routed experts one MoE layer
    reads for `tokens` routed tokens (a decode batch, or a prefill's prompt tokens).

    Under uniform routing each token picks k of the E experts, so a given expert is
    missed by one token with probability 1 - k/E and by all of them with (1 - k/E)^tokens:
        expected distinct experts = E (1 - (1 - k/E)^tokens).
    That is k at one token (exactly: 1 - (1 - k/E) = k/E) and tends to E as tokens grow
    (Mixtral, k/E = 1/4: 7.9 of 8 at 16 tokens; DeepSeek-V3, 8 of 256: 112 at 16 tokens,
    255 at 200). (Tokens are treated as independent draws with replacement of their k
    experts; within a token they are distinct, so the exact expectation at one token is k.)

    Real routing is skewed, not uniform: a few "hot" experts take many tokens and others
    few, so a batch touches *fewer* distinct experts than this (fewer weight bytes, the
    experts saturate later) while the hot expert's matmul carries more than its share of
    tokens (which sets the step's time under expert parallelism: the busiest device).
    Load-balancing losses and biases (DeepSeek-V3's auxiliary-loss-free bias) keep it
    nearer uniform over a training batch, not in every decode step. Pass a measured
    count as `touched` (distinct experts seen per MoE layer, e.g. from the router's
    top-k indices) and it is checked (0 to min(E, k x tokens)) and returned, so the
    callers can take a measurement instead of the uniform model. Vectorised over
    `tokens`."""
    m = get(model)
    if not m.is_moe:
        raise ValueError(f"experts_touched needs a mixture-of-experts model; {m.name} is "
                         f"dense (n_experts=0)")
    t = _v.non_negative("tokens", tokens, array=True)
    E, k = m.n_experts, m.experts_per_token
    if touched is not None:
        top = np.minimum(E, k * t)
        got = _v.non_negative("touched", touched, array=True)
        if np.any(got > top):
            raise ValueError(f"touched must be at most min(n_experts, k x tokens) = "
                             f"{top} distinct experts for {m.name}, got {touched!r}")
        return _v.scalar_or_array(np.broadcast_to(got, np.broadcast(got, t).shape) * 1.0)
    return _v.scalar_or_array(uniform_experts_touched(E, k, t))


def uniform_experts_touched(n_experts, k, tokens):
    """E (1 - (1 - k/E)^tokens), unchecked (`experts_touched` checks; the step model calls
    this on its fast path)."""
    return n_experts * (1.0 - (1.0 - k / n_experts) ** tokens)


def kv_cache_bytes_per_token(model, dtype="fp16") -> float:
    """KV-cache bytes one token adds: 2 (K and V) x layers x KV heads x head_dim x bytes.

    Uses the *KV* heads: grouped-query models (Llama-3, Mistral) cache fewer heads than
    they query; counting query heads overstates their cache (n_heads / n_kv_heads times).
    Latent attention (DeepSeek-V3) caches a latent and a RoPE key instead:
    `mla_kv_cache_bytes_per_token`.
    """
    m = get(model)
    if m.is_mla:
        return mla_kv_cache_bytes_per_token(m.n_layers, m.kv_lora_rank, m.qk_rope_head_dim,
                                            _dtypes.bytes_per_element(dtype))
    return 2.0 * m.n_layers * m.kv_dim * _dtypes.bytes_per_element(dtype)


def mla_kv_cache_bytes_per_token(n_layers, kv_lora_rank, qk_rope_head_dim,
                                 bytes_per_element=2.0) -> float:
    """Chapter *Serving LLMs*: the KV cache one token adds under multi-head latent
    attention (DeepSeek-V2 and V3): per layer one compressed latent of `kv_lora_rank`
    values and one RoPE key of `qk_rope_head_dim` values shared by every head, not a key
    and a value per head: layers x (kv_lora_rank + qk_rope_head_dim) x bytes.
    DeepSeek-V3 in bf16: 61 x (512 + 64) x 2 = 70,272 bytes (full multi-head attention
    over its 128 heads of 128 would cache 2 x 128 x 128 = 32,768 values a layer, 57x more)."""
    L = _v.count("n_layers", n_layers, maximum=1 << 24)
    r = _v.count("kv_lora_rank", kv_lora_rank, maximum=1 << 24)
    rope = _v.count("qk_rope_head_dim", qk_rope_head_dim, minimum=0, maximum=1 << 24)
    b = _v.positive("bytes_per_element", bytes_per_element)
    return float(L * (r + rope) * b)


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


# --- the operations of a forward step ------------------------------------------------------

class StepModel:
    """The constants of one (model, formats) pair, and the operations table of a step as
    arrays: built once, evaluated many times (`forward_step_breakdown` builds a step's
    table from it; `StepCost` reads its constants to time steps in closed form).
    `step_terms(new_tokens, context, logits)` and `decode_terms(batch, context)` return
    {operation: (FLOPs, bytes, dtype)} (`operations(model)`'s rows), arrays broadcast
    over the sequences; `STEP_CONSTANTS` names the constants they read. `touched`: a
    measured count of distinct experts per MoE layer in place of the uniform-routing
    expectation."""

    def __init__(self, model, dtype="fp16", kv_dtype=None, compute_dtype=None, flash=True,
                 touched=None):
        self.m = m = get(model)
        self.touched_override = None
        if touched is not None:  # a measured count of distinct experts per MoE layer
            experts_touched(m, m.n_experts, touched=touched)
            self.touched_override = float(touched)
        self.weight, self.kv, self.compute = _dtypes.formats(dtype, kv_dtype, compute_dtype)
        _, _, embed = _dtypes.formats(dtype)
        e_act = _dtypes.bytes_per_element(embed)   # norms, router: the activation format
        self.flash = bool(flash)
        w = _dtypes.bytes_per_element(self.weight)
        self.a = a = _dtypes.bytes_per_element(self.compute)   # activations
        e = _dtypes.bytes_per_element(embed if not m.tied_embeddings else self.weight)
        L = m.n_layers
        # `linear`: attention projections in every layer, MLPs in the dense layers.
        linear = L * m.attention_params_per_layer + m.n_dense_layers * 3 * m.d_model * m.d_ff
        linear_act = (L * m.attention_activations_per_token_per_layer
                      + m.n_dense_layers * (2 * m.d_model + 3 * m.d_ff))
        self.linear_weight_bytes = linear * w
        self.linear_flops_per_token = 2.0 * linear
        self.linear_act_bytes_per_token = linear_act * a
        # Mixture of experts, summed over the MoE layers (all 0 for a dense model).
        n_moe, pe = m.n_moe_layers, m.expert_params
        expert_act = 2 * m.d_model + 3 * m.expert_d_ff     # one expert: like a dense MLP
        self.n_experts = float(m.n_experts)
        self.experts_per_token = float(m.experts_per_token)
        self.router_weight_bytes = n_moe * m.router_params_per_layer * e_act
        self.router_flops_per_token = 2.0 * n_moe * m.router_params_per_layer
        self.router_act_bytes_per_token = n_moe * (m.d_model + m.n_experts) * a
        self.shared_weight_bytes = n_moe * m.n_shared_experts * pe * w
        self.shared_flops_per_token = 2.0 * n_moe * m.n_shared_experts * pe
        self.shared_act_bytes_per_token = n_moe * m.n_shared_experts * expert_act * a
        self.expert_bytes = n_moe * pe * expert_bytes(m, self.weight)  # one expert a layer
        self.expert_flops_per_token = 2.0 * m.experts_per_token * n_moe * pe
        self.expert_act_bytes_per_token = m.experts_per_token * n_moe * expert_act * a
        has_vocab = m.vocab_size > 0  # a bare layer stack has no embedding and no head
        self.head_weight_bytes = m.embedding_params * w
        self.head_flops_per_row = 2.0 * m.embedding_params
        self.head_act_bytes_per_row = (m.d_model + m.vocab_size) * a * has_vocab
        self.embed_bytes_per_token = m.d_model * (e + a) * has_vocab
        self.kv_per_token = kv_cache_bytes_per_token(m, self.kv)
        # Attention, per layer summed over layers:
        if m.is_mla:  # absorbed MLA: scores over latent + RoPE key, values over the latent
            latent = m.kv_lora_rank + m.qk_rope_head_dim
            self.attn_flops_per_pair = 2.0 * L * m.n_heads * (latent + m.kv_lora_rank)
            # Q (absorbed, per head) and the new latent in, the heads' latent outputs out
            self.attn_act_bytes_per_token = L * (m.n_heads * latent + latent
                                                 + m.n_heads * m.kv_lora_rank) * a
        else:
            self.attn_flops_per_pair = 4.0 * L * m.q_dim        # scores + weighted values
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
        out = {
            "embedding": (tokens * 0.0, tokens * self.embed_bytes_per_token, c),
            "linear": (tokens * self.linear_flops_per_token,
                       self.linear_weight_bytes + tokens * self.linear_act_bytes_per_token, c),
            "attention": (pairs * self.attn_flops_per_pair, attn_bytes, c),
        }
        if self.n_experts:
            out.update(self.moe_terms(tokens))
        out["lm_head"] = (logits * self.head_flops_per_row,
                          np.where(head_runs, self.head_weight_bytes
                                   + logits * self.head_act_bytes_per_row, 0.0), c)
        return out

    def touched(self, tokens):
        """Distinct routed experts a layer reads for `tokens` tokens (uniform routing,
        `experts_touched`), or the measured count this model was given."""
        if self.touched_override is not None:
            return np.minimum(self.touched_override, self.experts_per_token * tokens)
        return uniform_experts_touched(self.n_experts, self.experts_per_token, tokens)

    def moe_terms(self, tokens):
        """The router, shared-expert and routed-expert rows for `tokens` tokens."""
        c = self.compute
        out = {"router": (tokens * self.router_flops_per_token,
                          self.router_weight_bytes + tokens * self.router_act_bytes_per_token, c)}
        if self.shared_weight_bytes:
            out["shared_experts"] = (tokens * self.shared_flops_per_token,
                                     self.shared_weight_bytes
                                     + tokens * self.shared_act_bytes_per_token, c)
        out["experts"] = (tokens * self.expert_flops_per_token,
                          self.touched(tokens) * self.expert_bytes
                          + tokens * self.expert_act_bytes_per_token, c)
        return out

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


#: The constants of `StepModel` that `decode_terms` reads: what the website's calculator
#: (_static/calculator.js, `decodeTerms`) needs to rebuild a decode step in the browser.
STEP_CONSTANTS = ("linear_weight_bytes", "linear_flops_per_token", "linear_act_bytes_per_token",
                  "head_weight_bytes", "head_flops_per_row", "head_act_bytes_per_row",
                  "embed_bytes_per_token", "kv_per_token", "attn_flops_per_pair",
                  "attn_act_bytes_per_token",
                  # mixtures of experts (0 for a dense model): `moe_terms`
                  "n_experts", "experts_per_token", "router_weight_bytes",
                  "router_flops_per_token", "router_act_bytes_per_token",
                  "shared_weight_bytes", "shared_flops_per_token", "shared_act_bytes_per_token",
                  "expert_bytes", "expert_flops_per_token", "expert_act_bytes_per_token")


def step_constants(model, dtype="fp16", *, kv_dtype=None, compute_dtype=None) -> dict:
    """Appendix *Calculator*: the per-model constants of the operations table (bytes,
    FLOPs per token, per (query, key) pair, ...), with the formats and the weights'
    bytes. The website's calculator rebuilds a decode step from them in JavaScript; a
    test checks it against this module on every model x device x format x (batch,
    context) of a grid."""
    sm = StepModel(model, dtype, kv_dtype, compute_dtype)
    return {"weight_dtype": sm.weight, "kv_dtype": sm.kv, "compute_dtype": sm.compute,
            "weight_bytes": weight_bytes(model, dtype),
            **{k: float(getattr(sm, k)) for k in STEP_CONSTANTS}}


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
    `seconds.sum()`. `batch` and `context` are single numbers here; `decode_step_time`
    and `decode_ceiling` take arrays."""
    b = _v.count("batch", batch, maximum=1 << 30)
    c = _v.count("context", context, minimum=0, maximum=1 << 30)
    sm = StepModel(model, dtype, kv_dtype, compute_dtype)
    return breakdown(sm.decode_terms(b, c), accelerator)


def decode_step_time(model, accelerator, batch=1, context=0, dtype="fp16", *,
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
    memory (`max_batch`); 0 if none does. The step time grows with the batch, so this
    is a search over the batches that fit."""
    limit = _v.positive("step_s", step_s)
    fits = max_batch(model, accelerator, context, dtype, kv_dtype=kv_dtype,
                     reserve_bytes=reserve_bytes)
    if fits < 1:
        return 0
    lo, hi = 0, fits  # step(lo) <= limit (or lo = 0); find the last batch that meets it
    sm = StepModel(model, dtype, kv_dtype, compute_dtype)
    def meets(b):
        return _roofline.step_s(sm.decode_terms(b, context), accelerator) <= limit
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
    sm = StepModel(model, dtype, kv_dtype, compute_dtype, flash)
    return breakdown(sm.step_terms(q, c, lg), accelerator)


def step_aggregates(new_tokens, context, logits=None):
    """What a mixed step's operations table depends on (`forward_step_breakdown`), as one
    array `STEP_AGGREGATES` long: 1, new tokens, LM-head rows, causal (query, key) pairs
    (a sequence's q new tokens attend to its c cached ones and to the earlier new ones:
    q c + q (q + 1) / 2), cached tokens, and score-matrix entries q (c + q) (what an
    attention kernel that writes the scores stores: `flash=False`). Per-sequence arrays
    in, no checks (`forward_step_time` checks)."""
    q = np.asarray(new_tokens, dtype=float)
    c = np.asarray(context, dtype=float)
    lg = np.ones_like(q) if logits is None else np.asarray(logits, dtype=float)
    t = q.sum()
    return np.array([1.0, t, lg.sum(), q @ c + (q @ q + t) / 2, c.sum(), q @ c + q @ q])


#: The rows of `step_aggregates`' result.
STEP_AGGREGATES = ("one", "new_tokens", "logits_rows", "pairs", "cached_tokens",
                   "score_entries")
#: What `StepCost` prices: the aggregates, then whether any sequence runs the LM head and
#: the routed-expert weight bytes (the two terms that are not affine in the aggregates).
STEP_FEATURES = STEP_AGGREGATES + ("head_runs", "routed_expert_bytes")

#: `StepCost`'s coefficients by (model, formats, flash): a calibration builds thousands of
#: step costs that differ only in their rates.
_COEFFICIENTS = {}


def _step_coefficients(m, dtype, kv_dtype, compute_dtype, flash):
    """`forward_step_breakdown`'s table in closed form: each row's FLOPs and bytes (in
    `operations(m)` order) as coefficients of `STEP_FEATURES`, from `StepModel`'s
    constants (the calculator's, `step_constants`)."""
    key = (m, dtype, kv_dtype, compute_dtype, bool(flash))
    if key in _COEFFICIENTS:
        return _COEFFICIENTS[key]
    k = StepModel(m, dtype, kv_dtype, compute_dtype, flash)
    kv = k.kv_per_token
    table = {  # row: ({feature: FLOPs coefficient}, {feature: bytes coefficient})
        "embedding": ({}, {"new_tokens": k.embed_bytes_per_token}),
        "linear": ({"new_tokens": k.linear_flops_per_token},
                   {"one": k.linear_weight_bytes,
                    "new_tokens": k.linear_act_bytes_per_token}),
        # the cache read, the new tokens' K and V written, Q/K/V in and O out (and the
        # score matrix written and read back without FlashAttention)
        "attention": ({"pairs": k.attn_flops_per_pair},
                      {"cached_tokens": kv, "new_tokens": kv + k.attn_act_bytes_per_token,
                       "score_entries": 0.0 if flash else k.score_bytes_per_pair}),
        "router": ({"new_tokens": k.router_flops_per_token},
                   {"one": k.router_weight_bytes,
                    "new_tokens": k.router_act_bytes_per_token}),
        "shared_experts": ({"new_tokens": k.shared_flops_per_token},
                           {"one": k.shared_weight_bytes,
                            "new_tokens": k.shared_act_bytes_per_token}),
        "experts": ({"new_tokens": k.expert_flops_per_token},
                    {"routed_expert_bytes": 1.0,
                     "new_tokens": k.expert_act_bytes_per_token}),
        "lm_head": ({"logits_rows": k.head_flops_per_row},
                    {"head_runs": k.head_weight_bytes,
                     "logits_rows": k.head_act_bytes_per_row}),
    }
    rows = list(operations(m))
    col = {f: j for j, f in enumerate(STEP_FEATURES)}
    cf, cb = np.zeros((len(rows), len(col))), np.zeros((len(rows), len(col)))
    for i, name in enumerate(rows):
        for coef, terms in ((cf, table[name][0]), (cb, table[name][1])):
            for f, x in terms.items():
                coef[i, col[f]] = x
    if len(_COEFFICIENTS) > 256:
        _COEFFICIENTS.clear()
    _COEFFICIENTS[key] = out = (cf, cb, rows, k.compute)
    return out


def datasheet_rates(rows, accelerator):
    """(peak FLOP/s, bandwidth bytes/s) per row of a step table on `accelerator`'s
    datasheet roofline: every row at the peak of its format (`roofline.peak`: an error
    when the catalogue has none) and the DRAM bandwidth. `rows` is [(name, FLOPs,
    dtype)]; `achievable.row_rates` is the derated counterpart."""
    acc = _hardware.get(accelerator)
    bw = _roofline.bandwidth(acc)
    return (np.array([_roofline.peak(acc, d) for _, _, d in rows], dtype=float),
            np.full(len(rows), bw))


class StepCost:
    """Seconds of a mixed forward step, the sum of its operations' rooflines (the sum of
    `forward_step_breakdown`'s `seconds`), fast enough for a simulator that times tens of
    thousands of steps: the table is built in closed form from the step model's constants
    (`StepModel`), so a step is one matrix product and `roofline`'s formula over the rows,
    dense and mixture-of-experts models alike.

    A step is described by its aggregates (`step_aggregates`, `STEP_AGGREGATES` rows; a
    column per step to time several at once). Attributes: `names` (the rows,
    `operations(model)`), `cf` and `cb` (FLOPs and bytes per row as coefficients of
    `STEP_FEATURES`), `peaks` and `bandwidths` (each row's rates). `rates(rows)` -> (peaks,
    bandwidths) replaces the datasheet's (`datasheet_rates`), e.g. `achievable.row_rates`
    with an efficiency; `rows` is [(name, does arithmetic, compute dtype)]. Call it as
    `cost(new_tokens, context, logits=None)` -> seconds (per-sequence arrays, unchecked
    for speed: `forward_step_time` checks them)."""

    def __init__(self, model, accelerator, dtype="fp16", *, kv_dtype=None, compute_dtype=None,
                 flash=True, rates=None):
        self.model = m = get(model)
        self.dtype = dtype
        self.cf, self.cb, self.names, self.compute_dtype = _step_coefficients(
            m, dtype, kv_dtype, compute_dtype, flash)
        rows = [(n, f, self.compute_dtype)
                for n, f in zip(self.names, np.abs(self.cf).sum(axis=1))]
        self.peaks, self.bandwidths = (datasheet_rates(rows, accelerator) if rates is None
                                       else rates(rows))

    def features(self, z):
        """`STEP_FEATURES` (8 x k) of steps with aggregates `z` (6 x k)."""
        z = np.asarray(z, dtype=float)
        routed = (np.asarray(routed_expert_weight_bytes(self.model, z[1], self.dtype),
                             dtype=float) if self.model.is_moe else np.zeros(z.shape[1:]))
        return np.vstack([z, (z[2] > 0).astype(float)[None], np.reshape(routed, (1, -1))])

    def flops_bytes(self, z):
        """(FLOPs, bytes) of each row (rows x k) of steps with aggregates `z` (6 x k)."""
        x = self.features(z)
        return self.cf @ x, self.cb @ x

    def rows(self, z):
        """Each row's seconds (rows x k) of steps with aggregates `z` (6 x k)."""
        f, b = self.flops_bytes(z)
        return _roofline.op_time_s_unchecked(f, b, self.peaks[:, None], self.bandwidths[:, None])

    def many(self, z):
        """Seconds of several steps at once: `z` holds one step's aggregates a column."""
        return self.rows(z).sum(axis=0)

    def __call__(self, new_tokens, context, logits=None) -> float:
        z = step_aggregates(new_tokens, context, logits)
        return float(self.many(z[:, None])[0])


def step_timer(model, accelerator, dtype="fp16", *, kv_dtype=None, compute_dtype=None,
               flash=True):
    """A fast function (new_tokens, context, logits=None) -> seconds of a forward step,
    the sum of `forward_step_breakdown`'s rows, for a simulator that times thousands of
    steps: a `StepCost` on the datasheet roofline. The model, device and formats are
    fixed when it is made."""
    return StepCost(model, accelerator, dtype, kv_dtype=kv_dtype,
                    compute_dtype=compute_dtype, flash=flash)


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
