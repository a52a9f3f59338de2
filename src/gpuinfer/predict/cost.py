"""Cost per prediction: an hourly price, a throughput, and the utilisation achieved.

Chapter: *CPU or GPU? Cost per prediction*; lab: *Small model: CPU or GPU?*. Prices are
in currency units per hour (the examples are US dollars), throughputs in predictions per
second, utilisation a fraction of the throughput actually used (0 < u <= 1).

    cost per million predictions = price_per_hour / (3600 x throughput_per_s x u) x 1e6

A machine bills every hour whether it is busy or not: at 10% utilisation each prediction
costs ten times what the datasheet-speed arithmetic says. Prices change and differ by
provider and region: the `EXAMPLE_PRICES` are inputs to edit, each with its source and
date, not facts about your bill.
"""

from __future__ import annotations

import math

import numpy as np

from gpuinfer import hardware
from gpuinfer.hardware import devices
from gpuinfer import validate as _v
from gpuinfer.hardware import devices as _devices

SECONDS_PER_HOUR = 3600.0
MILLION = 1e6


def _positive(name, value):
    return _v.positive(name, value, array=True)


def _fraction(name, value):
    return _v.fraction(name, value, array=True)


_scalar = _v.scalar_or_array


def cost_per_million(price_per_hour, throughput_per_s, utilisation=1.0):
    """Currency units per million predictions for a machine at `price_per_hour` that can
    serve `throughput_per_s` predictions/s and is busy a fraction `utilisation` of the
    time. Vectorised. $0.526/h at 1,000 predictions/s, fully used: $0.146 per million."""
    price = _positive("price_per_hour", price_per_hour)
    throughput = _positive("throughput_per_s", throughput_per_s)
    u = _fraction("utilisation", utilisation)
    _v.same_shape(price_per_hour=price, throughput_per_s=throughput, utilisation=u)
    return _scalar(price / (SECONDS_PER_HOUR * throughput * u) * MILLION)


def break_even_utilisation(price_per_hour, throughput_per_s, baseline_price_per_hour,
                           baseline_throughput_per_s, baseline_utilisation=1.0):
    """The utilisation at which a machine (price, throughput) costs the same per
    prediction as the baseline at `baseline_utilisation`: below it the baseline is
    cheaper. (price / throughput) / (baseline_price / (baseline_throughput x baseline_u)).
    A value above 1 means the machine never breaks even, even fully busy. Vectorised."""
    price = _positive("price_per_hour", price_per_hour)
    throughput = _positive("throughput_per_s", throughput_per_s)
    b_price = _positive("baseline_price_per_hour", baseline_price_per_hour)
    b_throughput = _positive("baseline_throughput_per_s", baseline_throughput_per_s)
    b_u = _fraction("baseline_utilisation", baseline_utilisation)
    return _scalar((price / throughput) / (b_price / (b_throughput * b_u)))


def machines_needed(demand_per_s, throughput_per_s):
    """Machines to serve `demand_per_s` when each serves `throughput_per_s`: at least one
    (a service that exists pays for one machine), ceil(demand / throughput). Vectorised."""
    demand = _positive("demand_per_s", demand_per_s)
    throughput = _positive("throughput_per_s", throughput_per_s)
    _v.same_shape(demand_per_s=demand, throughput_per_s=throughput)
    n = np.maximum(1, np.ceil(demand / throughput - 1e-12))
    return int(n) if np.ndim(n) == 0 else n.astype(int)


def utilisation_at_demand(demand_per_s, throughput_per_s):
    """Fraction of the provisioned capacity that `demand_per_s` uses, with
    `machines_needed` machines: demand / (machines x throughput). Vectorised."""
    n = machines_needed(demand_per_s, throughput_per_s)
    return _scalar(np.asarray(demand_per_s, float) / (n * np.asarray(throughput_per_s, float)))


def cost_per_million_at_demand(price_per_hour, throughput_per_s, demand_per_s):
    """Currency units per million predictions when `demand_per_s` arrives and just enough
    machines are rented to serve it (`machines_needed`). Vectorised over demand."""
    price = _positive("price_per_hour", price_per_hour)
    n = machines_needed(demand_per_s, throughput_per_s)
    demand = np.asarray(demand_per_s, dtype=float)
    return _scalar(price * n / (SECONDS_PER_HOUR * demand) * MILLION)


def break_even_demand(price_per_hour, throughput_per_s, baseline_price_per_hour,
                      baseline_throughput_per_s) -> float:
    """The demand (predictions/s) above which one machine (price, throughput) is no dearer
    per prediction than enough baseline machines for the same demand: 0 if it is never
    dearer, math.inf if it is dearer at every demand it can serve alone."""
    price = _v.positive("price_per_hour", price_per_hour)
    throughput = _v.positive("throughput_per_s", throughput_per_s)
    b_price = _v.positive("baseline_price_per_hour", baseline_price_per_hour)
    b_throughput = _v.positive("baseline_throughput_per_s", baseline_throughput_per_s)
    # One machine costs `price` per hour at any demand up to its throughput; the baseline
    # costs ceil(demand / b_throughput) x b_price. The baseline's cost first reaches
    # `price` when it needs k = ceil(price / b_price) machines, i.e. just above
    # (k - 1) x b_throughput predictions/s.
    k = math.ceil(price / b_price - 1e-12)
    demand = (k - 1) * b_throughput
    if k == 1:
        return 0.0
    return float(demand) if demand < throughput else math.inf



def priced(table, price_per_hour, *, by=None, throughput="tokens_per_s", utilisation=1.0,
           column="cost_per_million"):
    """A copy of `table` (a pandas DataFrame with a throughput column, such as
    `achievable.decode_options`') with two columns added:

      price_per_hour: each row's hourly price (currency units per hour);
      `column` (default cost_per_million): `cost_per_million(price_per_hour,
        table[throughput], utilisation)`, currency units per million of what the
        `throughput` column counts per second (tokens, for tokens_per_s).

    `price_per_hour`: one number for every row, a sequence of one per row, or with `by`
    a dict {value: price} looked up by each row's value in the column or index level
    named `by` ({"T4": 0.526, "A10G": 1.006}, by="accelerator")."""
    _v.ensure(hasattr(table, "columns") and hasattr(table, "index"),
              f"table must be a pandas DataFrame, got {type(table).__name__}", TypeError)
    _v.ensure(throughput in table.columns, f"throughput={throughput!r} is not a column of "
              f"the table: {', '.join(map(str, table.columns))}")
    if by is not None:
        _v.ensure(isinstance(price_per_hour, dict), f"price_per_hour must be a dict "
                  f"{{value: price}} with by={by!r}, got {price_per_hour!r}", TypeError)
        if by in table.columns:
            keys = list(table[by])
        else:
            _v.ensure(by in table.index.names, f"by={by!r} is neither a column nor an index "
                      f"level of the table: {', '.join(map(str, table.columns))}")
            keys = list(table.index.get_level_values(by))
        missing = sorted({str(k) for k in keys if k not in price_per_hour})
        _v.ensure(not missing, f"price_per_hour has no price for {by}={', '.join(missing)}")
        price = [price_per_hour[k] for k in keys]
    else:
        price = price_per_hour
    price = _positive("price_per_hour", price)
    if np.ndim(price) == 0:
        price = np.full(len(table), float(price))
    _v.ensure(np.shape(price) == (len(table),), f"price_per_hour must be one number or one "
              f"per row ({len(table)}), got {np.shape(price)[0]}")
    out = table.copy()
    out["price_per_hour"] = np.asarray(price, dtype=float)
    out[column] = np.asarray(cost_per_million(out["price_per_hour"].to_numpy(),
                                              table[throughput].to_numpy(float), utilisation),
                             dtype=float)
    return out

#: Instances without a GPU: no catalogue GPU holds their price.
_CPU_PRICES = (
    _devices.ExamplePrice(
        "AWS c5.2xlarge", "8 vCPU (Intel Xeon), no GPU", 0.34, "USD", "AWS documentation "
        "example, read 2026-12", "https://docs.aws.amazon.com/autoscaling/ec2/userguide/"
        "weights-spot-price-per-unit-hour-example.html",
        "us-east-1 On-Demand, Linux. AWS marks the table as 'example pricing and not "
        "current pricing'."),
)
#: Example hourly prices: the CPU instances, then each catalogue GPU's `prices` (the
#: instances that hold it), in catalogue order.
EXAMPLE_PRICES = _CPU_PRICES + tuple(p for name in devices.names()
                                     for p in hardware.get(name).prices)


def price_per_gpu_hour(name) -> float:
    """An example price per GPU-hour, USD: the instance's hourly price over its GPUs (the
    count read from its `hardware` text, "8x NVIDIA H100 SXM" -> 8). `name` is an instance
    of `EXAMPLE_PRICES` ("AWS p5e.48xlarge (Capacity Block)") or a GPU one of them holds,
    by its catalogue name or an alias `hardware.get` knows ("H200", "h100" -> the
    p5.48xlarge's H100 SXM)."""
    instances = {p.name.strip().lower(): p for p in EXAMPLE_PRICES}
    if isinstance(name, str) and name.strip().lower() in instances:
        p = instances[name.strip().lower()]
        count, gpu = _gpus_of(p)
        if not count:
            raise ValueError(f"name={p.name!r} has no GPUs ({p.hardware}); a GPU-hour "
                             "needs an instance with one")
        return p.price_per_hour / count
    by_gpu = {}
    for p in EXAMPLE_PRICES:
        count, gpu = _gpus_of(p)
        if count:
            by_gpu.setdefault(gpu, (p, count))
    gpu = _gpu_name(name, list(instances.values()), by_gpu)
    p, count = by_gpu[gpu]
    return p.price_per_hour / count


def _gpus_of(price):
    """(GPUs in the instance, the GPU's name) from its `hardware` text; (0, None) if none."""
    import re

    match = re.match(r"(\d+)x NVIDIA ([^,]+)", price.hardware)
    return (int(match[1]), match[2].strip()) if match else (0, None)


def _gpu_name(name, instances, by_gpu) -> str:
    """`name` as the GPU of one of the example instances, or an error naming what is known."""
    known = (f"an instance ({', '.join(repr(p.name) for p in instances)}) or a GPU one of "
             f"them holds ({', '.join(map(repr, by_gpu))})")
    if not isinstance(name, str):
        raise TypeError(f"name must be {known}; got {name!r}")
    try:
        gpu = hardware.get(name).name
    except KeyError:
        gpu = None
    if gpu not in by_gpu:
        import difflib

        options = [*by_gpu, *(p.name for p in instances)]
        close = difflib.get_close_matches(name.strip(), options, n=2, cutoff=0.5)
        hint = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
        what = (f"the {gpu} is in no example instance" if gpu
                else "is neither an example instance nor a GPU one of them holds")
        raise _v.UnknownName(f"name={name!r}: {what}{hint}. Give {known}, or use your "
                             "own price per GPU-hour")
    return gpu


def example_price(name):
    """One of `EXAMPLE_PRICES` by name ("AWS g4dn.xlarge")."""
    by_name = {p.name: p for p in EXAMPLE_PRICES}
    return by_name[_v.choice("name", name, list(by_name), normalise=lambda s: s.strip().lower())]


def example_prices():
    """`EXAMPLE_PRICES` as a pandas DataFrame."""
    import pandas as pd

    return pd.DataFrame([p.__dict__ for p in EXAMPLE_PRICES])
