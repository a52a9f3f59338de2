"""What chapter 4's measurement on a real model says, read from the run.

Chapter: 4 (Quantisation judged on models). `gpuinfer.measure.quality.evaluate` measures
SmolLM2-135M's perplexity under each format with a paired bootstrap interval against the
reference; which formats this text can tell apart, and whether SmoothQuant's gains are
beyond the noise, are measurements, not facts of the method. The page's prose about them
is this module's text, which branches on the numbers (tests/test_quality_findings.py
feeds it every outcome), so it says the same thing as the table above it on any machine.
Nothing here measures.
"""

from __future__ import annotations

from gpuinfer import validate as _v

REFERENCE = "reference (Q4_1 dequantised)"
STATIC = "W8A8 int8, static per-tensor"
PER_TOKEN = "W8A8 int8, per-token"
SMOOTH = "W8A8 int8, static + SmoothQuant"
SMOOTH_ALL = "W8A8 int8, static + SmoothQuant, all 7 inputs"
#: The weight-only formats the page discusses, in its order, with their labels in prose.
WEIGHT_ONLY = {"int8 per-channel": "int8 per channel", "fp8 e4m3 per-channel": "fp8 E4M3",
               "int4 g128": "int4 in groups of 128", "nvfp4": "NVFP4"}
#: A share of the static scale's cost won back, in words: "most" above one half.
MOST = 0.5


def _interval(lo, hi, digits=2) -> str:
    return f"{lo:.{digits}f}-{hi:.{digits}f}x"


def _order(lo, hi) -> str:
    """"worse", "better" or "same" for an interval of a ratio to 1 (a perplexity ratio:
    above 1 is worse)."""
    return "worse" if lo > 1 else "better" if hi < 1 else "same"


def _upper_first(text: str) -> str:
    return text[:1].upper() + text[1:]


def _names(names) -> str:
    names = list(names)
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


def _columns(table):
    low = [c for c in table.columns if c.startswith("vs reference, ") and c.endswith(" low")]
    _v.ensure(len(low) == 1, "table must be quality.evaluate's, with one 'vs reference, "
              f"... low' column; got columns {list(table.columns)}")
    return low[0], low[0][:-len("low")] + "high"


def weight_formats(table) -> str:
    """The weight-only formats against the reference: which this text cannot tell from
    it (their interval of the perplexity ratio holds 1), which are worse or better beyond
    its noise, each with its weight SQNR, perplexity and interval. Markdown."""
    low, high = _columns(table)
    missing = [n for n in [REFERENCE, *WEIGHT_ONLY] if n not in table.index]
    _v.ensure(not missing, f"table lacks the rows {missing}")
    m, db = table["perplexity"], table["weight SQNR (dB)"]
    groups = {"same": [], "worse": [], "better": []}
    for name, label in WEIGHT_ONLY.items():
        lo, hi = table.loc[name, low], table.loc[name, high]
        groups[_order(lo, hi)].append(
            f"{label} ({db[name]:.0f} dB of weight SQNR) gives {m[name]:.1f} "
            f"({_interval(lo, hi, 3)})")
    text = [f"On this run the reference's perplexity is {m[REFERENCE]:.1f}."]
    if groups["same"]:
        text.append(f"{_upper_first(_names(groups['same']))}: each interval holds 1, so "
                    "this text cannot tell "
                    + ("it" if len(groups["same"]) == 1 else "them")
                    + " from the reference, nor order "
                    + ("it against the others" if len(groups["same"]) == 1 else "them")
                    + ".")
    if groups["worse"]:
        text.append(f"Worse than the reference beyond this text's noise: "
                    f"{_names(groups['worse'])}.")
    if groups["better"]:
        text.append(f"Better than the reference beyond the noise (a quantised model can "
                    f"fit one text better by chance): {_names(groups['better'])}.")
    return " ".join(text)


def four_bit_against_published(table, published_low) -> str:
    """Plain 4-bit rounding of this small model against the published recoveries of
    calibrated 4-bit methods on large models (`published_low`: the lowest published share
    of the reference's quality kept, e.g. 0.97): is this run's loss beyond them? Markdown."""
    low, high = _columns(table)
    published_low = _v.fraction("published_low", published_low)
    worst_allowed = 1 / published_low        # a perplexity ratio at that recovery
    lows = {n: table.loc[n, low] for n in ("int4 g128", "nvfp4")}
    beyond = [WEIGHT_ONLY[n] for n, lo in lows.items() if lo > worst_allowed]
    if len(beyond) == 2:
        return ("Both 4-bit formats lose more here than the published, calibrated results "
                f"allow (a perplexity ratio of {worst_allowed:.2f}x at the low end): a "
                "135-million-parameter model rounded to 4 bits without calibration is not "
                "the large GPTQ- or AWQ-quantised model of the table.")
    if beyond:
        return (f"{_upper_first(beyond[0])} loses more here than the published, calibrated "
                f"results allow ({worst_allowed:.2f}x at their low end); the other 4-bit "
                "format's interval reaches into their range, so this text cannot say it "
                "does worse.")
    return ("Neither 4-bit format's loss is beyond the published, calibrated results "
            f"({worst_allowed:.2f}x at their low end) on this text: its intervals are too "
            "wide to tell.")


def smoothing(table, paired, inputs_db=None) -> str:
    """Static activation scales and SmoothQuant: what one static scale per tensor costs,
    what share of that cost the paper's recipe and smoothing all seven inputs win back,
    and whether each gain is beyond the text's noise. `paired`: {"recipe": (lo, hi) of
    perplexity(recipe) / perplexity(static), "all": (lo, hi) of perplexity(all seven) /
    perplexity(recipe)} (`quality.paired_interval`). `inputs_db`: the matmul inputs'
    pooled SQNR {row: dB} for the static, recipe and all-seven rows (optional): whether it
    tracks the perplexity. Markdown."""
    low, high = _columns(table)
    need = [REFERENCE, PER_TOKEN, STATIC, SMOOTH, SMOOTH_ALL]
    missing = [n for n in need if n not in table.index]
    _v.ensure(not missing, f"table lacks the rows {missing}")
    m = table["perplexity"]
    cost = m[STATIC] - m[REFERENCE]
    tok_lo, tok_hi = table.loc[PER_TOKEN, low], table.loc[PER_TOKEN, high]
    st_lo, st_hi = table.loc[STATIC, low], table.loc[STATIC, high]
    text = [f"W8A8 with a scale per token gives {m[PER_TOKEN]:.1f} "
            f"({_interval(tok_lo, tok_hi, 3)}: "
            + {"same": "too little to see on this text", "worse": "a cost beyond the noise",
               "better": "better than the reference, by chance"}[_order(tok_lo, tok_hi)]
            + f"); one static scale per tensor gives {m[STATIC]:.1f} "
            f"({_interval(st_lo, st_hi)})."]
    if _order(st_lo, st_hi) != "worse" or cost <= 0:
        text.append("On this text the static scale's cost is not beyond the noise, so what "
                    "smoothing wins back cannot be measured here.")
        return " ".join(text)
    for key, row, what, against in [
            ("recipe", SMOOTH, "SmoothQuant by the paper's recipe", "the unsmoothed static row"),
            ("all", SMOOTH_ALL, "Smoothing all seven inputs", "the paper's recipe")]:
        lo, hi = (float(v) for v in paired[key])
        share = (m[STATIC] - m[row]) / cost
        amount = ("most" if share > MOST else "less than half" if share > 0
                  else "none")
        verdict = {"better": "beyond this text's noise",
                   "same": "not established on this text (the interval holds 1)",
                   "worse": "a loss beyond the noise"}[_order(lo, hi)]
        text.append(f"{what} gives {m[row]:.1f}, winning back {amount} ({share:.0%}) of that "
                    f"cost; paired against {against} its ratio is {_interval(lo, hi)}: "
                    f"{verdict}.")
    if inputs_db is not None:
        db = {k: float(inputs_db[k]) for k in (STATIC, SMOOTH, SMOOTH_ALL)}
        agrees = ((db[SMOOTH_ALL] > db[STATIC]) == (m[SMOOTH_ALL] < m[STATIC])
                  and (db[SMOOTH] > db[STATIC]) == (m[SMOOTH] < m[STATIC]))
        shown = (f"{db[STATIC]:.1f} dB unsmoothed, {db[SMOOTH]:.1f} by the recipe, "
                 f"{db[SMOOTH_ALL]:.1f} with all seven")
        if agrees:
            text.append(f"The inputs' pooled SQNR moves with the perplexity here ({shown}).")
        else:
            text.append(f"The inputs' pooled SQNR does not track the perplexity ({shown}): "
                        "smoothing changes the signal it is measured on ($X/s$), and a "
                        "pooled figure weighs each channel by its energy, not by what the "
                        "next layers make of its error.")
    return " ".join(text)
