"""The operations of a decoder's forward step, each one's FLOPs and bytes, and the bytes a
catalogue model holds (its weights, its KV cache per token).

Chapters: *The roofline model*, *Decoding is a weight read*, *Serving LLMs*,
*Mixtures of experts*. SI units. No device here: `gpuinfer.predict.llm` times these tables on an
accelerator's roofline, `gpuinfer.predict.step_cost` in closed form.

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
"""

from __future__ import annotations

import numpy as np

from gpuinfer import dtypes as _dtypes
from gpuinfer import validate as _v
from gpuinfer.predict.architectures import get

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


def mla_decode_intensity(n_heads, kv_lora_rank, qk_rope_head_dim, n_devices=1) -> float:
    """Chapters *Decoding is a weight read*, *Serving LLMs*: FLOP per byte of multi-head
    latent attention's decode step (absorbed projections, one query token a sequence, the
    heads split `n_devices` ways): each of n_heads / n_devices heads scores the cached
    latent and RoPE key, d_k = kv_lora_rank + qk_rope_head_dim values, and sums its
    d_v = kv_lora_rank latent values (2 FLOPs a multiply-add) over the token's d_k values
    read once in 16 bits (2 bytes): n_heads / n_devices x (d_k + d_v) / d_k.
    DeepSeek-V3: 128 x (576 + 512) / 576 = 241.8; under TP8, 16 heads a GPU: 30.2."""
    h = _v.count("n_heads", n_heads, maximum=1 << 20)
    r = _v.count("kv_lora_rank", kv_lora_rank, maximum=1 << 24)
    rope = _v.count("qk_rope_head_dim", qk_rope_head_dim, minimum=0, maximum=1 << 24)
    n = _v.count("n_devices", n_devices, maximum=h)
    d_k, d_v = r + rope, r
    return h / n * (d_k + d_v) / d_k


# --- the operations of a forward step ------------------------------------------------------

class StepModel:
    """The constants of one (model, formats) pair, and the operations table of a step as
    arrays: built once, evaluated many times (`llm.forward_step_breakdown` times a step's
    table from it; `step_cost.StepCost` reads its constants to time steps in closed form).
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
