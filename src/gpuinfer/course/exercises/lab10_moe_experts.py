"""The exercises asked in `labs/10_moe_experts` (every registration here has
`where="labs/10_moe_experts"`) and the helpers only they use."""

from gpuinfer.predict import step_model
from gpuinfer.course.exercises import register
from gpuinfer.course.exercises.common import MX, QW

LAB = "labs/10_moe_experts"


# --- the lab ------------------------------------------------------------------------------

@register("lab-moe-touched-mixtral-16", where=LAB,
          question="Under uniform routing, how many of Mixtral-8x7B's 8 experts (top-2) does "
          "one MoE layer touch for 16 tokens? Expected value, two decimals.", unit="experts",
          rel_tol=0.002,
          hint="E (1 - (1 - k/E)^tokens) with E = 8, k = 2.",
          slips={2 / step_model.experts_touched(MX, 16): "That is k: the count at one token."})
def _():
    return step_model.experts_touched("mixtral-8x7b", 16)


@register("lab-moe-bytes-growth-qwen3", where=LAB,
          question="For Qwen3-30B-A3B (128 experts, top-8), how many times more routed-expert "
          "weight bytes does an MoE layer read for 64 tokens than for 1, under uniform "
          "routing? A ratio, two significant figures.", unit="ratio",
          hint="The bytes follow the distinct experts touched: E (1 - (1 - k/E)^64) over "
          "k (one token touches exactly k).",
          slips={64 / (step_model.experts_touched(QW, 64) / 8): "That is 64: it assumes no two "
                 "tokens share an expert; at 64 tokens many do."})
def _():
    return step_model.experts_touched("qwen3-30b-a3b", 64) / step_model.experts_touched("qwen3-30b-a3b", 1)


@register("lab-moe-half-experts-tokens", where=LAB,
          question="Under uniform routing, from how many tokens does one layer of "
          "Qwen3-30B-A3B (128 experts, top-8) expect to touch at least half of its "
          "experts? Tokens, a whole number.", unit="tokens", abs_tol=0.5,
          hint="Solve E (1 - (1 - k/E)^t) >= E/2: t >= ln(1/2) / ln(1 - k/E), and round up.",
          slips={8 / 11: "That is E / (2k): tokens share experts, so it takes more."})
def _():
    t = 1
    while step_model.experts_touched("qwen3-30b-a3b", t) < 64:
        t += 1
    return float(t)
