"""A profiler's trace read against the per-operation roofline, and a decode step's speed
read as the throughput-vs-interactivity curve engines and public benchmarks report.
Chapter: *How to benchmark your own traffic* (section *Profiling*); lab 11.

A profiler (`torch.profiler`, Nsight Systems) times each operation of a step. The
roofline times the same operation from its FLOPs and bytes (`roofline.evaluate`):

    roofline seconds = max(bytes / bandwidth, FLOPs / peak)

so each row of a trace gets a fraction, roofline seconds / measured seconds (1: as fast
as the device allows). `operations` reads `torch.profiler`'s `key_averages(
group_by_input_shape=True)` into rows, prices the operations whose traffic follows from
their shapes (`op_cost`: the matrix products exactly; elementwise, normalisation and
reduction kernels as one read of each input and one write), and leaves the rest (views,
allocation, indexing, dispatch) unpriced: time the roofline gives nothing to.

A decode step of `step_s(B)` seconds at batch B gives each of the B users one token per
step and the GPUs B tokens:

    tokens/s per user = 1 / step_s(B)        tokens/s per GPU = B / step_s(B) / GPUs

(`curve`); `interactivity_curve` evaluates both on the achievable model and the ceiling.
"""

from __future__ import annotations

import math

import numpy as np

import torch

from gpuinfer.predict import achievable as _achievable
from gpuinfer.measure import lab_measurements
from gpuinfer.measure import spread
from gpuinfer.predict import llm as _llm
from gpuinfer.predict import roofline as _roofline
from gpuinfer import validate as _v

# --- a profiler's rows, priced ------------------------------------------------------------

#: Matrix products: FLOPs 2 m n k (x batch), bytes: both operands read, the result written
#: (and the bias read, for addmm/baddbmm). Keys are aten names; values say where the
#: operands sit among the profiler's input shapes.
MATMULS = {"aten::mm": 0, "aten::bmm": 0, "aten::addmm": 1, "aten::baddbmm": 1}
#: Out of place, one result the size of the largest input: each input read once and the
#: result written; one FLOP an element.
ELEMENTWISE = {"aten::add", "aten::sub", "aten::mul", "aten::div", "aten::silu",
               "aten::gelu", "aten::neg", "aten::exp", "aten::rsqrt", "aten::pow",
               "aten::sigmoid", "aten::tanh", "aten::_softmax", "aten::_log_softmax",
               "aten::_fused_rms_norm", "aten::native_layer_norm", "aten::where",
               "aten::masked_fill"}
#: In place (the first input is the result): each input read or written once.
IN_PLACE = {"aten::copy_", "aten::add_", "aten::mul_", "aten::div_", "aten::masked_fill_"}
#: Reductions: the inputs read once, the (small) result not counted.
REDUCTIONS = {"aten::sum", "aten::mean", "aten::amax", "aten::max"}


def _numel(shape) -> int:
    return int(np.prod(shape)) if len(shape) else 0


def op_cost(name, shapes, element_bytes):
    """(FLOPs, bytes) of one call of the aten operation `name` on inputs of `shapes` (the
    profiler's `input_shapes`: a list of shapes, [] for a scalar), every tensor at
    `element_bytes` bytes an element; (NaN, NaN) for an operation this table does not
    price (views, allocation, indexing, composite operations whose work is their
    children's, and any operation whose tensor shapes the profiler did not record, such
    as a list of tensors)."""
    e = _v.positive("element_bytes", element_bytes)
    shapes = [list(s) if s is not None else [] for s in shapes]
    if name in MATMULS:
        a, b = shapes[MATMULS[name]:MATMULS[name] + 2]
        *batch, m, k = a
        n = b[-1]
        _v.ensure(b[-2] == k, f"{name}: inner dimensions differ in shapes={shapes}")
        lots = _numel(batch) if batch else 1
        bias = _numel(shapes[0]) if MATMULS[name] else 0
        return 2.0 * lots * m * n * k, float(e * (lots * (m * k + k * n + m * n) + bias))
    sizes = [_numel(s) for s in shapes]
    if not any(sizes):
        return math.nan, math.nan      # no tensor shape recorded (a list input): unknown
    if name in ELEMENTWISE:
        return float(max(sizes, default=0)), float(e * (sum(sizes) + max(sizes, default=0)))
    if name in IN_PLACE:
        return float(sizes[0] if sizes else 0), float(e * sum(sizes))
    if name in REDUCTIONS:
        return float(sum(sizes)), float(e * sum(sizes))
    return math.nan, math.nan


def operations(averages, *, element_bytes, steps=1, on_device=False):
    """The rows of a `torch.profiler` run as a DataFrame, one per (operation, input
    shapes): `averages` is `prof.key_averages(group_by_input_shape=True)` (anything
    whose items have `key`, `input_shapes`, `count` and `self_cpu_time_total` or
    `self_device_time_total`, in microseconds) over `steps` identical steps. Columns:
    `op`, `shapes`, `calls` and `seconds` (self time: a parent's time less its
    children's, so no time counts twice) per step, and `flops`, `bytes` per step
    (`op_cost`; NaN where unpriced). `on_device`: the kernels' time on the GPU
    instead of the host's, each kernel counted in the operation that launched it (the
    kernels' own rows are skipped). Sorted by seconds, largest first."""
    import pandas as pd

    n = _v.count("steps", steps)
    attr = "self_device_time_total" if on_device else "self_cpu_time_total"
    rows = []
    for ev in averages:
        if not str(getattr(ev, "device_type", "CPU")).endswith("CPU"):
            continue    # a GPU kernel's own row: its time is in the operation that launched it
        shapes = [list(s) for s in (getattr(ev, "input_shapes", None) or [])]
        flops, nbytes = op_cost(ev.key, shapes, element_bytes)
        calls = ev.count / n
        rows.append({"op": ev.key, "shapes": str(shapes), "calls": calls,
                     "seconds": float(getattr(ev, attr)) * 1e-6 / n,
                     "flops": flops * calls, "bytes": nbytes * calls})
    table = pd.DataFrame(rows, columns=["op", "shapes", "calls", "seconds", "flops", "bytes"])
    table.index = table["op"] + " " + table["shapes"]
    table = table.groupby(level=0, sort=False).agg(   # one row per (op, shapes)
        op=("op", "first"), shapes=("shapes", "first"), calls=("calls", "sum"),
        seconds=("seconds", "sum"), flops=("flops", lambda x: x.sum(min_count=1)),
        bytes=("bytes", lambda x: x.sum(min_count=1)))
    return table.sort_values("seconds", ascending=False)


def pooled(tables):
    """Several runs' `operations` tables (one profiled step each) as one: each row's
    median `seconds` and its `spread`, (max - min) / median over the runs (a row absent
    from a run counts 0 there). `attrs["total_s"]` and `attrs["priced_s"]` list each
    run's total seconds and the seconds of its priced rows."""
    import pandas as pd

    _v.ensure(len(tables) >= 1, "tables must hold at least one operations table", TypeError)
    wide = pd.concat([t["seconds"] for t in tables], axis=1).fillna(0.0)   # [row, run]
    med = wide.median(axis=1)
    meta = pd.concat([t.drop(columns="seconds") for t in tables])
    out = meta[~meta.index.duplicated()].reindex(wide.index)
    out["seconds"] = med
    if len(tables) > 1:
        with np.errstate(invalid="ignore", divide="ignore"):
            out["spread"] = np.where(med > 0, (wide.max(axis=1) - wide.min(axis=1)) / med,
                                     math.inf)
    else:
        out["spread"] = math.inf                  # one run: no spread to show
    out.attrs["total_s"] = [float(t["seconds"].sum()) for t in tables]
    out.attrs["priced_s"] = [float(t.loc[t["bytes"].notna(), "seconds"].sum()) for t in tables]
    return out.sort_values("seconds", ascending=False)


def against_roofline(table, accelerator, dtype):
    """An `operations` (or `pooled`) table with each priced row on `accelerator`'s
    roofline in `dtype`: `roofline_s` (`roofline.evaluate`'s seconds; NaN unpriced),
    `bound`, `of_roofline` = roofline_s / seconds (1: as fast as the datasheet allows;
    above 1: faster than the roofline, so a cache served it or the entry is not this
    device's) and `share`, each row's fraction of the measured seconds."""
    out = table.copy()
    priced = out["bytes"].notna()
    out["roofline_s"], out["bound"] = math.nan, "unpriced"
    if priced.any():
        ops = out.loc[priced, ["flops", "bytes"]].assign(dtype=dtype)
        ev = _roofline.evaluate(ops, accelerator)
        out.loc[priced, "roofline_s"] = ev["seconds"]
        out.loc[priced, "bound"] = ev["bound"]
    with np.errstate(invalid="ignore", divide="ignore"):
        out["of_roofline"] = out["roofline_s"] / out["seconds"]
    total = out["seconds"].sum()
    out["share"] = out["seconds"] / total if total > 0 else math.nan
    return out


def profile_steps(step, n, *, element_bytes, on_gpu):
    """Run `step` (a no-argument callable: one decode step) once to warm up, then `n`
    times, each under its own `torch.profiler` profile recording shapes (the device's
    kernels too on a GPU, waited for before the profile closes), and return the runs'
    `operations` tables `pooled` (the device's time on a GPU, the host's on a CPU)."""

    _v.ensure(callable(step), f"step must be a callable that runs one step, got {step!r}",
              TypeError)
    n = _v.count("n", n, maximum=1000, why_maximum="each run is a separate profile")
    activities = [torch.profiler.ProfilerActivity.CPU]
    if on_gpu:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    step()                                       # warm-up, outside the profiles
    runs = []
    for _ in range(n):
        with torch.profiler.profile(activities=activities, record_shapes=True) as prof:
            step()
            if on_gpu:
                torch.cuda.synchronize()
        runs.append(operations(prof.key_averages(group_by_input_shape=True),
                               element_bytes=element_bytes, on_device=on_gpu))
    return pooled(runs)


def top(table, n=8):
    """The `n` longest rows of an `against_roofline` table as a lab shows them: calls,
    measured and roofline microseconds, the fraction of the roofline, the share of the
    step, the runs' spread and the bound, each row named by its operation and the start
    of its shapes."""
    import pandas as pd

    t = table.head(_v.count("n", n))
    shown = pd.DataFrame({"calls": t["calls"], "measured us": 1e6 * t["seconds"],
                          "roofline us": 1e6 * t["roofline_s"], "of roofline": t["of_roofline"],
                          "share": t["share"], "spread": t["spread"], "bound": t["bound"]})
    shown.index = t.index.str.slice(0, 48)
    return shown


def verdict(table, *, on_gpu) -> str:
    """What a profiled step (`against_roofline` of a `pooled` table of several runs)
    says: whether the priced operations hold most of the step, and how close its
    largest operation came to its roofline, each stated only where `lab_verdicts.compare`
    orders the numbers beyond their spread across the runs."""
    total = np.array(table.attrs["total_s"], dtype=float)
    if not (total > 0).all():
        return "No operation was timed in at least one run: profile a step that runs."
    share = spread.Spread.of(np.array(table.attrs["priced_s"], dtype=float) / total)
    said = []
    where = "kernel" if on_gpu else "profiled"
    order = spread.compare(share, spread.Spread(0.5, 0.0))
    if order == "larger":
        said.append(f"{share.median:.0%} of the {where} time is in operations the roofline "
                    "prices (matrix products, elementwise kernels): the step is priced by "
                    "its work.")
    elif order == "smaller":
        said.append(f"Only {share.median:.0%} of the {where} time is in operations the "
                    "roofline prices; the rest is views, indexing, allocation and dispatch, "
                    "time the roofline gives nothing to: the step is overhead-bound "
                    + ("(fewer, larger kernels: CUDA graphs, a compiler)." if on_gpu
                       else "(fewer, larger operations)."))
    else:
        said.append(spread.inconclusive("the priced share of the step", share.spread))
    priced = table[table["roofline_s"].notna() & (table["seconds"] > 0)]
    if not len(priced):
        return " ".join(said + ["No priced operation was timed."])
    top = priced.iloc[0]
    frac = spread.Spread(float(top["of_roofline"]), float(top["spread"]))
    name = f"{top['op']} {top['shapes']}"
    if spread.compare(frac, spread.Spread(1.0, 0.0)) == "larger":
        said.append(f"The largest priced operation, {name}, ran {frac.median:.2f}x its "
                    "roofline speed: faster than memory allows, so a cache served its "
                    "operands, or the catalogue entry is not this device's.")
    elif spread.compare(frac, spread.Spread(lab_measurements.GOOD_STREAM, 0.0)) == "smaller":
        said.append(f"The largest priced operation, {name}, reached {frac.median:.2f} of "
                    f"its roofline ({top['bound']}-bound), below the "
                    f"{lab_measurements.GOOD_STREAM:.0%} a large read reaches: the kernel, not the "
                    "memory, sets its time.")
    elif spread.compare(frac, spread.Spread(lab_measurements.GOOD_STREAM, 0.0)) == "larger":
        said.append(f"The largest priced operation, {name}, reached {frac.median:.2f} of "
                    f"its roofline ({top['bound']}-bound): it runs close to what the "
                    "device allows.")
    else:
        said.append(spread.inconclusive(f"the fraction of its roofline {top['op']} reached",
                                     frac.spread))
    return " ".join(said)


# --- throughput against interactivity -------------------------------------------------------

def curve(step_s, batches, n_devices=1):
    """The throughput-vs-interactivity curve of a decode step that takes `step_s(B)`
    seconds at batch B (a function) on `n_devices` GPUs: a DataFrame indexed by batch with
    `step_s` (each user's time per output token), `tokens_per_s_per_user` =
    1 / step_s and `tokens_per_s_per_gpu` = B / step_s / n_gpus."""
    import pandas as pd

    g = _v.count("n_devices", n_devices, maximum=1 << 20)
    b = [_v.count("batches", x, maximum=1 << 24) for x in np.atleast_1d(batches)]
    s = np.array([_v.positive("step_s(batch)", step_s(x)) for x in b], dtype=float)
    return pd.DataFrame({"step_s": s, "tokens_per_s_per_user": 1 / s,
                         "tokens_per_s_per_gpu": np.array(b) / s / g},
                        index=pd.Index(b, name="batch"))


def interactivity_curve(model, accelerator, batches, context=0, dtype="fp16", *,
                        kv_dtype=None, compute_dtype=None):
    """`curve` for a catalogue model decoding on one `accelerator`, every sequence at
    `context` cached tokens: the achievable model's columns (`achievable.decode_step_s`)
    and the ceiling's beside, prefixed `ceiling_` (`llm.decode_step_s`), one row per
    distinct batch in increasing order. Batches that do not fit in memory
    (`llm.max_batch`) are left out."""
    kw = dict(kv_dtype=kv_dtype, compute_dtype=compute_dtype)
    fits = _llm.max_batch(_achievable.model(model), accelerator, context, dtype,
                          kv_dtype=kv_dtype)
    kept = sorted({int(b) for b in np.atleast_1d(batches) if b <= fits})
    _v.ensure(kept, f"no batch in batches={list(batches)} fits: at context={context} at "
              f"most {fits} sequences fit on {accelerator}")
    ach = curve(lambda b: _achievable.decode_step_s(model, accelerator, b, context, dtype,
                                                    **kw), kept)
    ceil = curve(lambda b: float(_llm.decode_step_s(_achievable.model(model), accelerator, b,
                                                    context, dtype, **kw)), kept)
    return ach.join(ceil.add_prefix("ceiling_"))


def best_within(table, tpot_s, column="step_s"):
    """The row of a `curve` with the most tokens/s per GPU among those whose `column`
    (default `step_s`, the time per output token) is at most `tpot_s`; a KeyError naming
    the objective when no row meets it."""
    limit = _v.positive("tpot_s", tpot_s)
    ok = table[table[column] <= limit]
    if not len(ok):
        raise KeyError(f"no batch meets {column} <= {limit:g} s (fastest "
                       f"{table[column].min():g} s)")
    per_gpu = "ceiling_tokens_per_s_per_gpu" if column.startswith("ceiling_") \
        else "tokens_per_s_per_gpu"
    return ok.loc[ok[per_gpu].idxmax()]


#: MLPerf Inference's latency objectives for its LLM benchmarks (TTFT, TPOT in seconds),
#: met at the 99th percentile while LoadGen sends Poisson traffic; the result is the
#: highest rate that meets them (mlcommons/inference_policies, inference_rules.adoc,
#: commit ac93e89, 2026-07-23). "server" is the conversational category.
MLPERF_LLM_OBJECTIVES = {
    ("llama3.1-8b", "server"): (2.0, 0.100), ("llama3.1-8b", "interactive"): (0.5, 0.030),
    ("llama2-70b", "server"): (2.0, 0.200), ("llama2-70b", "interactive"): (0.45, 0.040),
    ("llama3.1-405b", "server"): (6.0, 0.175), ("llama3.1-405b", "interactive"): (4.5, 0.080),
}
