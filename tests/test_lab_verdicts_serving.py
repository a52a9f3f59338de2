"""Labs 5-8's verdicts (gpuinfer.course.lab_verdicts, the "labs 5-8" section): each states a
conclusion only where its numbers clear the noise gate, and each is fed inconsistent
inputs (a part timed longer than its whole, a capacity above saturation, spreads past
TOO_NOISY) and must answer with the inconclusive sentence. Expected values by hand."""

import types

import numpy as np
import pandas as pd
import pytest

from gpuinfer.course import serving_verdicts
from gpuinfer.measure import spread
from gpuinfer.measure.spread import Spread

INCONCLUSIVE = "Inconclusive on this run"
QUIET = 0.02  # a steady timing's relative spread


def quiet(x):
    return Spread(x, QUIET)


# --- the helpers ---------------------------------------------------------------------------

def test_ratio_adds_spreads():
    r = spread.ratio(Spread(6.0, 0.1), Spread(2.0, 0.05))
    assert r.median == pytest.approx(3.0) and r.spread == pytest.approx(0.15)


def test_pooled_takes_the_range_across_timings_or_the_widest_iqr():
    t = types.SimpleNamespace
    # medians 1, 2, 3: median 2, range 2 / 2 = 1.0, wider than any IQR / median (0.1)
    s = spread.pooled([t(median_s=1.0, iqr_s=0.1), t(median_s=2.0, iqr_s=0.2),
                  t(median_s=3.0, iqr_s=0.3)])
    assert (s.median, s.spread) == (pytest.approx(2.0), pytest.approx(1.0))
    # one timing keeps its IQR / median: 0.5 / 2
    assert spread.pooled([t(median_s=2.0, iqr_s=0.5)]).spread == pytest.approx(0.25)
    # the IQR wins when the medians agree: 0.4 / 1.0
    assert spread.pooled([t(median_s=1.0, iqr_s=0.4), t(median_s=1.0, iqr_s=0.0)]).spread \
        == pytest.approx(0.4)


def test_pooled_runs_keeps_batches_every_run_measured():
    a = pd.DataFrame({"batch": [1, 2, 4], "seconds": [1.0, 2.0, 4.0], "iqr_s": 0.0,
                      "bound": "memory"})
    b = pd.DataFrame({"batch": [1, 2], "seconds": [3.0, 2.0], "iqr_s": 0.0, "bound": "memory"})
    c = pd.DataFrame({"batch": [1, 2], "seconds": [2.0, 2.0], "iqr_s": 0.0, "bound": "memory"})
    out = spread.pooled_runs([a, b, c])
    assert out.batch.tolist() == [1, 2]               # batch 4: only the first run has it
    assert out.seconds.tolist() == [2.0, 2.0]         # medians of (1, 3, 2) and (2, 2, 2)
    assert out.spread.tolist() == [pytest.approx(1.0), 0.0]   # (3 - 1) / 2
    assert out.fastest_s.tolist() == [1.0, 2.0] and out.slowest_s.tolist() == [3.0, 2.0]
    assert out.bound.tolist() == ["memory", "memory"]


def test_quantile_spread_from_order_statistics():
    x = np.arange(1, 301, dtype=float)                # 1 .. 300
    s = spread.quantile_spread(x, 99.0)
    # p99 by linear interpolation: rank 0.99 x 299 = 296.01 -> 297.01
    assert s.median == pytest.approx(297.01)
    # 95% ranks 297 -+ 1.96 sqrt(300 x 0.99 x 0.01) = 297 -+ 3.37: 293 .. 301, clipped;
    # 0-based indices 292 .. 299: values 293 and 300
    assert s.spread == pytest.approx((300 - 293) / 297.01)
    with pytest.raises(ValueError, match="samples"):
        spread.quantile_spread([1.0, -1.0])


# --- lab 5 -------------------------------------------------------------------------------

def test_dispatch_share_branches():
    # 7 x 100 us = 700 us of a 1,000 us pass: 70%, beyond 50% +- the spreads
    assert serving_verdicts.dispatch_share(quiet(100e-6), quiet(1000e-6), 7).startswith("Mostly dispatch")
    # 7 x 10 us = 70 us of 1,000 us: 7%
    assert serving_verdicts.dispatch_share(quiet(10e-6), quiet(1000e-6), 7).startswith("Mostly work")
    # 7 x 75 us = 525 us, a hair past half: inside the noise
    assert serving_verdicts.dispatch_share(quiet(75e-6), quiet(1000e-6), 7).startswith(INCONCLUSIVE)


def test_dispatch_share_refuses_kernels_longer_than_the_pass():
    # 7 x 200 us = 1,400 us of "dispatch" inside a 1,000 us pass: contradictory
    text = serving_verdicts.dispatch_share(quiet(200e-6), quiet(1000e-6), 7)
    assert text.startswith(INCONCLUSIVE) and "longer than the whole pass" in text


def test_batching_gain_bands():
    one = quiet(1e-3)
    # batch 1,024 in 2 ms: gain 512 >= 1,024 / 4
    assert serving_verdicts.batching_gain(one, quiet(2e-3), 1024).startswith("Nearly free")
    # batch 1,024 in 100 ms: gain 10.24, between 2 and 256
    assert serving_verdicts.batching_gain(one, quiet(100e-3), 1024).startswith("Batching helps")
    # batch 1,024 in 900 ms: gain 1.14 < 2
    assert serving_verdicts.batching_gain(one, quiet(900e-3), 1024).startswith("Batching buys little")
    # gain 2.1 next to the mark 2: inside the noise
    assert serving_verdicts.batching_gain(one, quiet(1024e-3 / 2.1), 1024).startswith(INCONCLUSIVE)
    assert "Expect" in serving_verdicts.batching_gain(one, quiet(2e-3), 1024, serving=True)


def test_batching_gain_refuses_noise_and_a_batch_faster_than_batch_one():
    assert serving_verdicts.batching_gain(Spread(1e-3, 0.6), quiet(2e-3), 1024).startswith(INCONCLUSIVE)
    # batch 64 in less time than batch 1: gain 128 > 64
    text = serving_verdicts.batching_gain(quiet(1e-3), quiet(0.5e-3), 64)
    assert text.startswith(INCONCLUSIVE) and "faster than batch 1" in text


def test_faster_than_ceiling_only_beyond_the_spread():
    assert spread.faster_than_ceiling(quiet(1e-3), 2e-3)           # half the ceiling's time
    assert not spread.faster_than_ceiling(quiet(1.9e-3), 2e-3)     # 5% faster: within 1.07
    assert not spread.faster_than_ceiling(Spread(1e-3, 0.6), 2e-3)  # too noisy to say
    assert not spread.faster_than_ceiling(quiet(3e-3), 2e-3)


def test_gpu_at_batch_one():
    cpu = quiet(500e-6)
    text = serving_verdicts.gpu_at_batch_one(cpu, [Spread(50e-6, 0), Spread(25e-6, 0)], predicted=True)
    assert "10.0x to 20.0x faster" in text and "predicted" in text
    text = serving_verdicts.gpu_at_batch_one(quiet(50e-6), [quiet(100e-6)], predicted=False)
    assert "2.0x slower" in text and "measured" in text
    assert "straddles" in serving_verdicts.gpu_at_batch_one(quiet(100e-6), [Spread(50e-6, 0),
                                                              Spread(200e-6, 0)], predicted=True)


def test_gpu_at_batch_one_refuses_one_noisy_timing():
    # the case: a CPU batch 1 timed 342 us and 1,309 us in one run
    cpu = Spread.of([342e-6, 1309e-6])
    text = serving_verdicts.gpu_at_batch_one(cpu, [Spread(44e-6, 0), Spread(91e-6, 0)], predicted=True)
    assert text.startswith(INCONCLUSIVE)


def test_threads_speedup():
    text = serving_verdicts.threads_speedup(quiet(10e-3), quiet(5.2e-3), 2)   # 1.9x of 2
    assert "1.9x as fast" in text and "Near perfect" in text
    text = serving_verdicts.threads_speedup(quiet(10e-3), quiet(7e-3), 2)     # 1.4x < 0.8 x 2
    assert "1.4x" in text and "less than perfect" in text
    text = serving_verdicts.threads_speedup(quiet(10e-3), quiet(30e-3), 2)    # 0.33x: slower
    assert "0.33x" in text and "Slower than one thread" in text
    assert "one thread" in serving_verdicts.threads_speedup(quiet(1.0), quiet(1.0), 1)


def test_threads_speedup_never_prints_zero_and_refuses_noise():
    # the "0.0x": a ratio of 0.04 is shown as 0.04x, two significant digits
    assert "0.04x" in serving_verdicts.threads_speedup(quiet(1e-3), quiet(25e-3), 2)
    assert serving_verdicts.threads_speedup(Spread(10e-3, 0.7), quiet(5e-3), 2).startswith(INCONCLUSIVE)
    assert serving_verdicts.threads_speedup(quiet(10e-3), quiet(9.5e-3), 2).startswith(INCONCLUSIVE)


# --- lab 6 -------------------------------------------------------------------------------

def test_policy_choice_agrees_or_says_the_noise_moves_it():
    text = serving_verdicts.policy_choice({"median": 4, "fastest": 4, "slowest": 4}, 0.1)
    assert text.startswith("max_batch 4 is chosen from every version")
    text = serving_verdicts.policy_choice({"median": 4, "fastest": 16, "slowest": 4}, 0.3)
    assert text.startswith(INCONCLUSIVE) and "16 from the fastest" in text
    assert serving_verdicts.policy_choice({"median": 0, "slowest": 0}, 0.1).startswith("No policy")


STEPS = {1: 2 * 4.6e-3, 4: 2 * 4.7e-3, 16: 2 * 23.9e-3, 64: 2 * 29.8e-3}   # s


def test_capacity_gain_names_the_two_step_cap():
    # 700/s against 105/s on every table: 6.7x; max_batch 4 is the largest whose two
    # steps (9.4 ms) fit in 18.4 ms; two of batch 16 (47.8 ms) do not
    text = serving_verdicts.capacity_gain([700, 690, 710], [105, 104, 106], kept=0.83, chosen=4,
                           two_steps_s=STEPS, slo_s=18.4e-3)
    assert text.startswith("Batching raised capacity 6.7x")
    assert "two steps of batch 4 (9.4 ms)" in text and "two of batch 16 (47.8 ms)" in text
    assert "83%" in text


def test_capacity_gain_small_and_inconclusive():
    text = serving_verdicts.capacity_gain([120, 121, 119], [100, 101, 99], kept=0.5, chosen=4,
                           two_steps_s=STEPS, slo_s=18.4e-3)
    assert text.startswith("Batching raised capacity only 1.20x")
    # gains 6.7, 1.3 and 3: the tables disagree
    text = serving_verdicts.capacity_gain([700, 130, 300], [105, 100, 100], kept=0.83, chosen=4,
                           two_steps_s=STEPS, slo_s=18.4e-3)
    assert text.startswith(INCONCLUSIVE)
    assert serving_verdicts.capacity_gain([700] * 3, [0] * 3, kept=0.83, chosen=4, two_steps_s=STEPS,
                           slo_s=18.4e-3).startswith("Without batching")


def test_capacity_gain_refuses_inconsistent_tables():
    kw = dict(chosen=4, two_steps_s=STEPS, slo_s=18.4e-3)
    assert serving_verdicts.capacity_gain([700] * 3, [105] * 3, kept=1.3, **kw).startswith(INCONCLUSIVE)
    assert serving_verdicts.capacity_gain([50] * 3, [105] * 3, kept=0.5, **kw).startswith(INCONCLUSIVE)
    assert serving_verdicts.capacity_gain([700] * 3, [105, 0, 100], kept=0.8, **kw).startswith(INCONCLUSIVE)


def test_two_models():
    loads = [100, 200, 300]
    up = [quiet(1.4)] * 3
    assert serving_verdicts.two_models(up, loads).startswith("Splitting costs latency at 100, 200, 300/s")
    text = serving_verdicts.two_models([quiet(1.4), quiet(1.01), quiet(1.4)], loads)
    assert "at 100, 300/s" in text and "other loads" in text
    assert serving_verdicts.two_models([quiet(0.7)] * 3, loads).startswith("Splitting lowers the p99")
    assert "lowers it at 300/s" in serving_verdicts.two_models([quiet(1.4), quiet(1.0), quiet(0.7)], loads)
    assert serving_verdicts.two_models([Spread(1.4, 0.6)] * 3, loads).startswith(INCONCLUSIVE)


# --- lab 7 -------------------------------------------------------------------------------

def test_tp_step_refuses_compute_longer_than_the_step():
    # the run: each rank's compute 4.4 ms, the whole step 1.97 ms
    text = serving_verdicts.tp_step(quiet(3.0e-3), quiet(1.97e-3), quiet(6.0e-3), quiet(4.4e-3), 0.1e-3, 2)
    assert text.startswith(INCONCLUSIVE) and "longer than the whole step" in text
    assert "Sharding paid" not in text
    text = serving_verdicts.tp_accounting(quiet(4.5e-3), quiet(1.97e-3))      # parts 229% of the whole
    assert text.startswith(INCONCLUSIVE)


def test_tp_step_never_calls_a_large_saving_even():
    # the wider layer: 26.5 ms saved, 0.5 ms added, the step no faster
    text = serving_verdicts.tp_step(quiet(53e-3), quiet(52e-3), quiet(53e-3), quiet(26.5e-3), 0.5e-3, 2)
    assert text.startswith(INCONCLUSIVE) and "About even" not in text
    # the same parts, the step clearly slower: the verdict says the parts predicted a gain
    text = serving_verdicts.tp_step(quiet(53e-3), quiet(80e-3), quiet(53e-3), quiet(26.5e-3), 0.5e-3, 2)
    assert text.startswith("Sharding made the step slower") and "parts predict a gain" in text


def test_tp_step_never_explains_with_parts_too_noisy_to_order():
    # this machine's run: 0.612 ms saved, 0.875 ms added, the shard's timing spread 106%;
    # the step itself clearly slower (1.12 -> 3.53 ms)
    text = serving_verdicts.tp_step(quiet(1.12e-3), Spread(3.525e-3, 0.49), quiet(1.12e-3),
                     Spread(0.508e-3, 1.06), 0.875e-3, 2)
    assert text.startswith("Sharding made the step slower") and "too noisy" in text
    assert "predict a gain" not in text
    # parts that predict a loss beside a step that got faster
    text = serving_verdicts.tp_step(quiet(10e-3), quiet(6e-3), quiet(10e-3), quiet(4e-3), 7e-3, 2)
    assert text.startswith("Sharding paid") and "predict a loss" in text


def test_tp_step_with_a_shard_slower_than_the_whole():
    # this machine's run: the shard 1.213 ms against the whole 0.878 ms, step 1.874 ms
    text = serving_verdicts.tp_step(quiet(0.878e-3), quiet(1.874e-3), quiet(0.878e-3), quiet(1.213e-3),
                     0.799e-3, 2)
    assert "compute grew by 0.335 ms" in text and "took no less than the whole" in text


def test_tp_step_paid_and_slower():
    text = serving_verdicts.tp_step(quiet(10e-3), quiet(6e-3), quiet(10e-3), quiet(5e-3), 0.5e-3, 2)
    assert text.startswith("Sharding paid on this run (1.67x") and "exceeds" in text
    text = serving_verdicts.tp_step(quiet(1e-3), quiet(3e-3), quiet(1e-3), quiet(0.5e-3), 2e-3, 2)
    assert text.startswith("Sharding made the step slower") and "costs more" in text
    assert serving_verdicts.tp_step(Spread(1e-3, 0.8), quiet(1e-3), quiet(1e-3), quiet(0.5e-3), 0.1e-3,
                     2).startswith(INCONCLUSIVE)


def test_tp_split_and_accounting():
    assert "fell only to 90%" in serving_verdicts.tp_split(quiet(10e-3), quiet(9e-3), 2)
    assert serving_verdicts.tp_split(quiet(10e-3), quiet(5e-3), 2) == ""
    assert "took longer (200%)" in serving_verdicts.tp_split(quiet(10e-3), quiet(20e-3), 2)
    assert serving_verdicts.tp_split(Spread(10e-3, 0.7), quiet(20e-3), 2) == ""      # too noisy to say
    # a shard timed at 31 ms beside a 19.7 ms step that contains it: no claim on the split
    assert serving_verdicts.tp_split(quiet(19.8e-3), Spread(31e-3, 0.39), 2, quiet(19.7e-3)) == ""
    assert "accounts for 50%" in serving_verdicts.tp_accounting(quiet(1e-3), quiet(2e-3))
    assert "within this run's noise" in serving_verdicts.tp_accounting(quiet(1e-3), quiet(1.02e-3))
    assert serving_verdicts.tp_accounting(Spread(1e-3, 0.9), quiet(1e-3)).startswith(INCONCLUSIVE)


# --- lab 8 -------------------------------------------------------------------------------

def test_run_quantile_spread_widens_to_the_halves():
    steady = np.tile([1.0, 2.0, 3.0, 4.0], 75)                 # both halves alike
    assert spread.run_quantile_spread(steady, 50).spread == pytest.approx(
        spread.quantile_spread(steady, 50).spread)
    stalled = np.concatenate([np.full(150, 1.0), np.full(150, 3.0)])
    # halves' medians 1 and 3 around a whole median of 2: (3 - 1) / 2
    s = spread.run_quantile_spread(stalled, 50)
    assert s.median == pytest.approx(2.0) and s.spread >= 1.0


def test_kept_up():
    text = serving_verdicts.kept_up(quiet(0.05), quiet(0.30), 1500)           # 50 ms -> 300 ms
    assert "fell behind" in text and "50.0 ms in the first third, 300.0 ms" in text
    assert "kept up, within" in serving_verdicts.kept_up(quiet(0.027), quiet(0.028), 200)
    assert "kept up (its first" in serving_verdicts.kept_up(quiet(0.1), quiet(0.03), 200)
    # the case: the thirds too noisy to tell; and a near-equal pair whose
    # spreads could hide a growing queue
    assert serving_verdicts.kept_up(Spread(0.05, 0.6), quiet(0.08), 1500).startswith(INCONCLUSIVE)
    assert serving_verdicts.kept_up(Spread(0.05, 0.2), Spread(0.05, 0.2), 1500).startswith(INCONCLUSIVE)


def test_p99_trend():
    falls = [quiet(0.1116), quiet(0.0731), quiet(0.0555)]
    text = serving_verdicts.p99_trend(falls, [200, 600, 1500], 300)
    assert text.startswith("The p99 fell as the load rose (111.6 ms at 200/s, 55.5 ms")
    assert "7.5x as long" in text
    assert serving_verdicts.p99_trend([quiet(0.01), quiet(0.05)], [200, 1500], 300).startswith("The p99 rose")
    assert serving_verdicts.p99_trend([Spread(0.11, 0.6), quiet(0.05)], [200, 1500],
                       300).startswith(INCONCLUSIVE)


def test_calibration_says_where_it_holds():
    # the case: calibrated 44.2 ms against 12.5 measured at 600/s
    text = serving_verdicts.calibration([quiet(0.0275), quiet(0.0125), quiet(0.27)],
                         [quiet(0.028), quiet(0.0442), quiet(0.27)], [200, 600, 1500],
                         calibrated_at=1500)
    assert "at 600/s it overstates the p50 (44.2 against 12.5 ms)" in text
    assert "at 200/s it matches" in text and "near the load it was taken at" in text
    assert "matches the measured one at every rate" in serving_verdicts.calibration(
        [quiet(0.01)], [quiet(0.0101)], [200], calibrated_at=200)
    assert serving_verdicts.calibration([Spread(0.01, 0.9)], [quiet(0.011)], [200],
                         calibrated_at=200).startswith(INCONCLUSIVE)


def test_lab8_small_verdicts():
    assert "above the simulator's" in serving_verdicts.p50_gap(quiet(0.0275), quiet(0.0028))
    assert "below the simulator's" in serving_verdicts.p50_gap(quiet(0.002), quiet(0.0028))
    assert serving_verdicts.p50_gap(Spread(0.003, 0.7), quiet(0.0028)).startswith(INCONCLUSIVE)
    assert "exceeds" in serving_verdicts.handoff_vs_outside(quiet(0.028), quiet(0.0247 / 2))
    assert "part of what" in serving_verdicts.handoff_vs_outside(quiet(0.002), quiet(0.0247))
    assert serving_verdicts.handoff_vs_outside(quiet(0.025), quiet(0.0247)).startswith(INCONCLUSIVE)
    assert "far more than its work" in serving_verdicts.outside_model(quiet(0.025), 2)
    assert "cheap" in serving_verdicts.outside_model(quiet(0.001), 2)
    assert serving_verdicts.outside_model(Spread(0.025, 0.8), 2).startswith(INCONCLUSIVE)


def test_two_models_on_server():
    rates = [200, 600, 1500]
    text = serving_verdicts.two_models_on_server([quiet(0.24)] * 3, [quiet(0.07), quiet(0.24), quiet(0.4)],
                                  rates, 0.028)
    assert text.startswith("At 200/s two models had a lower p99") and "At 1,500/s" in text
    assert serving_verdicts.two_models_on_server([Spread(0.24, 0.6)] * 3, [quiet(0.07)] * 3, rates,
                                  0.028).startswith(INCONCLUSIVE)


def test_difference():
    d = spread.difference(Spread(10.0, 0.1), Spread(4.0, 0.25))
    assert d.median == pytest.approx(6.0) and d.spread == pytest.approx((1.0 + 1.0) / 6.0)
    assert spread.difference(Spread(4.0, 0.1), Spread(4.0, 0.1)) is None


def test_fell_behind_and_the_throughput_it_tests():
    assert serving_verdicts.fell_behind(quiet(0.05), quiet(0.3)) is True
    assert serving_verdicts.fell_behind(quiet(0.05), quiet(0.051)) is False
    assert serving_verdicts.fell_behind(Spread(0.05, 0.3), quiet(0.06)) is None
    text = serving_verdicts.calibrated_throughput(False, quiet(200), quiet(198), 850)
    assert "kept up" in text and "(850/s) is untested" in text
    assert "matches" in serving_verdicts.calibrated_throughput(True, quiet(580), quiet(573), 850)
    assert "overstates" in serving_verdicts.calibrated_throughput(True, quiet(723), quiet(573), 850)
    assert serving_verdicts.calibrated_throughput(None, quiet(723), quiet(573), 850).startswith(INCONCLUSIVE)
    assert serving_verdicts.calibrated_throughput(True, Spread(580, 0.8), quiet(573),
                                   850).startswith(INCONCLUSIVE)


def test_capacity_with_handoff():
    assert "changed" in serving_verdicts.capacity_with_handoff(quiet(4100), [140, 150, 160])
    assert "small next to" in serving_verdicts.capacity_with_handoff(quiet(4100), [3900, 4000, 4050])
    assert "no rate meets" in serving_verdicts.capacity_with_handoff(quiet(4100), [0, 0, 0])
    assert serving_verdicts.capacity_with_handoff(quiet(4100), [0, 150, 300]).startswith(INCONCLUSIVE)
    # 4,100 against 1.5 x 2,900 = 4,350 +- the spread: too close
    assert serving_verdicts.capacity_with_handoff(quiet(4100), [2800, 2900, 3000]).startswith(INCONCLUSIVE)


# --- lab 7's NCCL preflight (gpuinfer.measure.distributed) ---------------------------------------

def test_preflight_passes_gloo_and_fails_nccl_without_gpus():
    from gpuinfer.measure import distributed

    # gloo on two CPU processes: one all-reduce of [1] and [2] sums to 3
    assert distributed.preflight("gloo", 2, timeout_s=300) == (True, "")
    # NCCL here (no GPU, a CPU build of torch): a rank raises, the reason comes back
    ok, why = distributed.preflight("nccl", 2, timeout_s=300)
    assert not ok and why
    with pytest.raises(ValueError, match="backend"):
        distributed.preflight("mpi")


def test_lab_backend_falls_back_to_gloo_when_nccl_fails(monkeypatch):
    from gpuinfer.measure import distributed

    monkeypatch.setattr(distributed, "default_backend", lambda: "gloo")
    assert distributed.lab_backend() == ("gloo", "")
    monkeypatch.setattr(distributed, "default_backend", lambda: "nccl")
    monkeypatch.setattr(distributed, "preflight", lambda *a, **k: (False, "unhandled error"))
    backend, note = distributed.lab_backend()
    assert backend == "gloo" and "unhandled error" in note and "Falling back to gloo" in note
    monkeypatch.setattr(distributed, "preflight", lambda *a, **k: (True, ""))
    assert distributed.lab_backend()[0] == "nccl"


# --- lab 6's exercise 3: the formula, a simulation's answer, the M/M/1 slip ---------------

def test_merged_md1_accepts_a_simulation_and_names_the_mm1_slip():
    from gpuinfer.predict import batching
    from gpuinfer.course import exercises

    w = 0.7 * 0.010 / (2 * (1 - 0.7))            # M/D/1 by hand: rho / (2 mu (1 - rho))
    assert exercises.check("lab-batching-merged-md1", w)
    # what simulate_shared gives on 10,000 + 7,500 requests, one seed
    sim = batching.simulate_shared({
        "A": dict(arrivals=batching.poisson_arrivals(40, 10_000, seed=3), service_s=0.010,
                  max_batch=1),
        "B": dict(arrivals=batching.poisson_arrivals(30, 7_500, seed=1003), service_s=0.010,
                  max_batch=1)})
    simulated = float((sim.start - sim.arrival).mean())
    assert abs(simulated / w - 1) < 0.15 and exercises.check("lab-batching-merged-md1", simulated)
    mm1 = exercises.check("lab-batching-merged-md1", 0.7 / (100 - 70))   # rho / (mu - lambda)
    assert not mm1 and "M/M/1" in str(mm1)
