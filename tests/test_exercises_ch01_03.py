"""Exercises of chapters 1-3 reached by another route: by hand, from the published figures."""

import pytest

from gpuinfer import exercises, validate
from gpuinfer.exercises import roofline as roofline_exercises

# Llama-2-7B (Touvron et al. 2023, config.json): 32 layers, d_model 4096, MLP 11008,
# vocabulary 32000. Weights a decode step's matmuls read, by hand:
#   per layer 4 x 4096^2 (q, k, v, o) + 3 x 4096 x 11008 (gate, up, down)
#           = 67,108,864 + 135,266,304 = 202,375,168
#   32 layers: 6,476,005,376; LM head 32,000 x 4,096 = 131,072,000
#   total 6,607,077,376 weights (the embedding table is gathered a row at a time).
LLAMA2_7B_MATMUL_WEIGHTS = 32 * (4 * 4096**2 + 3 * 4096 * 11008) + 32000 * 4096
# gpt-fast README (gptfast2023): Llama-2-7B, batch 1, A100-80GB (2,039 GB/s datasheet).
GPT_FAST = {"bf16": 104.9, "int8": 155.6}
A100_BW, T4_BW, A10G_BW = 2039e9, 320e9, 600e9


def test_llama2_7b_matmul_weights_by_hand():
    assert LLAMA2_7B_MATMUL_WEIGHTS == 6_607_077_376


@pytest.mark.parametrize("fmt, bytes_per_weight", [("bf16", 2), ("int8", 1)])
def test_gpt_fast_fraction_is_its_tokens_over_the_weight_read_ceiling(fmt, bytes_per_weight):
    # bf16: 2.039e12 / 13,214,154,752 B = 154.30 tokens/s; 104.9 / 154.30 = 0.680.
    # int8: 2.039e12 / 6,607,077,376 B = 308.61 tokens/s; 155.6 / 308.61 = 0.504.
    # The package also counts the activations and one embedding row (under 0.1% at bf16,
    # about 0.1% at int8, where the weights are half the bytes).
    ceiling = A100_BW / (LLAMA2_7B_MATMUL_WEIGHTS * bytes_per_weight)
    by_hand = GPT_FAST[fmt] / ceiling
    assert roofline_exercises.gpt_fast_fraction(fmt) == pytest.approx(by_hand, rel=2e-3)


def test_each_format_has_its_own_fraction():
    f = roofline_exercises.gpt_fast_fraction
    assert f("fp16") == f("bf16")              # the same bytes a weight
    assert f("int4") < f("int8") < f("bf16")   # unpacking costs time: 0.36 < 0.50 < 0.68
    assert f("int8") == pytest.approx(0.505, abs=0.002)


@pytest.mark.parametrize("bad, error", [("int3", validate.UnknownName), (8, TypeError),
                                        (None, TypeError)])
def test_gpt_fast_fraction_rejects_unknown_formats(bad, error):
    with pytest.raises(error, match="weight_format"):
        roofline_exercises.gpt_fast_fraction(bad)


def test_decision_by_hand_each_format_its_own_fraction():
    # Ceilings from the matmul weights alone (the package adds the activations, ~0.1%):
    #   T4 int8:   0.5046 x 320e9 / 6.607e9 B = 0.5046 x 48.43 = 24.44 tokens/s < 25: misses
    #   T4 fp16:   0.6798 x 320e9 / 13.21e9 B = 0.6798 x 24.22 = 16.46: misses
    #   A10G fp16: 0.6798 x 600e9 / 13.21e9 B = 30.87: meets
    #   A10G int8: 0.5046 x 600e9 / 6.607e9 B = 0.5046 x 90.81 = 45.83: meets, the cheaper
    #   per token at the same 1.006 USD/h: 1.006 / (3600 x 45.83) x 1e6 = 6.097 USD/M.
    frac_bf16 = GPT_FAST["bf16"] / (A100_BW / (2 * LLAMA2_7B_MATMUL_WEIGHTS))
    frac_int8 = GPT_FAST["int8"] / (A100_BW / LLAMA2_7B_MATMUL_WEIGHTS)
    t4_int8 = frac_int8 * T4_BW / LLAMA2_7B_MATMUL_WEIGHTS
    a10g_int8 = frac_int8 * A10G_BW / LLAMA2_7B_MATMUL_WEIGHTS
    assert t4_int8 < roofline_exercises.SLO_TOKENS_PER_S < frac_bf16 * T4_BW / LLAMA2_7B_MATMUL_WEIGHTS
    by_hand = 1.006 / (3600 * a10g_int8) * 1e6
    assert exercises.get("roofline-decision-batch1").answer() == pytest.approx(by_hand, rel=3e-3)
    table = roofline_exercises.decision_table()
    assert not table.loc["T4", "meets SLO"].any() and table.loc["A10G", "meets SLO"].all()


def test_decision_names_the_slip_of_one_fraction_for_every_format():
    # The T4 with int8 at bf16's fraction: 0.6798 x 48.43 = 32.9 tokens/s, 0.526 USD/h:
    # 0.526 / (3600 x 32.9) x 1e6 = 4.44 USD per million tokens.
    result = exercises.check("roofline-decision-batch1", 4.44)
    assert not result and "bf16's fraction" in repr(result)


def test_batching_saturation_slip_is_eight_over_one_request_time():
    # 8 / S(1) instead of 8 / S(8): S(1) = 6.93 ms (memory-bound), S(8) = 11.55 ms
    # (256 tokens, compute-bound), so the slip gives S(8) / S(1) = 1.67 times the answer.
    from gpuinfer.exercises import batching as batching_exercises

    s = batching_exercises.service()
    slip = 8 / s(1)
    result = exercises.check("batching-saturation-8", slip)
    assert not result and "8 / S(1)" in repr(result)
    assert slip / exercises.get("batching-saturation-8").answer() == pytest.approx(
        s(8) / s(1))
