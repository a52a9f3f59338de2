"""Where a measurement runs: the device, its kind and catalogue entry, its memory.

The measurement layer's devices, shared by `bench` (the timer and its sweeps),
`decoding` and the lab helpers:

- `resolve` checks a device ('cpu', 'cuda', 'cuda:N' for a GPU torch sees); `kind` says
  'cpu' or 'cuda' for planning, with no GPU needed (a plan for an H200 on a laptop).
- `accelerator_for`, `cache_bytes`, `memory_bytes`: the catalogue entry and the sizes a
  sweep is planned against; `target` resolves device, dtype and entry at once.
- `random_tensor`: random values (never zeros, which some kernels shortcut) made in the
  dtype itself; `graphed` captures a function in a CUDA graph and returns its replay.
- `refuse_beyond_memory` refuses a size beyond the device's free memory
  (`available_bytes`) before allocating, with `BeyondMemory` (a ValueError and a
  MemoryError, so `first_that_fits` steps down from it); `check_capability` refuses bf16
  and TF32 on a GPU older than Ampere (a T4);
  `is_oom` says whether a failure was out of memory (a failed CUDA-graph capture counts
  only when the GPU's memory is nearly full); `free_memory`, `first_that_fits`.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import os
import warnings
from typing import NamedTuple

import torch

from gpuinfer import dtypes as _dtypes
from gpuinfer import hardware as _hardware
from gpuinfer.measure import detection
from gpuinfer.hardware import devices
from gpuinfer import validate as _validate

MiB = 2**20
#: When the cache size cannot be read: 64 MiB, more than any GPU's L2 but the H200's 60 MB
#: and B200's, and more than most CPUs' L3: a safe over-estimate for a flush.
FALLBACK_CACHE_BYTES = 64 * MiB


def default_device():
    """torch.device('cuda') when a GPU is present, else the CPU."""

    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def parse(device, name="device"):
    """`device` as a torch.device of type 'cpu' or 'cuda' (present or not)."""

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


def resolve(device, name="device"):
    """`device` as a torch.device, checked: 'cpu', 'cuda' or 'cuda:N' for a GPU torch sees."""

    resolved = parse(device, name)
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{name}={device!r}, but torch sees no CUDA GPU "
                             f"(torch.cuda.is_available() is False): use 'cpu'")
        count = torch.cuda.device_count()
        if resolved.index is not None and resolved.index >= count:
            raise ValueError(f"{name}={device!r}, but torch sees {count} GPU(s): "
                             f"indices 0 to {count - 1}")
    return resolved


def kind(device, name="device") -> str:
    """'cuda' or 'cpu' for planning: like `resolve`, but a GPU need not be present (a
    plan for an H200 can be made, and its run time estimated, on a laptop)."""
    return parse(device, name).type


def gpu_index(device) -> int:
    """The GPU index of a CUDA device ('cuda' alone means the current one)."""

    return device.index if device.index is not None else torch.cuda.current_device()


def default_dtype(device=None) -> str:
    """fp16 on a GPU (never bf16: a T4 emulates it), fp32 on a CPU."""
    return "fp16" if kind(device) == "cuda" else "fp32"


def _detect(index):
    """`hardware.detect()` for GPU `index`. (The hardware module is gaining a device
    argument; until it has one, its detect() reads GPU 0 and we say so.)"""
    if inspect.signature(detection.detect).parameters:
        return detection.detect(index)
    if index != 0:
        warnings.warn(f"hardware.detect() of this version reads GPU 0, not GPU {index}: "
                      "the catalogue entry may be another GPU's", stacklevel=3)
    return detection.detect()


def accelerator_for(device=None) -> devices.Accelerator:
    """The catalogue entry for `device`: the detected GPU (the one asked for), or the
    reference CPU. A GPU missing from the catalogue has NaN or missing figures; see
    `lab_measurements.lab_accelerator` for one whose gaps are measured."""
    device = resolve(device)
    return _detect(gpu_index(device)) if device.type == "cuda" else detection.cpu()


def cache_bytes(device=None) -> float:
    """Last-level cache of `device` in bytes (L2 on a GPU as torch reports it; the CPU's
    L3), or `FALLBACK_CACHE_BYTES` when it cannot be read."""
    return accelerator_for(device).cache_bytes or FALLBACK_CACHE_BYTES


def memory_bytes(device=None) -> float:
    """Bytes of memory `device` has: what torch reports for a GPU (a MIG slice's own),
    the machine's RAM for a CPU. Sizes beyond it are refused before any allocation."""

    device = resolve(device)
    if device.type == "cuda":
        return float(torch.cuda.get_device_properties(gpu_index(device)).total_memory)
    try:
        return float(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return detection.cpu().memory_bytes


#: Bytes kept free on a GPU beyond what a measurement sizes itself to: the CUDA context's
#: growth, cuBLAS workspaces, the allocator's fragmentation.
GPU_MEMORY_MARGIN_BYTES = 0.5e9


def available_bytes(device=None) -> float:
    """Bytes a measurement on `device` may size itself to: on a GPU, what the driver has
    free plus what this process's torch already holds (`mem_get_info()[0] +
    memory_reserved()`; another process's CUDA context, as under gpu-check, is not
    there), less `GPU_MEMORY_MARGIN_BYTES`, and never above `memory_bytes`; where the
    driver cannot say, `memory_bytes` less the margin. On a CPU, `memory_bytes`."""

    device = resolve(device)
    total = memory_bytes(device)
    if device.type != "cuda":
        return total
    try:
        index = gpu_index(device)
        free, _ = torch.cuda.mem_get_info(index)
        have = float(free) + float(torch.cuda.memory_reserved(index))
    except Exception:  # no driver, a mocked or broken CUDA
        have = total
    return max(min(have, total) - GPU_MEMORY_MARGIN_BYTES, 0.0)


class BeyondMemory(ValueError, MemoryError):
    """A size refused before allocating (`refuse_beyond_memory`): a ValueError (the size
    asked for is wrong for this device) and a MemoryError, so `first_that_fits` and a
    sweep step down from it as they do from an allocation that failed."""


def refuse_beyond_memory(nbytes, device, what):
    """Raise `BeyondMemory` (a ValueError and a MemoryError), naming `what`, when `nbytes`
    exceed what `device` has free for it (`available_bytes`: on a GPU the free memory plus
    torch's own pool, less a margin): refused before any allocation, so a size that cannot
    fit fails at once and says why, and `first_that_fits` tries the next size down."""
    have = available_bytes(device)
    if nbytes > have:
        where = (f"free (of {memory_bytes(device) / 1e9:,.3g} GB)" if device.type == "cuda"
                 else "this cpu has")
        raise BeyondMemory(f"{what} needs {nbytes / 1e9:,.3g} GB, more than the "
                           f"{have / 1e9:,.3g} GB {where}: choose smaller sizes")


def torch_dtype(dtype):
    """The torch dtype used to *store* `dtype` in the labs (fp32, fp16, bf16, int8)."""

    table = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16,
             "bf16": torch.bfloat16, "int8": torch.int8}
    name = _dtypes.canonical(dtype)
    if name not in table:
        raise ValueError(f"{name} has no plain torch storage dtype; use one of {', '.join(table)}")
    return table[name]


class Target(NamedTuple):
    """What every measurement resolves first: where it runs and in which format."""
    device: object          # torch.device
    dtype: str              # canonical name, e.g. "fp16"
    tdtype: object          # torch.dtype
    bytes_per_element: float
    accelerator: devices.Accelerator
    cache: float            # bytes


#: The compute capability a format needs on an NVIDIA GPU: bf16 and TF32 tensor cores came
#: with Ampere (sm_80). A T4 (sm_75) emulates bf16 (~2.5 TFLOP/s measured) and has no TF32.
MIN_CAPABILITY = {"bf16": (8, 0), "tf32": (8, 0)}


def check_capability(device, dtype):
    """ValueError when `dtype` needs a newer GPU than `device` (`MIN_CAPABILITY`): a bf16
    or TF32 sweep on a T4 would time an emulation against a peak the card does not have."""

    need = MIN_CAPABILITY.get(_dtypes.canonical(dtype))
    if need is None or device.type != "cuda":
        return
    props = torch.cuda.get_device_properties(gpu_index(device))
    have = (int(props.major), int(props.minor))
    if have < need:
        raise ValueError(f"dtype={dtype!r} needs a GPU of compute capability {need[0]}.{need[1]} "
                         f"or newer; {props.name} is sm_{have[0]}{have[1]}, where bf16 is "
                         "emulated and TF32 does not exist: use 'fp16'")


def target(device, dtype, accelerator=None) -> Target:
    """`device` resolved, `dtype` canonical (default: `default_dtype`; a format the GPU
    lacks refused, `check_capability`), the catalogue entry (`accelerator`, default the
    device's) and its cache: what every sweep resolves first."""
    device = resolve(device)
    dtype = _dtypes.canonical(dtype or default_dtype(device))
    check_capability(device, dtype)
    acc = accelerator_for(device) if accelerator is None else _hardware.get(accelerator)
    return Target(device, dtype, torch_dtype(dtype), _dtypes.bytes_per_element(dtype),
                   acc, acc.cache_bytes or FALLBACK_CACHE_BYTES)


def random_tensor(shape, tdtype, device, scale=1.0, generator=None):
    """Random values made in `tdtype` itself (no fp32 copy at 2-3x the memory)."""

    if tdtype.is_floating_point:
        t = torch.randn(shape, dtype=tdtype, device=device, generator=generator)
        return t.mul_(scale) if scale != 1.0 else t
    info = torch.iinfo(tdtype)
    return torch.randint(info.min, info.max + 1, shape, dtype=tdtype, device=device,
                         generator=generator)


def synchronize(device=None):
    """Wait until `device` has finished the work queued so far (no-op on a CPU)."""

    device = resolve(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def fp32_matmul_mode(dtype):
    """Within the block, fp32 matmuls run as `dtype` says: "tf32" on tensor cores (19-bit
    operands), "fp32" in full precision; other dtypes leave the setting alone. The
    setting in force before is restored after. (PyTorch's default is full fp32; a
    notebook that called `torch.set_float32_matmul_precision("high")` turned TF32 on.)"""

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


# --- out of memory --------------------------------------------------------------------------

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
# cuBLAS cannot allocate its workspace or handle: the first GEMM on a new stream (a CUDA
# graph's side stream) near full memory raises these. Out of memory only when the GPU's
# memory is nearly full: the same words with memory to spare are a broken setup.
_CUBLAS_ALLOC_TEXT = ("cublas_status_alloc_failed", "cublas_status_not_initialized")
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

    try:
        if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
            return False
        free, total = torch.cuda.mem_get_info()
    except Exception:  # no driver, a mocked or broken CUDA
        return False
    return total > 0 and free < MEMORY_NEAR_FULL_SHARE * total


def is_oom(exc) -> bool:
    """Whether `exc` says the device (or the host) ran out of memory: an OutOfMemoryError
    or MemoryError anywhere in its chain, an allocator's RuntimeError saying so, or a
    failed CUDA-graph capture or cuBLAS allocation failure (CUBLAS_STATUS_ALLOC_FAILED,
    CUBLAS_STATUS_NOT_INITIALIZED from cublasCreate) while the GPU's memory is nearly
    full. Any other failure, those with memory to spare included, is a bug, not a size to
    step down."""

    oom_types = tuple({getattr(torch, "OutOfMemoryError", MemoryError),
                       torch.cuda.OutOfMemoryError, MemoryError})
    chain = _chain(exc)
    if any(isinstance(e, oom_types) for e in chain):
        return True
    texts = [str(e).lower() for e in chain if isinstance(e, RuntimeError)]
    if any(t in text for text in texts for t in _ALLOCATION_TEXT):
        return True
    return (any(t in text for text in texts for t in _CAPTURE_TEXT + _CUBLAS_ALLOC_TEXT)
            and _memory_nearly_full())


def free_memory():
    """Return cached GPU memory to the driver, after Python has let go of what it can.
    Call it after an `except` block, not inside one: the traceback still holds the
    failed call's tensors there."""

    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def first_that_fits(candidates, build, *, describe=str):
    """`(build(c), c)` for the first of `candidates` (largest first) that fits in memory:
    on out of memory (an allocation that failed, or a size `refuse_beyond_memory` refused
    before allocating), the memory is freed and the next candidate tried, with a line
    saying so. The labs' "a smaller stack if the GPU is short of memory"."""
    _validate.callable_("build", build)
    tried = []
    for c in candidates:
        failed = None
        try:
            return build(c), c
        except (RuntimeError, MemoryError) as exc:
            if not is_oom(exc):
                raise
            failed = ("refused before allocating" if isinstance(exc, BeyondMemory)
                      else f"{type(exc).__name__}")
        # Outside the except block: the traceback and the tensors it held are gone.
        free_memory()
        tried.append(describe(c))
        print(f"out of memory ({failed}) at {describe(c)}; trying the next size down")
    raise MemoryError(f"none of the sizes fits in memory: {', '.join(tried) or 'none given'}")



def graphed(fn, device=None):
    """Capture `fn` in a CUDA graph (after warm-up on a side stream) and return its replay.

    Cached memory is returned to the driver first: an allocation that fails during
    capture then raises a plain out-of-memory error instead of invalidating the capture
    (pytorch/pytorch#159594); `is_oom` counts an invalidated capture as out of memory
    only when the memory is nearly full."""

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

