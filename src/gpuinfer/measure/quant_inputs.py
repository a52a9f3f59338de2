"""What the quantisers (`gpuinfer.measure.quant`, `gpuinfer.measure.float_formats`) take in, checked by
`gpuinfer.validate`'s policy: a numpy array or torch tensor of finite numbers (read as
float64 on the CPU; torch is not imported), an axis, a group or block size.
"""

from __future__ import annotations

import numpy as np

from gpuinfer import validate as _v


def is_torch(x) -> bool:
    """Whether `x` is a torch object (a tensor), told without importing torch."""
    return type(x).__module__.split(".")[0] == "torch"


def finite_array(x, name="x") -> np.ndarray:
    """`x` as a finite, non-empty float64 numpy array (a torch tensor is copied to the
    CPU); TypeError for what is not numbers, ValueError for NaN, inf or no elements."""
    if is_torch(x):
        if x.is_complex() or str(x.dtype) == "torch.bool":
            raise TypeError(f"{name} must hold real numbers, got a tensor of {x.dtype}")
        arr = x.detach().to("cpu").double().numpy()
    else:
        if x is None or isinstance(x, (str, bytes, dict, set)):
            raise TypeError(f"{name} must be an array or tensor of numbers, got {x!r}")
        try:
            arr = np.asarray(x)
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be an array or tensor of numbers, "
                            f"got {type(x).__name__}") from None
        if arr.dtype.kind not in "iuf":
            raise TypeError(f"{name} must be an array or tensor of numbers, "
                            f"got dtype {arr.dtype}")
        arr = arr.astype(np.float64, copy=False)
    if arr.size == 0:
        raise ValueError(f"{name} is empty: it must hold at least one number")
    if not np.all(np.isfinite(arr)):
        bad = int(np.sum(~np.isfinite(arr)))
        raise ValueError(f"{name} holds {bad} NaN or infinite value(s): quantise finite "
                         "numbers only (a NaN would silently become some integer)")
    return arr


def normalise_axis(axis, ndim):
    """`axis` as an index in 0..ndim-1 (negative counts from the end), or None."""
    if axis is None:
        return None
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis must be an integer or None, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for a tensor with {ndim} dimensions")
    return int(axis) % ndim


def check_granularity(shape, axis, group_size, block_word="group_size"):
    """`group_size` checked against a tensor of `shape` (a whole number dividing its last
    dimension, and not given with `axis`), or None; `block_word` names it in errors."""
    if group_size is None:
        return None
    if axis is not None:
        raise ValueError(f"give axis (per-channel) or {block_word} (group-wise), not both: "
                         "groups already run along the last axis, one scale per row")
    group_size = _v.count(block_word, group_size)
    if len(shape) == 0 or shape[-1] % group_size:
        raise ValueError(f"{block_word} {group_size} must divide the last dimension "
                         f"of shape {tuple(shape)}")
    return group_size

