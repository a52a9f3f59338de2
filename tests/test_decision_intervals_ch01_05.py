"""The decisions of chapters 1, 2, 3 and 5 within the achievable model's error (issue 31):
each interval derived by hand from the validation rows of its regime (the 10th and 90th
percentiles of measured / achievable, every source weighing the same), each flip from
whether the two options' intervals overlap (a fixed objective: whether it lies inside)."""

import numpy as np
import pandas as pd
import pytest

from gpuinfer.predict import achievable, cost, llm, validation
from gpuinfer.course import exercises
from gpuinfer.hardware import mig_slices
from gpuinfer.course.exercises import chapter01_roofline as ch01
from gpuinfer.course.exercises import chapter02_decode_kv_cache as ch02
from gpuinfer.course.exercises import chapter03_batching as ch03
from gpuinfer.course.exercises import chapter05_serving as ch05


def _ratios(kind, moe=None):
    """80% of measured / achievable on the validated rows of one kind (by hand: the rows
    `validation.validation_errors` lists, filtered on their columns, not on its regimes)."""
    e = validation.validation_errors("fitted")
    rows = e[e["kind"] == kind]
    if moe is not None:
        rows = rows[rows["moe"] == moe]
    # Each source weighs the same: a row weighs 1 / its source's rows; the quantile is read
    # off the sorted ratios at the midpoints of their cumulative weights.
    rows = rows.assign(r=rows["measured"] / rows["achievable"],
                       w=1 / rows.groupby("source")["source"].transform("size"))
    rows = rows.sort_values("r", kind="stable")
    mid = (rows["w"].cumsum() - rows["w"] / 2) / rows["w"].sum()
    return np.interp([0.1, 0.9], mid, rows["r"])


def test_ch01_decision_interval_and_flip_by_hand():
    lo, hi = _ratios("batch-1")
    # The chosen option, the T4 with int8 weights: its speed on the model, batch 1.
    tps = achievable.decode_tokens_per_s("llama-2-7b", "T4", 1, 0, "int8")
    price = cost.example_price("AWS g4dn.xlarge").price_per_hour
    usd = price / (3600 * tps) * 1e6                     # USD per million tokens
    a10g = achievable.decode_tokens_per_s("llama-2-7b", "A10G", 1, 0, "int8")
    a10g_usd = cost.example_price("AWS g5.xlarge").price_per_hour / (3600 * a10g) * 1e6
    u = ch01.decision_uncertainty()
    assert u["best"] == ("T4", "int8") and u["runner_up"] == ("A10G", "int8")
    assert u["rate_low"] == pytest.approx(tps * lo) and u["rate_high"] == pytest.approx(tps * hi)
    # A cost moves against the rate: the slow end of the speed is the dear end of the cost.
    assert u["cost_low"] == pytest.approx(usd / hi) and u["cost_high"] == pytest.approx(usd / lo)
    assert u["cost_other"] == pytest.approx(a10g_usd)
    assert u["slo_inside"] == (tps * lo <= ch01.SLO_TOKENS_PER_S <= tps * hi)
    # Two predictions: they flip when their intervals overlap, the A10G's cheap end
    # (a10g_usd / hi) below the T4's dear end (usd / lo).
    assert u["cost_flips"] == (a10g_usd / hi <= usd / lo)
    # The A10G with int8 costs 7% more than the T4 with int8: far inside the batch-1
    # spread (hi / lo well above 1.07), so the page says "measure first".
    assert a10g_usd / usd < hi / lo and u["cost_flips"]


def test_ch02_decision_batch_range_by_hand():
    lo, hi = _ratios("throughput", moe=False)
    r = ch02.decision_batch_range()
    args = (ch02.DECISION_MODEL, ch02.DECISION_GPU)
    ctx, tpot = ch02.DECISION_CONTEXT, ch02.DECISION_TPOT_S

    def step(b):
        return achievable.decode_step_s(*args, b, ctx)

    # The slow end: a measured step is the model's / lo, so the largest batch whose model
    # step is at most tpot x lo, and one more sequence is over it.
    assert step(r["low"]) <= tpot * lo < step(r["low"] + 1)
    assert step(r["high"]) <= tpot * hi < step(r["high"] + 1)
    assert r["low"] <= exercises.get("decode-decision-batch-tpot").answer() <= r["high"]
    assert r["fits"] == llm.max_batch(*args, ctx)
    assert r["memory_binds"] == (r["high"] >= r["fits"])
    assert r["ceiling_inside"] == (r["low"] <= r["ceiling"] <= r["high"])


def _sweep_table(capacities):
    """A planted `batching.sweep` table: max_batch 1, 2, 4, ... with these capacities."""
    n = len(capacities)
    return pd.DataFrame({"max_batch": [2 ** i for i in range(n)], "max_queue_delay_s": [0.0] * n,
                         "capacity_per_s": capacities, "saturation_per_s": [1e3] * n,
                         "capacity_fraction_of_saturation": [0.5] * n})


def test_ch03_decision_choice_by_hand():
    lo, hi = _ratios("throughput", moe=False)
    # 200 at max_batch 2 is the best; 199 at 4 is within 2%, but 2 is the smaller limit.
    c = ch03.decision_choice(_sweep_table([100.0, 200.0, 199.0]))
    assert (c["batch"], c["runner_up_batch"]) == (2.0, 4.0)
    assert c["low"] == pytest.approx(200 * lo) and c["high"] == pytest.approx(200 * hi)
    assert c["other"] == 199.0 and c["flips"]            # 200 / 199 is far under hi / lo
    # A runner-up far below: 200 / 40 = 5 is beyond the spread hi / lo, the intervals do
    # not overlap, no flip.
    assert hi / lo < 5
    c = ch03.decision_choice(_sweep_table([10.0, 200.0, 40.0]))
    assert (c["runner_up_batch"], c["other"], c["flips"]) == (4.0, 40.0, False)


def test_ch05_decision_intervals_by_hand():
    lo, hi = _ratios("throughput", moe=False)
    t = ch05.decision_intervals()
    d = ch05.DECISION
    assert "1g.10gb" not in t.index                       # it cannot hold 8 sequences
    for profile in ("1g.20gb", "3g.40gb"):
        s = achievable.decode_step_s(d["model"], mig_slices.mig_slice(d["gpu"], profile), d["batch"], d["context"],
                                     d["dtype"], compute_dtype=d["compute_dtype"])
        assert t.loc[profile, "tpot_s"] == pytest.approx(s)
        assert t.loc[profile, "tpot_low_s"] == pytest.approx(s / hi)
        assert t.loc[profile, "tpot_high_s"] == pytest.approx(s / lo)
        assert t.loc[profile, "could_meet"] == (s / hi <= d["tpot_s"])
        assert t.loc[profile, "could_miss"] == (s / lo > d["tpot_s"])
