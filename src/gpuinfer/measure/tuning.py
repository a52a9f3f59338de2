"""Kernel auto-tuning: `autotune` times equivalent implementations with `bench.time_fn`,
checks they agree, and picks the fastest (TensorRT does this per layer when it builds an
engine; it calls the candidates tactics).

Chapter: *Serving systems and sharing a GPU*. Seconds.
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

import torch

from gpuinfer import validate as _v


def autotune(candidates: Mapping[str, Callable], *, device=None, min_run_s=None,
             rtol=1e-3, atol=1e-4, num_threads=None):
    """Time each equivalent implementation (`{name: fn}`, each called with no arguments)
    with `bench.time_fn` and return a DataFrame, fastest first: `candidate`,
    `seconds` (median), `iqr_s` (the spread of its timed blocks), `speedup_vs_slowest`,
    and `tie_with_fastest`: True where the gap to the fastest median is within the larger
    of the two IQRs (noise, not a better kernel). The outputs must agree
    (torch.allclose with `rtol`, `atol`), or ValueError names the one that differs.
    `num_threads`: CPU threads for the timing (`bench.time_fn`); one thread on a shared
    machine keeps threads from waiting on each other."""
    import pandas as pd

    from gpuinfer.measure import bench as _bench

    if not isinstance(candidates, Mapping):
        raise TypeError(f"candidates must be a mapping {{name: fn}}, got {type(candidates).__name__}")
    if not candidates:
        raise ValueError("candidates is empty: give {name: fn} of equivalent implementations")
    for name, fn in candidates.items():
        _v.callable_(f"candidates[{name!r}]", fn)
    names = list(candidates)
    reference = candidates[names[0]]()
    for name in names[1:]:
        out = candidates[name]()
        if out.shape != reference.shape or not torch.allclose(out.float(), reference.float(),
                                                               rtol=rtol, atol=atol):
            raise ValueError(f"candidate {name!r} does not compute what {names[0]!r} "
                             f"computes (rtol={rtol}, atol={atol}): not an equivalent kernel")
    rows = []
    for name in names:
        t = _bench.time_fn(candidates[name], device=device, min_run_s=min_run_s,
                           num_threads=num_threads)
        rows.append({"candidate": name, "seconds": t.median_s, "iqr_s": t.iqr_s})
    df = pd.DataFrame(rows).sort_values("seconds", kind="stable").reset_index(drop=True)
    df["speedup_vs_slowest"] = df["seconds"].max() / df["seconds"]
    best, best_iqr = df.loc[0, "seconds"], df.loc[0, "iqr_s"]
    df["tie_with_fastest"] = (df["seconds"] - best) <= np.maximum(df["iqr_s"], best_iqr)
    return df
