"""Lab 10's verdict (`lab_verdicts.moe_growth`): the branches added after the cold read,
each fed planted `Spread`s whose comparisons are worked by hand against the noise gate
(`compare`: a ratio counts beyond 1 + both spreads + MIN_EFFECT 0.05)."""

import pytest

from gpuinfer.course import lab_verdicts as verdicts
from gpuinfer.measure import spread
from gpuinfer.predict import architectures
from gpuinfer.predict import step_model

S = spread.Spread


def test_outgrows_comment_is_experts_touched():
    # 8 x (1 - (6/8)^16) = 8 x (1 - 0.010023) = 7.92 of 8 Mixtral experts at 16 tokens,
    # against 2 at 1 token: 3.96x the bytes, more than MOE_OUTGROWS 1.5.
    mixtral = architectures.get("mixtral-8x7b")
    assert step_model.experts_touched(mixtral, 16) == pytest.approx(7.92, abs=0.005)
    assert step_model.experts_touched(mixtral, 16) / 2 == pytest.approx(3.96, abs=0.005)


@pytest.mark.parametrize("on_gpu, words", [(True, "per-expert kernel\nlaunches"),
                                           (False, "fixed cost (its small matmuls'")])
def test_launch_bound_growth_is_said_not_called_noise(on_gpu, words):
    # The cold read's Qwen3 layer on an H100: 1 -> 10 (spreads 0.02 each), the twin flat
    # 1 -> 1, the bytes' growth 10.3, at 10% of its roofline.
    # MoE growth 10 (spread 0.04), twin 1.0 (0.04). Outgrew: 10 / (1.5 x 1.0) = 6.67 >
    # 1 + 0.04 + 0.04 + 0.05 = 1.13. Bytes: 10 / (2 x 10.3) = 0.485 < 1 / 1.09 and
    # 10 / (10.3 / 2) = 1.94 > 1.09: the growth is the bytes'. Share: 0.1 / 0.3 = 0.33 <
    # 1 / 1.07: below ROOF_SHARE. So: launch-bound, not inconclusive.
    text = verdicts.moe_growth((S(1, 0.02), S(10, 0.02)), (S(1, 0.02), S(1.0, 0.02)),
                               predicted=10.3, predicted_dense=1.0, of_ceiling=S(0.1, 0.02),
                               on_gpu=on_gpu)
    first = text.split("\n")[0]
    assert first.startswith("The growth follows the touched experts (10.0x against the "
                            "bytes' 10.3x")
    assert "ran at 10% of its roofline" in text and words in text
    assert "Inconclusive" not in text.split("Its dense twin")[0]
    # The twin: 1.0 against FLAT_GROWTH 1.3: 0.77 < 1 / 1.09, flat.
    assert "stayed flat (1.0x)" in text


def test_launch_bound_only_when_the_share_clears_the_noise():
    # At 29% of the roofline with a 0.02 spread: 0.29 / 0.3 = 0.967, inside 1 / 1.07 =
    # 0.935 ... 1.07: the share is not ordered, so the run stays inconclusive.
    text = verdicts.moe_growth((S(1, 0.02), S(10, 0.02)), (S(1, 0.02), S(1.0, 0.02)),
                               predicted=10.3, predicted_dense=1.0, of_ceiling=S(0.29, 0.02),
                               on_gpu=True)
    assert text.startswith("Inconclusive")


def test_did_not_outgrow_names_the_factor():
    # MoE 1.2x (spread 0.1), twin 1.05x (0.1): 1.2 / (1.5 x 1.05) = 0.762 < 1 / (1 + 0.1 +
    # 0.1 + 0.05) = 0.8: grew less than 1.5x its twin's growth, not "no more than" it.
    text = verdicts.moe_growth((S(1, 0.05), S(1.2, 0.05)), (S(1, 0.05), S(1.05, 0.05)),
                               predicted=3.96, predicted_dense=1.0, of_ceiling=S(0.5, 0.05),
                               on_gpu=False)
    assert "grew less than 1.5x its dense twin's growth\n(1.2x against 1.1x)" in text
    assert "no more than" not in text
