"""Measurement: the one timer every lab uses, and the sweeps built on it.

Chapter: *How to benchmark your own traffic*; labs: all of them.

- `time_fn` warms up, sizes its blocks from one timed call, times blocks of
  `torch.utils.benchmark.Timer` and reports the median per call: the Timer's clock
  synchronises only the device being measured (a CPU timing never touches CUDA, so a
  gloo rank or a CPU baseline creates no CUDA context), and it times at least
  `MIN_BLOCKS` blocks, so a multi-millisecond GPU step still gets a spread (IQR).
  `timing_estimate_s` predicts its run time by the same rule.
  No lab calls `time.time()` around GPU work.
- Reads are sized against the last-level cache (L2 on a GPU): with `flush_cache=True`
  each read is of a slice of a pool at least 4x the cache, so the cache cannot flatter
  the result. `flush_cache=False` re-reads one buffer, to *show* the cache. On a GPU the
  reads of one pass are captured in one CUDA graph and its replay is divided by the
  number of reads: a read smaller than L2 takes less time than Python takes to launch it.
- Every measurement returns tidy pandas rows with the device, dtype, sizes, seconds,
  the achieved rate and its fraction of the datasheet peak (`hardware.detect()`). A GPU
  the catalogue does not know is measured all the same; its ceilings are NaN, or, with
  `lab_measurements.lab_accelerator`, measured here and labelled as measured.
- Defaults are small on a CPU (fp32: torch's CPU fp16 matmul is ~30x slower) and large
  on a GPU (fp16, which every CUDA GPU runs on tensor cores, the T4 included).

The device (resolving it, random tensors, CUDA graphs, memory and out-of-memory) is
`device`'s; which machine produced a number (`environment()`, NVML clocks, power,
throttle reasons) is `environment`'s. Their names the labs call are importable here too.
What the labs build on the timer (the one decode-step row and `decode_step`, the
roofline a sweep drew, ceilings for a GPU the catalogue lacks) is `lab_measurements`'.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
import warnings
from dataclasses import dataclass

import numpy as np

import torch
import torch.utils.benchmark as tbench

from gpuinfer.measure import torch_device as _dev
from gpuinfer import dtypes as _dtypes
from gpuinfer import hardware as _hardware
from gpuinfer.predict import roofline as _roofline
from gpuinfer import validate as _validate
# The devices and the machine, in their own modules; here for the labs that call them
# through `bench` (bench.default_device(), bench.environment(), bench.first_that_fits ...).
from gpuinfer.measure.torch_device import (FALLBACK_CACHE_BYTES, MiB)
from gpuinfer.measure.environment import (clock_scaled_peak, sample_clocks)

#: Each flushed read is of a slice of a pool at least this many times the cache.
CACHE_FLUSH_FACTOR = 4
#: Fewest timing blocks per measurement: enough for a median and an interquartile range
#: that is a spread, also for a step so long that `min_run_s` holds only one or two.
MIN_BLOCKS = 5
#: Seconds of timing per measurement by default. A GPU gets longer: its clock boosts and
#: settles, and each block ends in a synchronisation that costs microseconds.
GPU_MIN_RUN_TIME_S = 0.2
CPU_MIN_RUN_TIME_S = 0.05
#: Bounds that no sensible measurement reaches: refused before any work.
MAX_WARMUP = 100_000
MAX_RUN_TIME_S = 3600.0
MAX_BLOCKS = 100_000
#: Most slices in a flush pool (reads per pass), and operand sets in a matmul pool.
MAX_POOL_SLICES = 4096
MAX_MATMUL_SETS = 64


@dataclass(frozen=True)
class Timing:
    """Median seconds per call, the interquartile range, and how many blocks were timed."""

    median_s: float
    iqr_s: float
    blocks: int
    calls_per_block: int


# --- the clock and the timer ----------------------------------------------------------------

def _clock(device):
    """Seconds now, after `device` finished its queued work: a plain perf_counter on a CPU
    (nothing to wait for, and no CUDA context is touched)."""
    if device.type != "cuda":
        return time.perf_counter

    def clock():
        torch.cuda.synchronize(device)
        return time.perf_counter()

    return clock


def _block_plan(call_s, min_run_s, min_blocks):
    """(calls per block, blocks) for a function of `call_s` seconds a call: blocks of
    about min_run_s / min_blocks seconds (at least one call), and as many as make
    min_run_s, at least `min_blocks`. The one rule `time_fn` and its estimate share."""
    target = min_run_s / min_blocks
    number = max(1, min(MAX_CALLS_PER_BLOCK, math.ceil(target / max(call_s, 1e-9))))
    blocks = max(min_blocks, math.ceil(min_run_s / (number * max(call_s, 1e-9))))
    return number, min(blocks, MAX_BLOCKS)


def _threads(name, value):
    """A CPU thread count; None means torch's current one."""

    return _validate.count(name, torch.get_num_threads() if value is None else value,
                           maximum=4096)


#: `time_fn`'s argument checks (`validate.checked`), kept out of the body a chapter prints.
_TIME_FN_ARGS = dict(
    fn=_validate.callable_,
    warmup=_validate.rule(_validate.count, minimum=0, maximum=MAX_WARMUP,
                          why_maximum="more warm-up calls than any measurement needs"),
    min_run_s=_validate.optional(_validate.rule(
        _validate.number, lo=0, lo_open=True, hi=MAX_RUN_TIME_S,
        expected=f"seconds > 0 and <= {MAX_RUN_TIME_S:g}")),
    device=lambda name, value: _dev.resolve(value, name),
    num_threads=_threads,
    min_blocks=_validate.rule(_validate.count, maximum=MAX_BLOCKS))


@_validate.checked(**_TIME_FN_ARGS)
def time_fn(fn, *, warmup=3, min_run_s=None, device=None, num_threads=None,
            min_blocks=MIN_BLOCKS, pin_core=None) -> Timing:
    """Time `fn()` with `torch.utils.benchmark.Timer`: `warmup` untimed calls, one timed
    call that sizes the blocks, then blocks of the same number of calls, each about
    `min_run_s / min_blocks` seconds (at least one call), until `min_run_s` seconds
    (0.2 on a GPU, 0.05 on a CPU) and at least `min_blocks` blocks are timed; returns the
    median seconds per call and the interquartile range. A step slower than a block's
    share is timed `min_blocks` times, once a block. `timing_estimate_s` uses this rule.

    (`Timer.blocked_autorange` is not used: with a clock that synchronises, its own
    block-size search took 0.3-6 s a GPU measurement, several times the printed
    estimates. A first block that lasted under half its target, because the sizing call
    was mostly the clock's own cost, is discarded and the blocks resized from it.)

    The Timer reads `_clock(device)`: it waits for `device` (and only it) before each
    reading, so asynchronous GPU work is counted in full, and on a CPU it is a plain
    perf_counter (the Timer's default clock synchronises every GPU torch sees, even for
    CPU work). `num_threads` (CPU threads) defaults to torch.get_num_threads(); 1
    reproduces the Timer's own default. Blocks run with the garbage collector off, as
    timeit does.

    `pin_core` (a CPU core number, or None): the calling thread is pinned to that core
    (`os.sched_setaffinity`) for the warm-up and the timing, and its affinity restored
    afterwards, so the scheduler cannot move it between cores mid-measurement (chapter
    *CPU or GPU?* times one-thread CPU work this way: with `num_threads=1` torch runs it
    on the calling thread). Where the OS offers no affinity call (macOS, Windows), a note
    is printed and the timing runs unpinned."""

    if pin_core is not None:
        pin_core = _validate.count("pin_core", pin_core, minimum=0, maximum=1 << 16)
        with pinned_to_core(pin_core):
            return time_fn(fn, warmup=warmup, min_run_s=min_run_s, device=device,
                           num_threads=num_threads, min_blocks=min_blocks)

    if min_run_s is None:
        min_run_s = GPU_MIN_RUN_TIME_S if device.type == "cuda" else CPU_MIN_RUN_TIME_S
    timer = tbench.Timer(stmt="fn()", globals={"fn": fn}, num_threads=num_threads,
                         timer=_clock(device))
    for _ in range(warmup):
        fn()
    with _torch_threads(num_threads):
        call_s = _timed_block(timer, 1)  # the sizing call
        number, blocks = _block_plan(call_s, min_run_s, min_blocks)
        first = _timed_block(timer, number)
        if first < 0.5 * number * call_s and number < MAX_CALLS_PER_BLOCK:
            number, blocks = _block_plan(first / number, min_run_s, min_blocks)
            first = None  # resized: that block was a second sizing
        per_call = [] if first is None else [first / number]
        while len(per_call) < blocks:
            per_call.append(_timed_block(timer, number) / number)
    q1, median, q3 = np.percentile(per_call, [25, 50, 75])
    return Timing(median_s=float(median), iqr_s=float(q3 - q1), blocks=len(per_call),
                  calls_per_block=int(number))


_PIN_NOTE_SHOWN = []


@contextlib.contextmanager
def pinned_to_core(core):
    """The calling thread pinned to CPU `core` within the block (`os.sched_setaffinity`
    of this thread), its previous affinity restored after; a printed note and no pinning
    where the OS has no affinity call. ValueError for a core this process may not use."""
    import os

    if not (hasattr(os, "sched_setaffinity") and hasattr(os, "sched_getaffinity")):
        if not _PIN_NOTE_SHOWN:  # once a session, not once a measurement
            _PIN_NOTE_SHOWN.append(core)
            print(f"note: this OS cannot pin a thread to a core (no os.sched_setaffinity): "
                  f"timings run unpinned instead of on core {core}")
        yield
        return
    before = os.sched_getaffinity(0)
    if core not in before:
        raise ValueError(f"pin_core must be one of the cores this process may run on "
                         f"({', '.join(map(str, sorted(before)))}), got {core!r}")
    os.sched_setaffinity(0, {core})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


#: Most calls in one timed block (a call of a few nanoseconds would ask for millions).
MAX_CALLS_PER_BLOCK = 1_000_000


def _timed_block(timer, number) -> float:
    """Seconds `number` calls take on `timer` (a torch.utils.benchmark.Timer), without the
    warm-up calls its public `timeit` adds before every block (2 or more calls: for a
    slow step, three times the work); the public method where that one is missing."""
    inner = getattr(timer, "_timeit", None)
    if inner is not None:
        return float(inner(number))
    m = timer.timeit(number)
    return float(m.raw_times[0])


@contextlib.contextmanager
def _torch_threads(n):
    """torch's CPU threads set to `n` within the block, as the Timer sets them."""

    before = torch.get_num_threads()
    if n != before:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def time_calls(fn, n=10, *, device=None, synchronize=True):  # noqa: F811
    """Chapter *How to benchmark your own traffic*: seconds of each of `n` single calls of
    `fn()`, in order and with no warm-up (a numpy array), to *see* what `time_fn` hides:
    the first call's set-up cost, the spread, the outliers. Report `time_fn`'s median.

    `synchronize=False` reads the clock without waiting for the accelerator: the classic
    mistake, kept only to show it (on a GPU it times the kernel launches, not the work).
    """
    _validate.callable_("fn", fn)
    device = _dev.resolve(device)
    n = _validate.count("n", n, maximum=10_000_000)
    if not isinstance(synchronize, bool):
        raise TypeError(f"synchronize must be True or False, got {synchronize!r}")
    clock = _clock(device) if synchronize else time.perf_counter
    _dev.synchronize(device)  # start from an idle accelerator
    seconds = np.empty(n)
    for i in range(n):
        start = clock()
        fn()
        seconds[i] = clock() - start
    _dev.synchronize(device)  # leave it idle too, whatever `synchronize` said
    return seconds


# --- sweeps ---------------------------------------------------------------------------------

def _in_notebook() -> bool:
    """Inside a Jupyter kernel (Colab included), where tqdm would draw widgets."""
    ipython = sys.modules.get("IPython")
    try:
        shell = ipython.get_ipython() if ipython else None
        return shell is not None and "IPKernelApp" in shell.config
    except Exception:
        return False


def _progress(items, desc, enabled):
    """`items` with a progress bar: widgets in a notebook only when ipywidgets is there
    (else none, rather than tqdm's IProgress warning), text in a terminal."""
    if not enabled:
        return items
    if _in_notebook():
        import importlib.util

        if importlib.util.find_spec("ipywidgets") is None:
            return items
        from tqdm.notebook import tqdm
    else:
        from tqdm.std import tqdm
    return tqdm(items, desc=desc, leave=False)


def _say_estimate(desc, n, estimate_s, enabled):
    """The one line printed before a sweep: how many points and about how long."""
    if not enabled:
        return
    about = (f"about {estimate_s:,.1f} s" if estimate_s is not None and math.isfinite(estimate_s)
             else "run time unknown")
    print(f"{desc}: {n} point{'s' if n != 1 else ''}, {about} of timing")


def sweep(items, measure, desc, progress=True, estimate_s=None):
    """Rows of `measure(item)` over `items` (a DataFrame), after one line saying how many
    points and about how long (`estimate_s`), with a progress bar. Out of memory (device
    or host; a failed capture with the GPU's memory nearly full: `device.is_oom`) stops
    the sweep with a warning that says so, frees what the failed call held, and keeps
    what was measured."""
    import pandas as pd

    items = list(items)
    _say_estimate(desc, len(items), estimate_s, progress)
    rows, stopped_at = [], None
    for item in _progress(items, desc, progress):
        try:
            rows.append(measure(item))
        except (RuntimeError, MemoryError) as exc:
            if not _dev.is_oom(exc):
                raise
            stopped_at = item
        if stopped_at is not None:
            break
    if stopped_at is not None:  # the exception and its frames are released by now
        _dev.free_memory()
        warnings.warn(f"{desc}: out of memory at {stopped_at}; stopping this sweep and "
                      f"keeping the {len(rows)} sizes measured so far.", stacklevel=3)
    return pd.DataFrame(rows)


def timing_estimate_s(call_s, min_run_s, *, warmup=3, min_blocks=MIN_BLOCKS) -> float:
    """Seconds `time_fn` spends on a function that takes `call_s` a call, by its own rule
    (`_block_plan`): `warmup` calls, the sizing call, then the blocks, which last
    max(min_run_s, min_blocks calls). Set-up (allocation, capture) not included.
    A NaN `call_s` (no roofline time for a device without catalogue peaks) gives NaN."""
    if _validate.is_number(call_s) and math.isnan(call_s):
        return math.nan
    call_s = _validate.non_negative("call_s", call_s)
    min_run_s = _validate.positive("min_run_s", min_run_s)
    warmup = _validate.count("warmup", warmup, minimum=0, maximum=MAX_WARMUP)
    min_blocks = _validate.count("min_blocks", min_blocks, maximum=MAX_BLOCKS)
    number, blocks = _block_plan(call_s, min_run_s, min_blocks)
    return (warmup + 1) * call_s + blocks * number * call_s


def fraction(value, peak):
    """`value / peak`, or NaN where the peak is unknown (missing, zero, NaN or infinite)."""
    return value / peak if peak and peak > 0 and math.isfinite(peak) else math.nan


def _finite_positive(x) -> bool:
    return x is not None and math.isfinite(x) and x > 0


def _peak(acc, dtype):
    """The dense peak FLOP/s, or NaN for a device the catalogue has none for."""
    return _roofline.peak_or_nan(acc, dtype)


def _roof_flops(flops, nbytes, acc, dtype):
    """FLOP/s the roofline allows an operation of `flops` on `nbytes` (NaN if the device's
    peak or bandwidth is unknown): flops over `roofline.op_time_s`."""
    seconds = _roofline.op_time_s(flops, nbytes, _peak(acc, dtype),
                                   _roofline.bandwidth_or_nan(acc))
    return flops / seconds if seconds > 0 else math.nan


def _pool_slices(slice_elems, cache, bytes_per_elem, flush_cache, max_slices=MAX_POOL_SLICES):
    """How many slices of `slice_elems` make a pool that flushes the cache, at most
    `max_slices` (None: no cap, where the slice count costs nothing but memory)."""
    if not flush_cache:
        return 1
    slice_bytes = slice_elems * bytes_per_elem
    slices = max(2, math.ceil(CACHE_FLUSH_FACTOR * cache / slice_bytes))
    return int(slices if max_slices is None else min(max_slices, slices))


# --- weight reads -------------------------------------------------------------------------

#: Largest read of the default sweep on a GPU: 2 GiB, or an eighth of its memory. On a
#: CPU: 256 MiB, or twice a larger last-level cache (some server CPUs' L3 holds hundreds of
#: MiB), within an eighth of the memory.
GPU_TOP_READ_BYTES = 2 * 1024 * MiB
CPU_TOP_READ_BYTES = 256 * MiB
SMALLEST_READ_BYTES = 64 * 1024


def default_read_sizes(device=None) -> list[int]:
    """Buffer sizes in bytes: from 1/16 of the cache to beyond it (GPU: up to 2 GiB or
    an eighth of the memory free for a measurement, `device.available_bytes`, so that
    `refuse_beyond_memory` never refuses a default size; CPU: up to 256 MiB or twice the
    cache, within an eighth of memory)."""
    device = _dev.resolve(device)
    memory = (_dev.available_bytes(device) if device.type == "cuda"
              else _dev.memory_bytes(device))
    return read_sizes_for(_dev.cache_bytes(device), memory, device.type)


def read_sizes_for(cache, memory, device_type="cuda") -> list[int]:
    """`default_read_sizes` for a device with `cache` and `memory` bytes (no device
    needed): one size per doubling, 4 KiB-aligned, from cache/16 up to the top."""
    cache = _validate.positive("cache", cache)
    memory = _validate.positive("memory", memory)
    device_type = _validate.choice("device_type", device_type, ("cuda", "cpu"))
    top = (min(GPU_TOP_READ_BYTES, memory / 8) if device_type == "cuda"
           else min(max(CPU_TOP_READ_BYTES, 2 * cache), max(CPU_TOP_READ_BYTES, memory / 8)))
    lo = min(max(SMALLEST_READ_BYTES, cache / 16), top / 2)
    sizes = np.geomspace(lo, top, num=max(2, int(np.log2(top / lo)) + 1))
    return sorted({max(4096, int(s) // 4096 * 4096) for s in sizes})


def read_estimate_s(sizes_bytes, dtype, accelerator, *, min_run_s, cache=None) -> float:
    """Seconds of timing a `weight_read_bandwidth` sweep of `sizes_bytes` takes on
    `accelerator` at its datasheet bandwidth (NaN if unknown). Set-up not included."""
    acc = _hardware.get(accelerator)
    bpe = _dtypes.bytes_per_element(dtype)
    cache = cache or acc.cache_bytes or FALLBACK_CACHE_BYTES
    total = 0.0
    for size in sizes_bytes:
        elems = max(1, int(size // bpe))
        reads = _pool_slices(elems, cache, bpe, True) if acc.kind != "cpu" else 1
        total += timing_estimate_s(reads * elems * bpe / _roofline.bandwidth_or_nan(acc),
                                   min_run_s)
    return total


def _sizes(name, values):
    """A list of positive whole byte counts (or matmul dims), TypeError/ValueError else."""
    if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        raise TypeError(f"{name} must be a list of sizes, got {values!r}")
    values = list(values)
    if not values:
        raise ValueError(f"{name} must hold at least one size, got an empty list")
    return values


def weight_read_bandwidth(sizes_bytes=None, dtype=None, device=None, *, flush_cache=True,
                          min_run_s=None, progress=True, accelerator=None):
    """Time reading weight tensors of each size once (a sum over the tensor: the fewest
    bytes a kernel can move for it) and return one row per size with achieved GB/s and
    the fraction of the datasheet bandwidth (of `accelerator`, default the device's
    catalogue entry).

    With `flush_cache` every read is of a slice not read since at least 4x the cache's
    worth of other data was; without it one buffer is re-read, so buffers that fit in
    the cache report the cache's bandwidth, not DRAM's. Each timed call reads
    `reads_per_call` slices (one pass over the pool); on a GPU that pass is one CUDA
    graph, so even a read shorter than a kernel launch is timed, not the launch.
    """

    device, dtype, tdtype, bpe, acc, cache = _dev.target(device, dtype, accelerator)
    sizes = default_read_sizes(device) if sizes_bytes is None else _sizes("sizes_bytes",
                                                                         sizes_bytes)
    sizes = [_validate.positive("sizes_bytes", s) for s in sizes]
    _TIME_FN_ARGS["min_run_s"]("min_run_s", min_run_s)  # refused before any work
    if not isinstance(flush_cache, bool):
        raise TypeError(f"flush_cache must be True or False, got {flush_cache!r}")
    on_gpu = device.type == "cuda"

    def plan(size):
        elems = max(1, int(size // bpe))
        # GPU: a pass reads every slice in one graph, so their count is capped (no GPU's
        # L2 reaches the cap: 4 x 126 MB in 1 MiB slices is 504). CPU: one slice a call,
        # so no cap: a server CPU's L3 can hold hundreds of MiB (480 MiB on a machine
        # that ran this), and a pool of a few GB is what flushes it.
        slices = _pool_slices(elems, cache, bpe, flush_cache,
                              MAX_POOL_SLICES if on_gpu else None)
        # Reads per timed call. GPU: a pass over the flush pool in one graph replay (a
        # re-read makes as many reads of its one buffer, so both replays are as long).
        # CPU: one read a call, each of the next slice (Python's dispatch is the same
        # either way, and a pass per call would time the smallest sizes for minutes).
        reads = _pool_slices(elems, cache, bpe, True) if on_gpu else 1
        return elems, reads, slices

    for s in sizes:
        elems, _, slices = plan(s)
        _dev.refuse_beyond_memory(slices * elems * bpe, device, f"a {s:,.0f}-byte read pool")
    # One buffer of random numbers serves every size's pool (a view of its start): filling
    # a 512 MiB pool again for each size took longer on a CPU than timing the reads.
    flat = {}

    def measure(size):
        elems, reads, slices = plan(size)
        if flat.get("n", 0) < slices * elems:
            flat.clear()  # free the smaller buffer before making the larger one
            total = max(plan(s)[2] * plan(s)[0] for s in sizes)
            flat.update(n=total, buffer=_dev.random_tensor((total,), tdtype, device))
        pool = flat["buffer"][:slices * elems].view(slices, elems)  # [slices, elems]
        out = torch.empty(reads, dtype=tdtype, device=device)  # one sum per read
        state = {"i": 0}

        def read_pass():  # every slice of the pool once (or one buffer `reads` times)
            for j in range(reads):
                torch.sum(pool[j % slices], dim=0, out=out[j])

        def read_next():  # the next slice (CPU)
            state["i"] = (state["i"] + 1) % slices
            torch.sum(pool[state["i"]], dim=0, out=out[0])

        fn = _dev.graphed(read_pass, device) if on_gpu else read_next
        t = time_fn(fn, min_run_s=min_run_s, device=device)
        nbytes = elems * bpe
        pool = out = fn = None  # free the pool before the next size's (closures are done)
        seconds = t.median_s / reads
        achieved = nbytes / seconds
        return {"device": acc.name, "dtype": dtype, "bytes": nbytes, "slices": slices,
                "reads_per_call": reads, "cuda_graph": on_gpu, "flush_cache": flush_cache,
                "fits_in_cache": slices * nbytes <= cache, "seconds": seconds,
                "iqr_s": t.iqr_s / reads, "achieved_gb_per_s": achieved / 1e9,
                "datasheet_gb_per_s": acc.bandwidth / 1e9,
                "fraction_of_peak": fraction(achieved, acc.bandwidth)}

    estimate = read_estimate_s(sizes, dtype, acc, cache=cache,
                               min_run_s=default_min_run_s(device, min_run_s))
    try:
        return sweep(sizes, measure, "weight reads", progress,
                      estimate if math.isfinite(estimate) else None)
    finally:
        flat.clear()


def default_min_run_s(device, min_run_s):
    """`min_run_s`, or `time_fn`'s default for `device`'s kind when it is None."""
    if min_run_s is not None:
        return min_run_s
    return GPU_MIN_RUN_TIME_S if _dev.kind(device) == "cuda" else CPU_MIN_RUN_TIME_S


# --- matmuls ----------------------------------------------------------------------------

#: Squares of the default matmul sweep: GPU sides up to 8192 (fp16: 128 MiB an operand),
#: CPU sides up to 1024 (fp32: a second or so each on two cores).
GPU_SQUARES = (1024, 2048, 4096, 8192)
CPU_SQUARES = (256, 512, 1024)


def default_matmul_shapes(device=None) -> list[tuple[int, int, int]]:
    """(m, n, k) squares: 256..1024 on a CPU, 1024..8192 on a GPU."""
    sizes = GPU_SQUARES if _dev.kind(device) == "cuda" else CPU_SQUARES
    return [(s, s, s) for s in sizes]


def _shape(value):
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != 3:
        raise TypeError(f"each shape must be (m, n, k), got {value!r}")
    return tuple(_validate.count(f"shape {d}", v) for d, v in zip("mnk", value))


#: Seconds of back-to-back matmuls before the sustained timing, on a GPU: a power-capped
#: card (a 70 W T4, a 72 W L4) boosts for its first fraction of a second under load, then
#: settles at the clock its power limit holds; a 0.2 s timing after an idle gap catches the
#: boost.
GPU_SUSTAIN_S = 1.0


def sustain(fn, seconds, device, call_s):
    """Run `fn` back to back for about `seconds` (a call takes about `call_s`), waiting for
    `device` every ~50 ms so the queue stays short: brings a GPU to the clock its power and
    temperature hold under this work."""
    clock = _clock(device)
    per_wait = max(1, min(MAX_CALLS_PER_BLOCK, int(0.05 / max(call_s, 1e-9))))
    end = clock() + seconds
    while clock() < end:
        for _ in range(per_wait):
            fn()


def matmul_tflops(shapes=None, dtype=None, device=None, *, flush_cache=True,
                  min_run_s=None, progress=True, accelerator=None, sustain_s=None):
    """Time [m, k] @ [k, n] for each (m, n, k) and return one row per shape: seconds,
    achieved TFLOP/s, arithmetic intensity, and the fraction of the dense datasheet peak
    (of `accelerator`, default the device's catalogue entry). Operands rotate through a
    pool larger than the cache (for shapes whose operands are smaller than it) so that
    small shapes are not timed from cache; each operand set is sliced once, before the
    timing, so a call is one dispatch (torch.mm) and small shapes are not host-bound.
    dtype "tf32" turns TF32 on for the sweep and "fp32" turns it off
    (`device.fp32_matmul_mode`), so the peak divided by matches the kernel; bf16 and tf32
    are refused on a GPU older than Ampere (`device.check_capability`).

    The first timing is a burst (`seconds`, `achieved_tflops`): `time_fn`'s 0.2 s, the
    clock as it was. Then, with `sustain_s` > 0 (default `GPU_SUSTAIN_S` on a GPU, 0 on a
    CPU), the shape runs back to back for `sustain_s` seconds (`sustain`) and is timed again:
    `sustained_seconds`, `sustained_tflops`, `sustained_fraction_of_peak` (NaN when not
    measured), the figure a power-capped card holds. On an NVIDIA GPU with NVML each
    timing's clock is sampled while it runs (`sample_clocks`): `sm_clock_mhz` and
    `sustained_sm_clock_mhz`, and `fraction_of_peak_at_clock`, the burst against the peak
    scaled to the clock *that shape* ran at (`clock_scaled_peak`; NaN without NVML)."""

    device, dtype, tdtype, bpe, acc, cache = _dev.target(device, dtype, accelerator)
    sustain_s = default_sustain_s(device, sustain_s)
    peak = _peak(acc, dtype)
    shapes = (default_matmul_shapes(device) if shapes is None
              else [_shape(s) for s in _sizes("shapes", shapes)])
    _TIME_FN_ARGS["min_run_s"]("min_run_s", min_run_s)  # refused before any work
    if not isinstance(flush_cache, bool):
        raise TypeError(f"flush_cache must be True or False, got {flush_cache!r}")

    def sets_for(m, n, k):
        nbytes = _roofline.matmul_bytes(m, n, k, dtype)
        return _pool_slices(int(nbytes / bpe), cache, bpe, flush_cache, MAX_MATMUL_SETS)

    for m, n, k in shapes:
        _dev.refuse_beyond_memory(sets_for(m, n, k) * _roofline.matmul_bytes(m, n, k, dtype),
                              device, f"a ({m}, {n}, {k}) matmul pool")

    def measure(shape):
        m, n, k = shape
        flops = _roofline.matmul_flops(m, n, k)
        nbytes = _roofline.matmul_bytes(m, n, k, dtype)
        sets = sets_for(m, n, k)
        a = _dev.random_tensor((sets, m, k), tdtype, device)  # [sets, m, k]
        b = _dev.random_tensor((sets, k, n), tdtype, device, scale=k**-0.5)  # [sets, k, n]
        c = torch.empty(sets, m, n, device=device, dtype=tdtype)  # [sets, m, n]
        views = [(a[i], b[i], c[i]) for i in range(sets)]  # sliced once, not once a call
        state = {"i": 0}

        def mm():
            state["i"] = (state["i"] + 1) % sets
            x, w, out = views[state["i"]]
            return torch.mm(x, w, out=out)

        with sample_clocks(device) as burst_clk:   # the clock this shape ran at (GPU)
            t = time_fn(mm, min_run_s=min_run_s, device=device)
        held, held_clk = math.nan, {}
        if sustain_s > 0:
            sustain(mm, sustain_s, device, t.median_s)
            with sample_clocks(device) as clk:
                held = time_fn(mm, warmup=0, min_run_s=min_run_s, device=device).median_s
            held_clk = clk.summary()
        a = b = c = views = None  # free this shape's operands before the next shape's
        burst_clk = burst_clk.summary()
        achieved = flops / t.median_s
        roof = _roof_flops(flops, nbytes, acc, dtype)
        return {"device": acc.name, "dtype": dtype, "m": m, "n": n, "k": k,
                "flops": flops, "bytes": nbytes, "intensity": flops / nbytes,
                "fits_in_cache": sets * nbytes <= cache, "seconds": t.median_s,
                "iqr_s": t.iqr_s, "achieved_tflops": achieved / 1e12,
                "achieved_gb_per_s": nbytes / t.median_s / 1e9,
                "fraction_of_peak": fraction(achieved, peak),
                "sm_clock_mhz": burst_clk["sm_clock_mhz"],
                "fraction_of_peak_at_clock": fraction(
                    achieved, clock_scaled_peak(peak, burst_clk, acc)),
                "sustained_seconds": held, "sustained_tflops": flops / held / 1e12,
                "sustained_fraction_of_peak": fraction(flops / held, peak),
                "sustained_sm_clock_mhz": held_clk.get("sm_clock_mhz", math.nan),
                "roofline_tflops": roof / 1e12,
                "fraction_of_roofline": fraction(achieved, roof)}

    estimate = matmul_estimate_s(shapes, dtype, acc,
                                 min_run_s=default_min_run_s(device, min_run_s),
                                 sustain_s=sustain_s)
    with _dev.fp32_matmul_mode(dtype):
        return sweep(shapes, measure, "matmuls", progress,
                      estimate if math.isfinite(estimate) else None)


def matmul_estimate_s(shapes, dtype, accelerator, *, min_run_s, sustain_s=None) -> float:
    """Seconds of timing a `matmul_tflops` sweep of `shapes` takes on `accelerator`, each
    shape at its roofline time (NaN if a peak is unknown), with its sustained run and
    second timing (`sustain_s`, default `GPU_SUSTAIN_S` for a GPU). Set-up not included."""
    acc = _hardware.get(accelerator)
    if sustain_s is None:
        sustain_s = 0.0 if acc.kind == "cpu" else GPU_SUSTAIN_S
    total = 0.0
    for s in shapes:
        call_s = _roofline.op_time_s(_roofline.matmul_flops(*s),
                                     _roofline.matmul_bytes(*s, dtype), _peak(acc, dtype),
                                     _roofline.bandwidth_or_nan(acc))
        total += timing_estimate_s(call_s, min_run_s)
        if sustain_s > 0:
            total += sustain_s + timing_estimate_s(call_s, min_run_s, warmup=0)
    return total


def default_sustain_s(device, sustain_s):
    """`sustain_s` checked (seconds >= 0), or `GPU_SUSTAIN_S` on a GPU and 0 on a CPU when
    it is None."""
    if sustain_s is None:
        return GPU_SUSTAIN_S if _dev.kind(device) == "cuda" else 0.0
    return _validate.number("sustain_s", sustain_s, lo=0, hi=MAX_RUN_TIME_S)


def call_or_nan(fn, *args, **kwargs) -> float:
    """`fn(...)` as a float, or nan where the device lacks the figure it needs (a GPU the
    catalogue does not know: no peak, no bandwidth)."""
    try:
        value = float(fn(*args, **kwargs))
    except (ValueError, KeyError, ZeroDivisionError):
        return math.nan
    return value if math.isfinite(value) else math.nan
