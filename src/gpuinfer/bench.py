"""Measurement: the one timer every lab uses, and the measurements built on it.

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
  `lab_accelerator`, measured here and labelled as measured.
- Defaults are small on a CPU (fp32: torch's CPU fp16 matmul is ~30x slower) and large
  on a GPU (fp16, which every CUDA GPU runs on tensor cores, the T4 included).
- `environment()` says which machine produced a number: device, torch, and on an NVIDIA
  GPU its clocks, power limit, temperature and throttle reasons (NVML).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import gc
import inspect
import math
import os
import sys
import time
import warnings
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from . import dtypes as _dtypes
from . import hardware as _hardware
from . import roofline as _roofline
from . import validate as _validate

MiB = 2**20
#: Each flushed read is of a slice of a pool at least this many times the cache.
CACHE_FLUSH_FACTOR = 4
#: Fewest timing blocks per measurement: enough for a median and an interquartile range
#: that is a spread, also for a step so long that `min_run_time` holds only one or two.
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
#: When the cache size cannot be read: 64 MiB, more than any GPU's L2 but the H200's 60 MB
#: and B200's, and more than most CPUs' L3: a safe over-estimate for a flush.
FALLBACK_CACHE_BYTES = 64 * MiB


@dataclass(frozen=True)
class Timing:
    """Median seconds per call, the interquartile range, and how many blocks were timed."""

    median_s: float
    iqr_s: float
    blocks: int
    calls_per_block: int


# --- devices ---------------------------------------------------------------------------

def default_device():
    """torch.device('cuda') when a GPU is present, else the CPU."""
    import torch

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _parse(device, name="device"):
    """`device` as a torch.device of type 'cpu' or 'cuda' (present or not)."""
    import torch

    if device is None:
        return default_device()
    if isinstance(device, str):
        try:
            resolved = torch.device(device)
        except RuntimeError:  # torch's "Invalid device string"
            raise ValueError(f"{name} must be a device such as 'cpu', 'cuda' or 'cuda:1', "
                             f"got {device!r}") from None
    elif isinstance(device, torch.device):
        resolved = device
    else:
        raise TypeError(f"{name} must be a device name ('cpu', 'cuda', 'cuda:1') or a "
                        f"torch.device, got {device!r}")
    if resolved.type not in ("cpu", "cuda"):
        raise ValueError(f"{name}={device!r}: the course measures on 'cpu' or 'cuda' devices")
    return resolved


def _device(device, name="device"):
    """`device` as a torch.device, checked: 'cpu', 'cuda' or 'cuda:N' for a GPU torch sees."""
    import torch

    resolved = _parse(device, name)
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{name}={device!r}, but torch sees no CUDA GPU "
                             f"(torch.cuda.is_available() is False): use 'cpu'")
        count = torch.cuda.device_count()
        if resolved.index is not None and resolved.index >= count:
            raise ValueError(f"{name}={device!r}, but torch sees {count} GPU(s): "
                             f"indices 0 to {count - 1}")
    return resolved


def _kind(device, name="device") -> str:
    """'cuda' or 'cpu' for planning: like `_device`, but a GPU need not be present (a
    plan for an H200 can be made, and its run time estimated, on a laptop)."""
    return _parse(device, name).type


def _index(device) -> int:
    """The GPU index of a CUDA device ('cuda' alone means the current one)."""
    import torch

    return device.index if device.index is not None else torch.cuda.current_device()


def default_dtype(device=None) -> str:
    """fp16 on a GPU (never bf16: a T4 emulates it), fp32 on a CPU."""
    return "fp16" if _kind(device) == "cuda" else "fp32"


def _detect(index):
    """`hardware.detect()` for GPU `index`. (The hardware module is gaining a device
    argument; until it has one, its detect() reads GPU 0 and we say so.)"""
    if inspect.signature(_hardware.detect).parameters:
        return _hardware.detect(index)
    if index != 0:
        warnings.warn(f"hardware.detect() of this version reads GPU 0, not GPU {index}: "
                      "the catalogue entry may be another GPU's", stacklevel=3)
    return _hardware.detect()


def accelerator_for(device=None) -> _hardware.Accelerator:
    """The catalogue entry for `device`: the detected GPU (the one asked for), or the
    reference CPU. A GPU missing from the catalogue has NaN or missing figures; see
    `lab_accelerator` for one whose gaps are measured."""
    device = _device(device)
    return _detect(_index(device)) if device.type == "cuda" else _hardware.cpu()


def cache_bytes(device=None) -> float:
    """Last-level cache of `device` in bytes (L2 on a GPU as torch reports it; the CPU's
    L3), or `FALLBACK_CACHE_BYTES` when it cannot be read."""
    return accelerator_for(device).cache_bytes or FALLBACK_CACHE_BYTES


def memory_bytes(device=None) -> float:
    """Bytes of memory `device` has: what torch reports for a GPU (a MIG slice's own),
    the machine's RAM for a CPU. Sizes beyond it are refused before any allocation."""
    import torch

    device = _device(device)
    if device.type == "cuda":
        return float(torch.cuda.get_device_properties(_index(device)).total_memory)
    try:
        return float(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return _hardware.cpu().memory_bytes


def _refuse_beyond_memory(nbytes, device, what):
    have = memory_bytes(device)
    if nbytes > have:
        raise ValueError(f"{what} needs {nbytes / 1e9:,.3g} GB, more than the "
                         f"{have / 1e9:,.3g} GB this {device.type} has: choose smaller sizes")


class _Target(NamedTuple):
    """What every measurement resolves first: where it runs and in which format."""
    device: object          # torch.device
    dtype: str              # canonical name, e.g. "fp16"
    tdtype: object          # torch.dtype
    bytes_per_element: float
    accelerator: _hardware.Accelerator
    cache: float            # bytes


def _target(device, dtype, accelerator=None) -> _Target:
    device = _device(device)
    dtype = _dtypes.canonical(dtype or default_dtype(device))
    acc = accelerator_for(device) if accelerator is None else _hardware.get(accelerator)
    return _Target(device, dtype, _dtypes.torch_dtype(dtype), _dtypes.bytes_per_element(dtype),
                   acc, acc.cache_bytes or FALLBACK_CACHE_BYTES)


def _random(shape, tdtype, device, scale=1.0, generator=None):
    """Random values made in `tdtype` itself (no fp32 copy at 2-3x the memory)."""
    import torch

    if tdtype.is_floating_point:
        t = torch.randn(shape, dtype=tdtype, device=device, generator=generator)
        return t.mul_(scale) if scale != 1.0 else t
    info = torch.iinfo(tdtype)
    return torch.randint(info.min, info.max + 1, shape, dtype=tdtype, device=device,
                         generator=generator)


# --- the clock and the timer ---------------------------------------------------------------

def synchronize(device=None):
    """Wait until `device` has finished the work queued so far (no-op on a CPU)."""
    import torch

    device = _device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


_synchronize = synchronize  # for functions whose argument of that name shadows it


def _clock(device):
    """Seconds now, after `device` finished its queued work: a plain perf_counter on a CPU
    (nothing to wait for, and no CUDA context is touched)."""
    if device.type != "cuda":
        return time.perf_counter
    import torch

    def clock():
        torch.cuda.synchronize(device)
        return time.perf_counter()

    return clock


def _block_plan(call_s, min_run_time, min_blocks):
    """(calls per block, blocks) for a function of `call_s` seconds a call: blocks of
    about min_run_time / min_blocks seconds (at least one call), and as many as make
    min_run_time, at least `min_blocks`. The one rule `time_fn` and its estimate share."""
    target = min_run_time / min_blocks
    number = max(1, min(MAX_CALLS_PER_BLOCK, math.ceil(target / max(call_s, 1e-9))))
    blocks = max(min_blocks, math.ceil(min_run_time / (number * max(call_s, 1e-9))))
    return number, min(blocks, MAX_BLOCKS)


def _threads(name, value):
    """A CPU thread count; None means torch's current one."""
    import torch

    return _validate.count(name, torch.get_num_threads() if value is None else value,
                           maximum=4096)


#: `time_fn`'s argument checks (`validate.checked`), kept out of the body a chapter prints.
_TIME_FN_ARGS = dict(
    fn=_validate.callable_,
    warmup=_validate.rule(_validate.count, minimum=0, maximum=MAX_WARMUP,
                          why_maximum="more warm-up calls than any measurement needs"),
    min_run_time=_validate.optional(_validate.rule(
        _validate.number, lo=0, lo_open=True, hi=MAX_RUN_TIME_S,
        expected=f"seconds > 0 and <= {MAX_RUN_TIME_S:g}")),
    device=lambda name, value: _device(value, name),
    num_threads=_threads,
    min_blocks=_validate.rule(_validate.count, maximum=MAX_BLOCKS))


@_validate.checked(**_TIME_FN_ARGS)
def time_fn(fn, *, warmup=3, min_run_time=None, device=None, num_threads=None,
            min_blocks=MIN_BLOCKS) -> Timing:
    """Time `fn()` with `torch.utils.benchmark.Timer`: `warmup` untimed calls, one timed
    call that sizes the blocks, then blocks of the same number of calls, each about
    `min_run_time / min_blocks` seconds (at least one call), until `min_run_time` seconds
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
    timeit does."""
    import torch.utils.benchmark as tbench

    if min_run_time is None:
        min_run_time = GPU_MIN_RUN_TIME_S if device.type == "cuda" else CPU_MIN_RUN_TIME_S
    timer = tbench.Timer(stmt="fn()", globals={"fn": fn}, num_threads=num_threads,
                         timer=_clock(device))
    for _ in range(warmup):
        fn()
    with _torch_threads(num_threads):
        call_s = _timed_block(timer, 1)  # the sizing call
        number, blocks = _block_plan(call_s, min_run_time, min_blocks)
        first = _timed_block(timer, number)
        if first < 0.5 * number * call_s and number < MAX_CALLS_PER_BLOCK:
            number, blocks = _block_plan(first / number, min_run_time, min_blocks)
            first = None  # resized: that block was a second sizing
        per_call = [] if first is None else [first / number]
        while len(per_call) < blocks:
            per_call.append(_timed_block(timer, number) / number)
    q1, median, q3 = np.percentile(per_call, [25, 50, 75])
    return Timing(median_s=float(median), iqr_s=float(q3 - q1), blocks=len(per_call),
                  calls_per_block=int(number))


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
    import torch

    before = torch.get_num_threads()
    if n != before:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def time_calls(fn, n=10, *, device=None, synchronize=True):
    """Chapter *How to benchmark your own traffic*: seconds of each of `n` single calls of
    `fn()`, in order and with no warm-up (a numpy array), to *see* what `time_fn` hides:
    the first call's set-up cost, the spread, the outliers. Report `time_fn`'s median.

    `synchronize=False` reads the clock without waiting for the accelerator: the classic
    mistake, kept only to show it (on a GPU it times the kernel launches, not the work).
    """
    _validate.callable_("fn", fn)
    device = _device(device)
    n = _validate.count("n", n, maximum=10_000_000)
    if not isinstance(synchronize, bool):
        raise TypeError(f"synchronize must be True or False, got {synchronize!r}")
    clock = _clock(device) if synchronize else time.perf_counter
    _synchronize(device)  # start from an idle accelerator
    seconds = np.empty(n)
    for i in range(n):
        start = clock()
        fn()
        seconds[i] = clock() - start
    _synchronize(device)  # leave it idle too, whatever `synchronize` said
    return seconds


# --- which machine: environment, clocks, power --------------------------------------------

#: NVML's clock-event ("throttle") reason bits, nvml.h
#: (https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html).
THROTTLE_REASONS = {
    0x1: "idle", 0x2: "applications clocks setting", 0x4: "software power cap",
    0x8: "hardware slowdown", 0x10: "sync boost", 0x20: "software thermal slowdown",
    0x40: "hardware thermal slowdown", 0x80: "hardware power brake", 0x100: "display clock",
}
CLOCK_FIELDS = ("sm_clock_mhz", "sm_clock_max_mhz", "memory_clock_mhz", "power_limit_w",
                "power_draw_w", "temperature_c", "throttle_reasons", "nvml")


def throttle_reasons(mask) -> str:
    """NVML's clock-event bit mask in words ('none' for 0): 0x4 -> 'software power cap'."""
    mask = _validate.count("mask", mask, minimum=0)
    words = [w for bit, w in THROTTLE_REASONS.items() if mask & bit]
    rest = mask & ~sum(THROTTLE_REASONS)
    if rest:
        words.append(f"other (0x{rest:x})")
    return ", ".join(words) or "none"


def _nvml_handle(pynvml, device):
    """NVML's handle for CUDA device `device`: by PCI bus id (right under
    CUDA_VISIBLE_DEVICES), else by UUID, else by index."""
    import torch

    props = torch.cuda.get_device_properties(_index(device))
    bus = getattr(props, "pci_bus_id", None)
    if bus is not None:
        pci = (f"{getattr(props, 'pci_domain_id', 0):08X}:{bus:02X}:"
               f"{getattr(props, 'pci_device_id', 0):02X}.0")
        return pynvml.nvmlDeviceGetHandleByPciBusId(pci)
    uuid = str(getattr(props, "uuid", "") or "")
    if uuid:
        return pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith(("GPU-", "MIG-"))
                                                else f"GPU-{uuid}")
    return pynvml.nvmlDeviceGetHandleByIndex(_index(device))


def _nvml_unavailable(device):
    """Why NVML cannot be read for `device` (a string), or None when it can be tried."""
    import torch

    if device.type != "cuda":
        return "unavailable: a CPU"
    if torch.version.cuda is None:  # a ROCm build reports AMD GPUs as 'cuda'
        return "unavailable: not an NVIDIA GPU"
    return None


@contextlib.contextmanager
def _nvml_session(device):
    """(pynvml, handle) for `device` within the block, NVML shut down after it; raises
    RuntimeError('unavailable: ...') when NVML cannot be read."""
    why = _nvml_unavailable(device)
    if why:
        raise RuntimeError(why)
    try:
        import pynvml
    except ImportError:
        raise RuntimeError("unavailable: nvidia-ml-py is not installed "
                           "(pip install nvidia-ml-py)") from None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # pynvml.NVMLError and its many subclasses
        raise RuntimeError(f"unavailable: {exc}") from None
    try:
        try:
            handle = _nvml_handle(pynvml, device)
        except Exception as exc:
            raise RuntimeError(f"unavailable: {exc}") from None
        yield pynvml, handle
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _nvml_reads(pynvml, h) -> dict:
    """Field -> a function reading it from NVML handle `h` (the mask raw, not in words)."""
    reasons = (getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
               or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons)
    return {
        "sm_clock_mhz": lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
        "sm_clock_max_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
        "memory_clock_mhz": lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
        "power_limit_w": lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000,
        "power_draw_w": lambda: pynvml.nvmlDeviceGetPowerUsage(h) / 1000,
        "temperature_c": lambda: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
        "throttle_reasons": lambda: int(reasons(h)),
    }


def clocks(device=None) -> dict:
    """The GPU's state now, through NVML (nvidia-ml-py, imported only on an NVIDIA GPU):
    SM clock and its maximum, memory clock (MHz), enforced power limit and draw (W),
    temperature (deg C) and throttle reasons. Fields NVML cannot give are NaN, and
    `nvml` says why ('ok', or 'unavailable: ...'). A T4 at its 70 W limit shows
    'software power cap' and an SM clock far below its maximum. A reading after a
    sweep says what the GPU does *now* (idle, or boosting again): to know the clock a
    measurement ran at, sample during it (`sample_clocks`)."""
    device = _device(device)
    out = {k: math.nan for k in CLOCK_FIELDS}
    out["throttle_reasons"] = "unavailable"
    try:
        with _nvml_session(device) as (pynvml, h):
            missing = []
            for key, read in _nvml_reads(pynvml, h).items():
                try:
                    value = read()
                    out[key] = (throttle_reasons(value) if key == "throttle_reasons"
                                else float(value))
                except Exception:  # a field NVML does not support here (MIG, gVisor)
                    missing.append(key)
            out["nvml"] = "ok" if not missing else f"ok; not available: {', '.join(missing)}"
    except RuntimeError as exc:
        out["nvml"] = str(exc)
    return out


#: Seconds between two NVML samples while a measurement runs.
CLOCK_SAMPLE_INTERVAL_S = 0.05


class ClockSampler:
    """NVML samples of a GPU's SM clock, power, temperature and throttle reasons, taken
    by a background thread while a measurement runs (`sample_clocks`). `summary()`
    gives the median SM clock the work ran at, not the clock after it."""

    def __init__(self, device, interval_s=CLOCK_SAMPLE_INTERVAL_S):
        import threading

        self.device = _device(device)
        self.interval_s = _validate.number("interval_s", interval_s, lo=0, lo_open=True,
                                           hi=60, expected="seconds > 0 and <= 60")
        self.samples, self.status = [], _nvml_unavailable(self.device) or "not started"
        self._stop = threading.Event()
        self._thread = None
        self._static = {}

    def _run(self, ready):
        try:
            with _nvml_session(self.device) as (pynvml, h):
                reads = _nvml_reads(pynvml, h)
                for key in ("sm_clock_max_mhz", "power_limit_w"):
                    with contextlib.suppress(Exception):
                        self._static[key] = float(reads[key]())
                self.status = "ok"
                ready.set()
                while True:
                    sample = {}
                    for key in ("sm_clock_mhz", "power_draw_w", "temperature_c",
                                "throttle_reasons"):
                        with contextlib.suppress(Exception):
                            sample[key] = reads[key]()
                    if sample:
                        self.samples.append(sample)
                    if self._stop.wait(self.interval_s):
                        break
        except RuntimeError as exc:
            self.status = str(exc)
        finally:
            ready.set()

    def start(self):
        import threading

        if self.status.startswith("unavailable"):
            return self
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True,
                                        name="gpuinfer-clock-sampler")
        self._thread.start()
        ready.wait(5.0)  # NVML initialised (or failed) before the work starts
        return self

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
        return self

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False

    def summary(self) -> dict:
        """The samples in the fields of `clocks()`: `sm_clock_mhz` is the median SM clock,
        power the median draw, temperature the highest, `throttle_reasons` every reason
        seen, with the share of samples it was seen in; plus `samples` and `sm_clock_min_mhz`.
        NaN and 'unavailable: ...' without NVML."""
        out = {k: math.nan for k in CLOCK_FIELDS}
        out.update(self._static, samples=len(self.samples), sm_clock_min_mhz=math.nan,
                   throttle_reasons="unavailable", throttle_shares={})
        if not self.samples:
            out["nvml"] = self.status if self.status != "ok" else "ok; no samples taken"
            return out

        def values(key):
            return [float(s[key]) for s in self.samples if key in s]

        sm = values("sm_clock_mhz")
        if sm:
            out.update(sm_clock_mhz=float(np.median(sm)), sm_clock_min_mhz=min(sm))
        for key, pick in (("power_draw_w", np.median), ("temperature_c", np.max)):
            got = values(key)
            if got:
                out[key] = float(pick(got))
        masks = [int(s["throttle_reasons"]) for s in self.samples if "throttle_reasons" in s]
        if masks:
            shares = {}
            for bit, word in THROTTLE_REASONS.items():
                n = sum(1 for m in masks if m & bit)
                if n:
                    shares[word] = n / len(masks)
            out["throttle_shares"] = shares
            out["throttle_reasons"] = throttle_reasons(
                int(np.bitwise_or.reduce(np.array(masks, dtype=np.int64))))
        out["nvml"] = "ok"
        return out


def sample_clocks(device=None, interval_s=CLOCK_SAMPLE_INTERVAL_S) -> ClockSampler:
    """`with bench.sample_clocks(device) as clk: <measure>` samples NVML every
    `interval_s` seconds while the block runs; then `clk.summary()` (fields of
    `clocks()`, the SM clock as the median) and `describe_sampled(clk.summary())`. Lab:
    *fp16 matmuls on the roofline* (which clock did the sweep run at, and why). On a CPU,
    or without nvidia-ml-py or NVML, nothing is sampled and the summary says why."""
    return ClockSampler(device, interval_s)


def describe_sampled(summary) -> str:
    """One line from a `ClockSampler.summary()`: the median SM clock during the work, its
    range, and each throttle reason with the share of samples it held in."""
    if not str(summary.get("nvml", "")).startswith("ok") or not summary.get("samples"):
        return f"clocks during the measurement: {summary.get('nvml', 'unavailable')}"

    def num(key, unit):
        v = summary.get(key, math.nan)
        return f"{v:,.0f} {unit}" if isinstance(v, (int, float)) and v == v else "n/a"

    shares = summary.get("throttle_shares") or {}
    reasons = ", ".join(f"{w} ({share:.0%} of samples)" for w, share in shares.items()) \
        or "none"
    return (f"during the measurement ({summary['samples']} NVML samples): median SM clock "
            f"{num('sm_clock_mhz', 'MHz')} (lowest {num('sm_clock_min_mhz', 'MHz')}, max "
            f"{num('sm_clock_max_mhz', 'MHz')}), median power {num('power_draw_w', 'W')} of "
            f"a {num('power_limit_w', 'W')} limit, up to {num('temperature_c', 'C')}; "
            f"throttle reasons: {reasons}")


def describe_clocks(state) -> str:
    """One line for a lab to print beside its results, from `clocks()` or `environment()`."""
    if not str(state.get("nvml", "")).startswith("ok"):
        return f"clocks and power: {state.get('nvml', 'unavailable')}"

    def num(key, unit, digits=0):
        v = state.get(key, math.nan)
        return f"{v:,.{digits}f} {unit}" if isinstance(v, (int, float)) and v == v else "n/a"

    return (f"SM clock {num('sm_clock_mhz', 'MHz')} (max {num('sm_clock_max_mhz', 'MHz')}), "
            f"memory clock {num('memory_clock_mhz', 'MHz')}, power "
            f"{num('power_draw_w', 'W')} of a {num('power_limit_w', 'W')} limit, "
            f"{num('temperature_c', 'C')}; throttle reasons: {state['throttle_reasons']}")


def clock_scaled_peak(peak_flops, state) -> float:
    """A datasheet peak (FLOP/s, quoted at the maximum SM clock) scaled to the SM clock a
    `clocks()` reading saw: what the same tensor cores can do at the clock the GPU held
    (a T4 at its 70 W cap runs well below its 1,590 MHz boost). NaN if not read."""
    peak_flops = _validate.positive_or_nan("peak_flops", peak_flops, array=False)
    if not isinstance(state, dict):
        raise TypeError(f"state must be the dict clocks() returns, got {state!r:.80}")
    sm, top = state.get("sm_clock_mhz", math.nan), state.get("sm_clock_max_mhz", math.nan)
    if not (_finite_positive(peak_flops) and _finite_positive(sm) and _finite_positive(top)):
        return math.nan
    return peak_flops * sm / top


def environment(device=None) -> dict:
    """Which machine produced a measurement: device, its catalogue entry, torch, date,
    the CPU threads torch uses (what a CPU measurement depends on), and on an NVIDIA GPU
    the clocks, power limit, temperature and throttle reasons at this moment (`clocks`)."""
    import platform

    import torch

    device = _device(device)
    acc = accelerator_for(device)
    name = torch.cuda.get_device_name(_index(device)) if device.type == "cuda" else (
        platform.processor() or platform.machine() or "cpu")
    return {"device": name, "catalogue_entry": acc.name, "device_type": device.type,
            "torch": torch.__version__, "cuda": torch.version.cuda or "",
            "date": datetime.date.today().isoformat(),
            "cpu_threads": torch.get_num_threads(), **clocks(device)}


# --- the sweep machinery ------------------------------------------------------------------

# What an allocation failure says of itself: torch's OutOfMemoryError (CUDA; since torch
# 2.5 torch.OutOfMemoryError, of which torch.cuda.OutOfMemoryError is an alias), Python's
# MemoryError, or the CPU allocator's RuntimeError ("can't allocate memory").
_ALLOCATION_TEXT = ("out of memory", "can't allocate memory", "cudaerrormemoryallocation")
# A CUDA-graph capture that failed. Torch (before pytorch/pytorch#187795) can report an
# out-of-memory during capture this way, but so does any operation illegal in a capture
# (a host copy, a synchronisation): it counts as out of memory only when the GPU's memory
# is nearly full (`MEMORY_NEAR_FULL_SHARE`), else it is a bug and is raised.
_CAPTURE_TEXT = ("operation not permitted when stream is capturing", "capture invalidated",
                 "operation failed due to a previous error during capture",
                 "cudaerrorstreamcaptureinvalidated", "cudaerrorstreamcaptureunsupported")
#: A GPU with less than this share of its memory free counts as full.
MEMORY_NEAR_FULL_SHARE = 0.1


def _chain(exc):
    """`exc` and the exceptions it was raised from or during (__cause__, __context__)."""
    seen = []
    while exc is not None and all(exc is not e for e in seen):
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


def _memory_nearly_full() -> bool:
    """Whether the current GPU has less than `MEMORY_NEAR_FULL_SHARE` of its memory free
    (False without a GPU, or when the driver cannot say)."""
    import torch

    try:
        if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
            return False
        free, total = torch.cuda.mem_get_info()
    except Exception:  # no driver, a mocked or broken CUDA
        return False
    return total > 0 and free < MEMORY_NEAR_FULL_SHARE * total


def _is_oom(exc) -> bool:
    """Whether `exc` says the device (or the host) ran out of memory: an OutOfMemoryError
    or MemoryError anywhere in its chain, an allocator's RuntimeError saying so, or a
    failed CUDA-graph capture while the GPU's memory is nearly full. Any other failure,
    a capture error with memory to spare included, is a bug, not a size to step down."""
    import torch

    oom_types = tuple({getattr(torch, "OutOfMemoryError", MemoryError),
                       torch.cuda.OutOfMemoryError, MemoryError})
    chain = _chain(exc)
    if any(isinstance(e, oom_types) for e in chain):
        return True
    texts = [str(e).lower() for e in chain if isinstance(e, RuntimeError)]
    if any(t in text for text in texts for t in _ALLOCATION_TEXT):
        return True
    return any(t in text for text in texts for t in _CAPTURE_TEXT) and _memory_nearly_full()


def free_memory():
    """Return cached GPU memory to the driver, after Python has let go of what it can.
    Call it after an `except` block, not inside one: the traceback still holds the
    failed call's tensors there."""
    import torch

    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def first_that_fits(candidates, build, *, describe=str):
    """`(build(c), c)` for the first of `candidates` (largest first) that fits in memory:
    on out of memory, the memory is freed and the next candidate tried, with a line
    saying so. The labs' "a smaller stack if the GPU is short of memory"."""
    _validate.callable_("build", build)
    tried = []
    for c in candidates:
        failed = None
        try:
            return build(c), c
        except (RuntimeError, MemoryError) as exc:
            if not _is_oom(exc):
                raise
            failed = f"{type(exc).__name__}"
        # Outside the except block: the traceback and the tensors it held are gone.
        free_memory()
        tried.append(describe(c))
        print(f"out of memory ({failed}) at {describe(c)}; trying the next size down")
    raise MemoryError(f"none of the sizes fits in memory: {', '.join(tried) or 'none given'}")


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


def _sweep(items, measure, desc, progress=True, estimate_s=None):
    """Run `measure(item)` over `items`. Out of memory (device or host; a failed capture
    with the GPU's memory nearly full) stops the sweep with a warning that says so, frees what the failed call
    held, and keeps what was measured."""
    import pandas as pd

    items = list(items)
    _say_estimate(desc, len(items), estimate_s, progress)
    rows, stopped_at = [], None
    for item in _progress(items, desc, progress):
        try:
            rows.append(measure(item))
        except (RuntimeError, MemoryError) as exc:
            if not _is_oom(exc):
                raise
            stopped_at = item
        if stopped_at is not None:
            break
    if stopped_at is not None:  # the exception and its frames are released by now
        free_memory()
        warnings.warn(f"{desc}: out of memory at {stopped_at}; stopping this sweep and "
                      f"keeping the {len(rows)} sizes measured so far.", stacklevel=3)
    return pd.DataFrame(rows)


def timing_estimate_s(call_s, min_run_time, *, warmup=3, min_blocks=MIN_BLOCKS) -> float:
    """Seconds `time_fn` spends on a function that takes `call_s` a call, by its own rule
    (`_block_plan`): `warmup` calls, the sizing call, then the blocks, which last
    max(min_run_time, min_blocks calls). Set-up (allocation, capture) not included.
    A NaN `call_s` (no roofline time for a device without catalogue peaks) gives NaN."""
    if _validate.is_number(call_s) and math.isnan(call_s):
        return math.nan
    call_s = _validate.non_negative("call_s", call_s)
    min_run_time = _validate.positive("min_run_time", min_run_time)
    warmup = _validate.count("warmup", warmup, minimum=0, maximum=MAX_WARMUP)
    min_blocks = _validate.count("min_blocks", min_blocks, maximum=MAX_BLOCKS)
    number, blocks = _block_plan(call_s, min_run_time, min_blocks)
    return (warmup + 1) * call_s + blocks * number * call_s


def _fraction(value, peak):
    return value / peak if peak and peak > 0 and math.isfinite(peak) else math.nan


def _finite_positive(x) -> bool:
    return x is not None and math.isfinite(x) and x > 0


def _peak(acc, dtype):
    """The dense peak FLOP/s, or NaN for a device the catalogue has none for."""
    return _roofline.peak_or_nan(acc, dtype)


def _roof_flops(flops, nbytes, acc, dtype):
    """FLOP/s the roofline allows an operation of `flops` on `nbytes` (NaN if the device's
    peak or bandwidth is unknown): flops over `roofline.op_seconds`."""
    seconds = _roofline.op_seconds(flops, nbytes, _peak(acc, dtype),
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


def _graphed(fn, device=None):
    """Capture `fn` in a CUDA graph (after warm-up on a side stream) and return its replay.

    Cached memory is returned to the driver first: an allocation that fails during
    capture then raises a plain out-of-memory error instead of invalidating the capture
    (pytorch/pytorch#159594); `_is_oom` counts an invalidated capture as out of memory
    only when the memory is nearly full."""
    import torch

    with torch.cuda.device(device):
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        free_memory()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
    return graph.replay


# --- weight reads -------------------------------------------------------------------------

#: Largest read of the default sweep on a GPU: 2 GiB, or an eighth of its memory. On a
#: CPU: 256 MiB, or twice a larger last-level cache (some server CPUs' L3 holds hundreds of
#: MiB), within an eighth of the memory.
GPU_TOP_READ_BYTES = 2 * 1024 * MiB
CPU_TOP_READ_BYTES = 256 * MiB
SMALLEST_READ_BYTES = 64 * 1024


def default_read_sizes(device=None) -> list[int]:
    """Buffer sizes in bytes: from 1/16 of the cache to beyond it (GPU: up to 2 GiB or
    an eighth of memory; CPU: up to 256 MiB or twice the cache, within an eighth of
    memory)."""
    device = _device(device)
    return read_sizes_for(cache_bytes(device), memory_bytes(device), device.type)


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


def read_estimate_s(sizes_bytes, dtype, accelerator, *, min_run_time, cache=None) -> float:
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
                                   min_run_time)
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
                          min_run_time=None, progress=True, accelerator=None):
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
    import torch

    device, dtype, tdtype, bpe, acc, cache = _target(device, dtype, accelerator)
    sizes = default_read_sizes(device) if sizes_bytes is None else _sizes("sizes_bytes",
                                                                         sizes_bytes)
    sizes = [_validate.positive("sizes_bytes", s) for s in sizes]
    _TIME_FN_ARGS["min_run_time"]("min_run_time", min_run_time)  # refused before any work
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
        _refuse_beyond_memory(slices * elems * bpe, device, f"a {s:,.0f}-byte read pool")
    # One buffer of random numbers serves every size's pool (a view of its start): filling
    # a 512 MiB pool again for each size took longer on a CPU than timing the reads.
    flat = {}

    def measure(size):
        elems, reads, slices = plan(size)
        if flat.get("n", 0) < slices * elems:
            flat.clear()  # free the smaller buffer before making the larger one
            total = max(plan(s)[2] * plan(s)[0] for s in sizes)
            flat.update(n=total, buffer=_random((total,), tdtype, device))
        pool = flat["buffer"][:slices * elems].view(slices, elems)  # [slices, elems]
        out = torch.empty(reads, dtype=tdtype, device=device)  # one sum per read
        state = {"i": 0}

        def read_pass():  # every slice of the pool once (or one buffer `reads` times)
            for j in range(reads):
                torch.sum(pool[j % slices], dim=0, out=out[j])

        def read_next():  # the next slice (CPU)
            state["i"] = (state["i"] + 1) % slices
            torch.sum(pool[state["i"]], dim=0, out=out[0])

        fn = _graphed(read_pass, device) if on_gpu else read_next
        t = time_fn(fn, min_run_time=min_run_time, device=device)
        nbytes = elems * bpe
        del pool, out, fn
        seconds = t.median_s / reads
        achieved = nbytes / seconds
        return {"device": acc.name, "dtype": dtype, "bytes": nbytes, "slices": slices,
                "reads_per_call": reads, "cuda_graph": on_gpu, "flush_cache": flush_cache,
                "fits_in_cache": slices * nbytes <= cache, "seconds": seconds,
                "iqr_s": t.iqr_s / reads, "achieved_gb_per_s": achieved / 1e9,
                "datasheet_gb_per_s": acc.bandwidth / 1e9,
                "fraction_of_peak": _fraction(achieved, acc.bandwidth)}

    estimate = read_estimate_s(sizes, dtype, acc, cache=cache,
                               min_run_time=_default_min_run_time(device, min_run_time))
    try:
        return _sweep(sizes, measure, "weight reads", progress,
                      estimate if math.isfinite(estimate) else None)
    finally:
        flat.clear()


def _default_min_run_time(device, min_run_time):
    if min_run_time is not None:
        return min_run_time
    return GPU_MIN_RUN_TIME_S if _kind(device) == "cuda" else CPU_MIN_RUN_TIME_S


# --- matmuls ----------------------------------------------------------------------------

@contextlib.contextmanager
def fp32_matmul_mode(dtype):
    """Within the block, fp32 matmuls run as `dtype` says: "tf32" on tensor cores (19-bit
    operands), "fp32" in full precision; other dtypes leave the setting alone. The
    setting in force before is restored after. (PyTorch's default is full fp32; a
    notebook that called `torch.set_float32_matmul_precision("high")` turned TF32 on.)"""
    import torch

    name = _dtypes.canonical(dtype)
    if name not in ("tf32", "fp32"):
        yield
        return
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):  # torch >= 2.9: mixing it with allow_tf32 raises
        before = matmul.fp32_precision
        matmul.fp32_precision = "tf32" if name == "tf32" else "ieee"
        try:
            yield
        finally:
            matmul.fp32_precision = before
    else:
        before = matmul.allow_tf32
        matmul.allow_tf32 = name == "tf32"
        try:
            yield
        finally:
            matmul.allow_tf32 = before


#: Squares of the default matmul sweep: GPU sides up to 8192 (fp16: 128 MiB an operand),
#: CPU sides up to 1024 (fp32: a second or so each on two cores).
GPU_SQUARES = (1024, 2048, 4096, 8192)
CPU_SQUARES = (256, 512, 1024)


def default_matmul_shapes(device=None) -> list[tuple[int, int, int]]:
    """(m, n, k) squares: 256..1024 on a CPU, 1024..8192 on a GPU."""
    sizes = GPU_SQUARES if _kind(device) == "cuda" else CPU_SQUARES
    return [(s, s, s) for s in sizes]


def _shape(value):
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != 3:
        raise TypeError(f"each shape must be (m, n, k), got {value!r}")
    return tuple(_validate.count(f"shape {d}", v) for d, v in zip("mnk", value))


def matmul_tflops(shapes=None, dtype=None, device=None, *, flush_cache=True,
                  min_run_time=None, progress=True, accelerator=None):
    """Time [m, k] @ [k, n] for each (m, n, k) and return one row per shape: seconds,
    achieved TFLOP/s, arithmetic intensity, and the fraction of the dense datasheet peak
    (of `accelerator`, default the device's catalogue entry). Operands rotate through a
    pool larger than the cache (for shapes whose operands are smaller than it) so that
    small shapes are not timed from cache. dtype "tf32" turns TF32 on for the sweep and
    "fp32" turns it off (`fp32_matmul_mode`), so the peak divided by matches the kernel."""
    import torch

    device, dtype, tdtype, bpe, acc, cache = _target(device, dtype, accelerator)
    peak = _peak(acc, dtype)
    shapes = (default_matmul_shapes(device) if shapes is None
              else [_shape(s) for s in _sizes("shapes", shapes)])
    _TIME_FN_ARGS["min_run_time"]("min_run_time", min_run_time)  # refused before any work
    if not isinstance(flush_cache, bool):
        raise TypeError(f"flush_cache must be True or False, got {flush_cache!r}")

    def sets_for(m, n, k):
        nbytes = _roofline.matmul_bytes(m, n, k, dtype)
        return _pool_slices(int(nbytes / bpe), cache, bpe, flush_cache, MAX_MATMUL_SETS)

    for m, n, k in shapes:
        _refuse_beyond_memory(sets_for(m, n, k) * _roofline.matmul_bytes(m, n, k, dtype),
                              device, f"a ({m}, {n}, {k}) matmul pool")

    def measure(shape):
        m, n, k = shape
        flops = _roofline.matmul_flops(m, n, k)
        nbytes = _roofline.matmul_bytes(m, n, k, dtype)
        sets = sets_for(m, n, k)
        a = _random((sets, m, k), tdtype, device)  # [sets, m, k]
        b = _random((sets, k, n), tdtype, device, scale=k**-0.5)  # [sets, k, n]
        c = torch.empty(sets, m, n, device=device, dtype=tdtype)  # [sets, m, n]
        state = {"i": 0}

        def mm():
            i = state["i"] = (state["i"] + 1) % sets
            return torch.mm(a[i], b[i], out=c[i])

        t = time_fn(mm, min_run_time=min_run_time, device=device)
        del a, b, c
        achieved = flops / t.median_s
        roof = _roof_flops(flops, nbytes, acc, dtype)
        return {"device": acc.name, "dtype": dtype, "m": m, "n": n, "k": k,
                "flops": flops, "bytes": nbytes, "intensity": flops / nbytes,
                "fits_in_cache": sets * nbytes <= cache, "seconds": t.median_s,
                "iqr_s": t.iqr_s, "achieved_tflops": achieved / 1e12,
                "achieved_gb_per_s": nbytes / t.median_s / 1e9,
                "fraction_of_peak": _fraction(achieved, peak),
                "roofline_tflops": roof / 1e12,
                "fraction_of_roofline": _fraction(achieved, roof)}

    estimate = matmul_estimate_s(shapes, dtype, acc,
                                 min_run_time=_default_min_run_time(device, min_run_time))
    with fp32_matmul_mode(dtype):
        return _sweep(shapes, measure, "matmuls", progress,
                      estimate if math.isfinite(estimate) else None)


def matmul_estimate_s(shapes, dtype, accelerator, *, min_run_time) -> float:
    """Seconds of timing a `matmul_tflops` sweep of `shapes` takes on `accelerator`, each
    shape at its roofline time (NaN if a peak is unknown). Set-up not included."""
    acc = _hardware.get(accelerator)
    return sum(timing_estimate_s(_roofline.op_seconds(
        _roofline.matmul_flops(*s), _roofline.matmul_bytes(*s, dtype), _peak(acc, dtype),
        _roofline.bandwidth_or_nan(acc)), min_run_time) for s in shapes)


# --- a decode step ------------------------------------------------------------------------

def decode_step(d_model, n_matrices, batch=1, dtype=None, device=None, *,
                cuda_graph=False, min_run_time=None, accelerator=None):
    """Time one decode step over a stack of `n_matrices` weight matrices [d_model, d_model]
    (x = x @ W for each, x: [batch, d_model]) and compare it with its roofline ceiling.
    Returns one row (a dict) in the format of `decoding.DecodeStack.measure` (its
    `model` says "n x [d, d] matrices"): see `decoding.step_row`.

    `cuda_graph=True` (GPU only) captures the chain once and replays it, removing the
    per-kernel launch overhead that bounds small steps in eager PyTorch.
    """
    from . import decoding as _decoding

    return _decoding.matrix_chain_step(d_model, n_matrices, batch, dtype, device,
                                       cuda_graph=cuda_graph, min_run_time=min_run_time,
                                       accelerator=accelerator)


# --- the roofline a sweep measured, and ceilings for a GPU the catalogue lacks ---------------

def measured_roofline(rows) -> dict:
    """The roofline a matmul sweep (`matmul_tflops` rows) actually drew. Lab: *fp16
    matmuls on the roofline*.

    Measured peak = the best FLOP/s of any shape; measured bandwidth = the best bytes/s
    of any shape (memory-bound shapes reach it; compute-bound ones move few bytes per
    second); measured ridge = their ratio, in FLOP/byte. Returns
    {"peak_flops", "bandwidth", "ridge"} in FLOP/s, bytes/s and FLOP/byte.
    """
    import pandas as pd

    if rows is None or isinstance(rows, (str, bytes, int, float)):
        raise TypeError(f"rows must be matmul_tflops rows (a DataFrame or list of dicts), "
                        f"got {rows!r}")
    df = pd.DataFrame(rows)
    missing = {"flops", "bytes", "seconds"} - set(df.columns)
    if missing:
        raise ValueError(f"matmul rows need columns flops, bytes, seconds; missing: "
                         f"{', '.join(sorted(missing))}")
    for col in ("flops", "bytes", "seconds"):  # NaN seconds: a shape that did not run
        values = pd.to_numeric(df[col], errors="coerce")
        bad = values.isna() & ~(df[col].isna() & (col == "seconds")) | (values < 0) \
            | np.isinf(values)
        if bad.any():
            raise ValueError(f"rows[{col!r}] must be finite numbers >= 0, got "
                             f"{df.loc[bad, col].tolist()[:3]!r}")
    df = df[(df["seconds"] > 0) & df["seconds"].notna()]
    if df.empty:
        raise ValueError("no timed matmul rows (every row has no positive seconds)")
    peak = float((df["flops"] / df["seconds"]).max())
    bandwidth = float((df["bytes"] / df["seconds"]).max())
    return {"peak_flops": peak, "bandwidth": bandwidth, "ridge": peak / bandwidth}


def lab_accelerator(device=None, dtype=None, *, threads=None,
                    progress=True) -> _hardware.Accelerator:
    """The entry the labs compare against: the device's catalogue entry, with any figure
    it lacks for `dtype` (bandwidth, dense peak) measured here, once, and labelled as
    measured in its `source` and `note`. A GPU the catalogue does not know (an RTX card,
    a MIG slice, next year's GPU) thus gets ceilings from what it does, not a crash. On
    a CPU, `threads` gives the reference CPU's ceilings for that many cores
    (`hardware.cpu(threads)`: a lab timing one thread compares with one core)."""
    device = _device(device)
    dtype = _dtypes.canonical(dtype or default_dtype(device))
    if device.type != "cuda" and threads is not None:
        return _hardware.cpu(threads=threads)
    acc = accelerator_for(device)
    need_bw = not _finite_positive(acc.bandwidth)
    need_peak = not _finite_positive(_peak(acc, dtype))
    if not (need_bw or need_peak):
        return acc
    measured, what = {}, []
    if need_bw:
        top = default_read_sizes(device)[-1]
        reads = weight_read_bandwidth([top], dtype, device, progress=False, accelerator=acc)
        measured["bandwidth"] = float(reads["achieved_gb_per_s"].max()) * 1e9
        what.append(f"bandwidth {measured['bandwidth'] / 1e9:,.1f} GB/s (a "
                    f"{top / MiB:,.0f} MiB read)")
    if need_peak:
        side = default_matmul_shapes(device)[-1]
        mm = matmul_tflops([side], dtype, device, progress=False, accelerator=acc)
        measured["peaks"] = {**acc.peaks, dtype: float(mm["achieved_tflops"].max()) * 1e12}
        what.append(f"{dtype} peak {measured['peaks'][dtype] / 1e12:,.1f} TFLOP/s (a "
                    f"{side[0]}^3 matmul)")
    note = (f"No datasheet figure in the catalogue for {acc.name} ({dtype}): measured here "
            f"on {datetime.date.today().isoformat()}: {'; '.join(what)}. Ceilings built on "
            f"them say what this GPU did, not what it could do.")
    if progress:
        print(note)
    return dataclasses.replace(acc, **measured, source=(acc.source + "; " if acc.source
                                                        else "") + "measured by bench.lab_accelerator",
                               note=note)


#: The lab's matmul sweep: a [side, side] weight met by m = 1, 2, 4 ... rows, then squares.
GPU_LAB_SIDE, GPU_LAB_SQUARES = 8192, (2048, 4096, 8192, 16384)
CPU_LAB_SIDE, CPU_LAB_SQUARES = 1024, (256, 512, 1024)


def lab_matmul_shapes(device=None, *, quick=False) -> list[tuple[int, int, int]]:
    """(m, n, k) for the roofline lab: a weight [k, n] met by m = 1, 2, 4 ... rows (decode
    at batch m, from a GEMV to a square), then squares for the peak. GPU: k = n = 8192
    (fp16, 128 MiB per weight: far beyond any L2); CPU: k = n = 1024 (fp32). No shape
    is listed twice (m = 8192 on the GPU is also the 8192 square)."""
    if _kind(device) == "cuda":
        side, squares = GPU_LAB_SIDE, list(GPU_LAB_SQUARES)
        ms = [2**i for i in range(0, 14, 2 if quick else 1)]
    else:
        side, squares = CPU_LAB_SIDE, list(CPU_LAB_SQUARES)
        ms = [1, 4, 16, 64, 256] if quick else [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    if quick:
        squares = squares[1:]
    shapes = [(m, side, side) for m in ms] + [(s, s, s) for s in squares]
    return list(dict.fromkeys(shapes))
