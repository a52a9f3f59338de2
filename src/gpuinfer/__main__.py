"""Command line: `python -m gpuinfer COMMAND`.

    strip PATH...   strip outputs and execution counts from notebooks (in place)
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="gpuinfer", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p_strip = sub.add_parser("strip", help="strip outputs from notebooks")
    p_strip.add_argument("paths", nargs="+")
    args = parser.parse_args(argv)
    if args.command == "strip":
        n = strip(args.paths)
        print(f"stripped {n} notebook(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
