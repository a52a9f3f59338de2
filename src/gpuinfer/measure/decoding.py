"""A decode step shaped like a real model, to measure. Labs: *A decode step, batched*,
*Quantised weights*, *Batching under load*.

Three parts, as gpt-fast keeps model, generate and quantize apart:
- **the kernels**: one small class per weight format (`DenseWeight`, `Int8DequantWeight`,
  `Int8PackWeight`, `Int4UnpackWeight`), each with a short `__call__` (x @ W^T), the
  bytes it stores and the DRAM bytes it moves per weight (gpt-fast's quantize.py swaps
  `WeightOnlyInt8Linear` into a model the same way);
- **the stack**: `DecodeStack` builds a model's layer stack (Llama layout, grouped-query
  attention, a KV cache read in every layer) in one of those formats and runs a step;
- **the timing**: `DecodeStack.measure` times a step with `bench.time_fn` and returns
  one row in the one decode-step format (`lab_measurements.step_row`), beside the
  ceilings `llm` predicts for the same model; `lab_measurements.decode_step` (lab 1's
  chain of square matrices)
  returns rows in the same format.

`lab_model` scales a published model to fit the device in front of you.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F

from gpuinfer.predict import achievable as _achievable
from gpuinfer.measure import bench as _bench
from gpuinfer.measure import torch_device as _device
from gpuinfer import dtypes as _dtypes
from gpuinfer import hardware as _hardware
from gpuinfer.measure import lab_measurements as _lab
from gpuinfer.predict import llm as _llm
from gpuinfer.predict import architectures
from gpuinfer.predict import step_model
from gpuinfer import validate as _validate

#: The labs' decode model (grouped-query attention, like most current models) and context.
LAB_MODEL = "mistral-7b"
LAB_CONTEXT = 256
#: int4 weights share one scale per this many inputs: the group size of gpt-fast's
#: published int4 figures ("int4, G=32" in its README; its quantize.py defaults to 128).
INT4_GROUP_SIZE = 32


# --- the kernels: one class per weight format ------------------------------------------------

class DenseWeight:
    """A weight [out, in] in the activation dtype; x @ W^T is one GEMM/GEMV."""

    kernel = "dense"
    weight_format = None  # the activation dtype
    description = "x @ W with W in the activation dtype (fp16 on a GPU, fp32 on a CPU)"

    def __init__(self, weight):
        self.weight = weight  # [out, in]

    @classmethod
    def from_dense(cls, weight):
        return cls(weight)

    def __call__(self, x):  # x: [batch, in] -> [batch, out]

        return F.linear(x, self.weight)

    @property
    def tensors(self) -> tuple:
        return (self.weight,)

    @property
    def stored_bytes(self) -> int:
        """Bytes this weight occupies, scales included."""
        return sum(t.numel() * t.element_size() for t in self.tensors)

    @staticmethod
    def traffic_bytes_per_weight(act_bytes, device_type) -> float:
        """DRAM bytes each weight costs per step: the weight itself."""
        return act_bytes


class Int8DequantWeight(DenseWeight):
    """int8 weight, one scale per output channel; converted to the activation dtype in a
    temporary and then multiplied (eager PyTorch: gpt-fast's int8 before compilation)."""

    kernel = "int8-dequant"
    weight_format = "int8"
    description = ("int8 W, per-output-channel scales: W is converted to the activation "
                   "dtype in a temporary, then multiplied (eager PyTorch, as gpt-fast's "
                   "int8 code before torch.compile fuses it)")

    def __init__(self, q, scale):
        self.q, self.scale = q, scale  # [out, in] int8, [out] in the activation dtype

    @classmethod
    def from_dense(cls, weight):
        from gpuinfer.measure import quant as _quant

        q, scale, _ = _quant.quantize(weight, bits=8, axis=0)  # scale [out, 1]
        return cls(q.contiguous(), scale.reshape(-1).to(weight.dtype))

    def __call__(self, x):

        return F.linear(x, self.q.to(x.dtype)) * self.scale

    @property
    def tensors(self) -> tuple:
        return (self.q, self.scale)

    @staticmethod
    def traffic_bytes_per_weight(act_bytes, device_type) -> float:
        """1 byte read + the converted temporary written and read back (1 + 2 x 2 = 5 in
        fp16: more than fp16 itself)."""
        return 1.0 + 2 * act_bytes


class Int8PackWeight(Int8DequantWeight):
    """int8 weight through `torch._weight_int8pack_mm`, one kernel that reads int8."""

    kernel = "int8-pack"
    description = ("int8 W, per-output-channel scales: torch._weight_int8pack_mm, one "
                   "kernel that reads the int8 weight. On a CPU its own kernel (not always faster "
                   "than a dense fp32 matmul: measure it); on a GPU (recent torch) a CUDA-core "
                   "reference kernel, one thread per output "
                   "and no tensor cores, which can be slower than dense fp16")

    def __call__(self, x):

        # Some torch builds return fp32 whatever the activations: cast back, so the
        # next layer (and the comparison with the dense step) sees the activation dtype.
        return torch._weight_int8pack_mm(x, self.q, self.scale).to(x.dtype)

    @staticmethod
    def traffic_bytes_per_weight(act_bytes, device_type) -> float:
        """1 byte on a CPU (the weight is read once, as int8). On a GPU not modelled (nan):
        the reference kernel (aten/src/ATen/native/cuda/int8mm.cu) has each thread walk a
        row of W alone, so its reads, not its bytes, set its speed."""
        return 1.0 if device_type == "cpu" else math.nan


class Int4UnpackWeight(DenseWeight):
    """int4 weight packed two per byte, one scale per `INT4_GROUP_SIZE` inputs; unpacked,
    converted and scaled in temporaries, then multiplied (eager)."""

    kernel = "int4-unpack"
    weight_format = "int4"
    description = ("int4 W packed two per byte, group-wise scales: unpacked to int8, "
                   "converted and scaled in temporaries, then multiplied (eager)")

    def __init__(self, packed, scale):
        self.packed, self.scale = packed, scale  # [out, in/2] uint8, [out, in/group]

    @classmethod
    def from_dense(cls, weight):
        from gpuinfer.measure import quant as _quant

        q, scale, _ = _quant.quantize(weight, bits=4, group_size=INT4_GROUP_SIZE)
        return cls(_quant.pack_int4(q).contiguous(), scale.to(weight.dtype).contiguous())

    def __call__(self, x):

        from gpuinfer.measure import quant as _quant

        n_out, n_groups = self.scale.shape
        w = _quant.unpack_int4(self.packed).to(x.dtype).view(n_out, n_groups, -1)
        return F.linear(x, (w * self.scale.unsqueeze(-1)).view(n_out, -1))

    @property
    def tensors(self) -> tuple:
        return (self.packed, self.scale)

    @staticmethod
    def traffic_bytes_per_weight(act_bytes, device_type) -> float:
        """Not modelled (nan): a chain of temporaries, each at least a byte a weight."""
        return math.nan


#: Weight formats by kernel name, and what each kernel does.
FORMATS = {cls.kernel: cls for cls in (DenseWeight, Int8DequantWeight, Int8PackWeight,
                                       Int4UnpackWeight)}
KERNELS = {name: cls.description for name, cls in FORMATS.items()}


def _kernel(kernel, name="kernel"):
    return FORMATS[_validate.choice(name, kernel, FORMATS)]


def weight_traffic_bytes_per_weight(kernel, dtype="fp16", device=None) -> float:
    """DRAM bytes each weight costs per step under `kernel`, for activations in `dtype`
    on `device` (default: the device torch runs on). Lab: *Quantised weights*.

    dense: the weight itself (2 bytes in fp16). int8-dequant: 1 byte read + the
    converted temporary written and read back (5 bytes in fp16). int8-pack: 1 byte on a
    CPU; nan on a GPU (a reference kernel: no speed-up is predicted). int4-unpack: nan.
    Scales are ignored."""
    fmt = _kernel(kernel)
    device = _device.resolve(device)
    return fmt.traffic_bytes_per_weight(_dtypes.bytes_per_element(dtype), device.type)


# --- the stack ---------------------------------------------------------------------------------

#: Share of a GPU's memory the lab stack's weights may take: the KV cache, the activations
#: and the flush of other measurements need the rest.
GPU_WEIGHT_SHARE = 0.4
#: On a CPU the stack is this many times narrower, with weights of about this many bytes:
#: several times a typical last-level cache, and a second or so a step on two cores.
CPU_WIDTH_DIVISOR = 8
CPU_WEIGHT_BUDGET_BYTES = 128e6


def lab_model(model=LAB_MODEL, device=None, dtype=None, *, weight_budget_bytes=None,
              width_divisor=None):
    """The layer stack the decode labs time: `model`'s transformer layers without the
    embeddings (vocab_size 0), as a `llm.ModelSpec` that `llm.decode_ceiling` and friends
    accept. Lab: *A decode step, batched*.

    GPU: full width, as many layers as fit in 40% of the memory free for it
    (`device.available_bytes`: free plus torch's pool, less a margin; a 7B stack
    on an A100 or H100; about half of it on a 16 GB T4; a MIG slice or an unknown GPU
    alike), leaving room for the KV cache. CPU: 1/8 of the width (heads and FFN scaled
    alike, head_dim kept) and enough layers for about 128 MB of weights. Budget in bytes.
    """
    kind = _device.kind(device)
    base = architectures.get(model)
    dtype = _dtypes.canonical(dtype or _device.default_dtype(kind))
    if width_divisor is None:
        width_divisor = 1 if kind == "cuda" else CPU_WIDTH_DIVISOR
    div = _validate.count("width_divisor", width_divisor)
    if any(v % div for v in (base.d_model, base.n_heads, base.n_kv_heads, base.d_ff)):
        raise ValueError(f"width_divisor must be a whole number dividing d_model, heads, KV "
                         f"heads and d_ff of {base.name}, got {width_divisor!r}")
    shape = dataclasses.replace(base, n_layers=1, d_model=base.d_model // div,
                                n_heads=base.n_heads // div,
                                n_kv_heads=base.n_kv_heads // div, d_ff=base.d_ff // div,
                                vocab_size=0)
    layer_bytes = (shape.n_params - shape.d_model) * _dtypes.bytes_per_element(dtype)
    if weight_budget_bytes is None:
        weight_budget_bytes = (GPU_WEIGHT_SHARE * _device.available_bytes(device)
                               if kind == "cuda" else CPU_WEIGHT_BUDGET_BYTES)
    budget = _validate.positive("weight_budget_bytes", weight_budget_bytes)
    n_layers = int(max(1, min(base.n_layers, budget // layer_bytes)))
    width = "" if div == 1 else f" at 1/{div} width"
    return dataclasses.replace(shape, n_layers=n_layers,
                               name=f"{base.name} ({n_layers} of {base.n_layers} layers{width})")


#: Largest batch of the decode sweep: past any fp16 ridge on a GPU (an H100's is ~295),
#: past the reference CPU's fp32 ridge (~11) on a CPU.
GPU_TOP_BATCH, CPU_TOP_BATCH = 512, 64


def lab_batches(device=None, *, quick=False) -> list[int]:
    """Batches for the decode sweep: 1 .. 512 on a GPU, 1 .. 64 on a CPU; `quick` keeps
    every other power of two and the largest."""
    top = GPU_TOP_BATCH if _device.kind(device) == "cuda" else CPU_TOP_BATCH
    batches = [2**i for i in range(int(math.log2(top)) + 1)]
    return batches[::2] + ([batches[-1]] if len(batches) % 2 == 0 else []) if quick else batches


def matrix_shapes(spec) -> dict:
    """[out, in] of each matrix of one layer, as nn.Linear stores them: fused QKV, output
    projection, fused gate/up, down projection. `spec`: a model name or `llm.ModelSpec`."""
    spec = architectures.get(spec)
    q_dim, kv_dim = spec.n_heads * spec.head_dim, spec.n_kv_heads * spec.head_dim
    return {"qkv": (q_dim + 2 * kv_dim, spec.d_model), "o": (spec.d_model, q_dim),
            "gate_up": (2 * spec.d_ff, spec.d_model), "down": (spec.d_model, spec.d_ff)}


class DecodeStack:
    """One decode step of a model's layer stack, with a KV cache read in every layer.
    Lab: *A decode step, batched*; lab: *Quantised weights*.

    Per layer (Llama layout, no embeddings; norms without weights): RMSNorm, fused QKV
    projection, attention of one new query per sequence over `context` cached tokens
    (grouped-query when the model has fewer KV heads), output projection, RMSNorm, fused
    gate/up projection, SiLU-gated product, down projection, residual adds. The bytes
    and FLOPs it counts from its own tensors match `llm`'s for the same `ModelSpec` (the
    new token's K and V are not written back: a few KB per step).

    Build once (weights), then `measure(batch, context)` for each batch: inputs and the
    KV cache are made per batch. `quantised(kernel)` returns a stack of the same
    weights in int8 or int4 (quantised with `gpuinfer.measure.quant`). Ceilings are those of
    `accelerator` (default: the device's catalogue entry; see `lab_measurements.lab_accelerator`).
    """

    def __init__(self, model, dtype=None, device=None, *, seed=0, kernel="dense",
                 accelerator=None, _layers=None):

        self.device = _device.resolve(device)
        self.dtype = _dtypes.canonical(dtype or _device.default_dtype(self.device))
        self.tdtype = _device.torch_dtype(self.dtype)
        self.spec = architectures.get(model)
        self.format = _kernel(kernel)
        self.kernel = self.format.kernel
        self.weight_format = self.format.weight_format or self.dtype
        self.seed = _validate.count("seed", seed, minimum=0)
        self.accelerator = (_device.accelerator_for(self.device) if accelerator is None
                            else _hardware.get(accelerator))
        self.shapes = matrix_shapes(self.spec)
        if _layers is not None:
            self.layers = _layers
            return
        if self.format is not DenseWeight:
            raise ValueError(f"build a dense stack, then .quantised({kernel!r})")
        _device.refuse_beyond_memory(self.n_params * _dtypes.bytes_per_element(self.dtype),
                                     self.device, f"the {self.spec.name} stack's weights")
        gen = torch.Generator(device=self.device).manual_seed(self.seed)
        self.layers = [{name: DenseWeight(_device.random_tensor(  # scaled: activations stay O(1)
            shape, self.tdtype, self.device, shape[1]**-0.5, gen))
            for name, shape in self.shapes.items()} for _ in range(self.spec.n_layers)]

    # -- sizes ---------------------------------------------------------------------------
    @property
    def n_params(self) -> int:
        """Weights the step multiplies by (the norms' 2 x d_model per layer excluded)."""
        return self.spec.n_layers * sum(a * b for a, b in self.shapes.values())

    @property
    def weight_bytes(self) -> float:
        """Bytes the stored weights take, scales included."""
        return float(sum(w.stored_bytes for layer in self.layers for w in layer.values()))

    def kv_cache_bytes(self, batch, context) -> float:
        """Bytes of the KV cache this stack reads for `batch` sequences of `context`."""
        batch, context = _batch_context(batch, context)
        return batch * context * step_model.kv_cache_bytes_per_token(self.spec, self.dtype)

    def step_flops(self, batch, context) -> float:
        """FLOPs of one step, counted from the stack's shapes: 2 per weight per sequence,
        plus attention's scores and weighted values (2 x 2 x head_dim per query head and
        cached token)."""
        batch, context = _batch_context(batch, context)
        m = self.spec
        return float(batch * (2 * self.n_params + 4 * m.n_layers * m.n_heads * m.head_dim
                              * context))

    # -- quantised copies ----------------------------------------------------------------
    def quantised(self, kernel="int8-dequant"):
        """The same weights quantised for `kernel` ("int8-dequant", "int8-pack":
        symmetric per-output-channel int8; "int4-unpack": symmetric int4, groups of
        32 inputs, packed two per byte), sharing this stack's seed and shapes."""
        fmt = _kernel(kernel)
        if fmt is DenseWeight:
            raise ValueError("kernel must be one of int8-dequant, int8-pack, int4-unpack, "
                             f"got {kernel!r}")
        if self.format is not DenseWeight:
            raise ValueError(f"quantise a dense stack, not a {self.kernel} one")
        layers = [{n: fmt.from_dense(w.weight) for n, w in layer.items()}
                  for layer in self.layers]
        return DecodeStack(self.spec, self.dtype, self.device, seed=self.seed, kernel=kernel,
                           accelerator=self.accelerator, _layers=layers)

    # -- the step ------------------------------------------------------------------------
    def inputs(self, batch=1, context=0):
        """(x [batch, d_model], KV cache: per layer a pair [batch, kv_heads, context,
        head_dim]), drawn from this stack's seed so every copy sees the same inputs."""

        batch = _validate.count("batch", batch)
        context = _validate.count("context", context, minimum=0)
        m = self.spec
        _device.refuse_beyond_memory(self.kv_cache_bytes(batch, context) + self.weight_bytes,
                                     self.device, f"batch {batch} at context {context} "
                                     f"(weights + KV cache)")
        gen = torch.Generator(device=self.device).manual_seed(self.seed + 1)
        x = _device.random_tensor((batch, m.d_model), self.tdtype, self.device, generator=gen)
        cache = []
        for _ in range(m.n_layers if context else 0):
            shape = (batch, m.n_kv_heads, context, m.head_dim)
            cache.append(tuple(_device.random_tensor(shape, self.tdtype, self.device, generator=gen)
                               for _ in range(2)))
        return x, cache

    def step_fn(self, batch=1, context=0):
        """A closure that runs one decode step on fixed inputs and returns [batch, d_model]."""

        m = self.spec
        x0, cache = self.inputs(batch, context)
        q_dim = m.n_heads * m.head_dim
        group = m.n_heads // m.n_kv_heads  # query heads per KV head
        scale = m.head_dim**-0.5

        def step():
            x = x0  # [batch, d_model]
            for i, layer in enumerate(self.layers):
                h = F.rms_norm(x, (m.d_model,))
                qkv = layer["qkv"](h)  # [batch, q_dim + 2 kv_dim]
                if context:
                    k_cache, v_cache = cache[i]  # [batch, kv_heads, context, head_dim]
                    q = qkv[:, :q_dim].reshape(batch, m.n_kv_heads, group, m.head_dim)
                    att = torch.softmax(q @ k_cache.transpose(-1, -2) * scale, dim=-1)
                    a = (att @ v_cache).reshape(batch, q_dim)  # [batch, q_dim]
                else:
                    a = qkv[:, :q_dim]
                x = x + layer["o"](a)
                h = F.rms_norm(x, (m.d_model,))
                gate, up = layer["gate_up"](h).chunk(2, dim=-1)  # [batch, d_ff] x2
                x = x + layer["down"](F.silu(gate) * up)
            return x

        return step

    def output(self, batch=1, context=0):
        """The step's output [batch, d_model] on this stack's fixed inputs (to compare
        a quantised stack's result with the dense one)."""

        with torch.no_grad():
            return self.step_fn(batch, context)()

    # -- timing ------------------------------------------------------------------------
    def measure(self, batch=1, context=0, *, cuda_graph=False, compile=False,
                min_run_s=None) -> dict:
        """Time one step and put it beside its ceilings (`lab_measurements.step_row`): `llm.decode_ceiling`
        (weights + KV cache + FLOPs on the roofline) and the weight-read ceiling (the
        stored weight bytes, scales included). `cuda_graph` / `compile` (GPU only)
        remove per-kernel launch overhead."""
        for name, flag in (("cuda_graph", cuda_graph), ("compile", compile)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be True or False, got {flag!r}")
        fn = self.step_fn(batch, context)
        on_gpu = self.device.type == "cuda"
        if compile:
            fn = _compiled(fn)
        if cuda_graph and on_gpu:
            fn = _device.graphed(fn, self.device)
        t = _bench.time_fn(fn, min_run_s=min_run_s, device=self.device)
        return self.row(batch, context, t, cuda_graph=cuda_graph and on_gpu, compiled=compile)

    def row(self, batch, context, timing, *, cuda_graph=False, compiled=False) -> dict:
        """The step's row for a `bench.Timing`: sizes, ceilings and rates (`lab_measurements.step_row`)."""
        acc, spec, act, fmt = self.accelerator, self.spec, self.dtype, self.weight_format
        ceiling = _bench.call_or_nan(_llm.decode_ceiling, spec, acc, batch, context, fmt,
                                     kv_dtype=act, compute_dtype=act)
        weight_read = _bench.call_or_nan(_llm.weight_read_ceiling, self.n_params,
                                         self.weight_bytes / self.n_params, acc.bandwidth,
                                         batch)
        return _lab.step_row(device=acc.name, model=spec.name, kernel=self.kernel, dtype=act,
                        weight_format=fmt, n_layers=spec.n_layers, d_model=spec.d_model,
                        batch=batch, context=context, weight_bytes=self.weight_bytes,
                        kv_cache_bytes=self.kv_cache_bytes(batch, context),
                        step_flops=self.step_flops(batch, context),
                        bound=_bound(spec, acc, batch, context, fmt, act),
                        cuda_graph=cuda_graph, compiled=compiled, timing=timing,
                        ceiling_tokens_per_s=ceiling,
                        weight_read_ceiling_tokens_per_s=weight_read)

    def sweep(self, batches, context=0, *, cuda_graph=False, compile=False,
              min_run_s=None, progress=True):
        """`measure` at each batch; out of memory stops the sweep and keeps what was
        measured (a KV cache grows with batch x context)."""
        batches = [_validate.count("batch", b) for b in batches]
        estimate = sweep_estimate_s(self.spec, self.accelerator, batches, context,
                                    self.weight_format, self.dtype, min_run_s=
                                    _bench.default_min_run_s(self.device, min_run_s))
        return _bench.sweep(batches, lambda b: self.measure(
            b, context, cuda_graph=cuda_graph, compile=compile, min_run_s=min_run_s),
            f"decode {self.kernel} context {context}", progress,
            estimate if math.isfinite(estimate) else None)


def sweep_estimate_s(model, accelerator, batches, context, weight_format, dtype, *,
                     min_run_s) -> float:
    """Seconds of timing `DecodeStack.sweep` takes on `accelerator`, each step at the
    roofline's time (`llm.decode_step_s`; NaN if a peak is unknown). Set-up (building
    the KV cache, capturing graphs) not included."""
    min_run_s = _validate.positive("min_run_s", min_run_s)
    for b in batches:  # bad sizes or formats are errors; only an unknown peak is NaN
        _llm.decode_step_bytes(model, b, context, weight_format, dtype)
    return sum(_bench.timing_estimate_s(_bench.call_or_nan(
        _llm.decode_step_s, model, accelerator, b, context, weight_format,
        kv_dtype=dtype, compute_dtype=dtype), min_run_s) for b in batches)


def _batch_context(batch, context):
    """(batch, context) checked: a whole batch >= 1 and a whole context >= 0."""
    return (_validate.count("batch", batch, maximum=1 << 24),
            _validate.count("context", context, minimum=0, maximum=1 << 24))


def _bound(spec, acc, batch, context, fmt, act) -> str:
    """"memory" or "compute": what bounds most of the step's time under the roofline
    (`llm.decode_step_breakdown`); "unknown" for a device without catalogue peaks."""
    try:
        parts = _llm.decode_step_breakdown(spec, acc, batch, context, fmt, kv_dtype=act,
                                           compute_dtype=act)
    except (ValueError, KeyError, ZeroDivisionError):
        return "unknown"
    if hasattr(parts, "columns"):  # the per-operation roofline: one row per operation
        return str(parts.groupby("bound")["seconds"].sum().idxmax())
    return "memory" if parts["memory_bound"] else "compute"


def _compiled(fn):
    """`torch.compile(fn)`, compiled now. Dynamo's cache is reset first: each step is a
    new closure over the same code, and after `cache_size_limit` recompiles dynamo
    silently runs it eagerly. Inductor's coordinate-descent tuning is on for this
    compile, as gpt-fast sets it: without it a batch-1 int8 step does not fuse the
    int8-to-fp16 conversion into the matrix-vector product."""

    torch._dynamo.reset()
    compiled = torch.compile(fn)
    import torch._inductor.config as inductor_config   # the compiler's own (1.6 s to load)
    with inductor_config.patch(coordinate_descent_tuning=True):
        compiled()  # the first call compiles
    return compiled


# --- lab 1's stack, and a kernel that failed --------------------------------------------------

#: Lab 1's decode stack on a GPU: 2 GiB of weights, or an eighth of a smaller GPU's memory.
GPU_DECODE_STACK_BYTES = 2 * 2**30

def decode_stack_bytes(accelerator) -> float:
    """Lab 1: the bytes of fp16 weights its GPU decode stack aims at: 2 GiB, or an eighth
    of the device's memory if that is less (a T4's 15.84 GB: 1.98 GB)."""
    acc = accelerator if hasattr(accelerator, "memory_bytes") else _hardware.get(accelerator)
    return float(min(GPU_DECODE_STACK_BYTES, acc.memory_bytes / 8))


def stack_step_s(weight_bytes, n_kernels, bandwidth_bytes_per_s, *, achievable=True,
                       engine=False) -> float:
    """Lab 1: seconds of a step that reads `weight_bytes` through `n_kernels` kernels at a
    datasheet bandwidth. `achievable=False`: the ceiling, bytes / bandwidth. Otherwise the
    achievable model (`achievable.FITTED`): bytes at its `bandwidth` fraction, plus its
    `kernel_gap_s` a kernel (a replayed graph); `engine=True` adds its fixed `step_s`
    (scheduler, sampling), which an engine pays and the lab's loop does not."""
    b = _validate.positive("weight_bytes", weight_bytes)
    n = _validate.count("n_kernels", n_kernels, minimum=1, maximum=1 << 20)
    bw = _validate.positive("bandwidth_bytes_per_s", bandwidth_bytes_per_s)
    if not achievable:
        return b / bw
    # The achievable model's overheads for n kernels (one "layer" of n), the fixed step
    # cost only for an engine: the same function every step path takes them from.
    eff = dataclasses.replace(_achievable.FITTED, kernels_per_layer=n,
                              step_s=_achievable.FITTED.step_s if engine else 0.0)
    return float(_achievable.overheads(b / (eff.bandwidth * bw), 1, eff))


def kernel_failure(kernel, exc) -> str:
    """One line for a kernel whose measurement raised `exc`, as lab 4 and `python -m
    gpuinfer bench` both report it: out of memory said as such, anything else named with its
    error, and the other kernels carry on."""
    if _device.is_oom(exc):
        return (f"{kernel}: out of GPU memory for a second copy of the weights; skipped, "
                f"the other kernels carry on.")
    text = " ".join(str(exc).split())[:300]
    return f"{kernel}: FAILED ({type(exc).__name__}: {text}); the other kernels carry on."


# --- what this torch build can run ---------------------------------------------------------------

def kernel_available(kernel, device=None) -> bool:
    """Whether this torch build runs `kernel` on `device` (tries a tiny product)."""
    _kernel(kernel)
    device = _device.resolve(device)
    try:
        stack = DecodeStack(_tiny_spec(), _device.default_dtype(device), device)
        if kernel != "dense":
            stack = stack.quantised(kernel)
        stack.output(1, 0)
    except (NotImplementedError, RuntimeError):
        return False
    return True


def _tiny_spec():
    return dataclasses.replace(architectures.get("llama-2-7b"), name="tiny", n_layers=1, d_model=64,
                               n_heads=1, n_kv_heads=1, head_dim=64, d_ff=64, vocab_size=0)


