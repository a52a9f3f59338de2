"""The labs' takeaways branch on the run: gpuinfer.lab_verdicts, fed each outcome a machine
can produce, gives a different verdict for each (the labs print these)."""

import math

import pytest

from gpuinfer import lab_verdicts as verdicts


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
