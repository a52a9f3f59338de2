"""Command line: `python -m gpuinfer COMMAND`.

    strip PATH...   strip outputs and execution counts from notebooks (in place)
    bench [--quick | --sizes tiny|quick|full] [--out FILE] [--device D] [--threads N]
                    run the labs' measurements on this machine (weight reads, matmul
                    sweep, decode step at several batches, quantised weights) and write
                    one tidy CSV that `gpuinfer.measure.reference.load` reads
    gpu-check [--out-dir DIR] [--no-labs] [--report [PATH]] [--estimate GPU]
                    on a machine with an NVIDIA GPU: `bench` (full) written to
                    --out-dir (default gpu-check-out/; never over the shipped reference
                    runs), every lab of the checkout (each in a fresh kernel, its
                    Colab/Kaggle install cell skipped), the dry-run report
                    (workshop/dry_run.md: the version and commit measured, each lab's wall
                    time, key numbers and failures; `--report PATH` elsewhere), and one
                    table of the targets, each derived from what the same card was
                    published to reach (gpu_check.card_targets: reads, large fp16 matmuls,
                    batch-1 decode), every miss explained. Without one: the tiny
                    plan on the CPU, and exit 0; with `--report` also every lab on the
                    CPU and the report, headed as a CPU run. `--estimate H200` prints the full plan's
                    estimated run time on a catalogue GPU and exits.
    release VERSION [--notebooks-only] [--root DIR]
                    cut a release (CONTRIBUTING.md, "Cutting a release"): set VERSION
                    (MAJOR.MINOR.PATCH) in pyproject.toml and gpuinfer/__init__.py, pin
                    every notebook's Colab/Kaggle setup cell to the tag v<VERSION>, and
                    print the git commands to commit, tag, build the wheel and push.
                    `release main` puts the cells back to @main after the tag;
                    `release <full commit SHA>` pins the cells to that commit (a fork's
                    room with no tag), with no version change.

The steps live in `gpuinfer.course.bench_suite` (what bench measures) and `gpuinfer.course.gpu_check`
(the labs, the targets, the dry-run report); this file parses arguments and calls them.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from gpuinfer.course.bench_suite import (SIZES, bench_plan, measure_plan, print_device,
                                         print_estimate, summary, tidy_stages)
from gpuinfer.course.gpu_check import DRY_RUN_REPORT, GPU_CHECK_BUDGET_S
from gpuinfer.course.gpu_check import read_report  # noqa: F401 - the workshop notes import it from here
from gpuinfer.course.gpu_check import run as gpu_check


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


def bench_command(args) -> int:
    """`python -m gpuinfer bench`: the plan at the asked size, measured, saved, summarised."""
    import torch

    from gpuinfer.measure import torch_device as _device
    from gpuinfer.measure import reference as _reference

    sizes = args.sizes or ("quick" if args.quick else "full")
    if args.threads is not None:
        if args.threads < 1:
            raise SystemExit(f"--threads must be a positive integer, got {args.threads}")
        torch.set_num_threads(args.threads)
    device = _device.resolve(args.device, "--device")
    env, acc = print_device(device)
    plan = bench_plan(device, sizes)
    print_estimate(plan, acc)
    stages = measure_plan(plan, device, progress=not args.no_progress)
    df = tidy_stages(stages, env)
    out = args.out or f"gpuinfer-bench-{_reference.default_filename(env)}"
    path = _reference.save(df, out)
    print(summary(df))
    print("stage wall times: " + ", ".join(f"{k} {s.seconds:.1f} s" for k, s in stages.items()))
    print(f"{len(df)} rows written to {path}")
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
    p_release = sub.add_parser("release", help="set the version and pin every notebook's "
                               "setup cell to its tag ('main' unpins)")
    p_release.add_argument("version", help="MAJOR.MINOR.PATCH, 'main', or a full commit SHA")
    p_release.add_argument("--notebooks-only", action="store_true",
                           help="pin the notebooks, leave the version alone")
    p_release.add_argument("--root", default=".", help="the checkout (default: here)")
    args = parser.parse_args(argv)
    if args.command == "release":
        from gpuinfer.course import release

        try:
            steps = release.cut(args.root, args.version, notebooks_only=args.notebooks_only)
        except (TypeError, ValueError, FileNotFoundError) as error:
            raise SystemExit(f"release: {error}") from None
        print("\n".join(["Next:"] + steps))
    elif args.command == "strip":
        n = strip(args.paths)
        print(f"stripped {n} notebook(s)")
    elif args.command == "gpu-check" and args.estimate:
        total = print_estimate(bench_plan("cuda", "full", accelerator=args.estimate),
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
