"""Command line: `python -m gpuinfer COMMAND`.

    strip PATH...   strip outputs and execution counts from notebooks (in place)
    bench [--quick] [--out FILE]
                    run the labs' measurements on this machine (weight reads, matmul
                    sweep, decode step at several batches, quantised weights) and write
                    one tidy CSV that `gpuinfer.reference.load` reads
"""

from __future__ import annotations

import argparse
import pathlib
import sys


def _notebooks(paths):
    for p in map(pathlib.Path, paths):
        if p.is_dir():
            yield from sorted(q for q in p.rglob("*.ipynb") if ".ipynb_checkpoints" not in q.parts)
        else:
            yield p


def strip(paths) -> int:
    """Remove outputs, execution counts and volatile metadata; keep tags. Returns the
    number of notebooks changed."""
    import nbformat

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


# --- bench -------------------------------------------------------------------------------

SIZES = ("tiny", "quick", "full")


def bench_plan(device, sizes="full") -> dict:
    """What `bench` measures on `device` at each size: "full" (the labs' sweeps), "quick"
    (fewer points; under two minutes on a 2-core CPU) or "tiny" (a smoke test)."""
    import dataclasses

    from . import bench as _bench
    from . import decoding as _decoding

    if sizes not in SIZES:
        raise ValueError(f"sizes must be one of {', '.join(SIZES)}, got {sizes!r}")
    on_gpu = device.type == "cuda"
    cache = _bench.cache_bytes(device)
    MiB = 2**20
    if sizes == "tiny":
        model = dataclasses.replace(_decoding.lab_model(_decoding.LAB_MODEL, device, width_divisor=8,
                                                     weight_budget_bytes=8 * MiB),
                                    n_layers=1)
        return {"read_sizes": [MiB], "flush_cache": False,
                "matmul_shapes": [(1, 128, 128), (128, 128, 128)], "model": model,
                "batches": [1, 2], "context": 16, "min_run_time": 0.01}
    quick = sizes == "quick"
    if on_gpu:
        read_sizes = ([int(cache // 4), 256 * MiB, 1024 * MiB] if quick
                      else _bench.default_read_sizes(device))
    else:
        read_sizes = [16 * MiB, 128 * MiB] if quick else _bench.default_read_sizes(device)
    return {"read_sizes": read_sizes, "flush_cache": True,
            "matmul_shapes": _bench.lab_matmul_shapes(device, quick=quick),
            "model": _decoding.lab_model(_decoding.LAB_MODEL, device),
            "batches": _decoding.lab_batches(device, quick=quick),
            "context": _decoding.LAB_CONTEXT, "min_run_time": None}


def run_bench(sizes="quick", device=None, progress=True):
    """Run the plan for `sizes` on `device` and return the tidy rows (a DataFrame)."""
    import pandas as pd
    from tqdm.auto import tqdm

    from . import bench as _bench
    from . import decoding as _decoding
    from . import reference as _reference

    device = _bench._device(device)
    plan = bench_plan(device, sizes)
    env = _bench.environment(device)
    on_gpu = device.type == "cuda"
    mrt, ctx = plan["min_run_time"], plan["context"]
    frames = []
    stages = ["weight reads", "matmul sweep", "decode step", "quantised weights"]
    bar = tqdm(stages, desc="gpuinfer bench", disable=not progress)
    for stage in bar:
        bar.set_postfix_str(stage)
        if stage == "weight reads":
            rows = _bench.weight_read_bandwidth(plan["read_sizes"], device=device,
                                                flush_cache=plan["flush_cache"],
                                                min_run_time=mrt, progress=progress)
            frames.append(_reference.tidy(rows, "weight_read", env))
        elif stage == "matmul sweep":
            rows = _bench.matmul_tflops(plan["matmul_shapes"], device=device,
                                        flush_cache=plan["flush_cache"], min_run_time=mrt,
                                        progress=progress)
            frames.append(_reference.tidy(rows, "matmul", env))
        elif stage == "decode step":
            stack = _decoding.DecodeStack(plan["model"], device=device)
            rows = stack.sweep(plan["batches"], ctx, cuda_graph=on_gpu, min_run_time=mrt,
                               progress=progress)
            if on_gpu:  # the same batch-1 step without CUDA graphs: launch overhead
                rows = pd.concat([rows, pd.DataFrame([stack.measure(
                    1, ctx, cuda_graph=False, min_run_time=mrt)])], ignore_index=True)
            frames.append(_reference.tidy(rows, "decode", env))
        else:
            rows = [stack.measure(1, ctx, cuda_graph=on_gpu, min_run_time=mrt)]
            for kernel in [k for k in _decoding.KERNELS if k != "dense"]:
                if not _decoding.kernel_available(kernel, device):
                    print(f"  {kernel}: no kernel for this device in torch "
                          f"{env['torch']}; skipped")
                    continue
                q = stack.quantised(kernel)
                rows.append(q.measure(1, ctx, cuda_graph=on_gpu, min_run_time=mrt))
                del q
            del stack
            frames.append(_reference.tidy(rows, "quantised", env))
    return pd.concat([f for f in frames if not f.empty], ignore_index=True)


def summary(df) -> str:
    """A short table of a run: the rows a reader compares with the targets."""
    from .book import si

    lines = [f"{'measurement':<44} {'achieved':>14} {'ceiling':>14} {'fraction':>9}"]

    def add(name, row):
        unit = row["unit"]
        lines.append(f"{name:<44} {si(row['value'], unit):>14} "
                     f"{si(row['ceiling'], unit):>14} {row['fraction_of_ceiling']:>9.0%}")

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
        add(f"quantised step, {row['kernel']}", row)
    return "\n".join(lines)


def bench_command(args) -> int:
    from . import bench as _bench
    from . import hardware as _hardware
    from . import reference as _reference
    from .book import si

    import torch

    sizes = args.sizes or ("quick" if args.quick else "full")
    if args.threads is not None:
        if args.threads < 1:
            raise SystemExit(f"--threads must be a positive integer, got {args.threads}")
        torch.set_num_threads(args.threads)
    device = _bench._device(args.device)
    env = _bench.environment(device)
    acc = _bench.accelerator_for(device)
    print(f"device: {env['device']} (catalogue entry: {acc.name}; torch {env['torch']}; "
          f"{env['cpu_threads']} CPU thread(s))")
    print(f"datasheet: {si(acc.bandwidth, 'B/s')}, "
          + ", ".join(f"{d} {si(v, 'FLOP/s')}" for d, v in acc.peaks.items()))
    if device.type == "cpu":
        print("No GPU: measuring this CPU in fp32. Ceilings are those of the catalogue's "
              "reference CPU, not of this machine.")
    df = run_bench(sizes, device, progress=not args.no_progress)
    out = args.out or f"gpuinfer-bench-{_reference.default_filename(env)}"
    path = _reference.save(df, out)
    print(summary(df))
    print(f"{len(df)} rows written to {path}")
    del _hardware
    return 0


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
    args = parser.parse_args(argv)
    if args.command == "strip":
        n = strip(args.paths)
        print(f"stripped {n} notebook(s)")
    elif args.command == "bench":
        import torch

        threads = torch.get_num_threads()
        try:
            return bench_command(args)
        finally:
            torch.set_num_threads(threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
