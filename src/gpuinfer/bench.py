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
from typing import NamedTuple

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


class _Target(NamedTuple):
    """What every measurement resolves first: where it runs and in which format."""
    device: object          # torch.device
    dtype: str              # canonical name, e.g. "fp16"
    tdtype: object          # torch.dtype
    bytes_per_element: float
    accelerator: _hardware.Accelerator
    cache: float            # bytes


def _target(device, dtype) -> _Target:
    device = _device(device)
    dtype = _dtypes.canonical(dtype or default_dtype(device))
    return _Target(device, dtype, _dtypes.torch_dtype(dtype), _dtypes.bytes_per_element(dtype),
                   accelerator_for(device), cache_bytes(device))


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

    device, dtype, tdtype, bpe, acc, cache = _target(device, dtype)
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

    device, dtype, tdtype, bpe, acc, cache = _target(device, dtype)
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

    device, dtype, tdtype, bpe, acc, _ = _target(device, dtype)
    for name, v in (("d_model", d_model), ("n_matrices", n_matrices), ("batch", batch)):
        if int(v) != v or v <= 0:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
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
