"""The decisions of labs 4 and 7 (gpuinfer.course.exercises.lab04_quantised_weights and lab07_tensor_parallel): the answers worked
by hand, and the slips they name."""

import math

import pytest

from gpuinfer.course import exercises

# Mistral-7B: 7,241,732,096 parameters, 32 layers, d_model 4096, 32,000-token vocabulary,
# 8 KV heads of 128. Its embedding table (32,000 x 4,096) and the 65 norms of 4,096 stay
# in fp16 when the matmul weights are quantised; the LM head is quantised with them.
MISTRAL_PARAMS, TABLE, NORMS = 7_241_732_096, 32_000 * 4096, 65 * 4096
T4_BYTES, RESERVE = 15_843_721_216, 2**30          # the catalogue's T4; 1 GiB
KV_PER_SEQUENCE = 4096 * 2 * 32 * 8 * 128 * 2       # 4,096 tokens, K and V, fp16


def _batch(bytes_per_weight):
    matmuls = MISTRAL_PARAMS - TABLE - NORMS
    weights = matmuls * bytes_per_weight + (TABLE + NORMS) * 2
    return max(0, math.floor((T4_BYTES - RESERVE - weights) / KV_PER_SEQUENCE))


def test_t4_format_by_hand():
    fp16, int8, int4 = _batch(2), _batch(1), _batch(0.5 + 2 / 32)
    assert (fp16, int8, int4) == (0, 13, 19)         # fp16 holds none, int8 13, int4 19
    assert exercises.get("lab-quant-t4-format-batch").answer() == int8  # int8 holds the 8


@pytest.mark.parametrize("given, words", [(19, "int4's"), (15, "reserve"),
                                          (14, "15.84e9"), (3, "8 KV heads")])
def test_t4_format_slips(given, words):
    result = exercises.check("lab-quant-t4-format-batch", given)
    assert not result and words in repr(result)


def test_t4_tp_degree_by_hand():
    # Llama-2-13B fp16: 26.03e9 bytes of weights; a T4 reads 320e9 bytes/s. The shard's
    # weight read alone is 26.03e9 / N / 320e9 s: 40.7 ms on 2 T4s, over the 30 ms
    # objective whatever the all-reduces cost; 20.3 ms on 4. The rest of the step on 4:
    # its KV cache (4,096 x 819,200 B / 4 = 0.84 GB, 2.6 ms) and 81 all-reduces of
    # 10,240 B over PCIe Gen3 x16 (15.75 GB/s each way; NCCL's LL: 6.6 us + 6 steps x
    # 1.0 us + 1.5 x 10,240 B at half of 15.75 GB/s = 14.5 us each, 1.2 ms): about
    # 24 ms, within 30.
    weights, bandwidth = 13_015_864_320 * 2, 320e9
    assert weights / 2 / bandwidth > 0.030
    kv = 4096 * 2 * 40 * 40 * 128 * 2 / 4
    pcie3 = 16 * 8e9 * 128 / 130 / 8                # 16 lanes x 8 GT/s, 128b/130b: B/s
    ll = 6.6e-6 + 6 * 1.0e-6 + 1.5 * 5120 * 2 / (0.5 * pcie3)
    assert weights / 4 / bandwidth + kv / bandwidth + 81 * ll < 0.030
    assert exercises.get("lab-tp-t4-fewest-for-tpot").answer() == 4


@pytest.mark.parametrize("given, words", [(2, "objective, not the memory"),
                                          (1, "cannot hold"), (8, "twice the cost")])
def test_t4_tp_degree_slips(given, words):
    result = exercises.check("lab-tp-t4-fewest-for-tpot", given)
    assert not result and words in repr(result)


def test_t4_format_for_speed_by_hand():
    """Exercise 5: 8 users at 4,096 tokens on a T4, each wanting 25 tokens/s. The step's
    bytes come from llm.decode_step_breakdown (tested in test_llm); the achievable model's
    arithmetic is done here: bytes at 0.85 x 320 GB/s, weight-only matmuls at a further
    0.83 (int8) or 0.74 (int4), 32 x 13 kernel gaps of 0.5 us, 1.6 ms a step."""
    from gpuinfer.predict import achievable, llm
    from gpuinfer.course.exercises import lab04_quantised_weights as labs_parallel

    fit = achievable.FITTED      # 0.85, 0.83 / 0.74, 13 x 0.5 us, 1.6 ms: its constants

    def per_user(fmt, weight_only):
        t = llm.decode_step_breakdown("mistral-7b", "T4", 8, 4096, fmt, kv_dtype="fp16")
        matmul = t.loc["linear", "bytes"] + t.loc["lm_head", "bytes"]
        rest = t.loc["embedding", "bytes"] + t.loc["attention", "bytes"]
        # the KV cache read: 8 x 4,096 tokens x 131,072 bytes = 4,294,967,296
        assert rest == pytest.approx(8 * 4096 * 131_072, rel=2e-3)
        bw = fit.bandwidth * 320e9
        s = (matmul / (weight_only * bw) + rest / bw
             + 32 * fit.kernels_per_layer * fit.kernel_gap_s + fit.step_s)
        return 8 / s / 8

    # int4: 4.036e9 B / 201.3 GB/s = 20.05 ms + 4.301e9 B / 272 GB/s = 15.81 ms
    # + 0.21 + 1.6 ms = 37.67 ms -> 212.4 tokens/s, 26.5 a user (at FITTED's present values).
    wo = dict(fit.weight_only)
    int8, int4 = per_user("int8", wo["int8"]), per_user("int4", wo["int4"])
    assert int4 == pytest.approx(26.54, abs=0.01) and int8 < 25 < int4
    # int8's ceiling (27.95 a user) would pass: the ceiling picks int8, the achievable int4.
    assert labs_parallel.t4_tokens_per_user("int8", False) > 25
    assert labs_parallel.t4_speed_choice(False) == "int8"
    assert labs_parallel.t4_speed_choice() == "int4"
    assert labs_parallel.t4_tokens_per_user("int8") == pytest.approx(int8, rel=1e-3)
    assert exercises.get("lab-quant-t4-format-speed").answer() == pytest.approx(int4, rel=1e-3)
    assert exercises.check("lab-quant-t4-format-speed", 26.5)


@pytest.mark.parametrize("fmt, achievable, words", [
    ("int8", True, "misses 25"), ("int8", False, "int8's ceiling"),
    ("int4", False, "int4's ceiling")])
def test_t4_format_for_speed_slips(fmt, achievable, words):
    from gpuinfer.course.exercises import lab04_quantised_weights as labs_parallel

    given = labs_parallel.t4_tokens_per_user(fmt, achievable)
    result = exercises.check("lab-quant-t4-format-speed", given)
    assert not result and words in repr(result)
    # one fraction for every format: 0.68 x int4's ceiling (38.38) = 26.1, not 26.5
    one = exercises.check("lab-quant-t4-format-speed",
                          0.68 * labs_parallel.t4_tokens_per_user("int4", False))
    assert not one and "own fraction" in repr(one)


def test_t4_format_speed_total_gets_its_hint():
    # decode_tokens_per_s counts the batch's total: int4's 212 tokens/s is 8 x the answer.
    name = "lab-quant-t4-format-speed"
    right = exercises.get(name).answer()
    assert "batch's total" in repr(exercises.check(name, 8 * right))
    assert "batch's total" not in repr(exercises.check(name, 7 * right))
