"""A decode step shaped like a real model, to measure. Labs: *A decode step, batched*,
*Quantised weights*, *Batching under load*.

`DecodeStack` builds a model's layer stack (Llama layout, grouped-query attention, a KV
cache read in every layer) in dense, int8 or int4 weights and times one decode step
with `bench.time_fn`, beside the ceilings `llm` predicts for the same bytes and FLOPs.
`lab_model` scales a published model to fit the device in front of you.
"""

from __future__ import annotations

import math

from . import bench as _bench
from . import dtypes as _dtypes
from . import llm as _llm


# --- a decode step shaped like a real model --------------------------------------------------

#: Weight formats a decode stack can hold, and the kernels that can multiply by them.
KERNELS = {
    "dense": "x @ W with W in the activation dtype (fp16 on a GPU, fp32 on a CPU)",
    "int8-dequant": "int8 W, per-output-channel scales: W is converted to the activation "
                    "dtype in a temporary, then multiplied (eager PyTorch, as gpt-fast's "
                    "int8 code before torch.compile fuses it)",
    "int8-pack": "int8 W, per-output-channel scales: torch._weight_int8pack_mm, one "
                 "kernel that reads the int8 weight (CPU; missing on some GPUs)",
    "int4-unpack": "int4 W packed two per byte, group-wise scales: unpacked to int8, "
                   "converted and scaled in temporaries, then multiplied (eager)",
}
_WEIGHT_FORMAT = {"dense": None, "int8-dequant": "int8", "int8-pack": "int8",
                  "int4-unpack": "int4"}
INT4_GROUP_SIZE = 32  # gpt-fast's int4 group size
#: The labs' decode model (grouped-query attention, like most current models) and context.
LAB_MODEL = "mistral-7b"
LAB_CONTEXT = 256


def lab_model(model="llama-2-7b", device=None, dtype=None, *, weight_budget_bytes=None,
              width_divisor=None):
    """The layer stack the decode labs time: `model`'s transformer layers without the
    embeddings (vocab_size 0), as a `llm.ModelSpec` that `llm.decode_ceiling` and friends
    accept. Lab: *A decode step, batched*.

    GPU: full width, as many layers as fit in 40% of the memory (a 7B stack on an
    A100 or H100; about half of it on a 16 GB T4), leaving room for the KV cache.
    CPU: 1/8 of the width (heads and FFN scaled alike, head_dim kept) and enough layers
    for about 128 MB of weights, twice a typical last-level cache. Budget in bytes.
    """
    import dataclasses

    device = _bench._device(device)
    base = _llm.get(model)
    dtype = _dtypes.canonical(dtype or _bench.default_dtype(device))
    if width_divisor is None:
        width_divisor = 1 if device.type == "cuda" else 8
    div = int(width_divisor)
    if div != width_divisor or div < 1 or any(
            v % div for v in (base.d_model, base.n_heads, base.n_kv_heads, base.d_ff)):
        raise ValueError(f"width_divisor must be a whole number dividing d_model, heads, KV "
                         f"heads and d_ff of {base.name}, got {width_divisor!r}")
    shape = dataclasses.replace(base, n_layers=1, d_model=base.d_model // div,
                                n_heads=base.n_heads // div,
                                n_kv_heads=base.n_kv_heads // div, d_ff=base.d_ff // div,
                                vocab_size=0)
    layer_bytes = (shape.n_params - shape.d_model) * _dtypes.bytes_per_element(dtype)
    if weight_budget_bytes is None:
        weight_budget_bytes = (0.4 * _bench.accelerator_for(device).memory_bytes
                               if device.type == "cuda" else 128e6)
    if not weight_budget_bytes > 0:
        raise ValueError(f"weight_budget_bytes must be positive, got {weight_budget_bytes!r}")
    n_layers = int(max(1, min(base.n_layers, weight_budget_bytes // layer_bytes)))
    width = "" if div == 1 else f" at 1/{div} width"
    return dataclasses.replace(shape, n_layers=n_layers,
                               name=f"{base.name} ({n_layers} of {base.n_layers} layers{width})")


def lab_batches(device=None, *, quick=False) -> list[int]:
    """Batches for the decode sweep: 1 .. 512 on a GPU (past any fp16 ridge), 1 .. 64 on
    a CPU (past the reference CPU's fp32 ridge)."""
    top = 512 if _bench._device(device).type == "cuda" else 64
    batches = [2**i for i in range(int(math.log2(top)) + 1)]
    return batches[::2] + ([batches[-1]] if len(batches) % 2 == 0 else []) if quick else batches


class DecodeStack:
    """One decode step of a model's layer stack, with a KV cache read in every layer.
    Lab: *A decode step, batched*; lab: *Quantised weights*.

    Per layer (Llama layout, no embeddings; norms without weights): RMSNorm, fused QKV
    projection, attention of one new query per sequence over `context` cached tokens
    (grouped-query when the model has fewer KV heads), output projection, RMSNorm, fused
    gate/up projection, SiLU-gated product, down projection, residual adds. The bytes
    and FLOPs match `llm.decode_step_bytes` / `decode_step_flops` for the same
    `ModelSpec` (the new token's K and V are not written back: a few KB per step).

    Build once (weights), then `measure(batch, context)` for each batch: inputs and the
    KV cache are made per batch. `quantised(kernel)` returns a stack of the same
    weights in int8 or int4 (quantised with `gpuinfer.quant`).
    """

    def __init__(self, model, dtype=None, device=None, *, seed=0, _weights=None,
                 kernel="dense"):
        import torch

        self.device = _bench._device(device)
        self.dtype = _dtypes.canonical(dtype or _bench.default_dtype(self.device))
        self.tdtype = _dtypes.torch_dtype(self.dtype)
        self.spec = _llm.get(model)
        if kernel not in KERNELS:
            raise ValueError(f"unknown kernel {kernel!r}; known: {', '.join(KERNELS)}")
        self.kernel = kernel
        self.weight_format = _WEIGHT_FORMAT[kernel] or self.dtype
        self.seed = seed
        m = self.spec
        q_dim, kv_dim = m.n_heads * m.head_dim, m.n_kv_heads * m.head_dim
        # [out, in] per matrix, as nn.Linear stores them.
        self._shapes = {"qkv": (q_dim + 2 * kv_dim, m.d_model), "o": (m.d_model, q_dim),
                        "gate_up": (2 * m.d_ff, m.d_model), "down": (m.d_model, m.d_ff)}
        if _weights is not None:
            self.layers = _weights
            return
        gen = torch.Generator(device=self.device).manual_seed(seed)
        self.layers = []
        for _ in range(m.n_layers):
            layer = {}
            for name, (n_out, n_in) in self._shapes.items():
                # Scaled so activations stay O(1) through the stack (no fp16 overflow).
                w = torch.randn(n_out, n_in, device=self.device, generator=gen)
                layer[name] = (w.mul_(n_in**-0.5)).to(self.tdtype)
                del w
            self.layers.append(layer)

    # -- sizes ---------------------------------------------------------------------------
    @property
    def n_params(self) -> int:
        """Weights the step multiplies by (the norms' 2 x d_model per layer excluded)."""
        return self.spec.n_layers * sum(a * b for a, b in self._shapes.values())

    @property
    def weight_bytes(self) -> float:
        """Bytes the stored weights take, scales included."""
        total = 0.0
        for layer in self.layers:
            for w in layer.values():
                for t in (w if isinstance(w, tuple) else (w,)):
                    total += t.numel() * t.element_size()
        return total

    def kv_cache_bytes(self, batch, context) -> float:
        """Bytes of the KV cache this stack reads for `batch` sequences of `context`."""
        return batch * context * _llm.kv_cache_bytes_per_token(self.spec, self.dtype)

    # -- quantised copies ----------------------------------------------------------------
    def quantised(self, kernel="int8-dequant"):
        """The same weights quantised for `kernel` ("int8-dequant", "int8-pack":
        symmetric per-output-channel int8; "int4-unpack": symmetric int4, groups of
        32 inputs, packed two per byte), sharing this stack's seed and shapes."""
        from . import quant as _quant

        if _WEIGHT_FORMAT.get(kernel) is None:
            raise ValueError(f"kernel must be one of int8-dequant, int8-pack, int4-unpack, "
                             f"got {kernel!r}")
        layers = []
        for layer in self.layers:
            qlayer = {}
            for name, w in layer.items():
                if kernel.startswith("int8"):
                    q, scale, _ = _quant.quantize(w, bits=8, axis=0)  # scale [out, 1]
                    scale = scale.reshape(-1).to(self.tdtype)  # [out]
                    qlayer[name] = (q.contiguous(), scale)
                else:
                    q, scale, _ = _quant.quantize(w, bits=4, group_size=INT4_GROUP_SIZE)
                    qlayer[name] = (_quant.pack_int4(q).contiguous(),  # [out, in/2] uint8
                                    scale.to(self.tdtype).contiguous())  # [out, in/32]
                    del q
            layers.append(qlayer)
        return DecodeStack(self.spec, self.dtype, self.device, seed=self.seed,
                           _weights=layers, kernel=kernel)

    # -- the step ------------------------------------------------------------------------
    def _linear(self, x, w):
        import torch
        import torch.nn.functional as F

        if self.kernel == "dense":
            return F.linear(x, w)
        q, scale = w
        if self.kernel == "int8-dequant":
            return F.linear(x, q.to(x.dtype)) * scale
        if self.kernel == "int8-pack":
            return torch._weight_int8pack_mm(x, q, scale)
        from . import quant as _quant

        # int4: [out, in/2] uint8 -> [out, in] int8 -> scaled by group -> x @ W^T
        n_out, n_groups = scale.shape
        wq = _quant.unpack_int4(q).to(x.dtype).view(n_out, n_groups, -1)
        return F.linear(x, (wq * scale.unsqueeze(-1)).view(n_out, -1))

    def inputs(self, batch=1, context=0):
        """(x [batch, d_model], KV cache: per layer a pair [batch, kv_heads, context,
        head_dim]), drawn from this stack's seed so every copy sees the same inputs."""
        import torch

        for name, v in (("batch", batch), ("context", context)):
            if int(v) != v or v < (1 if name == "batch" else 0):
                raise ValueError(f"{name} must be a whole number >= "
                                 f"{1 if name == 'batch' else 0}, got {v!r}")
        m = self.spec
        gen = torch.Generator(device=self.device).manual_seed(self.seed + 1)
        x = torch.randn(batch, m.d_model, device=self.device, generator=gen).to(self.tdtype)
        cache = []
        for _ in range(m.n_layers if context else 0):
            shape = (batch, m.n_kv_heads, context, m.head_dim)
            cache.append(tuple(torch.randn(shape, device=self.device, generator=gen)
                               .to(self.tdtype) for _ in range(2)))
        return x, cache

    def step_fn(self, batch=1, context=0):
        """A closure that runs one decode step on fixed inputs and returns [batch, d_model]."""
        import torch
        import torch.nn.functional as F

        m = self.spec
        x0, cache = self.inputs(batch, context)
        q_dim = m.n_heads * m.head_dim
        group = m.n_heads // m.n_kv_heads  # query heads per KV head
        scale = m.head_dim**-0.5
        linear = self._linear

        def step():
            x = x0  # [batch, d_model]
            for i, layer in enumerate(self.layers):
                h = F.rms_norm(x, (m.d_model,))
                qkv = linear(h, layer["qkv"])  # [batch, q_dim + 2 kv_dim]
                if context:
                    k_cache, v_cache = cache[i]  # [batch, kv_heads, context, head_dim]
                    q = qkv[:, :q_dim].reshape(batch, m.n_kv_heads, group, m.head_dim)
                    att = torch.softmax(q @ k_cache.transpose(-1, -2) * scale, dim=-1)
                    a = (att @ v_cache).reshape(batch, q_dim)  # [batch, q_dim]
                else:
                    a = qkv[:, :q_dim]
                x = x + linear(a, layer["o"])
                h = F.rms_norm(x, (m.d_model,))
                gate, up = linear(h, layer["gate_up"]).chunk(2, dim=-1)  # [batch, d_ff] x2
                x = x + linear(F.silu(gate) * up, layer["down"])
            return x

        return step

    def measure(self, batch=1, context=0, *, cuda_graph=False, compile=False,
                min_run_time=None) -> dict:
        """Time one step and put it beside its ceilings: `llm.decode_ceiling` (weights +
        KV cache + FLOPs on the roofline) and `llm.weight_read_ceiling` (weights only).
        `cuda_graph` / `compile` (GPU only) remove per-kernel launch overhead."""
        import torch

        acc = _bench.accelerator_for(self.device)
        fn = self.step_fn(batch, context)
        on_gpu = self.device.type == "cuda"
        if compile:  # fuses elementwise work (e.g. int8 -> fp16 into the matmul's reads)
            fn = torch.compile(fn)
        if cuda_graph and on_gpu:
            fn = _bench._graphed(fn)
        t = _bench.time_fn(fn, min_run_time=min_run_time, device=self.device)
        return {**self._ceilings(batch, context, acc), "kernel": self.kernel,
                "cuda_graph": bool(cuda_graph and on_gpu), "compiled": bool(compile),
                "seconds": t.median_s, **self._rates(batch, context, t.median_s, acc)}

    def _ceilings(self, batch, context, acc) -> dict:
        fmt, act = self.weight_format, self.dtype
        kw = dict(kv_dtype=act, compute_dtype=act)
        step_bytes = _llm.decode_step_bytes(self.spec, batch, context, fmt, act)
        flops = _llm.decode_step_flops(self.spec, batch, context)
        peak = _bench._peak(acc, act)
        try:
            ceiling = _llm.decode_ceiling(self.spec, acc, batch, context, fmt, **kw)
        except ValueError:  # a device without catalogue peaks
            ceiling = math.nan
        memory_s = step_bytes / acc.bandwidth if acc.bandwidth > 0 else math.nan
        compute_s = flops / peak if peak > 0 else math.nan
        return {"device": acc.name, "model": self.spec.name, "dtype": act,
                "weight_format": fmt, "n_layers": self.spec.n_layers,
                "d_model": self.spec.d_model, "batch": batch, "context": context,
                "weight_bytes": self.weight_bytes,
                "kv_cache_bytes": self.kv_cache_bytes(batch, context),
                "step_bytes": step_bytes, "step_flops": flops,
                "bound": "compute" if compute_s > memory_s else "memory",
                "ceiling_tokens_per_s": ceiling,
                "weight_read_ceiling_tokens_per_s": _llm.weight_read_ceiling(
                    self.spec.n_params, _dtypes.bytes_per_element(fmt), acc.bandwidth, batch)
                if acc.bandwidth > 0 else math.nan}

    def _rates(self, batch, context, seconds, acc) -> dict:
        ceilings = self._ceilings(batch, context, acc)
        tokens = batch / seconds
        return {"tokens_per_s": tokens, "tokens_per_s_per_sequence": 1 / seconds,
                "achieved_gb_per_s": ceilings["step_bytes"] / seconds / 1e9,
                "fraction_of_ceiling": _bench._fraction(tokens, ceilings["ceiling_tokens_per_s"]),
                "fraction_of_weight_read_ceiling": _bench._fraction(
                    tokens, ceilings["weight_read_ceiling_tokens_per_s"])}

    def sweep(self, batches, context=0, *, cuda_graph=False, compile=False,
              min_run_time=None, progress=True):
        """`measure` at each batch; out of memory stops the sweep and keeps what was
        measured (a KV cache grows with batch x context)."""
        return _bench._sweep(list(batches), lambda b: self.measure(
            b, context, cuda_graph=cuda_graph, compile=compile, min_run_time=min_run_time),
            f"decode {self.kernel} context {context}", progress)

    def output(self, batch=1, context=0):
        """The step's output [batch, d_model] on this stack's fixed inputs (to compare
        a quantised stack's result with the dense one)."""
        import torch

        with torch.no_grad():
            return self.step_fn(batch, context)()


def kernel_available(kernel, device=None) -> bool:
    """Whether this torch build runs `kernel` on `device` (tries a tiny product)."""
    device = _bench._device(device)
    try:
        stack = DecodeStack(_tiny_spec(), _bench.default_dtype(device), device)
        if kernel != "dense":
            stack = stack.quantised(kernel)
        stack.output(1, 0)
    except (NotImplementedError, RuntimeError):
        return False
    return True


def _tiny_spec():
    import dataclasses

    return dataclasses.replace(_llm.get("llama-2-7b"), name="tiny", n_layers=1, d_model=64,
                               n_heads=1, n_kv_heads=1, head_dim=64, d_ff=64, vocab_size=0)


def weight_traffic_bytes_per_weight(kernel, dtype="fp16") -> float:
    """DRAM bytes each weight costs per step under `kernel`, for activations in `dtype`.
    Lab: *Quantised weights*.

    dense: the weight itself (2 bytes in fp16). int8-pack: 1 byte (one fused kernel).
    int8-dequant: 1 byte read + the converted temporary written and read back in `dtype`
    (1 + 2 x 2 = 5 bytes in fp16: more than fp16 itself). int4-unpack: not modelled
    (a chain of temporaries, each at least a byte a weight): nan. Scales are ignored.
    """
    if kernel not in KERNELS:
        raise ValueError(f"unknown kernel {kernel!r}; known: {', '.join(KERNELS)}")
    act = _dtypes.bytes_per_element(dtype)
    return {"dense": act, "int8-pack": 1.0, "int8-dequant": 1.0 + 2 * act,
            "int4-unpack": math.nan}[kernel]
