"""What `python -m gpuinfer bench` measures: the plan at each size (`bench_plan`), its
run-time estimate on a catalogue GPU (`plan_estimate`), the run (`measure_plan`,
`run_bench`), the tidy table `reference.load` reads (`tidy_stages`) and the summary the
command prints. The labs' sweeps in one go; `gpu_check` runs the full plan on a lent GPU.
Imports of torch and `bench` stay inside the functions, so the command line starts fast."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from gpuinfer.measure import environment
from gpuinfer.measure import torch_device

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

    from gpuinfer.measure import bench as _bench
    from gpuinfer.measure import torch_device
    from gpuinfer.measure import decoding as _decoding
    from gpuinfer.measure import torch_device as _device
    from gpuinfer import hardware as _hardware
    from gpuinfer.measure import lab_measurements as _lab
    from gpuinfer import validate as _validate

    sizes = _validate.choice("sizes", sizes, SIZES)
    kind = _device.kind(device)
    on_gpu = kind == "cuda"
    if accelerator is not None:
        acc = _hardware.get(accelerator)
        memory, cache = acc.memory_bytes, acc.cache_bytes or torch_device.FALLBACK_CACHE_BYTES
    else:
        device = _device.resolve(device)
        memory, cache = torch_device.memory_bytes(device), torch_device.cache_bytes(device)
        if on_gpu:  # the stack is sized to the memory free for it (another context's not)
            memory = _device.available_bytes(device)
    dtype = torch_device.default_dtype(kind)
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
            "matmul_shapes": _lab.lab_matmul_shapes(kind, quick=quick),
            "model": _decoding.lab_model(_decoding.LAB_MODEL, kind, dtype,
                                         weight_budget_bytes=budget),
            "batches": _decoding.lab_batches(kind, quick=quick),
            "context": _decoding.LAB_CONTEXT, "min_run_time": None}


def plan_estimate(plan, accelerator) -> dict:
    """Seconds of timing each stage of `plan` takes on `accelerator`, every point at its
    roofline time on the datasheet figures (an H200: 4.8 TB/s, 989 TFLOP/s dense fp16),
    warm-up and `bench.MIN_BLOCKS` blocks included; set-up (allocation, graph capture,
    quantisation) is not. NaN where the catalogue lacks a figure."""
    from gpuinfer.measure import bench as _bench
    from gpuinfer.measure import decoding as _decoding
    from gpuinfer import hardware as _hardware

    acc = _hardware.get(accelerator)
    kind, dtype, ctx = plan["device_type"], plan["dtype"], plan["context"]
    mrt = plan["min_run_time"] or (_bench.GPU_MIN_RUN_TIME_S if kind == "cuda"
                                   else _bench.CPU_MIN_RUN_TIME_S)
    model = plan["model"]

    def decode(batches, weight_format):
        return _decoding.sweep_estimate_s(model, acc, batches, ctx, weight_format, dtype,
                                          min_run_s=mrt)

    graph_extra = decode([1], dtype) if kind == "cuda" else 0.0  # eager batch 1 too
    return {
        "weight reads": _bench.read_estimate_s(plan["read_sizes"], dtype, acc,
                                               cache=plan["cache"], min_run_s=mrt),
        "matmul sweep": _bench.matmul_estimate_s(plan["matmul_shapes"], dtype, acc,
                                                 min_run_s=mrt),
        "decode step": decode(plan["batches"], dtype) + graph_extra,
        "quantised weights": sum(decode([1], f) for f in (dtype, "int8", "int8", "int4")),
    }


@dataclass
class Stage:
    """One stage of a bench run: its raw rows, wall seconds, and the GPU's clocks while it
    ran (`environment.ClockSampler.summary()`: the median SM clock of NVML samples taken
    during the stage, throttle reasons with their shares; a reading after the stage only
    where no sample could be taken)."""
    rows: object  # pandas DataFrame
    seconds: float
    clocks: dict
    failures: dict = None  # what failed in the stage, by name (kernels of "quantised")


def _stage(device, measure) -> Stage:
    """Run `measure()` while NVML is sampled (`environment.sample_clocks`): the clocks
    stamped on the stage's rows are those the work ran at, not the idle or re-boosted
    clock after it (a 70 W T4 drops from 1,590 to ~900 MHz under load)."""
    from gpuinfer.measure import environment as _environment

    start = time.perf_counter()
    with _environment.sample_clocks(device) as sampler:
        rows = measure()
    seconds = time.perf_counter() - start
    clocks = sampler.summary()
    if clocks.get("samples"):
        clocks["nvml"] = f"ok; median of {clocks['samples']} samples during the stage"
    elif device.type == "cuda":  # no sample taken (too short, or NVML failed to start)
        clocks = _environment.clocks(device)
        if str(clocks.get("nvml", "")).startswith("ok"):
            clocks["nvml"] = "ok; read after the stage (no sample taken during it)"
    return Stage(rows, seconds, clocks)


def measure_plan(plan, device, progress=True) -> dict:
    """Run each stage of `plan` on `device`: {"weight_read", "matmul", "decode",
    "quantised"} -> Stage."""
    import pandas as pd

    from gpuinfer.measure import bench as _bench
    from gpuinfer.measure import decoding as _decoding
    from gpuinfer.measure import torch_device as _device

    on_gpu = device.type == "cuda"
    mrt, ctx = plan["min_run_time"], plan["context"]
    stages = {}
    stages["weight_read"] = _stage(device, lambda: _bench.weight_read_bandwidth(
        plan["read_sizes"], device=device, flush_cache=plan["flush_cache"],
        min_run_s=mrt, progress=progress))
    stages["matmul"] = _stage(device, lambda: _bench.matmul_tflops(
        plan["matmul_shapes"], device=device, flush_cache=plan["flush_cache"],
        min_run_s=mrt, progress=progress))
    stack = _decoding.DecodeStack(plan["model"], device=device)

    def decode():
        rows = stack.sweep(plan["batches"], ctx, cuda_graph=on_gpu, min_run_s=mrt,
                           progress=progress)
        if on_gpu:  # the same batch-1 step without CUDA graphs: launch overhead
            rows = pd.concat([rows, pd.DataFrame([stack.measure(1, ctx, min_run_s=mrt)])],
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
                rows.append(q.measure(1, ctx, cuda_graph=on_gpu, min_run_s=mrt))
            except Exception as exc:
                failed = _decoding.kernel_failure(kernel, exc)  # lab 4 says the same
            q = None
            _device.free_memory()  # outside the except block: its traceback is gone
            if failed:
                failures[kernel] = failed
                print(f"  {failed}")
        return pd.DataFrame(rows)

    stages["decode"] = _stage(device, decode)
    stages["quantised"] = _stage(device, quantised)
    stages["quantised"].failures = failures
    stack = None  # the stages are done with it: free its weights before returning
    _device.free_memory()
    return stages


def tidy_stages(stages, env):
    """The stages' rows in the reference schema, each with the clocks sampled while its
    stage ran (`Stage.clocks`); a field the samples lack (the memory clock) is `env`'s."""
    import pandas as pd

    from gpuinfer.measure import reference as _reference

    def during(clocks):
        return {k: v for k, v in clocks.items() if k in _reference.CLOCK_COLUMNS
                and not (isinstance(v, float) and math.isnan(v))}

    frames = [_reference.tidy(s.rows, name, {**env, **during(s.clocks)})
              for name, s in stages.items()]
    return pd.concat([f for f in frames if not f.empty], ignore_index=True)


def run_bench(sizes="quick", device=None, progress=True):
    """Run the plan for `sizes` on `device` and return the tidy rows (a DataFrame)."""
    from gpuinfer.measure import torch_device as _device
    from gpuinfer.measure import environment as _environment

    device = _device.resolve(device)
    env = _environment.environment(device)
    return tidy_stages(measure_plan(bench_plan(device, sizes), device, progress), env)


def summary(df) -> str:
    """A short table of a run: the rows a reader compares with the targets."""
    from gpuinfer.course.book import si

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


def print_device(device):
    """The header of `bench` and `gpu-check`: device, datasheet, clocks."""
    from gpuinfer.course.book import si

    env = environment.environment(device)
    acc = torch_device.accelerator_for(device)
    print(f"device: {env['device']} (catalogue entry: {acc.name}; torch {env['torch']}; "
          f"{env['cpu_threads']} CPU thread(s))")
    if device.type == "cuda" and not acc.peaks:
        print("datasheet: no entry in the catalogue for this GPU: measuring anyway; "
              "ceilings and fractions read n/a")
    else:
        print(f"datasheet: {si(acc.bandwidth, 'B/s')}, "
              + ", ".join(f"{d} {si(v, 'FLOP/s')}" for d, v in acc.peaks.items()))
    print(environment.describe_clocks(env))
    if device.type == "cpu":
        print("No GPU: measuring this CPU in fp32. Ceilings are those of the catalogue's "
              "reference CPU, not of this machine.")
    return env, acc


def print_estimate(plan, acc, budget_s=None) -> float:
    """Print the plan's estimated timing on `acc` (a catalogue GPU), stage by stage,
    against `budget_s` when given; return the total (s)."""
    from gpuinfer import hardware as _hardware

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
