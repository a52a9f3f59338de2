"""The shared noise gate (gpuinfer.course.lab_verdicts: Spread, compare, inconclusive): every
expected value is worked out by hand from the rule in the module's docstrings. A ratio of
medians counts only beyond 1 + spread_a + spread_b + MIN_EFFECT; nothing is ordered from
a spread over TOO_NOISY, or from one sample."""

import math

import pytest

from gpuinfer.measure import bench
from gpuinfer.measure import spread
from gpuinfer.measure.spread import Spread, compare


def test_thresholds_are_the_documented_ones():
    # The sentences below are derived with these two numbers; a change must revisit them.
    assert (spread.MIN_EFFECT, spread.TOO_NOISY) == (0.05, 0.5)


def test_spread_of_samples_is_median_and_range_over_median():
    # [1, 2, 3]: median 2, range 2, spread 2 / 2 = 1.
    assert Spread.of([1.0, 3.0, 2.0]) == Spread(2.0, 1.0)
    # [4, 5]: median 4.5 (the mean of the middle two), range 1: spread 1 / 4.5.
    s = Spread.of([4.0, 5.0])
    assert s.median == 4.5 and s.spread == pytest.approx(1 / 4.5)
    # Identical samples: no spread at all.
    assert Spread.of([7e-3] * 4) == Spread(7e-3, 0.0)
    # A 2-D array of repeats is read as one list of samples.
    assert Spread.of([[1.0, 2.0], [3.0, 2.0]]).median == 2.0


def test_one_sample_has_no_spread_to_show():
    assert math.isinf(Spread.of([3.0]).spread)
    assert Spread.of(3.0).median == 3.0


def test_spread_of_a_timing_is_iqr_over_median():
    t = bench.Timing(median_s=2e-3, iqr_s=5e-4, blocks=5, calls_per_block=1)
    assert Spread.of_timing(t) == Spread(2e-3, 0.25)


def test_compare_orders_only_beyond_both_spreads_and_the_minimum_effect():
    # Spreads 0.1 and 0.1: the margin is 1 + 0.1 + 0.1 + 0.05 = 1.25.
    assert compare(Spread(2.0, 0.1), Spread(1.0, 0.1)) == "larger"      # 2 > 1.25
    assert compare(Spread(1.0, 0.1), Spread(2.0, 0.1)) == "smaller"     # 0.5 < 1/1.25
    assert compare(Spread(1.3, 0.1), Spread(1.0, 0.1)) == "larger"      # 1.3 > 1.25
    assert compare(Spread(1.2, 0.1), Spread(1.0, 0.1)) == "inconclusive"  # 1.2 < 1.25
    assert compare(Spread(1.0, 0.1), Spread(1.2, 0.1)) == "inconclusive"  # 0.83 > 0.8
    # No spread at all: only MIN_EFFECT stands between: 1.06 counts, 1.04 does not.
    assert compare(Spread(1.06, 0.0), Spread(1.0, 0.0)) == "larger"
    assert compare(Spread(1.04, 0.0), Spread(1.0, 0.0)) == "inconclusive"
    # Equal medians are never ordered.
    assert compare(Spread(5.0, 0.0), Spread(5.0, 0.0)) == "inconclusive"


def test_compare_is_antisymmetric():
    pairs = [(Spread(3.0, 0.2), Spread(1.0, 0.3)), (Spread(1.1, 0.0), Spread(1.0, 0.01)),
             (Spread(9.0, 0.45), Spread(1.0, 0.5))]
    flip = {"larger": "smaller", "smaller": "larger", "inconclusive": "inconclusive"}
    for a, b in pairs:
        assert compare(b, a) == flip[compare(a, b)]


def test_a_spread_over_too_noisy_orders_nothing():
    # A 100x ratio is still no verdict when one side spread over half its median.
    assert compare(Spread(100.0, 0.51), Spread(1.0, 0.0)) == "inconclusive"
    assert compare(Spread(100.0, 0.0), Spread(1.0, 0.6)) == "inconclusive"
    # At exactly TOO_NOISY the margin rule still decides: 1 + 0.5 + 0 + 0.05 = 1.55.
    assert compare(Spread(100.0, 0.5), Spread(1.0, 0.0)) == "larger"


def test_inconsistent_inputs_give_inconclusive_not_a_verdict():
    # One run (infinite spread) against anything: nothing to order.
    one = Spread.of([1e-3])
    assert compare(one, Spread(1.0, 0.0)) == "inconclusive"
    assert compare(Spread(1.0, 0.0), one) == "inconclusive"
    # Two repeats that disagree by 3x (lab 10's 23.9x vs 6.2x kind of swing): spread 1.2.
    swung = Spread.of([6.2, 23.9])
    assert swung.spread > spread.TOO_NOISY
    assert compare(swung, Spread(1.0, 0.0)) == "inconclusive"


@pytest.mark.parametrize("call, error, words", [
    (lambda: Spread.of([]), ValueError, "samples"),
    (lambda: Spread.of([1.0, -1.0]), ValueError, "samples"),
    (lambda: Spread.of([1.0, 0.0]), ValueError, "samples"),
    (lambda: Spread.of([1.0, math.nan]), ValueError, "samples"),
    (lambda: Spread.of("fast"), TypeError, "samples"),
    (lambda: Spread.of_timing(bench.Timing(0.0, 0.0, 5, 1)), ValueError, "median_s"),
    (lambda: Spread.of_timing(bench.Timing(1.0, -0.1, 5, 1)), ValueError, "iqr_s"),
    (lambda: compare(Spread(0.0, 0.1), Spread(1.0, 0.1)), ValueError, "a.median"),
    (lambda: compare(Spread(1.0, 0.1), Spread(-1.0, 0.1)), ValueError, "b.median"),
    (lambda: compare(Spread(1.0, -0.1), Spread(1.0, 0.1)), ValueError, "a.spread"),
    (lambda: compare(Spread(1.0, 0.1), Spread(1.0, math.nan)), ValueError, "b.spread"),
    (lambda: compare(Spread(math.inf, 0.1), Spread(1.0, 0.1)), ValueError, "a.median"),
    (lambda: spread.inconclusive("x", -0.2), ValueError, "spreads"),
    (lambda: spread.inconclusive("x", math.nan), ValueError, "spreads"),
])
def test_bad_input_names_the_parameter(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_inconclusive_names_what_and_the_largest_spread():
    text = spread.inconclusive("the GEMV against its ceiling", 0.12, 0.7)
    assert "(the GEMV against its ceiling)" in text and "70% of the median" in text
    assert text.startswith("Inconclusive on this run") and "rerun" in text
    # It names no device: a CPU runtime prints it too (a "quiet GPU" there misleads).
    assert "quiet machine" in text and "GPU." not in text
    # No spread given, or an infinite one (a single run): says so instead of a percentage.
    assert "too few runs to tell" in spread.inconclusive("x")
    assert "too few runs to tell" in spread.inconclusive("x", 0.1, math.inf)


def _runs(*runs):
    """A measure() that returns the given runs' rows in turn."""
    it = iter(runs)
    return lambda: next(it)


def test_repeated_keeps_the_median_run_of_each_point_with_its_spread():
    from gpuinfer.measure.lab_measurements import repeated

    run = lambda s0, s1, iqr0, tag: [{"seconds": s0, "iqr_s": iqr0, "run": tag},  # noqa: E731
                                     {"seconds": s1, "iqr_s": 0.0, "run": tag}]
    rows, runs = repeated(_runs(run(1.0, 4.0, 0.0, "a"), run(3.0, 4.0, 0.0, "b"),
                                run(2.0, 4.0, 0.1, "c")), repeats=3)
    assert len(runs) == 3
    # Point 0: seconds 1, 3, 2: the median run is "c" (2 s). Spread: the seconds' range over
    # their median, (3 - 1) / 2 = 1, or the rates' (1, 1/3, 1/2): (1 - 1/3) / (1/2) = 4/3.
    assert rows.loc[0, "run"] == "c" and rows.loc[0, "seconds"] == 2.0
    assert rows.loc[0, "spread"] == pytest.approx(4 / 3)
    # Point 1: 4 s every run: no spread; the within-run IQR wins when larger than the range.
    assert rows.loc[1, "seconds"] == 4.0 and rows.loc[1, "spread"] == 0.0
    rows, _ = repeated(_runs(run(2.0, 1.0, 1.0, "a"), run(2.1, 1.0, 1.0, "b")), repeats=2)
    # Range 0.1 s over 2.05 s (or 1/2 - 1/2.1 over their mean): both under IQR / median, 0.5.
    assert rows.loc[0, "run"] == "a" and rows.loc[0, "spread"] == pytest.approx(0.5)
    # One run: nothing to show a spread with.
    rows, _ = repeated(_runs(run(1.0, 1.0, 0.0, "a")), repeats=1)
    assert math.isinf(rows.loc[0, "spread"])
    with pytest.raises(ValueError, match="same number"):
        repeated(_runs(run(1.0, 1.0, 0.0, "a"), run(1.0, 1.0, 0.0, "b")[:1]), repeats=2)
    with pytest.raises(ValueError, match="repeats"):
        repeated(lambda: [], repeats=0)
    with pytest.raises(TypeError, match="measure"):
        repeated("sweep", repeats=2)


def test_time_repeated_returns_the_median_run_and_its_spread():
    from gpuinfer.measure.lab_measurements import time_repeated

    row = time_repeated(lambda: sum(range(100)), 3, device="cpu", min_run_s=0.001)
    assert row["seconds"] > 0 and row["iqr_s"] >= 0
    assert row["iqr_s"] / row["seconds"] <= row["spread"] < math.inf
    with pytest.raises(ValueError, match="repeats"):
        time_repeated(lambda: None, 0, device="cpu")
