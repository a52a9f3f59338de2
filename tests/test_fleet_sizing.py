"""fleet_sizing: machines a demand needs within a latency objective, and their cost."""

import math

import numpy as np
import pytest

from gpuinfer.predict import batching, fleet_sizing

Machine = fleet_sizing.Machine


def test_a_loose_objective_sizes_by_saturation_and_the_cost_by_hand():
    # One queue serving one request at a time in 1 ms saturates at 1 / 1 ms = 1,000/s; with
    # an objective of 10 s nothing but stability binds, so the search (1% wide) ends within
    # 1% below 1,000/s. Four such queues a machine: 3,960 to 4,000/s. 6,000/s need
    # ceil(6,000 / ~3,980) = 2 machines at 0.34 an hour: 0.68 / (3,600 x 6,000) x 1e6 =
    # 0.031481 a million.
    t = fleet_sizing.fleet_options([Machine("cpu", 0.34, 1e-3, max_batch=1, queues=4)],
                                   demand_per_s=6000, slo_s=10.0)
    cap = t.loc["cpu", "capacity_per_s"]
    assert 0.99 * 4000 <= cap <= 4000
    assert t.loc["cpu", "machines"] == 2
    assert t.loc["cpu", "usd_per_million"] == pytest.approx(0.68 / (3600 * 6000) * 1e6,
                                                           rel=1e-12)
    assert list(t.columns) == ["price_per_hour", "capacity_per_s", "machines",
                               "usd_per_million"]


def test_capacity_is_queues_times_one_queue_and_the_order_is_kept():
    def gpu(b):
        return 2e-3 + 0.25e-3 * np.asarray(b, dtype=float)

    machines = [Machine("b", 1.0, gpu, max_batch=16, queues=3), Machine("a", 0.5, gpu, 16)]
    t = fleet_sizing.fleet_options(machines, demand_per_s=2500, slo_s=8e-3, n=2000)
    one = batching.capacity(gpu, 16, slo_s=8e-3, n=2000)
    assert list(t.index) == ["b", "a"]
    assert t.loc["a", "capacity_per_s"] == one
    assert t.loc["b", "capacity_per_s"] == 3 * one


def test_the_closed_loop_columns_by_hand():
    # 16 clients, no think time, max_batch 16: every batch holds all 16 and takes
    # 2 + 0.25 x 16 = 6 ms, so perf_analyzer reports 16 / 6 ms = 2,666.7/s at a p99 of
    # 6 ms; two queues report twice the throughput at the same latency.
    def gpu(b):
        return 2e-3 + 0.25e-3 * np.asarray(b, dtype=float)

    t = fleet_sizing.fleet_options([Machine("t4", 0.526, gpu, 16, queues=2)],
                                   demand_per_s=2500, slo_s=8e-3, n=2000, closed_loop=True)
    assert t.loc["t4", "closed_loop_per_s"] == pytest.approx(2 * 16 / 6e-3, rel=1e-9)
    assert t.loc["t4", "closed_loop_p99_s"] == pytest.approx(6e-3, rel=1e-9)


def test_a_machine_that_misses_the_objective_alone_costs_infinity():
    # A 5 ms request cannot meet a 1 ms objective at any rate.
    t = fleet_sizing.fleet_options([Machine("slow", 1.0, 5e-3)], demand_per_s=100,
                                   slo_s=1e-3, n=1000)
    assert t.loc["slow", "capacity_per_s"] == 0.0
    assert math.isinf(t.loc["slow", "machines"]) and math.isinf(t.loc["slow", "usd_per_million"])


@pytest.mark.parametrize("call, error, words", [
    (lambda: Machine("x", -1.0, 1e-3), ValueError, "price_per_hour"),
    (lambda: Machine("x", 1.0, 1e-3, max_batch=0), ValueError, "max_batch"),
    (lambda: Machine("x", 1.0, 1e-3, max_batch=10**6), ValueError, "max_batch"),
    (lambda: Machine("x", 1.0, 1e-3, queues=0), ValueError, "queues"),
    (lambda: Machine("", 1.0, 1e-3), TypeError, "name"),
    (lambda: fleet_sizing.fleet_options([], demand_per_s=10, slo_s=1.0), ValueError, "empty"),
    (lambda: fleet_sizing.fleet_options("cpu", demand_per_s=10, slo_s=1.0), TypeError, "Machine"),
    (lambda: fleet_sizing.fleet_options([Machine("a", 1, 1e-3)] * 2, demand_per_s=10,
                                        slo_s=1.0), ValueError,
     "distinct"),
    (lambda: fleet_sizing.fleet_options([Machine("a", 1, 1e-3)], demand_per_s=-10, slo_s=1.0), ValueError,
     "demand_per_s"),
    (lambda: fleet_sizing.fleet_options([Machine("a", 1, 1e-3)], demand_per_s=10, slo_s=0.0), ValueError,
     "slo_s"),
    (lambda: fleet_sizing.fleet_options([Machine("a", 1, 1e-3)], demand_per_s=10, slo_s=1.0,
                                        closed_loop=1),
     TypeError, "closed_loop"),
])
def test_bad_input_gets_a_clear_error(call, error, words):
    with pytest.raises(error, match=words):
        call()
