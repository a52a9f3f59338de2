"""gpuinfer.course.findings: each sentence fed every outcome a machine can produce, so that the
text a page prints never contradicts the table beside it."""

import pytest

from gpuinfer.course import findings
from gpuinfer.measure.spread import Spread as S

MiB = 2**20


@pytest.mark.parametrize("time_ratio, words", [
    (8.1, "came within 25% of the byte ratio, 9: time followed bytes"),  # 8.1/9 = 0.90
    (9.0, "time followed bytes"),
    (4.0, "fell short"),            # 4/9 = 0.44: beyond 25%
    (26.2, "exceeded"),             # 26.2/9 = 2.9
    (1.05, "too noisy to tell"),    # within NOISE_RATIO of 1
    (0.8, "too noisy to tell"),     # fused slower: no physics does that
])
def test_fusion_branches_on_the_two_ratios(time_ratio, words):
    assert words in findings.fusion(9.0, time_ratio)


def test_fusion_never_denies_a_prediction_its_numbers_confirm():
    # The review's case: a ratio of 8.1 against 9 must not read "cannot predict".
    text = findings.fusion(9.0, 8.1)
    assert "cannot" not in text and "fell short" not in text


def test_cache_names_the_gap_and_the_rows_no_cache_explains():
    sizes = [0.25 * MiB, 1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB]
    # The review's table: re-reads 7.8x faster at 1 MiB; flushed above re-read at 16 and 64.
    text = findings.cache(sizes, [60, 108, 27, 13, 13], [12, 13.8, 6.2, 16, 16])
    assert "re-reads of 1 MiB ran 7.8x" in text            # 108 / 13.8 = 7.83
    assert "at 16 MiB and 64 MiB the flushed reads came out faster" in text
    assert "those rows are noise" in text and "too noisy" not in text
    # 14 / 16 = 0.875 is within NOISE_RATIO (1 / 1.15 = 0.87) of 1: not named.
    one = findings.cache(sizes, [60, 108, 27, 14, 13], [12, 13.8, 6.2, 16, 16])
    assert "at 64 MiB the flushed" in one and "that row is noise" in one


def test_cache_without_a_gap_says_too_noisy():
    text = findings.cache([MiB, 4 * MiB], [10, 11], [10, 10.5])   # ratios 1.0, 1.05
    assert "too noisy to tell" in text and "served" not in text and "noise from" not in text


def test_cache_refuses_mismatched_tables():
    with pytest.raises(ValueError, match="one length"):
        findings.cache([MiB, 2 * MiB], [1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="reread_gb_per_s"):
        findings.cache([MiB], [-1.0], [1.0])


@pytest.mark.parametrize("fraction, words", [
    (1.3, "above the ceiling"), (0.68, "near the roof"), (0.3, "well below"),
    (0.002, "far below"), (0.0, "far below")])
def test_mbu_comments_every_range(fraction, words):
    assert words in findings.mbu(fraction, on_gpu=True)
    assert "reference CPU" in findings.mbu(fraction, on_gpu=False)
    assert "reference CPU" not in findings.mbu(fraction, on_gpu=True)


def test_mbu_credits_the_memory_when_the_measured_bandwidth_explains_the_step():
    # Chapter 7's CPU run: MBU 4% of the reference desktop, but at the bandwidth the page
    # measured the bytes took 11 of the 18 ms (61%): not "per-operation overhead".
    text = findings.mbu(0.04, on_gpu=False, spread=0.1, bytes_share=S(11 / 18, 0.1))
    assert "61% of its time" in text and "not per-operation overhead" in text
    assert "bound by the cost of each operation" not in text
    # Bytes that take a fifth of the step: then the per-operation cost is the story.
    assert "far below" in findings.mbu(0.04, on_gpu=True, bytes_share=S(0.2, 0.1))
    assert "the bytes take 20%" in findings.mbu(0.3, on_gpu=True, bytes_share=S(0.2, 0.1))
    # Planted inconsistent inputs: an MBU whose timing spread over half its median, and a
    # bytes share that straddles one half.
    assert "Inconclusive" in findings.mbu(0.6, on_gpu=True, spread=0.8)
    assert "Inconclusive" in findings.mbu(0.04, on_gpu=True, bytes_share=S(0.52, 0.1))
    # 0.52 +- 0.1 against the 0.5 band: no "near the roof" (1.04 < 1.15).
    assert "Inconclusive" in findings.mbu(0.52, on_gpu=True, spread=0.1)


def test_more_work_states_only_what_the_spread_and_the_ceiling_allow():
    base = S(18e-3, 0.05)
    # The case: 0.47x as fast for 5% more work, spread 5%: slower than the work
    # explains (18 * 1.05 * 1.15 = 21.7 ms < 38.3 ms), not "the extra work shows".
    text = findings.more_work("context 1024", base, S(18e-3 / 0.47, 0.05), 1.05)
    assert "slower than its extra work explains" in text and "0.47x" in text
    assert "extra work shows" not in text
    # The reruns' 0.89x and 1.04x with 5% extra: inside the spread.
    assert "within noise" in findings.more_work("context 1024", base, S(18e-3 / 0.89, 0.05),
                                                1.05)
    assert "Inconclusive" in findings.more_work("context 1024", base, S(18e-3 / 1.43, 0.05),
                                                1.05)     # faster with more work
    # Twice the work, measured 1.9x the time: as the ceiling predicts.
    shows = findings.more_work("context 8192", base, S(1.9 * 18e-3, 0.05), 2.0)
    assert "extra work shows, about as the ceiling predicts" in shows
    assert "less than the ceiling" in findings.more_work("x", base, S(1.4 * 18e-3, 0.05), 2.0)
    assert "cost less than its bytes" in findings.more_work("x", base, S(18e-3, 0.05), 2.0)
    # A spread over TOO_NOISY: no verdict, whatever the ratio.
    assert "Inconclusive" in findings.more_work("x", S(18e-3, 0.6), S(40e-3, 0.05), 1.05)


def test_first_call_slow_calls_and_threads_are_gated():
    # Later calls 1.0, 1.0, 1.2, 1.0 ms: IQR 0.05 / median 1.0: the first call's spread.
    later = [1e-3, 1e-3, 1.2e-3, 1e-3]
    assert "took 50 times" in findings.first_call([50e-3] + later, S(1e-3, 0.05))
    assert "Inconclusive" in findings.first_call([1.1e-3] + later, S(1e-3, 0.05))
    assert not findings.first_call([50e-3] + later, S(1e-3, 0.6)).endswith(".")
    spiky = [1e-3] * 9 + [64e-3]
    assert "pulled the mean to 7.3x the median" in findings.slow_calls(spiky)  # 73 / 10
    assert "Inconclusive" in findings.slow_calls([1e-3, 1.01e-3, 0.99e-3, 1e-3])
    assert "one thread was faster" in findings.threads(S(1e-3, 0.05), S(3e-3, 0.05), 2)
    assert "1.8x as fast as one" in findings.threads(S(1.8e-3, 0.05), S(1e-3, 0.05), 2)
    assert "Inconclusive" in findings.threads(S(1.1e-3, 0.05), S(1e-3, 0.05), 2)
    assert "one thread" in findings.threads(S(1e-3, 0.05), S(3e-3, 0.05), 1)


def test_cache_reads_each_rows_spread():
    sizes = [MiB, 4 * MiB]
    # 9.7x at 1 MiB, but both timings spread 60%: not a cache the run can show.
    noisy = findings.cache(sizes, [97, 10], [10, 10], reread_spread=[0.6, 0.1],
                           flushed_spread=[0.6, 0.1])
    assert "too noisy to tell" in noisy and "served" not in noisy
    steady = findings.cache(sizes, [22, 10], [10, 10], reread_spread=[0.1, 0.1],
                            flushed_spread=[0.1, 0.1])
    assert "re-reads of 1 MiB ran 2.2x" in steady


@pytest.mark.parametrize("call, error, words", [
    (lambda: findings.fusion(0, 2.0), ValueError, "bytes_ratio"),
    (lambda: findings.fusion(9, "fast"), TypeError, "time_ratio"),
    (lambda: findings.fusion(9, 2.0, tolerance=1.5), ValueError, "tolerance"),
    (lambda: findings.mbu(-0.1, on_gpu=True), ValueError, "fraction"),
    (lambda: findings.mbu(0.1, on_gpu="yes"), TypeError, "on_gpu"),
    (lambda: findings.more_work("", S(1, 0), S(1, 0), 1.0), TypeError, "label"),
    (lambda: findings.more_work("x", 1.0, S(1, 0), 1.0), TypeError, "baseline"),
    (lambda: findings.more_work("x", S(1, 0), S(1, 0), 0.9), ValueError, "predicted_ratio"),
    (lambda: findings.mbu(0.1, on_gpu=True, spread=-1), ValueError, "spread"),
    (lambda: findings.mbu(0.1, on_gpu=True, bytes_share=0.5), TypeError, "bytes_share"),
    (lambda: findings.slow_calls([1.0, 2.0]), ValueError, "calls_s"),
    (lambda: findings.first_call([1.0, -2.0, 1, 1], S(1, 0)), ValueError, "calls_s"),
    (lambda: findings.threads(S(1, 0), S(1, 0), 0), ValueError, "n_threads"),
    (lambda: findings.cache([MiB], [1.0], [1.0], reread_spread=[-1]), ValueError,
     "reread_spread"),
    (lambda: findings.cache([1.0], [1.0], [1.0], gap=1.0), ValueError, "gap"),
])
def test_bad_input_is_named(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_prefill_stalls_are_runs_of_steps_that_decode_nothing():
    import pandas as pd

    steps = pd.DataFrame({
        "start": [0.0, 0.1, 0.2, 0.25, 0.35, 0.45, 0.55],
        "seconds": [0.1, 0.1, 0.05, 0.1, 0.1, 0.1, 0.05],
        "decode_tokens": [0, 0, 3, 0, 0, 0, 4],
        "prefill_tokens": [1024, 1024, 0, 1024, 2048, 1024, 0]})
    got = findings.prefill_stalls(steps)
    # Two stalls: steps 0-1 (2 prompts, 0.2 s) and steps 3-5 (4 prompts, 0.3 s).
    assert got["steps"].tolist() == [2, 3]
    assert got["seconds"].tolist() == pytest.approx([0.2, 0.3])
    assert got["prefill_tokens"].tolist() == [2048, 4096]
    assert got["start"].tolist() == pytest.approx([0.0, 0.25])
    with pytest.raises(ValueError, match="prefill_tokens"):
        findings.prefill_stalls(steps.drop(columns="prefill_tokens"))
    with pytest.raises(TypeError, match="DataFrame"):
        findings.prefill_stalls([1, 2])
