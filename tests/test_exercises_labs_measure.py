"""The measuring labs' decision exercises (gpuinfer.exercises.labs_measure): the answers
worked by hand from the published figures and example prices, and the slips they name."""

import pytest

from gpuinfer import exercises, llm, speculative


def test_cheapest_gpu_for_one_stream_by_hand():
    weights = llm.get("llama-2-7b").n_params * 2         # bytes a step: every fp16 weight once
    fraction = 1397e9 / 2039e9                           # gpt-fast's share of the A100's 2,039 GB/s
    tokens = {gpu: fraction * bw / weights for gpu, bw in
              (("T4", 320e9), ("A10G", 600e9), ("H100 SXM", 3350e9))}
    assert tokens["T4"] < 20 <= 320e9 / weights          # only the datasheet makes a T4 pass
    assert tokens["A10G"] >= 20 and tokens["H100 SXM"] >= 20
    # The A10G (USD 1.006/h) is cheaper than an eighth of a p5 (39.33 / 8 = 4.92/h).
    assert exercises.get("lab-weight-reads-cheapest-gpu").answer() == pytest.approx(1.006)


@pytest.mark.parametrize("given, words", [
    (0.526, "That is the T4"), (39.33 / 8, "not the cheapest"), (39.33, "whole 8-GPU")])
def test_cheapest_gpu_slips(given, words):
    result = exercises.check("lab-weight-reads-cheapest-gpu", given)
    assert not result and words in repr(result)


def test_cheapest_matmul_job_by_hand():
    h100 = 1e18 / 760.04e12 / 3600 * 39.33 / 8          # USD: hours at the published rate x price
    t4 = 1e18 / 41.91e12 / 3600 * 0.526
    assert h100 < t4
    assert exercises.get("lab-matmul-cheapest-job").answer() == pytest.approx(h100, rel=1e-3)


@pytest.mark.parametrize("given, words", [
    (1e18 / 41.91e12 / 3600 * 0.526, "That is the T4s"),
    (1e18 / 989e12 / 3600 * 39.33 / 8, "dense peak"),
    (1e18 / 1979e12 / 3600 * 39.33 / 8, "sparse figure"),
    (1e18 / 760.04e12 / 3600 * 39.33, "an eighth"),
])
def test_cheapest_matmul_job_slips(given, words):
    result = exercises.check("lab-matmul-cheapest-job", given)
    assert not result and words in repr(result)


def test_speculation_switches_off_between_128_and_256():
    gain = {b: speculative.decode_speedup("llama-3-8b", "llama-3.2-1b", "H100 SXM",
                                          acceptance=0.7, k=4, batch=b, context=1024)
            for b in (1, 16, 64, 128, 256, 512)}
    # (1 - 0.7**5) / 0.3 = 2.7731 tokens a round; at batch 1 the verify step costs about one
    # plain step, so the gain is below that, and it falls as the batch grows.
    assert 1 < gain[1] < (1 - 0.7**5) / 0.3
    assert all(gain[a] >= gain[b] for a, b in zip(list(gain), list(gain)[1:]))
    assert gain[128] > 1 > gain[256]
    assert exercises.get("lab-decode-speculation-largest-batch").answer() == 128
    assert "below 1" in repr(exercises.check("lab-decode-speculation-largest-batch", 256))
