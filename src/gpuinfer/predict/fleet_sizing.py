"""Sizing a fleet: how many machines of each kind a demand needs within a latency
objective, and what a million requests then cost. `fleet_options` tabulates it for a
list of `Machine`s; the cheapest row is the decision.

Each machine's rate is what Poisson traffic gets within the objective (`batching.capacity`:
the highest arrival rate whose `quantile` latency stays within `slo_s`, under Triton's
dynamic batcher with no queue delay), not its saturation throughput and not what a
closed loop reports; `cost.machines_needed` and `cost.cost_per_million_at_demand` turn
it into a count and a price. `closed_loop=True` adds what perf_analyzer's concurrency
mode would report for the same machine, beside (a closed loop's load falls as the
server slows: coordinated omission).

Chapters: *CPU or GPU? Cost per prediction*, *How to benchmark your own traffic*.
Seconds, requests/s, prices per hour (the examples are US dollars).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from gpuinfer.predict import batching as _batching
from gpuinfer.predict import cost as _cost
from gpuinfer import validate as _v

#: Most independent queues one machine may have (cores, GPUs, model instances).
MAX_QUEUES = 4096


@dataclass(frozen=True)
class Machine:
    """One kind of machine to rent: its `name`, `price_per_hour`, and how it serves. A
    batch of b requests takes `service_time` seconds (a number, a function batch ->
    seconds, or a table {batch: seconds}, as `batching.simulate` takes), batched up to
    `max_batch`; the machine has `queues` independent servers, each its own queue with
    requests spread at random over them (a CPU's cores each serving one request at a
    time: `max_batch=1`, `queues=cores`; a shared queue would do better)."""

    name: str
    price_per_hour: float
    service_time: object
    max_batch: int = 1
    queues: int = 1

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.strip():
            raise TypeError(f"name must be a non-empty string, got {self.name!r}")
        _v.positive("price_per_hour", self.price_per_hour)
        _v.count("max_batch", self.max_batch, maximum=_batching.CAPACITY_MAX_BATCH)
        _v.count("queues", self.queues, maximum=MAX_QUEUES)


def _machines(machines) -> list[Machine]:
    if isinstance(machines, Machine):
        machines = [machines]

    def machine(name, m):
        if not isinstance(m, Machine):
            raise TypeError(f"{name} must be a fleet_sizing.Machine, got {m!r}")
        return m
    machines = _v.each("options", machines, machine, of="fleet_sizing.Machine")
    names = [m.name for m in machines]
    if len(set(names)) != len(names):
        raise ValueError(f"options must have distinct machine names, got {names!r}")
    return machines


# Unlike the other `*_options`, no `model` comes first: each Machine carries its own model
# of service (its `service_time`), so the machines themselves are the options.
def fleet_options(options: Sequence[Machine], *, demand_per_s, slo_s, quantile=99.0,
                  n=4000, seed=0, closed_loop=False):
    """For each of the machines `options`, a row (indexed by name): `price_per_hour`,
    `capacity_per_s` (the Poisson rate one machine sustains within a `quantile`
    latency of `slo_s` seconds: `queues` x `batching.capacity` of one queue on a trace
    of at least `n` requests from `seed`), `machines` (`cost.machines_needed` for
    `demand_per_s`) and `usd_per_million` (`cost.cost_per_million_at_demand`: price per
    million requests in the prices' currency). A machine that misses the objective even
    with one lone request has capacity 0 and needs math.inf machines at math.inf cost.

    `closed_loop=True` adds `closed_loop_per_s` and `closed_loop_p99_s`: the throughput
    and p99 latency perf_analyzer's concurrency mode reports with `max_batch` clients a
    queue and no think time (`batching.simulate_closed_loop`, `n` requests), summed over
    the queues. Order: as given."""
    import pandas as pd

    machines = _machines(options)
    demand = _v.positive("demand_per_s", demand_per_s)
    slo = _v.positive("slo_s", slo_s)
    if not isinstance(closed_loop, bool):
        raise TypeError(f"closed_loop must be True or False, got {closed_loop!r}")
    rows = []
    for m in machines:
        per_queue = _batching.capacity(m.service_time, m.max_batch, slo_s=slo,
                                       quantile=quantile, n=n, seed=seed)
        capacity = m.queues * per_queue
        row = {"machine": m.name, "price_per_hour": float(m.price_per_hour),
               "capacity_per_s": capacity}
        if capacity > 0:
            row["machines"] = _cost.machines_needed(demand, capacity)
            row["usd_per_million"] = _cost.cost_per_million_at_demand(
                m.price_per_hour, capacity, demand)
        else:
            row["machines"], row["usd_per_million"] = math.inf, math.inf
        if closed_loop:
            s = _batching.summarize(_batching.simulate_closed_loop(
                m.max_batch, m.service_time, m.max_batch, n=n, seed=seed))
            row["closed_loop_per_s"] = m.queues * s["throughput_per_s"]
            row["closed_loop_p99_s"] = s["p99_s"]
        rows.append(row)
    return pd.DataFrame(rows).set_index("machine")
