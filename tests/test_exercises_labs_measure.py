"""The measuring labs' decision exercises (gpuinfer.course.exercises.lab01_weight_reads, lab02_matmul_roofline, lab03_decode_batching): the answers
worked by hand from the published figures and example prices, and the slips they name."""

import numpy as np
import pytest

from gpuinfer.course import exercises
from gpuinfer.predict import achievable as achievable_model
from gpuinfer.predict import llm, speculative, validation
from gpuinfer.predict import step_model
from gpuinfer.course.exercises import lab01_weight_reads, lab03_decode_batching


def test_cheapest_gpu_for_one_stream_by_hand():
    # Llama-2-7B's fp16 weights: 32 layers of 4 x 4096^2 (attention) + 3 x 4096 x 11008
    # (MLP) = 202,375,168 weights, plus a 32,000 x 4,096 LM head: 13,214,154,752 bytes;
    # the step's table (llm.decode_step_breakdown) reads these and a few MB more.
    step_bytes = sum(llm.decode_step_breakdown("llama-2-7b", "T4", 1, 0, "fp16")["bytes"])
    weights = 32 * (4 * 4096**2 + 3 * 4096 * 11008) * 2 + 32_000 * 4096 * 2
    assert weights == 13_214_154_752 and step_bytes == pytest.approx(weights, rel=1e-3)
    # The speed test is priced at the end of the 4,096-token context, the stream's slowest
    # step: it also reads the KV cache, 2 (K, V) x 32 layers x 4,096 x 2 bytes = 524,288
    # bytes a token, x 4,096 tokens = 2,147,483,648 bytes (2.15 GB).
    kv = 2 * 32 * 4096 * 2 * 4096
    assert kv == 2_147_483_648
    step_bytes += kv

    fit = achievable_model.FITTED    # its bandwidth 0.85, 13 x 0.5 us a layer, 1.6 ms

    def achievable(bw):  # tokens/s: bytes at 0.85 x bw, 32 x 13 gaps of 0.5 us, 1.6 ms a step
        return 1 / (step_bytes / (fit.bandwidth * bw)
                    + 32 * fit.kernels_per_layer * fit.kernel_gap_s + fit.step_s)

    # T4: 15.367e9 / 272e9 = 56.50 ms + 0.208 + 1.6 = 58.31 ms -> 17.2 tokens/s (its
    # ceiling: 15.367e9 / 320e9 = 48.0 ms -> 20.8 tokens/s). 17.15 and 31.31 are worked at
    # FITTED's present constants: a refit moves them.
    t4 = achievable(320e9)
    assert t4 == pytest.approx(17.15, abs=0.01) and 15 < t4 < 320e9 / step_bytes
    assert lab01_weight_reads.stream_tokens_per_s("T4") == pytest.approx(t4, rel=1e-3)
    # A10G: 15.367e9 / 510e9 = 30.13 ms + 1.81 ms -> 31.3 tokens/s: meets it.
    a10g = achievable(600e9)
    assert a10g == pytest.approx(31.31, abs=0.02)
    assert lab01_weight_reads.stream_tokens_per_s("A10G") == pytest.approx(a10g, rel=1e-3)
    assert lab01_weight_reads.stream_tokens_per_s("H100 SXM") >= 15
    # The A10G (USD 1.006/h) is cheaper than an eighth of a p5 (39.33 / 8 = 4.92/h).
    assert exercises.get("lab-weight-reads-cheapest-gpu").answer() == pytest.approx(1.006)
    # The former rule, gpt-fast's bandwidth share over every weight once, gave the same GPU.
    frac = 1397e9 / 2039e9
    assert lab01_weight_reads.stream_tokens_per_s("T4", frac) == pytest.approx(
        frac * 320e9 / step_model.weight_bytes("llama-2-7b", "fp16"))


def test_cheapest_gpu_decides_on_memory_then_the_interval():
    # Memory first, at vLLM's default 0.92 share less the 1 GiB reserve: the T4's
    # 15,843,721,216 bytes x 0.92 = 14,576,223,519; - 1,073,741,824 - 13,476,831,232 of
    # weights (13,214,154,752 above + 32,000 x 4,096 x 2 embedding + 65 x 4,096 x 2 norms)
    # = 25,650,463 bytes of KV cache, at 2 x 32 layers x 4,096 x 2 bytes = 524,288 a token:
    # 48.9 tokens, not one 4,096-token sequence. With no reserve at all: 1,099,392,287 /
    # 524,288 = 2,097 tokens, still short: the test does not hang on the reserve.
    weights = 13_214_154_752 + 32_000 * 4096 * 2 + 65 * 4096 * 2
    assert weights == step_model.weight_bytes("llama-2-7b", "fp16")
    t4_kv = (15_843_721_216 * 0.92 - 2**30 - weights) / 524_288
    assert lab01_weight_reads.stream_kv_tokens("T4") == pytest.approx(t4_kv, rel=1e-6)
    assert t4_kv == pytest.approx(48.92, abs=0.01)
    assert (15_843_721_216 * 0.92 - weights) / 524_288 < 4096
    # The A10G: 24,146,608,128 x 0.92 - 2**30 - weights = 7,664,306,422 bytes = 14,618
    # tokens, room for three 4,096-token sequences.
    a10g_kv = (24_146_608_128 * 0.92 - 2**30 - weights) / 524_288
    assert lab01_weight_reads.stream_kv_tokens("A10G") == pytest.approx(a10g_kv, rel=1e-6)
    assert 3 * 4096 < a10g_kv < 4 * 4096
    # Then speed, at the low end of the 80% interval of the batch-1 rows' measured /
    # achievable ratios (their 10th and 90th percentiles, every source weighing the same,
    # taken here from the errors table), at the end of the context: the T4's 17.15 tokens/s
    # could fall below 15 (it fails on memory anyway), the A10G's 31.31 clears 15 even at
    # the low end (which sits near 0.63 of it, 19.8).
    e = validation.validation_errors()
    rows = e[e["kind"] == "batch-1"]
    rows = rows.assign(r=rows["measured"] / rows["achievable"],
                       w=1 / rows.groupby("source")["source"].transform("size")).sort_values("r")
    mid = (rows["w"].cumsum() - rows["w"] / 2) / rows["w"].sum()
    lo, hi = np.interp([0.1, 0.9], mid, rows["r"])
    t4 = lab01_weight_reads.stream_tokens_per_s("T4")
    a10g = lab01_weight_reads.stream_tokens_per_s("A10G")
    assert t4 * lo < 15 < t4 * hi and a10g * lo > 15
    assert not lab01_weight_reads.stream_meets("T4")
    assert lab01_weight_reads.stream_meets("A10G") and lab01_weight_reads.stream_meets("H100 SXM")


@pytest.mark.parametrize("given, words", [
    (0.526, "Memory first"), (39.33 / 8, "not the cheapest"), (39.33, "whole 8-GPU")])
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
    kw = dict(acceptance=0.7, k=4, context=1024)
    gain = {b: speculative.decode_speedup("llama-3-8b", "llama-3.2-1b", "H100 SXM", batch=b,
                                          achievable=True, **kw)
            for b in (1, 16, 64, 128, 256, 512)}
    roof = {b: speculative.decode_speedup("llama-3-8b", "llama-3.2-1b", "H100 SXM", batch=b,
                                          **kw, achievable=False) for b in gain}
    # (1 - 0.7**5) / 0.3 = 2.7731 tokens a round; at batch 1 the verify step costs about one
    # plain step, so the gain is below that, and it falls as the batch grows.
    for g in (gain, roof):
        assert 1 < g[1] < (1 - 0.7**5) / 0.3
        assert all(g[a] >= g[b] for a, b in zip(list(g), list(g)[1:]))
        assert g[128] > 1 > g[256]
    # The decision among the listed batches is the same on both; the cut-off is not: the
    # achievable model switches speculation off sooner (144 against the ceiling's 218).
    off = {a: speculative.cutoff_batch("llama-3-8b", "llama-3.2-1b", "H100 SXM",
                                       achievable=a, **kw) for a in (True, False)}
    assert 128 < off[True] < off[False] < 256
    assert lab03_decode_batching.spec_speedups() == gain
    assert exercises.get("lab-decode-speculation-largest-batch").answer() == 128
    assert "below 1" in repr(exercises.check("lab-decode-speculation-largest-batch", 256))


def test_lab_decode_kv_bytes_slips_fire_at_their_values_only():
    name = "lab-decode-kv-bytes-per-sequence"
    right = exercises.get(name).answer()
    assert "8 KV heads" in repr(exercises.check(name, 4 * right))      # 32 heads
    assert "fp32" in repr(exercises.check(name, 2 * right))            # 4 bytes a value
    assert "sparse" not in repr(exercises.check(name, 2 * right))
    assert "keys and the values" in repr(exercises.check(name, right / 2))
    far = repr(exercises.check(name, 1e6))                             # the lab's demo guess
    assert "Hint:" in far and "8 KV heads" not in far


def test_lab_quant_dequant_traffic_is_int4_not_the_printed_int8():
    # The lab's traffic table prints the int8 kernel's 5 B/weight on a GPU: the exercise
    # asks for int4's, 0.5 + 2 + 2, and the int8 figure gets its own hint.
    name = "lab-quant-dequant-traffic"
    assert exercises.get(name).answer() == 4.5
    assert exercises.check(name, 4.5)
    assert "int8 weight's traffic" in repr(exercises.check(name, 5))
    assert "written and read" in repr(exercises.check(name, 2.5))
    assert "Hint:" in repr(exercises.check(name, 3))
