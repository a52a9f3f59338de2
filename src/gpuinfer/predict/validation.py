"""The achievable model validated across publishers: leave-one-source-out errors by
regime, a bootstrap of the fitted constants, and the interval of a prediction.

Chapter: *How to benchmark your own traffic* (the achievable model's validation section);
every page that shows an achievable number beside its ceiling can show its interval.

`gpuinfer.predict.calibration` fits `achievable.FITTED` on 6 rows of one document and checks it on
the rest of that document. This module asks the questions a reviewer asks of a fitted
model (MLPerf's rules, a benchmark's appendix): how far off is it on a publisher it was
not fitted on, in which regime, and how sure are its constants?

- `dataset()`: every published measurement the course holds, one cited row a figure
  (src/gpuinfer/data/published/engine_measurements.csv and more_engine_measurements.csv):
  source, URL at a commit, engine and version, TP/EP, formats, and `kv_dtype_basis`
  ("stated" by the source, "inferred" from a model card, or "assumed"). Rows of
  TensorRT-LLM's perf overview older than its 2025 version are `pool` "independent":
  never fitted on, never tuned on, kept as a test;
- `decompose(rows)` -> `Decomposition`: each row's step as its operations' FLOPs and
  bytes at the model's un-derated rates, so that any (bandwidth, matmul_scale, step_s,
  weight-only factors) prices every row in one vectorised expression
  (`Decomposition.predict`; a test checks it against `calibration.predict`);
- `fit(dec, mask)`: least squares on the log error over those constants;
- `loso()`: leave one source out: fit on every other source of the fit pool, predict the
  one left out; `errors_by(table, by)` summarises |error| (median, p90, worst) by source,
  dense/MoE, TP degree, GPU and throughput vs batch 1;
- `bootstrap()`: the constants refitted on rows resampled within each source, their
  spread and correlation (the bandwidth fraction and the fixed step cost trade off);
- `interval(value, regime)`: the range an achievable prediction's measured value falls
  in, from the leave-one-source-out errors of its regime.

A model a measurement beats is no ceiling: `ceiling_violations()` lists rows measured
above the ceiling (a test keeps it empty, with named exceptions where the model lacks a
mechanism: chunked attention).

Prediction layer: no torch, no measurement. SI units; tokens/s per GPU.
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib

import numpy as np

from gpuinfer.predict import achievable as _achievable
from gpuinfer import dtypes as _dtypes
from gpuinfer.predict import engine_step as _engine_step
from gpuinfer.predict import parallel as _parallel
from gpuinfer.predict import step_cost
from gpuinfer.predict import llm_serving as _serving
from gpuinfer import validate as _v

_DATA = pathlib.Path(__file__).parents[1] / "data" / "published"
#: The measurement files `dataset` reads, in order: the engines' published measurements,
#: then MLPerf Inference's closed results (`split` "mlperf": a pool of their own).
DATA_FILES = (_DATA / "engine_measurements.csv", _DATA / "more_engine_measurements.csv",
              _DATA / "mlperf_measurements.csv")
#: `dataset`'s pools: "fit" (what fits may use), "independent" (TensorRT-LLM's perf
#: overview older than 2025: a test only), "mlperf" (MLPerf Inference closed results: a
#: test only, returned on request, so that no statistic over the engines' rows moves).
POOLS = ("fit", "independent", "mlperf")
#: MLPerf's Server latency bounds (TTFT, TPOT at the 99th percentile, seconds), as each
#: run's log states them (mlperf_log_summary.txt: ttft_latency, tpot_latency).
MLPERF_SERVER_BOUNDS_S = {"llama-2-70b": (2.0, 0.200), "llama-3-8b": (2.0, 0.100)}

#: The constants `fit` adjusts; everything else stays as cited in `achievable`.
FREE = ("bandwidth", "matmul_scale", "step_s")
#: `fit`'s grids: bandwidth and matmul_scale 0.30-1.00 by 0.01, step_s 0-5 ms by 0.05 ms,
#: sequence_s 0-40 us by 1 us, each weight-only factor 0.30-1.00 by 0.01.
GRIDS = {"bandwidth": np.round(np.arange(0.30, 1.0001, 0.01), 2),
         "matmul_scale": np.round(np.arange(0.30, 1.0001, 0.01), 2),
         "step_s": np.round(np.arange(0.0, 5.0001e-3, 0.05e-3), 6),
         "sequence_s": np.round(np.arange(0.0, 40.0001e-6, 1e-6), 7)}
#: What `refit` adjusts: `FREE` and the host's per-sequence cost.
REFIT_FREE = FREE + ("sequence_s",)
_WO_GRID = np.round(np.arange(0.30, 1.0001, 0.01), 2)
#: The weight-only formats whose factor `fit` adjusts (where the rows have any).
WEIGHT_ONLY = ("int8", "int4")


def _bool(x) -> bool:
    return str(x).strip().lower() in ("true", "1", "yes")


def _read(paths):
    import pandas as pd

    frames = [pd.read_csv(p) for p in paths]
    df = pd.concat(frames, ignore_index=True, sort=False)
    df["ep"] = df["ep"].fillna(1).astype(int)
    df["pp"] = df["pp"].fillna(1).astype(int)
    df["attention_dp"] = df["attention_dp"].map(_bool) if "attention_dp" in df else False
    df["pool"] = np.where(df["split"].isin(["independent", "mlperf"]), df["split"], "fit")
    df["moe"] = [_achievable.model(m).is_moe for m in df["model"]]
    # MLPerf's Server scenario is a throughput at a latency bound (`decompose` maps it as
    # the offline maximum; `mlperf_table` checks the bound).
    df["kind"] = np.where(df["scenario"].isin(["offline", "server"]), "throughput",
                          np.where(df["batch"].fillna(0) == 1, "batch-1", "fixed batch"))
    df["gpus"] = df["tp"].astype(int) * df["pp"]
    return df


@functools.lru_cache(maxsize=1)
def _all_rows():
    return _read(DATA_FILES)


@functools.lru_cache(maxsize=1)
def _dataset():
    df = _all_rows()
    return df[df["pool"] != "mlperf"].reset_index(drop=True)


def dataset(pool=None):
    """Every published measurement (a pandas DataFrame, a copy): the columns of the CSV
    files (`DATA_FILES`) and `pool` ("fit": the rows fits may use; "independent":
    TensorRT-LLM's perf overview older than 2025, a test only; "mlperf": MLPerf Inference
    closed results, a test only), `moe` (the model is a mixture of experts), `kind`
    ("throughput": maximum load, MLPerf's Offline and Server; "batch-1"; "fixed batch"),
    `gpus` (tp x pp). `pool`: None for the engines' rows (fit and independent: what every
    fit and statistic of this module reads), or one of `POOLS`."""
    if pool is None:
        return _dataset().copy()
    pool = _v.choice("pool", pool, list(POOLS))
    df = _dataset() if pool != "mlperf" else _all_rows()
    return df[df["pool"] == pool].reset_index(drop=True)


# --- each row's step, decomposed ------------------------------------------------------------

#: The un-derated model that `Decomposition` scales: `FITTED` with no bandwidth or matmul
#: derating, no weight-only factor and no fixed step cost (its cited matmul fractions,
#: attention fraction and kernel gaps stay).
def _base(eff):
    return dataclasses.replace(eff, matmul_scale=1.0, bandwidth=1.0, weight_only=(),
                               step_s=0.0)


def _formats(row):
    kv = row["kv_dtype"] if isinstance(row["kv_dtype"], str) else None
    cd = row["compute_dtype"] if isinstance(row["compute_dtype"], str) else None
    return row["weight_format"], kv, cd


#: The engines' default caps on a step, (max sequences, max tokens a step), by engine
#: and version prefix, applied by `decompose(caps=True)`: TensorRT-LLM's LLM API
#: (`BuildConfig`: max_batch_size 2048, max_num_tokens 8192; trtllm-bench's v0.17 example
#: engine prints "Max Runtime Batch Size: 4096, Max Runtime Tokens: 8192"); vLLM 0.6
#: (`--max-num-seqs` 256; `--max-num-batched-tokens`: the model length without chunked
#: prefill, no cap here); SGLang 0.3 (`--max-running-requests` sized from memory: none).
ENGINE_CAPS = {("TensorRT-LLM", "1.0"): (2048, 8192), ("TensorRT-LLM", "0.17"): (4096, 8192),
               ("vLLM", "0.6"): (256, None), ("vLLM", "not stated"): (256, None),
               ("SGLang", "0.3"): (None, None)}


def engine_caps(engine, version):
    """(max_num_seqs, max_num_batched_tokens) an engine runs with by default
    (`ENGINE_CAPS`; None: no cap), for `offline_throughput`."""
    for (e, v), caps in ENGINE_CAPS.items():
        if e == engine and str(version).startswith(v):
            return caps
    return (None, None)


def _one_row(row, base, kv_override, caps=False, ep_layout=False):
    """(batch, gpus, z aggregates, EngineStep on the base model or an EP step's parts,
    ceiling tokens/s/GPU) for one row; raises ValueError where the row cannot be
    modelled."""
    dtype, kv, cd = _formats(row)
    if kv_override is not None and row.get("kv_dtype_basis", "stated") != "stated":
        kv = kv_override
    m = _achievable.model(row["model"])
    tp, i, o = int(row["tp"]), int(row["input_tokens"]), int(row["output_tokens"])
    if int(row["pp"]) != 1:
        raise ValueError("pipeline parallelism is not modelled")
    ic = row.get("interconnect")
    ic = ic if isinstance(ic, str) and ic.strip() else None
    if row["scenario"] == "decode":
        b = int(row["batch"])
        c = i + o // 2
        z = step_cost.step_aggregates(np.ones(b), np.full(b, float(c)))
        ceiling = b / _parallel.tp_step_s(m, row["accelerator"], tp, b, c, dtype=dtype,
                                          kv_dtype=kv, compute_dtype=cd, interconnect=ic,
                                          achievable=False) / tp
    else:
        kw = dict(dtype=dtype, kv_dtype=kv, compute_dtype=cd, n_devices=tp, interconnect=ic)
        if caps:
            kw["max_num_seqs"], kw["max_num_batched_tokens"] = engine_caps(
                row["engine"], row["engine_version"])
        if ep_layout and int(row["ep"]) > 1 and bool(row["attention_dp"]):
            kw.update(ep=int(row["ep"]), attention_dp=True)
        ceiling = _serving.offline_throughput(m, row["accelerator"], i, o, achievable=False,
                                              **kw)["tokens_per_s_per_gpu"]
        r = _serving.offline_throughput(m, row["accelerator"], i, o, achievable=base, **kw)
        b = r["batch"]
        if kw.get("attention_dp"):
            b = b / tp  # one GPU's own sequences
            prefills, decodes = b / o, b * (o - 1) / o
            context = i + (o - 2) / 2
            z = np.array([1.0, prefills * i + decodes, b,
                          prefills * i * (i + 1) / 2 + decodes * (context + 1),
                          decodes * context, prefills * i * i + decodes * (context + 1)])
            step = functools.partial(_serving.ep_dp_step, m, row["accelerator"], tp, z,
                                     dtype=dtype, kv_dtype=kv, compute_dtype=cd,
                                     interconnect=ic)
            parts = step(achievable=base)
            parts["measured_comm_s"] = step(achievable=dataclasses.replace(
                base, all_to_all="measured"))["comm_s"]
            return b * tp, tp, z, parts, ceiling
        prefills, decodes = b / o, b * (o - 1) / o
        context = i + (o - 2) / 2
        z = np.array([1.0, prefills * i + decodes, b,
                      prefills * i * (i + 1) / 2 + decodes * (context + 1), decodes * context,
                      prefills * i * i + decodes * (context + 1)])
    timer = _engine_step.EngineStep(m, row["accelerator"], dtype, kv, cd, n_devices=tp,
                                    achievable=base, interconnect=ic)
    return b, tp, z, timer, ceiling


@dataclasses.dataclass
class Decomposition:
    """Rows' steps as arrays (n rows x k operations, padded with zeros): `flops`,
    `bytes`, `peak` (FLOP/s of each operation at the base model: the cited matmul and
    attention fractions, no `matmul_scale`), `bandwidth` (datasheet bytes/s), `matmul`
    (the operation scales with `matmul_scale`), `weight_only` (the weight-only format of
    a dequantising matmul, or ""), and per row `fixed_s` (all-reduces and kernel gaps),
    `batch`, `gpus`, `ceiling` (tokens/s per GPU), `sequences` (what one GPU's step
    runs: the batch, or one GPU's share under data-parallel attention),
    `measured_all_to_all_s` (what an Efficiency with `all_to_all="measured"` adds to the
    all-to-alls' ceiling, already in `fixed_s`), `measured`, `ok` (modelled)."""

    flops: np.ndarray
    bytes: np.ndarray
    peak: np.ndarray
    bandwidth: np.ndarray
    matmul: np.ndarray
    weight_only: np.ndarray
    fixed_s: np.ndarray
    batch: np.ndarray
    gpus: np.ndarray
    ceiling: np.ndarray
    sequences: np.ndarray
    measured_all_to_all_s: np.ndarray
    measured: np.ndarray
    ok: np.ndarray
    why: list

    def step_s(self, achievable):
        """Seconds of each row's step under `achievable` (its bandwidth, matmul_scale,
        weight_only, step_s, sequence_s and all_to_all; the rest as in the base
        model)."""
        return self.sweep_s(achievable)[0]

    def sweep_s(self, achievable, name=None, values=None):
        """`step_s` for each of `values` of the constant `name` (others from
        `achievable`): an array (len(values) x rows); without a name, one row."""
        eff = _achievable.as_efficiency(achievable)
        x = {k: np.array([getattr(eff, k)], dtype=float)
             for k in ("bandwidth", "matmul_scale", "step_s", "sequence_s")}
        if name is not None:
            x[name] = np.asarray(values, dtype=float)
        col = {k: v[:, None, None] for k, v in x.items()}
        wo = np.ones(self.bytes.shape)
        for fmt, f in eff.weight_only:
            wo[self.weight_only == _dtypes.get(fmt).peak] = f
        with np.errstate(divide="ignore", invalid="ignore"):
            compute = np.where(self.flops > 0, self.flops / self.peak, 0.0)
            compute = np.where(self.matmul, compute / col["matmul_scale"], compute)
            moved = np.where(self.bytes > 0, self.bytes / (self.bandwidth * wo), 0.0)
            t = np.maximum(compute, moved / col["bandwidth"])
        a2a = self.measured_all_to_all_s if eff.all_to_all == "measured" else 0.0
        return (t.sum(axis=2) + self.fixed_s + a2a + col["step_s"][:, :, 0]
                + col["sequence_s"][:, :, 0] * self.sequences)

    def predict(self, achievable):
        """Predicted tokens/s per GPU of each row under `achievable`."""
        return self.batch / self.step_s(achievable) / self.gpus


def decompose(rows=None, *, kv_dtype=None, base=None, caps=False,
              ep_layout=False) -> Decomposition:
    """`Decomposition` of `rows` (default `dataset()`). `kv_dtype`: replace the KV-cache
    format of every row whose `kv_dtype_basis` is not "stated" (the assumption's effect
    on the errors). `caps=True`: offline rows run under their engine's default caps
    (`engine_caps`); False (default): as `calibration` maps them, the batch the memory
    holds. `ep_layout=True`: rows published with ep = tp and attention DP run in that
    layout (`llm_serving.offline_throughput(ep=, attention_dp=True)`, `ep_dp_step`);
    False (default): as tensor parallelism, each expert split 1/tp (calibration's
    mapping). `base`: the model whose cited constants stay (default
    `achievable.FITTED`)."""
    df = dataset() if rows is None else rows
    base = _base(_achievable.FITTED if base is None else base)
    wo_probe = {p: dataclasses.replace(base, weight_only=((p, 0.5),)) for p in WEIGHT_ONLY}
    parts, why = [], []
    for _, row in df.iterrows():
        try:
            b, gpus, z, timer, ceiling = _one_row(row, base, kv_dtype, caps, ep_layout)
        except ValueError as e:
            parts.append(None)
            why.append(str(e))
            continue
        if isinstance(timer, dict):  # an EP + DP-attention step: one GPU's rows
            m = _achievable.model(row["model"])
            mm = np.array([n != "attention" and ff > 0
                           for n, ff in zip(timer["names"], timer["flops"])])
            fixed = (timer["comm_s"] + float(_achievable.overheads(0.0, m.n_layers, base)))
            parts.append((timer["flops"], timer["bytes"], timer["peaks"], timer["bandwidths"],
                          mm, np.array([""] * len(mm), dtype=object), fixed, b, gpus,
                          ceiling, b / gpus, timer["measured_comm_s"] - timer["comm_s"]))
            why.append("")
            continue
        f, y = timer.flops_bytes(np.asarray(z, dtype=float)[:, None])
        names = timer.names
        # a matmul-like row: arithmetic that is not attention (achievable's rule)
        kinds = ["matmul" if n != "attention" and ff > 0 else "other"
                 for n, ff in zip(names, f[:, 0])]
        wo = np.array([""] * len(names), dtype=object)
        w = _dtypes.get(row["weight_format"])
        if w.quantised and w.peak in WEIGHT_ONLY:
            rows_ = [(n, ff, timer.compute_dtype) for n, ff in zip(names, f[:, 0])]
            probe = _achievable.row_rates(rows_, row["accelerator"], wo_probe[w.peak], w.name)[1]
            wo[probe < timer.bandwidths * 0.75] = w.peak
        fixed = (float(timer.comm_s(z[1])[0])
                 + float(_achievable.overheads(0.0, timer.n_layers, base)))
        parts.append((f[:, 0], y[:, 0], timer.peaks, timer.bandwidths,
                      np.array([k == "matmul" for k in kinds]), wo, fixed, b, gpus, ceiling,
                      b, 0.0))
        why.append("")
    k = max((len(p[0]) for p in parts if p is not None), default=1)
    n = len(parts)
    arr = {name: np.zeros((n, k)) for name in ("flops", "bytes", "peak", "bandwidth")}
    arr["peak"][:] = 1.0
    arr["bandwidth"][:] = 1.0
    matmul = np.zeros((n, k), dtype=bool)
    wo = np.full((n, k), "", dtype=object)
    fixed, batch, gpus, ceiling, seqs, a2a = (np.full(n, np.nan) for _ in range(6))
    for j, p in enumerate(parts):
        if p is None:
            continue
        r = len(p[0])
        arr["flops"][j, :r], arr["bytes"][j, :r] = p[0], p[1]
        arr["peak"][j, :r], arr["bandwidth"][j, :r] = p[2], p[3]
        matmul[j, :r], wo[j, :r] = p[4], p[5]
        fixed[j], batch[j], gpus[j], ceiling[j], seqs[j], a2a[j] = p[6:12]
    return Decomposition(arr["flops"], arr["bytes"], arr["peak"], arr["bandwidth"], matmul,
                         wo, fixed, batch, gpus, ceiling, seqs, a2a,
                         df["tokens_per_s_per_gpu"].to_numpy(float),
                         np.array([p is not None for p in parts]), why)


@functools.lru_cache(maxsize=4)
def _decomposed(kv_dtype=None, caps=False, ep_layout=False):
    return decompose(kv_dtype=kv_dtype, caps=caps, ep_layout=ep_layout)


# --- the fit --------------------------------------------------------------------------------

def _loss(dec, mask, eff, weights=None):
    e = np.log(dec.predict(eff)[mask] / dec.measured[mask])
    w = 1.0 if weights is None else weights[mask]
    return float(np.sum(w * e * e))


def _best_on_grid(dec, mask, eff, name, weights=None):
    """`eff` with `name` set to the value of its grid (`GRIDS`) with the least weighted
    squared log error over the rows `mask` selects (the first such value)."""
    grid = GRIDS[name]
    pred = dec.batch[mask] / dec.sweep_s(eff, name, grid)[:, mask] / dec.gpus[mask]
    e = np.log(pred / dec.measured[mask])
    w = 1.0 if weights is None else weights[mask]
    return dataclasses.replace(eff, **{name: float(grid[int(np.argmin(np.sum(w * e * e,
                                                                         axis=1)))])})


def fit(dec=None, mask=None, *, start=None, free=FREE, rounds=20):
    """The achievable model's free constants fitted by least squares on the log error of
    the rows `mask` selects (default: every modelled row of the fit pool) of `dec`
    (default `decompose()` of `dataset()`): `free` (default `FREE`: bandwidth,
    matmul_scale, step_s) by coordinate descent over `GRIDS`, then each weight-only
    factor on its own rows (int8, int4: kept from `start` where the rows have none).
    `start`: the model to start from and keep the rest of (default `achievable.FITTED`).
    Returns an `achievable.Efficiency`."""
    dec = _decomposed() if dec is None else dec
    if mask is None:
        mask = (_dataset()["pool"] == "fit").to_numpy()
    mask = np.asarray(mask, dtype=bool) & dec.ok
    _v.ensure(mask.any(), "mask selects no modelled row to fit on")
    eff = _achievable.FITTED if start is None else _achievable.as_efficiency(start)
    has_wo = (dec.weight_only != "").any(axis=1)
    plain = mask & ~has_wo
    for _ in range(_v.count("rounds", rounds, maximum=100)):
        before = eff
        for name in free:
            eff = _best_on_grid(dec, plain if plain.any() else mask, eff, name)
        if eff == before:
            break
    table = dict(eff.weight_only)
    for fmt in WEIGHT_ONLY:
        mine = mask & (dec.weight_only == fmt).any(axis=1)
        if not mine.any():
            continue
        table[fmt] = min(_WO_GRID, key=lambda x: _loss(
            dec, mine, dataclasses.replace(eff, weight_only=tuple({**table, fmt: x}.items()))))
        table[fmt] = float(table[fmt])
    return dataclasses.replace(eff, weight_only=tuple(sorted(table.items())))


@functools.lru_cache(maxsize=1)
def refit():
    """The refit `achievable.REFIT` states: `fit` of `REFIT_FREE` (bandwidth,
    matmul_scale, step_s and the per-sequence cost) on every modelled row of the fit pool
    (all sources but the independent test), the offline rows under their engines' default
    caps (`decompose(caps=True)`). `achievable.FITTED` is not changed by it (pages glue
    FITTED's numbers)."""
    return fit(_decomposed(caps=True), free=REFIT_FREE)


# --- errors ---------------------------------------------------------------------------------

def table(achievable=True, *, dec=None, rows=None):
    """Every row predicted on `achievable` (True, the default: `achievable.FITTED`): the dataset's
    identifying columns and `measured`, `ceiling`, `achievable` (tokens/s per GPU),
    `error_pct` (achievable / measured - 1, in %), `measured_over_ceiling`, `modelled`."""
    df = dataset() if rows is None else rows
    dec = _decomposed() if dec is None else dec
    eff = _achievable.as_efficiency(achievable)
    out = df[["id", "pool", "source", "engine", "model", "accelerator", "tp", "ep",
              "weight_format", "kv_dtype", "kv_dtype_basis", "scenario", "kind", "moe",
              "input_tokens", "output_tokens", "batch"]].copy()
    out["measured"] = dec.measured
    out["ceiling"] = dec.ceiling
    out["achievable"] = np.where(dec.ok, dec.predict(eff), np.nan)
    out["error_pct"] = 100 * (out["achievable"] / out["measured"] - 1)
    out["measured_over_ceiling"] = out["measured"] / out["ceiling"]
    out["modelled"] = dec.ok
    return out


def loso(*, dec=None, rows=None, free=FREE):
    """Leave one source out: for each source of the fit pool, `fit` (of `free`) on every
    other source's rows (weight-only factors kept from FITTED where no other source has
    them) and predict the source left out; the independent rows are predicted by the fit
    on the whole pool. `dec`: a `decompose` result (default: rows as `calibration` maps
    them; `loso(dec=decompose(caps=True), free=REFIT_FREE)` is `refit`'s structure). Returns `table`'s columns with `achievable` and `error_pct` from those
    fits and `fitted` (a dict {left-out source: Efficiency}) in `attrs`."""
    df = dataset() if rows is None else rows
    dec = _decomposed() if dec is None else dec
    out = table(dec=dec, rows=df)
    pool = (df["pool"] == "fit").to_numpy()
    fits = {}
    pred = np.full(len(df), np.nan)
    for s in sorted(set(df.loc[pool, "source"])):
        left = (df["source"] == s).to_numpy()
        fits[s] = e = fit(dec, pool & ~left, free=free)
        pred[left] = dec.predict(e)[left]
    whole = fit(dec, pool, free=free)
    fits["(all fit sources)"] = whole
    pred[~pool] = dec.predict(whole)[~pool]
    out["achievable"] = np.where(dec.ok, pred, np.nan)
    out["error_pct"] = 100 * (out["achievable"] / out["measured"] - 1)
    out.attrs["fitted"] = fits
    return out


#: The regimes `errors_by` summarises by default.
REGIMES = ("source", "moe", "tp", "accelerator", "kind")


def errors_by(errors, by="source"):
    """|error| of `errors` (a `table` or `loso` result) grouped by a column: rows `n`,
    `median_pct`, `p90_pct`, `worst_pct` of |error_pct| and `bias_pct` (median signed
    error: > 0 over-predicts). Rows the model cannot express are left out."""
    e = errors[errors["modelled"]].copy()
    e["abs"] = e["error_pct"].abs()
    g = e.groupby(by)
    return g.agg(n=("abs", "size"), median_pct=("abs", "median"),
                 p90_pct=("abs", lambda x: float(np.quantile(x, 0.9))),
                 worst_pct=("abs", "max"), bias_pct=("error_pct", "median"))


def mlperf_table(achievable=True):
    """MLPerf Inference's closed results (`dataset("mlperf")`) predicted on `achievable`
    (default `achievable.FITTED`): `table`'s columns and `step_s` (the achievable step at
    the batch the memory holds, seconds), `tpot_bound_s` (the Server scenario's TPOT
    bound, `MLPERF_SERVER_BOUNDS_S`; NaN for Offline), `within_bound` (step_s <= the
    bound: the Server result is the offline maximum under its latency bound, as
    `decompose` maps it) and `why` (the reason a row is not modelled, else "").

    A Server result is the throughput a Poisson load sustains within TTFT and TPOT bounds
    at the 99th percentile; it is mapped as the offline maximum (the batch the memory
    holds), which is what it is when that batch's step already meets the TPOT bound (the
    Server result then sits a few percent under the Offline one). A row whose step
    exceeds the bound is predicted too high by that mapping: `within_bound` says which."""
    rows = dataset("mlperf")
    dec = decompose(rows)
    eff = _achievable.as_efficiency(achievable)
    t = table(eff, dec=dec, rows=rows)
    t["step_s"] = np.where(dec.ok, dec.step_s(eff), np.nan)
    bound = [MLPERF_SERVER_BOUNDS_S.get(m, (np.nan, np.nan))[1] if sc == "server" else np.nan
             for m, sc in zip(rows["model"], rows["scenario"])]
    t["tpot_bound_s"] = bound
    t["within_bound"] = ~(t["step_s"] > t["tpot_bound_s"])
    t["why"] = dec.why
    return t


def summary(errors):
    """(n, median, p90, worst) of |error_pct| over the modelled rows of `errors`."""
    a = errors.loc[errors["modelled"], "error_pct"].abs().to_numpy()
    return (len(a), float(np.median(a)), float(np.quantile(a, 0.9)), float(a.max()))


# --- the bootstrap --------------------------------------------------------------------------

def bootstrap(n=100, *, seed=0, dec=None, pin_step_with_batch1=False):
    """The constants refitted on `n` resamples of the fit pool (rows drawn with
    replacement within each source, so every source keeps its weight): a DataFrame, one
    row a resample, columns `FREE` and the weight-only factors. `attrs`: `mean`, `std`,
    `p5`, `p95` per constant and `corr` (the correlation matrix: bandwidth and step_s
    trade off where the rows cannot tell them apart). `pin_step_with_batch1=True` fits
    step_s on the batch-1 rows first (their step is mostly weights read once and the fixed
    cost) and keeps it while the rest are fitted."""
    import pandas as pd

    dec = _decomposed() if dec is None else dec
    df = _dataset()
    pool = np.flatnonzero(((df["pool"] == "fit").to_numpy()) & dec.ok)
    by_source = [pool[(df["source"].to_numpy()[pool] == s)]
                 for s in sorted(set(df["source"].to_numpy()[pool]))]
    rng = np.random.default_rng(_v.count("seed", seed, minimum=0, maximum=2**31))
    out = []
    for _ in range(_v.count("n", n, maximum=10_000)):
        idx = np.concatenate([rng.choice(s, size=len(s), replace=True) for s in by_source])
        counts = np.bincount(idx, minlength=len(df))
        e = _weighted_fit(dec, counts, pin_step_with_batch1)
        out.append({**{k: getattr(e, k) for k in FREE}, **{f"weight_only_{k}": v
                                                           for k, v in e.weight_only}})
    t = pd.DataFrame(out)
    t.attrs.update(mean=t.mean().to_dict(), std=t.std().to_dict(),
                   p5=t.quantile(0.05).to_dict(), p95=t.quantile(0.95).to_dict(),
                   corr=t[list(FREE)].corr())
    return t


def _weighted_fit(dec, counts, pin_step):
    """`fit` with each row weighted by how often the resample drew it."""
    w = counts.astype(float)
    mask = (w > 0) & dec.ok
    has_wo = (dec.weight_only != "").any(axis=1)
    plain = mask & ~has_wo

    def loss(e, m):
        err = np.log(dec.predict(e)[m] / dec.measured[m])
        return float(np.sum(w[m] * err * err))

    eff = _achievable.FITTED
    free = FREE
    if pin_step:
        b1 = plain & batch1_mask()
        if b1.any():
            eff = fit(dec, b1, free=("step_s",))
            free = tuple(f for f in FREE if f != "step_s")
    for _ in range(20):
        before = eff
        for name in free:
            eff = _best_on_grid(dec, plain, eff, name, w)
        if eff == before:
            break
    table_ = dict(eff.weight_only)
    for fmt in WEIGHT_ONLY:
        mine = mask & (dec.weight_only == fmt).any(axis=1)
        if mine.any():
            table_[fmt] = float(min(_WO_GRID, key=lambda x: loss(dataclasses.replace(
                eff, weight_only=tuple({**table_, fmt: x}.items())), mine)))
    return dataclasses.replace(eff, weight_only=tuple(sorted(table_.items())))


def batch1_mask():
    """Rows that are batch-1 measurements (`kind` "batch-1")."""
    return (_dataset()["kind"] == "batch-1").to_numpy()


# --- the interval of a prediction -----------------------------------------------------------

#: `interval`'s regimes: which rows' leave-one-source-out errors bound a prediction.
INTERVAL_REGIMES = ("all", "dense throughput", "moe throughput", "batch-1", "tp>1")


def _regime_mask(errors, regime):
    e = errors
    return {"all": np.ones(len(e), dtype=bool),
            "dense throughput": ((e["kind"] == "throughput") & ~e["moe"]).to_numpy(),
            "moe throughput": ((e["kind"] == "throughput") & e["moe"]).to_numpy(),
            "batch-1": (e["kind"] == "batch-1").to_numpy(),
            "tp>1": (e["tp"] > 1).to_numpy()}[regime]


@functools.lru_cache(maxsize=2)
def validation_errors(model="fitted"):
    """The out-of-sample errors `interval` reads, on the fit pool's modelled rows:
    model "fitted": `achievable.FITTED`'s errors (`table`: its constants are fixed; 6 of
    these rows are the ones it was fitted on); "refit": `loso` of `refit`'s structure."""
    model = _v.choice("model", model, ["fitted", "refit"])
    e = table() if model == "fitted" else loso(dec=_decomposed(caps=True), free=REFIT_FREE)
    return e[(e["pool"] == "fit") & e["modelled"]].reset_index(drop=True)


#: What a predicted value is: a rate (tokens/s, requests/s: a measurement divides it by the
#: ratio measured/predicted's spread as it stands) or a cost of the work (seconds a step,
#: USD per million tokens, GPUs for a demand: it moves against the rate).
PER = ("rate", "cost")


def _source_quantiles(ratio, sources, qs):
    """Quantiles `qs` of `ratio` with every source weighing the same (each row 1 / its
    source's row count): midpoints of the cumulative weights, interpolated linearly."""
    ratio = np.asarray(ratio, dtype=float)
    sources = np.asarray(sources)
    _, inverse, counts = np.unique(sources, return_inverse=True, return_counts=True)
    w = 1.0 / counts[inverse]
    order = np.argsort(ratio, kind="stable")
    r, w = ratio[order], w[order]
    mid = (np.cumsum(w) - w / 2) / w.sum()
    return np.interp(qs, mid, r)


def interval(value, regime="all", *, per="rate", coverage=0.8, model="fitted", errors=None):
    """(low, high): where a measurement falls, given an achievable prediction `value` in
    `regime` (`INTERVAL_REGIMES`): the central `coverage` of measured / predicted over that
    regime's rows of `validation_errors(model)`, **every source weighing the same** (each
    row 1 / its source's rows), so one publisher's hundred rows do not hide another's
    engine or GPU. These are the model's errors on the published rows as they stand
    (in-sample for `FITTED`'s six fitted rows, the rest not fitted on, all from the same
    few sources); a source unlike any of them can land outside: the leave-one-source-out
    errors (`loso`) are larger. `per="rate"` for a rate (tokens/s, requests/s);
    `per="cost"` for what moves against the rate (a step's seconds, USD per million
    tokens): (value / high ratio, value / low ratio). `errors`: a `table` or `loso`
    result to use instead (it needs `measured`, `achievable`, `modelled`, the regime's
    columns and, for the weights, `source`; without `source` every row weighs the same)."""
    x = _v.positive("value", value)
    regime = _v.choice("regime", regime, list(INTERVAL_REGIMES))
    per = _v.choice("per", per, list(PER))
    c = _v.fraction("coverage", coverage)
    e = validation_errors(model) if errors is None else errors[errors["modelled"]]
    mask = _regime_mask(e, regime)
    ratio = (e["measured"] / e["achievable"]).to_numpy()[mask]
    _v.ensure(len(ratio) >= 5, f"regime={regime!r} has {len(ratio)} validated rows, too few "
                               f"for an interval")
    sources = (e["source"].to_numpy()[mask] if "source" in e.columns
               else np.zeros(len(ratio), dtype=int))
    lo, hi = _source_quantiles(ratio, sources, [(1 - c) / 2, (1 + c) / 2])
    return (float(x * lo), float(x * hi)) if per == "rate" else (float(x / hi), float(x / lo))


def choice(best, other, regime="all", *, per="cost", coverage=0.8, model="fitted",
           errors=None, fixed_other=False) -> dict:
    """A decision's two numbers and whether it holds within the model's error: `best` is
    the chosen option's achievable value and `other` the best alternative's (same units;
    `per` as in `interval`: "cost" when lower wins, "rate" when higher wins). Returns
    {"value", "low", "high", "other", "other_low", "other_high", "flips"}: (low, high) is
    `best`'s `interval` and (other_low, other_high) `other`'s. `flips` is True when the two
    intervals overlap: a measurement of each could land in the other's order, so the
    choice could change within the model's error (measure both before committing). Both
    predictions carry the regime's bias alike, so what decides is their ratio against the
    interval's spread: for a rate, best / other < high ratio / low ratio.
    `fixed_other=True` when `other` is not a prediction but a fixed bar (an objective, a
    device's measured bandwidth): it has no interval of its own, and `flips` is True when
    it lies inside `best`'s."""
    low, high = interval(best, regime, per=per, coverage=coverage, model=model, errors=errors)
    o = _v.positive("other", other)
    if fixed_other:
        o_low = o_high = float(o)
    else:
        o_low, o_high = interval(o, regime, per=per, coverage=coverage, model=model,
                                 errors=errors)
    flips = (low <= o <= high) if fixed_other else (o_high >= low if per == "rate" else o_low <= high)
    return {"value": float(best), "low": low, "high": high, "other": float(o),
            "other_low": o_low, "other_high": o_high, "flips": bool(flips)}


# --- the ceiling ----------------------------------------------------------------------------

def ceiling_violations(*, dec=None, rows=None, tolerance=0.0):
    """Rows measured above their ceiling by more than `tolerance` (a fraction): `table`'s
    columns for those rows. A ceiling a published measurement beats is a defect in the
    ceiling (or in the row's mapping: its KV format, its layout)."""
    t = table(dec=dec, rows=rows)
    return t[t["modelled"] & (t["measured_over_ceiling"] > 1 + tolerance)]


def sensitivity_to_kv(kv_dtype="bf16"):
    """How the KV-format assumption moves the errors: (errors with the rows' own KV
    format, errors with every non-stated row's KV cache at `kv_dtype`), both on
    `achievable.FITTED` (`table`)."""
    return table(), table(dec=_decomposed(_dtypes.get(kv_dtype).name))
