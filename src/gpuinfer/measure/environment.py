"""Which machine produced a number: the device, torch, and the GPU's clocks and power.

- `environment()` describes the machine a measurement ran on (device, catalogue entry,
  torch and CUDA versions, date, CPU threads, and on an NVIDIA GPU `clocks()`).
- `clocks()` reads the GPU's state now through NVML (nvidia-ml-py): SM and memory clocks,
  power limit and draw, temperature, throttle reasons (`throttle_reasons` in words).
- `sample_clocks()` samples NVML in a background thread while a measurement runs
  (`ClockSampler`), so a lab can say which clock the work ran at, not the clock after.
- `describe_clocks`, `describe_sampled`: one line each for a lab to print;
  `clock_scaled_peak` scales a datasheet peak to the SM clock seen.

The device's catalogue facts (NVML's memory and bus width included) are
`hardware.detect`'s; this module reads what changes while the GPU runs.
"""

from __future__ import annotations

import contextlib
import datetime
import math

import numpy as np

import torch

from gpuinfer.measure import torch_device as _dev
from gpuinfer import validate as _validate

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

    props = torch.cuda.get_device_properties(_dev.gpu_index(device))
    bus = getattr(props, "pci_bus_id", None)
    if bus is not None:
        pci = (f"{getattr(props, 'pci_domain_id', 0):08X}:{bus:02X}:"
               f"{getattr(props, 'pci_device_id', 0):02X}.0")
        return pynvml.nvmlDeviceGetHandleByPciBusId(pci)
    uuid = str(getattr(props, "uuid", "") or "")
    if uuid:
        return pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith(("GPU-", "MIG-"))
                                                else f"GPU-{uuid}")
    return pynvml.nvmlDeviceGetHandleByIndex(_dev.gpu_index(device))


def _nvml_unavailable(device):
    """Why NVML cannot be read for `device` (a string), or None when it can be tried."""

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
    device = _dev.resolve(device)
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

        self.device = _dev.resolve(device)
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
    """`with environment.sample_clocks(device) as clk: <measure>` samples NVML every
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


def clock_scaled_peak(peak_flops, state, acc=None) -> float:
    """A datasheet peak (FLOP/s) scaled to the SM clock a `clocks()` reading (or a
    `ClockSampler.summary()`) saw: what the same tensor cores can do at the clock the GPU
    held (a T4 at its 70 W cap runs well below its 1,590 MHz boost). The peak is quoted at
    the catalogue entry `acc`'s `boost_clock_hz` (an H100 SXM's 989 TFLOP/s at 1,830 MHz,
    while NVML's maximum is 1,980): pass `acc` (an `Accelerator` or a catalogue name) to
    divide by that clock; without it, or where the entry has no clock, NVML's maximum SM
    clock stands in. NaN if the clocks were not read."""
    peak_flops = _validate.positive_or_nan("peak_flops", peak_flops, array=False)
    if not isinstance(state, dict):
        raise TypeError(f"state must be the dict clocks() returns, got {state!r:.80}")
    if isinstance(acc, str):
        from gpuinfer import hardware

        acc = hardware.get(acc)
    elif acc is not None and not hasattr(acc, "boost_clock_hz"):
        raise TypeError(f"acc must be a hardware.Accelerator, a catalogue name or None, "
                        f"got {acc!r:.80}")
    quoted = getattr(acc, "boost_clock_hz", None)
    sm = state.get("sm_clock_mhz", math.nan)
    top = quoted / 1e6 if quoted else state.get("sm_clock_max_mhz", math.nan)
    if not all(_validate.is_number(v) and math.isfinite(v) and v > 0
               for v in (peak_flops, sm, top)):
        return math.nan
    return peak_flops * sm / top


def environment(device=None) -> dict:
    """Which machine produced a measurement: device, its catalogue entry, torch, date,
    the CPU threads torch uses (what a CPU measurement depends on), and on an NVIDIA GPU
    the clocks, power limit, temperature and throttle reasons at this moment (`clocks`)."""
    import platform


    device = _dev.resolve(device)
    acc = _dev.accelerator_for(device)
    name = torch.cuda.get_device_name(_dev.gpu_index(device)) if device.type == "cuda" else (
        platform.processor() or platform.machine() or "cpu")
    return {"device": name, "catalogue_entry": acc.name, "device_type": device.type,
            "torch": torch.__version__, "cuda": torch.version.cuda or "",
            "date": datetime.date.today().isoformat(),
            "cpu_threads": torch.get_num_threads(), **clocks(device)}
