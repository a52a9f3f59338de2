"""The labs' takeaways branch on the run: gpuinfer.course.lab_verdicts, fed each outcome a machine
can produce, gives a different verdict for each (the labs print these)."""

import math

import pytest

from gpuinfer.course import lab_verdicts as verdicts
from gpuinfer.measure import spread
from gpuinfer.measure import decoding


def test_read_share_explains_a_cpu_above_its_one_thread_ceiling():
    # Lab 3 printed "16.3 GB/s (145% of the ceiling)" on a CPU: the note says why.
    above = verdicts.read_share(1.45, on_gpu=False)
    assert "one core" in above and "cache" in above
    assert "L2 cache" in verdicts.read_share(1.1, on_gpu=True)
    assert "Well under" in verdicts.read_share(0.4, on_gpu=False)
    assert "usual" in verdicts.read_share(0.85, on_gpu=True)


def test_batching_verdict_follows_the_measured_knee():
    # A CPU thread: 80% of batch-1 speed kept only to batch 1 or 2, 9.9x at batch 64,
    # the roofline's turn at 24: batching was not free.
    cpu = verdicts.batching(knee=2, top_gain=9.9, turn_achieved=24)
    assert "not for free" in cpu and "9.9x" in cpu
    # A GPU whose bend sits near the roofline's turn: almost free.
    assert "almost free" in verdicts.batching(knee=128, top_gain=60, turn_achieved=200)
    # No throughput gained at all.
    assert "almost nothing" in verdicts.batching(knee=1, top_gain=1.2, turn_achieved=24)
    with pytest.raises(ValueError, match="knee"):
        verdicts.batching(knee=0, top_gain=2, turn_achieved=24)


def test_eager_int8_verdict_follows_the_measured_speedups():
    # Three CPU runs measured int8-dequant 1.81x, 1.21x, 1.29x and int8-pack 0.50-0.61x;
    # another 0.89x. The takeaway must not call the faster one "the trap".
    faster = verdicts.eager_int8(1.81, 0.50)
    assert "as fast as dense" in faster and "cache" in faster and "trap" not in faster
    assert "slower still" in faster
    slower = verdicts.eager_int8(0.89, 0.52)
    assert "trap" in slower
    assert "about cancelled" in verdicts.eager_int8(1.0)
    assert "small format is what pays" in verdicts.eager_int8(0.5, 1.9)


def test_quantised_kernel_verdict_branches():
    assert "cache" in verdicts.quantised_kernel(1.3, 3.76, 0.44)
    assert "as its traffic model predicts" in verdicts.quantised_kernel(0.89, 3.76, 0.44)
    assert "Near the bytes ratio" in verdicts.quantised_kernel(1.7, 2.0, 2.0)
    assert "leaves out" in verdicts.quantised_kernel(0.09, 5.8, math.nan)
    assert "access" in verdicts.quantised_kernel(0.52, 3.76, 4.0)


def test_fusion_verdict_says_what_the_run_measured():
    # "+15.1%: saved time" beyond the noise is more than "a few percent".
    big = verdicts.fusions([("mlp", "GemmActivationFusion", 0.151, 0.05)])
    assert "saved 15.1%" in big and "More than a few percent" in big
    small = verdicts.fusions([("mlp", "GemmActivationFusion", 0.03, 0.01)])
    assert "A few percent at most" in small
    # +41% and +51% for a scalar-multiply and a bias-GELU fusion: the load moved.
    moved = verdicts.fusions([("block", "MatMulScaleFusion", 0.412, 0.13),
                              ("block", "BiasGeluFusion", 0.506, 0.16)])
    assert "load on this machine" in moved and "More than a few percent" not in moved
    noise = verdicts.fusions([("mlp", "GemmActivationFusion", 0.215, 0.335),
                              ("block", "BiasGeluFusion", -0.042, 0.63)])
    assert "too small to measure" in noise and "+21.5%" in noise


def test_levels_verdict_reads_the_spread():
    # 'all' at 0.714x of 'off': noise when the timings spread, real when they do not.
    noisy = verdicts.levels({("block", "off"): (1.0, 1.1), ("block", "all"): (0.714, 0.6)})
    steady = verdicts.levels({("block", "off"): (1.0, 0.02), ("block", "all"): (0.714, 0.03)})
    assert "0.71x" in noisy and "noise" in noisy
    assert "really is slower" in steady
    assert "No optimisation level" in verdicts.levels({("mlp", "all"): (1.38, 0.03)})
    # A steady level divided by a spread 'off' (lab 9's CPU run: off's IQR 46% of its
    # median, basic's 10%): the ratio is noise, not "really slower".
    off_spread = verdicts.levels({("mlp", "off"): (1.0, 0.46), ("mlp", "basic"): (0.69, 0.10)})
    assert "noise" in off_spread and "really is slower" not in off_spread and "46%" in off_spread


def test_int8_speedup_blames_the_row_that_spread():
    # int8 7.7x over fp32 with a steady fp32 row and VNNI: a real gain, not "fp32 disturbed".
    steady = verdicts.int8_speedup(7.7, 0.05, 0.04, vnni=True)
    assert "steady" in steady and "VNNI" in steady and "disturbed" not in steady
    # The int8 rows moved: blame int8, not fp32.
    moved = verdicts.int8_speedup(7.7, 0.05, 0.6, vnni=True)
    assert "int8 timing" in moved and "fp32" not in moved
    assert "fp32 timing" in verdicts.int8_speedup(5.0, 0.5, 0.02, vnni=False)
    assert "no gain" in verdicts.int8_speedup(1.0, 0.02, 0.02, vnni=False)
    assert "less than 4x" in verdicts.int8_speedup(2.5, 0.02, 0.02, vnni=True)


@pytest.mark.parametrize("call, error, words", [
    (lambda: verdicts.read_share(0, on_gpu=False), ValueError, "share"),
    (lambda: verdicts.read_share("fast", on_gpu=True), TypeError, "share"),
    (lambda: verdicts.batching(2, float("nan"), 24), ValueError, "top_gain"),
    (lambda: verdicts.eager_int8(-1.0), ValueError, "dequant_speedup"),
    (lambda: verdicts.quantised_kernel(1.0, 0, 1.0), ValueError, "bytes_ratio"),
    (lambda: verdicts.int8_speedup(2.0, -0.1, 0.0, vnni=True), ValueError, "fp32_spread"),
])
def test_bad_input_names_the_parameter(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_decode_stack_is_two_gib_or_an_eighth_of_memory():
    # A T4: 15,843,721,216 / 8 = 1,980,465,152 bytes < 2 GiB; an H100 80GB: 2 GiB.
    assert decoding.decode_stack_bytes("T4") == 15_843_721_216 / 8
    assert decoding.decode_stack_bytes("H100 SXM") == 2 * 2**30
    # The T4's floor: 1.98e9 B / 320 GB/s = 6.19 ms (a 2 GiB stack would be 6.71 ms).
    t4 = decoding.stack_step_s(1_980_465_152, 118, 320e9, achievable=False)
    assert t4 == pytest.approx(6.189e-3, rel=1e-3)


def test_stack_step_on_the_achievable_model_by_hand():
    # 1 GB over 100 kernels at 1 TB/s: ceiling 1 ms; achievable 1 / 0.85 = 1.1765 ms
    # + 100 x 0.5 us = 1.2265 ms; an engine adds 1.6 ms: 2.8265 ms (0.85, 0.5 us and
    # 1.6 ms are achievable.FITTED's bandwidth, kernel_gap_s and step_s, read below).
    from gpuinfer.predict import achievable

    fit = achievable.FITTED
    loop = 1e9 / (fit.bandwidth * 1e12) + 100 * fit.kernel_gap_s
    assert decoding.stack_step_s(1e9, 100, 1e12, achievable=False) == pytest.approx(1e-3)
    assert decoding.stack_step_s(1e9, 100, 1e12) == pytest.approx(loop, rel=1e-4)
    assert decoding.stack_step_s(1e9, 100, 1e12, engine=True) == pytest.approx(
        loop + fit.step_s, rel=1e-4)
    assert achievable.LOOP.step_s == 0 and achievable.LOOP.bandwidth == fit.bandwidth
    with pytest.raises(ValueError, match="weight_bytes"):
        decoding.stack_step_s(-1, 100, 1e12)


def test_against_achievable_branches_on_the_run():
    assert "for its shape" in verdicts.against_achievable(0.5, 0.6, on_gpu=False)
    assert "Above the ceiling" in verdicts.against_achievable(1.2, 1.4, on_gpu=True)
    assert "as well as an engine" in verdicts.against_achievable(0.8, 0.95, on_gpu=True)
    assert "in reach" in verdicts.against_achievable(0.6, 0.7, on_gpu=True)
    assert "Far below" in verdicts.against_achievable(0.2, 0.25, on_gpu=True)


def test_kernel_failure_says_oom_or_names_the_error():
    import torch

    oom = decoding.kernel_failure("int8-dequant", torch.cuda.OutOfMemoryError("CUDA out of memory"))
    assert "out of GPU memory" in oom and "carry on" in oom
    bug = decoding.kernel_failure("int4-unpack", RuntimeError("operation not permitted\n"
                                                              "when stream is capturing"))
    assert bug.startswith("int4-unpack: FAILED (RuntimeError: operation not permitted when")
    assert "out of" not in bug


def test_knee_batch_where_batching_stops_being_free():
    # Mistral-7B at context 256: each sequence keeps 80% of its batch-1 speed to batch 64
    # on a T4, on the ceiling and on the achievable model alike (powers of two).
    assert verdicts.knee_batch("mistral-7b", "T4", 256, achievable=False) == 64
    assert verdicts.knee_batch("mistral-7b", "T4", 256) == 64
    # share 1.0: any slow-down stops it at batch 1
    assert verdicts.knee_batch("mistral-7b", "T4", 256, share=1.0) == 1


# --- labs 1, 2 and 10: verdicts behind the noise gate (planted inconsistent inputs give
# the inconclusive branch; each conclusion only where compare() orders the numbers) ------

S = spread.Spread


def test_gemv_ceiling_reads_the_spread():
    # Lab 2 printed "served from a cache" for a CPU GEMV at 145% whose pool was 4x the L3:
    # the CPU ceiling is one core's share, a convention.
    above = verdicts.gemv_ceiling(S(1.45, 0.1), on_gpu=False)
    assert "not from a cache" in above and "convention" in above
    assert "served" in verdicts.gemv_ceiling(S(1.45, 0.1), on_gpu=False,
                                             pool_beyond_cache=False)
    assert "catalogue" in verdicts.gemv_ceiling(S(1.45, 0.1), on_gpu=True)
    # 108% +- 10%: not beyond the ceiling's noise, but clearly above 60% (1.8 > 1.15).
    assert "At or near" in verdicts.gemv_ceiling(S(1.08, 0.1), on_gpu=True)
    assert "Well below" in verdicts.gemv_ceiling(S(0.3, 0.1), on_gpu=False)
    # 65% +- 10%: within 1.15x of the 60% line: no verdict.
    assert "Inconclusive" in verdicts.gemv_ceiling(S(0.65, 0.1), on_gpu=False)
    # The 145% / 50% pair the issue saw on two runs: spread 0.95 / 0.975 > TOO_NOISY.
    assert "Inconclusive" in verdicts.gemv_ceiling(S.of([1.45, 0.5]), on_gpu=False)


def test_measured_ridge_moves_only_beyond_the_noise():
    # Datasheet ridge 8: 7.1 is within 1.5x (7.1 / 5.33 = 1.33 > 1.15; 7.1 / 12 < 1/1.15).
    assert "within 1.5x" in verdicts.measured_ridge(S(7.1, 0.1), 8.0)
    assert "moved left" in verdicts.measured_ridge(S(2.6, 0.1), 8.0)     # 0.49 < 1/1.15
    assert "moved right" in verdicts.measured_ridge(S(20.0, 0.1), 8.0)
    # The two runs, 2.6 and 7.1, as one measurement: spread 93%: inconclusive.
    both = verdicts.measured_ridge(S.of([2.6, 7.1]), 8.0)
    assert "Inconclusive" in both and "93%" in both
    # 6.0 +- 0.1 is 1.125x the lower edge (5.33): inside the margin 1.15.
    assert "Inconclusive" in verdicts.measured_ridge(S(6.0, 0.1), 8.0)


def test_decode_view_says_flat_or_rising_only_beyond_the_noise():
    ms = [1, 2, 4, 8, 16]
    rise = [S(1.0, 0.05), S(1.1, 0.05), S(1.2, 0.05), S(3.0, 0.05), S(6.0, 0.05)]
    text = verdicts.decode_view(ms, rise, ridge_rows=16)        # half the ridge: 8
    assert "rose well before" in text and "batch 8 took 3.0x" in text
    flat = [S(1.0, 0.05), S(1.0, 0.05), S(1.1, 0.05), S(1.2, 0.05), S(6.0, 0.05)]
    text = verdicts.decode_view(ms, flat, ridge_rows=16)        # 1.2 / 1.5 < 1 / 1.15
    assert "Flat about as far" in text and "batch 8 took 1.2x" in text
    # A point inside the margin of 1.5x, or a noisy batch-1 time: no verdict.
    edge = flat[:3] + [S(1.45, 0.05), flat[4]]
    assert "Inconclusive" in verdicts.decode_view(ms, edge, ridge_rows=16)
    noisy = [S(1.0, 0.6)] + rise[1:]
    assert "Inconclusive" in verdicts.decode_view(ms, noisy, ridge_rows=16)
    assert "cannot say" in verdicts.decode_view(ms, rise, ridge_rows=2)
    with pytest.raises(ValueError, match="batches"):
        verdicts.decode_view([2, 4], rise[:2], ridge_rows=16)
    with pytest.raises(TypeError, match="times"):
        verdicts.decode_view([1, 2], [1.0, 2.0], ridge_rows=16)


def test_largest_read_names_the_threads_and_the_convention():
    # Lab 1 with two threads printed "one CPU core drew more than its eighth".
    two = verdicts.largest_read(S(1.05 * 1.3, 0.1), on_gpu=False, threads=2)
    assert "2 cores drew more" in two and "2 of the reference desktop's 8 cores'" in two
    assert "convention" in two and "one CPU core" not in two
    assert "1 core drew" in verdicts.largest_read(S(1.45, 0.1), on_gpu=False)
    assert "catalogue entry" in verdicts.largest_read(S(1.45, 0.1), on_gpu=True)
    assert "STREAM" in verdicts.largest_read(S(0.85, 0.1), on_gpu=True)     # 0.85/0.6 > 1.15
    low = verdicts.largest_read(S(0.38, 0.1), on_gpu=False, threads=2)
    assert "Well below" in low and "2 cores keep too few" in low
    # 105% +- 10% (the run): not beyond the ceiling; clearly above 60%.
    assert "STREAM" in verdicts.largest_read(S(1.05, 0.1), on_gpu=False)
    assert "Inconclusive" in verdicts.largest_read(S(0.66, 0.1), on_gpu=False)
    assert "Inconclusive" in verdicts.largest_read(S(2.0, 0.6), on_gpu=False)


def test_cache_flattery_only_beyond_the_noise():
    # The two runs: 2.2x and 9.7x. Steady, both are the cache's speed.
    assert "up to 9.7x" in verdicts.cache_flattery([S(2.2, 0.1), S(9.7, 0.1)])
    assert "up to 2.2x" in verdicts.cache_flattery([S(2.2, 0.1), S(9.7, 0.7)])
    # 1.6x +- 20%: within the margin of 1.5x (1.6 / 1.5 = 1.07 < 1.25).
    assert "Inconclusive" in verdicts.cache_flattery([S(1.6, 0.2), S(1.1, 0.05)])
    assert "barely flattered" in verdicts.cache_flattery([S(1.1, 0.1), S(1.0, 0.05)])
    assert "No buffer" in verdicts.cache_flattery([])


def test_step_vs_read_and_batch_growth_are_gated():
    assert "not from a cache" in verdicts.step_vs_read(S(1.4, 0.1), on_gpu=False)
    assert "A weight read" in verdicts.step_vs_read(S(1.0, 0.05), on_gpu=False)
    assert "launching" in verdicts.step_vs_read(S(0.3, 0.05), on_gpu=True)
    assert "Inconclusive" in verdicts.step_vs_read(S(0.75, 0.1), on_gpu=False)
    # The batch 16 at 3.1x: not flat; well under 16 / 2: batching paid.
    assert "Not flat" in verdicts.batch_growth(S(3.1, 0.2), 16, 24)
    assert "A flat line" in verdicts.batch_growth(S(1.02, 0.1), 16, 24)   # 1.3/1.02 > 1.15
    assert "grew about as fast" in verdicts.batch_growth(S(14.0, 0.1), 16, 24)
    assert "Inconclusive" in verdicts.batch_growth(S(1.35, 0.1), 16, 24)
    assert "Inconclusive" in verdicts.batch_growth(S(3.1, 0.9), 16, 24)


def test_against_achievable_with_a_spread_is_gated():
    assert "as well as an engine" in verdicts.against_achievable(0.8, 0.95, on_gpu=True,
                                                                 spread=0.0)
    assert "Inconclusive" in verdicts.against_achievable(0.8, 0.92, on_gpu=True, spread=0.1)
    assert "Above the ceiling" in verdicts.against_achievable(1.3, 1.5, on_gpu=True,
                                                              spread=0.1)
    assert "Inconclusive" in verdicts.against_achievable(0.3, 0.4, on_gpu=True, spread=0.7)
    assert "for its shape" in verdicts.against_achievable(0.3, 0.4, on_gpu=False, spread=0.7)


def test_moe_growth_reads_both_layers_beyond_the_noise():
    steady = dict(predicted=3.6, predicted_dense=1.0, on_gpu=False)
    # 3.0x against the bytes' 3.6x, twin 1.1x (1.82 > 1.25 x its 1.5x), at 50% of the roof.
    text = verdicts.moe_growth((S(1, 0.05), S(3.0, 0.05)), (S(1, 0.05), S(1.1, 0.05)),
                               of_ceiling=S(0.5, 0.05), **steady)
    assert "As predicted" in text and "stayed flat (1.1x)" in text
    more = verdicts.moe_growth((S(1, 0.05), S(20, 0.05)), (S(1, 0.05), S(1.1, 0.05)),
                               of_ceiling=S(0.5, 0.05), **steady)
    assert "Grown more" in more and "20.0x against the bytes' 3.6x" in more
    flat = verdicts.moe_growth((S(1, 0.05), S(1.2, 0.05)), (S(1, 0.05), S(1.1, 0.05)),
                               of_ceiling=S(0.5, 0.05), **steady)
    assert "Not the predicted shape" in flat
    # The Qwen layer, 6.2x on one run and 23.9x on the next, as one measurement.
    swung = verdicts.moe_growth((S(1, 0.05), S.of([6.2, 23.9])), (S(1, 0.05), S(1.1, 0.05)),
                                of_ceiling=S(0.5, 0.05), **steady)
    assert swung.startswith("Inconclusive")
    # The dense twin at 4.4x while reading the same bytes: arithmetic, said so.
    twin = verdicts.moe_growth((S(1, 0.05), S(3.0, 0.05)), (S(1, 0.05), S(4.4, 0.05)),
                               of_ceiling=S(0.5, 0.05), predicted=3.6, predicted_dense=1.9,
                               on_gpu=False)
    assert "4.4x is the cost of\ncomputing more rows" in twin and "grows it 1.9x" in twin
    assert "Inconclusive on this run (the dense twin" in verdicts.moe_growth(
        (S(1, 0.05), S(3.0, 0.05)), (S(1, 0.05), S(1.35, 0.05)), of_ceiling=S(0.5, 0.05),
        **steady)


def test_above_roofline_only_when_clearly_above():
    assert "convention" in verdicts.above_roofline(S(1.5, 0.1), on_gpu=False)
    assert "catalogue" in verdicts.above_roofline(S(1.5, 0.1), on_gpu=True)
    assert "Inconclusive" in verdicts.above_roofline(S(1.05, 0.1), on_gpu=False)
    # A few percent over with a tight spread (lab 10 printed "Inconclusive ... the spread is
    # 4%" for it): at the roofline, not a call to rerun. 1.03 - 1 = 0.03 <= MIN_EFFECT 0.05.
    at = verdicts.above_roofline(S(1.03, 0.04), on_gpu=False)
    assert at.startswith("At its roofline") and "103%" in at and "Inconclusive" not in at
    # 1.08 with a 4% spread: over by more than MIN_EFFECT yet within 1 + 0.04 + 0.05: still
    # inconclusive.
    assert "Inconclusive" in verdicts.above_roofline(S(1.08, 0.04), on_gpu=False)
    assert verdicts.above_roofline(S(0.8, 0.1), on_gpu=False) == ""


def test_copies_beyond_cache_fill_four_caches():
    from gpuinfer.measure import bench, torch_device
    from gpuinfer.measure.lab_measurements import copies_beyond_cache

    cache = torch_device.cache_bytes("cpu")
    assert bench.CACHE_FLUSH_FACTOR == 4
    assert copies_beyond_cache(cache, "cpu") == 4               # 4 x cache / cache
    assert copies_beyond_cache(0.3 * cache, "cpu") == 14        # ceil(4 / 0.3) = 14
    assert copies_beyond_cache(10 * cache, "cpu") == 1
    assert copies_beyond_cache(1.0, "cpu") == 64                # capped
    with pytest.raises(ValueError, match="nbytes"):
        copies_beyond_cache(0, "cpu")
