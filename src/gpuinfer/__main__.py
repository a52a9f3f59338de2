"""Command line: `python -m gpuinfer COMMAND`.

    strip PATH...   strip outputs and execution counts from notebooks (in place)
    bench [--quick | --sizes tiny|quick|full] [--out FILE] [--device D] [--threads N]
                    run the labs' measurements on this machine (weight reads, matmul
                    sweep, decode step at several batches, quantised weights) and write
                    one tidy CSV that `gpuinfer.reference.load` reads
    gpu-check [--out-dir DIR] [--no-labs] [--report [PATH]] [--estimate GPU]
                    on a machine with an NVIDIA GPU: `bench` (full) written into the
                    package's reference runs, every lab (each in a fresh kernel), the
                    dry-run report (workshop/dry_run.md: each lab's wall time, key
                    numbers and failures; `--report PATH` elsewhere), and one table of the
                    targets (weight reads >= 85% of the datasheet bandwidth, large fp16
                    matmuls >= 75% of the dense peak, batch-1 decode >= 65% of its
                    weight-read ceiling) with each lab's wall time. Without one: the tiny
                    plan on the CPU, and exit 0; with `--report` also every lab on the
                    CPU and the report, headed as a CPU run. `--estimate H200` prints the full plan's
                    estimated run time on a catalogue GPU and exits.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys
import time
from dataclasses import dataclass


def _notebooks(paths):
    for p in map(pathlib.Path, paths):
        if p.is_dir():
            yield from sorted(q for q in p.rglob("*.ipynb") if ".ipynb_checkpoints" not in q.parts)
        elif p.exists():
            yield p
        else:
            raise FileNotFoundError(f"no notebook or folder at {p}")


def strip(paths) -> int:
    """Remove outputs, execution counts and volatile metadata; keep tags. Returns the
    number of notebooks changed."""
    import nbformat

    if isinstance(paths, (str, pathlib.PurePath)) or not hasattr(paths, "__iter__"):
        raise TypeError(f"paths must be a list of notebook paths or folders, got {paths!r}")
    changed = 0
    for path in _notebooks(paths):
        nb = nbformat.read(path, as_version=4)
        before = nbformat.writes(nb)
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs = []
                cell.execution_count = None
            cell.metadata.pop("execution", None)
            cell.metadata.pop("ExecuteTime", None)
        nb.metadata.pop("widgets", None)
        after = nbformat.writes(nb)
        if after != before:
            path.write_text(after + ("" if after.endswith("\n") else "\n"))
            changed += 1
    return changed


# --- bench: the plan, its run-time estimate, the run -----------------------------------------

SIZES = ("tiny", "quick", "full")
MiB = 2**20
#: The tiny plan: a smoke test of every stage, a few seconds on a CPU.
TINY_READ_BYTES, TINY_MODEL_BYTES, TINY_MIN_RUN_TIME_S = MiB, 8 * MiB, 0.01


def bench_plan(device, sizes="full", *, accelerator=None) -> dict:
    """What `bench` measures on `device` at each size: "full" (the labs' sweeps), "quick"
    (fewer points; under two minutes on a 2-core CPU) or "tiny" (a smoke test).

    The sizes follow the device's memory and L2. With `accelerator` (a catalogue entry)
    they follow its figures instead, and `device` ('cuda') need not be present: a plan
    for an H200 can be made, and estimated (`plan_estimate`), anywhere."""
    import dataclasses

    from . import bench as _bench
    from . import decoding as _decoding
    from . import hardware as _hardware
    from . import validate as _validate

    sizes = _validate.choice("sizes", sizes, SIZES)
    kind = _bench._kind(device)
    on_gpu = kind == "cuda"
    if accelerator is not None:
        acc = _hardware.get(accelerator)
        memory, cache = acc.memory_bytes, acc.cache_bytes or _bench.FALLBACK_CACHE_BYTES
    else:
        device = _bench._device(device)
        memory, cache = _bench.memory_bytes(device), _bench.cache_bytes(device)
    dtype = _bench.default_dtype(kind)
    if sizes == "tiny":
        model = dataclasses.replace(_decoding.lab_model(
            _decoding.LAB_MODEL, kind, dtype, width_divisor=_decoding.CPU_WIDTH_DIVISOR,
            weight_budget_bytes=TINY_MODEL_BYTES), n_layers=1)
        return {"device_type": kind, "dtype": dtype, "cache": cache,
                "read_sizes": [TINY_READ_BYTES], "flush_cache": False,
                "matmul_shapes": [(1, 128, 128), (128, 128, 128)], "model": model,
                "batches": [1, 2], "context": 16, "min_run_time": TINY_MIN_RUN_TIME_S}
    quick = sizes == "quick"
    if on_gpu:
        read_sizes = ([int(cache // 4), 256 * MiB, min(1024 * MiB, int(memory // 8))]
                      if quick else _bench.read_sizes_for(cache, memory, kind))
    else:
        read_sizes = [16 * MiB, 128 * MiB] if quick else _bench.read_sizes_for(cache, memory, kind)
    budget = _decoding.GPU_WEIGHT_SHARE * memory if on_gpu else None
    return {"device_type": kind, "dtype": dtype, "cache": cache,
            "read_sizes": read_sizes, "flush_cache": True,
            "matmul_shapes": _bench.lab_matmul_shapes(kind, quick=quick),
            "model": _decoding.lab_model(_decoding.LAB_MODEL, kind, dtype,
                                         weight_budget_bytes=budget),
            "batches": _decoding.lab_batches(kind, quick=quick),
            "context": _decoding.LAB_CONTEXT, "min_run_time": None}


def plan_estimate(plan, accelerator) -> dict:
    """Seconds of timing each stage of `plan` takes on `accelerator`, every point at its
    roofline time on the datasheet figures (an H200: 4.8 TB/s, 989 TFLOP/s dense fp16),
    warm-up and `bench.MIN_BLOCKS` blocks included; set-up (allocation, graph capture,
    quantisation) is not. NaN where the catalogue lacks a figure."""
    from . import bench as _bench
    from . import decoding as _decoding
    from . import hardware as _hardware

    acc = _hardware.get(accelerator)
    kind, dtype, ctx = plan["device_type"], plan["dtype"], plan["context"]
    mrt = plan["min_run_time"] or (_bench.GPU_MIN_RUN_TIME_S if kind == "cuda"
                                   else _bench.CPU_MIN_RUN_TIME_S)
    model = plan["model"]

    def decode(batches, weight_format):
        return _decoding.sweep_estimate_s(model, acc, batches, ctx, weight_format, dtype,
                                          min_run_time=mrt)

    graph_extra = decode([1], dtype) if kind == "cuda" else 0.0  # eager batch 1 too
    return {
        "weight reads": _bench.read_estimate_s(plan["read_sizes"], dtype, acc,
                                               cache=plan["cache"], min_run_time=mrt),
        "matmul sweep": _bench.matmul_estimate_s(plan["matmul_shapes"], dtype, acc,
                                                 min_run_time=mrt),
        "decode step": decode(plan["batches"], dtype) + graph_extra,
        "quantised weights": sum(decode([1], f) for f in (dtype, "int8", "int8", "int4")),
    }


@dataclass
class Stage:
    """One stage of a bench run: its raw rows, wall seconds, and the GPU's clocks after it."""
    rows: object  # pandas DataFrame
    seconds: float
    clocks: dict
    failures: dict = None  # what failed in the stage, by name (kernels of "quantised")


def _stage(device, measure) -> Stage:
    from . import bench as _bench

    start = time.perf_counter()
    rows = measure()
    return Stage(rows, time.perf_counter() - start, _bench.clocks(device))


def measure_plan(plan, device, progress=True) -> dict:
    """Run each stage of `plan` on `device`: {"weight_read", "matmul", "decode",
    "quantised"} -> Stage."""
    import pandas as pd

    from . import bench as _bench
    from . import decoding as _decoding

    on_gpu = device.type == "cuda"
    mrt, ctx = plan["min_run_time"], plan["context"]
    stages = {}
    stages["weight_read"] = _stage(device, lambda: _bench.weight_read_bandwidth(
        plan["read_sizes"], device=device, flush_cache=plan["flush_cache"],
        min_run_time=mrt, progress=progress))
    stages["matmul"] = _stage(device, lambda: _bench.matmul_tflops(
        plan["matmul_shapes"], device=device, flush_cache=plan["flush_cache"],
        min_run_time=mrt, progress=progress))
    stack = _decoding.DecodeStack(plan["model"], device=device)

    def decode():
        rows = stack.sweep(plan["batches"], ctx, cuda_graph=on_gpu, min_run_time=mrt,
                           progress=progress)
        if on_gpu:  # the same batch-1 step without CUDA graphs: launch overhead
            rows = pd.concat([rows, pd.DataFrame([stack.measure(1, ctx, min_run_time=mrt)])],
                             ignore_index=True)
        return rows

    failures = {}

    def quantised():
        rows = []
        for kernel in _decoding.KERNELS:
            if kernel != "dense" and not _decoding.kernel_available(kernel, device):
                print(f"  {kernel}: no kernel for this device in this torch; skipped")
                continue
            failed = None
            try:  # one kernel failing (a capture it breaks, a missing op) stops only itself
                q = stack if kernel == "dense" else stack.quantised(kernel)
                rows.append(q.measure(1, ctx, cuda_graph=on_gpu, min_run_time=mrt))
            except Exception as exc:
                failed = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
            q = None
            _bench.free_memory()  # outside the except block: its traceback is gone
            if failed:
                failures[kernel] = failed
                print(f"  {kernel}: FAILED ({failed}); the other kernels carry on")
        return pd.DataFrame(rows)

    stages["decode"] = _stage(device, decode)
    stages["quantised"] = _stage(device, quantised)
    stages["quantised"].failures = failures
    del stack
    _bench.free_memory()
    return stages


def tidy_stages(stages, env):
    """The stages' rows in the reference schema, each with the clocks read after it."""
    import pandas as pd

    from . import reference as _reference

    frames = [_reference.tidy(s.rows, name, {**env, **s.clocks}) for name, s in stages.items()]
    return pd.concat([f for f in frames if not f.empty], ignore_index=True)


def run_bench(sizes="quick", device=None, progress=True):
    """Run the plan for `sizes` on `device` and return the tidy rows (a DataFrame)."""
    from . import bench as _bench

    device = _bench._device(device)
    env = _bench.environment(device)
    return tidy_stages(measure_plan(bench_plan(device, sizes), device, progress), env)


def summary(df) -> str:
    """A short table of a run: the rows a reader compares with the targets."""
    from .book import si

    lines = [f"{'measurement':<46} {'achieved':>15} {'ceiling':>15} {'fraction':>9}"]

    def add(name, row):
        unit, frac = row["unit"], row["fraction_of_ceiling"]
        lines.append(f"{name:<46} {si(row['value'], unit):>15} {si(row['ceiling'], unit):>15} "
                     f"{(f'{frac:.0%}' if frac == frac else 'n/a'):>9}")

    reads = df[df["experiment"] == "weight_read"]
    if len(reads):
        add(f"weight read, largest ({si(reads['bytes'].max(), 'B')})",
            reads.loc[reads["bytes"].idxmax()])
    mm = df[df["experiment"] == "matmul"]
    squares = mm[(mm["m"] == mm["n"]) & (mm["n"] == mm["k"])]
    for name, part in (("matmul, largest square", squares), ("matmul, batch-1 GEMV", mm[mm["m"] == 1])):
        if len(part):
            row = part.loc[part["flops"].idxmax()]
            add(f"{name} {int(row['m'])}x{int(row['k'])}x{int(row['n'])}", row)
    dec = df[df["experiment"] == "decode"]
    for graph in (True, False):
        part = dec[dec["cuda_graph"] == graph]
        if not len(part):
            continue
        tag = ", CUDA graph" if graph else ""
        add(f"decode step, batch 1{tag}", part.loc[part["batch"].idxmin()])
        add(f"decode step, batch {int(part['batch'].max())}{tag}",
            part.loc[part["batch"].idxmax()])
    for _, row in df[df["experiment"] == "quantised"].iterrows():
        # The int8-pack kernel changes with torch (a CUDA-core reference kernel on GPUs).
        torch_note = f" (torch {row['torch']})" if row["kernel"] == "int8-pack" else ""
        add(f"quantised step, {row['kernel']}{torch_note}", row)
    return "\n".join(lines)


def _print_device(device):
    """The header of `bench` and `gpu-check`: device, datasheet, clocks."""
    from . import bench as _bench
    from .book import si

    env = _bench.environment(device)
    acc = _bench.accelerator_for(device)
    print(f"device: {env['device']} (catalogue entry: {acc.name}; torch {env['torch']}; "
          f"{env['cpu_threads']} CPU thread(s))")
    if device.type == "cuda" and not acc.peaks:
        print("datasheet: no entry in the catalogue for this GPU: measuring anyway; "
              "ceilings and fractions read n/a")
    else:
        print(f"datasheet: {si(acc.bandwidth, 'B/s')}, "
              + ", ".join(f"{d} {si(v, 'FLOP/s')}" for d, v in acc.peaks.items()))
    print(_bench.describe_clocks(env))
    if device.type == "cpu":
        print("No GPU: measuring this CPU in fp32. Ceilings are those of the catalogue's "
              "reference CPU, not of this machine.")
    return env, acc


def _print_estimate(plan, acc, budget_s=None) -> float:
    from . import hardware as _hardware

    acc = _hardware.get(acc)
    est = plan_estimate(plan, acc)
    points = {"weight reads": len(plan["read_sizes"]), "matmul sweep": len(plan["matmul_shapes"]),
              "decode step": len(plan["batches"]) + (plan["device_type"] == "cuda"),
              "quantised weights": 4}
    print(f"estimated timing on {acc.name}: a floor (each point at its roofline time on the "
          "datasheet; allocation, graph capture and quantisation not included):")
    for name, seconds in est.items():
        print(f"  {name:<18} {points[name]:>3} points  {seconds:>7.1f} s")
    total = sum(est.values())
    print(f"  {'total':<18} {sum(points.values()):>3} points  {total:>7.1f} s"
          + (f"  (budget {budget_s:.0f} s)" if budget_s else ""))
    return total


def bench_command(args) -> int:
    import torch

    from . import bench as _bench
    from . import reference as _reference

    sizes = args.sizes or ("quick" if args.quick else "full")
    if args.threads is not None:
        if args.threads < 1:
            raise SystemExit(f"--threads must be a positive integer, got {args.threads}")
        torch.set_num_threads(args.threads)
    device = _bench._device(args.device, "--device")
    env, acc = _print_device(device)
    plan = bench_plan(device, sizes)
    _print_estimate(plan, acc)
    stages = measure_plan(plan, device, progress=not args.no_progress)
    df = tidy_stages(stages, env)
    out = args.out or f"gpuinfer-bench-{_reference.default_filename(env)}"
    path = _reference.save(df, out)
    print(summary(df))
    print("stage wall times: " + ", ".join(f"{k} {s.seconds:.1f} s" for k, s in stages.items()))
    print(f"{len(df)} rows written to {path}")
    return 0


# --- gpu-check: everything a lent GPU should run, in one go --------------------------------------

#: The whole check must fit in 8 minutes on an H200.
GPU_CHECK_BUDGET_S = 480
#: What a good run reaches (fractions): large reads of the datasheet bandwidth (copies
#: reach 75-90% of it), large fp16 matmuls of the dense peak (MAMF: 78-87% on NVIDIA
#: data-centre GPUs), batch-1 decode of its weight-read ceiling (gpt-fast: ~69%).
TARGETS = {"weight read, largest": 0.85, "fp16 matmul, largest square": 0.75,
           "decode batch 1 (CUDA graph), of weight-read ceiling": 0.65}
#: Per-lab limit under nbval, seconds: a lab that takes longer has a problem worth seeing.
LAB_TIMEOUT_S = 300


def check_targets(stages) -> list[dict]:
    """The targets against a bench run's raw stages: one dict per target with the measured
    fraction, the target, and whether it was met (None when the run has no such row)."""
    out = []

    def add(name, value, what):
        target = TARGETS[name]
        ok = None if value is None or value != value else bool(value >= target)
        out.append({"target": name, "measured": value, "goal": target, "met": ok, "row": what})

    reads = stages["weight_read"].rows if "weight_read" in stages else None
    if reads is not None and len(reads):
        flushed = reads[reads["flush_cache"]] if "flush_cache" in reads else reads
        row = flushed.loc[flushed["bytes"].idxmax()] if len(flushed) else None
        add("weight read, largest", None if row is None else float(row["fraction_of_peak"]),
            "" if row is None else f"{row['bytes'] / 1e9:.2f} GB")
    mm = stages["matmul"].rows if "matmul" in stages else None
    if mm is not None and len(mm):
        sq = mm[(mm["m"] == mm["n"]) & (mm["n"] == mm["k"]) & (mm["dtype"] == "fp16")]
        row = sq.loc[sq["flops"].idxmax()] if len(sq) else None
        add("fp16 matmul, largest square", None if row is None else float(row["fraction_of_peak"]),
            "" if row is None else f"{int(row['m'])}^3")
    dec = stages["decode"].rows if "decode" in stages else None
    if dec is not None and len(dec):
        b1 = dec[(dec["batch"] == 1) & dec["cuda_graph"]]
        row = b1.iloc[0] if len(b1) else None
        add("decode batch 1 (CUDA graph), of weight-read ceiling",
            None if row is None else float(row["fraction_of_weight_read_ceiling"]),
            "" if row is None else str(row["model"]))
    return out


def _repo_root() -> pathlib.Path | None:
    """The checkout this package runs from (labs/ beside src/), if it is one."""
    root = pathlib.Path(__file__).resolve().parents[2]
    return root if (root / "labs").is_dir() else None


#: What the dry-run report reads from each lab once it has run: (row label, expression
#: evaluated in the lab's own namespace, unit). Labels are stable: the instructor notes
#: quote them. A lab that did not reach a number reports why in its row.
def _lab10_ms(rows, tokens) -> str:
    """Lab 10's measured milliseconds for one layer kind at a token count (an expression)."""
    return f"float(sweep.query(\"{rows} and tokens == {tokens}\")['measured ms'].iloc[0])"


_MIXTRAL_MOE = "kind == 'MoE' and layer == 'Mixtral-8x7B layer'"
_MIXTRAL_DENSE = "kind == 'dense' and layer == 'Mixtral-8x7B layer'"

LAB_KEY_NUMBERS = {
    "01_weight_reads": [
        ("weight read, largest, cache flushed", "measured_bandwidth / 1e9", "GB/s"),
        ("weight read, fraction of the ceiling", "share", "fraction"),
        ("decode chain, batch 1", "step['tokens_per_s']", "tokens/s"),
        ("decode chain, batch 1, of the measured read's ceiling", "reached", "fraction"),
    ],
    "02_matmul_roofline": [
        ("matmul, best measured", "measured['peak_flops'] / 1e12", "TFLOP/s"),
        ("matmul, fraction of the dense peak", "peak_share", "fraction"),
        ("ridge, measured", "measured['ridge']", "FLOP/byte"),
        ("ridge, datasheet", "acc.ridge_point(dtype)", "FLOP/byte"),
        ("median SM clock during the sweep", "sampled.summary()['sm_clock_mhz']", "MHz"),
    ],
    "03_decode_batching": [
        ("decode, batch 1", "float(sweep['tokens_per_s'].iloc[0])", "tokens/s"),
        ("decode, largest batch", "float(sweep['tokens_per_s'].iloc[-1])", "tokens/s"),
        ("largest batch", "int(sweep['batch'].iloc[-1])", "sequences"),
        ("batch 1, of the achievable ceiling", "reached", "fraction"),
    ],
    "04_quantised_weights": [
        ("dense step, batch 1", "speed.loc['dense', 'ms']", "ms"),
        ("speed-up, int8-dequant", "speed.loc['int8-dequant', 'speedup']", "x"),
        ("speed-up, int8-pack", "speed.loc['int8-pack', 'speedup']", "x"),
        ("speed-up, int4-unpack", "speed.loc['int4-unpack', 'speedup']", "x"),
    ],
    "05_cpu_vs_gpu": [
        ("CPU, batch 1", "cpu_b1 * 1e3", "ms"),
        ("CPU, best throughput", "cpu_best", "predictions/s"),
        ("GPU, best throughput",
         "sweep[sweep.device == 'cuda'].predictions_per_s.max()", "predictions/s"),
    ],
    "06_batching_under_load": [
        ("decode step, batch 1", "first.seconds * 1e3", "ms"),
        ("decode step, largest batch", "int(last.batch)", "sequences"),
        ("throughput gain, largest batch over batch 1", "gain", "x"),
        ("best policy's capacity", "float(best['capacity_per_s'])", "requests/s"),
    ],
    "07_tensor_parallel": [
        ("all-reduce latency (fit)", "fit_lat * 1e6", "us"),
        ("all-reduce bandwidth (fit)", "fit_bw / 1e9", "GB/s"),
        ("sharded step, speed-up at the largest N",
         "float(step_table['speed-up vs N = 1'].iloc[-1])", "x"),
    ],
    "08_triton_dynamic_batching": [
        ("served through Triton", "int(SERVED)", "1 = yes"),
        ("service time, batch 1", "float(table['seconds'].iloc[0]) * 1e3", "ms"),
        ("service time, batch 32", "float(table['seconds'].iloc[-1]) * 1e3", "ms"),
    ],
    "09_compile_fuse_calibrate": [
        ("fp32 ONNX Runtime, batch 256", "fp32.median_s * 1e3", "ms"),
        ("int8, best speed-up", "best", "x"),
    ],
    "10_moe_experts": [
        ("MoE layer (Mixtral shape), 1 token",
         _lab10_ms(_MIXTRAL_MOE, 1), "ms"),
        ("MoE layer (Mixtral shape), 16 tokens",
         _lab10_ms(_MIXTRAL_MOE, 16), "ms"),
        ("dense twin (Mixtral shape), 16 tokens",
         _lab10_ms(_MIXTRAL_DENSE, 16), "ms"),
        ("MoE layer, best fraction of its roofline",
         "float(sweep[sweep.kind == 'MoE']['of ceiling'].max())", "fraction"),
    ],
}
_KEY_MARK = "@@gpuinfer-key-numbers@@"


def _collector_source(keys) -> str:
    """A cell that evaluates each key expression in the lab's namespace and prints them."""
    return ("import json as _gj\n_gk = {}\n"
            f"for _gl, _ge in {[(label, expr) for label, expr, _ in keys]!r}:\n"
            "    try:\n        _gk[_gl] = float(eval(_ge))\n"
            "    except Exception as _gx:\n"
            "        _gk[_gl] = f'not reached ({type(_gx).__name__}: {_gx})'\n"
            f"print({_KEY_MARK!r} + _gj.dumps(_gk))\n")


def run_lab(path, timeout_s=LAB_TIMEOUT_S, cwd=None) -> dict:
    """Run one lab notebook top to bottom in a fresh kernel (nbclient; a failing cell is
    recorded and the rest still run, as under nbval) and read its key numbers
    (`LAB_KEY_NUMBERS`): {lab, passed, seconds, detail, failures, numbers}."""
    import json

    import nbformat
    from nbclient import NotebookClient

    path = pathlib.Path(path)
    keys = LAB_KEY_NUMBERS.get(path.stem, [])
    nb = nbformat.read(path, as_version=4)
    n_cells = len(nb.cells)
    nb.cells.append(nbformat.v4.new_code_cell(_collector_source(keys)))
    start = time.perf_counter()
    failures, stopped = [], None
    try:
        NotebookClient(nb, timeout=timeout_s, allow_errors=True, kernel_name="python3",
                       resources={"metadata": {"path": str(cwd or path.parent)}}).execute()
    except Exception as exc:  # a cell past its timeout, a kernel that died
        stopped = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
    seconds = time.perf_counter() - start
    found = {}
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if out.get("output_type") == "error" and i < n_cells:
                failures.append(f"cell {i}: {out.get('ename')}: {out.get('evalue', '')}")
            text = out.get("text", "") if out.get("output_type") == "stream" else ""
            if i == n_cells and _KEY_MARK in text:
                found = json.loads(text.split(_KEY_MARK, 1)[1].splitlines()[0])
    if stopped:
        failures.append(f"stopped: {stopped}")
    numbers = [(label, found.get(label, "not reached (the lab stopped first)"), unit)
               for label, _, unit in keys]
    passed = not failures
    detail = "passed" if passed else f"{len(failures)} failure(s)"
    return {"lab": path.name, "passed": passed, "seconds": seconds, "detail": detail,
            "failures": failures, "numbers": numbers}


def run_labs(notebooks, timeout_s=LAB_TIMEOUT_S, cwd=None) -> list[dict]:
    """`run_lab` for each notebook, printing a line as each ends. A lab that errs or runs
    past `timeout_s` (a cell) is reported, not raised."""
    results = []
    for nb in notebooks:
        r = run_lab(nb, timeout_s, cwd)
        results.append(r)
        print(f"  {r['lab']}: {'passed' if r['passed'] else 'FAILED'} in {r['seconds']:.0f} s"
              + ("" if r["passed"] else f" ({'; '.join(r['failures'])[:300]})"))
    return results


# --- the dry-run report ----------------------------------------------------------------------------

DRY_RUN_REPORT = pathlib.Path("workshop") / "dry_run.md"
CPU_REPORT_NOTE = ("No GPU: values are CPU values; rerun on the workshop GPU "
                   "(`python -m gpuinfer gpu-check --report`).")


def _cell(text) -> str:
    """Text safe inside a markdown table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _value(value) -> str:
    if isinstance(value, str):
        return _cell(value)
    if value != value:
        return "n/a"
    return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def dry_run_report(env, labs, *, total_s, targets=(), clocks_line="") -> str:
    """The dry-run report as markdown (headings from '##' down, so that the instructor
    notes can include it): the machine, then one table per lab (wall time, result, its
    key numbers with units, each failure with its error), then the bench targets."""
    on_gpu = env.get("device_type") == "cuda"
    lines = ["## Dry run: " + ("GPU run" if on_gpu else "CPU run"), ""]
    if not on_gpu:
        lines += [f"**{CPU_REPORT_NOTE}**", ""]
    lines += ["| machine | |", "|---|---|"]
    for label, value in (("device", env.get("device", "")),
                         ("catalogue entry", env.get("catalogue_entry", "")),
                         ("torch", env.get("torch", "")), ("CUDA", env.get("cuda") or "none"),
                         ("date", env.get("date", "")), ("clocks", clocks_line or "n/a"),
                         ("labs passed", f"{sum(r['passed'] for r in labs)} of {len(labs)}"),
                         ("whole check, wall time", f"{total_s:,.0f} s")):
        lines.append(f"| {label} | {_cell(value)} |")
    for r in labs:
        lines += ["", f"### {pathlib.Path(r['lab']).stem}", "",
                  "| measurement | value | unit |", "|---|---|---|",
                  f"| wall time | {r['seconds']:,.1f} | s |",
                  f"| result | {'passed' if r['passed'] else 'FAILED'} | |"]
        for label, value, unit in r.get("numbers", []):
            lines.append(f"| {_cell(label)} | {_value(value)} | {_cell(unit)} |")
        for i, failure in enumerate(r.get("failures", []), 1):
            lines.append(f"| failure {i} | {_cell(failure)} | |")
    if targets:
        lines += ["", "### Bench targets", "", "| target | measured | goal | result |",
                  "|---|---|---|---|"]
        for t in targets:
            m = t["measured"]
            lines.append(f"| {_cell(t['target'])} | "
                         f"{'n/a' if m is None or m != m else f'{m:.0%}'} | {t['goal']:.0%} | "
                         f"{ {True: 'met', False: 'missed', None: 'no figure'}[t['met']]} |")
    return "\n".join(lines) + "\n"


def read_report(text) -> dict:
    """The labs of a `dry_run_report` back from its markdown: {lab: {row label: (value,
    unit)}} (values as written). For tests and for tools that fill the notes."""
    labs, current = {}, None
    for line in text.splitlines():
        if line.startswith("### "):
            current = labs.setdefault(line[4:].strip(), {})
        elif current is not None and line.startswith("| ") and not line.startswith("|---"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if len(cells) >= 2 and cells[0] not in ("measurement", "target"):
                current[cells[0]] = tuple(cells[1:])
    return labs


def _format_check(targets, labs, total_s) -> str:
    lines = [f"{'target':<52} {'measured':>9} {'goal':>6}  result"]
    for t in targets:
        value = "n/a" if t["measured"] is None or t["measured"] != t["measured"] \
            else f"{t['measured']:.0%}"
        verdict = {True: "met", False: "MISSED", None: "no figure"}[t["met"]]
        lines.append(f"{t['target']:<52} {value:>9} {t['goal']:>6.0%}  {verdict} {t['row']}")
    for lab in labs:
        lines.append(f"{'lab ' + lab['lab']:<52} {lab['seconds']:>8.0f}s {'':>6}  "
                     f"{'passed' if lab['passed'] else 'FAILED'}")
    lines.append(f"{'whole check, wall time':<52} {total_s:>8.0f}s {GPU_CHECK_BUDGET_S:>5}s  "
                 f"{'within budget' if total_s <= GPU_CHECK_BUDGET_S else 'OVER BUDGET'}")
    return "\n".join(lines)


def _labs_available(labs):
    """(root, why not): the checkout whose labs/ to run, or why they cannot run."""
    import importlib.util

    root = _repo_root()
    if not labs:
        return None, "skipped (--no-labs)"
    if root is None:
        return None, "no labs/ folder beside the package (not a checkout): not run"
    if importlib.util.find_spec("nbclient") is None:
        return None, "nbclient is not installed (pip install -e '.[dev]'): not run"
    return root, None


def _write_report(path, text):
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"dry-run report written to {path}")


def gpu_check(out_dir=None, labs=True, progress=True, report=None) -> int:
    """`python -m gpuinfer gpu-check`: see the module docstring. Returns the exit code:
    0 when everything ran (targets missed are reported, not failed), 1 when a lab failed
    or could not run. `report`: a path for the dry-run report (`dry_run_report`); on a
    GPU it defaults to workshop/dry_run.md of the checkout when the labs run. Without a
    GPU the labs run only when a report is asked for (on the CPU, labelled as such)."""
    import shutil

    import torch

    from . import bench as _bench
    from . import reference as _reference

    start = time.perf_counter()
    out_dir = pathlib.Path(out_dir) if out_dir else None
    if out_dir:
        out_dir.mkdir(parents=True, exist_ok=True)
    if not (torch.cuda.is_available() and torch.version.cuda):
        print("gpu-check: no NVIDIA GPU here (torch.cuda.is_available() is "
              f"{torch.cuda.is_available()}, CUDA build: {torch.version.cuda or 'no'}).")
        print("Running the CPU-safe part: the tiny bench plan on this CPU (not written to "
              "the package's reference runs). On an NVIDIA GPU this command runs bench "
              "(full) and every lab, writes src/gpuinfer/data/reference/"
              "<gpu>.csv, checks the targets and writes the dry-run report.")
        cpu = torch.device("cpu")
        stage_start = time.perf_counter()
        df = tidy_stages(measure_plan(bench_plan(cpu, "tiny"), cpu, progress=False),
                         _bench.environment(cpu))
        print(summary(df))
        print(f"tiny bench plan: {time.perf_counter() - stage_start:.1f} s")
        _print_estimate(bench_plan("cuda", "full", accelerator="H200"), "H200",
                        GPU_CHECK_BUDGET_S)
        ok = True
        if report:
            root, why = _labs_available(labs)
            lab_results = []
            if root is None:
                print(f"labs: {why}")
                ok = False
            else:
                print("labs on this CPU, for the report:")
                lab_results = run_labs(sorted((root / "labs").glob("*.ipynb")), cwd=root / "labs")
                ok = all(r["passed"] for r in lab_results)
            _write_report(report, dry_run_report(
                _bench.environment(cpu), lab_results, total_s=time.perf_counter() - start,
                clocks_line="n/a (a CPU)"))
        print(f"gpu-check: CPU-safe part done in {time.perf_counter() - start:.0f} s; "
              "no GPU was checked.")
        return 0 if ok else 1
    device = torch.device("cuda")
    env, acc = _print_device(device)
    plan = bench_plan(device, "full")
    _print_estimate(plan, acc, GPU_CHECK_BUDGET_S)
    with _bench.sample_clocks(device) as sampled:
        stages = measure_plan(plan, device, progress)
    df = tidy_stages(stages, env)
    path = _reference.save(df, _reference.DIRECTORY / _reference.default_filename(env))
    print(summary(df))
    print(f"bench: {len(df)} rows written to {path}; stage wall times: "
          + ", ".join(f"{k} {s.seconds:.1f} s" for k, s in stages.items()))
    if out_dir:
        shutil.copy(path, out_dir / path.name)
    _bench.free_memory()
    lab_results, ok = [], True
    root, why = _labs_available(labs)
    if root is None:
        print(f"labs: {why}")
        ok = not labs
    else:
        print("labs:")
        lab_results = run_labs(sorted((root / "labs").glob("*.ipynb")), cwd=root / "labs")
        ok = all(r["passed"] for r in lab_results)
        report = report or root / DRY_RUN_REPORT
    failures = getattr(stages.get("quantised"), "failures", None) or {}
    ok = ok and not failures
    targets = check_targets(stages)
    text = _format_check(targets, lab_results, time.perf_counter() - start)
    print(text)
    clocks_line = _bench.describe_sampled(sampled.summary())
    print(clocks_line)
    if out_dir:
        (out_dir / "gpu-check-summary.txt").write_text(text + "\n")
    if report:
        bench_lab = {"lab": "bench (python -m gpuinfer bench, full)", "passed": not failures,
                     "seconds": sum(st.seconds for st in stages.values()),
                     "numbers": [(f"{k} stage", st.seconds, "s") for k, st in stages.items()],
                     "failures": [f"{k}: {v}" for k, v in failures.items()]}
        _write_report(report, dry_run_report(env, [bench_lab] + lab_results,
                                             total_s=time.perf_counter() - start,
                                             targets=targets, clocks_line=clocks_line))
    return 0 if ok else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="gpuinfer", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_strip = sub.add_parser("strip", help="strip outputs from notebooks")
    p_strip.add_argument("paths", nargs="+")
    p_bench = sub.add_parser("bench", help="run the labs' measurements, write a CSV")
    p_bench.add_argument("--quick", action="store_true",
                         help="fewer sizes (under two minutes on a 2-core CPU)")
    p_bench.add_argument("--sizes", choices=SIZES, default=None,
                         help="override: tiny (smoke test), quick, full (default)")
    p_bench.add_argument("--out", default=None, help="CSV to write "
                         "(default: gpuinfer-bench-<device>.csv here)")
    p_bench.add_argument("--device", default=None, help="cpu or cuda (default: cuda if present)")
    p_bench.add_argument("--threads", type=int, default=None,
                         help="CPU threads for torch (default: torch's own choice)")
    p_bench.add_argument("--no-progress", action="store_true", help="no progress bars")
    p_check = sub.add_parser("gpu-check", help="bench (full) + every lab on this GPU, "
                             "with the targets; the CPU-safe part without a GPU")
    p_check.add_argument("--out-dir", default=None,
                         help="also write the summary and a copy of the CSV here")
    p_check.add_argument("--no-labs", action="store_true", help="skip the labs")
    p_check.add_argument("--no-progress", action="store_true", help="no progress bars")
    p_check.add_argument("--report", nargs="?", metavar="PATH", default=None,
                         const=str(DRY_RUN_REPORT),
                         help="write the dry-run report (markdown) here (default "
                              f"{DRY_RUN_REPORT}); without a GPU this runs the labs on the CPU")
    p_check.add_argument("--estimate", metavar="GPU", default=None,
                         help="only print the full plan's estimated timing on a catalogue GPU")
    args = parser.parse_args(argv)
    if args.command == "strip":
        n = strip(args.paths)
        print(f"stripped {n} notebook(s)")
    elif args.command == "gpu-check" and args.estimate:
        total = _print_estimate(bench_plan("cuda", "full", accelerator=args.estimate),
                                args.estimate, GPU_CHECK_BUDGET_S)
        return 0 if total == total else 1
    elif args.command == "gpu-check":
        return gpu_check(args.out_dir, labs=not args.no_labs, progress=not args.no_progress,
                         report=args.report)
    elif args.command == "bench":
        import torch

        threads = torch.get_num_threads()
        try:
            return bench_command(args)
        finally:
            if torch.get_num_threads() != threads:
                torch.set_num_threads(threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
