"""A pytest plugin: what nbval executed, the book build does not execute again.

`make test` runs every notebook under nbval, then builds the book, whose notebooks
`_config.yml` executes in `cache` mode (myst-nb through jupyter-cache). Without this
plugin each notebook runs twice. With it, once nbval has run every code cell of a notebook
without a failure, the outputs it collected are stored in the book's jupyter-cache
(`_build/.jupyter_cache`, Jupyter Book 1's default), keyed as myst-nb keys them (the code
cells' sources and metadata, and the kernelspec), so the build finds a match and renders
those outputs instead of executing the notebook. A notebook with a failing, skipped or
timed-out cell is not stored: the build executes it itself, as before.

Loaded with `-p tests.plugins.nbval_cache` (the Makefile's `notebooks` target); the cache
folder can be moved with NBVAL_JUPYTER_CACHE.
"""

from __future__ import annotations

import copy
import fcntl
import os
import pathlib
import time

import pytest

_ROOT = pathlib.Path(__file__).resolve().parents[2]
_STARTED: dict[str, float] = {}


def cache_path() -> pathlib.Path:
    return pathlib.Path(os.environ.get("NBVAL_JUPYTER_CACHE", _ROOT / "_build" / ".jupyter_cache"))


def _is_cell(item) -> bool:
    return type(item).__name__ == "IPyNbCell" and hasattr(item, "test_outputs")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if _is_cell(item) and call.when == "call":
        report = outcome.get_result()
        item.parent._nbcache_ok = getattr(item.parent, "_nbcache_ok", True) and report.passed


def pytest_runtest_setup(item):
    if _is_cell(item):
        _STARTED.setdefault(str(item.parent.fspath), time.perf_counter())


def executed_notebook(cells, nb):
    """`nb` (as nbval read it) with each code cell's outputs replaced by what nbval
    collected: `cells` are nbval's items in order. Returns None if any cell did not run."""
    import nbformat

    out = copy.deepcopy(nb)
    code = [c for c in out.cells if c.cell_type == "code"]
    if len(code) != len(cells) or any(item.test_outputs is None for item in cells):
        return None
    for count, (cell, item) in enumerate(zip(code, cells), start=1):
        outputs = []
        for o in item.test_outputs:
            o = nbformat.from_dict(copy.deepcopy(dict(o)))
            if o.output_type == "execute_result":
                o.execution_count = count
            outputs.append(o)
        cell.outputs = outputs
        cell.execution_count = count
    nbformat.validate(out)
    return out


def store(nb, path, seconds) -> None:
    """Put an executed notebook into the jupyter-cache the book build reads, under a file
    lock (nbval's xdist workers finish notebooks at the same time)."""
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    folder = cache_path()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / ".jupyter_cache.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        get_cache(str(folder)).cache_notebook_bundle(
            CacheBundleIn(nb, str(path), data={"execution_seconds": seconds}),
            check_validity=False, overwrite=True)


def pytest_runtest_teardown(item, nextitem):
    if not _is_cell(item) or (nextitem is not None and nextitem.parent is item.parent):
        return
    parent = item.parent
    if not getattr(parent, "_nbcache_ok", False) or parent.timed_out:
        return
    cells = [i for i in parent.session.items if i.parent is parent]
    try:
        nb = executed_notebook(cells, parent.nb)
        if nb is not None:
            seconds = time.perf_counter() - _STARTED.get(str(parent.fspath), time.perf_counter())
            store(nb, pathlib.Path(str(parent.fspath)), seconds)
    except Exception as exc:  # the book build executes the notebook itself
        print(f"\nnbval_cache: {parent.fspath} not cached ({type(exc).__name__}: {exc})")
