"""What the labs measure beside a ceiling, built on `bench`'s timer and sweeps.

- **A decode step, one row format** (`STEP_COLUMNS`, `step_row`): every measured decode
  step, whoever timed it (`decode_step` here, `decoding.DecodeStack.measure`), is one row
  with its bytes and FLOPs, the median seconds and the rates derived from them, each
  ceiling and the fraction reached. `decode_step` times lab *Weight reads*' chain of
  square matrices.
- **The roofline a sweep drew** (`measured_roofline`): the best FLOP/s and bytes/s a
  matmul sweep (`bench.matmul_tflops` over `lab_matmul_shapes`) reached, and their ratio.
- **Ceilings for a GPU the catalogue lacks** (`lab_accelerator`): the device's catalogue
  entry with any missing bandwidth or peak measured here, once, and labelled as measured.

Labs: all of them (`lab_accelerator`), *Weight reads*, *fp16 matmuls on the roofline*.
Measurement layer: imports torch (through `device` and `bench`).
"""

from __future__ import annotations

import dataclasses
import datetime
import math

import numpy as np

import torch

from gpuinfer.measure import bench as _bench
from gpuinfer.measure import torch_device as _dev
from gpuinfer import dtypes as _dtypes
from gpuinfer.measure import detection
from gpuinfer.hardware import devices
from gpuinfer.predict import llm as _llm
from gpuinfer.predict import roofline as _roofline
from gpuinfer import validate as _validate


# --- a decode step: one row format for every decode step ------------------------------------

#: The columns of a decode-step row, whoever measured it.
STEP_COLUMNS = ["device", "model", "kernel", "dtype", "weight_format", "n_layers", "d_model",
                "batch", "context", "weight_bytes", "kv_cache_bytes", "step_bytes",
                "step_flops", "bound", "cuda_graph", "compiled", "seconds", "iqr_s",
                "tokens_per_s", "tokens_per_s_per_sequence", "achieved_gb_per_s",
                "ceiling_tokens_per_s", "fraction_of_ceiling",
                "weight_read_ceiling_tokens_per_s", "fraction_of_weight_read_ceiling",
                "torch"]

#: A memory-bound kernel at this fraction of its bandwidth ceiling or more streams well:
#: large reads reach 60-90% of a datasheet bandwidth (STREAM sustains 75-85%; `read_share`).
GOOD_STREAM = 0.6



def step_row(*, device, model, kernel, dtype, weight_format, n_layers, d_model, batch,
             context, weight_bytes, kv_cache_bytes, step_flops, bound, cuda_graph, compiled,
             timing, ceiling_tokens_per_s, weight_read_ceiling_tokens_per_s) -> dict:
    """One measured decode step as a dict with `STEP_COLUMNS`: what was run, its bytes
    (weights + KV cache) and FLOPs, the median seconds and rates derived from them, each
    ceiling and the fraction reached, and the torch version (kernels change with it)."""

    seconds = timing.median_s
    step_bytes = weight_bytes + kv_cache_bytes
    tokens = batch / seconds
    return {"device": device, "model": model, "kernel": kernel, "dtype": dtype,
            "weight_format": weight_format, "n_layers": n_layers, "d_model": d_model,
            "batch": batch, "context": context, "weight_bytes": weight_bytes,
            "kv_cache_bytes": kv_cache_bytes, "step_bytes": step_bytes,
            "step_flops": step_flops, "bound": bound, "cuda_graph": bool(cuda_graph),
            "compiled": bool(compiled), "seconds": seconds, "iqr_s": timing.iqr_s,
            "tokens_per_s": tokens, "tokens_per_s_per_sequence": 1 / seconds,
            "achieved_gb_per_s": step_bytes / seconds / 1e9,
            "ceiling_tokens_per_s": ceiling_tokens_per_s,
            "fraction_of_ceiling": _bench.fraction(tokens, ceiling_tokens_per_s),
            "weight_read_ceiling_tokens_per_s": weight_read_ceiling_tokens_per_s,
            "fraction_of_weight_read_ceiling": _bench.fraction(
                tokens, weight_read_ceiling_tokens_per_s),
            "torch": torch.__version__}


def decode_step(d_model, n_matrices, batch=1, dtype=None, device=None, *,
                cuda_graph=False, min_run_s=None, accelerator=None) -> dict:
    """Lab *Weight reads*: time x = x @ W through `n_matrices` weights [d_model, d_model]
    (x: [batch, d_model]) and return one `step_row`: its ceiling is the roofline's for the
    chain's bytes and FLOPs, its weight-read ceiling the bandwidth over the weight bytes.
    `cuda_graph=True` (GPU only) replays the chain from one CUDA graph."""
    d_model = _validate.count("d_model", d_model)
    n_matrices = _validate.count("n_matrices", n_matrices)
    batch = _validate.count("batch", batch)
    device, dtype, tdtype, bpe, acc, _ = _dev.target(device, dtype, accelerator)
    n_params = n_matrices * d_model * d_model
    _dev.refuse_beyond_memory(n_params * bpe, device,
                              f"{n_matrices} [{d_model}, {d_model}] matrices")
    # Scaled so activations stay O(1) through the chain (no fp16 overflow).
    weights = [_dev.random_tensor((d_model, d_model), tdtype, device, d_model**-0.5)
               for _ in range(n_matrices)]  # n x [d_model, d_model]
    x0 = _dev.random_tensor((batch, d_model), tdtype, device)  # [batch, d_model]

    def step():
        x = x0
        for w in weights:
            x = x @ w
        return x

    graphed = bool(cuda_graph and device.type == "cuda")
    t = _bench.time_fn(_dev.graphed(step, device) if graphed else step,
                       min_run_s=min_run_s, device=device)
    weight_bytes, flops = n_params * bpe, 2.0 * n_params * batch
    on_roof = _roofline.evaluate({"chain": {"flops": flops, "bytes": weight_bytes,
                                            "dtype": dtype}}, acc,
                                 missing="nan").iloc[0]  # a measured row: NaN ceiling
    return step_row(device=acc.name, model=f"{n_matrices} x [{d_model}, {d_model}] matrices",
                    kernel="dense", dtype=dtype, weight_format=dtype, n_layers=n_matrices,
                    d_model=d_model, batch=batch, context=0, weight_bytes=weight_bytes,
                    kv_cache_bytes=0.0, step_flops=flops, bound=str(on_roof["bound"]),
                    cuda_graph=graphed, compiled=False, timing=t,
                    ceiling_tokens_per_s=_bench.call_or_nan(lambda: batch / on_roof["seconds"]),
                    weight_read_ceiling_tokens_per_s=_bench.call_or_nan(
                        _llm.weight_read_ceiling, n_params, bpe, acc.bandwidth, batch))


# --- repeated runs: what a verdict's noise gate reads ---------------------------------------

def repeated(measure, repeats=3):
    """Run `measure()` `repeats` times (each call returns rows, one per point, the same
    points in the same order, with "seconds" and "iqr_s") and return (rows, runs): for each
    point the row of the run with the median seconds (for an even count, the lower
    middle), so its derived columns stay its own, plus "spread", the largest of (max - min)
    / median over the runs of the seconds and of their inverse (so that it holds for any
    rate derived from them: tokens/s, GB/s, a fraction of a ceiling) and of that row's
    iqr_s / seconds (inf where a run gave no time); and the list of every run's rows. The verdicts of labs 1, 2 and 10
    read "spread" (`lab_verdicts.Spread`). One run gives an infinite spread."""
    import pandas as pd

    _validate.callable_("measure", measure)
    n = _validate.count("repeats", repeats, maximum=100)
    runs = [pd.DataFrame(measure()).reset_index(drop=True) for _ in range(n)]
    points = len(runs[0])
    _validate.ensure(points > 0 and all(len(r) == points for r in runs),
                     f"measure() must return the same number (> 0) of rows each run, got "
                     f"{[len(r) for r in runs]}")
    seconds = np.array([r["seconds"].to_numpy(float) for r in runs])    # [runs, points]
    picked = np.argsort(np.nan_to_num(seconds, nan=np.inf), axis=0)[(n - 1) // 2]
    rows = pd.DataFrame([runs[r].iloc[j] for j, r in enumerate(picked)]).reset_index(drop=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        med = np.median(seconds, axis=0)
        rates = 1 / seconds
        across = np.maximum(np.ptp(seconds, axis=0) / med,
                            np.ptp(rates, axis=0) / np.median(rates, axis=0)) \
            if n > 1 else np.inf
        within = rows["iqr_s"].to_numpy(float) / rows["seconds"].to_numpy(float)
    spread = np.maximum(across, within)
    rows["spread"] = np.where(np.isfinite(spread) & np.all(seconds > 0, axis=0), spread,
                              np.inf)
    return rows, runs


def time_repeated(fn, repeats=3, **time_fn_kwargs) -> dict:
    """`bench.time_fn(fn, **time_fn_kwargs)` run `repeats` times, as `repeated` reads it:
    {"seconds": the median run's median, "iqr_s": its IQR, "spread": the wider of the
    range over runs and the IQR, as a fraction of the median}."""
    def once():
        t = _bench.time_fn(fn, **time_fn_kwargs)
        return [{"seconds": t.median_s, "iqr_s": t.iqr_s}]

    return repeated(once, repeats)[0].iloc[0].to_dict()


def copies_beyond_cache(nbytes, device=None, *, max_copies=64) -> int:
    """How many copies of a working set of `nbytes` make a pool at least
    `bench.CACHE_FLUSH_FACTOR` times the last-level cache `device` reports
    (`device.cache_bytes`; L2 on a GPU): a timed call that reads the next copy each time
    then reads memory, not the cache. `nbytes` is what one call reads (for a routed layer,
    its touched experts, not the whole layer: `touched_copies`). 1 where one copy is
    already that large; at most `max_copies`. Lab: *An MoE layer's experts*."""
    n = _validate.positive("nbytes", nbytes)
    top = _validate.count("max_copies", max_copies, maximum=4096)
    pool = _bench.CACHE_FLUSH_FACTOR * _dev.cache_bytes(device)
    return int(min(top, max(1, math.ceil(pool / n))))


def touched_copies(weights, experts, device=None, *, max_copies=256) -> list[dict]:
    """Copies of the weights one routed call reads, to cycle through: `weights` maps names
    to tensors whose first axis is the expert (`[experts, ...]`), `experts` lists the
    touched experts' indices. Each copy holds those experts alone, in that order (expert
    `experts[i]` is row i), and there are `copies_beyond_cache` of them for their bytes, so
    that a call reading the next copy reads memory, not the cache (L2 on a GPU), whatever
    the routing. (Copies of the whole layer would not do: with the routing fixed, a call
    reads only its touched experts of each copy, and those can all sit in the cache.)
    Lab: *An MoE layer's experts*."""
    ids = [int(e) for e in experts]
    _validate.ensure(len(ids) > 0, "experts must list at least one touched expert, got none")
    _validate.ensure(isinstance(weights, dict) and len(weights) > 0,
                     f"weights must be a non-empty dict of tensors, got {type(weights).__name__}")
    for name, w in weights.items():
        _validate.ensure(w.dim() >= 1 and all(0 <= e < w.shape[0] for e in ids),
                         f"weights[{name!r}] has {w.shape[0] if w.dim() else 0} experts on its "
                         f"first axis; experts={ids} is out of range")
    picked = {name: w[ids] for name, w in weights.items()}        # a copy: [len(ids), ...]
    nbytes = sum(w.numel() * w.element_size() for w in picked.values())
    n = copies_beyond_cache(nbytes, device, max_copies=max_copies)
    return [picked] + [{name: w.clone() for name, w in picked.items()} for _ in range(n - 1)]


# --- the roofline a sweep measured, and ceilings for a GPU the catalogue lacks ---------------

def measured_roofline(rows) -> dict:
    """The roofline a matmul sweep (`matmul_tflops` rows) actually drew. Lab: *fp16
    matmuls on the roofline*.

    Measured peak = the best FLOP/s of any shape; measured bandwidth = the best bytes/s
    of any shape (memory-bound shapes reach it; compute-bound ones move few bytes per
    second); measured ridge = their ratio, in FLOP/byte. Returns
    {"peak_flops", "bandwidth", "ridge"} in FLOP/s, bytes/s and FLOP/byte.
    """
    import pandas as pd

    if rows is None or isinstance(rows, (str, bytes, int, float)):
        raise TypeError(f"rows must be matmul_tflops rows (a DataFrame or list of dicts), "
                        f"got {rows!r}")
    df = pd.DataFrame(rows)
    missing = {"flops", "bytes", "seconds"} - set(df.columns)
    if missing:
        raise ValueError(f"matmul rows need columns flops, bytes, seconds; missing: "
                         f"{', '.join(sorted(missing))}")
    for col in ("flops", "bytes", "seconds"):  # NaN seconds: a shape that did not run
        values = pd.to_numeric(df[col], errors="coerce")
        bad = values.isna() & ~(df[col].isna() & (col == "seconds")) | (values < 0) \
            | np.isinf(values)
        if bad.any():
            raise ValueError(f"rows[{col!r}] must be finite numbers >= 0, got "
                             f"{df.loc[bad, col].tolist()[:3]!r}")
    df = df[(df["seconds"] > 0) & df["seconds"].notna()]
    if df.empty:
        raise ValueError("no timed matmul rows (every row has no positive seconds)")
    peak = float((df["flops"] / df["seconds"]).max())
    bandwidth = float((df["bytes"] / df["seconds"]).max())
    return {"peak_flops": peak, "bandwidth": bandwidth, "ridge": peak / bandwidth}


def _finite_positive(x) -> bool:
    return x is not None and math.isfinite(x) and x > 0


def lab_accelerator(device=None, dtype=None, *, threads=None,
                    progress=True) -> devices.Accelerator:
    """The entry the labs compare against: the device's catalogue entry, with any figure
    it lacks for `dtype` (bandwidth, dense peak) measured here, once, and labelled as
    measured in its `source` and `note`. A GPU the catalogue does not know (an RTX card,
    a MIG slice, next year's GPU) thus gets ceilings from what it does, not a crash. On
    a CPU, `threads` gives the reference CPU's ceilings for that many cores
    (`hardware.cpu(threads)`: a lab timing one thread compares with one core)."""
    device = _dev.resolve(device)
    dtype = _dtypes.canonical(dtype or _dev.default_dtype(device))
    if device.type != "cuda" and threads is not None:
        return detection.cpu(threads=threads)
    acc = _dev.accelerator_for(device)
    need_bw = not _finite_positive(acc.bandwidth)
    need_peak = not _finite_positive(_roofline.peak_or_nan(acc, dtype))
    if not (need_bw or need_peak):
        return acc
    measured, what = {}, []
    if need_bw:
        top = _bench.default_read_sizes(device)[-1]
        reads = _bench.weight_read_bandwidth([top], dtype, device, progress=False,
                                             accelerator=acc)
        measured["bandwidth"] = float(reads["achieved_gb_per_s"].max()) * 1e9
        what.append(f"bandwidth {measured['bandwidth'] / 1e9:,.1f} GB/s (a "
                    f"{top / _dev.MiB:,.0f} MiB read)")
    if need_peak:
        side = _bench.default_matmul_shapes(device)[-1]
        mm = _bench.matmul_tflops([side], dtype, device, progress=False, accelerator=acc)
        measured["peaks"] = {**acc.peaks, dtype: float(mm["achieved_tflops"].max()) * 1e12}
        what.append(f"{dtype} peak {measured['peaks'][dtype] / 1e12:,.1f} TFLOP/s (a "
                    f"{side[0]}^3 matmul)")
    note = (f"No datasheet figure in the catalogue for {acc.name} ({dtype}): measured here "
            f"on {datetime.date.today().isoformat()}: {'; '.join(what)}. Ceilings built on "
            f"them say what this GPU did, not what it could do.")
    if progress:
        print(note)
    source = "; ".join(filter(None, [acc.source, "measured by lab_measurements.lab_accelerator"]))
    return dataclasses.replace(acc, **measured, source=source, note=note)


#: The lab's matmul sweep: a [side, side] weight met by m = 1, 2, 4 ... rows, then squares.
GPU_LAB_SIDE, GPU_LAB_SQUARES = 8192, (2048, 4096, 8192, 16384)
CPU_LAB_SIDE, CPU_LAB_SQUARES = 1024, (256, 512, 1024)


def lab_matmul_shapes(device=None, *, quick=False) -> list[tuple[int, int, int]]:
    """(m, n, k) for the roofline lab: a weight [k, n] met by m = 1, 2, 4 ... rows (decode
    at batch m, from a GEMV to a square), then squares for the peak. GPU: k = n = 8192
    (fp16, 128 MiB per weight: far beyond any L2); CPU: k = n = 1024 (fp32). No shape
    is listed twice (m = 8192 on the GPU is also the 8192 square)."""
    if _dev.kind(device) == "cuda":
        side, squares = GPU_LAB_SIDE, list(GPU_LAB_SQUARES)
        ms = [2**i for i in range(0, 14, 2 if quick else 1)]
    else:
        side, squares = CPU_LAB_SIDE, list(CPU_LAB_SQUARES)
        ms = [1, 4, 16, 64, 256] if quick else [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    if quick:
        squares = squares[1:]
    shapes = [(m, side, side) for m in ms] + [(s, s, s) for s in squares]
    return list(dict.fromkeys(shapes))