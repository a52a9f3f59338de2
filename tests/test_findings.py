"""gpuinfer.findings: each sentence fed every outcome a machine can produce, so that the
text a page prints never contradicts the table beside it."""

import pytest

from gpuinfer import findings

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


def test_more_work_that_ran_faster_is_noise():
    assert "too noisy to tell" in findings.more_work("context 1024", 1.43)
    assert "within noise" in findings.more_work("context 1024", 0.95)
    assert "extra work shows" in findings.more_work("context 1024", 0.6)


@pytest.mark.parametrize("call, error, words", [
    (lambda: findings.fusion(0, 2.0), ValueError, "bytes_ratio"),
    (lambda: findings.fusion(9, "fast"), TypeError, "time_ratio"),
    (lambda: findings.fusion(9, 2.0, tolerance=1.5), ValueError, "tolerance"),
    (lambda: findings.mbu(-0.1, on_gpu=True), ValueError, "fraction"),
    (lambda: findings.mbu(0.1, on_gpu="yes"), TypeError, "on_gpu"),
    (lambda: findings.more_work("", 1.0), TypeError, "label"),
    (lambda: findings.more_work("x", 0.0), ValueError, "speedup"),
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
