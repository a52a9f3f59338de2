"""Detection: the device torch runs on (`detect`, `from_torch`), with this card's memory
and L2 from torch, NVML filling gaps, a MIG slice scaled from its parent, and a labelled
estimate for a GPU the catalogue lacks; and the reference CPU with this machine's
last-level cache (`cpu`). Never fails on a GPU it does not know."""

from __future__ import annotations

import dataclasses
import math
import os
import pathlib
import re
import warnings

import torch

from gpuinfer import validate as _v
from gpuinfer.hardware.devices import Accelerator, catalogue_entry, closest, find
from gpuinfer.hardware.mig_slices import mig_slice, parse_mig_name

#: Where Linux lists CPU 0's caches (one index<n> folder a level).
SYSFS_CACHE = "/sys/devices/system/cpu/cpu0/cache"


def _parse_cache_size(text: str) -> float | None:
    """Linux's sysfs cache size ("32768K", "1M") in bytes, or None."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)\s*", text or "")
    if not match:
        return None
    return float(int(match[1]) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[match[2]])


def _cpu_cache_bytes() -> float | None:
    """The last-level cache one core sees: sysconf where the C library knows it, else
    Linux's sysfs (the highest cache level of CPU 0), else None."""
    for key in ("SC_LEVEL3_CACHE_SIZE", "SC_LEVEL2_CACHE_SIZE"):
        try:
            size = os.sysconf(key)
        except (ValueError, OSError, AttributeError):
            continue
        if size and size > 0:
            return float(size)
    best = (0, None)
    for index in sorted(pathlib.Path(SYSFS_CACHE).glob("index*")):
        try:
            level = int((index / "level").read_text())
            size = _parse_cache_size((index / "size").read_text())
        except (OSError, ValueError):
            continue
        if size and level > best[0]:
            best = (level, size)
    return best[1]


def cpu(threads=None) -> Accelerator:
    """The reference CPU entry, with this machine's last-level cache size. `threads`:
    the ceilings of that many of its cores (a lab timing one thread compares with one
    core's share): peaks and bandwidth scaled by threads / cores. The bandwidth share is
    a simplification: one core of a desktop reaches more than its share of the DRAM
    bandwidth, though not all of it, so a one-thread read can beat this ceiling."""
    entry = catalogue_entry("CPU")
    entry = dataclasses.replace(entry, cache_bytes=_cpu_cache_bytes() or entry.cache_bytes)
    if threads is None:
        return entry
    t = _v.count("threads", threads, maximum=entry.cores)
    share = t / entry.cores
    return dataclasses.replace(
        entry, name=f"{entry.name} ({t} of {entry.cores} cores)", cores=t,
        bandwidth=share * entry.bandwidth, peaks={k: share * v for k, v in entry.peaks.items()},
        note=f"The reference CPU's ceilings scaled to {t} of its {entry.cores} cores. "
             + entry.note)



def _cuda_index(device, torch):
    """(kind, index) for `device`: None (the current device, GPU when there is one), an
    int (a GPU index), "cpu", "cuda", "cuda:1" or a torch.device."""
    if device is None:
        if not torch.cuda.is_available():
            return "cpu", None
        try:
            return "cuda", int(torch.cuda.current_device())
        except Exception:  # a mocked or half-initialised torch.cuda: GPU 0
            return "cuda", 0
    if isinstance(device, bool):
        raise TypeError(f"device must be None, a GPU index, 'cpu', 'cuda[:n]' or a "
                        f"torch.device, got {device!r}")
    if isinstance(device, int):
        return "cuda", _v.count("device", device, minimum=0)
    if isinstance(device, str):
        try:
            device = torch.device(device)
        except (RuntimeError, ValueError):
            raise ValueError(f"device={device!r} is not a device torch knows; use 'cpu', "
                             f"'cuda' or 'cuda:<index>'") from None
    if not isinstance(device, torch.device):
        raise TypeError(f"device must be None, a GPU index, 'cpu', 'cuda[:n]' or a "
                        f"torch.device, got {device!r}")
    if device.type != "cuda":
        return "cpu", None
    if device.index is not None:
        return "cuda", device.index
    try:
        return "cuda", int(torch.cuda.current_device())
    except Exception:
        return "cuda", 0


def detect(device=None) -> Accelerator:
    """The device torch runs on: the GPU's catalogue entry (with the memory and L2 size
    torch reports for this card), a MIG slice of it, or the reference CPU entry.

    `device`: None (the current device), a GPU index, "cuda:1", a torch.device, or
    "cpu". The index asked for is the GPU read (torch.device("cuda:1") reads GPU 1).

    Never fails on a GPU it does not know: it warns and builds an entry from what torch
    reports (memory, L2, bandwidth from memory clock x bus width; NVML fills gaps when
    `nvidia-ml-py` is installed), labelled an estimate, with no peaks (ceilings become
    NaN: measure instead)."""

    kind, index = _cuda_index(device, torch)
    if kind == "cpu":
        return cpu()
    if not torch.cuda.is_available():
        raise ValueError(f"device={device!r} asks for a CUDA GPU, but "
                         f"torch.cuda.is_available() is False on this machine")
    try:
        count = int(torch.cuda.device_count())
    except Exception:
        count = 0
    if count and index >= count:
        raise ValueError(f"device={device!r} asks for GPU {index}, but torch sees {count} "
                         f"GPU{'s' if count > 1 else ''} (indices 0-{count - 1})")
    return from_torch(torch.cuda.get_device_name(index),
                      torch.cuda.get_device_properties(index), index=index)


def from_torch(torch_name, props, *, index=0) -> Accelerator:
    """The catalogue entry for a GPU as torch describes it (`get_device_name`,
    `get_device_properties`), with this card's memory and L2; a MIG slice of a known GPU
    is scaled from its parent; an unknown GPU gets a labelled estimate."""
    if not isinstance(torch_name, str):
        raise TypeError(f"torch_name must be the string torch.cuda.get_device_name() "
                        f"returns, got {torch_name!r}")
    total = getattr(props, "total_memory", None)
    memory = float(total) if _v.is_number(total) and total > 0 else None
    l2 = getattr(props, "L2_cache_size", 0) or 0
    l2 = float(l2) if _v.is_number(l2) and l2 > 0 else None
    mig = parse_mig_name(torch_name)
    if mig is not None and find(torch_name) is None:
        parent, profile = mig
        try:
            sms = getattr(props, "multi_processor_count", None)
            return mig_slice(parent, profile, memory_bytes=memory,
                             sm_count=sms if _v.is_number(sms) and sms > 0 else None)
        except (KeyError, ValueError):
            pass  # an unknown parent or profile: estimate from what torch reports
    acc = find(torch_name)
    if acc is None:
        return _estimate(torch_name, props, index, memory, l2)
    return dataclasses.replace(
        acc, memory_bytes=memory or acc.memory_bytes,
        cache_bytes=l2 or acc.cache_bytes,
        memory_source="torch total_memory of this card" if memory else acc.memory_source)


def _bandwidth_from_clock(memory_clock_khz, bus_width_bits) -> float:
    """Peak DRAM bytes/s from the memory clock (kHz, as CUDA and torch report it) and the
    bus width (bits): two transfers a clock. Matches the datasheets: T4 5001 MHz x 256 bit
    = 320 GB/s, H100 SXM 2619 MHz x 5120 bit = 3.35 TB/s (deviceQuery outputs)."""
    if not (_v.is_number(memory_clock_khz) and _v.is_number(bus_width_bits)
            and memory_clock_khz > 0 and bus_width_bits > 0):
        return math.nan
    return 2 * float(memory_clock_khz) * 1e3 * float(bus_width_bits) / 8


def _nvml_facts(props, index) -> dict:
    """What NVML adds for a GPU (memory total, max memory clock, bus width, power limit),
    or {} when `nvidia-ml-py` is not installed or NVML fails. The handle is found by the
    UUID torch reports (CUDA_VISIBLE_DEVICES can renumber GPUs), else by index."""
    try:
        import pynvml
    except ImportError:
        return {}
    facts = {}
    try:
        pynvml.nvmlInit()
    except Exception:
        return {}
    try:
        handle = None
        uuid = getattr(props, "uuid", None)
        if uuid:
            text = str(uuid)
            try:
                handle = pynvml.nvmlDeviceGetHandleByUUID(
                    text if text.startswith(("GPU-", "MIG-")) else "GPU-" + text)
            except Exception:
                handle = None
        if handle is None:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        for key, call in (
                ("memory_bytes", lambda: pynvml.nvmlDeviceGetMemoryInfo(handle).total),
                ("memory_clock_mhz", lambda: pynvml.nvmlDeviceGetMaxClockInfo(
                    handle, pynvml.NVML_CLOCK_MEM)),
                ("bus_width_bits", lambda: pynvml.nvmlDeviceGetMemoryBusWidth(handle)),
                ("power_limit_w", lambda: pynvml.nvmlDeviceGetPowerManagementDefaultLimit(
                    handle) / 1000)):
            try:
                value = call()
            except Exception:
                continue
            if _v.is_number(value) and value > 0:
                facts[key] = float(value)
    except Exception:
        return facts
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    return facts


def _estimate(torch_name, props, index, memory, l2) -> Accelerator:
    """An entry for a GPU the catalogue does not know, from torch (and NVML)."""
    nvml = _nvml_facts(props, index)
    bandwidth = _bandwidth_from_clock(getattr(props, "memory_clock_rate", 0),
                                      getattr(props, "memory_bus_width", 0))
    how = ["memory and L2 from torch"]
    if bandwidth == bandwidth:
        how.append("bandwidth = 2 x memory clock x bus width from torch")
    elif "memory_clock_mhz" in nvml and "bus_width_bits" in nvml:
        bandwidth = _bandwidth_from_clock(nvml["memory_clock_mhz"] * 1e3, nvml["bus_width_bits"])
        how.append("bandwidth = 2 x max memory clock x bus width from NVML")
    if memory is None and "memory_bytes" in nvml:
        memory = nvml["memory_bytes"]
        how.append("memory from NVML")
    if memory is None:
        raise ValueError(f"cannot describe {torch_name!r}: torch reports no total_memory "
                         f"and NVML is not available")
    sms = getattr(props, "multi_processor_count", None)
    cc = (getattr(props, "major", None), getattr(props, "minor", None))
    facts = [f"{sms} SMs" if sms else "", f"compute capability {cc[0]}.{cc[1]}"
             if None not in cc else "", f"{getattr(props, 'clock_rate', 0) / 1e3:g} MHz SM clock"
             if _v.is_number(getattr(props, "clock_rate", None)) and props.clock_rate else ""]
    near = closest(torch_name, n=3) or ["none"]
    warnings.warn(
        f"{torch_name!r} is not in the gpuinfer catalogue: its peak FLOP/s are unknown and "
        f"its bandwidth is {'an estimate' if bandwidth == bandwidth else 'unknown'}. "
        f"Measurements still work; ceilings need a catalogue entry (closest: "
        f"{', '.join(near)}).", stacklevel=3)
    return Accelerator(
        torch_name, memory_bytes=memory, bandwidth=bandwidth, peaks={},
        cache_bytes=l2, tdp_w=nvml.get("power_limit_w"), estimated=True,
        source="torch.cuda.get_device_properties" + (" + NVML" if nvml else ""),
        memory_source="torch total_memory of this card",
        note="ESTIMATE, not a datasheet: not in the catalogue; " + "; ".join(how)
             + (f" ({', '.join(f for f in facts if f)})" if any(facts) else "")
             + ". No peaks: ceilings are NaN; measure them.")


