"""The exercises asked in `chapters/01_roofline` (every registration here has
`where="chapters/01_roofline"`) and the helpers only they use."""

from .. import achievable, cost, hardware, llm, reference, roofline
from .. import validate as _validate
from . import register

WHERE = "chapters/01_roofline"

#: The decision exercise's service-level objective: tokens/s each user must see.
SLO_TOKENS_PER_S = 25.0
#: Its options: (device, example price, weight format). 4-bit weights are ruled out
#: by the question (a quality requirement).
DECISION_OPTIONS = [(gpu, price, fmt) for gpu, price in (("T4", "AWS g4dn.xlarge"),
                                                         ("A10G", "AWS g5.xlarge"))
                    for fmt in ("fp16", "int8")]


def _ratio(wrong, right) -> float:
    """A slip's factor: the answer a slip gives over the right one."""
    return float(wrong) / float(right)


#: gpt-fast's weight formats, by the names `llm` gives their bytes: its bf16 run has fp16's
#: bytes (2 a weight); its int4 is counted as the package's `int4` (0.5625 B a weight).
GPT_FAST_FORMATS = {"bf16": "bf16", "fp16": "bf16", "int8": "int8", "int4": "int4"}


def gpt_fast_fraction(weight_format="bf16") -> float:
    """Chapter *The roofline model*: the fraction of its per-operation decode ceiling
    (`llm.decode_ceiling`, batch 1, empty cache) that gpt-fast's published tokens/s
    reached for Llama-2-7B on its A100-80GB, for one weight format: 'bf16' (or 'fp16',
    the same bytes), 'int8' or 'int4'. A fraction (0.68, not 68%).

    Each format has its own: unpacking and scaling quantised weights costs time, so
    int8 (about 0.50) and int4 (about 0.36) reach less of their ceilings than bf16
    (about 0.68). Multiplying a format's fraction by its ceiling on the A100 gives back
    gpt-fast's measured tokens/s for that format."""
    fmt = GPT_FAST_FORMATS[_validate.choice("weight_format", weight_format, GPT_FAST_FORMATS)]
    return llm.mbu("llama-2-7b", "A100 80GB", reference.GPT_FAST_TOKENS_PER_S[fmt], dtype=fmt)


def _decision_slips() -> dict:
    """The decision's wrong answers, as slips: each other option's cost over the
    answer's; the ceiling taken for what an engine reaches; gpt-fast's A100 fractions
    carried to other GPUs (the shortcut the calibrated model replaces), per format and
    with bf16's fraction for every format."""
    table = decision_table()
    right = _decision_answer(table)
    out = {}
    for (gpu, fmt), row in table.iterrows():
        if row["USD per M tokens"] == right:
            continue
        why = ("misses the objective" if not row["meets SLO"]
               else "meets it, but each token costs more")
        out[_ratio(row["USD per M tokens"], right)] = (
            f"That is the {gpu} with {fmt} weights: it {why}.")
    best = table[table["USD per M tokens"] == right].index[0]
    price = table.loc[best, "USD/h"]
    out[_ratio(cost.cost_per_million(price, table.loc[best, "ceiling tokens/s"]), right)] = (
        "That prices the best option at its ceiling: no engine reaches the roofline. Use "
        "the achievable model (achievable.decode_tokens_per_s), the ceiling beside it.")
    # gpt-fast's own per-format fraction, carried from its A100 to these GPUs.
    short = table["shortcut tokens/s"]
    short_ok = table[short >= SLO_TOKENS_PER_S]
    short_cost = min(cost.cost_per_million(short_ok.loc[i, "USD/h"], short_ok.loc[i, "shortcut tokens/s"])
                     for i in short_ok.index)
    out[_ratio(short_cost, right)] = (
        "That applies gpt-fast's A100 fraction for each format to these GPUs: the T4 with "
        "int8 then misses. The calibrated model gives each GPU its own fraction: a fixed "
        "cost per step weighs less in a slow GPU's longer step.")
    # bf16's fraction for every format: the T4 with int8 at 0.68 of its ceiling.
    t4_int8 = gpt_fast_fraction("bf16") * table.loc[("T4", "int8"), "ceiling tokens/s"]
    out[_ratio(cost.cost_per_million(table.loc[("T4", "int8"), "USD/h"], t4_int8), right)] = (
        "That gives the T4 with int8 gpt-fast's bf16 fraction: the right option by a "
        "shortcut, at the wrong speed. Take each option's speed from the achievable model "
        "(achievable.decode_tokens_per_s).")
    return out


def _decision_answer(table) -> float:
    """The lowest cost per million tokens among the options that meet the objective."""
    return float(table.loc[table["meets SLO"], "USD per M tokens"].min())


def decision_table():
    """The decision exercise's options as a DataFrame: the ceiling (`llm.decode_ceiling`,
    batch 1, empty cache), the tokens/s each user gets on the achievable model
    (`achievable.decode_tokens_per_s`, the calibrated `achievable.FITTED`), its fraction
    of the ceiling, whether that meets the SLO, the hourly price and the cost per million
    tokens; beside them, for comparison, the shortcut of gpt-fast's A100 fraction for the
    format times the ceiling (`shortcut tokens/s`). A T4 or an A10G is not among the
    calibration's GPUs: their figures are the model's extrapolation. The chapter's
    solution prints it."""
    import pandas as pd

    rows = []
    for gpu, price_name, fmt in DECISION_OPTIONS:
        price = cost.example_price(price_name).price_per_hour
        ceiling = llm.decode_ceiling("llama-2-7b", gpu, dtype=fmt)
        tokens_per_s = achievable.decode_tokens_per_s("llama-2-7b", gpu, 1, 0, fmt)
        rows.append({"GPU": gpu, "weights": fmt, "ceiling tokens/s": ceiling,
                     "tokens/s": tokens_per_s, "fraction": tokens_per_s / ceiling,
                     "meets SLO": bool(tokens_per_s >= SLO_TOKENS_PER_S),
                     "USD/h": price,
                     "USD per M tokens": cost.cost_per_million(price, tokens_per_s),
                     "shortcut tokens/s": gpt_fast_fraction(fmt) * ceiling})
    return pd.DataFrame(rows).set_index(["GPU", "weights"])


# --- chapter ------------------------------------------------------------------------

@register("roofline-ridge-l40s", where=WHERE,
          question="Ridge point of an L40S in fp16: its datasheet prints '362.05 | 733*' "
          "tensor TFLOP/s (dense | with sparsity) and 864 GB/s. Round to a whole FLOP/byte.",
          unit="FLOP/byte", hint="Ridge = dense peak (FLOP/s) / bandwidth (bytes/s), both "
          "in base units; the dense peak is the first of the two figures.",
          slips={733 / 362.05: "That is the asterisked sparse figure (733): an ordinary "
                               "matmul gets the dense 362.05."})
def _():
    return hardware.get("L40S").ridge_point("fp16")


@register("roofline-gemv-intensity", where=WHERE,
          question="Arithmetic intensity of a batch-1 decode matmul through Llama-2-7B's MLP "
          "up projection, [1, 4096] @ [4096, 11008] in fp16 (every operand moved once). "
          "Three decimals.",
          unit="FLOP/byte", hint="FLOPs = 2 m n k (a multiply and an add); bytes = "
          "(m k + k n + m n) x 2 (two bytes per fp16 value).")
def _():
    return roofline.matmul_intensity(1, 11008, 4096, "fp16")


@register("roofline-prefill-intensity", where=WHERE,
          question="Arithmetic intensity of Llama-2-7B's MLP down projection while "
          "prefilling one 512-token prompt, [512, 11008] @ [11008, 4096] in fp16 (every "
          "operand moved once). Round to a whole FLOP/byte.",
          unit="FLOP/byte", hint="Same formula as for decode with m = 512: FLOPs = 2 m n k, "
          "bytes = (m k + k n + m n) x 2.",
          slips={_ratio(roofline.matmul_flops(512, 4096, 11008) / (11008 * 4096 * 2),
                        roofline.matmul_intensity(512, 4096, 11008, "fp16")):
                 "That counts the weight matrix alone: the activations read (512 x 11008) "
                 "and written (512 x 4096) are bytes too."})
def _():
    return roofline.matmul_intensity(512, 4096, 11008, "fp16")


@register("roofline-compute-bound-batch-13b-h200", where=WHERE,
          question="Smallest batch at which Llama-2-13B's weight matmuls turn compute-bound "
          "on an H200 (datasheet roofline, short context) with int4 weight-only "
          "quantisation (groups of 32 with an fp16 scale: 0.5625 bytes a weight; the "
          "arithmetic stays fp16). A whole number of sequences; within 10% is accepted "
          "(the rule of thumb leaves out the activations).",
          unit="sequences", hint="Each weight byte serves 2 B / 0.5625 FLOPs at batch B, so "
          "the batch must reach about ridge x 0.5625 / 2.", rel_tol=0.1,
          slips={_ratio(hardware.get("H200").ridge_point("fp16") / 4,
                        llm.compute_bound_batch("llama-2-13b", "H200", "int4")):
                 "A quarter of the ridge leaves out the group scales: 0.5625 bytes a "
                 "weight, not 0.5.",
                 _ratio(llm.compute_bound_batch("llama-2-13b", "H200", "fp16"),
                        llm.compute_bound_batch("llama-2-13b", "H200", "int4")):
                 "That is the fp16 batch: int4 weights cut the bytes per weight, so "
                 "fewer sequences reach the ridge."})
def _():
    return llm.compute_bound_batch("llama-2-13b", "H200", "int4")


@register("roofline-max-batch-13b-a100-2k", where=WHERE,
          question="Largest batch of Llama-2-13B fp16 sequences, 2,048 tokens of context "
          f"each, whose weights and caches fit on an A100 80GB: it has "
          f"{hardware.get('A100 80GB').memory_bytes:,.0f} B for CUDA; hold back "
          "llm.DEFAULT_RESERVE_BYTES (1 GiB = 2**30 B); the weights are "
          "llm.weight_bytes('llama-2-13b') B and each token caches 819,200 B. Round down.",
          unit="sequences", hint="(memory - reserve - weights) / (2,048 x 819,200), rounded "
          "down.", rel_tol=0.0, abs_tol=0.5,
          slips={_ratio((80e9 - llm.DEFAULT_RESERVE_BYTES - llm.weight_bytes("llama-2-13b"))
                        // (2048 * 819200),
                        llm.max_batch("llama-2-13b", "A100 80GB", 2048)):
                 "That takes the card as 80e9 B, its marketing gigabytes: use the bytes "
                 "it has for CUDA, as the question gives them."})
def _():
    return llm.max_batch("llama-2-13b", "A100 80GB", context=2048)


@register("roofline-13b-a100-ceiling", where=WHERE,
          question="Weight-read ceiling of Llama-2-13B in fp16 on an A100 80GB (SXM, "
          "2,039 GB/s = 2.039e12 B/s), batch 1: use n_params = llm.get('llama-2-13b')"
          ".n_params (13.02e9), 2 bytes each. Round to a whole token/s.",
          unit="tokens/s", hint="Bandwidth (B/s) / (parameters x 2 bytes).",
          slips={0.5: "Half: an fp16 weight is 2 bytes, not 4 (fp32).",
                 1935 / 2039: "That is the PCIe card's 1,935 GB/s; the question asks for the "
                              "SXM card's 2,039."})
def _():
    return llm.weight_read_ceiling(llm.get("llama-2-13b").n_params, 2,
                                   hardware.get("A100 80GB").bandwidth, batch=1)


@register("roofline-decision-batch1", where=WHERE,
          question="Decision: serve Llama-2-7B at batch 1, each user needing at least "
          f"{SLO_TOKENS_PER_S:.0f} tokens/s. Options: a T4 (AWS g4dn.xlarge, "
          f"{cost.example_price('AWS g4dn.xlarge').price_per_hour} USD/h) or an A10G (AWS "
          f"g5.xlarge, {cost.example_price('AWS g5.xlarge').price_per_hour} USD/h), with "
          "fp16 or int8 weight-only weights (no 4-bit). Take each option's speed from the "
          "course's achievable model, achievable.decode_tokens_per_s('llama-2-7b', gpu, 1, "
          "0, fmt) (calibrated on gpt-fast's A100 and TensorRT-LLM's H100 runs; neither GPU "
          "here was in the calibration), with its ceiling, llm.decode_ceiling, beside it. "
          "Of the options that meet the objective, pick the one with the lowest cost per "
          "million generated tokens (the GPU kept busy, one user at a time), and give that "
          "cost in USD, to the cent.",
          unit="USD per million tokens", hint="Tokens/s = achievable.decode_tokens_per_s"
          "('llama-2-7b', gpu, 1, 0, fmt); by hand, a step is the weight bytes / (bandwidth "
          "x 0.85, x 0.83 more for int8 weights) + 32 layers x 13 kernels x 0.5 us + 1.6 ms "
          "(achievable.FITTED). Cost per million = price / (3600 x tokens/s) x 1e6; drop "
          "the options below the objective first.", rel_tol=0.01,
          slips=_decision_slips())
def _():
    return _decision_answer(decision_table())
