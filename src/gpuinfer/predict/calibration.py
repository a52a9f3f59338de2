"""The achievable model's calibration: published engine measurements, the fit, the errors.

Chapters: 1, 4, 7 and 8 (how far the achievable model is from what engines reach), and the
labs that ask whether a GPU has published figures. `achievable` holds the model (one
step's derated rows and overheads, `achievable.FITTED`'s constants); this module holds
what those constants were fitted on and how well they predict runs they were not fitted
on:

- `measurements(split)`: src/gpuinfer/data/published/engine_measurements.csv, one
  published engine figure a row, each cited (a references.bib key and its URL);
- `predict(row, achievable)`: the model's output tokens/s per GPU for one row (a fixed
  batch: `achievable.decode_tokens_per_s`; an offline run at maximum load:
  `llm_serving.offline_throughput` on the achievable model);
- `errors(efficiency, split)`: predicted against measured for every row;
- `calibrate()`: refits the free constants (`bandwidth`, `matmul_scale`, `step_s`, the
  weight-only factors) on the training rows.

It sits above both `achievable` and `llm_serving` (which imports `achievable`), so the
model itself imports no simulator.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib

import numpy as np

from gpuinfer.predict import achievable as _achievable
from gpuinfer import dtypes as _dtypes
from gpuinfer.predict import llm_serving as _serving
from gpuinfer import validate as _v

#: The measurements table: one published engine figure a row (see `measurements`).
MEASUREMENTS_CSV = pathlib.Path(__file__).parents[1] / "data" / "published" / "engine_measurements.csv"


def measurements(split=None):
    """The published engine measurements the model is calibrated on and checked against
    (src/gpuinfer/data/published/engine_measurements.csv): one row per figure, with its
    `source` (a references.bib key), `url`, engine and version, model, accelerator, TP,
    formats (`weight_format`, `compute_dtype`, `kv_dtype`), scenario ("decode": a fixed
    batch; "offline": maximum load, `llm_serving.offline_throughput`), lengths and
    `tokens_per_s` (total) / `tokens_per_s_per_gpu`. `split`: "train" or "heldout"."""
    import pandas as pd

    df = pd.read_csv(MEASUREMENTS_CSV)
    if split is not None:
        split = _v.choice("split", split, ["train", "heldout"])
        df = df[df["split"] == split]
    return df.reset_index(drop=True)


def predict(row, achievable=True) -> float:
    """Predicted output tokens/s per GPU for one row of `measurements()`: `achievable`
    True (`achievable.FITTED`), False (the ceiling) or an `achievable.Efficiency`."""
    eff = _achievable.as_efficiency(achievable)
    kw = dict(dtype=row["weight_format"], compute_dtype=row["compute_dtype"],
              kv_dtype=row["kv_dtype"])
    m = _achievable.model(row["model"])
    if row["scenario"] == "decode":
        b = int(row["batch"])
        c = int(row["input_tokens"]) + int(row["output_tokens"]) // 2
        return _achievable.decode_tokens_per_s(m, row["accelerator"], b, c, achievable=eff,
                                               **kw)
    return _serving.offline_throughput(
        m, row["accelerator"], int(row["input_tokens"]), int(row["output_tokens"]),
        n_devices=int(row["tp"]), achievable=eff, **kw)["tokens_per_s_per_gpu"]


def errors(achievable=True, split=None):
    """Predicted against measured for every row of `measurements(split)` on `achievable`
    (None: `achievable.FITTED`): columns `matmul_source` (`achievable.matmul_source` of
    the row's GPU and compute format: "measured", "fp8 stand-in" or "catalogue median"),
    `measured`, `ceiling`, `achievable` (tokens/s per GPU), `error_pct` (achievable over
    measured, minus 1, in %), `measured_over_ceiling`. `df.attrs` holds the median and
    worst absolute % error (`median_abs_error_pct`, `worst_abs_error_pct`) of the rows
    shown."""
    eff = _achievable.as_efficiency(achievable)
    df = measurements(split)
    out = df[["id", "split", "source", "engine", "model", "accelerator", "tp",
              "weight_format", "scenario", "input_tokens", "output_tokens"]].copy()
    out["matmul_source"] = [
        _achievable.matmul_source(r["accelerator"], _dtypes.formats(
            r["weight_format"], r["kv_dtype"] if isinstance(r["kv_dtype"], str) else None,
            r["compute_dtype"] if isinstance(r["compute_dtype"], str) else None)[2])
        for _, r in df.iterrows()]
    out["measured"] = df["tokens_per_s_per_gpu"].astype(float)
    out["ceiling"] = [predict(r, False) for _, r in df.iterrows()]
    out["achievable"] = [predict(r, eff) for _, r in df.iterrows()]
    out["error_pct"] = 100 * (out["achievable"] / out["measured"] - 1)
    out["measured_over_ceiling"] = out["measured"] / out["ceiling"]
    a = out["error_pct"].abs()
    out.attrs["median_abs_error_pct"] = float(a.median())
    out.attrs["worst_abs_error_pct"] = float(a.max())
    return out


def _log_errors(eff, rows):
    return np.array([math.log(predict(r, eff) / r["tokens_per_s_per_gpu"])
                     for _, r in rows.iterrows()])


def calibrate(*, rows=None, rounds=20):
    """Fit the achievable model's free constants on the training rows (default
    `measurements("train")`): `bandwidth` (0.40-1.00 by 0.01), `matmul_scale` (0.40-1.00
    by 0.01) and `step_s` (0-3 ms by 0.1 ms) by least squares on the log error of the
    rows without int8/int4 weights (coordinate descent over those grids, `rounds`
    sweeps at most, from the cited model with no derating), then each weight-only
    format's `weight_only` factor to its own rows by bisection (gpt-fast's int8 and
    int4). Everything else stays as cited. Returns (`achievable.Efficiency`, `errors` on
    the training rows)."""
    train = measurements("train") if rows is None else rows
    wo = train["weight_format"].map(lambda f: _dtypes.get(f).quantised
                                    and _dtypes.peak_dtype(f) in ("int8", "int4"))
    dense = train[~wo]
    grids = {"bandwidth": np.round(np.arange(0.40, 1.0001, 0.01), 2),
             "matmul_scale": np.round(np.arange(0.40, 1.0001, 0.01), 2),
             "step_s": np.round(np.arange(0.0, 3.0001e-3, 0.1e-3), 5)}
    # Start from the cited model alone (no derating, no step cost), not from FITTED.
    eff = dataclasses.replace(_achievable.FITTED, weight_only=(), matmul_scale=1.0,
                              bandwidth=1.0, step_s=0.0)

    def loss(e):
        return float(np.sum(_log_errors(e, dense) ** 2))

    for _ in range(_v.count("rounds", rounds, maximum=100)):
        before = eff
        for name, grid in grids.items():
            eff = min((dataclasses.replace(eff, **{name: float(x)}) for x in grid), key=loss)
        if eff == before:
            break
    fitted = []
    for fmt in ("int8", "int4"):
        mine = train[train["weight_format"].map(lambda f, fmt=fmt: _dtypes.peak_dtype(f) == fmt)
                     & wo]
        if not len(mine):
            continue
        lo, hi = 0.05, 1.0
        for _ in range(30):
            mid = (lo + hi) / 2
            e = dataclasses.replace(eff, weight_only=((fmt, mid),))
            lo, hi = (mid, hi) if _log_errors(e, mine).mean() < 0 else (lo, mid)
        fitted.append((fmt, round((lo + hi) / 2, 2)))
    eff = dataclasses.replace(eff, weight_only=tuple(fitted))
    return eff, errors(eff, "train")
