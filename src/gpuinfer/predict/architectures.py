"""The model catalogue: decoder-only transformers as their published configs describe them.

Chapters: *The roofline model*, *Decoding is a weight read*, *Mixtures of experts*.

`ModelSpec` holds a model's shapes (dense, mixture-of-experts, multi-head latent
attention) and the counts derived from them (parameters, active parameters, weights per
layer, activations per token), checked when it is built. The table below holds the
published models, each with its config.json as source; `names()`, `get(name)` and
`catalogue()` (a DataFrame) read it. What a step of a model costs (bytes, FLOPs, time
on a device) is `gpuinfer.predict.step_model`'s (the operations)
and `gpuinfer.predict.llm`'s (their time on a device).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuinfer import dtypes as _dtypes
from gpuinfer import validate as _v


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer as its published config describes it (Llama layout:
    gated MLP of three matrices, RMSNorm, untied input and output embeddings unless
    `tied_embeddings`). `vocab_size=0` describes a bare layer stack (the labs' model).

    Mixture of experts (all 0 for a dense model): `n_experts` routed experts (E), of which
    each token runs `experts_per_token` (k, the top-k); `n_shared_experts` that every
    token runs; each expert a gated MLP of width `expert_d_ff`. Layer i is an MoE layer
    when i >= `first_dense_layers` and (i + 1) % `moe_layer_step` == 0 (DeepSeek-V3:
    the first 3 are dense; Llama-4-Maverick: every second layer); the dense layers keep an
    MLP of width `d_ff`. `expert_dtype`: the format the experts ship in when it is
    narrower than the rest (gpt-oss: "mxfp4"); a step counts each expert in the narrower
    of it and the `dtype` asked for.

    Multi-head latent attention (all 0 otherwise): `kv_lora_rank` (the cached latent),
    `qk_rope_head_dim` (the cached RoPE key, shared by the heads), `q_lora_rank` (the
    query's low-rank down-projection, 0 if none) and `v_head_dim`; `head_dim` is then the
    query/key head size (qk_nope_head_dim + qk_rope_head_dim)."""

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
    n_experts: int = 0
    experts_per_token: int = 0
    n_shared_experts: int = 0
    expert_d_ff: int = 0
    first_dense_layers: int = 0
    moe_layer_step: int = 1
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    expert_dtype: str = ""
    note: str = ""

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.strip():
            raise TypeError(f"ModelSpec name must be a non-empty string, got {self.name!r}")
        for field in ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff"):
            _v.count(f"{self.name}: {field}", getattr(self, field), maximum=1 << 24)
        for field in ("vocab_size", "n_experts", "experts_per_token", "n_shared_experts",
                      "expert_d_ff", "first_dense_layers", "q_lora_rank", "kv_lora_rank",
                      "qk_rope_head_dim", "v_head_dim"):
            _v.count(f"{self.name}: {field}", getattr(self, field), minimum=0, maximum=1 << 24)
        _v.count(f"{self.name}: moe_layer_step", self.moe_layer_step, maximum=1 << 24)
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"{self.name}: n_kv_heads ({self.n_kv_heads}) must divide "
                             f"n_heads ({self.n_heads}): each KV head serves a whole group")
        if self.n_experts:
            if not 1 <= self.experts_per_token <= self.n_experts:
                raise ValueError(f"{self.name}: experts_per_token must be 1 to n_experts "
                                 f"({self.n_experts}), got {self.experts_per_token}")
            if not self.expert_d_ff:
                raise ValueError(f"{self.name}: an MoE model needs expert_d_ff (the width "
                                 f"of one expert's MLP), got 0")
            if self.first_dense_layers >= self.n_layers:
                raise ValueError(f"{self.name}: first_dense_layers ({self.first_dense_layers})"
                                 f" leaves no MoE layer of {self.n_layers}")
        elif self.experts_per_token or self.n_shared_experts or self.expert_d_ff:
            raise ValueError(f"{self.name}: experts_per_token, n_shared_experts and "
                             f"expert_d_ff need n_experts > 0 (routed experts); got "
                             f"n_experts=0")
        if self.kv_lora_rank and not (0 < self.qk_rope_head_dim < self.head_dim
                                      and self.v_head_dim):
            raise ValueError(f"{self.name}: latent attention needs 0 < qk_rope_head_dim < "
                             f"head_dim ({self.head_dim}) and v_head_dim > 0")
        if self.expert_dtype:
            _dtypes.get(self.expert_dtype)

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> tuple:
        """Indices of the MoE layers (empty for a dense model)."""
        if not self.is_moe:
            return ()
        return tuple(i for i in range(self.n_layers)
                     if i >= self.first_dense_layers and (i + 1) % self.moe_layer_step == 0)

    @property
    def n_moe_layers(self) -> int:
        return len(self.moe_layers)

    @property
    def n_dense_layers(self) -> int:
        return self.n_layers - self.n_moe_layers

    @property
    def attention_params_per_layer(self) -> int:
        """Weights of one layer's attention matmuls. GQA/MHA: Q, K, V, output. MLA: the
        query's down (d x q_lora_rank) and up (q_lora_rank x heads x head_dim)
        projections, the joint KV down-projection with the RoPE key (d x (kv_lora_rank +
        qk_rope_head_dim)), its up-projection to the heads' keys and values (kv_lora_rank
        x heads x (qk_nope_head_dim + v_head_dim)) and the output (heads x v_head_dim x d)."""
        d, h = self.d_model, self.n_heads
        if not self.is_mla:
            return d * (self.q_dim + 2 * self.kv_dim) + self.q_dim * d
        nope = self.head_dim - self.qk_rope_head_dim
        q = (d * self.q_lora_rank + self.q_lora_rank * self.q_dim) if self.q_lora_rank \
            else d * self.q_dim
        return (q + d * (self.kv_lora_rank + self.qk_rope_head_dim)
                + self.kv_lora_rank * h * (nope + self.v_head_dim) + h * self.v_head_dim * d)

    @property
    def attention_activations_per_token_per_layer(self) -> int:
        """Elements one token's activations cost the attention matmuls (each reads its
        input, writes its output)."""
        d, h = self.d_model, self.n_heads
        if not self.is_mla:
            return 2 * d + 2 * self.q_dim + 2 * self.kv_dim  # QKV: d in, q+2kv out; O: q in, d out
        nope = self.head_dim - self.qk_rope_head_dim
        q = (d + 2 * self.q_lora_rank + self.q_dim) if self.q_lora_rank else d + self.q_dim
        kv = d + self.kv_lora_rank + self.qk_rope_head_dim + self.kv_lora_rank \
            + h * (nope + self.v_head_dim)
        return q + kv + h * self.v_head_dim + d

    @property
    def linear_params_per_layer(self) -> int:
        """Weights of one dense layer's matmuls: Q, K, V, output, gate, up, down (for an
        MoE model: its attention and a dense layer's MLP of width d_ff)."""
        return self.attention_params_per_layer + 3 * self.d_model * self.d_ff

    @property
    def activations_per_token_per_layer(self) -> int:
        """Elements one token's activations cost a dense layer's matmuls: each reads its
        input and writes its output (QKV: d in, q+2kv out; O: q in, d out; gate/up: d in,
        2 d_ff out; down: d_ff in, d out)."""
        return self.attention_activations_per_token_per_layer + 2 * self.d_model + 3 * self.d_ff

    @property
    def expert_params(self) -> int:
        """Weights of one expert (gate, up, down of width expert_d_ff)."""
        return 3 * self.d_model * self.expert_d_ff

    @property
    def router_params_per_layer(self) -> int:
        return self.d_model * self.n_experts

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.d_model

    def _params(self, routed) -> int:
        d = self.d_model
        norms = 2 * d + (self.q_lora_rank + self.kv_lora_rank if self.is_mla else 0)
        per_layer = self.attention_params_per_layer + norms
        moe = self.router_params_per_layer + (self.n_shared_experts + routed) * self.expert_params
        embeddings = self.embedding_params * (1 if self.tied_embeddings else 2)
        return (self.n_layers * per_layer + self.n_dense_layers * 3 * d * self.d_ff
                + self.n_moe_layers * moe + embeddings + d)

    @property
    def n_params(self) -> int:
        """Parameter count computed from the shapes (matches the published totals): every
        weight, every expert. Biases (gpt-oss's), attention sinks, Qwen3's QK-norms and
        multi-token-prediction modules are not counted."""
        return self._params(self.n_experts)

    @property
    def n_active_params(self) -> int:
        """Parameters one token uses: every weight but the routed experts it is not sent
        to (k of E per MoE layer). Both embedding tables count, as Mixtral's 12.9B does
        (gpt-oss's 5.1B leaves the input embedding out: subtract `embedding_params`). For
        a dense model, `n_params`."""
        return self._params(self.experts_per_token)

    @property
    def attention(self) -> str:
        if self.is_mla:
            return "latent"
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
    # --- Mixtures of experts (chapter *Mixtures of experts*). Shapes from each config.json;
    # d_ff is the dense layers' MLP width (configs that have no dense layer: their
    # `intermediate_size`, unused). Not modelled: sliding-window / chunked attention
    # (gpt-oss: every other layer attends to 128 tokens; Llama 4: 3 of 4 layers to chunks
    # of 8,192), so their KV cache and attention bytes are upper bounds at long context;
    # gpt-oss's biases and attention sinks (0.03% of its weights), Qwen3's QK-norms
    # (256 weights a layer), DeepSeek-V3's multi-token-prediction module (14B, not part of
    # the 671B), Llama 4's vision encoder.
    dict(name="mixtral-8x7b", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8,
         head_dim=128, d_ff=14336, vocab_size=32000, n_experts=8, experts_per_token=2,
         expert_d_ff=14336, source=_HF.format("mistralai/Mixtral-8x7B-v0.1"),
         note="46.7B total, 12.9B active (Mistral AI)"),
    dict(name="qwen3-30b-a3b", n_layers=48, d_model=2048, n_heads=32, n_kv_heads=4,
         head_dim=128, d_ff=6144, vocab_size=151936, n_experts=128, experts_per_token=8,
         expert_d_ff=768, source=_HF.format("Qwen/Qwen3-30B-A3B"),
         note="30.5B total, 3.3B active (Qwen)"),
    dict(name="qwen3-235b-a22b", n_layers=94, d_model=4096, n_heads=64, n_kv_heads=4,
         head_dim=128, d_ff=12288, vocab_size=151936, n_experts=128, experts_per_token=8,
         expert_d_ff=1536, source=_HF.format("Qwen/Qwen3-235B-A22B"),
         note="235B total, 22B active (Qwen)"),
    # MLA: q_lora_rank 1536, kv_lora_rank 512, qk_nope_head_dim 128 + qk_rope_head_dim 64
    # (head_dim 192), v_head_dim 128; first_k_dense_replace 3 (d_ff 18432), 1 shared + 256
    # routed experts of 2048, top-8. Shipped in fp8 (128 x 128 block scales, 0.02% more
    # bytes, not counted); its router and LM head stay bf16 (here the LM head takes
    # `dtype`).
    dict(name="deepseek-v3", n_layers=61, d_model=7168, n_heads=128, n_kv_heads=128,
         head_dim=192, d_ff=18432, vocab_size=129280, n_experts=256, experts_per_token=8,
         n_shared_experts=1, expert_d_ff=2048, first_dense_layers=3, q_lora_rank=1536,
         kv_lora_rank=512, qk_rope_head_dim=64, v_head_dim=128,
         source=_HF.format("deepseek-ai/DeepSeek-V3"),
         note="671B total (685B with the MTP module), 37B active (DeepSeek-V3 report)"),
    # gpt-oss ships its experts in MXFP4 (E2M1 values, an E8M0 scale per 32: 0.53125 B a
    # weight, counted) and everything else in bf16: `expert_dtype`. Attention alternates
    # a 128-token sliding window with full attention (not modelled: full on every layer).
    dict(name="gpt-oss-120b", n_layers=36, d_model=2880, n_heads=64, n_kv_heads=8,
         head_dim=64, d_ff=2880, vocab_size=201088, n_experts=128, experts_per_token=4,
         expert_d_ff=2880, expert_dtype="mxfp4", source=_HF.format("openai/gpt-oss-120b"),
         note="116.8B total, 5.1B active without the input embedding (OpenAI model card)"),
    dict(name="gpt-oss-20b", n_layers=24, d_model=2880, n_heads=64, n_kv_heads=8,
         head_dim=64, d_ff=2880, vocab_size=201088, n_experts=32, experts_per_token=4,
         expert_d_ff=2880, expert_dtype="mxfp4", source=_HF.format("openai/gpt-oss-20b"),
         note="20.9B total, 3.6B active without the input embedding (OpenAI model card)"),
    # Llama 4 (text_config): a shared expert of the routed experts' width (intermediate_size
    # 8192) in every MoE layer, top-1 routing; Maverick's layers alternate dense
    # (intermediate_size_mlp 16384) and MoE (interleave_moe_layer_step 2). Meta's 109B and
    # 400B totals include the vision encoder.
    dict(name="llama-4-scout", n_layers=48, d_model=5120, n_heads=40, n_kv_heads=8,
         head_dim=128, d_ff=16384, vocab_size=202048, n_experts=16, experts_per_token=1,
         n_shared_experts=1, expert_d_ff=8192,
         source=_HF.format("meta-llama/Llama-4-Scout-17B-16E"),
         note="109B total with vision, 17B active (Meta)"),
    dict(name="llama-4-maverick", n_layers=48, d_model=5120, n_heads=40, n_kv_heads=8,
         head_dim=128, d_ff=16384, vocab_size=202048, n_experts=128, experts_per_token=1,
         n_shared_experts=1, expert_d_ff=8192, moe_layer_step=2,
         source=_HF.format("meta-llama/Llama-4-Maverick-17B-128E"),
         note="400B total with vision, 17B active (Meta)"),
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

    return pd.DataFrame([{**m.__dict__, "n_params": m.n_params,
                          "n_active_params": m.n_active_params, "attention": m.attention}
                         for m in _MODELS])
