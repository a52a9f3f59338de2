"""The exercises of chapter 10 (Mixtures of experts) and lab 10, each answer reached by
hand from the published configs (arithmetic in the comments), not by calling the function
the exercise registers."""

import math

import pytest

from gpuinfer import exercises, expert_parallel, llm, validate
from gpuinfer.exercises import chapter10_mixture_of_experts as moe

# DeepSeek-V3's config.json: hidden 7168, 61 layers (first 3 dense, d_ff 18432), vocab
# 129280, 256 routed experts + 1 shared of width 2048, top-8; MLA: q_lora_rank 1536,
# kv_lora_rank 512, qk_rope 64, qk_nope 128, v_head 128, 128 heads.
D = 7168
ATTN = (D * 1536                        # q down-projection: 11,010,048
        + 1536 * 128 * (128 + 64)       # q up: 37,748,736
        + D * (512 + 64)                # kv down (+ RoPE key): 4,128,768
        + 512 * 128 * (128 + 128)       # kv up (keys and values): 16,777,216
        + 128 * 128 * D)                # output: 117,440,512  -> 187,105,280 a layer
EXPERT = 3 * D * 2048                   # 44,040,192
ROUTER = D * 256                        # 1,835,008
ALWAYS = 61 * ATTN + 3 * 3 * D * 18432  # 11,413,422,080 + 1,189,085,184
EMBED = 129280 * D                      # 926,679,040, once for the input, once the head
NORMS = 61 * (2 * D + 1536 + 512) + D   # 1,006,592


def test_active_fraction_deepseek():
    total = ALWAYS + 58 * (256 * EXPERT + EXPERT + ROUTER) + 2 * EMBED + NORMS
    active = ALWAYS + 58 * (8 * EXPERT + EXPERT + ROUTER) + 2 * EMBED + NORMS
    assert total == 671_026_404_352 and active == 37_552_282_624   # 671B / 37.6B
    assert exercises.get("moe-active-fraction-deepseek").answer() == pytest.approx(
        active / total, rel=1e-12)                                  # 0.05596
    assert exercises.check("moe-active-fraction-deepseek", 0.0560)


def test_experts_touched_deepseek_64():
    # 256 x (1 - (248/256)^64): (0.96875)^64 = exp(64 ln 0.96875) = exp(-2.0320) = 0.1311
    expected = 256 * (1 - (248 / 256) ** 64)
    assert expected == pytest.approx(222.44, abs=0.01)
    assert exercises.get("moe-experts-touched-deepseek-64").answer() == pytest.approx(expected)
    assert not exercises.check("moe-experts-touched-deepseek-64", 256)


def test_step_gb_deepseek_64_in_fp8():
    touched = 256 * (1 - (248 / 256) ** 64)
    # fp8: one byte a matmul weight; the always-read matmuls (attention, dense MLPs, 58
    # shared experts) and the LM head, the touched experts, and the routers in bf16.
    fixed = ALWAYS + 58 * EXPERT + EMBED                 # 16,083,517,440 bytes
    routed = 58 * touched * EXPERT                       # 568.19e9 bytes
    routers = 58 * ROUTER * 2                            # 212,860,928 bytes
    expected = (fixed + routed + routers) / 1e9          # 584.49 GB
    assert expected == pytest.approx(584.49, abs=0.01)
    assert exercises.get("moe-step-gb-deepseek-64").answer() == pytest.approx(expected, rel=1e-9)


def test_compute_bound_mixtral_h100_by_scanning_the_experts_row():
    # Mixtral: d 4096, experts of 14336, 8 experts top-2, 32 layers. H100 SXM: 989 TFLOP/s
    # dense fp16, 3.35 TB/s. The experts' FLOPs: 2 k B x 32 x 3 x 4096 x 14336; bytes: the
    # touched experts' weights (2 B each) and each routed token's activations at its k
    # experts (in and out 2 x 4096, 3 x 14336 intermediates, 2 B each).
    pe, k, E = 3 * 4096 * 14336, 2, 8
    def compute_bound(b):
        flops = 2 * k * b * 32 * pe
        nbytes = (E * (1 - (1 - k / E) ** b) * 32 * pe * 2
                  + b * k * 32 * (2 * 4096 + 3 * 14336) * 2)
        return flops / 989e12 > nbytes / 3.35e12
    first = next(b for b in range(1, 10_000) if compute_bound(b))
    ridge_ek = 989e12 / 3.35e12 * E / k                 # 1,180.9: ridge x E/k
    assert 1.0 < first / ridge_ek < 1.15                # the activations push it up: 1,292
    assert exercises.get("moe-compute-bound-mixtral-h100").answer() == first


def test_dispatch_bytes_ep32():
    # 128 tokens x top-8 x 7168 x 1 byte (fp8) = 7,340,032; 31/32 leave the GPU
    assert exercises.get("moe-dispatch-bytes-ep32").answer() == 128 * 8 * 7168 * 31 / 32
    assert 128 * 8 * 7168 * 31 / 32 == 7_110_656


def _decision_table():
    return expert_parallel.moe_options(
        moe.DECISION_MODEL, moe.DECISION_PRICES, moe.DECISION_CONTEXT, moe.DECISION_TPOT_S,
        moe.DECISION_GPUS, formats=moe.DECISION_FORMATS, layouts=moe.DECISION_LAYOUTS)


def test_decision_winner_is_at_its_largest_batch_and_costs_what_the_formula_says():
    table = _decision_table()
    best = table.iloc[0]
    assert (best["GPU"], best["format"], best["layout"]) == ("H200", "fp8", "EP + DP attention")
    b = int(best["batch"])
    # Reached directly with ep_decode_breakdown (not moe_layouts) on the achievable model:
    # b meets 30 ms and fits, b + 1 does not.
    def step(batch):
        return expert_parallel.ep_decode_breakdown("qwen3-235b-a22b", "H200", 8, batch, 4096,
                                                   "fp8", attention="dp", achievable=True)
    at, past = step(b), step(b + 1)
    assert at["fits"] and at["total_s"] <= 0.030
    assert not (past["fits"] and past["total_s"] <= 0.030)
    # 8 GPUs at 43.26 USD an instance-hour (p5e.48xlarge capacity block) over tokens/s
    usd = 43.26 / (3600 * b / at["total_s"]) * 1e6
    assert exercises.get("moe-decision-qwen3-235b").answer() == pytest.approx(usd, rel=1e-9)
    assert 0.2 < usd < 0.8
    # The ceiling beside it: a shorter step at the same batch, and a larger batch allowed.
    assert best["ceiling_step_ms"] < best["step_ms"]
    ceiling = expert_parallel.moe_max_batch_within("qwen3-235b-a22b", "H200", 8, 4096, 0.030,
                                                   dtype="fp8")
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


def test_slips_get_their_hints():
    r = exercises.check("moe-active-fraction-deepseek", 8 / 256)
    assert not r and "k/E" in repr(r)
    r = exercises.check("moe-step-gb-deepseek-64", (ALWAYS + 58 * EXPERT + EMBED
                                                   + 58 * 8 * EXPERT + 58 * ROUTER * 2) / 1e9)
    assert not r and "batch-1" in repr(r)
    r = exercises.check("moe-compute-bound-mixtral-h100",
                        llm.compute_bound_batch("mixtral-8x7b", "H100 SXM") / 4)
    assert not r and "dense" in repr(r)


def _sig(x, n):
    return round(x, n - 1 - math.floor(math.log10(abs(x))))


@pytest.mark.parametrize("name, rounded", [
    ("moe-active-fraction-deepseek", lambda a: _sig(a, 3)),
    ("moe-experts-touched-deepseek-64", lambda a: round(a, 1)),
    ("moe-step-gb-deepseek-64", lambda a: _sig(a, 3)),
    ("moe-compute-bound-mixtral-h100", round),
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
    (expert_parallel.moe_options, ("qwen3-235b-a22b", {"T4x": 1.0}, 4096, 0.03, 8), {},
     validate.UnknownName),
]


@pytest.mark.parametrize("fn, args, kwargs, error", BAD)
def test_bad_inputs(fn, args, kwargs, error):
    with pytest.raises(error):
        fn(*args, **kwargs)
