"""Chapter 10's dispatch and decision exercises and lab 10's, each answer reached by hand from
the published configs (arithmetic in the comments), not by calling the function the exercise
registers; chapter 10's other problems are derived in test_exercises_ch10."""

import math

import pytest

from gpuinfer.course import exercises
from gpuinfer.predict import expert_parallel
from gpuinfer import validate
from gpuinfer.course.exercises import chapter10_mixture_of_experts as moe


def test_dispatch_bytes_ep32():
    # 128 tokens x top-8 x 7168 x 1 byte (fp8) = 7,340,032; 31/32 leave the GPU
    assert exercises.get("moe-dispatch-bytes-ep32").answer() == 128 * 8 * 7168 * 31 / 32
    assert 128 * 8 * 7168 * 31 / 32 == 7_110_656


def _decision_table():
    return expert_parallel.moe_options(
        moe.DECISION_MODEL, options=moe.DECISION_LAYOUTS, prices=moe.DECISION_PRICES,
        context=moe.DECISION_CONTEXT, tpot_s=moe.DECISION_TPOT_S,
        n_devices=moe.DECISION_GPUS, formats=moe.DECISION_FORMATS,
        achievable=moe.DECISION_EFFICIENCY)


def test_decision_winner_is_at_its_largest_batch_and_costs_what_the_formula_says():
    table = _decision_table()
    best = table.iloc[0]
    assert (best["GPU"], best["format"], best["layout"]) == ("H200", "fp8", "EP + DP attention")
    b = int(best["batch"])
    # Reached directly with ep_decode_breakdown (not moe_layouts) on the achievable model
    # with the all-to-alls at DeepEP's measured fraction: b meets 30 ms and fits, b + 1 does not.
    def step(batch):
        return expert_parallel.ep_decode_breakdown("qwen3-235b-a22b", "H200", 8, batch, 4096,
                                                   "fp8", attention="dp",
                                                   achievable=moe.DECISION_EFFICIENCY)
    at, past = step(b), step(b + 1)
    assert at["fits"] and at["total_s"] <= 0.030
    assert not (past["fits"] and past["total_s"] <= 0.030)
    # 8 GPUs at 43.26 USD an instance-hour (p5e.48xlarge capacity block) over tokens/s
    usd = 43.26 / (3600 * b / at["total_s"]) * 1e6
    assert exercises.get("moe-decision-qwen3-235b").answer() == pytest.approx(usd, rel=1e-9)
    assert 0.5 < usd < 1.2
    # The ceiling beside it: a shorter step at the same batch, and a larger batch allowed.
    assert best["ceiling_step_ms"] < best["step_ms"]
    ceiling = expert_parallel.moe_max_batch_within("qwen3-235b-a22b", "H200", 8, 4096, 0.030,
                                                   dtype="fp8", achievable=False)
    assert ceiling > b
    # Every other choice costs more, and each stops at its own largest batch.
    assert (table["usd_per_million"].iloc[1:] > usd).all()
    assert (table["batch"] <= table["memory_batch"]).all()


def test_lab_answers():
    # Mixtral, 16 tokens: 8 (1 - 0.75^16) = 8 (1 - 0.010023) = 7.9198
    assert exercises.get("lab-moe-touched-mixtral-16").answer() == pytest.approx(
        8 * (1 - 0.75 ** 16))
    # Qwen3-30B-A3B: 128 (1 - (15/16)^64) / 8 = 128 x 0.98393 / 8 = 15.74
    assert exercises.get("lab-moe-bytes-growth-qwen3").answer() == pytest.approx(
        128 * (1 - (15 / 16) ** 64) / 8)
    # ln(1/2) / ln(15/16) = 0.69315 / 0.064539 = 10.74 -> 11 tokens
    assert exercises.get("lab-moe-half-experts-tokens").answer() == math.ceil(
        math.log(0.5) / math.log(15 / 16)) == 11


def _sig(x, n):
    return round(x, n - 1 - math.floor(math.log10(abs(x))))


@pytest.mark.parametrize("name, rounded", [
    ("moe-b1-step-ms-mixtral-h200", lambda a: _sig(a, 3)),
    ("moe-experts-touched-qwen3-235b-32", lambda a: round(a, 1)),
    ("moe-step-gb-mixtral-4", lambda a: _sig(a, 3)),
    ("moe-rule-batch-mixtral-a100", lambda a: a),
    ("moe-dispatch-bytes-ep32", lambda a: a),
    ("moe-decision-qwen3-235b", lambda a: _sig(a, 2)),
    ("lab-moe-touched-mixtral-16", lambda a: round(a, 2)),
    ("lab-moe-bytes-growth-qwen3", lambda a: _sig(a, 2)),
    ("lab-moe-half-experts-tokens", round),
])
def test_answer_rounded_as_the_question_asks_is_accepted(name, rounded):
    # Each question states its rounding; an answer rounded that way must pass check().
    assert exercises.check(name, rounded(exercises.get(name).answer()))


def test_decision_question_states_the_fp8_matmul_peak():
    q = exercises.get("moe-decision-qwen3-235b").question
    assert "16-bit peak" in q and "1 GiB reserve" in q


def test_decision_prices_are_the_instances_over_their_eight_gpus():
    # AWS capacity blocks (cost.EXAMPLE_PRICES): p5.48xlarge 39.33 USD/h, p5e.48xlarge
    # 43.26 USD/h, 8 GPUs each: 4.916 and 5.4075 USD per GPU-hour.
    assert moe.DECISION_PRICES == pytest.approx({"H100 SXM": 39.33 / 8, "H200": 43.26 / 8})


Q = ("qwen3-235b-a22b", "H200", 8, 4096)
BAD = [
    (expert_parallel.moe_max_batch_within, Q + (0.03,), {"dtype": "fp8", "layout": "EP"},
     validate.UnknownName),
    (expert_parallel.moe_max_batch_within, Q + (-1.0,), {"layout": "TP"}, ValueError),
    (expert_parallel.moe_max_batch_within, Q + ("fast",), {"layout": "TP"}, TypeError),
    (expert_parallel.moe_options, ("qwen3-235b-a22b",),
     dict(prices={"T4x": 1.0}, context=4096, tpot_s=0.03, n_devices=8), validate.UnknownName),
]


@pytest.mark.parametrize("fn, args, kwargs, error", BAD)
def test_bad_inputs(fn, args, kwargs, error):
    with pytest.raises(error):
        fn(*args, **kwargs)
