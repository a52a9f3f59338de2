"""Sharing one GPU by MIG slices: which slice a model needs. `mig_options` lists every
profile of a GPU with the batch it holds and its decode step time; `smallest_mig_profile`
picks the first that meets a time per output token.

The decision rests on what an engine achieves (`achievable.decode_step_s` on the slice:
the fitted fractions of its bandwidth and peak, the kernel gaps and the fixed cost a
step), the roofline's step beside; `achievable=False` decides on the ceiling instead.
The achievable model is calibrated on whole GPUs: on a slice it is an extrapolation (no
published MIG measurement is in the package).

Chapter: *Serving systems and sharing a GPU*. Seconds, SI units.
"""

from __future__ import annotations

import math

import numpy as np

from gpuinfer.predict import achievable as _achievable
from gpuinfer.hardware import mig_slices
from gpuinfer.predict import llm as _llm
from gpuinfer import validate as _v


def _flag(name, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True (the achievable model) or False (the "
                        f"roofline), got {value!r}")
    return bool(value)


def mig_options(model, options=None, *, accelerator, batch, context, dtype="fp16",
                compute_dtype=None, achievable=True):
    """Chapter *Serving systems and sharing a GPU*: the MIG profiles `options` of
    `accelerator` (None: every one, the `+me` media variants left out), smallest first (fewest compute slices, then fewest
    memory slices), as a DataFrame indexed by profile, with columns:

      compute_fraction, memory_fraction: the profile's share of the GPU's SMs and of its
        memory (and bandwidth), from `hardware.mig_profiles`;
      max_instances: how many of that profile one GPU holds;
      max_batch: the most sequences of `context` tokens it holds in `dtype`
        (`llm.max_batch` on `hardware.mig_slice`, `llm.DEFAULT_RESERVE_BYTES` held back);
      tpot_s: seconds of a decode step at `batch` on the achievable model
        (`achievable.decode_step_s` on the slice), each sequence's time per output token;
      tpot_ceiling_s: the same on the roofline (`llm.decode_step_s`).

    Both times are NaN where `batch` does not fit. `compute_dtype`: the format the
    matmuls run in (`"fp8"` with `dtype="fp8"`: FP8 W8A8; default the weights' own
    arithmetic, `dtypes.formats`). `achievable=False`: `tpot_s` is the ceiling too."""
    import pandas as pd

    b = _v.count("batch", batch, maximum=1 << 30)
    use_achievable = _flag("achievable", achievable)
    profiles = mig_slices.mig_profiles(accelerator)
    if options is not None:
        keep = _v.each("options", options, lambda name, x: _v.choice(name, x, list(profiles.index)))
    rows = []
    for name, p in profiles.iterrows():
        if (name.endswith("+me") if options is None else name not in keep):
            continue
        part = mig_slices.mig_slice(accelerator, name)
        fits = _llm.max_batch(model, part, context, dtype)
        ceiling = (float(_llm.decode_step_s(model, part, b, context, dtype,
                                               compute_dtype=compute_dtype))
                   if fits >= b else math.nan)
        tpot = (float(_achievable.decode_step_s(model, part, b, context, dtype,
                                                compute_dtype=compute_dtype))
                if use_achievable and fits >= b else ceiling)
        rows.append({"profile": name, "compute_fraction": p["compute_fraction"],
                     "memory_fraction": p["memory_fraction"],
                     "max_instances": int(p["max_instances"]), "max_batch": int(fits),
                     "tpot_s": tpot, "tpot_ceiling_s": ceiling})
    table = pd.DataFrame(rows).set_index("profile")
    return table.sort_values(["compute_fraction", "memory_fraction"], kind="stable")


def smallest_mig_profile(model, accelerator, batch, context, tpot_s, dtype="fp16", *,
                         compute_dtype=None, achievable=True):
    """The first profile of `mig_options` that holds `batch` sequences and meets a time
    per output token of `tpot_s` seconds, on the achievable model (`achievable=False`:
    on the roofline); None if no profile does."""
    limit = _v.positive("tpot_s", tpot_s)
    table = mig_options(model, accelerator=accelerator, batch=batch, context=context, dtype=dtype,
                        compute_dtype=compute_dtype, achievable=achievable)
    ok = table[table["tpot_s"] <= limit]
    return ok.index[0] if len(ok) else None
