"""Reference runs: measured results from known machines, in one tidy CSV schema, so a
reader without a GPU (or of the website, built on a CPU) still sees real numbers.
Labs: all of them; command: `python -m gpuinfer bench`.

A run is one CSV: one row per measurement, every row carrying the machine that made it
(device, catalogue entry, device type, torch, CUDA, date) and the measurement beside
its ceiling:

    experiment   weight_read | matmul | decode | quantised
    value        the achieved rate, in `unit` (B/s, FLOP/s or tokens/s; SI units)
    ceiling      what the package predicts for that device and shape, same unit
    fraction_of_ceiling = value / ceiling

Reference files live in `gpuinfer/data/reference/`, one per machine. A CPU run is
labelled as a CPU everywhere (`label`), never as a GPU result. `PUBLISHED` holds the
measured figures other people published (cited), for devices with no reference run.
"""

from __future__ import annotations

import math
import pathlib
import re
from typing import TYPE_CHECKING

from gpuinfer import dtypes as _dtypes
from gpuinfer import hardware as _hardware
from gpuinfer.hardware import devices as _devices
from gpuinfer.predict import llm as _llm
from gpuinfer.predict import architectures
from gpuinfer import validate as _validate

if TYPE_CHECKING:  # pandas is imported where a table is built, not at import time
    import pandas

DIRECTORY = pathlib.Path(__file__).parents[1] / "data" / "reference"

ENV_COLUMNS = ["device", "catalogue_entry", "device_type", "torch", "cuda", "date",
               "cpu_threads", "gpuinfer"]
#: The GPU's state when the rows were measured (`bench.clocks`): NaN on a CPU, and in runs
#: written before these columns existed.
CLOCK_COLUMNS = ["sm_clock_mhz", "sm_clock_max_mhz", "memory_clock_mhz", "power_limit_w",
                 "power_draw_w", "temperature_c", "throttle_reasons", "nvml"]
ROW_COLUMNS = ["experiment", "label", "dtype", "weight_format", "kernel", "model", "m",
               "n", "k", "batch", "context", "bytes", "flops", "intensity", "cuda_graph",
               "seconds", "value", "unit", "ceiling", "fraction_of_ceiling"]
COLUMNS = ENV_COLUMNS + ROW_COLUMNS + CLOCK_COLUMNS
#: Each experiment's unit of `value` and `ceiling`.
UNITS = {"weight_read": "B/s", "matmul": "FLOP/s", "decode": "tokens/s",
         "quantised": "tokens/s"}


# --- from bench rows to the tidy schema --------------------------------------------------------

def tidy(rows, experiment, env) -> "pandas.DataFrame":
    """`bench` rows (a DataFrame or list of dicts) of one `experiment` as tidy rows with
    `env` (`bench.environment()`) on each. weight_read rows come from
    `bench.weight_read_bandwidth`, matmul from `bench.matmul_tflops`, decode and
    quantised from `decoding.DecodeStack.measure` / `sweep`."""
    import pandas as pd

    experiment = _validate.choice("experiment", experiment, UNITS)
    if not isinstance(env, dict):
        raise TypeError(f"env must be the dict bench.environment() returns, got {env!r}")
    missing = [c for c in ENV_COLUMNS if c not in ("gpuinfer", "cpu_threads") and c not in env]
    if missing:
        raise ValueError(f"env lacks {', '.join(missing)}: pass bench.environment()")
    _known_device(env["catalogue_entry"], env["device"], "env['catalogue_entry']")
    df = pd.DataFrame(rows)
    if df.empty:
        return pd.DataFrame(columns=COLUMNS)
    out = pd.DataFrame(index=df.index)
    if experiment == "weight_read":
        need = ["dtype", "bytes", "seconds", "achieved_gb_per_s"]
        _need(df, need, experiment)
        out["bytes"] = df["bytes"]
        out["value"] = df["achieved_gb_per_s"] * 1e9
        # The datasheet bandwidth the rows were measured against; rows from before that
        # column existed take it from the catalogue (NaN for a GPU it does not know).
        out["ceiling"] = (df["datasheet_gb_per_s"] * 1e9 if "datasheet_gb_per_s" in df
                          else _catalogue_bandwidth(env["catalogue_entry"]))
        out["label"] = [f"read {b / 1e6:,.1f} MB" for b in df["bytes"]]
    elif experiment == "matmul":
        need = ["dtype", "m", "n", "k", "flops", "bytes", "intensity", "seconds",
                "achieved_tflops", "roofline_tflops"]
        _need(df, need, experiment)
        for c in ("m", "n", "k", "flops", "bytes", "intensity"):
            out[c] = df[c]
        out["value"] = df["achieved_tflops"] * 1e12
        out["ceiling"] = df["roofline_tflops"] * 1e12
        out["label"] = [f"[{m}x{k}]@[{k}x{n}]" for m, n, k in zip(df["m"], df["n"], df["k"])]
    else:
        need = ["dtype", "weight_format", "kernel", "model", "batch", "context",
                "step_bytes", "step_flops", "cuda_graph", "seconds", "tokens_per_s",
                "ceiling_tokens_per_s"]
        _need(df, need, experiment)
        for c in ("weight_format", "kernel", "model", "batch", "context", "cuda_graph"):
            out[c] = df[c]
        out["bytes"], out["flops"] = df["step_bytes"], df["step_flops"]
        out["intensity"] = df["step_flops"] / df["step_bytes"]
        out["value"] = df["tokens_per_s"]
        out["ceiling"] = df["ceiling_tokens_per_s"]
        out["label"] = [f"{k} batch {b} context {c}"
                        for k, b, c in zip(df["kernel"], df["batch"], df["context"])]
    out["dtype"] = df["dtype"]
    out["seconds"] = _seconds_column(df["seconds"], f"{experiment} rows' seconds")
    out["experiment"] = experiment
    out["unit"] = UNITS[experiment]
    out["fraction_of_ceiling"] = out["value"] / out["ceiling"]
    from gpuinfer import __version__

    for c in ENV_COLUMNS:
        out[c] = env.get(c, {"gpuinfer": __version__, "cpu_threads": math.nan}.get(c, ""))
    for c in CLOCK_COLUMNS:
        out[c] = env.get(c, math.nan)
    return out.reindex(columns=COLUMNS)


def _catalogue_bandwidth(entry) -> float:
    try:
        return _hardware.get(entry).bandwidth
    except KeyError:
        return math.nan


def _known_device(entry, device, where):
    """ValueError unless a run's `catalogue_entry` names a device: a catalogue row or MIG
    slice (`hardware.get`), or a GPU the catalogue does not know under the very name
    torch reports for it (`device`: what `bench.environment` records then, its
    estimate's name). A made-up entry would give rows no ceiling to stand beside."""
    if isinstance(entry, str) and isinstance(device, str) and entry == device and entry:
        return
    try:
        _hardware.get(entry)
    except (KeyError, TypeError) as e:
        raise ValueError(f"{where}: {e.args[0] if e.args else e}") from None


def _seconds_column(values, where):
    """Measured seconds: finite and >= 0 (NaN or a negative time is a broken run)."""
    import numpy as np

    t = np.asarray(values, dtype=float)
    bad = ~np.isfinite(t) | (t < 0)
    if bad.any():
        raise ValueError(f"{where} must be finite times >= 0 (s); got {t[bad][0]!r} "
                         f"in row {int(np.flatnonzero(bad)[0])}")
    return values


def _need(df, columns, experiment):
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{experiment} rows lack the column(s) {', '.join(missing)}")


# --- files ----------------------------------------------------------------------------------------

def save(df, path) -> pathlib.Path:
    """Write tidy rows to `path` (CSV), after checking them against the schema."""
    path = _path(path)
    df = _check_run(df, str(path))
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(path, index=False)
    return path


def load(path) -> "pandas.DataFrame":
    """Read a run written by `save` (or `python -m gpuinfer bench`), checking its
    columns and experiments. Raises ValueError naming what is wrong."""
    import pandas as pd

    path = _path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no reference run at {path}")
    try:
        df = pd.read_csv(path, dtype={"cuda": str, "torch": str, "date": str, "gpuinfer": str,
                                      "throttle_reasons": str, "nvml": str})
    except pd.errors.EmptyDataError:
        raise ValueError(f"{path}: the file is empty, not a gpuinfer run") from None
    return _check_run(df, str(path))


def _path(path) -> pathlib.Path:
    if not isinstance(path, (str, pathlib.PurePath)) or not str(path).strip():
        raise TypeError(f"path must be a file path (str or pathlib.Path), got {path!r}")
    return pathlib.Path(path)


def _check_run(df, where):
    import pandas as pd

    if not hasattr(df, "columns") and not isinstance(df, (list, dict)):
        raise TypeError(f"{where}: a run is a DataFrame of tidy rows, got {type(df).__name__}")
    df = pd.DataFrame(df).copy()
    for c in CLOCK_COLUMNS:  # runs written before the clocks were recorded
        if c not in df.columns:
            df[c] = math.nan
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{where}: not a gpuinfer run: missing column(s) {', '.join(missing)}")
    if df.empty:
        raise ValueError(f"{where}: the run has no rows")
    bad = sorted(set(df["experiment"]) - set(UNITS))
    if bad:
        raise ValueError(f"{where}: unknown experiment(s) {', '.join(map(str, bad))}; "
                         f"known: {', '.join(UNITS)}")
    types = set(df["device_type"])
    if not types <= {"cuda", "cpu"}:
        raise ValueError(f"{where}: device_type must be 'cuda' or 'cpu', got {sorted(types)}")
    for entry, device in set(zip(df["catalogue_entry"], df["device"])):
        _known_device(entry, device, f"{where}: catalogue_entry")
    for c in [c for c in df.columns if str(c).endswith("seconds")]:
        _seconds_column(df[c], f"{where}: column {c!r}")
    df = df[COLUMNS].copy()
    df["cuda"] = df["cuda"].fillna("").astype(str)
    df["cuda_graph"] = df["cuda_graph"].map(
        lambda v: v if isinstance(v, bool) else str(v).lower() == "true" if v == v else False)
    return df


def default_filename(env) -> str:
    """The file name of a run: the catalogue entry for a GPU ('h200.csv'); 'cpu-' and
    the processor for a CPU ('cpu-x86-64.csv'), so a CPU run never takes a GPU's name."""
    if not isinstance(env, dict) or not {"device_type", "device", "catalogue_entry"} <= set(env):
        raise TypeError("env must be the dict bench.environment() returns (device, "
                        f"catalogue_entry, device_type), got {env!r}")

    def slug(text):
        return re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")

    if env["device_type"] == "cpu":
        return f"cpu-{slug(env['device'])}.csv"
    return f"{slug(env['catalogue_entry'])}.csv"


def files(directory=None) -> list[pathlib.Path]:
    """The reference runs shipped with the package (or in `directory`)."""
    return sorted((DIRECTORY if directory is None else _path(directory)).glob("*.csv"))


def label(run) -> str:
    """How a run is named in every table and legend: a CPU run says it is a CPU."""
    if hasattr(run, "iloc") and len(run) == 0:
        raise ValueError("run has no rows to name")
    first = run.iloc[0] if hasattr(run, "iloc") else run
    if not hasattr(first, "get") or not {"device_type", "device", "date"} <= set(first.keys()):
        raise TypeError(f"run must be a run's rows (reference.load) or one row, got {run!r}")
    if first["device_type"] == "cpu":
        threads = first.get("cpu_threads")
        cores = f", {int(threads)} thread{'s' if threads != 1 else ''}" if threads == threads else ""
        return f"CPU {first['device']} ({first['date']}{cores}; a CPU, not a GPU)"
    return f"{first['catalogue_entry']} ({first['date']}, torch {first['torch']})"


def available(directory=None) -> "pandas.DataFrame":
    """One row per reference run: file, label, device, catalogue entry, device type,
    date, torch, and how many rows of each experiment it holds."""
    import pandas as pd

    rows = []
    for path in files(directory):
        df = load(path)
        first = df.iloc[0]
        counts = df["experiment"].value_counts()
        rows.append({"file": path.name, "label": label(df), "device": first["device"],
                     "catalogue_entry": first["catalogue_entry"],
                     "device_type": first["device_type"], "date": first["date"],
                     "torch": first["torch"],
                     **{e: int(counts.get(e, 0)) for e in UNITS}})
    return pd.DataFrame(rows, columns=["file", "label", "device", "catalogue_entry",
                                       "device_type", "date", "torch", *UNITS])


def runs(experiment=None, device_type=None, directory=None) -> "pandas.DataFrame":
    """Every reference run's rows (optionally one `experiment`, one `device_type`:
    'cuda' or 'cpu'), with `run` (the label) and `file` columns added."""
    import pandas as pd

    if experiment is not None:
        experiment = _validate.choice("experiment", experiment, UNITS)
    if device_type is not None:
        device_type = _validate.choice("device_type", device_type, ("cuda", "cpu"))
    frames = []
    for path in files(directory):
        df = load(path)
        df["run"], df["file"] = label(df), path.name
        frames.append(df)
    if not frames:
        return pd.DataFrame(columns=COLUMNS + ["run", "file"])
    df = pd.concat(frames, ignore_index=True)
    if experiment is not None:
        df = df[df["experiment"] == experiment]
    if device_type is not None:
        df = df[df["device_type"] == device_type]
    return df.reset_index(drop=True)


# --- published measurements ------------------------------------------------------------------------

#: gpt-fast's published tokens/s: Llama-2-7B, batch 1, A100-80GB power-limited to 330 W,
#: bf16 activations, by weight format (gptfast2023, README). Chapters read them from here.
GPT_FAST_TOKENS_PER_S = {"bf16": 104.9, "int8": 155.6, "int4": 196.8}
#: gpt-fast's weight formats, by the names `llm` gives their bytes: its bf16 run has fp16's
#: bytes (2 a weight); its int4 is counted as the package's `int4` (0.5625 B a weight).
GPT_FAST_FORMATS = {"bf16": "bf16", "fp16": "bf16", "int8": "int8", "int4": "int4"}


def gpt_fast_fraction(weight_format="bf16") -> float:
    """The fraction of its per-operation decode ceiling (`llm.decode_ceiling`, batch 1,
    empty cache) that gpt-fast's published tokens/s (`GPT_FAST_TOKENS_PER_S`) reached
    for Llama-2-7B on its A100-80GB, for one weight format: 'bf16' (or 'fp16', the same
    bytes), 'int8' or 'int4'. A fraction (0.68, not 68%): `llm.mbu` of the figure.

    Each format has its own: unpacking and scaling quantised weights costs time, so
    int8 (about 0.50) and int4 (about 0.36) reach less of their ceilings than bf16
    (about 0.68). int4's ceiling is the package's `int4` (an fp16 scale per 32 weights,
    0.5625 bytes a weight, `GPT_FAST_FORMATS`); gpt-fast's int4 also stores a zero point
    per group (`int4-g32-zp`, 0.625 bytes), against whose ceiling the same run is about
    0.40. A format's fraction times its ceiling on the A100 gives back gpt-fast's
    tokens/s for that format; carried to another GPU it is a shortcut, not a prediction
    (`achievable.fraction_of_ceiling` gives each GPU its own)."""
    fmt = GPT_FAST_FORMATS[_validate.choice("weight_format", weight_format, GPT_FAST_FORMATS)]
    return _llm.mbu("llama-2-7b", "A100 80GB", GPT_FAST_TOKENS_PER_S[fmt], dtype=fmt)

#: Measured figures other people published, for devices with no reference run here.
#: value in SI units; `source` is the course's references.bib key.
_MAMF_BF16 = _devices.MAMF_TFLOPS["bf16"]
PUBLISHED = [
    # Maximum achievable matmul FLOP/s (MAMF): bf16, best shape found by a search; the
    # figures live in hardware.devices (MAMF_TFLOPS), as the catalogue entries read them.
    {"experiment": "matmul", "catalogue_entry": "A100 80GB", "dtype": "bf16",
     "value": _MAMF_BF16["NVIDIA A100 SXM"] * 1e12,
     "what": "MAMF, A100 SXM", "source": "bekman2024mlengineering"},
    {"experiment": "matmul", "catalogue_entry": "H100 SXM", "dtype": "bf16",
     "value": _MAMF_BF16["NVIDIA H100 SXM"] * 1e12,
     "what": "MAMF, H100 SXM", "source": "bekman2024mlengineering"},
    {"experiment": "matmul", "catalogue_entry": "B200", "dtype": "bf16",
     "value": _MAMF_BF16["NVIDIA B200 SXM"] * 1e12,
     "what": "MAMF, B200", "source": "bekman2024mlengineering"},
    {"experiment": "matmul", "catalogue_entry": "MI300X", "dtype": "bf16",
     "value": _MAMF_BF16["AMD MI300X"] * 1e12,
     "what": "MAMF, MI300X", "source": "bekman2024mlengineering"},
    # gpt-fast, Llama-2-7B, batch 1, A100-80GB power-limited to 330 W.
    {"experiment": "decode", "catalogue_entry": "A100 80GB", "dtype": "bf16",
     "weight_format": "bf16", "model": "llama-2-7b", "batch": 1,
     "value": GPT_FAST_TOKENS_PER_S["bf16"],
     "what": "gpt-fast, torch.compile", "source": "gptfast2023"},  # the README's current figure
    # The PyTorch team's post on gpt-fast (same model, batch and power-limited A100):
    # "Starting Point" eager, then "Step 1" torch.compile(mode="reduce-overhead") with a
    # static KV cache.
    {"experiment": "decode", "catalogue_entry": "A100 80GB", "dtype": "bf16",
     "weight_format": "bf16", "model": "llama-2-7b", "batch": 1, "value": 25.5,
     "what": "gpt-fast, eager (no compilation)", "source": "pytorch2023gptfastblog"},
    {"experiment": "decode", "catalogue_entry": "A100 80GB", "dtype": "bf16",
     "weight_format": "bf16", "model": "llama-2-7b", "batch": 1, "value": 107.0,
     "what": "gpt-fast blog, torch.compile and a static KV cache",
     "source": "pytorch2023gptfastblog"},
    {"experiment": "quantised", "catalogue_entry": "A100 80GB", "dtype": "bf16",
     "weight_format": "int8", "model": "llama-2-7b", "batch": 1,
     "value": GPT_FAST_TOKENS_PER_S["int8"],
     "what": "gpt-fast int8 weights", "source": "gptfast2023"},
    {"experiment": "quantised", "catalogue_entry": "A100 80GB", "dtype": "bf16",
     "weight_format": "int4-g32-zp", "model": "llama-2-7b", "batch": 1,
     "value": GPT_FAST_TOKENS_PER_S["int4"],
     "what": "gpt-fast int4 weights (groups of 32, a bf16 scale and zero point each)",
     "source": "gptfast2023"},
]


def published(experiment=None) -> "pandas.DataFrame":
    """`PUBLISHED` as a DataFrame, each figure beside the package's ceiling for its
    device (dense datasheet peak for matmuls; `llm.weight_read_ceiling` for decode: the
    whole model's weights, batch 1) and the fraction reached."""
    import pandas as pd

    if experiment is not None:
        experiment = _validate.choice("experiment", experiment, UNITS)
    rows = []
    for p in PUBLISHED:
        if experiment is not None and p["experiment"] != experiment:
            continue
        acc = _hardware.get(p["catalogue_entry"])
        if p["experiment"] == "matmul":
            ceiling = acc.peak_flops(p["dtype"])
        else:
            ceiling = _llm.weight_read_ceiling(
                architectures.get(p["model"]).n_params,
                _dtypes.bytes_per_element(p["weight_format"]), acc.bandwidth, p["batch"])
        rows.append({**p, "unit": UNITS[p["experiment"]], "ceiling": ceiling,
                     "fraction_of_ceiling": p["value"] / ceiling})
    return pd.DataFrame(rows)


def engine_measurements(split=None) -> "pandas.DataFrame":
    """Published serving-engine measurements (TensorRT-LLM's performance overview,
    gpt-fast): the table the achievable model is calibrated on and the ceiling is
    checked against, one cited row per figure. See `gpuinfer.predict.calibration.measurements`
    (`split`: "train" or "heldout") and `calibration.errors` for predicted against
    measured."""
    from gpuinfer.predict import calibration as _calibration

    return _calibration.measurements(split)


def speedup(run, baseline_kernel="dense") -> "pandas.DataFrame":
    """Quantised rows of a run beside its dense row at the same batch and context:
    measured speed-up and the bytes ratio (dense step bytes / quantised step bytes)."""
    import pandas as pd

    if not hasattr(run, "columns"):
        raise TypeError(f"run must be a DataFrame of tidy rows (reference.load, tidy), "
                        f"got {type(run).__name__}")
    df = pd.DataFrame(run)
    _need(df, ["experiment", "kernel", "batch", "context", "seconds", "bytes"], "run")
    df = df[df["experiment"] == "quantised"]
    if df.empty:
        raise ValueError("the run has no quantised rows")
    out = []
    for (batch, context), g in df.groupby(["batch", "context"]):
        base = g[g["kernel"] == baseline_kernel]
        if base.empty:
            raise ValueError(f"no {baseline_kernel} row at batch {batch}, context {context}")
        b = base.iloc[0]
        for _, r in g.iterrows():
            out.append({"kernel": r["kernel"], "weight_format": r["weight_format"],
                        "batch": batch, "context": context, "seconds": r["seconds"],
                        "speedup": b["seconds"] / r["seconds"] if r["seconds"] > 0 else math.nan,
                        "bytes_ratio": b["bytes"] / r["bytes"]})
    return pd.DataFrame(out)


# --- the workshop's results sheet -----------------------------------------------------------

#: The columns of the room's results sheet (workshop/results_sheet): one row per pair per lab.
SHEET_COLUMNS = ["pair", "lab", "device", "catalogue_entry", "torch", "date", "what",
                 "value", "unit", "fraction_of_ceiling"]


def results_row(lab, what, value, unit, fraction=None, *, pair="", device=None) -> str:
    """One CSV line for the workshop's shared results sheet (`SHEET_COLUMNS`): this
    machine (`bench.environment`), one measured number with its unit, and its fraction
    of the ceiling the lab compared it with (None when the lab has no ceiling). A learner
    runs it at the end of a lab and pastes the line it returns."""
    import csv
    import io

    from gpuinfer.measure import environment

    lab = _validate.count("lab", lab, maximum=99)
    if not isinstance(what, str) or not isinstance(unit, str):
        raise TypeError(f"what and unit must be strings, got {what!r} and {unit!r}")
    value = _validate.number("value", value)
    frac = None if fraction is None else _validate.non_negative("fraction", fraction)
    env = environment.environment(device)
    line = io.StringIO()
    csv.writer(line).writerow([pair, lab, env["device"], env["catalogue_entry"], env["torch"],
                               env["date"], what, f"{value:.4g}", unit,
                               "" if frac is None else f"{frac:.3f}"])
    return line.getvalue().strip()


def reference_rows(directory=None) -> "pandas.DataFrame":
    """The shipped reference runs as the rows labs 1-4 would paste into the results sheet
    (one a lab and run): the largest flushed read, the best square matmul, the batch-1
    decode step, the fastest quantised kernel. What a room's sheet looks like before the
    room has filled it."""
    import pandas as pd

    rows = []
    for _, r in runs(directory=directory).groupby("run"):
        reads = r[r.experiment == "weight_read"].sort_values("bytes")
        squares = r[(r.experiment == "matmul") & (r.m == r.n) & (r.n == r.k)]
        decode = r[(r.experiment == "decode") & (r.batch == 1) & ~r.cuda_graph.astype(bool)]
        quantised = r[r.experiment == "quantised"]
        quant = speedup(quantised).merge(quantised[["kernel", "fraction_of_ceiling"]],
                                         on="kernel")
        quant = quant[quant.kernel != "dense"].sort_values("speedup")
        picks = [(1, "largest flushed read", reads.iloc[-1:], "value", 1e-9, "GB/s"),
                 (2, "best square matmul", squares.sort_values("value").iloc[-1:], "value",
                  1e-12, "TFLOP/s"),
                 (3, "batch-1 decode step", decode, "value", 1, "tokens/s"),
                 (4, "fastest quantised kernel", quant.iloc[-1:], "speedup", 1, "x")]
        for lab, what, pick, column, scale, unit in picks:
            for _, p in pick.iterrows():
                rows.append({"pair": "reference", "lab": lab, "device": r.device.iloc[0],
                             "catalogue_entry": r.catalogue_entry.iloc[0],
                             "torch": r.torch.iloc[0], "date": r.date.iloc[0],
                             "what": what, "value": scale * p[column], "unit": unit,
                             "fraction_of_ceiling": p["fraction_of_ceiling"]})
    return pd.DataFrame(rows, columns=SHEET_COLUMNS)
