"""course.pages.chapter03_batching: what chapter 3's figures and prose are computed from,
checked against hand arithmetic and the formulas the chapter quotes (no simulation sweeps:
small synthetic tables stand in for them)."""

import math

import matplotlib
import numpy as np
import pandas as pd
import pytest

from gpuinfer import hardware
from gpuinfer.predict import batching, llm
from gpuinfer.course.exercises import chapter03_batching
from gpuinfer.course.pages import chapter03_batching as page

matplotlib.use("Agg")
MODEL, GPU, QUERY = "mistral-7b", "A100 80GB", 32
BATCH = 2 ** np.arange(0, 11)


@pytest.fixture(scope="module")
def sizes():
    return page.one_batch(MODEL, GPU, QUERY, BATCH)


def test_the_knee_is_where_the_matmuls_cross_the_ridge():
    # Weight bytes alone give the matmuls an intensity of T FLOP/byte for T tokens (2TP
    # FLOPs over 2P bytes), so they turn compute-bound from T = ridge = 312e12 / 2.039e12
    # = 153 tokens: batch ceil(153 / 32) = 5; activations' bytes lower the intensity a
    # little, so at most one batch later.
    ridge = hardware.get(GPU).ridge_point("fp16")
    knee = page.compute_bound_from(MODEL, GPU, QUERY)
    assert math.ceil(ridge / QUERY) <= knee <= math.ceil(ridge / QUERY) + 1

    def bound(b):
        return llm.forward_step_breakdown(MODEL, GPU, [QUERY] * b, [0] * b,
                                          logits=[0] * b).loc["linear", "bound"]
    assert bound(knee - 1) == "memory" and bound(knee) == "compute"


def test_one_batch_reads_mistral_7b_s_matmul_weights(sizes):
    # Mistral-7B: d 4096, 8 KV heads of 128 (1024), MLP 14336. A layer's matmuls:
    # q and o 4096^2 each, k and v 4096 x 1024 each, MLP 3 x 4096 x 14336:
    # 33,554,432 + 8,388,608 + 176,160,768 = 218,103,808; x 32 layers x 2 bytes = 13.96 GB.
    assert sizes["w_gb"] == pytest.approx(218_103_808 * 32 * 2 / 1e9)
    one = llm.forward_step_breakdown(MODEL, GPU, [QUERY], [0], logits=[0])
    assert one.loc["lm_head", "bytes"] == 0 and one.loc["linear", "share"] > 0.99
    assert one.loc["linear", "bytes"] == pytest.approx(sizes["w_gb"] * 1e9, rel=0.02)


def test_one_batch_memory_bound_then_compute_bound(sizes):
    service = batching.roofline_service_s(MODEL, GPU, tokens_per_request=QUERY, lm_head=False)
    service_ach = batching.model_service_s(MODEL, GPU, tokens_per_request=QUERY, lm_head=False)
    assert sizes["s4_over_s1"] < 1.1                  # four requests, one weight read
    # Compute-bound from the knee on: 64 requests take four times as long as 16.
    assert 64 / service(64) == pytest.approx(16 / service(16), rel=0.01)
    # Throughput stops at the compute-bound rate: max over the grid is at its end.
    assert sizes["thr_max"] == pytest.approx(1024 / service(1024))
    assert sizes["thr_gain"] == pytest.approx(sizes["thr_max"] * sizes["s1_ms"] / 1e3)
    assert sizes["knee_tokens"] == sizes["knee_batch"] * QUERY
    # The achievable model is slower than the ceiling at every batch.
    assert (service_ach(BATCH) > service(BATCH)).all()
    assert sizes["ach_thr_pct"] == pytest.approx(100 * sizes["ach_thr_max"] / sizes["thr_max"])
    assert sizes["ach_thr_lo"] < sizes["ach_thr_max"] < sizes["ach_thr_hi"]
    assert sizes["mix_e"] == 8 and 1 < sizes["mix_touched_32"] <= 8


def test_md1_values_are_pollaczek_khinchine():
    # W_q / S = rho / (2 (1 - rho)): 0.5 / 1 = 0.5 at half load, 0.9 / 0.2 = 4.5 at 90%.
    md1 = pd.DataFrame({"p99 latency / S": [3.0, 7.0]}, index=[0.5, 0.9])
    values = page.md1_values(md1, 0.01)
    assert values["md1_wait_50"] == pytest.approx(0.5)
    assert values["md1_wait_90"] == pytest.approx(4.5)
    assert values["md1_p99_90"] == 7.0


def test_the_simulator_reproduces_pollaczek_khinchine():
    s = 0.01
    df = batching.simulate(batching.poisson_arrivals(0.5 / s, 20_000, seed=1), s, 1)
    wait = (df["start"] - df["arrival"]).mean()
    assert wait == pytest.approx(0.5 * s, rel=0.15)   # 0.5 service times


def test_preferred_sizes_take_the_largest_that_fits():
    # 12 waiting, preferred 8 and 16: 16 cannot be formed, so the first batch is 8.
    first = batching.simulate([0.0] * 12, 0.005, 32, 0.002, preferred_batch_sizes=[8, 16])
    assert first["batch_size"].iloc[0] == 8


def test_policy_values_read_the_rows():
    table = pd.DataFrame({"p50_s": [2.0, 0.03, 0.004, 0.005],
                          "p99_s": [4.0, 0.06, 0.008, 0.0081],
                          "busy_fraction": [1.0, 0.3, 0.8, 0.7],
                          "mean_batch_per_batch": [1.0, 32.0, 2.5, 3.5]},
                         index=["batch 1", "static 32", "greedy 32", "32, delay 2 ms"])
    values = page.policy_values(table, 500.0, lambda b: 0.004 * np.ones_like(b))
    assert values["b1_capacity"] == pytest.approx(250.0)        # 1 / 4 ms
    assert values["static_p99_ms"] == pytest.approx(60.0) and values["static_busy"] == 30.0
    assert values["delay_batch"] == 3.5 and values["mix_rate"] == 500.0


def test_generation_values_take_the_last_load_and_the_most_served():
    gen = pd.DataFrame({"policy": ["static"] * 2 + ["continuous"] * 2,
                        "served (req/s)": [1.0, 1.5, 1.0, 2.0],
                        "p99 (s)": [5.0, 60.0, 4.0, 6.0]})
    values = page.generation_values(gen, np.array([1.0, 2.0]), np.arange(1, 101))
    assert values["gen_static_p99"] == 60.0 and values["gen_cont_p99"] == 6.0
    assert values["gen_static_max"] == 1.5 and values["gen_load"] == 2.0
    assert values["gen_tokens_p99"] == pytest.approx(99.01)   # numpy's linear rule on 1..100


def _sweep(capacities):
    """A `batching.sweep`-shaped table: {(max_batch, delay): capacity}, saturation 100 b."""
    rows = [{"max_batch": mb, "max_queue_delay_s": d, "capacity_per_s": c,
             "saturation_per_s": 100.0 * mb, "capacity_fraction_of_saturation": c / (100 * mb)}
            for (mb, d), c in capacities.items()]
    return pd.DataFrame(rows)


def test_policy_choice_on_a_small_sweep():
    ceiling = _sweep({(1, 0.0): 90.0, (8, 0.0): 600.0, (8, 0.002): 612.0, (64, 0.0): 400.0,
                      (1, 0.002): 80.0, (64, 0.002): 390.0})
    ach = _sweep({(1, 0.0): 60.0, (8, 0.0): 300.0, (8, 0.002): 290.0, (64, 0.0): 200.0,
                  (1, 0.002): 50.0, (64, 0.002): 190.0})
    v = page.policy_choice(ach, ceiling, lambda b: 0.001 * b, lambda b: 0.002 * b, 0.05,
                           [0.0, 0.002], [1, 8, 64])
    # 612 is the top; 600 is within 2% of it and has the shorter delay: max_batch 8, 0 ms.
    assert (v["best_batch"], v["best_delay_ms"], v["best_capacity"]) == (8.0, 0.0, 600.0)
    assert v["policy_within_pct"] == 2.0                         # the 2% the text quotes
    assert v["ach_best_batch"] == 8.0 and v["ach_best_capacity"] == 300.0
    assert v["delay_gain_pct"] == pytest.approx(2.0)            # 612 / 600 - 1
    assert v["ach_best_pct"] == pytest.approx(50.0)             # 300 / 600
    assert v["ach_best_over_1"] == pytest.approx(5.0)           # 300 / 60
    assert v["ach_best_fraction"] == pytest.approx(300 / 800 * 100)
    assert v["cap64"] == 400.0 and v["ach_cap64"] == 200.0
    assert v["s64_ms_again"] == pytest.approx(64.0) and v["ach_s64_ms"] == pytest.approx(128.0)
    assert v["ach_runner_batch"] == 64.0 and v["ach_runner_capacity"] == 200.0
    assert v["ach_best_cap_lo"] < 300.0 < v["ach_best_cap_hi"]
    assert v["ach_choice_verdict"].startswith("A max_batch of 64, the best other limit")
    # the verdict says which of choice's two outcomes it is: the ranges overlap, or not
    dec = chapter03_batching.decision_choice(ach)
    assert ("a range that overlaps that one" in v["ach_choice_verdict"]) == dec["flips"]
    assert ("wholly below" in v["ach_choice_verdict"]) == (not dec["flips"])
    assert page.capacity(ceiling, 8, 0.002) == 612.0


def test_passage_gains_compute_bound_passages_gain_nothing():
    gains = page.passage_gains(MODEL, GPU, [1, 4, 16])
    assert (gains.iloc[0] == 1.0).all()
    # 512 tokens a passage is past the ridge (153 tokens) already at batch 1.
    assert gains.loc[16, "passages, roofline"] < 1.05 < 3 < gains.loc[16, "queries, roofline"]
    values = page.passage_values(gains, GPU)
    assert values["passage_gain_128"] == gains.loc[16, "passages, roofline"]
    # Mixtral routes 512 tokens x top-2 over 8 experts: 128 tokens an expert, under the
    # ridge's 153: its expert matmuls stay memory-bound.
    mix512 = llm.forward_step_breakdown("mixtral-8x7b", GPU, 512)
    assert mix512.loc["experts", "bound"] == "memory"
    assert values["mix_512_expert_pct"] == pytest.approx(100 * mix512.loc["experts", "share"])


def test_problem_values_quote_the_formula():
    values = page.problem_values(lambda b: 0.002 * b)
    # rho = 90 x 0.010 = 0.9: W_q = 0.9 / (2 x 100 x 0.1) = 45 ms.
    assert values["ex_md1_90_ms"] == pytest.approx(45.0)
    assert values["ex_s8_ms"] == pytest.approx(16.0)
    assert values["ans_batching_md1_wait"] == pytest.approx(0.8 / (2 * 100 * 0.2))
    assert set(values) >= {"ans_" + n.replace("-", "_") for n in page.PROBLEMS}


def test_figures_draw_labelled_axes():
    service = batching.roofline_service_s(MODEL, GPU, tokens_per_request=QUERY, lm_head=False)
    md1 = pd.DataFrame({"mean wait / S": [0.5], "p99 latency / S": [3.0]}, index=[0.5])
    runs = {name: pd.DataFrame({"latency": [0.01, 0.02]}) for name in ("b1", "a", "b")}
    gen = pd.DataFrame({"policy": ["static", "continuous"], "served (req/s)": [1.0, 1.0],
                        "p99 (s)": [2.0, 1.0]})
    table = _sweep({(1, 0.0): 90.0, (8, 0.0): 600.0})
    figures = [page.batch_figure(service, [1, 2, 4], 2, "t"), page.md1_figure(md1, 0.01),
               page.latency_cdf_figure(runs, 100.0), page.generation_figure(gen),
               page.capacity_figure(table, [0.0], [1, 8], 0.05, "t"),
               page.passage_figure(page.passage_gains(MODEL, GPU, [1, 2]))]
    for fig in figures:
        ax = fig.axes[0]
        assert ax.get_xlabel() and ax.get_ylabel()
        matplotlib.pyplot.close(fig)


def test_load_curve_figure_draws_one_line_a_policy():
    fig = page.load_curve_figure(lambda b: 0.001 + 0.0001 * np.asarray(b), [1, 2], 0.05)
    assert [line.get_label() for line in fig.axes[0].get_lines()][:2] == ["max_batch 1",
                                                                         "max_batch 2"]
    matplotlib.pyplot.close(fig)
