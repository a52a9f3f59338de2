"""Measurement: the one timer every lab uses, and the measurements built on it.

Chapter: *How to benchmark your own traffic*; labs: all of them.

- `time_fn` wraps `torch.utils.benchmark.Timer`, which synchronises the accelerator
  around each block of runs; it warms up first and reports the median. No lab calls
  `time.time()` around GPU work.
- Reads are sized against the last-level cache (L2 on a GPU): with `flush_cache=True`
  each timed run reads a slice of a pool at least 4x the cache, so the cache cannot
  flatter the result. `flush_cache=False` re-reads one buffer, to *show* the cache.
- Every measurement returns tidy pandas rows with the device, dtype, sizes, seconds,
  the achieved rate and its fraction of the datasheet peak (`hardware.detect()`).
- Defaults are small on a CPU (fp32: torch's CPU fp16 matmul is ~30x slower) and large
  on a GPU (fp16, which every CUDA GPU runs on tensor cores, the T4 included).
"""

from __future__ import annotations

import datetime
import math
import warnings
from dataclasses import dataclass

import numpy as np

from . import dtypes as _dtypes
from . import hardware as _hardware
from . import llm as _llm
from . import roofline as _roofline

# Each timed run reads a fresh slice of a pool this many times the cache size.
CACHE_FLUSH_FACTOR = 4
MiB = 2**20


@dataclass(frozen=True)
class Timing:
    """Median seconds per call, the interquartile range, and how many blocks were timed."""

    median_s: float
    iqr_s: float
    blocks: int
    calls_per_block: int


def default_device():
    """torch.device('cuda') when a GPU is present, else the CPU."""
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def default_dtype(device=None) -> str:
    """fp16 on a GPU (never bf16: a T4 emulates it), fp32 on a CPU."""
    device = _device(device)
    return "fp16" if device.type == "cuda" else "fp32"


def _device(device):
    import torch

    return default_device() if device is None else torch.device(device)


def accelerator_for(device=None) -> _hardware.Accelerator:
    """The catalogue entry for `device`: the detected GPU, or the reference CPU."""
    return _hardware.detect() if _device(device).type == "cuda" else _hardware.cpu()


def cache_bytes(device=None) -> float:
    """Last-level cache of `device` in bytes (L2 on a GPU as torch reports it; the CPU's
    L3), or 64 MiB when it cannot be read, a safe over-estimate for a flush."""
    return accelerator_for(device).cache_bytes or 64 * MiB


def synchronize(device=None):
    """Wait until the accelerator has finished the work queued so far (no-op on a CPU)."""
    import torch

    if _device(device).type == "cuda":
        torch.cuda.synchronize()


_synchronize = synchronize  # for functions whose argument of that name shadows it


def time_fn(fn, *, warmup=3, min_run_time=None, device=None, num_threads=None) -> Timing:
    """Time `fn()` with torch.utils.benchmark: `warmup` untimed calls, then blocks of
    calls for at least `min_run_time` seconds (0.2 s on a GPU, 0.05 s on a CPU);
    returns the median seconds per call. The accelerator is synchronised before the
    clock is read, so asynchronous GPU work is counted in full. `num_threads` (CPU
    threads) defaults to torch.get_num_threads(); 1 reproduces the Timer's own default."""
    import torch
    import torch.utils.benchmark as tbench

    device = _device(device)
    if warmup < 0:
        raise ValueError(f"warmup must be >= 0, got {warmup}")
    if min_run_time is None:
        min_run_time = 0.2 if device.type == "cuda" else 0.05
    if not min_run_time > 0:
        raise ValueError(f"min_run_time must be positive seconds, got {min_run_time}")
    for _ in range(warmup):
        fn()
    synchronize(device)
    # num_threads: the Timer defaults to ONE thread, which would time a CPU at a
    # fraction of its speed; use what torch uses everywhere else.
    if num_threads is None:
        num_threads = torch.get_num_threads()
    if int(num_threads) != num_threads or num_threads < 1:
        raise ValueError(f"num_threads must be a positive integer, got {num_threads!r}")
    timer = tbench.Timer(stmt="fn()", globals={"fn": fn}, num_threads=int(num_threads))
    m = timer.blocked_autorange(min_run_time=min_run_time)
    return Timing(median_s=float(m.median), iqr_s=float(m.iqr), blocks=len(m.times),
                  calls_per_block=int(m.number_per_run))


def time_calls(fn, n=10, *, device=None, synchronize=True):
    """Chapter *How to benchmark your own traffic*: seconds of each of `n` single calls of
    `fn()`, in order and with no warm-up (a numpy array), to *see* what `time_fn` hides:
    the first call's set-up cost, the spread, the outliers. Report `time_fn`'s median.

    `synchronize=False` reads the clock without waiting for the accelerator: the classic
    mistake, kept only to show it (on a GPU it times the kernel launches, not the work).
    """
    import timeit

    device = _device(device)
    if int(n) != n or n < 1:
        raise ValueError(f"n must be a positive whole number of calls, got {n!r}")

    def clock():
        if synchronize:
            _synchronize(device)
        return timeit.default_timer()  # what torch.utils.benchmark reads

    _synchronize(device)  # start from an idle accelerator
    seconds = np.empty(int(n))
    for i in range(int(n)):
        start = clock()
        fn()
        seconds[i] = clock() - start
    _synchronize(device)  # leave it idle too, whatever `synchronize` said
    return seconds


def environment(device=None) -> dict:
    """Which machine produced a measurement: device, its catalogue entry, torch, date,
    and the CPU threads torch uses (what a CPU measurement depends on)."""
    import platform

    import torch

    device = _device(device)
    acc = accelerator_for(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else (
        platform.processor() or platform.machine() or "cpu")
    return {"device": name, "catalogue_entry": acc.name, "device_type": device.type,
            "torch": torch.__version__, "cuda": torch.version.cuda or "",
            "date": datetime.date.today().isoformat(),
            "cpu_threads": torch.get_num_threads()}


# --- the sweep machinery --------------------------------------------------------------

def _is_oom(exc) -> bool:
    import torch

    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()


def _sweep(items, measure, desc, progress=True):
    """Run `measure(item)` over `items` with a progress bar. Out of GPU memory stops the
    sweep with a warning that says so, and what was measured is kept."""
    import torch
    from tqdm.auto import tqdm

    rows = []
    for item in tqdm(items, desc=desc, disable=not progress, leave=False):
        try:
            rows.append(measure(item))
        except (torch.cuda.OutOfMemoryError, RuntimeError, MemoryError) as exc:
            if not (isinstance(exc, MemoryError) or _is_oom(exc)):
                raise
            warnings.warn(f"{desc}: out of memory at {item}; stopping this sweep and "
                          f"keeping the {len(rows)} sizes measured so far.", stacklevel=3)
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            break
    import pandas as pd

    return pd.DataFrame(rows)


def _fraction(value, peak):
    return value / peak if peak and peak > 0 and math.isfinite(peak) else math.nan


def _peak(acc, dtype):
    try:
        return acc.peak_flops(dtype)
    except ValueError:
        return math.nan


def _roof(intensity, peak, bandwidth):
    """The roofline's FLOP/s at `intensity`, or nan when the device's peaks are unknown."""
    if not (peak > 0 and bandwidth > 0):  # nan compares False
        return math.nan
    return _roofline.attainable_flops(intensity, peak, bandwidth)


def _pool_slices(slice_elems, cache, bytes_per_elem, flush_cache, max_slices=4096):
    """How many slices of `slice_elems` make a pool that flushes the cache."""
    if not flush_cache:
        return 1
    slice_bytes = slice_elems * bytes_per_elem
    return int(min(max_slices, max(2, math.ceil(CACHE_FLUSH_FACTOR * cache / slice_bytes))))


# --- weight reads -----------------------------------------------------------------------

def default_read_sizes(device=None) -> list[int]:
    """Buffer sizes in bytes: from 1/16 of the cache to far beyond it (GPU: up to 2 GiB
    or a quarter of memory; CPU: up to 256 MiB)."""
    device = _device(device)
    cache = cache_bytes(device)
    if device.type == "cuda":
        top = min(2 * 1024 * MiB, _hardware.detect().memory_bytes / 8)
    else:
        top = 256 * MiB
    lo = max(64 * 1024, cache / 16)
    sizes = np.geomspace(lo, top, num=max(2, int(np.log2(top / lo)) + 1))
    return sorted({int(s) // 4096 * 4096 for s in sizes})


def weight_read_bandwidth(sizes_bytes=None, dtype=None, device=None, *, flush_cache=True,
                          min_run_time=None, progress=True):
    """Time reading weight tensors of each size once (a sum over the tensor: the fewest
    bytes a kernel can move for it) and return one row per size with achieved GB/s and
    the fraction of the datasheet bandwidth.

    With `flush_cache` every timed read is of a slice not read since at least
    4x the cache's worth of other data was; without it one buffer is re-read, so
    buffers that fit in the cache report the cache's bandwidth, not DRAM's.
    """
    import torch

    device = _device(device)
    dtype = _dtypes.canonical(dtype or default_dtype(device))
    tdtype = _dtypes.torch_dtype(dtype)
    bpe = _dtypes.bytes_per_element(dtype)
    acc = accelerator_for(device)
    cache = cache_bytes(device)
    sizes = default_read_sizes(device) if sizes_bytes is None else list(sizes_bytes)
    for s in sizes:
        if not s > 0:
            raise ValueError(f"sizes_bytes must be positive, got {s!r}")

    def measure(size):
        elems = max(1, int(size // bpe))
        n = _pool_slices(elems, cache, bpe, flush_cache)
        pool = torch.randn(n, elems, device=device).to(tdtype)  # [slices, elems]
        state = {"i": 0}

        def read():
            state["i"] = (state["i"] + 1) % n
            return pool[state["i"]].sum()

        t = time_fn(read, min_run_time=min_run_time, device=device)
        nbytes = elems * bpe
        del pool
        achieved = nbytes / t.median_s
        return {"device": acc.name, "dtype": dtype, "bytes": nbytes, "slices": n,
                "flush_cache": flush_cache, "fits_in_cache": n * nbytes <= cache,
                "seconds": t.median_s, "achieved_gb_per_s": achieved / 1e9,
                "fraction_of_peak": _fraction(achieved, acc.bandwidth)}

    return _sweep(sizes, measure, "weight reads", progress)


# --- matmuls ----------------------------------------------------------------------------

def default_matmul_shapes(device=None) -> list[tuple[int, int, int]]:
    """(m, n, k) squares: 256..1024 on a CPU, 1024..8192 on a GPU."""
    sizes = [1024, 2048, 4096, 8192] if _device(device).type == "cuda" else [256, 512, 1024]
    return [(s, s, s) for s in sizes]


def matmul_tflops(shapes=None, dtype=None, device=None, *, flush_cache=True,
                  min_run_time=None, progress=True):
    """Time [m, k] @ [k, n] for each (m, n, k) and return one row per shape: seconds,
    achieved TFLOP/s, arithmetic intensity, and the fraction of the dense datasheet peak.
    Operands rotate through a pool larger than the cache (for shapes whose operands are
    smaller than it) so that small shapes are not timed from cache."""
    import torch

    device = _device(device)
    dtype = _dtypes.canonical(dtype or default_dtype(device))
    tdtype = _dtypes.torch_dtype(dtype)
    bpe = _dtypes.bytes_per_element(dtype)
    acc = accelerator_for(device)
    cache = cache_bytes(device)
    peak = _peak(acc, dtype)
    shapes = default_matmul_shapes(device) if shapes is None else [tuple(s) for s in shapes]

    def measure(shape):
        m, n, k = shape
        flops = _roofline.matmul_flops(m, n, k)
        nbytes = _roofline.matmul_bytes(m, n, k, dtype)
        sets = _pool_slices(int(nbytes / bpe), cache, bpe, flush_cache, max_slices=64)
        a = torch.randn(sets, m, k, device=device).to(tdtype)  # [sets, m, k]
        b = (torch.randn(sets, k, n, device=device) * k**-0.5).to(tdtype)  # [sets, k, n]
        c = torch.empty(sets, m, n, device=device, dtype=tdtype)  # [sets, m, n]
        state = {"i": 0}

        def mm():
            i = state["i"] = (state["i"] + 1) % sets
            return torch.mm(a[i], b[i], out=c[i])

        t = time_fn(mm, min_run_time=min_run_time, device=device)
        del a, b, c
        achieved = flops / t.median_s
        roof = _roof(flops / nbytes, peak, acc.bandwidth)
        return {"device": acc.name, "dtype": dtype, "m": m, "n": n, "k": k,
                "flops": flops, "bytes": nbytes, "intensity": flops / nbytes,
                "fits_in_cache": sets * nbytes <= cache, "seconds": t.median_s,
                "achieved_tflops": achieved / 1e12,
                "achieved_gb_per_s": nbytes / t.median_s / 1e9,
                "fraction_of_peak": _fraction(achieved, peak),
                "roofline_tflops": roof / 1e12,
                "fraction_of_roofline": _fraction(achieved, roof)}

    return _sweep(shapes, measure, "matmuls", progress)


# --- a decode step ------------------------------------------------------------------------

def decode_step(d_model, n_matrices, batch=1, dtype=None, device=None, *,
                cuda_graph=False, min_run_time=None):
    """Time one decode step over a stack of `n_matrices` weight matrices [d_model, d_model]
    (x = x @ W for each, x: [batch, d_model]) and compare it with the weight-read ceiling
    for the same bytes. Returns one row (a dict).

    `cuda_graph=True` (GPU only) captures the chain once and replays it, removing the
    per-kernel launch overhead that bounds small steps in eager PyTorch.
    """
    import torch

    device = _device(device)
    dtype = _dtypes.canonical(dtype or default_dtype(device))
    tdtype = _dtypes.torch_dtype(dtype)
    for name, v in (("d_model", d_model), ("n_matrices", n_matrices), ("batch", batch)):
        if int(v) != v or v <= 0:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    acc = accelerator_for(device)
    # Scaled so activations stay O(1) through the chain (no fp16 overflow).
    weights = [(torch.randn(d_model, d_model, device=device) * d_model**-0.5).to(tdtype)
               for _ in range(n_matrices)]  # n x [d_model, d_model]
    x0 = torch.randn(batch, d_model, device=device).to(tdtype)  # [batch, d_model]

    def step():
        x = x0
        for w in weights:
            x = x @ w
        return x

    fn = step
    if cuda_graph and device.type == "cuda":
        fn = _graphed(step)
    t = time_fn(fn, min_run_time=min_run_time, device=device)
    n_params = n_matrices * d_model * d_model
    bpe = _dtypes.bytes_per_element(dtype)
    # A GPU missing from the catalogue may have no known bandwidth: no ceiling then.
    ceiling = (_llm.weight_read_ceiling(n_params, bpe, acc.bandwidth, batch)
               if math.isfinite(acc.bandwidth) and acc.bandwidth > 0 else math.nan)
    tokens_per_s = batch / t.median_s
    return {"device": acc.name, "dtype": dtype, "d_model": d_model,
            "n_matrices": n_matrices, "batch": batch, "weight_bytes": n_params * bpe,
            "cuda_graph": bool(cuda_graph and device.type == "cuda"),
            "seconds": t.median_s, "tokens_per_s": tokens_per_s,
            "achieved_gb_per_s": n_params * bpe / t.median_s / 1e9,
            "ceiling_tokens_per_s": ceiling,
            "fraction_of_ceiling": _fraction(tokens_per_s, ceiling)}


def _graphed(fn):
    """Capture `fn` in a CUDA graph (after warm-up on a side stream) and return replay."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


# --- the roofline a sweep measured ----------------------------------------------------------

def measured_roofline(rows) -> dict:
    """The roofline a matmul sweep (`matmul_tflops` rows) actually drew. Lab: *fp16
    matmuls on the roofline*.

    Measured peak = the best FLOP/s of any shape; measured bandwidth = the best bytes/s
    of any shape (memory-bound shapes reach it; compute-bound ones move few bytes per
    second); measured ridge = their ratio, in FLOP/byte. Returns
    {"peak_flops", "bandwidth", "ridge"} in FLOP/s, bytes/s and FLOP/byte.
    """
    import pandas as pd

    df = pd.DataFrame(rows)
    missing = {"flops", "bytes", "seconds"} - set(df.columns)
    if missing:
        raise ValueError(f"matmul rows need columns flops, bytes, seconds; missing: "
                         f"{', '.join(sorted(missing))}")
    df = df[(df["seconds"] > 0) & df["seconds"].notna()]
    if df.empty:
        raise ValueError("no timed matmul rows (every row has no positive seconds)")
    peak = float((df["flops"] / df["seconds"]).max())
    bandwidth = float((df["bytes"] / df["seconds"]).max())
    return {"peak_flops": peak, "bandwidth": bandwidth, "ridge": peak / bandwidth}


def lab_matmul_shapes(device=None, *, quick=False) -> list[tuple[int, int, int]]:
    """(m, n, k) for the roofline lab: a weight [k, n] met by m = 1, 2, 4 ... rows (decode
    at batch m, from a GEMV to a square), then squares for the peak. GPU: k = n = 8192
    (fp16, 128 MiB per weight: far beyond any L2); CPU: k = n = 1024 (fp32)."""
    if _device(device).type == "cuda":
        side, squares = 8192, [2048, 4096, 8192, 16384]
        ms = [2**i for i in range(0, 14, 2 if quick else 1)]
    else:
        side, squares = 1024, [256, 512, 1024]
        ms = [1, 4, 16, 64, 256] if quick else [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    if quick:
        squares = squares[1:]
    return [(m, side, side) for m in ms] + [(s, s, s) for s in squares]


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

    device = _device(device)
    base = _llm.get(model)
    dtype = _dtypes.canonical(dtype or default_dtype(device))
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
        weight_budget_bytes = (0.4 * accelerator_for(device).memory_bytes
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
    top = 512 if _device(device).type == "cuda" else 64
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

        self.device = _device(device)
        self.dtype = _dtypes.canonical(dtype or default_dtype(self.device))
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

        acc = accelerator_for(self.device)
        fn = self.step_fn(batch, context)
        on_gpu = self.device.type == "cuda"
        if compile:  # fuses elementwise work (e.g. int8 -> fp16 into the matmul's reads)
            fn = torch.compile(fn)
        if cuda_graph and on_gpu:
            fn = _graphed(fn)
        t = time_fn(fn, min_run_time=min_run_time, device=self.device)
        return {**self._ceilings(batch, context, acc), "kernel": self.kernel,
                "cuda_graph": bool(cuda_graph and on_gpu), "compiled": bool(compile),
                "seconds": t.median_s, **self._rates(batch, context, t.median_s, acc)}

    def _ceilings(self, batch, context, acc) -> dict:
        fmt, act = self.weight_format, self.dtype
        kw = dict(kv_dtype=act, compute_dtype=act)
        step_bytes = _llm.decode_step_bytes(self.spec, batch, context, fmt, act)
        flops = _llm.decode_step_flops(self.spec, batch, context)
        peak = _peak(acc, act)
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
                "fraction_of_ceiling": _fraction(tokens, ceilings["ceiling_tokens_per_s"]),
                "fraction_of_weight_read_ceiling": _fraction(
                    tokens, ceilings["weight_read_ceiling_tokens_per_s"])}

    def sweep(self, batches, context=0, *, cuda_graph=False, compile=False,
              min_run_time=None, progress=True):
        """`measure` at each batch; out of memory stops the sweep and keeps what was
        measured (a KV cache grows with batch x context)."""
        return _sweep(list(batches), lambda b: self.measure(
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
    device = _device(device)
    try:
        stack = DecodeStack(_tiny_spec(), default_dtype(device), device)
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
