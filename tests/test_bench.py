
import pytest

torch = pytest.importorskip("torch")

from gpuinfer.measure import bench
from gpuinfer.measure import torch_device
from gpuinfer.measure import environment  # noqa: E402


def test_time_fn_reports_a_median_and_uses_all_threads(monkeypatch):
    seen = []

    def fn():
        seen.append(torch.get_num_threads())
        return torch.ones(1000).sum()

    t = bench.time_fn(fn, warmup=2, min_run_s=0.01, device="cpu")
    assert t.median_s > 0 and t.blocks >= 1 and t.calls_per_block >= 1
    assert set(seen) == {torch.get_num_threads()}


def test_time_fn_measures_more_work_as_slower():
    # The same 256^3 matmul once or 64 times a call: 64x the FLOPs, by construction.
    # One thread: on a shared 2-core machine a second thread can wait a scheduler slice
    # for its core whatever the work (a 32^3 matmul was once timed at 16 ms that way,
    # which made the earlier 32^3-against-512^3 version of this test flaky).
    a = torch.randn(256, 256)

    def once():
        return a @ a

    def sixty_four_times():
        for _ in range(64):
            a @ a

    t1 = bench.time_fn(once, min_run_s=0.02, device="cpu", num_threads=1)
    t64 = bench.time_fn(sixty_four_times, min_run_s=0.02, device="cpu", num_threads=1)
    assert t64.median_s > 8 * t1.median_s


def test_time_fn_rejects_bad_arguments():
    with pytest.raises(ValueError):
        bench.time_fn(lambda: None, min_run_s=0, device="cpu")
    with pytest.raises(ValueError):
        bench.time_fn(lambda: None, warmup=-1, device="cpu")


def test_defaults_on_cpu():
    assert torch_device.default_dtype("cpu") == "fp32"
    sizes = bench.default_read_sizes("cpu")
    assert sizes == sorted(sizes) and sizes[-1] >= torch_device.cache_bytes("cpu")


def test_pool_is_larger_than_the_cache_when_flushing():
    n = bench._pool_slices(1024 * 1024, cache=32 * 2**20, bytes_per_elem=4, flush_cache=True)
    assert n * 4 * 1024 * 1024 >= bench.CACHE_FLUSH_FACTOR * 32 * 2**20
    assert bench._pool_slices(1024, 32 * 2**20, 4, flush_cache=False) == 1


def test_a_server_cpus_large_l3_is_flushed_and_read_beyond():
    # A 480 MiB L3 (a machine this suite ran on): 256 KiB slices need 4 x 480 MiB /
    # 256 KiB = 7,680 of them; the GPU's cap (4,096) would leave the pool at 2.1x the cache.
    MiB = 2**20
    assert bench._pool_slices(64 * 1024, 480 * MiB, 4, True, None) == 7680
    assert bench._pool_slices(64 * 1024, 480 * MiB, 4, True) == bench.MAX_POOL_SLICES == 4096
    # Sizes: cache / 16 = 30 MiB up to twice the cache, one per doubling: 30 .. 960 MiB.
    sizes = bench.read_sizes_for(480 * MiB, 24 * 1024 * MiB, "cpu")
    # (geomspace's rounding, floored to 4 KiB, can land one 4 KiB page short.)
    assert sizes == pytest.approx([m * MiB for m in (30, 60, 120, 240, 480, 960)], abs=4096)
    # A small L3 keeps the 256 MiB top: 32 / 16 = 2 MiB .. 256 MiB, 8 sizes.
    assert bench.read_sizes_for(32 * MiB, 24 * 1024 * MiB, "cpu") == pytest.approx(
        [m * MiB for m in (2, 4, 8, 16, 32, 64, 128, 256)], abs=4096)
    # A CPU read sweep flushes it: every flushed row's pool is at least 4x the cache.
    rows = bench.weight_read_bandwidth([64 * 1024], device="cpu", min_run_s=0.001,
                                       progress=False)
    assert (rows["slices"] * rows["bytes"] >= bench.CACHE_FLUSH_FACTOR
            * torch_device.cache_bytes("cpu")).all()


def test_weight_read_bandwidth_rows():
    df = bench.weight_read_bandwidth([2**20, 8 * 2**20], device="cpu", min_run_s=0.01,
                                     progress=False)
    assert list(df["bytes"]) == [2**20, 8 * 2**20]
    assert (df["achieved_gb_per_s"] > 0).all()
    assert {"device", "dtype", "seconds", "fraction_of_peak", "fits_in_cache"} <= set(df.columns)
    assert (df["achieved_gb_per_s"] == df["bytes"] / df["seconds"] / 1e9).all()
    with pytest.raises(ValueError):
        bench.weight_read_bandwidth([0], device="cpu")


def test_matmul_tflops_rows():
    df = bench.matmul_tflops([(1, 256, 256), (128, 128, 128)], device="cpu",
                             min_run_s=0.01, progress=False)
    assert len(df) == 2
    row = df.iloc[1]
    assert row["flops"] == 2 * 128**3
    assert row["achieved_tflops"] == pytest.approx(row["flops"] / row["seconds"] / 1e12)
    assert row["intensity"] == pytest.approx(2 * 128**3 / (3 * 128 * 128 * 4))


def test_sweep_stops_on_out_of_memory_and_keeps_rows():
    def measure(size):
        if size > 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate")
        return {"size": size}

    with pytest.warns(UserWarning, match="out of memory"):
        df = bench.sweep([1, 2, 3, 4], measure, "test sweep", progress=False)
    assert list(df["size"]) == [1, 2]


def test_sweep_reraises_other_errors():
    def measure(size):
        raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        bench.sweep([1], measure, "test", progress=False)


def test_environment_names_the_device():
    env = environment.environment("cpu")
    assert env["device_type"] == "cpu" and env["catalogue_entry"] == "CPU"
    assert env["torch"] == torch.__version__


def test_time_fn_num_threads_one_reproduces_the_timer_default():
    seen = []

    def fn():
        seen.append(torch.get_num_threads())

    bench.time_fn(fn, warmup=0, min_run_s=0.005, device="cpu", num_threads=1)
    assert set(seen) == {1}
    with pytest.raises(ValueError, match="num_threads"):
        bench.time_fn(fn, device="cpu", num_threads=0)


def test_time_calls_times_each_call_in_order():
    work = iter([False, False, True, False])
    a = torch.randn(1024, 1024)

    def fn():
        # Only the third call does any work: a 1024^3 matmul, 2.1 GFLOP.
        return a @ a if next(work) else None

    s = bench.time_calls(fn, n=4, device="cpu")
    assert s.shape == (4,) and (s > 0).all()
    assert s.argmax() == 2 and s[2] > 10 * max(s[0], s[1], s[3])
    with pytest.raises(ValueError, match="n must"):
        bench.time_calls(fn, n=0, device="cpu")



# --- the labs' measurements: measured roofline, model-shaped decode step, quantised weights

def test_matmul_rows_carry_the_roofline_at_their_intensity():
    df = bench.matmul_tflops([(1, 256, 256)], device="cpu", min_run_s=0.01, progress=False)
    row = df.iloc[0]
    acc = torch_device.accelerator_for("cpu")
    roof = min(acc.peak_flops("fp32"), acc.bandwidth * row["intensity"])
    assert row["roofline_tflops"] == pytest.approx(roof / 1e12)
    assert row["fraction_of_roofline"] == pytest.approx(row["achieved_tflops"] / row["roofline_tflops"])


def test_sweep_estimates_by_hand():
    # A 16384^3 fp16 matmul on an H200: 2 x 16384^3 = 8.80e12 FLOP at 989e12 FLOP/s =
    # 8.894 ms a call. time_fn: 3 warm-up calls + 1 sizing call, then blocks of
    # 0.2 s / 5 = 40 ms: ceil(40 / 8.894) = 5 calls a block, max(5, ceil(0.2 / 0.0445))
    # = 5 blocks = 25 calls. Total 29 calls = 0.258 s.
    call = 2 * 16384**3 / 989e12
    assert bench.matmul_estimate_s([(16384, 16384, 16384)], "fp16", "H200",
                                   min_run_s=0.2, sustain_s=0) == pytest.approx(29 * call)
    # Sustained (a GPU's default, 1 s of back-to-back calls), then timed again without
    # warm-up: 1 sizing call + 25 = 26 calls more.
    assert bench.matmul_estimate_s([(16384, 16384, 16384)], "fp16", "H200",
                                   min_run_s=0.2) == pytest.approx(29 * call + 1.0 + 26 * call)
    # A 1 GiB fp16 read on an H200 (60 MiB L2: pool of 2 slices, 2 reads a replay) at
    # 4.8e12 B/s: 2 x 2^30 / 4.8e12 = 0.4474 ms a call; blocks of ceil(40 / 0.4474) = 90
    # calls, max(5, ceil(0.2 / 0.04027)) = 5 blocks: 4 + 450 calls = 0.2031 s.
    cache = 60 * 2**20
    call = 2 * 2**30 / 4.8e12
    assert bench.read_estimate_s([2**30], "fp16", "H200", cache=cache, min_run_s=0.2) \
        == pytest.approx(454 * call)
    assert bench.timing_estimate_s(float("nan"), 0.2) != bench.timing_estimate_s(float("nan"), 0.2)


class _FakeClock:
    """A clock that only the timed function moves: `call_s` a call."""

    def __init__(self, call_s):
        self.now, self.call_s, self.calls = 0.0, call_s, 0

    def perf_counter(self):
        return self.now

    def fn(self):
        self.calls += 1
        self.now += self.call_s


@pytest.mark.parametrize("call_s, min_run_time, calls, blocks, number", [
    # 20 ms a call, 0.05 s: blocks of 0.05 / 5 = 10 ms hold 1 call; 5 blocks.
    # 3 warm-up + 1 sizing + 5 = 9 calls.
    (0.02, 0.05, 9, 5, 1),
    # 1 ms a call, 0.2 s: blocks of 40 ms = 40 calls, max(5, ceil(0.2 / 0.04)) = 5 blocks:
    # 3 + 1 + 200 = 204 calls.
    (1e-3, 0.2, 204, 5, 40),
    # 3 ms a call, 0.05 s: ceil(10 / 3) = 4 calls (12 ms) a block, 5 blocks: 3 + 1 + 20.
    (3e-3, 0.05, 24, 5, 4),
])
def test_time_fn_runs_as_many_calls_as_its_estimate_says(monkeypatch, call_s, min_run_time,
                                                         calls, blocks, number):
    # The run-time estimate and the timer follow one rule: count the calls on a clock
    # that only the function moves (blocked_autorange's own search ran many more).
    clock = _FakeClock(call_s)
    monkeypatch.setattr(bench, "time", clock)
    t = bench.time_fn(clock.fn, device="cpu", min_run_s=min_run_time)
    assert (clock.calls, t.blocks, t.calls_per_block) == (calls, blocks, number)
    assert t.median_s == pytest.approx(call_s) and t.iqr_s == pytest.approx(0, abs=1e-12)
    assert clock.now == pytest.approx(bench.timing_estimate_s(call_s, min_run_time))


def test_time_fn_resizes_blocks_when_the_sizing_call_was_mostly_overhead(monkeypatch):
    # The first call costs 5 ms (a cold cache, the clock's own synchronisation), the rest
    # 0.1 ms: sized at 2 calls a block (ceil(10 / 5)), the first block lasts 0.2 ms,
    # under half its 10 ms target, so it is discarded and the blocks resized: 100 calls.
    clock = _FakeClock(1e-4)
    real_fn = clock.fn

    def fn():
        real_fn()
        if clock.calls == 4:  # 3 warm-up calls, then the sizing call
            clock.now += 5e-3 - 1e-4

    monkeypatch.setattr(bench, "time", clock)
    t = bench.time_fn(fn, device="cpu", min_run_s=0.05)
    assert t.calls_per_block == 100 and t.blocks == 5
    assert t.median_s == pytest.approx(1e-4)


def test_time_fn_pins_the_calling_thread_to_one_core_and_restores_it(monkeypatch, capsys):
    import os

    calls = []
    if hasattr(os, "sched_setaffinity"):
        before = os.sched_getaffinity(0)
        core = min(before)

        def fn():
            calls.append(os.sched_getaffinity(0))

        bench.time_fn(fn, device=torch.device("cpu"), min_run_s=1e-3, pin_core=core)
        assert calls and all(c == {core} for c in calls)    # warm-up and every timed call
        assert os.sched_getaffinity(0) == before               # restored afterwards
        with pytest.raises(ValueError, match="pin_core must be one of"):
            bench.time_fn(fn, device=torch.device("cpu"), pin_core=max(before) + 1000)
        assert os.sched_getaffinity(0) == before
    with pytest.raises(ValueError, match="pin_core"):
        bench.time_fn(lambda: None, device=torch.device("cpu"), pin_core=-1)
    # An OS without affinity calls: a note, and the timing still runs.
    monkeypatch.delattr(os, "sched_setaffinity", raising=False)
    monkeypatch.setattr(bench, "_PIN_NOTE_SHOWN", [])
    t = bench.time_fn(lambda: None, device=torch.device("cpu"), min_run_s=1e-3, pin_core=0)
    assert t.median_s >= 0 and "cannot pin" in capsys.readouterr().out
