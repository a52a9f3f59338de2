"""The GPU code paths that depend only on what torch (and NVML) report, tested on a CPU
with `torch.cuda` mocked: device names, properties, L2 size, memory, the device index,
clocks; out-of-memory classification (graph capture included); the TF32 setting; the
timer's clock; unknown GPUs in every lab entry point. No GPU is needed or used: every
tensor these tests make lives on the CPU."""

import math
import sys
import types
import warnings
import weakref
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from gpuinfer.course import bench_suite  # noqa: E402
from gpuinfer.measure import bench, decoding, lab_measurements, reference
from gpuinfer import hardware
from gpuinfer.predict import llm
from gpuinfer.measure import torch_device
from gpuinfer.measure import environment
from gpuinfer.hardware import devices
from gpuinfer.predict import step_model  # noqa: E402
from gpuinfer.measure import torch_device as dev  # noqa: E402
from gpuinfer.measure import environment as machine  # noqa: E402

MiB = 2**20

# What torch reports for cards learners meet (names as torch.cuda.get_device_name gives
# them; memory and L2 as get_device_properties does).
T4 = dict(name="Tesla T4", total_memory=15_843_721_216, L2_cache_size=4 * MiB, major=7,
          minor=5, multi_processor_count=40, memory_clock_rate=5_001_000,
          memory_bus_width=256)
H100 = dict(name="NVIDIA H100 80GB HBM3", total_memory=85_045_526_528,
            L2_cache_size=50 * MiB, major=9, minor=0, multi_processor_count=132,
            memory_clock_rate=2_619_000, memory_bus_width=5120)
UNKNOWN = dict(name="NVIDIA Future GPU 9000", total_memory=48e9, L2_cache_size=96 * MiB,
               major=12, minor=0, multi_processor_count=200, memory_clock_rate=12_000_000,
               memory_bus_width=512)
MIG = dict(name="NVIDIA A100-SXM4-40GB MIG 1g.5gb", total_memory=4_949_999_616,
           L2_cache_size=40 * MiB, major=8, minor=0, multi_processor_count=14,
           memory_clock_rate=1_215_000, memory_bus_width=5120)
RTX = dict(name="NVIDIA GeForce RTX 4090", total_memory=25_386_352_640,
           L2_cache_size=72 * MiB, major=8, minor=9, multi_processor_count=128,
           memory_clock_rate=10_501_000, memory_bus_width=384)


@pytest.fixture
def fake_gpus(monkeypatch):
    """Install `torch.cuda` functions that report the given GPUs; returns a log of the
    calls that matter (synchronize's device argument, empty_cache)."""

    def install(*gpus):
        log = {"synchronize": [], "empty_cache": 0}

        def index(i=None):
            if i is None:
                return 0
            return i if isinstance(i, int) else (torch.device(i).index or 0)

        def synchronize(device=None):
            log["synchronize"].append(None if device is None else torch.device(device))

        def empty_cache():
            log["empty_cache"] += 1

        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: len(gpus))
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: gpus[index(i)]["name"])
        monkeypatch.setattr(torch.cuda, "get_device_properties",
                            lambda i=None: SimpleNamespace(**gpus[index(i)]))
        monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
        monkeypatch.setattr(torch.cuda, "empty_cache", empty_cache)
        monkeypatch.setattr(torch.version, "cuda", "12.8")
        monkeypatch.setitem(sys.modules, "pynvml", None)  # NVML absent unless a test adds it
        return log

    return install


# --- the device asked for is the device read and waited for -----------------------------

def test_the_device_index_is_honoured(fake_gpus):
    log = fake_gpus(T4, H100)
    assert torch_device.accelerator_for("cuda:1").name == "H100 SXM"
    assert torch_device.accelerator_for("cuda:0").name == "T4"
    assert torch_device.cache_bytes("cuda:1") == 50 * MiB
    assert torch_device.memory_bytes("cuda:1") == 85_045_526_528
    assert environment.environment("cuda:1")["device"] == "NVIDIA H100 80GB HBM3"
    torch_device.synchronize("cuda:1")
    assert log["synchronize"] == [torch.device("cuda", 1)]
    with pytest.raises(ValueError, match="2 GPU"):
        torch_device.accelerator_for("cuda:2")


def test_a_gpu_timing_waits_for_that_gpu_and_only_it(fake_gpus):
    log = fake_gpus(T4, H100)
    t = bench.time_fn(lambda: None, device="cuda:1", min_run_s=0.001)
    assert t.blocks >= bench.MIN_BLOCKS
    # the clock waits before each reading: at least twice a block
    assert len(log["synchronize"]) >= 2 * t.blocks
    assert set(log["synchronize"]) == {torch.device("cuda", 1)}


def test_a_cpu_timing_never_touches_cuda(monkeypatch):
    # torch.utils.benchmark.Timer's default clock synchronises every accelerator torch
    # sees, even for CPU work: a gloo rank in lab 7 created a CUDA context that way.
    def touched(*args, **kwargs):
        raise AssertionError("a CPU timing synchronised CUDA")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "synchronize", touched)
    monkeypatch.setattr(torch.cuda, "synchronize", touched)
    t = bench.time_fn(lambda: sum(range(100)), device="cpu", min_run_s=0.005)
    assert t.median_s > 0
    assert bench.time_calls(lambda: None, n=3, device="cpu").shape == (3,)


def test_multi_millisecond_steps_get_enough_blocks_for_a_spread():
    import time

    # A 20 ms step under a 0.05 s budget: blocked_autorange timed 2-3 blocks; at least
    # MIN_BLOCKS now, so the interquartile range is a spread and not a single block's.
    t = bench.time_fn(lambda: time.sleep(0.02), warmup=1, device="cpu", min_run_s=0.05)
    assert t.calls_per_block == 1 and t.blocks >= bench.MIN_BLOCKS == 5


# --- unknown GPUs, MIG slices, RTX cards: every lab entry point carries on ------------------

@pytest.mark.parametrize("gpu", [UNKNOWN, MIG, RTX, T4], ids=lambda g: g["name"])
def test_planning_entry_points_on_any_gpu(fake_gpus, gpu):
    fake_gpus(gpu)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an unknown GPU is announced with a warning
        acc = torch_device.accelerator_for("cuda")
        sizes = bench.default_read_sizes("cuda")
        plan = bench_suite.bench_plan(torch.device("cuda"), "full")
        spec = decoding.lab_model(decoding.LAB_MODEL, "cuda")
        estimate = bench_suite.plan_estimate(plan, acc)
    assert sizes[0] < gpu["L2_cache_size"] < sizes[-1]
    assert sizes[-1] <= min(2 * 1024 * MiB, gpu["total_memory"] / 8)
    # the stack's fp16 weights take at most 40% of what torch reports (or one layer)
    assert spec.n_layers == 1 or step_model.weight_bytes(spec, "fp16") <= 0.4 * gpu["total_memory"]
    assert plan["model"].n_layers == spec.n_layers and plan["dtype"] == "fp16"
    assert set(estimate) == {"weight reads", "matmul sweep", "decode step", "quantised weights"}
    assert all(s > 0 or math.isnan(s) for s in estimate.values())


def test_flush_pool_sized_against_the_l2_torch_reports(fake_gpus):
    fake_gpus(H100, T4)  # the T4 is GPU 1: its L2 and memory, not GPU 0's, size the pool
    assert torch_device.cache_bytes("cuda:1") == 4 * MiB
    # A 1 MiB fp16 read: 524,288 elements; the pool holds 4 x 4 MiB: 16 slices.
    assert bench._pool_slices(MiB // 2, torch_device.cache_bytes("cuda:1"), 2, True) == 16
    sizes = bench.default_read_sizes("cuda:1")
    assert sizes[0] == 4 * MiB // 16                              # 256 KiB
    # an eighth of what is free for a measurement (the driver cannot say here: the total
    # less the 0.5 GB margin), 4 KiB aligned
    assert sizes[-1] == int((15_843_721_216 - 0.5e9) / 8) // 4096 * 4096


def test_an_unknown_gpu_has_no_ceilings_but_its_rows_tidy_and_summarise(monkeypatch, capsys):
    unknown = devices.Accelerator("NVIDIA Future GPU 9000", 48e9, math.nan, {}, kind="gpu",
                                   cache_bytes=96 * MiB)
    monkeypatch.setattr(dev, "accelerator_for", lambda device=None: unknown)
    # The rows name the GPU as torch would (reference.tidy accepts an unknown entry only
    # under the device's own name); the timing itself runs on the CPU.
    describe = machine.environment
    monkeypatch.setattr(machine, "environment",
                        lambda device=None: {**describe(device), "device": unknown.name})
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # steadier on a small shared machine
    try:
        df = bench_suite.run_bench("tiny", "cpu", progress=False)
    finally:
        torch.set_num_threads(threads)
    assert set(df["experiment"]) == {"weight_read", "matmul", "decode", "quantised"}
    assert (df["value"] > 0).all() and df["ceiling"].isna().all()
    assert set(df["catalogue_entry"]) == {"NVIDIA Future GPU 9000"}
    text = bench_suite.summary(df)
    assert "n/a" in text and "nan" not in text


def test_lab_accelerator_measures_what_the_catalogue_lacks(monkeypatch, capsys):
    unknown = devices.Accelerator("NVIDIA Future GPU 9000", 48e9, math.nan, {}, kind="gpu",
                                   cache_bytes=4 * MiB)
    monkeypatch.setattr(dev, "accelerator_for", lambda device=None: unknown)
    monkeypatch.setattr(bench, "default_read_sizes", lambda device=None: [8 * MiB])
    monkeypatch.setattr(bench, "default_matmul_shapes", lambda device=None: [(128, 128, 128)])
    acc = lab_measurements.lab_accelerator("cpu", "fp32")
    assert acc.bandwidth > 0 and acc.peak_flops("fp32") > 0
    assert "measured" in acc.note and "measured" in acc.source
    assert "No datasheet figure" in capsys.readouterr().out
    # ... and the model functions now give ceilings for it, not errors
    assert llm.decode_ceiling(decoding._tiny_spec(), acc, 1, 0, "fp32") > 0


def test_a_decode_row_on_a_device_without_peaks_has_nan_ceilings():
    spec = decoding._tiny_spec()
    unknown = devices.Accelerator("NVIDIA Future GPU 9000", 48e9, math.nan, {}, kind="gpu")
    stack = decoding.DecodeStack(spec, "fp32", "cpu", accelerator=unknown)
    row = stack.measure(1, 4, min_run_s=0.005)
    assert row["tokens_per_s"] > 0 and row["bound"] == "unknown"
    assert math.isnan(row["ceiling_tokens_per_s"]) and math.isnan(row["fraction_of_ceiling"])
    assert math.isnan(row["weight_read_ceiling_tokens_per_s"])


# --- out of memory, including inside CUDA-graph capture --------------------------------------

def _raised_from(exc, cause):
    exc.__cause__ = cause
    return exc


CAPTURE_ERRORS = [
    RuntimeError("CUDA error: operation not permitted when stream is capturing"),
    RuntimeError("CUDA error: operation failed due to a previous error during capture"),
    RuntimeError("cudaErrorStreamCaptureInvalidated: capture invalidated"),
]
# cuBLAS's allocation failures, as torch words them (aten/src/ATen/cuda/CublasHandlePool.cpp
# and CUDABlas.cpp): the first GEMM on a graph's side stream near full memory.
CUBLAS_ERRORS = [
    RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
    RuntimeError("CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling "
                 "`cublasCreate(handle)`"),
]


@pytest.mark.parametrize("exc, oom", [
    (torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
    (RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate "
                  "memory: you tried to allocate 10737418240 bytes"), True),
    (MemoryError(), True),
    # an OutOfMemoryError anywhere in the chain: a wrapper raised from it
    (_raised_from(RuntimeError("the step failed"),
                  torch.cuda.OutOfMemoryError("CUDA out of memory")), True),
    (RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x3 and 4x3)"), False),
    (ValueError("out of memory"), False),  # not an allocation failure, whatever it says
    # A failed capture with memory to spare (no GPU here at all) is a bug, not a size:
    # a host copy inside the captured step says exactly this.
    *[(e, False) for e in CAPTURE_ERRORS + CUBLAS_ERRORS],
])
def test_out_of_memory_is_recognised(exc, oom):
    assert dev.is_oom(exc) is oom


@pytest.mark.parametrize("exc", CAPTURE_ERRORS + CUBLAS_ERRORS)
@pytest.mark.parametrize("free_share, oom", [(0.02, True), (0.5, False)])
def test_a_failed_capture_is_out_of_memory_only_when_memory_is_nearly_full(
        fake_gpus, monkeypatch, exc, free_share, oom):
    # 16 GB T4: 2% free (0.32 GB) is under the 10% line, 50% free is not.
    fake_gpus(T4)
    total = T4["total_memory"]
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (free_share * total, total))
    assert dev.is_oom(exc) is oom


def test_a_sweep_stops_at_a_failed_capture_only_when_memory_is_full(fake_gpus, monkeypatch):
    fake_gpus(T4)
    total = T4["total_memory"]
    free = {"bytes": 0.01 * total}
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (free["bytes"], total))

    def measure(batch):
        if batch == 512:  # a T4 sweep at batch 512: the allocation fails inside capture
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
        return {"batch": batch}

    with pytest.warns(UserWarning, match="out of memory at 512"):
        df = bench.sweep([128, 256, 512, 1024], measure, "decode", progress=False)
    assert list(df["batch"]) == [128, 256]
    free["bytes"] = 0.6 * total  # the same error with memory to spare: a bug, raised
    with pytest.raises(RuntimeError, match="stream is capturing"):
        bench.sweep([128, 256, 512, 1024], measure, "decode", progress=False)


def test_memory_is_freed_after_the_failed_call_lets_go_of_its_tensors(fake_gpus):
    log = fake_gpus(T4)
    seen = {}

    class Buffer:  # stands for the tensors the failed measurement held
        pass

    def measure(size):
        buf = Buffer()
        seen["ref"] = weakref.ref(buf)
        raise torch.cuda.OutOfMemoryError("CUDA out of memory")

    def empty_cache():
        seen["alive_at_empty_cache"] = seen["ref"]() is not None
        log["empty_cache"] += 1

    torch.cuda.empty_cache = empty_cache  # fake_gpus restores torch.cuda afterwards
    with pytest.warns(UserWarning):
        bench.sweep([1], measure, "reads", progress=False)
    # Inside `except` the traceback still held `buf`; empty_cache there freed nothing.
    assert log["empty_cache"] == 1 and seen["alive_at_empty_cache"] is False


def test_first_that_fits_tries_smaller_sizes_after_freeing(fake_gpus, capsys):
    log = fake_gpus(T4)

    def build(layers):
        if layers > 8:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")
        return f"{layers} layers"

    assert torch_device.first_that_fits([32, 16, 8, 4], build) == ("8 layers", 8)
    assert log["empty_cache"] == 2 and "trying the next size down" in capsys.readouterr().out
    with pytest.raises(MemoryError, match="none of the sizes"):
        torch_device.first_that_fits([64, 32], build)
    with pytest.raises(RuntimeError, match="shapes"):
        torch_device.first_that_fits([1], lambda n: (_ for _ in ()).throw(RuntimeError("shapes")))


# --- what a matmul sweep computes in, and in which dtype buffers are made ---------------------

def _fp32_mode():
    matmul = torch.backends.cuda.matmul
    return matmul.fp32_precision if hasattr(matmul, "fp32_precision") else (
        "tf32" if matmul.allow_tf32 else "ieee")


@pytest.mark.parametrize("dtype, mode", [("tf32", "tf32"), ("fp32", "ieee")])
def test_tf32_is_set_to_match_the_dtype_and_restored(monkeypatch, dtype, mode):
    seen = []

    def fake_time_fn(fn, **kwargs):
        seen.append(_fp32_mode())
        return bench.Timing(1e-3, 0.0, 5, 1)

    before = _fp32_mode()
    monkeypatch.setattr(bench, "time_fn", fake_time_fn)
    bench.matmul_tflops([(8, 8, 8)], dtype, "cpu", progress=False)
    assert seen == [mode] and _fp32_mode() == before


def test_random_buffers_are_made_in_the_target_dtype(monkeypatch):
    dtypes_made = []
    real = torch.randn

    def spy(*args, **kwargs):
        dtypes_made.append(kwargs.get("dtype"))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "randn", spy)
    bench.weight_read_bandwidth([MiB], "bf16", "cpu", flush_cache=False, min_run_s=0.001,
                                progress=False)
    bench.matmul_tflops([(4, 4, 4)], "bf16", "cpu", min_run_s=0.001, progress=False)
    decoding.DecodeStack(decoding._tiny_spec(), "bf16", "cpu").inputs(2, 4)
    # No fp32 buffer converted afterwards (3x the pool's bytes at peak on a T4).
    assert dtypes_made and set(dtypes_made) == {torch.bfloat16}


def test_no_shape_is_measured_twice():
    shapes = lab_measurements.lab_matmul_shapes("cuda")
    # m = 1, 2, 4 ... 8192 through [8192, 8192] (14 shapes) and squares 2048, 4096, 8192,
    # 16384: 8192^3 is both, so 14 + 4 - 1 = 17.
    assert len(shapes) == len(set(shapes)) == 17
    assert shapes.count((8192, 8192, 8192)) == 1


# --- clocks, power, throttling through NVML -----------------------------------------------------

def _fake_pynvml(reasons=0x4 | 0x40, fail=()):
    nvml = types.ModuleType("pynvml")
    nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_MEM, nvml.NVML_TEMPERATURE_GPU = 1, 2, 0
    nvml.calls = []

    def record(name, value):
        def f(*args):
            nvml.calls.append((name, args))
            if name in fail:
                raise RuntimeError(f"NVML: {name} not supported")
            return value
        return f

    nvml.nvmlInit = record("init", None)
    nvml.nvmlShutdown = record("shutdown", None)
    nvml.nvmlDeviceGetHandleByIndex = record("by_index", "handle")
    nvml.nvmlDeviceGetHandleByUUID = record("by_uuid", "handle")
    nvml.nvmlDeviceGetHandleByPciBusId = record("by_pci", "handle")
    nvml.nvmlDeviceGetClockInfo = lambda h, kind: {1: 585, 2: 5000}[kind]
    nvml.nvmlDeviceGetMaxClockInfo = lambda h, kind: {1: 1590, 2: 5001}[kind]
    nvml.nvmlDeviceGetEnforcedPowerLimit = record("power_limit", 70_000)  # mW
    nvml.nvmlDeviceGetPowerUsage = record("power", 69_500)
    nvml.nvmlDeviceGetTemperature = record("temperature", 81)
    nvml.nvmlDeviceGetCurrentClocksEventReasons = record("reasons", reasons)
    return nvml


def test_clocks_power_and_throttle_reasons_through_nvml(fake_gpus, monkeypatch):
    fake_gpus(T4, {**T4, "pci_bus_id": 0x3B, "pci_device_id": 0, "pci_domain_id": 0})
    nvml = _fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    state = environment.clocks("cuda:1")
    assert state["nvml"] == "ok"
    assert (state["sm_clock_mhz"], state["sm_clock_max_mhz"]) == (585, 1590)
    assert state["power_limit_w"] == 70 and state["power_draw_w"] == 69.5
    assert state["temperature_c"] == 81
    assert state["throttle_reasons"] == "software power cap, hardware thermal slowdown"
    # GPU 1 found by its PCI bus id (right under CUDA_VISIBLE_DEVICES), not by index
    assert ("by_pci", ("00000000:3B:00.0",)) in nvml.calls
    line = environment.describe_clocks(state)
    assert "SM clock 585 MHz (max 1,590 MHz)" in line and "70 W limit" in line
    env = environment.environment("cuda:1")
    assert env["throttle_reasons"] == state["throttle_reasons"]


def test_clocks_say_why_they_are_unavailable(fake_gpus, monkeypatch):
    assert environment.clocks("cpu")["nvml"] == "unavailable: a CPU"
    fake_gpus(T4)  # pynvml absent
    state = environment.clocks("cuda")
    assert "nvidia-ml-py is not installed" in state["nvml"]
    assert math.isnan(state["sm_clock_mhz"]) and state["throttle_reasons"] == "unavailable"
    assert "unavailable" in environment.describe_clocks(state)
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(fail=("power",)))
    partial = environment.clocks("cuda")
    assert partial["nvml"] == "ok; not available: power_draw_w"
    assert math.isnan(partial["power_draw_w"]) and partial["power_limit_w"] == 70
    monkeypatch.setattr(torch.version, "cuda", None)  # a ROCm build
    assert environment.clocks("cuda")["nvml"] == "unavailable: not an NVIDIA GPU"


def test_throttle_reasons_in_words():
    assert environment.throttle_reasons(0) == "none"
    assert environment.throttle_reasons(0x1) == "idle"
    assert environment.throttle_reasons(0x4 | 0x1000) == "software power cap, other (0x1000)"


def test_clock_columns_reach_the_reference_rows(monkeypatch):
    rows = [{"dtype": "fp16", "bytes": 2e9, "seconds": 1e-3, "achieved_gb_per_s": 2000.0,
             "datasheet_gb_per_s": 320.0}]
    env = {"device": "Tesla T4", "catalogue_entry": "T4", "device_type": "cuda",
           "torch": "2.8", "cuda": "12.8", "date": "2026-12-02", "sm_clock_mhz": 900.0,
           "throttle_reasons": "software power cap", "nvml": "ok"}
    row = reference.tidy(rows, "weight_read", env).iloc[0]
    assert row["sm_clock_mhz"] == 900 and row["throttle_reasons"] == "software power cap"


# --- compiling the int8 step -----------------------------------------------------------------

def test_compile_tunes_with_coordinate_descent_and_starts_from_a_fresh_cache(monkeypatch):
    import torch._inductor.config as inductor_config

    resets, tuning_at_first_call = [], []

    def fake_compile(fn, **kwargs):
        def compiled():
            if not tuning_at_first_call:
                tuning_at_first_call.append(inductor_config.coordinate_descent_tuning)
            return fn()
        return compiled

    monkeypatch.setattr(torch, "compile", fake_compile)
    monkeypatch.setattr(torch._dynamo, "reset", lambda: resets.append(1))
    stack = decoding.DecodeStack(decoding._tiny_spec(), "fp32", "cpu").quantised("int8-dequant")
    row = stack.measure(1, 0, compile=True, min_run_s=0.005)
    stack.measure(2, 0, compile=True, min_run_s=0.005)
    assert row["compiled"] and tuning_at_first_call == [True] and len(resets) == 2
    assert inductor_config.coordinate_descent_tuning is False  # restored after


def test_the_int8_pack_kernel_is_not_predicted_to_double_on_a_gpu(fake_gpus):
    fake_gpus(H100)
    assert math.isnan(decoding.weight_traffic_bytes_per_weight("int8-pack", "fp16", "cuda"))
    assert decoding.weight_traffic_bytes_per_weight("int8-pack", "fp16", "cpu") == 1
    assert "CUDA-core reference kernel" in decoding.KERNELS["int8-pack"]


# --- progress bars and estimates ---------------------------------------------------------------

def test_no_tqdm_warning_in_a_notebook_without_ipywidgets(monkeypatch, capsys):
    ipython = pytest.importorskip("IPython")
    shell = SimpleNamespace(config={"IPKernelApp": {}})
    monkeypatch.setattr(ipython, "get_ipython", lambda: shell)
    monkeypatch.setitem(sys.modules, "ipywidgets", None)   # not installed
    for name in ("tqdm.auto", "tqdm.autonotebook"):        # import afresh, as a kernel would
        monkeypatch.delitem(sys.modules, name, raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        df = bench.sweep([1, 2, 3], lambda i: {"i": i}, "reads", progress=True,
                          estimate_s=1.5)
    assert list(df["i"]) == [1, 2, 3]
    assert "reads: 3 points, about 1.5 s of timing" in capsys.readouterr().out


# --- bad input: clear errors, before any work --------------------------------------------------

def test_bad_arguments_are_refused_before_any_work():
    calls = []

    def fn():
        calls.append(1)

    with pytest.raises(ValueError, match="warmup"):
        bench.time_fn(fn, warmup=10**12, device="cpu")   # hung before
    with pytest.raises(ValueError, match="device"):
        bench.time_fn(fn, device="gpu0")                  # torch's "Invalid device string"
    with pytest.raises(ValueError, match="no CUDA GPU"):
        bench.time_fn(fn, device="cuda")
    with pytest.raises(TypeError, match="fn"):
        bench.time_fn("fn()", device="cpu")
    with pytest.raises(ValueError, match="min_run_s"):
        bench.time_fn(fn, min_run_s=math.nan, device="cpu")
    with pytest.raises(ValueError, match="min_blocks"):
        bench.time_fn(fn, min_blocks=0, device="cpu")
    assert calls == []
    with pytest.raises(ValueError, match="more than"):
        bench.weight_read_bandwidth([1e15], device="cpu", progress=False)
    with pytest.raises(ValueError, match="more than"):
        bench.matmul_tflops([(10**6, 10**6, 10**6)], device="cpu", progress=False)
    with pytest.raises(ValueError, match="more than"):
        decoding.DecodeStack("llama-2-70b", "fp32", "cpu")      # 280 GB of fp32 weights
    with pytest.raises(ValueError, match="more than"):
        decoding.DecodeStack(decoding._tiny_spec(), "fp32", "cpu").inputs(10**6, 4096)  # 2 TB
    with pytest.raises(TypeError, match="shape"):
        bench.matmul_tflops([(4, 4)], device="cpu", progress=False)
    with pytest.raises(KeyError, match="sizes"):
        bench_suite.bench_plan(torch.device("cpu"), "huge")


def test_clocks_are_sampled_while_the_work_runs(fake_gpus, monkeypatch):
    # Lab 2 read the clock after its sweep (idle or boosting again by then). A sampler
    # reads NVML during the work: a T4 boosting at 1,590 MHz for its first sample, then
    # held at 585 MHz by its 70 W cap (reason 0x4) reports a median of 585 MHz, and the
    # power cap in every sample after the first.
    fake_gpus(T4)
    nvml = _fake_pynvml(reasons=0x4)
    readings = iter([1590] + [585] * 10_000)
    nvml.nvmlDeviceGetClockInfo = lambda h, kind: next(readings) if kind == 1 else 5000
    masks = iter([0x0] + [0x4] * 10_000)
    nvml.nvmlDeviceGetCurrentClocksEventReasons = lambda h: next(masks)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    with environment.sample_clocks("cuda", interval_s=1e-3) as clk:
        while len(clk.samples) < 5:  # the work: here, waiting for five samples
            threading_event_wait()
    got = clk.summary()
    n = got["samples"]
    assert n >= 5 and got["nvml"] == "ok"
    assert got["sm_clock_mhz"] == 585 and got["sm_clock_min_mhz"] == 585
    assert got["sm_clock_max_mhz"] == 1590 and got["power_limit_w"] == 70
    assert got["power_draw_w"] == 69.5 and got["temperature_c"] == 81
    assert got["throttle_reasons"] == "software power cap"
    assert got["throttle_shares"] == {"software power cap": pytest.approx((n - 1) / n)}
    line = environment.describe_sampled(got)
    assert "median SM clock 585 MHz" in line and "software power cap (" in line
    # NVML initialised once and shut down once, not once a sample
    assert [c[0] for c in nvml.calls].count("init") == 1
    assert [c[0] for c in nvml.calls].count("shutdown") == 1
    # the peak at the clock the work ran at, not at the clock after it
    assert environment.clock_scaled_peak(65e12, got) == pytest.approx(65e12 * 585 / 1590)


def test_bench_stages_carry_the_clock_sampled_during_their_work(fake_gpus, monkeypatch):
    # A T4 held at 585 MHz by its 70 W cap while a stage's matmuls run, then idle and
    # boosting to 1,590 MHz once they stop. The old rule read the clock after the stage
    # and stamped 1,590 MHz on every row; the rows must carry the 585 of the work.
    fake_gpus(T4)
    nvml = _fake_pynvml(reasons=0x4)
    working = {"now": True}
    nvml.nvmlDeviceGetClockInfo = lambda h, kind: (
        (585 if working["now"] else 1590) if kind == 1 else 5000)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    row = {"dtype": "fp16", "m": 4096, "n": 4096, "k": 4096, "flops": 2 * 4096**3,
           "bytes": 3 * 2 * 4096**2, "intensity": 1365.3, "seconds": 5e-3,
           "achieved_tflops": 27.5, "roofline_tflops": 65.0}

    def work():
        import pandas as pd

        while sum(c[0] == "power" for c in nvml.calls) < 5:  # the work: 5 NVML samples long
            threading_event_wait()
        working["now"] = False   # the work is over: the card boosts again
        return pd.DataFrame([row])

    stage = bench_suite._stage(torch.device("cuda"), work)
    assert stage.clocks["sm_clock_mhz"] == 585 and stage.clocks["samples"] >= 1
    assert stage.clocks["nvml"].startswith("ok; median of")
    env = {"device": "Tesla T4", "catalogue_entry": "T4", "device_type": "cuda",
           "torch": torch.__version__, "cuda": "12.4", "date": "2025-01-01",
           "cpu_threads": 2, "sm_clock_mhz": 1590.0, "sm_clock_max_mhz": 1590.0,
           "memory_clock_mhz": 5001.0, "power_limit_w": 70.0, "power_draw_w": 30.0,
           "temperature_c": 50.0, "throttle_reasons": "none", "nvml": "ok"}
    df = bench_suite.tidy_stages({"matmul": stage}, env)
    assert environment.clocks("cuda")["sm_clock_mhz"] == 1590       # the reading after the work
    assert df["sm_clock_mhz"].tolist() == [585.0]              # the rows: during the work
    assert df["throttle_reasons"].tolist() == ["software power cap"]
    assert df["memory_clock_mhz"].tolist() == [5001.0]         # not sampled: env's reading


def test_sizes_follow_the_free_memory_not_the_total(fake_gpus, monkeypatch):
    # A T4 (15.84e9 B) whose driver reports 15.3e9 B free, 0.2e9 B already in torch's pool
    # (another CUDA context, as under gpu-check, holds the rest). Free for a measurement:
    # 15.3e9 + 0.2e9 - 0.5e9 margin = 15.0e9.
    fake_gpus(T4)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i=None: (15.3e9, 15_843_721_216))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda i=None: 0.2e9)
    cuda = torch.device("cuda")
    assert dev.available_bytes(cuda) == pytest.approx(15.0e9)
    dev.refuse_beyond_memory(14.9e9, cuda, "a pool")          # fits
    with pytest.raises(ValueError, match=r"a pool needs 15.1 GB, more than the 15 GB free"):
        dev.refuse_beyond_memory(15.1e9, cuda, "a pool")      # under the total, over the free
    # The lab stack and its largest batch fit in what is free, with the margin to spare:
    # weights <= 0.4 x 15.0e9 = 6.0e9; the KV cache at batch 512, context 256 is about
    # 1.2x the weights (mistral-7b: 8 KV heads x 128 x 2 (K, V) x 2 B = 4,096 B a token a
    # layer; 512 x 256 x 4,096 = 0.537e9 B a layer against 0.436e9 B of weights a layer).
    spec = decoding.lab_model(decoding.LAB_MODEL, cuda, "fp16")
    weights = (spec.n_params - spec.d_model) * 2
    kv = 512 * 256 * step_model.kv_cache_bytes_per_token(spec, "fp16")
    assert weights <= 0.4 * 15.0e9
    assert weights + kv + dev.GPU_MEMORY_MARGIN_BYTES <= 15.3e9 + 0.2e9
    # the driver cannot say: the total less the margin
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i=None: 1 / 0)
    assert dev.available_bytes(cuda) == pytest.approx(15_843_721_216 - 0.5e9)


def test_the_clock_scaled_peak_divides_by_the_clock_the_peak_is_quoted_at():
    # An H100 SXM quotes 989 TFLOP/s at 1,830 MHz (catalogue boost_clock_hz); NVML's max is
    # 1,980 MHz. At 1,980 MHz the tensor cores do 989e12 x 1980 / 1830 = 1.0701e15 FLOP/s;
    # dividing by NVML's max (the old rule) gave 989e12, 7.6% low.
    state = {"sm_clock_mhz": 1980.0, "sm_clock_max_mhz": 1980.0}
    h100 = hardware.get("H100 SXM")
    assert environment.clock_scaled_peak(989e12, state, h100) == pytest.approx(1.0701e15, rel=1e-4)
    assert environment.clock_scaled_peak(989e12, state, "H100 SXM") == pytest.approx(1.0701e15,
                                                                                 rel=1e-4)
    # a T4 held at 585 MHz by its cap: 65e12 x 585 / 1590 = 23.92e12
    t4_state = {"sm_clock_mhz": 585.0, "sm_clock_max_mhz": 1590.0}
    assert environment.clock_scaled_peak(65e12, t4_state, "T4") == pytest.approx(23.915e12, rel=1e-4)
    # no clock in the row (H100 PCIe): NVML's max stands in, 756e12 x 1500 / 1755
    pcie = {"sm_clock_mhz": 1500.0, "sm_clock_max_mhz": 1755.0}
    assert environment.clock_scaled_peak(756e12, pcie, "H100 PCIe") == pytest.approx(756e12 * 1500
                                                                                 / 1755)
    with pytest.raises(TypeError, match="acc"):
        environment.clock_scaled_peak(989e12, state, 3)


def threading_event_wait():
    import threading

    threading.Event().wait(1e-3)


def test_clock_sampling_degrades_without_a_gpu_or_nvml(fake_gpus):
    with environment.sample_clocks("cpu") as clk:
        pass
    assert clk.summary()["nvml"] == "unavailable: a CPU" and clk.summary()["samples"] == 0
    assert "unavailable: a CPU" in environment.describe_sampled(clk.summary())
    fake_gpus(T4)  # a GPU, but pynvml absent
    with environment.sample_clocks("cuda") as clk:
        pass
    got = clk.summary()
    assert "nvidia-ml-py is not installed" in got["nvml"] and math.isnan(got["sm_clock_mhz"])
    assert math.isnan(environment.clock_scaled_peak(65e12, got))


@pytest.mark.parametrize("kernel", list(decoding.KERNELS))
def test_the_decode_step_never_reads_back_to_the_host(monkeypatch, kernel):
    # graphed() captures DecodeStack.step_fn: a .item(), .cpu(), .numpy() or .tolist()
    # inside it is illegal in a CUDA-graph capture. On the CPU, make each raise while the
    # step runs (the stack and its inputs are built first, where reads are allowed).
    if kernel != "dense" and not decoding.kernel_available(kernel, "cpu"):
        pytest.skip(f"{kernel}: no CPU kernel in this torch")
    stack = decoding.DecodeStack(decoding._tiny_spec(), "fp32", "cpu")
    if kernel != "dense":
        stack = stack.quantised(kernel)
    steps = [stack.step_fn(2, 0), stack.step_fn(2, 8)]  # without and with a KV cache

    def host_read(self, *args, **kwargs):
        raise AssertionError("the decode step read a tensor back to the host")

    for name in ("item", "cpu", "numpy", "tolist"):
        monkeypatch.setattr(torch.Tensor, name, host_read)
    outs = [step() for step in steps]
    monkeypatch.undo()
    assert [tuple(o.shape) for o in outs] == [(2, 64), (2, 64)]
    assert all(bool(torch.isfinite(o).all()) for o in outs)


def test_kernel_available_says_no_when_torch_lacks_the_int8_pack_kernel(monkeypatch):
    # Older torch builds raise NotImplementedError from _weight_int8pack_mm on some devices
    # ("Could not run 'aten::_weight_int8pack_mm' with arguments from the 'CUDA' backend").
    def missing(*args, **kwargs):
        raise NotImplementedError("Could not run 'aten::_weight_int8pack_mm' with arguments "
                                  "from the 'CUDA' backend")

    monkeypatch.setattr(torch, "_weight_int8pack_mm", missing, raising=False)
    assert decoding.kernel_available("int8-pack", "cpu") is False
    assert decoding.kernel_available("dense", "cpu") is True     # the others are untouched


# --- sizes that fit, formats the card has, small shapes not host-bound, sustained clocks -----

def test_default_read_sizes_follow_the_free_memory(fake_gpus, monkeypatch):
    # A T4 with 4.0e9 B free (another process holds the rest): the largest default read
    # is (4.0e9 - 0.5e9 margin) / 8 = 437.5e6 B, 4 KiB aligned, not 15.84e9 / 8 = 1.98e9 B,
    # which refuse_beyond_memory would refuse (its pool is 4x the L2 or more).
    fake_gpus(T4)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i=None: (4.0e9, T4["total_memory"]))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda i=None: 0)
    sizes = bench.default_read_sizes("cuda")
    assert sizes[-1] == int(437.5e6) // 4096 * 4096
    for size in sizes:  # every default size's pool fits what is free
        dev.refuse_beyond_memory(size, torch.device("cuda"), "a read")


def test_a_size_refused_before_allocating_steps_down(fake_gpus, monkeypatch, capsys):
    # A T4 with 6e9 B free: a 12 GB stack is refused before any allocation (a ValueError
    # that is also a MemoryError), so first_that_fits tries the next size down instead of
    # stopping the cell.
    fake_gpus(T4)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i=None: (6.0e9, T4["total_memory"]))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda i=None: 0)
    cuda = torch.device("cuda")

    def build(gb):
        dev.refuse_beyond_memory(gb * 1e9, cuda, f"a {gb} GB stack")
        return f"{gb} GB"

    assert torch_device.first_that_fits([12, 8, 4], build) == ("4 GB", 4)
    out = capsys.readouterr().out
    assert "refused before allocating) at 12; trying the next size down" in out
    with pytest.raises(ValueError, match="a 12 GB stack needs 12 GB, more than the 5.5 GB free"):
        build(12)   # still a ValueError for a caller that asked for that size
    # ... and a sweep stops at a refused size, keeping what it measured
    with pytest.warns(UserWarning, match="out of memory at 12"):
        df = bench.sweep([2, 4, 12, 16], lambda gb: {"gb": build(gb)}, "stacks", progress=False)
    assert list(df["gb"]) == ["2 GB", "4 GB"]


@pytest.mark.parametrize("dtype", ["bf16", "tf32"])
def test_bf16_and_tf32_are_refused_on_a_t4_and_allowed_on_an_h100(fake_gpus, dtype):
    fake_gpus(T4, H100)
    with pytest.raises(ValueError, match=r"compute capability 8.0 or newer; Tesla T4 is sm_75"):
        bench.matmul_tflops([(8, 8, 8)], dtype, "cuda:0", progress=False)
    with pytest.raises(ValueError, match="sm_75"):
        bench.weight_read_bandwidth([MiB], dtype, "cuda:0", progress=False)
    assert dev.target("cuda:1", dtype).dtype == dtype        # an H100 (sm_90) has both
    assert dev.target("cuda:0", "fp16").dtype == "fp16"       # the T4's own format


def test_a_matmul_call_is_one_dispatch_not_three(monkeypatch):
    # The timed call used to index the operand pool (a[i], b[i], c[i]): three tensor
    # dispatches before the matmul, which bound small shapes on an H100. The views are
    # sliced once now: timing indexes no tensor.
    indexed = []
    real_getitem = torch.Tensor.__getitem__

    def fake_time_fn(fn, **kwargs):
        def counting(self, key):
            indexed.append(key)
            return real_getitem(self, key)

        monkeypatch.setattr(torch.Tensor, "__getitem__", counting)
        for _ in range(5):
            fn()
        monkeypatch.setattr(torch.Tensor, "__getitem__", real_getitem)
        return bench.Timing(1e-3, 0.0, 5, 1)

    monkeypatch.setattr(bench, "time_fn", fake_time_fn)
    rows = bench.matmul_tflops([(8, 8, 8), (16, 16, 16)], "fp32", "cpu", progress=False)
    assert indexed == [] and len(rows) == 2


def test_sustained_is_timed_after_running_back_to_back_and_reported_beside_the_burst(
        monkeypatch):
    # A power-capped card: the first (burst) timing finds 1.0 ms a call; after the shape
    # ran back to back its clock settles and the second timing finds 1.6 ms.
    timings = iter([bench.Timing(1.0e-3, 0.0, 5, 1), bench.Timing(1.6e-3, 0.0, 5, 1)])
    sustained = []
    monkeypatch.setattr(bench, "time_fn", lambda fn, **kwargs: next(timings))
    monkeypatch.setattr(bench, "sustain", lambda fn, seconds, device, call_s:
                        sustained.append((seconds, call_s)))
    row = bench.matmul_tflops([(64, 64, 64)], "fp32", "cpu", sustain_s=0.5,
                              progress=False).iloc[0]
    flops = 2 * 64**3
    assert sustained == [(0.5, 1.0e-3)]      # ran 0.5 s after the burst, sized by it
    assert row["achieved_tflops"] == pytest.approx(flops / 1.0e-3 / 1e12)
    assert row["sustained_tflops"] == pytest.approx(flops / 1.6e-3 / 1e12)
    assert row["sustained_fraction_of_peak"] == pytest.approx(
        row["fraction_of_peak"] / 1.6)
    # on a CPU by default: no sustained run, the column NaN
    monkeypatch.undo()
    cpu = bench.matmul_tflops([(8, 8, 8)], "fp32", "cpu", min_run_s=0.001, progress=False)
    assert math.isnan(cpu["sustained_tflops"].iloc[0])
    assert bench.default_sustain_s("cuda", None) == bench.GPU_SUSTAIN_S
    with pytest.raises(ValueError, match="sustain_s"):
        bench.matmul_tflops([(8, 8, 8)], "fp32", "cpu", sustain_s=-1, progress=False)


def test_sustain_runs_for_its_seconds_and_waits_for_the_device(fake_gpus, monkeypatch):
    log = fake_gpus(T4)
    clock = {"now": 0.0}
    monkeypatch.setattr(bench.time, "perf_counter", lambda: clock["now"])
    calls = []

    def fn():  # 1/64 s a call (exact in binary, as every sum below is)
        calls.append(1)
        clock["now"] += 1 / 64

    bench.sustain(fn, 0.75, torch.device("cuda"), 1 / 64)
    # int(0.05 x 64) = 3 calls between waits (3/64 s); 0.75 s is 16 such rounds: 48 calls.
    # The clock (which waits for the GPU) is read once to start and before each round,
    # and once more to stop: 1 + 16 + 1 = 18 waits.
    assert len(calls) == 48 and len(log["synchronize"]) == 18


# --- lab 9: TensorRT and eager torch on one side stream; a failing engine is reported -------

def _lab9_tensorrt_cell():
    import json
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "labs" / "09_compile_fuse_calibrate.ipynb"
    cells = json.loads(path.read_text())["cells"]
    return "".join(next(c for c in cells if c.get("id") == "c18")["source"])


@pytest.mark.parametrize("fails", [False, True])
def test_lab9_times_tensorrt_and_eager_on_one_side_stream_and_reports_a_failure(
        monkeypatch, capsys, fails):
    import contextlib

    import pandas as pd

    from gpuinfer.measure import onnx_runtime

    active = []

    class Stream:  # a non-default stream (torch's legacy default stream is never made so)
        pass

    @contextlib.contextmanager
    def on(stream):
        active.append(stream)
        yield
        active.pop()

    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "stream", on)
    seen = []

    def comparison(*args):
        seen.append(list(active))   # where eager torch and TensorRT both run
        if fails:
            raise RuntimeError("engine build failed: no tactic")
        return pd.DataFrame({"engine": ["eager PyTorch fp32", "TensorRT fp16, strongly typed"],
                             "seconds": [2e-3, 5e-4], "speedup_vs_eager_fp32": [1.0, 4.0]})

    fake = SimpleNamespace(tensorrt_status=lambda: (True, "10.9"), tensorrt_comparison=comparison,
                           TENSORRT_PUBLISHED=onnx_runtime.TENSORRT_PUBLISHED)
    exec(_lab9_tensorrt_cell(), {"onnx_runtime": fake, "torch": torch, "pd": pd,
                                  "env": {"device": "Tesla T4"}, "mlp": None,
                                  "calibration": None, "work": "/tmp"})
    out = capsys.readouterr().out
    assert len(seen) == 1 and len(seen[0]) == 1 and isinstance(seen[0][0], Stream)
    if fails:
        assert "TensorRT skipped: it failed here (RuntimeError: engine build failed" in out
        assert "Published measurements instead" in out and "Sources:" in out
    else:
        assert "TensorRT fp16, strongly typed" in out and "skipped" not in out


def test_each_matmul_shape_is_graded_against_the_peak_at_the_clock_it_ran_at(monkeypatch):
    # A T4 whose first shape ran at 1,590 MHz and whose second, later in the sweep, was
    # held at 795 MHz by its power cap: each row's peak is scaled by its own clock, so the
    # second shape's fraction at its clock is twice its fraction of the datasheet peak.
    clocks = iter([1590.0, 795.0])

    class Sampler:
        def __init__(self, device):
            self.mhz = next(clocks)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def summary(self):
            return {"sm_clock_mhz": self.mhz, "sm_clock_max_mhz": 1590.0}

    t4 = hardware.get("T4")
    monkeypatch.setattr(bench, "sample_clocks", Sampler)
    monkeypatch.setattr(bench, "time_fn", lambda fn, **kw: bench.Timing(1e-3, 0.0, 5, 1))
    rows = bench.matmul_tflops([(64, 64, 64), (128, 128, 128)], "fp16", "cpu",
                               accelerator=t4, sustain_s=0, progress=False)
    assert list(rows["sm_clock_mhz"]) == [1590.0, 795.0]
    # the T4's 65 TFLOP/s is quoted at its 1,590 MHz boost (catalogue boost_clock_hz)
    for (_, r), mhz in zip(rows.iterrows(), (1590.0, 795.0)):
        assert r["fraction_of_peak_at_clock"] == pytest.approx(
            r["achieved_tflops"] * 1e12 / (65e12 * mhz / 1590))
    assert rows["fraction_of_peak_at_clock"].iloc[1] == pytest.approx(
        2 * rows["fraction_of_peak"].iloc[1])
    # on a CPU, no NVML: NaN, not a guess
    monkeypatch.undo()
    cpu = bench.matmul_tflops([(8, 8, 8)], "fp32", "cpu", min_run_s=0.001, progress=False)
    assert math.isnan(cpu["fraction_of_peak_at_clock"].iloc[0])
