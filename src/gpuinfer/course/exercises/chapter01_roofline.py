"""The exercises asked in `chapters/01_roofline` (every registration here has
`where="chapters/01_roofline"`) and the helpers only they use."""

from gpuinfer.predict import achievable, cost, llm, roofline, validation
from gpuinfer import hardware
from gpuinfer.measure import reference
from gpuinfer.predict import architectures
from gpuinfer.predict import step_model
from gpuinfer.course.exercises import register

WHERE = "chapters/01_roofline"

#: The decision exercise's service-level objective: tokens/s each user must see.
SLO_TOKENS_PER_S = 25.0
#: Its model, served at batch 1 with an empty cache (`achievable.decode_options`' defaults).
DECISION_MODEL = "llama-2-7b"
#: Its options, (GPU, weight format): as `achievable.decode_options` runs each. 4-bit
#: weights are ruled out by the question (a quality requirement).
DECISION_OPTIONS = {(gpu, fmt): {"accelerator": gpu, "dtype": fmt}
                    for gpu in ("T4", "A10G") for fmt in ("fp16", "int8")}
#: Each GPU's hourly price: an example instance's (`cost.example_price`).
DECISION_USD_PER_HOUR = {gpu: cost.example_price(name).price_per_hour
                         for gpu, name in (("T4", "AWS g4dn.xlarge"), ("A10G", "AWS g5.xlarge"))}


#: The validation rows whose errors bound the decision's answer (`validation.interval`): one
#: user at a time, batch-1 decode.
DECISION_REGIME = "batch-1"

#: The fitted constants the hand derivation of the decision uses (hint and solution).
_FIT, _N_LAYERS = achievable.FITTED, architectures.get(DECISION_MODEL).n_layers


def _ratio(wrong, right) -> float:
    """A slip's factor: the answer a slip gives over the right one."""
    return float(wrong) / float(right)


def decision_table():
    """The decision's options (index GPU, weights): `achievable.decode_options` (batch 1,
    empty cache: tokens_per_s on the achievable model, ceiling_tokens_per_s beside it)
    priced by `cost.priced` (price_per_hour, cost_per_million: USD per million tokens),
    with the question's objective, meets_slo (tokens_per_s >= `SLO_TOKENS_PER_S`, one
    user at a time), and the shortcut the slips name, shortcut_tokens_per_s
    (`reference.gpt_fast_fraction` for the format x the ceiling). A T4 or an A10G is not
    among the calibration's GPUs: their figures are the model's extrapolation."""
    t = achievable.decode_options(DECISION_MODEL, DECISION_OPTIONS).rename_axis(["GPU", "weights"])
    t = cost.priced(t, DECISION_USD_PER_HOUR, by="accelerator")
    t["meets_slo"] = t["tokens_per_s"] >= SLO_TOKENS_PER_S
    t["shortcut_tokens_per_s"] = [reference.gpt_fast_fraction(fmt) * ceiling for fmt, ceiling
                                  in zip(t["dtype"], t["ceiling_tokens_per_s"])]
    return t


def _decision_answer(table) -> float:
    """The lowest cost per million tokens among the options that meet the objective."""
    return float(table.loc[table["meets_slo"], "cost_per_million"].min())


def decision_uncertainty(table=None) -> dict:
    """How far the decision holds within the achievable model's error in `DECISION_REGIME`
    (80% of published measurements, `validation.interval`), on `decision_table()` (or
    `table`): the chosen option (best: (GPU, weights)) and its tokens/s interval
    (rate_low, rate_high), with slo_inside True when the objective lies inside it (the
    option could miss it: measure first); and its cost against the cheapest other option
    that meets the objective (runner_up), as `validation.choice` per="cost" gives them
    (cost_value, cost_low, cost_high, cost_other, cost_flips: True when the runner-up's
    cost lies inside the chosen option's interval)."""
    t = decision_table() if table is None else table
    meets = t[t["meets_slo"]]
    best = meets["cost_per_million"].idxmin()
    runner_up = meets.drop(index=best)["cost_per_million"].idxmin()
    rate_low, rate_high = validation.interval(t.loc[best, "tokens_per_s"], DECISION_REGIME)
    c = validation.choice(t.loc[best, "cost_per_million"], t.loc[runner_up, "cost_per_million"],
                          DECISION_REGIME, per="cost")
    return {"best": best, "runner_up": runner_up, "rate_low": rate_low, "rate_high": rate_high,
            "slo_inside": bool(rate_low <= SLO_TOKENS_PER_S <= rate_high),
            **{f"cost_{k}": v for k, v in c.items()}}


def _decision_slips() -> dict:
    """The decision's wrong answers, as slips: each other option's cost over the
    answer's; the ceiling taken for what an engine reaches; gpt-fast's A100 fractions
    carried to other GPUs (the shortcut the calibrated model replaces), per format and
    with bf16's fraction for every format."""
    table = decision_table()
    right = _decision_answer(table)
    out = {}
    for (gpu, fmt), row in table.iterrows():
        if row["cost_per_million"] == right:
            continue
        why = ("misses the objective" if not row["meets_slo"]
               else "meets it, but each token costs more")
        out[_ratio(row["cost_per_million"], right)] = (
            f"That is the {gpu} with {fmt} weights: it {why}.")
    best = table[table["cost_per_million"] == right].index[0]
    price = table.loc[best, "price_per_hour"]
    out[_ratio(cost.cost_per_million(price, table.loc[best, "ceiling_tokens_per_s"]), right)] = (
        "That prices the best option at its ceiling: no engine reaches the roofline. Use "
        "the achievable model (achievable.decode_tokens_per_s), the ceiling beside it.")
    # gpt-fast's own per-format fraction, carried from its A100 to these GPUs.
    short_ok = table[table["shortcut_tokens_per_s"] >= SLO_TOKENS_PER_S]
    short_cost = cost.priced(short_ok, DECISION_USD_PER_HOUR, by="accelerator",
                             throughput="shortcut_tokens_per_s")["cost_per_million"].min()
    out[_ratio(short_cost, right)] = (
        "That applies gpt-fast's A100 fraction for each format to these GPUs: the T4 with "
        "int8 then misses. The calibrated model gives each GPU its own fraction: a fixed "
        "cost per step weighs less in a slow GPU's longer step.")
    # bf16's fraction for every format: the T4 with int8 at 0.68 of its ceiling.
    t4_int8 = reference.gpt_fast_fraction("bf16") * table.loc[("T4", "int8"), "ceiling_tokens_per_s"]
    out[_ratio(cost.cost_per_million(table.loc[("T4", "int8"), "price_per_hour"], t4_int8), right)] = (
        "That gives the T4 with int8 gpt-fast's bf16 fraction: the right option by a "
        "shortcut, at the wrong speed. Take each option's speed from the achievable model "
        "(achievable.decode_tokens_per_s).")
    return out


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
          slips={_ratio((80e9 - llm.DEFAULT_RESERVE_BYTES - step_model.weight_bytes("llama-2-13b"))
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
    return llm.weight_read_ceiling(architectures.get("llama-2-13b").n_params, 2,
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
          f"x {_FIT.bandwidth:.2f}, x {_FIT.weight_only_fraction('int8'):.2f} more for int8 "
          f"weights) + {_N_LAYERS} layers x {_FIT.kernels_per_layer} kernels x "
          f"{_FIT.kernel_gap_s * 1e6:g} us + {_FIT.step_s * 1e3:g} ms (achievable.FITTED). "
          "Cost per million = price / (3600 x tokens/s) x 1e6; drop the options below the "
          "objective first.", rel_tol=0.01,
          slips=_decision_slips())
def _():
    return _decision_answer(decision_table())
