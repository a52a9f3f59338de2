"""The batching simulators against queueing theory and cases worked by hand."""

import math

import numpy as np
import pandas as pd
import pytest

from gpuinfer.predict import batching, llm
from gpuinfer.predict import llm_simulator
from gpuinfer.predict import llm_slo
from gpuinfer.predict import paged_kv


# --- arrivals ---------------------------------------------------------------------------

def test_poisson_arrivals_have_the_asked_rate_and_start_at_zero():
    a = batching.poisson_arrivals(200.0, 50_000, seed=1)
    assert a[0] == 0.0 and np.all(np.diff(a) >= 0)
    # Mean gap 1/rate: the standard error of 50k exponential gaps is 1/sqrt(50k) = 0.45%.
    assert np.diff(a).mean() == pytest.approx(1 / 200.0, rel=0.02)
    # Exponential gaps: standard deviation equals the mean.
    assert np.diff(a).std() == pytest.approx(1 / 200.0, rel=0.03)
    np.testing.assert_array_equal(a, batching.poisson_arrivals(200.0, 50_000, seed=1))
    assert not np.array_equal(a, batching.poisson_arrivals(200.0, 50_000, seed=2))


@pytest.mark.parametrize("rate, n", [(0, 10), (-1, 10), (math.inf, 10), (1, 0), (1, 2.5)])
def test_poisson_arrivals_rejects_bad_input(rate, n):
    with pytest.raises(ValueError, match="rate|n must"):
        batching.poisson_arrivals(rate, n)


# --- deterministic cases, worked by hand -------------------------------------------------

def test_greedy_batching_by_hand():
    # Service 1 s, max_batch 2, no delay. t=0: only request 0 waits -> alone, done at 1.
    # t=1: 1, 2, 3 wait -> (1, 2) until 2. t=2: 3 alone until 3.
    df = batching.simulate([0.0, 0.1, 0.2, 0.3], 1.0, max_batch=2)
    np.testing.assert_allclose(df["start"], [0, 1, 1, 2])
    np.testing.assert_allclose(df["finish"], [1, 2, 2, 3])
    np.testing.assert_allclose(df["latency"], [1, 1.9, 1.8, 2.7])
    assert df["batch_size"].tolist() == [1, 2, 2, 1]


def test_queue_delay_waits_for_a_fuller_batch_by_hand():
    # Delay 0.15 s: request 1 arrives at 0.1, before 0's deadline (0.15) -> batch (0, 1)
    # starts at 0.1 (full), done 1.1; then (2, 3) starts at 1.1.
    df = batching.simulate([0.0, 0.1, 0.2, 0.3], 1.0, max_batch=2, max_queue_delay=0.15)
    np.testing.assert_allclose(df["start"], [0.1, 0.1, 1.1, 1.1])
    np.testing.assert_allclose(df["finish"], [1.1, 1.1, 2.1, 2.1])
    assert df["batch_size"].tolist() == [2, 2, 2, 2]


def test_queue_delay_times_out_and_sends_what_waits():
    # max_batch 4, delay 0.5: the 4th request (at 2.0) comes after 0's deadline (0.5),
    # so (0, 1, 2) start at 0.5 with the service time of a batch of 3.
    service = {1: 1.0, 2: 1.5, 3: 2.0, 4: 2.5}
    df = batching.simulate([0.0, 0.2, 0.4, 2.0], service, max_batch=4, max_queue_delay=0.5)
    np.testing.assert_allclose(df["start"], [0.5, 0.5, 0.5, 2.5])
    np.testing.assert_allclose(df["finish"], [2.5, 2.5, 2.5, 3.5])
    assert df["batch_size"].tolist() == [3, 3, 3, 1]


def test_preferred_batch_size_starts_without_waiting_for_max_batch():
    # Preferred 2, max 4, delay 10 s: a batch starts as soon as 2 wait.
    df = batching.simulate([0.0, 0.1, 0.2, 0.3], 1.0, max_batch=4, max_queue_delay=10.0,
                           preferred_batch_sizes=[2])
    np.testing.assert_allclose(df["start"], [0.1, 0.1, 1.1, 1.1])
    without = batching.simulate([0.0, 0.1, 0.2, 0.3], 1.0, max_batch=4, max_queue_delay=10.0)
    np.testing.assert_allclose(without["start"], [0.3] * 4)


def test_preferred_size_is_the_largest_one_that_can_be_formed():
    # Triton: if a preferred size can be formed, send the largest such batch. 7 requests
    # wait at t=0, preferred [2, 4], max 8: a batch of 4 (not 7), then 2, then the last 1.
    df = batching.simulate(np.zeros(7), 1.0, max_batch=8, preferred_batch_sizes=[2, 4])
    assert df["batch_size"].tolist() == [4] * 4 + [2] * 2 + [1]
    np.testing.assert_allclose(df["start"], [0] * 4 + [1] * 2 + [2])


def test_fixed_arrivals_slower_than_service_never_wait():
    # D/D/1 below saturation: arrivals every 2 s, service 1 s: no queue, latency 1 s.
    df = batching.simulate(np.arange(10) * 2.0, 1.0, max_batch=8)
    np.testing.assert_allclose(df["latency"], 1.0)
    s = batching.summarize(df)
    assert s["busy_fraction"] == pytest.approx(10 / 19)  # 10 s busy over 0..19 s


def test_simultaneous_burst_is_cut_into_full_batches():
    # 10 requests at t=0, max_batch 4, service 1 s: batches of 4, 4, 2.
    df = batching.simulate(np.zeros(10), 1.0, max_batch=4)
    assert df["batch_size"].tolist() == [4] * 4 + [4] * 4 + [2] * 2
    np.testing.assert_allclose(df["finish"], [1] * 4 + [2] * 4 + [3] * 2)


def test_service_table_interpolates_and_refuses_to_extrapolate():
    s = batching.service_table([1, 4], [1.0, 2.5])
    assert s(2) == pytest.approx(1.5)
    df = batching.simulate(np.zeros(3), s, max_batch=3)
    np.testing.assert_allclose(df["finish"], 2.0)  # batch 3: 1 + 2 * 0.5
    with pytest.raises(ValueError, match="outside the measured table"):
        batching.simulate(np.zeros(3), s, max_batch=8)


# --- queueing theory --------------------------------------------------------------------

@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_md1_mean_wait_matches_pollaczek_khinchine(rho):
    # M/D/1: W_q = rho / (2 mu (1 - rho)). Service 10 ms, mu = 100/s.
    service_s = 0.01
    mu = 1 / service_s
    a = batching.poisson_arrivals(rho * mu, 200_000, seed=3)
    df = batching.simulate(a, service_s, max_batch=1)
    wait = (df["start"] - df["arrival"]).mean()
    assert wait == pytest.approx(rho / (2 * mu * (1 - rho)), rel=0.06)
    assert batching.md1_mean_wait(rho * mu, service_s) == pytest.approx(rho / (2 * mu * (1 - rho)))
    s = batching.summarize(df)
    assert s["busy_fraction"] == pytest.approx(rho, rel=0.02)  # utilisation = lambda x S
    assert s["throughput_per_s"] == pytest.approx(rho * mu, rel=0.02)


def test_md1_formula_by_hand_and_its_limits():
    # 80 requests/s, 10 ms each: rho 0.8, W_q = 0.8 / (2 x 100 x 0.2) = 20 ms.
    assert batching.md1_mean_wait(80, 0.01) == pytest.approx(0.02)
    assert batching.md1_mean_wait(100, 0.01) == math.inf
    with pytest.raises(ValueError, match="rate"):
        batching.md1_mean_wait(0, 0.01)
    with pytest.raises(ValueError, match="service_s"):
        batching.md1_mean_wait(1, -0.01)


def test_static_batching_waits_for_a_full_batch_and_flushes_at_the_end():
    # max_batch 3, infinite delay: (0, 1, 2) start when 2 arrives at 0.2; (3, 4) are
    # flushed when the trace ends (last arrival 0.4) but the GPU is busy until 1.2.
    df = batching.simulate([0.0, 0.1, 0.2, 0.3, 0.4], 1.0, max_batch=3,
                           max_queue_delay=math.inf)
    np.testing.assert_allclose(df["start"], [0.2, 0.2, 0.2, 1.2, 1.2])
    assert df["batch_size"].tolist() == [3, 3, 3, 2, 2]


def test_littles_law_for_the_queue_with_poisson_arrivals():
    # Little: mean number waiting L_q = lambda W_q. Poisson arrivals see time averages
    # (PASTA), so the number an arrival finds waiting averages to lambda W_q, counted
    # here from start times alone, independently of the latency column.
    rate = 700.0
    df = batching.simulate(batching.poisson_arrivals(rate, 100_000, seed=5),
                           lambda b: 0.002 + 0.0005 * b, max_batch=8)
    arrival, start = df["arrival"].to_numpy(), df["start"].to_numpy()
    # Requests that arrived before i and had not yet started when i arrived:
    started_by = np.searchsorted(np.sort(start), arrival, side="right")
    found_waiting = np.arange(len(df)) - np.minimum(started_by, np.arange(len(df)))
    lq = found_waiting.mean()
    wq = (start - arrival).mean()
    assert lq == pytest.approx(rate * wq, rel=0.05)


def test_throughput_saturates_at_full_batches():
    # Offered load far beyond capacity: every batch is full; throughput -> b / S(b).
    service = lambda b: 0.01 + 0.001 * b  # noqa: E731
    df = batching.simulate(batching.poisson_arrivals(1e5, 20_000), service, max_batch=16)
    s = batching.summarize(df)
    assert s["mean_batch_per_batch"] == pytest.approx(16, rel=0.01)
    assert s["throughput_per_s"] == pytest.approx(16 / 0.026, rel=0.01)
    assert batching.saturation_throughput(service, 16) == pytest.approx(16 / 0.026)


# --- summaries, policies ---------------------------------------------------------------

def test_summarize_percentiles_and_goodput_by_hand():
    df = batching.simulate([0.0, 0.1, 0.2, 0.3], 1.0, max_batch=2)
    s = batching.summarize(df, slo_s=1.85)  # latencies 1, 1.9, 1.8, 2.7; span 0..3 s
    assert s["p50_s"] == pytest.approx(1.85)
    assert s["throughput_per_s"] == pytest.approx(4 / 3)
    assert s["slo_met_per_s"] == pytest.approx(2 / 3)
    assert s["mean_batch"] == pytest.approx(1.5)  # per request: 1, 2, 2, 1
    assert s["busy_fraction"] == pytest.approx(1.0)


def test_summarize_rejects_what_is_not_a_simulation():
    import pandas as pd

    with pytest.raises(KeyError, match="latency"):
        batching.summarize(pd.DataFrame({"arrival": [0.0]}))
    df = batching.simulate([0.0], 1.0, 1)
    with pytest.raises(ValueError, match="slo"):
        batching.summarize(df, slo_s=-1)


def test_capacity_under_an_slo_is_bounded_by_saturation_and_grows_with_the_slo():
    service = lambda b: 0.01 + 0.001 * b  # noqa: E731
    tight = batching.capacity(service, 8, slo_s=0.05, n=2000)
    loose = batching.capacity(service, 8, slo_s=0.2, n=2000)
    assert 0 < tight < loose <= batching.saturation_throughput(service, 8)
    # An SLO shorter than one batch of 1 cannot be met at any rate.
    assert batching.capacity(service, 8, slo_s=0.005, n=500) == 0.0
    # At the found rate the p99 meets the SLO (same random gaps as capacity used).
    df = batching.simulate(batching.poisson_arrivals(1.0, 2000) / tight, service, 8)
    assert np.percentile(df["latency"], 99) <= 0.05


def test_sweep_prefers_a_bigger_batch_when_batching_is_cheap():
    # Memory-bound: a batch of 16 costs barely more than a batch of 1.
    service = lambda b: 0.01 + 0.0001 * b  # noqa: E731
    best = batching.sweep(service, [1, 4, 16], [0.0, 0.005], slo_s=0.1, n=1000).iloc[0]
    assert best["max_batch"] == 16


def test_best_policy_takes_the_smallest_batch_within_tolerance_by_hand():
    import pandas as pd

    table = pd.DataFrame({"max_batch": [256, 128, 128, 64],
                          "max_queue_delay_s": [0.0, 0.002, 0.0, 0.0],
                          "capacity_per_s": [1000.0, 990.0, 985.0, 900.0]})
    best = batching.best_policy(table, within=0.02)  # >= 980: 256, 128 (both delays)
    assert best["max_batch"] == 128 and best["max_queue_delay_s"] == 0.0
    assert batching.best_policy(table, within=0.0)["max_batch"] == 256
    with pytest.raises(ValueError, match="no policy meets"):
        batching.best_policy(table.assign(capacity_per_s=0.0))
    with pytest.raises(KeyError, match="capacity_per_s"):
        batching.best_policy(table.drop(columns="capacity_per_s"))


def test_batching_does_not_raise_throughput_when_already_compute_bound():
    # Service proportional to batch (compute-bound): b / S(b) is the same for every b.
    service = lambda b: 0.002 * b  # noqa: E731
    rates = [batching.saturation_throughput(service, b) for b in (1, 4, 16)]
    np.testing.assert_allclose(rates, 500.0)


def test_roofline_service_time_is_the_decode_step():
    f = batching.roofline_service_s("llama-2-7b", "A100 80GB", context=512,
                                       overhead_s=1e-4)
    assert f(8) == pytest.approx(llm.decode_step_s("llama-2-7b", "A100 80GB", 8, 512) + 1e-4)
    np.testing.assert_allclose(f(np.array([1, 2])), [f(1), f(2)])


@pytest.mark.parametrize("kwargs, match", [
    (dict(max_batch=0), "max_batch"),
    (dict(max_batch=2.5), "max_batch"),
    (dict(max_batch=4, max_queue_delay=-1), "max_queue_delay"),
    (dict(max_batch=4, preferred_batch_sizes=[8]), "preferred_batch_sizes"),
])
def test_simulate_rejects_bad_policies(kwargs, match):
    with pytest.raises(ValueError, match=match):
        batching.simulate([0.0, 1.0], 1.0, **kwargs)


# --- two models, one GPU ----------------------------------------------------------------

def test_two_models_share_one_gpu_by_hand():
    # A at 0 and 0.5 (service 1 s), B at 0.1 (service 2 s), batch 1 each.
    # GPU: A0 0..1; at 1 both A1 (arr 0.5) and B0 (arr 0.1) could start: the older, B0,
    # goes 1..3; then A1 3..4.
    df = batching.simulate_shared({
        "A": dict(arrivals=[0.0, 0.5], service_s=1.0, max_batch=1),
        "B": dict(arrivals=[0.1], service_s=2.0, max_batch=1)})
    assert df["model"].tolist() == ["A", "B", "A"]
    np.testing.assert_allclose(df["start"], [0, 1, 3])
    np.testing.assert_allclose(df["finish"], [1, 3, 4])


def test_sharing_adds_up_utilisation_and_matches_one_model_when_alone():
    a = batching.poisson_arrivals(30.0, 5000, seed=1)
    b = batching.poisson_arrivals(20.0, 3333, seed=2)  # spans the same ~167 s
    alone = batching.simulate(a, 0.01, 1)
    shared = batching.simulate_shared({"a": dict(arrivals=a, service_s=0.01, max_batch=1)})
    np.testing.assert_allclose(shared["finish"], alone["finish"])
    both = batching.simulate_shared({"a": dict(arrivals=a, service_s=0.01, max_batch=1),
                                     "b": dict(arrivals=b, service_s=0.01, max_batch=1)})
    # Utilisation adds: 30 x 10 ms + 20 x 10 ms = 0.5 of the GPU. Two Poisson streams make
    # one of rate 50/s, so the wait is M/D/1's at rho = 0.5: 0.5 / (2 x 100 x 0.5) = 5 ms.
    s = batching.summarize(both)
    assert s["busy_fraction"] == pytest.approx(0.5, rel=0.05)
    assert (both["start"] - both["arrival"]).mean() == pytest.approx(0.005, rel=0.15)
    assert (both["start"] - both["arrival"]).mean() > (alone["start"] - alone["arrival"]).mean()


def test_simulate_shared_rejects_missing_settings():
    with pytest.raises(ValueError, match="needs arrivals"):
        batching.simulate_shared({"a": dict(arrivals=[0.0], max_batch=1)})
    with pytest.raises(ValueError, match="empty"):
        batching.simulate_shared({})


# --- token-level generation -------------------------------------------------------------

def test_static_generation_runs_the_batch_to_its_longest_sequence_by_hand():
    # Two requests at 0 with 2 and 5 tokens, step 1 s: one batch of 2 for 5 steps.
    # A third at 0.5 waits for the whole batch: it starts at 5, runs 1 step.
    df = batching.simulate_generation([0, 0, 0.5], [2, 5, 1], 1.0, max_batch=2,
                                      policy="static")
    np.testing.assert_allclose(df["finish"], [5, 5, 6])
    np.testing.assert_allclose(df["start"], [0, 0, 5])


def test_continuous_generation_fills_a_freed_slot_at_the_next_step_by_hand():
    # Continuous: request 0 leaves after step 2 (t=2); request 2 (arrived 0.5) joins at
    # t=2, needs 1 step: done at 3. Request 1 finishes its 5 steps at t=5.
    df = batching.simulate_generation([0, 0, 0.5], [2, 5, 1], 1.0, max_batch=2)
    np.testing.assert_allclose(df["finish"], [2, 5, 3])
    np.testing.assert_allclose(df["start"], [0, 0, 2])


def test_continuous_batching_beats_static_at_the_same_load():
    rng = np.random.default_rng(0)
    a = batching.poisson_arrivals(20.0, 2000, seed=4)
    tokens = rng.integers(5, 200, size=2000)
    step = lambda b: 0.01 + 0.0002 * b  # noqa: E731
    static = batching.summarize(batching.simulate_generation(a, tokens, step, 32, "static"))
    cont = batching.summarize(batching.simulate_generation(a, tokens, step, 32))
    assert cont["p99_s"] < static["p99_s"]
    assert cont["throughput_per_s"] >= static["throughput_per_s"] * 0.99


def test_generation_rejects_bad_input():
    with pytest.raises(ValueError, match="one count per arrival"):
        batching.simulate_generation([0, 1], [3], 1.0, 2)
    with pytest.raises(ValueError, match="policy"):
        batching.simulate_generation([0], [3], 1.0, 2, policy="paged")
    with pytest.raises(ValueError, match="whole number"):
        batching.simulate_generation([0], [0], 1.0, 2)


# --- one event loop ---------------------------------------------------------------------

def test_the_capacity_search_and_simulate_share_one_event_loop():
    # _latencies (what capacity bisects on) is simulate's latency column, exactly.
    a = batching.poisson_arrivals(300.0, 3000, seed=7)
    service = lambda b: 0.002 + 0.0005 * b  # noqa: E731
    df = batching.simulate(a, service, 8, 0.001, preferred_batch_sizes=[4])
    lat = batching._latencies(a, batching._service_array(service, 8), 8, 0.001, [4, 8])
    np.testing.assert_array_equal(lat, df["latency"].to_numpy())


def test_roofline_service_time_of_an_embedding_request():
    # A request of 32 tokens, no KV cache, no logits: batch b is one forward step over
    # 32 b tokens (e5-mistral-7b-instruct has Mistral-7B's shape).
    f = batching.roofline_service_s("mistral-7b", "A100 80GB", tokens_per_request=32,
                                       lm_head=False)
    for b in (1, 8):
        assert f(b) == pytest.approx(llm.forward_step_s(
            "mistral-7b", "A100 80GB", [32] * b, [0] * b, logits=[0] * b))


def test_model_service_time_is_the_achievable_step_and_the_ceiling_beside():
    # A decode step of Llama-2-7B on an A100 80GB at batch 1, context 0: the step reads its
    # matmul weights, 2 x (32 x (4 x 4096^2 + 3 x 4096 x 11008) + 32000 x 4096) =
    # 13,214,154,752 B. Ceiling: / 2.039e12 = 6.481 ms. Achievable (achievable.FITTED):
    # / (0.85 x 2.039e12) = 7.624 ms + 32 layers x 13 kernels x 0.5 us (0.208 ms) + 1.6 ms
    # a step = 9.432 ms; plus overhead_s on both.
    from gpuinfer.predict import achievable

    weight_bytes = 2 * (32 * (4 * 4096**2 + 3 * 4096 * 11008) + 32000 * 4096)
    ach = batching.model_service_s("llama-2-7b", "A100 80GB", overhead_s=1e-4)
    ceil = batching.model_service_s("llama-2-7b", "A100 80GB", overhead_s=1e-4,
                                       achievable=False)
    assert ceil(1) == pytest.approx(weight_bytes / 2.039e12 + 1e-4, rel=0.01)
    fit = achievable.FITTED    # 0.85, 13 kernels x 0.5 us and 1.6 ms: FITTED's constants
    gaps = 32 * fit.kernels_per_layer * fit.kernel_gap_s                     # 0.208 ms
    assert ach(1) == pytest.approx(weight_bytes / (fit.bandwidth * 2.039e12) + gaps + fit.step_s
                                   + 1e-4, rel=0.01)
    assert ceil(4) == batching.roofline_service_s("llama-2-7b", "A100 80GB",
                                                     overhead_s=1e-4)(4)
    np.testing.assert_allclose(ach(np.array([1, 4])), [ach(1), ach(4)])
    # An Efficiency is passed through; the ceiling's Efficiency is the roofline.
    assert batching.model_service_s("llama-2-7b", "A100 80GB",
                                       achievable=achievable.FITTED)(2) == pytest.approx(ach(2) - 1e-4)
    assert batching.model_service_s("llama-2-7b", "A100 80GB",
                                       achievable=achievable.CEILING)(2) == pytest.approx(ceil(2) - 1e-4)
    with pytest.raises(TypeError, match="achievable"):
        batching.model_service_s("llama-2-7b", "A100 80GB", achievable=0.5)


# --- closed-loop load: coordinated omission -----------------------------------------------

def test_closed_loop_without_think_time_by_hand():
    # 8 clients, max_batch 8, service 10 ms + 1 ms per request: all 8 go together every
    # time; latency S(8) = 18 ms for every request, throughput 8 / 18 ms = 444.4/s.
    df = batching.simulate_closed_loop(8, lambda b: 0.010 + 0.001 * b, 8, n=800)
    assert len(df) == 800 and set(df["client"]) == set(range(8))
    np.testing.assert_allclose(df["latency"], 0.018)
    assert (df["batch_size"] == 8).all()
    assert batching.summarize(df)["throughput_per_s"] == pytest.approx(8 / 0.018)


def test_closed_loop_reports_a_lower_tail_than_open_loop_at_the_same_throughput():
    # 4 clients, one request at a time (max_batch 1), 10 ms each, think 40 ms (mean).
    # A closed-loop request finds at most the other 3 clients ahead of it, so no
    # latency can exceed 4 x 10 ms = 40 ms, whatever the think times.
    closed = batching.simulate_closed_loop(4, 0.010, 1, think_s=0.040, n=20_000, seed=1)
    c = batching.summarize(closed)
    assert closed["latency"].max() <= 0.040 + 1e-12
    # Throughput of a closed loop: N / (R + Z) (the interactive response-time law), so at
    # most 4 / 50 ms = 80/s, and at least 4 / (40 + 40) ms = 50/s.
    rate = c["throughput_per_s"]
    assert 50 < rate < 80
    assert rate == pytest.approx(4 / (c["mean_latency_s"] + 0.040), rel=0.02)
    # Open loop (Poisson) at the same throughput: M/D/1, mean latency by
    # Pollaczek-Khinchine W_q + S; its tail has no bound and crosses the closed loop's.
    open_ = batching.simulate(batching.poisson_arrivals(rate, 20_000, seed=2), 0.010, 1)
    o = batching.summarize(open_)
    assert o["mean_latency_s"] == pytest.approx(batching.md1_mean_wait(rate, 0.010) + 0.010,
                                                rel=0.1)
    assert o["p99_s"] > 2 * c["p99_s"]
    assert o["p99_s"] > 0.040  # beyond anything the closed loop can report


# --- LLM serving: prefill and decode -----------------------------------------------------

MODEL, GPU = "llama-3-8b", "H100 SXM"   # the LLM server's cases below
SERVE = dict(model=MODEL, accelerator=GPU, max_batch=8)
BAD_CALLS = [
    # capacity's search is bounded and refuses what cannot be meant
    (lambda: batching.capacity(0.01, 4, slo_s=0.05, rel_tol=0), ValueError, "rel_tol"),
    (lambda: batching.capacity(0.01, 4, slo_s=0.05, rel_tol=math.nan), ValueError, "rel_tol"),
    (lambda: batching.capacity(0.01, 4, slo_s=0.05, rel_tol=1.5), ValueError, "rel_tol"),
    (lambda: batching.capacity(0.01, 4, slo_s=math.nan), ValueError, "slo"),
    (lambda: batching.capacity(0.01, 4, slo_s=0.05, quantile=100), ValueError, "quantile"),
    (lambda: batching.capacity(0.01, 4, slo_s=0.05, n=2.5), ValueError, "n must"),
    (lambda: batching.capacity(0.01, 4, slo_s=0.05, n=10**12), ValueError, "n must"),
    (lambda: batching.capacity(0.01, 4, slo_s="fast"), TypeError, "slo"),
    # names fail at once, not inside the simulation
    (lambda: batching.roofline_service_s("llama-9", "H100 SXM"), KeyError, "llama-9"),
    (lambda: batching.roofline_service_s("llama-3-8b", "H900"), KeyError, "H900"),
    (lambda: batching.roofline_service_s("llama-3-8b", "H100 SXM", dtype="fp7"),
     KeyError, "fp7"),
    (lambda: batching.roofline_service_s("llama-3-8b", "T4", dtype="bf16"),
     ValueError, "peak"),
    (lambda: batching.roofline_service_s("llama-3-8b", "H100 SXM", context=-1),
     ValueError, "context"),
    (lambda: batching.roofline_service_s("llama-3-8b", "H100 SXM", overhead_s=-1e-3),
     ValueError, "overhead_s"),
    (lambda: batching.roofline_service_s("llama-3-8b", "H100 SXM")(2.5),
     ValueError, "batch"),
    # arrivals and counts
    (lambda: batching.poisson_arrivals(math.nan, 10), ValueError, "rate"),
    (lambda: batching.poisson_arrivals(1.0, 10, seed=-1), ValueError, "seed"),
    (lambda: batching.poisson_arrivals(1.0, 10**12), ValueError, "n must"),
    (lambda: batching.simulate([1.0, 0.0], 1.0, 1), ValueError, "sorted"),
    (lambda: batching.simulate([], 1.0, 1), ValueError, "empty"),
    (lambda: batching.simulate([0.0, math.nan], 1.0, 1), ValueError, "arrivals"),
    (lambda: batching.simulate([[0.0, 1.0]], 1.0, 1), ValueError, "1-D"),
    (lambda: batching.simulate("0,1", 1.0, 1), TypeError, "arrivals"),
    (lambda: batching.simulate([0.0], lambda b: 0.0 * b, 1), ValueError, "positive"),
    (lambda: batching.simulate([0.0], "fast", 1), TypeError, "service_s"),
    (lambda: batching.simulate([0.0], -1.0, 1), ValueError, "service_s"),
    (lambda: batching.simulate([0.0], 1.0, True), TypeError, "max_batch"),
    (lambda: batching.simulate([0.0], 1.0, 4, max_queue_delay=math.nan), ValueError,
     "max_queue_delay"),
    (lambda: batching.simulate([0.0], 1.0, 4, preferred_batch_sizes=2), TypeError,
     "preferred_batch_sizes"),
    (lambda: batching.simulate([0.0], 1.0, 4, preferred_batch_sizes=[1.5]), ValueError,
     "preferred_batch_sizes"),
    (lambda: batching.service_table([1, 2], [0.1]), ValueError, "same length"),
    (lambda: batching.service_table([1, 1], [0.1, 0.2]), ValueError, "distinct"),
    (lambda: batching.service_table([1, 2], [0.1, -0.2]), ValueError, "seconds"),
    (lambda: batching.service_table([1, 2], [0.1, 0.2])(3), ValueError, "outside"),
    (lambda: batching.saturation_throughput(0.01, 2.5), ValueError, "max_batch"),
    (lambda: batching.md1_mean_wait(80, math.inf), ValueError, "service_s"),
    (lambda: batching.summarize([1, 2]), TypeError, "DataFrame"),
    (lambda: batching.best_policy(pd.DataFrame({"max_batch": [1]}), 0.02), KeyError,
     "capacity_per_s"),
    (lambda: batching.best_policy(None), TypeError, "DataFrame"),
    (lambda: batching.sweep(0.01, [], [0.0], slo_s=0.1), ValueError, "max_batches"),
    (lambda: batching.load_curve([10, -1], 0.01, 4), ValueError, "arrival_rates"),
    (lambda: batching.simulate_shared([("a", {})]), TypeError, "dict"),
    (lambda: batching.simulate_generation([0, 1], [3, 2.5], 1.0, 2), ValueError,
     "output_tokens"),
    (lambda: batching.simulate_generation([0, 1], [3], 1.0, 2), ValueError,
     "one count per arrival"),
    (lambda: batching.simulate_generation([0], [3], 1.0, 2, policy="paged"), KeyError,
     "policy"),
    # closed loop
    (lambda: batching.simulate_closed_loop(0, 0.01, 4), ValueError, "n_clients"),
    (lambda: batching.simulate_closed_loop(2.5, 0.01, 4), ValueError, "n_clients"),
    (lambda: batching.simulate_closed_loop(4, 0.01, 4, think_s=-1), ValueError,
     "think_s"),
    (lambda: batching.simulate_closed_loop(4, 0.01, 4, n=0), ValueError, "n must"),
    # the LLM server
    (lambda: llm_simulator.simulate_llm([0.0, 1.0], [10], [5, 5], **SERVE, achievable=False), ValueError,
     "prompt_tokens needs one count per arrival: 1 counts for 2"),
    (lambda: llm_simulator.simulate_llm([0.0], [10.5], [5], **SERVE, achievable=False), ValueError, "prompt_tokens"),
    (lambda: llm_simulator.simulate_llm([0.0], [0], [5], **SERVE, achievable=False), ValueError, "prompt_tokens"),
    (lambda: llm_simulator.simulate_llm([0.0], [10], [math.nan], **SERVE, achievable=False), ValueError,
     "output_tokens"),
    (lambda: llm_simulator.simulate_llm([0.0], [10], [5], "llama-9", GPU, max_batch=8, achievable=False), KeyError,
     "llama-9"),
    (lambda: llm_simulator.simulate_llm([0.0], [10], [5], MODEL, "H900", max_batch=8, achievable=False), KeyError,
     "H900"),
    (lambda: llm_simulator.simulate_llm([0.0], [10], [5], **SERVE, prefill_chunk=0, achievable=False), ValueError,
     "prefill_chunk"),
    (lambda: llm_simulator.simulate_llm([0.0], [10], [5], **SERVE, block_size=0, achievable=False), ValueError,
     "block_size"),
    (lambda: llm_simulator.simulate_llm([0.0], [10], [5], **SERVE, kv_cache_bytes=-1.0, achievable=False),
     ValueError, "kv_cache_bytes"),
    (lambda: llm_simulator.simulate_llm([0.0], [10], [5], **SERVE, prefix_tokens=-16, achievable=False),
     ValueError, "prefix_tokens"),
    (lambda: llm_simulator.simulate_llm([0.0], [10], [5], MODEL, GPU, max_batch=0, achievable=False), ValueError,
     "max_batch"),
    (lambda: llm_simulator.simulate_llm([0.0], [10], [5], "llama-3-70b", GPU, max_batch=8, achievable=False),
     ValueError, "KV blocks"),
    (lambda: llm_simulator.simulate_disaggregated([0.0], [10], [5], **SERVE, prefill_gpus=0, achievable=False),
     ValueError, "prefill_gpus"),
    (lambda: llm_simulator.simulate_disaggregated([0.0], [10], [5], **SERVE,
                                             transfer_bytes_per_s=0, achievable=False), ValueError,
     "transfer_bytes_per_s"),
    (lambda: paged_kv.kv_cache_budget(MODEL, GPU, gpu_memory_utilization=90), ValueError,
     "percentage"),
    (lambda: paged_kv.kv_cache_budget(MODEL, GPU, free_gpu_memory_fraction=0), ValueError,
     "free_gpu_memory_fraction"),
    (lambda: paged_kv.kv_memory_use([10, 200], max_len=128), ValueError, "longer"),
    (lambda: paged_kv.kv_blocks([1.5]), ValueError, "tokens"),
    (lambda: llm_slo.slo_attainment(pd.DataFrame({"ttft": [0.1]}), ttft_slo_s=1, tpot_slo_s=1),
     KeyError, "tpot"),
    (lambda: llm_slo.slo_attainment(pd.DataFrame({"ttft": [0.1], "tpot": [0.1]}),
                                     ttft_slo_s=0, tpot_slo_s=1), ValueError, "ttft_slo"),
    (lambda: llm_slo.summarize_llm(pd.DataFrame({c: [1.0] for c in llm_simulator.LLM_COLUMNS}),
                                    ttft_slo_s=1.0), ValueError, "both"),
    (lambda: llm_slo.goodput("simulate_llm", 10, ttft_slo_s=1, tpot_slo_s=1), TypeError, "serve"),
    (lambda: llm_slo.goodput(lambda a: None, 10, ttft_slo_s=1, tpot_slo_s=1), TypeError,
     "DataFrame"),
    (lambda: llm_slo.goodput(lambda a: None, 10, ttft_slo_s=1, tpot_slo_s=1, attainment=90),
     ValueError, "percentage"),
    (lambda: llm_slo.goodput(lambda a: None, 10, ttft_slo_s=1, tpot_slo_s=1, rel_tol=0),
     ValueError, "rel_tol"),
]


@pytest.mark.parametrize("call, error, words", BAD_CALLS)
def test_bad_input_gets_a_clear_error(call, error, words):
    with pytest.raises(error, match=words):
        call()
