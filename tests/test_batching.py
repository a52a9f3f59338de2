"""The batching simulators against queueing theory and cases worked by hand."""

import functools
import math

import numpy as np
import pandas as pd
import pytest

from gpuinfer import batching, hardware, llm


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
    s = batching.summarize(df, slo=1.85)  # latencies 1, 1.9, 1.8, 2.7; span 0..3 s
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
        batching.summarize(df, slo=-1)


def test_capacity_under_an_slo_is_bounded_by_saturation_and_grows_with_the_slo():
    service = lambda b: 0.01 + 0.001 * b  # noqa: E731
    tight = batching.capacity(service, 8, slo=0.05, n=2000)
    loose = batching.capacity(service, 8, slo=0.2, n=2000)
    assert 0 < tight < loose <= batching.saturation_throughput(service, 8)
    # An SLO shorter than one batch of 1 cannot be met at any rate.
    assert batching.capacity(service, 8, slo=0.005, n=500) == 0.0
    # At the found rate the p99 meets the SLO (same random gaps as capacity used).
    df = batching.simulate(batching.poisson_arrivals(1.0, 2000) / tight, service, 8)
    assert np.percentile(df["latency"], 99) <= 0.05


def test_sweep_prefers_a_bigger_batch_when_batching_is_cheap():
    # Memory-bound: a batch of 16 costs barely more than a batch of 1.
    service = lambda b: 0.01 + 0.0001 * b  # noqa: E731
    best = batching.sweep(service, [1, 4, 16], [0.0, 0.005], slo=0.1, n=1000).iloc[0]
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
    f = batching.roofline_service_time("llama-2-7b", "A100 80GB", context=512,
                                       overhead_s=1e-4)
    assert f(8) == pytest.approx(llm.decode_step_time("llama-2-7b", "A100 80GB", 8, 512) + 1e-4)
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
        "A": dict(arrivals=[0.0, 0.5], service_time=1.0, max_batch=1),
        "B": dict(arrivals=[0.1], service_time=2.0, max_batch=1)})
    assert df["model"].tolist() == ["A", "B", "A"]
    np.testing.assert_allclose(df["start"], [0, 1, 3])
    np.testing.assert_allclose(df["finish"], [1, 3, 4])


def test_sharing_adds_up_utilisation_and_matches_one_model_when_alone():
    a = batching.poisson_arrivals(30.0, 5000, seed=1)
    b = batching.poisson_arrivals(20.0, 3333, seed=2)  # spans the same ~167 s
    alone = batching.simulate(a, 0.01, 1)
    shared = batching.simulate_shared({"a": dict(arrivals=a, service_time=0.01, max_batch=1)})
    np.testing.assert_allclose(shared["finish"], alone["finish"])
    both = batching.simulate_shared({"a": dict(arrivals=a, service_time=0.01, max_batch=1),
                                     "b": dict(arrivals=b, service_time=0.01, max_batch=1)})
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
    f = batching.roofline_service_time("mistral-7b", "A100 80GB", tokens_per_request=32,
                                       lm_head=False)
    for b in (1, 8):
        assert f(b) == pytest.approx(llm.forward_step_time(
            "mistral-7b", "A100 80GB", [32] * b, [0] * b, logits=[0] * b))


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
    closed = batching.simulate_closed_loop(4, 0.010, 1, think_time=0.040, n=20_000, seed=1)
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

MODEL, GPU = "llama-3-8b", "H100 SXM"
KV = llm.kv_cache_bytes_per_token(MODEL)   # 2 x 32 x 8 x 128 x 2 B = 131,072 B


def test_a_lone_request_ttft_is_its_prefill_and_tpot_its_decode_steps():
    # One request: 1,000 prompt tokens, 5 output tokens, alone on the GPU.
    # TTFT = one prefill step of 1,000 tokens (logits for the last one).
    # Tokens 2..5 come from decode steps at 1000, 1001, 1002, 1003 cached tokens.
    for chunk in (None, 4096):
        df = batching.simulate_llm([0.5], [1000], [5], MODEL, GPU, max_batch=8,
                                   prefill_chunk=chunk)
        r = df.iloc[0]
        prefill = llm.prefill_time(MODEL, GPU, 1000)
        decode = [llm.decode_step_time(MODEL, GPU, 1, 1000 + j) for j in range(4)]
        assert r["ttft"] == pytest.approx(prefill)
        assert r["first_token"] == pytest.approx(0.5 + prefill)
        assert r["finish"] == pytest.approx(0.5 + prefill + sum(decode))
        assert r["tpot"] == pytest.approx(sum(decode) / 4)
        assert r["max_gap"] == pytest.approx(max(decode))
        assert r["latency"] == pytest.approx(prefill + sum(decode))


def test_a_chunked_prompt_by_hand():
    # 1,000 tokens in chunks of 256: 256 + 256 + 256 + 232, each on top of what the
    # earlier chunks cached; only the last chunk runs the LM head.
    df = batching.simulate_llm([0.0], [1000], [1], MODEL, GPU, max_batch=4, prefill_chunk=256)
    steps = [llm.forward_step_time(MODEL, GPU, [q], [c], logits=[last])
             for q, c, last in [(256, 0, 0), (256, 256, 0), (256, 512, 0), (232, 768, 1)]]
    assert df["ttft"].iloc[0] == pytest.approx(sum(steps))
    assert sum(steps) > llm.prefill_time(MODEL, GPU, 1000)  # chunking costs TTFT
    assert np.isnan(df["tpot"].iloc[0]) and np.isnan(df["max_gap"].iloc[0])


def test_a_whole_prefill_stalls_the_running_decode_by_hand():
    # A (100 + 50 tokens) starts at 0. B (4,000-token prompt) arrives just before A's
    # prefill ends, so at that step boundary the server prefills B whole while A waits
    # (prefill first): A's gap between its first and second token is B's prefill plus
    # the next step, which decodes A and B together.
    t_a = llm.prefill_time(MODEL, GPU, 100)
    arrivals = [0.0, t_a * (1 - 1e-9)]
    whole = batching.simulate_llm(arrivals, [100, 4000], [50, 20], MODEL, GPU, max_batch=8)
    gap = llm.prefill_time(MODEL, GPU, 4000) + llm.forward_step_time(MODEL, GPU, [1, 1],
                                                                     [100, 4000])
    assert whole["max_gap"].iloc[0] == pytest.approx(gap)
    # Chunks of 256 tokens: every step is A's decode plus at most 255 of B's prompt
    # tokens, on at most 4,000 cached: A never waits longer than that step.
    chunked = batching.simulate_llm(arrivals, [100, 4000], [50, 20], MODEL, GPU,
                                    max_batch=8, prefill_chunk=256)
    worst = llm.forward_step_time(MODEL, GPU, [1, 255], [150, 4000], logits=[1, 1])
    assert chunked["max_gap"].iloc[0] < worst < gap / 5
    assert chunked["ttft"].iloc[1] > whole["ttft"].iloc[1]   # B's first token comes later


def test_prefix_caching_skips_the_shared_prompt():
    # 1,000-token prompt whose first 512 tokens (32 blocks of 16) are a cached system
    # prompt: the prefill computes the other 488 tokens on top of 512 cached ones.
    df = batching.simulate_llm([0.0], [1000], [2], MODEL, GPU, max_batch=4, prefix_tokens=512)
    assert df["ttft"].iloc[0] == pytest.approx(
        llm.forward_step_time(MODEL, GPU, [488], [512]))
    # A prefix that is not a whole number of blocks is cached up to its last whole block.
    df = batching.simulate_llm([0.0], [1000], [2], MODEL, GPU, max_batch=4, prefix_tokens=520)
    assert df["ttft"].iloc[0] == pytest.approx(
        llm.forward_step_time(MODEL, GPU, [488], [512]))


def test_max_batch_one_serves_one_request_at_a_time():
    df = batching.simulate_llm([0.0, 0.0], [64, 64], [10, 10], MODEL, GPU, max_batch=1)
    assert df["start"].iloc[1] == pytest.approx(df["finish"].iloc[0])


def test_when_the_cache_runs_out_the_youngest_request_is_recomputed():
    # A cache of 6 blocks of 16 tokens. A and B: 16-token prompts (1 block each), 40
    # output tokens (up to 16 + 39 = 55 tokens: 4 blocks). Both run; at 17 and 33 tokens
    # each takes a 2nd and 3rd block (6 in all). To feed its 48th token each needs a 4th:
    # none is free, so B (the younger) is preempted with 33 tokens generated, A finishes,
    # and B is prefilled again over 16 + 33 = 49 tokens.
    df, steps = batching.simulate_llm([0.0, 0.0], [16, 16], [40, 40], MODEL, GPU,
                                      max_batch=8, kv_cache_bytes=6 * 16 * KV,
                                      return_steps=True)
    assert df["preemptions"].tolist() == [0, 1]
    assert df["finish"].iloc[1] > df["finish"].iloc[0]
    assert 49 in steps["prefill_tokens"].tolist()
    # With room for both (8 blocks), nobody is preempted and both finish together.
    roomy = batching.simulate_llm([0.0, 0.0], [16, 16], [40, 40], MODEL, GPU, max_batch=8,
                                  kv_cache_bytes=8 * 16 * KV)
    assert roomy["preemptions"].sum() == 0
    assert roomy["finish"].iloc[0] == roomy["finish"].iloc[1]
    # A request that cannot fit an empty cache is refused before the run.
    with pytest.raises(ValueError, match="KV blocks"):
        batching.simulate_llm([0.0], [200], [10], MODEL, GPU, max_batch=8,
                              kv_cache_bytes=6 * 16 * KV)


def test_running_decode_steps_together_changes_nothing(monkeypatch):
    # Runs of decode-only steps are timed at once (their time is affine in the context);
    # the result must equal stepping one by one, with preemptions and chunking.
    rng = np.random.default_rng(0)
    n = 120
    a = batching.poisson_arrivals(20.0, n, seed=3)
    P, O = rng.integers(16, 1500, n), rng.integers(1, 200, n)
    for chunk in (None, 256):
        kw = dict(max_batch=32, prefill_chunk=chunk, kv_cache_bytes=3000 * 16 * KV)
        fast = batching.simulate_llm(a, P, O, MODEL, GPU, **kw)
        monkeypatch.setattr(batching, "_FAST_FORWARD_MIN", 10**9)
        slow = batching.simulate_llm(a, P, O, MODEL, GPU, **kw)
        monkeypatch.undo()
        for col in ("first_token", "finish", "max_gap", "preemptions"):
            np.testing.assert_allclose(fast[col], slow[col], rtol=1e-12, atol=1e-12)


def test_the_step_timer_matches_the_package_on_mixed_steps():
    rng = np.random.default_rng(1)
    for model, gpu, dtype in [(MODEL, GPU, "fp16"), ("llama-2-7b", "A100 80GB", "int4")]:
        fast = batching._StepCost(model, gpu, dtype)
        ref = llm.step_timer(model, gpu, dtype)
        for _ in range(50):
            b = int(rng.integers(1, 40))
            q = np.where(rng.random(b) < 0.2, rng.integers(1, 900, b), 1)
            c = rng.integers(0, 4000, b)
            lg = (rng.random(b) < 0.7).astype(float)
            assert fast(q, c, lg) == pytest.approx(ref(q, c, lg), rel=1e-9)


def test_kv_cache_budget_by_hand():
    acc = hardware.get(GPU)
    weights = llm.weight_bytes(MODEL)     # 8,030,261,248 parameters x 2 B
    reserve = llm.DEFAULT_RESERVE_BYTES   # 1 GiB
    # Everything the card has (85,045,477,376 B on an H100 SXM) less weights and reserve.
    assert batching.kv_cache_budget(MODEL, GPU) == pytest.approx(
        acc.memory_bytes - weights - reserve)
    # vLLM: 0.9 of the card for weights, activations and cache.
    assert batching.kv_cache_budget(MODEL, GPU, gpu_memory_utilization=0.9) == pytest.approx(
        0.9 * acc.memory_bytes - weights - reserve)
    # TensorRT-LLM: 0.9 of what is free after the weights.
    assert batching.kv_cache_budget(MODEL, GPU, free_gpu_memory_fraction=0.9) == pytest.approx(
        0.9 * (acc.memory_bytes - weights - reserve))
    # Two vLLM instances at 0.5 each: each holds its own weights.
    two = batching.kv_cache_budget(MODEL, GPU, gpu_memory_utilization=0.5)
    assert 2 * two == pytest.approx(acc.memory_bytes - 2 * weights - 2 * reserve)
    # The weights of a 70B model do not fit one H100: nothing left.
    assert batching.kv_cache_budget("llama-3-70b", GPU) == 0.0
    with pytest.raises(ValueError, match="not both"):
        batching.kv_cache_budget(MODEL, GPU, gpu_memory_utilization=0.9,
                                 free_gpu_memory_fraction=0.9)


def test_kv_memory_use_by_hand():
    # Sequences of 10, 20 and 100 tokens. Contiguous: 3 x 128 reserved = 384 tokens for
    # 130 used (33.9%). Paged, blocks of 16: 1 + 2 + 7 = 10 blocks = 160 tokens (81.25%).
    u = batching.kv_memory_use([10, 20, 100], max_len=128, block_size=16)
    assert u["contiguous_used"] == pytest.approx(130 / 384)
    assert u["paged_used"] == pytest.approx(130 / 160)
    assert u["paged_capacity_ratio"] == pytest.approx(384 / 160)
    np.testing.assert_array_equal(batching.kv_blocks([0, 1, 16, 17]), [0, 1, 1, 2])


def test_disaggregated_lone_request_by_hand():
    # Prefill on one GPU, then 1,000 tokens of KV cache (131 MB) over 50 GB/s, then
    # decode on another: the first decode step waits for the transfer.
    bw = 50e9
    df = batching.simulate_disaggregated([0.0], [1000], [4], MODEL, GPU, max_batch=8,
                                         transfer_bytes_per_s=bw)
    r = df.iloc[0]
    prefill = llm.prefill_time(MODEL, GPU, 1000)
    transfer = 1000 * KV / bw
    decode = [llm.decode_step_time(MODEL, GPU, 1, 1000 + j) for j in range(3)]
    assert r["ttft"] == pytest.approx(prefill)
    assert r["finish"] == pytest.approx(prefill + transfer + sum(decode))
    assert r["max_gap"] == pytest.approx(transfer + decode[0])


def test_disaggregation_removes_the_prefill_stalls_from_decode():
    rng = np.random.default_rng(2)
    n = 150
    a = batching.poisson_arrivals(6.0, n, seed=4)
    P, O = rng.integers(1000, 3000, n), rng.integers(50, 150, n)
    colocated = batching.simulate_llm(a, P, O, MODEL, GPU, max_batch=64)
    split = batching.simulate_disaggregated(a, P, O, MODEL, GPU, max_batch=64)
    # On the decode GPU a sequence only ever waits for decode steps (plus its first
    # step after joining): no prefill ever sits between two of its tokens.
    assert np.percentile(split["max_gap"], 99) < np.percentile(colocated["max_gap"], 99) / 3


def test_summaries_and_attainment_by_hand():
    df = pd.DataFrame({"arrival": [0.0, 1.0, 2.0, 3.0], "prompt_tokens": [10] * 4,
                       "output_tokens": [3, 3, 1, 3], "start": [0.0, 1.0, 2.0, 3.0],
                       "first_token": [0.1, 1.5, 2.2, 3.1], "finish": [0.3, 1.7, 2.2, 4.1],
                       "ttft": [0.1, 0.5, 0.2, 0.1], "tpot": [0.1, 0.1, np.nan, 0.5],
                       "max_gap": [0.1, 0.1, np.nan, 0.5], "latency": [0.3, 0.7, 0.2, 1.1],
                       "preemptions": [0, 0, 0, 0]})
    # Request 1 misses TTFT (0.5 > 0.3), request 3 misses TPOT (0.5 > 0.2); request 2 has
    # one token (no TPOT) and meets its TTFT: 2 of 4 meet both.
    assert batching.slo_attainment(df, ttft_slo=0.3, tpot_slo=0.2) == 0.5
    s = batching.summarize_llm(df, ttft_slo=0.3, tpot_slo=0.2)
    assert s["slo_attainment"] == 0.5
    assert s["throughput_per_s"] == pytest.approx(4 / 4.1)
    assert s["output_tokens_per_s"] == pytest.approx(10 / 4.1)


def test_goodput_finds_the_rate_where_attainment_falls_by_hand():
    # A made-up server whose every request has a TTFT of 1 ms per request/s of load: the
    # TTFT SLO of 50 ms holds up to 50 requests/s, so goodput is 50 requests/s.
    def serve(arrivals):
        rate = (len(arrivals) - 1) / (arrivals[-1] - arrivals[0])
        return pd.DataFrame({"ttft": np.full(len(arrivals), 0.001 * rate),
                             "tpot": np.zeros(len(arrivals)),
                             "latency": np.full(len(arrivals), 0.001)})
    # The search rescales one unit-rate trace, whose own measured rate is (n - 1) / span:
    # at a nominal rate r the server sees r (n - 1) / span, so the answer is
    # r = 50 x span / (n - 1).
    unit = batching.poisson_arrivals(1.0, 500, seed=0)
    expected = 50.0 * unit[-1] / 499
    g = batching.goodput(serve, 500, ttft_slo=0.05, tpot_slo=1.0, rel_tol=0.001)
    assert g == pytest.approx(expected, rel=0.002)
    assert g <= expected  # the search returns a rate that met the target
    # A server that misses the SLO even alone has no goodput.
    assert batching.goodput(serve, 500, ttft_slo=1e-9, tpot_slo=1.0) == 0.0


def test_chunked_prefill_has_more_goodput_under_a_tight_tpot_slo():
    rng = np.random.default_rng(5)
    n = 80
    P, O = rng.integers(1500, 4000, n), rng.integers(40, 120, n)
    serve = {chunk: functools.partial(batching.simulate_llm, prompt_tokens=P,
                                      output_tokens=O, model=MODEL, accelerator=GPU,
                                      max_batch=64, prefill_chunk=chunk)
             for chunk in (None, 512)}
    g = {c: batching.goodput(s, n, ttft_slo=1.0, tpot_slo=0.012, rel_tol=0.1, rate=1.0)
         for c, s in serve.items()}
    assert g[512] > g[None] > 0


# --- bad input: a clear error for each ---------------------------------------------------

SERVE = dict(model=MODEL, accelerator=GPU, max_batch=8)
BAD_CALLS = [
    # capacity's search is bounded and refuses what cannot be meant
    (lambda: batching.capacity(0.01, 4, slo=0.05, rel_tol=0), ValueError, "rel_tol"),
    (lambda: batching.capacity(0.01, 4, slo=0.05, rel_tol=math.nan), ValueError, "rel_tol"),
    (lambda: batching.capacity(0.01, 4, slo=0.05, rel_tol=1.5), ValueError, "rel_tol"),
    (lambda: batching.capacity(0.01, 4, slo=math.nan), ValueError, "slo"),
    (lambda: batching.capacity(0.01, 4, slo=0.05, quantile=100), ValueError, "quantile"),
    (lambda: batching.capacity(0.01, 4, slo=0.05, n=2.5), ValueError, "n must"),
    (lambda: batching.capacity(0.01, 4, slo=0.05, n=10**12), ValueError, "n must"),
    (lambda: batching.capacity(0.01, 4, slo="fast"), TypeError, "slo"),
    # names fail at once, not inside the simulation
    (lambda: batching.roofline_service_time("llama-9", "H100 SXM"), KeyError, "llama-9"),
    (lambda: batching.roofline_service_time("llama-3-8b", "H900"), KeyError, "H900"),
    (lambda: batching.roofline_service_time("llama-3-8b", "H100 SXM", dtype="fp7"),
     KeyError, "fp7"),
    (lambda: batching.roofline_service_time("llama-3-8b", "T4", dtype="bf16"),
     ValueError, "peak"),
    (lambda: batching.roofline_service_time("llama-3-8b", "H100 SXM", context=-1),
     ValueError, "context"),
    (lambda: batching.roofline_service_time("llama-3-8b", "H100 SXM", overhead_s=-1e-3),
     ValueError, "overhead_s"),
    (lambda: batching.roofline_service_time("llama-3-8b", "H100 SXM")(2.5),
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
    (lambda: batching.simulate([0.0], "fast", 1), TypeError, "service_time"),
    (lambda: batching.simulate([0.0], -1.0, 1), ValueError, "service_time"),
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
    (lambda: batching.sweep(0.01, [], [0.0], slo=0.1), ValueError, "max_batches"),
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
    (lambda: batching.simulate_closed_loop(4, 0.01, 4, think_time=-1), ValueError,
     "think_time"),
    (lambda: batching.simulate_closed_loop(4, 0.01, 4, n=0), ValueError, "n must"),
    # the LLM server
    (lambda: batching.simulate_llm([0.0, 1.0], [10], [5, 5], **SERVE), ValueError,
     "prompt_tokens needs one count per arrival: 1 counts for 2"),
    (lambda: batching.simulate_llm([0.0], [10.5], [5], **SERVE), ValueError, "prompt_tokens"),
    (lambda: batching.simulate_llm([0.0], [0], [5], **SERVE), ValueError, "prompt_tokens"),
    (lambda: batching.simulate_llm([0.0], [10], [math.nan], **SERVE), ValueError,
     "output_tokens"),
    (lambda: batching.simulate_llm([0.0], [10], [5], "llama-9", GPU, max_batch=8), KeyError,
     "llama-9"),
    (lambda: batching.simulate_llm([0.0], [10], [5], MODEL, "H900", max_batch=8), KeyError,
     "H900"),
    (lambda: batching.simulate_llm([0.0], [10], [5], **SERVE, prefill_chunk=0), ValueError,
     "prefill_chunk"),
    (lambda: batching.simulate_llm([0.0], [10], [5], **SERVE, block_size=0), ValueError,
     "block_size"),
    (lambda: batching.simulate_llm([0.0], [10], [5], **SERVE, kv_cache_bytes=-1.0),
     ValueError, "kv_cache_bytes"),
    (lambda: batching.simulate_llm([0.0], [10], [5], **SERVE, prefix_tokens=-16),
     ValueError, "prefix_tokens"),
    (lambda: batching.simulate_llm([0.0], [10], [5], MODEL, GPU, max_batch=0), ValueError,
     "max_batch"),
    (lambda: batching.simulate_llm([0.0], [10], [5], "llama-3-70b", GPU, max_batch=8),
     ValueError, "KV blocks"),
    (lambda: batching.simulate_disaggregated([0.0], [10], [5], **SERVE, prefill_gpus=0),
     ValueError, "prefill_gpus"),
    (lambda: batching.simulate_disaggregated([0.0], [10], [5], **SERVE,
                                             transfer_bytes_per_s=0), ValueError,
     "transfer_bytes_per_s"),
    (lambda: batching.kv_cache_budget(MODEL, GPU, gpu_memory_utilization=90), ValueError,
     "percentage"),
    (lambda: batching.kv_cache_budget(MODEL, GPU, free_gpu_memory_fraction=0), ValueError,
     "free_gpu_memory_fraction"),
    (lambda: batching.kv_memory_use([10, 200], max_len=128), ValueError, "longer"),
    (lambda: batching.kv_blocks([1.5]), ValueError, "tokens"),
    (lambda: batching.slo_attainment(pd.DataFrame({"ttft": [0.1]}), ttft_slo=1, tpot_slo=1),
     KeyError, "tpot"),
    (lambda: batching.slo_attainment(pd.DataFrame({"ttft": [0.1], "tpot": [0.1]}),
                                     ttft_slo=0, tpot_slo=1), ValueError, "ttft_slo"),
    (lambda: batching.summarize_llm(pd.DataFrame({c: [1.0] for c in batching.LLM_COLUMNS}),
                                    ttft_slo=1.0), ValueError, "both"),
    (lambda: batching.goodput("simulate_llm", 10, ttft_slo=1, tpot_slo=1), TypeError, "serve"),
    (lambda: batching.goodput(lambda a: None, 10, ttft_slo=1, tpot_slo=1), TypeError,
     "DataFrame"),
    (lambda: batching.goodput(lambda a: None, 10, ttft_slo=1, tpot_slo=1, attainment=90),
     ValueError, "percentage"),
    (lambda: batching.goodput(lambda a: None, 10, ttft_slo=1, tpot_slo=1, rel_tol=0),
     ValueError, "rel_tol"),
]


@pytest.mark.parametrize("call, error, words", BAD_CALLS)
def test_bad_input_gets_a_clear_error(call, error, words):
    with pytest.raises(error, match=words):
        call()
