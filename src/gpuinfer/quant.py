"""Quantisation: integer grids with scales, low-precision float formats with block scales,
calibration, SmoothQuant and error metrics.

Chapter: *Quantisation*; lab: *Quantised weights*. Works on numpy arrays and torch
tensors (a torch tensor stays on its device; calibration by percentile or entropy, the
float formats and SmoothQuant run on the CPU in float64).

Integers (`quantize`, `dequantize`, `fake_quantize`):

    q     = clip(round(x / scale) + zero_point, qmin, qmax)      (integers)
    x_hat = (q - zero_point) * scale                             (dequantised)

- `symmetric=True`: zero_point = 0 and the *restricted* signed range
  [-(2**(bits-1) - 1), 2**(bits-1) - 1] (int8: -127..127; TensorRT's weight scale
  amax / 127 puts weights on the same grid), so +a and -a quantise to +-q alike;
  scale = amax / qmax.
- `symmetric=False`: unsigned range [0, 2**bits - 1] and a zero point, so a one-sided
  range (after a ReLU) uses every level; the range is widened to include 0 so that 0 is
  exactly representable; scale = (hi - lo) / (qmax - qmin).
- Granularity: per tensor (`axis=None`), per channel (`axis=k`: one scale per index
  along axis k; for activations [tokens, features], `axis=0` is one scale per token:
  dynamic per-token quantisation) or group-wise (`group_size=g`: one scale per g
  consecutive elements along the last axis). A grouped scale has shape
  x.shape[:-1] + (n_groups,).
- Calibration picks the clipping range: "minmax", "percentile", "entropy" (TensorRT's
  histogram search minimising the KL divergence, 2048 bins by default and at most
  `MAX_ENTROPY_BINS`: the search grows with the square of the bins).

Floats (`fake_quantize_float`): round to nearest, ties to even, onto the grid of
fp8_e4m3 (max 448), fp8_e5m2 (max 57,344) or fp4_e2m1 (0, 0.5, 1, 1.5, 2, 3, 4, 6),
subnormals included, saturating at the format's maximum; optionally scaled per tensor,
per channel or per block, with scales stored in fp32, E8M0 (powers of two: MXFP4, OCP
Microscaling Formats v1.0) or E4M3 under one fp32 scale per tensor (NVFP4).

Format names are `gpuinfer.dtypes` names (`dtypes.canonical`): "fp8" is fp8_e4m3, "fp4"
is fp4_e2m1; `FORMATS` lists the formats `dtypes` knows that store values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import dtypes as _dtypes
from . import validate as _v

METHODS = ("minmax", "percentile", "entropy")
MIN_BITS, MAX_BITS = 2, 16
DEFAULT_PERCENTILE = 99.99
DEFAULT_ENTROPY_BINS = 2048   # TensorRT's legacy entropy calibrator
MAX_ENTROPY_BINS = 8192       # the threshold search costs ~num_bins**2 / 2 bin operations


# --- argument checks (gpuinfer.validate's policy) ----------------------------------------

def _bits(bits) -> int:
    return _v.count("bits", bits, minimum=MIN_BITS, maximum=MAX_BITS)


def _flag(name, value) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def _is_torch(x) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def _numpy(x, name="x") -> np.ndarray:
    """`x` as a finite, non-empty float64 numpy array (a torch tensor is copied to the
    CPU); TypeError for what is not numbers, ValueError for NaN, inf or no elements."""
    if _is_torch(x):
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


# --- integer ranges ----------------------------------------------------------------------

def qrange(bits=8, symmetric=True) -> tuple[int, int]:
    """(qmin, qmax) of the integer grid: symmetric 8 bits -> (-127, 127) (restricted
    range, zero point 0); asymmetric 8 bits -> (0, 255)."""
    bits = _bits(bits)
    if _flag("symmetric", symmetric):
        top = 2 ** (bits - 1) - 1
        return -top, top
    return 0, 2**bits - 1


def ideal_sqnr_db(bits, signal="sine") -> float:
    """Textbook signal-to-quantisation-noise ratio of a b-bit uniform quantiser driven at
    full scale, in dB: 6.02 b + 1.76 for a sine, 6.02 b for a uniformly distributed
    signal (noise power step**2 / 12). 8 bits, sine: 49.92 dB."""
    bits = _bits(bits)
    signal = _v.choice("signal", signal, ("sine", "uniform"))
    per_bit = 20 * math.log10(2)  # 6.0206 dB
    if signal == "sine":
        return per_bit * bits + 10 * math.log10(1.5)  # + 1.7609 dB
    return per_bit * bits


def _int_dtype(bits, symmetric, torch_like):
    if torch_like:
        import torch

        if symmetric:
            return torch.int8 if bits <= 8 else torch.int16
        return torch.uint8 if bits <= 8 else torch.int32
    if symmetric:
        return np.int8 if bits <= 8 else np.int16
    return np.uint8 if bits <= 8 else np.int32


# --- granularity ----------------------------------------------------------------------------

def _normalise_axis(axis, ndim):
    if axis is None:
        return None
    if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis must be an integer or None, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for a tensor with {ndim} dimensions")
    return int(axis) % ndim


def _rows(arr: np.ndarray, axis, group_size):
    """`arr` as [n_scales, elements per scale] for the chosen granularity."""
    if group_size is not None:
        return arr.reshape(-1, group_size)
    if axis is None:
        return arr.reshape(1, -1)
    return np.moveaxis(arr, axis, 0).reshape(arr.shape[axis], -1)


def _scale_shape(shape, axis, group_size):
    if group_size is not None:
        return tuple(shape[:-1]) + (shape[-1] // group_size,)
    if axis is None:
        return ()
    return tuple(n if i == axis else 1 for i, n in enumerate(shape))


def _check_granularity(shape, axis, group_size, block_word="group_size"):
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


# --- calibration ------------------------------------------------------------------------------

def _calibration_rows(calibration, shape, axis):
    """The calibration set as rows matching the granularity of a tensor of `shape`."""
    batches = calibration if isinstance(calibration, (list, tuple)) else [calibration]
    if not batches:
        raise ValueError("calibration is an empty list; pass at least one array")
    rows = []
    for b in batches:
        arr = _numpy(b, "calibration")
        if axis is None:
            rows.append(arr.reshape(1, -1))
            continue
        # Channels are matched by position from the end (activations: [..., features]).
        cal_axis = axis - len(shape)
        if arr.ndim < len(shape) - axis or arr.shape[cal_axis] != shape[axis]:
            raise ValueError(f"calibration array of shape {arr.shape} does not have the "
                             f"{shape[axis]} channels of axis {axis} of shape {tuple(shape)}")
        rows.append(np.moveaxis(arr, cal_axis, 0).reshape(shape[axis], -1))
    return np.concatenate(rows, axis=1)


def _entropy_threshold(values: np.ndarray, bits: int, num_bins: int) -> float:
    """TensorRT's entropy calibration for one channel: the |x| threshold whose clipped
    histogram P is closest (KL divergence) to its quantised version Q. `values` are
    finite (checked by the caller)."""
    absx = np.abs(values)
    amax = float(absx.max()) if absx.size else 0.0
    if amax == 0.0:
        return 0.0
    levels = 2 ** (bits - 1)  # positive half of the grid (128 for int8, as TensorRT)
    hist, edges = np.histogram(absx, bins=num_bins, range=(0.0, amax))
    hist = hist.astype(np.float64)
    tail = np.concatenate([np.cumsum(hist[::-1])[::-1], [0.0]])  # tail[i] = hist[i:].sum()
    best_i, best_kl = num_bins, math.inf
    for i in range(levels, num_bins + 1):
        p = hist[:i].copy()
        p[-1] += tail[i]  # values beyond the threshold are clipped into the last bin
        sliced = hist[:i]
        # Merge the i bins into `levels` quantised bins, then spread each merged count
        # evenly over the source bins that were non-empty.
        starts = (np.arange(levels) * i) // levels
        nonzero = (sliced > 0).astype(np.float64)
        merged = np.add.reduceat(sliced, starts)
        counts = np.add.reduceat(nonzero, starts)
        per_bin = np.divide(merged, counts, out=np.zeros_like(merged), where=counts > 0)
        q = np.repeat(per_bin, np.diff(np.append(starts, i))) * nonzero
        p_sum, q_sum = p.sum(), q.sum()
        if q_sum == 0:
            continue
        p /= p_sum
        q /= q_sum
        mask = p > 0
        # Q is zero only where the source bin was empty; p > 0 there only in the last
        # bin (the clipped tail). Smooth like TensorRT rather than return infinity.
        qm = np.maximum(q[mask], 1e-12)
        kl = float(np.sum(p[mask] * np.log(p[mask] / qm)))
        if kl < best_kl:
            best_kl, best_i = kl, i
    return float(edges[best_i]) if best_i < num_bins else amax


def _shape_of(x):
    if _is_torch(x) or isinstance(x, np.ndarray):
        return tuple(x.shape)
    return np.shape(_numpy(x))


def calibrate(x, bits=8, axis=None, symmetric=True, method="minmax", *, group_size=None,
              calibration=None, percentile=DEFAULT_PERCENTILE,
              num_bins=DEFAULT_ENTROPY_BINS):
    """The clipping range (lo, hi) as numpy arrays of shape [n_scales] for each scale of
    `x`'s granularity, from `x` or from the `calibration` set (an array, or a list of
    batches, with the same channels along `axis`). Same units as x.

    `percentile` in (0, 100]; `num_bins` (entropy) from 2**(bits-1) to MAX_ENTROPY_BINS.
    NaN or infinite values are refused for every method."""
    bits = _bits(bits)
    symmetric = _flag("symmetric", symmetric)
    method = _v.choice("method", method, METHODS)
    on_device = _is_torch(x) and calibration is None and method == "minmax"
    xa = x if on_device else _numpy(x)
    shape = tuple(xa.shape)
    axis = _normalise_axis(axis, len(shape))
    group_size = _check_granularity(shape, axis, group_size)
    if method == "entropy" and not symmetric:
        raise ValueError("entropy calibration is TensorRT's symmetric method: use "
                         "symmetric=True, or method 'minmax' / 'percentile'")
    percentile = _v.number("percentile", percentile, lo=0, lo_open=True, hi=100,
                           expected="a percentile in (0, 100] (99.99, not 0.9999)")
    if method == "entropy":
        num_bins = _v.count("num_bins", num_bins, minimum=2 ** (bits - 1),
                            maximum=MAX_ENTROPY_BINS,
                            why_maximum="the threshold search grows with the square of "
                                        "the bins (TensorRT uses 2048)")
    if calibration is not None and group_size is not None:
        raise ValueError("group-wise scales come from the tensor itself (weights); a "
                         "calibration set is for per-tensor or per-channel ranges")

    if on_device:
        # A torch weight's extremes, on its device: check it is finite there.
        import torch

        if x.numel() == 0:
            raise ValueError("x is empty: it must hold at least one number")
        if not bool(torch.isfinite(x).all()):
            raise ValueError("x holds NaN or infinite values: quantise finite numbers only")
        rows = _torch_rows(x, axis, group_size)
        return (rows.amin(dim=1).double().cpu().numpy(),
                rows.amax(dim=1).double().cpu().numpy())
    rows = _rows(xa, axis, group_size) if calibration is None else \
        _calibration_rows(calibration, shape, axis)
    if rows.shape[1] == 0:
        raise ValueError("cannot calibrate on an empty tensor")
    if method == "minmax":
        return rows.min(axis=1), rows.max(axis=1)
    if method == "percentile":
        if symmetric:
            hi = np.percentile(np.abs(rows), percentile, axis=1)
            return -hi, hi
        return (np.percentile(rows, 100 - percentile, axis=1),
                np.percentile(rows, percentile, axis=1))
    hi = np.array([_entropy_threshold(r, bits, num_bins) for r in rows])
    return -hi, hi


def _torch_rows(x, axis, group_size):
    if group_size is not None:
        return x.reshape(-1, group_size)
    if axis is None:
        return x.reshape(1, -1)
    return x.movedim(axis, 0).reshape(x.shape[axis], -1)


def scale_zero_point(lo, hi, bits=8, symmetric=True):
    """Scale (units of x per integer step) and integer zero point for the range [lo, hi]
    (numbers or arrays of the same length; lo <= hi, both finite). A range of width 0
    gets scale 1, so that zeros stay zeros."""
    qmin, qmax = qrange(bits, symmetric)
    lo = _v.number("lo", lo, array=True, expected="a finite number (or an array of them)")
    hi = _v.number("hi", hi, array=True, expected="a finite number (or an array of them)")
    lo, hi = _v.same_shape(lo=lo, hi=hi)
    if np.any(lo > hi):
        first = int(np.flatnonzero(np.ravel(lo > hi))[0])
        raise ValueError(f"lo must be <= hi, got lo={np.ravel(lo)[first]:g} > "
                         f"hi={np.ravel(hi)[first]:g} (an inverted range)")
    if symmetric:
        amax = np.maximum(np.abs(lo), np.abs(hi))
        scale = np.where(amax > 0, amax / qmax, 1.0)
        return scale, np.zeros_like(scale, dtype=np.int64)
    lo, hi = np.minimum(lo, 0.0), np.maximum(hi, 0.0)
    scale = np.where(hi > lo, (hi - lo) / (qmax - qmin), 1.0)
    zero_point = np.clip(np.round(qmin - lo / scale), qmin, qmax).astype(np.int64)
    return scale, zero_point


# --- quantise / dequantise ----------------------------------------------------------------------

def quantize(x, bits=8, axis=None, symmetric=True, method="minmax", *, group_size=None,
             calibration=None, percentile=DEFAULT_PERCENTILE, num_bins=DEFAULT_ENTROPY_BINS):
    """Quantise `x` (numpy array or torch tensor) to `bits`-bit integers.

    Returns (q, scale, zero_point): q has x's shape and an integer dtype (int8 for
    symmetric, uint8 for asymmetric, up to 8 bits); scale (float32, units of x per step)
    and zero_point (integer) have shape () per tensor, x's shape with 1s except along
    `axis` per channel, or x.shape[:-1] + (n_groups,) group-wise. Torch in, torch out
    (on x's device); numpy in, numpy out. See the module docstring for the options.
    """
    torch_like = _is_torch(x)
    if not torch_like:
        x = _numpy(x)
    elif not x.is_floating_point():
        x = x.float()
    shape = tuple(x.shape)
    axis_n = _normalise_axis(axis, len(shape))
    lo, hi = calibrate(x, bits, axis_n, symmetric, method, group_size=group_size,
                       calibration=calibration, percentile=percentile, num_bins=num_bins)
    scale, zero_point = scale_zero_point(lo, hi, bits, symmetric)
    sshape = _scale_shape(shape, axis_n, group_size)
    scale = scale.reshape(sshape).astype(np.float32)
    zero_point = zero_point.reshape(sshape)
    qmin, qmax = qrange(bits, symmetric)
    int_dtype = _int_dtype(bits, symmetric, torch_like)
    if torch_like:
        import torch

        s = torch.as_tensor(scale, dtype=torch.float32, device=x.device)
        z = torch.as_tensor(zero_point, dtype=torch.float32, device=x.device)
        xs = x.float()
        if group_size is not None:
            xs = xs.reshape(*shape[:-1], -1, group_size)
            s, z = s.unsqueeze(-1), z.unsqueeze(-1)
        q = torch.clamp(torch.round(xs / s) + z, qmin, qmax).reshape(shape).to(int_dtype)
        return q, s.reshape(sshape), torch.as_tensor(zero_point, dtype=int_dtype,
                                                     device=x.device)
    s, z = scale.astype(np.float64), zero_point.astype(np.float64)
    xs = x
    if group_size is not None:
        xs = x.reshape(*shape[:-1], -1, group_size)
        s, z = s[..., None], z[..., None]
    q = np.clip(np.round(xs / s) + z, qmin, qmax).reshape(shape).astype(int_dtype)
    return q, scale, zero_point.astype(int_dtype)


def _integer_array(name, a):
    """numpy view of an integer array or tensor; TypeError for floats."""
    if _is_torch(a):
        if a.is_floating_point() or a.is_complex() or str(a.dtype) == "torch.bool":
            raise TypeError(f"{name} must hold integers (quantize's output), got a tensor "
                            f"of {a.dtype}")
        return a.detach().to("cpu").numpy()
    arr = np.asarray(a)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers (quantize's output), got dtype "
                        f"{arr.dtype}")
    return arr


def dequantize(q, scale, zero_point, dtype=None):
    """x_hat = (q - zero_point) * scale, as float32 (or `dtype`, e.g. torch.float16).
    `q` and `zero_point` hold integers; `scale` is positive and finite. A group-wise
    scale (last dimension n_groups, dividing q's) is expanded over its groups."""
    torch_like = _is_torch(q)
    q_np = _integer_array("q", q)
    if q_np.size == 0:
        raise ValueError("q is empty: it must hold at least one integer")
    scale_np = scale.detach().cpu().double().numpy() if _is_torch(scale) else scale
    _v.positive("scale", scale_np, array=True)
    zp_np = _integer_array("zero_point", zero_point)
    if torch_like:
        import torch

        scale = torch.as_tensor(scale, device=q.device)
        zero_point = torch.as_tensor(zero_point, device=q.device)
    else:
        q, scale, zero_point = q_np, np.asarray(scale), zp_np
    if tuple(scale.shape) != tuple(zero_point.shape):
        raise ValueError(f"scale {tuple(scale.shape)} and zero_point "
                         f"{tuple(zero_point.shape)} must have the same shape")
    if scale.ndim not in (0, q.ndim):
        raise ValueError(f"scale of shape {tuple(scale.shape)} does not fit q of shape "
                         f"{tuple(q.shape)}")
    if scale.ndim and scale.shape[-1] not in (1, q.shape[-1]):
        groups = scale.shape[-1]
        if q.shape[-1] % groups:
            raise ValueError(f"{groups} groups do not divide the last dimension of q "
                             f"{tuple(q.shape)}")
        size = q.shape[-1] // groups
        if torch_like:
            scale = scale.repeat_interleave(size, dim=-1)
            zero_point = zero_point.repeat_interleave(size, dim=-1)
        else:
            scale, zero_point = np.repeat(scale, size, -1), np.repeat(zero_point, size, -1)
    if torch_like:
        out = (q.float() - zero_point.float()) * scale.float()
        return out.to(dtype) if dtype is not None else out
    out = (q.astype(np.float32) - zero_point.astype(np.float32)) * scale.astype(np.float32)
    return out.astype(dtype) if dtype is not None else out


def fake_quantize(x, bits=8, axis=None, symmetric=True, method="minmax", **options):
    """dequantize(quantize(x, ...)): x as the quantised model sees it, in float32."""
    return dequantize(*quantize(x, bits, axis, symmetric, method, **options))


# --- error metrics -----------------------------------------------------------------------------

def _pair(x, x_hat):
    a, b = _numpy(x, "x"), _numpy(x_hat, "x_hat")
    if a.shape != b.shape:
        raise ValueError(f"x {a.shape} and x_hat {b.shape} must have the same shape")
    return a, b


def sqnr_db(x, x_hat) -> float:
    """Signal-to-quantisation-noise ratio, 10 log10(sum x**2 / sum (x - x_hat)**2), in
    dB: +6 dB is half the error amplitude. inf when x_hat == x exactly."""
    a, b = _pair(x, x_hat)
    noise = float(np.sum((a - b) ** 2))
    signal = float(np.sum(a**2))
    if noise == 0:
        return math.inf
    if signal == 0:
        return -math.inf
    return 10 * math.log10(signal / noise)


def max_abs_error(x, x_hat) -> float:
    """Largest |x - x_hat|, in the units of x."""
    a, b = _pair(x, x_hat)
    return float(np.max(np.abs(a - b)))


def mse(x, x_hat) -> float:
    """Mean squared error, in the units of x squared."""
    a, b = _pair(x, x_hat)
    return float(np.mean((a - b) ** 2))


def bytes_per_weight(bits, group_size=None, scale_bytes=2.0, zero_point_bytes=0.0) -> float:
    """Bytes each weight costs in memory, scales included: bits / 8 + (scale_bytes +
    zero_point_bytes) / group_size. gpt-fast's int4 (groups of 32, a bf16 scale and a
    bf16 zero per group): 0.5 + 4 / 32 = 0.625 B, so 3.2x fewer bytes than fp16, not 4x;
    `dtypes`' "int4" (an fp16 scale per 32, no zero) is 0.5625 B.
    `group_size=None`: one scale per row, whose cost is negligible (0 here)."""
    bits = _bits(bits)
    scale_bytes = _v.non_negative("scale_bytes", scale_bytes)
    zero_point_bytes = _v.non_negative("zero_point_bytes", zero_point_bytes)
    group_size = None if group_size is None else _v.count("group_size", group_size)
    # The arithmetic is dtypes' (`Format.bytes_per_element`), for a format of these bits
    # whose per-group overhead is the scale and the zero point together.
    fmt = _dtypes.Format(f"int{bits}", bits, "int", "int4" if bits <= 4 else "int8",
                         block_size=group_size,
                         scale_bits=8 * (scale_bytes + zero_point_bytes))
    return fmt.bytes_per_element


# --- packing int4 ----------------------------------------------------------------------------

def pack_int4(q):
    """Two 4-bit integers per byte (element 2j in the low nibble, 2j+1 in the high one),
    halving the last dimension: what makes int4 weights take 0.5 byte each. Accepts
    integers that are all signed 4-bit (-8..7, two's complement nibbles) or all unsigned
    (0..15); floats and values outside 4 bits are refused. A tensor is checked and packed
    with torch operations on its own device (its minimum and maximum are the only values
    read back; none on `meta`): no copy of the weights to the host."""
    if _is_torch(q):
        return _pack_int4_torch(q)
    arr = _integer_array("q", q)
    _check_pack_shape(arr.shape, arr.size)
    _check_nibbles(int(arr.min()), int(arr.max()))
    nib = (arr.astype(np.int16) & 0xF).astype(np.uint8)
    return nib[..., 0::2] | (nib[..., 1::2] << 4)


def _check_pack_shape(shape, size):
    if len(shape) == 0 or size == 0:
        raise ValueError(f"q must be a non-empty array of 4-bit integers, got shape "
                         f"{tuple(shape)}")
    if shape[-1] % 2:
        raise ValueError(f"q must have an even last dimension to pack pairs, got shape "
                         f"{tuple(shape)}: pad it with a zero")


def _check_nibbles(lo, hi):
    if lo < -8 or hi > 15 or (lo < 0 and hi > 7):
        raise ValueError(f"values must fit in 4 bits: all in -8..7 (signed) or all in "
                         f"0..15 (unsigned); got {lo}..{hi}")


def _pack_int4_torch(q):
    """`pack_int4` of a tensor, on its device (see there)."""
    import torch

    if q.is_floating_point() or q.is_complex() or q.dtype == torch.bool:
        raise TypeError(f"q must hold integers (quantize's output), got a tensor of {q.dtype}")
    _check_pack_shape(tuple(q.shape), q.numel())
    if q.device.type != "meta":
        lo, hi = torch.aminmax(q.detach())  # reduced on the device; two scalars read back
        _check_nibbles(int(lo), int(hi))
    nib = (q.to(torch.int16) & 0xF).to(torch.uint8)
    return nib[..., 0::2] | (nib[..., 1::2] << 4)


def unpack_int4(packed, signed=True):
    """Inverse of `pack_int4`: int8 values (-8..7 if `signed`, else 0..15), last
    dimension doubled. `packed` holds bytes: integers 0..255 (uint8).

    A tensor is unpacked with torch operations on its own device, and a uint8 one is not
    range-checked (every uint8 is a byte): no value is copied to the host, so the unpack
    can run inside a CUDA-graph capture (the int4 kernel of `decoding` does, every step)
    and on `meta` tensors. A tensor of another integer dtype is range-checked, which
    reads its minimum and maximum back from the device."""
    signed = _flag("signed", signed)
    if _is_torch(packed):
        return _unpack_int4_torch(packed, signed)
    arr = _integer_array("packed", packed)
    if arr.ndim == 0 or arr.size == 0:
        raise ValueError(f"packed must be a non-empty array of bytes, got shape {arr.shape}")
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi > 255:
        raise ValueError(f"packed must hold bytes (0..255, as pack_int4 returns), got "
                         f"{lo}..{hi}")
    p = arr.astype(np.uint8)
    out = np.stack([p & 0xF, p >> 4], axis=-1).reshape(*p.shape[:-1], -1)
    out = out.astype(np.int8)
    return np.where(out > 7, out - 16, out).astype(np.int8) if signed else out


def _unpack_int4_torch(packed, signed):
    """`unpack_int4` of a tensor, on its device (see there)."""
    import torch

    if packed.is_floating_point() or packed.is_complex() or packed.dtype == torch.bool:
        raise TypeError(f"packed must hold integers (quantize's output), got a tensor of "
                        f"{packed.dtype}")
    if packed.ndim == 0 or packed.numel() == 0:
        raise ValueError(f"packed must be a non-empty array of bytes, got shape "
                         f"{tuple(packed.shape)}")
    if packed.dtype != torch.uint8 and packed.device.type != "meta":
        lo, hi = int(packed.min()), int(packed.max())  # a host read: not for uint8
        if lo < 0 or hi > 255:
            raise ValueError(f"packed must hold bytes (0..255, as pack_int4 returns), got "
                             f"{lo}..{hi}")
    p = packed.to(torch.uint8)
    low, high = (p & 0xF).to(torch.int8), (p >> 4).to(torch.int8)
    out = torch.stack([low, high], dim=-1).reshape(*p.shape[:-1], -1)
    return torch.where(out > 7, out - 16, out) if signed else out


# --- floating-point grids ----------------------------------------------------------------------

@dataclass(frozen=True)
class FloatGrid:
    """A binary floating-point format as a grid of values: sign, `exponent_bits`
    (bias 2**(exponent_bits-1) - 1), `mantissa_bits`, subnormals, and the largest finite
    value `max_value` (which encodings are kept for NaN/inf differs: E4M3 keeps one NaN
    pattern, so its top is 448 rather than 480; E2M1 keeps none)."""

    name: str
    exponent_bits: int
    mantissa_bits: int
    max_value: float
    source: str = ""

    @property
    def bias(self) -> int:
        return 2 ** (self.exponent_bits - 1) - 1

    @property
    def min_exponent(self) -> int:
        """Exponent of the smallest normal value (also the subnormals' binade)."""
        return 1 - self.bias

    @property
    def max_exponent(self) -> int:
        """Exponent of the largest binade (E2M1: 2, since 6 = 1.5 x 2**2)."""
        return math.floor(math.log2(self.max_value))

    @property
    def min_normal(self) -> float:
        return 2.0 ** self.min_exponent

    @property
    def relative_precision(self) -> float:
        """The gap above 1.0 (machine epsilon): 2**-mantissa_bits."""
        return 2.0 ** -self.mantissa_bits

    def round(self, x: np.ndarray) -> np.ndarray:
        """Round to nearest (ties to even) onto the grid, subnormals included, saturating
        at +-max_value. float64 in, float64 out."""
        mag = np.abs(x)
        _, e2 = np.frexp(mag)                                # mag = m * 2**e2, m in [0.5, 1)
        e = np.maximum(e2 - 1, self.min_exponent)            # binade, never below subnormals
        quantum = np.ldexp(1.0, e - self.mantissa_bits)      # gap between values there
        q = np.round(mag / quantum) * quantum                # numpy rounds half to even
        return np.copysign(np.minimum(q, self.max_value), x)

    def values(self) -> np.ndarray:
        """Every positive finite value, ascending."""
        m = 2**self.mantissa_bits
        sub = np.arange(1, m) * 2.0 ** (self.min_exponent - self.mantissa_bits)
        exps = np.arange(self.min_exponent, self.max_exponent + 1)
        normal = np.outer(2.0**exps, 1 + np.arange(m) / m).ravel()
        allv = np.concatenate([sub, normal])
        return allv[allv <= self.max_value]


_OCP_FP8 = "OCP 8-bit Floating Point Specification (OFP8) rev. 1.0"
_OCP_MX = "OCP Microscaling Formats (MX) v1.0, section 5.3.3 (FP4 E2M1)"
GRIDS = {g.name: g for g in [
    FloatGrid("fp32", 8, 23, (2 - 2.0**-23) * 2.0**127, "IEEE 754 binary32"),
    FloatGrid("fp16", 5, 10, 65504.0, "IEEE 754 binary16"),
    FloatGrid("bf16", 8, 7, (2 - 2.0**-7) * 2.0**127, "bfloat16"),
    FloatGrid("fp8_e4m3", 4, 3, 448.0, _OCP_FP8),
    FloatGrid("fp8_e5m2", 5, 2, 57344.0, _OCP_FP8),
    FloatGrid("fp4_e2m1", 2, 1, 6.0, _OCP_MX),
]}

#: The block formats: (element grid, block size, scale format). MXFP4: OCP MX v1.0
#: (E8M0 power-of-two scale per 32); NVFP4: NVIDIA (E4M3 scale per 16 under one fp32
#: scale per tensor).
BLOCK_FORMATS = {"mxfp4": ("fp4_e2m1", 32, "e8m0"),
                 "nvfp4": ("fp4_e2m1", 16, "fp8_e4m3")}
SCALE_FORMATS = ("fp32", "e8m0", "fp8_e4m3")
_E8M0_MIN_EXP, _E8M0_MAX_EXP = -127, 127   # E8M0: 2**-127 .. 2**127 (0xFF is NaN)


def mx_scale(amax, fmt="fp4_e2m1"):
    """The shared E8M0 scale of an MX block whose largest |value| is `amax` (OCP
    Microscaling Formats v1.0, section 6.3): X = 2**(floor(log2(amax)) - emax_elem), emax
    being the exponent of the element format's largest binade (E2M1: 2, since 6 = 1.5 x
    2**2). The block's largest value then lands in [4, 8) before it is cast, so values
    in (6, 8) saturate at 6. Vectorised; amax = 0 gives the smallest scale, 2**-127."""
    grid = GRIDS[_element_format(fmt)]
    amax = _v.non_negative("amax", amax, array=True)
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - grid.max_exponent
    e = np.where(amax > 0, e, _E8M0_MIN_EXP)
    return _v.scalar_or_array(2.0 ** np.clip(e, _E8M0_MIN_EXP, _E8M0_MAX_EXP))


def nvfp4_scales(block_amax, tensor_amax):
    """NVFP4's two scales (NVIDIA, "Introducing NVFP4"; TensorRT Model Optimizer's
    recipe): one fp32 scale per tensor, s_t = tensor_amax / (6 x 448), which maps the
    largest block scale onto E4M3's maximum; and one E4M3 scale per block of 16,
    s_b = round_E4M3(block_amax / (6 x s_t)). Values are stored as x / (s_b x s_t) in
    E2M1. Returns (s_b, s_t); a zero tensor gets s_t = 1."""
    block_amax = _v.non_negative("block_amax", block_amax, array=True)
    tensor_amax = _v.non_negative("tensor_amax", tensor_amax)
    if np.any(block_amax > tensor_amax):
        raise ValueError("block_amax cannot exceed tensor_amax (the tensor's largest "
                         f"|value|), got {float(block_amax.max()):g} > {tensor_amax:g}")
    elem, fp8 = GRIDS["fp4_e2m1"].max_value, GRIDS["fp8_e4m3"]
    s_t = tensor_amax / (elem * fp8.max_value) if tensor_amax > 0 else 1.0
    s_b = fp8.round(block_amax / (elem * s_t))
    return _v.scalar_or_array(s_b), float(s_t)


def _element_format(fmt):
    name = _dtypes.canonical(fmt, name="fmt") if isinstance(fmt, str) else fmt
    if not isinstance(name, str):
        raise TypeError(f"fmt must be a format name such as 'fp8_e4m3', got {fmt!r}")
    options = ("fp8_e4m3", "fp8_e5m2", "fp4_e2m1")
    if name not in options:
        raise ValueError(f"fmt must be a low-precision float element format, one of "
                         f"{', '.join(options)}, got {fmt!r}")
    return name


def _float_scales(a, grid, block_size, scale_fmt, axis):
    """Per-group scales, shaped to broadcast over `a` viewed as blocks. Returns
    (blocked view of a, scales)."""
    if block_size is not None:
        blocks = a.reshape(*a.shape[:-1], -1, block_size)
        amax = np.max(np.abs(blocks), axis=-1, keepdims=True)
    elif axis is not None:
        blocks = a
        others = tuple(i for i in range(a.ndim) if i != axis)
        amax = np.max(np.abs(a), axis=others, keepdims=True) if others else np.abs(a)
    else:
        blocks, amax = a, np.max(np.abs(a), keepdims=True)
    if scale_fmt == "fp32":
        scale = np.where(amax > 0, amax / grid.max_value, 1.0)
    elif scale_fmt == "e8m0":
        e = np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - grid.max_exponent
        scale = 2.0 ** np.clip(np.where(amax > 0, e, _E8M0_MIN_EXP),
                               _E8M0_MIN_EXP, _E8M0_MAX_EXP)
    else:  # fp8_e4m3 block scales under one fp32 tensor scale (NVFP4's recipe)
        fp8 = GRIDS["fp8_e4m3"]
        tensor_amax = float(np.max(np.abs(a)))
        s_t = tensor_amax / (grid.max_value * fp8.max_value) if tensor_amax > 0 else 1.0
        scale = fp8.round(amax / (grid.max_value * s_t)) * s_t
    return blocks, scale


def fake_quantize_float(x, fmt, block_size=None, scale_fmt=None, *, axis=None):
    """`x` as a low-precision float format stores it, dequantised back: float64 numpy for
    numpy in, float32 torch (on x's device) for torch in.

    `fmt`: an element format, "fp8_e4m3", "fp8_e5m2" or "fp4_e2m1" (aliases "fp8",
    "fp4"), or a block format that fixes the rest: "mxfp4" (fp4_e2m1, blocks of 32, E8M0
    scales) or "nvfp4" (fp4_e2m1, blocks of 16, E4M3 scales and one fp32 scale per
    tensor). Rounding is to nearest, ties to even, saturating at the format's maximum.

    Scales (`scale_fmt`, how each scale is stored; one per tensor, per channel along
    `axis`, or per `block_size` values along the last axis):
    - None with no block_size: no scale at all, a plain cast (500 -> 448 in E4M3);
    - "fp32": amax / max, so a group's largest value lands on the format's maximum (what
      FP8 W8A8 does per tensor, per channel or per token); the default with a block_size;
    - "e8m0": a power of two, `mx_scale` (OCP MX v1.0);
    - "fp8_e4m3": an E4M3 scale per group under one fp32 scale per tensor, `nvfp4_scales`.
    """
    torch_like = _is_torch(x)
    a = _numpy(x)
    if isinstance(fmt, str) and _dtypes.canonical(fmt, name="fmt") in BLOCK_FORMATS:
        name = _dtypes.canonical(fmt, name="fmt")
        elem, size, sfmt = BLOCK_FORMATS[name]
        if (block_size is not None and block_size != size) or \
                (scale_fmt is not None and scale_fmt != sfmt) or axis is not None:
            raise ValueError(f"{name} fixes blocks of {size} along the last axis with "
                             f"{sfmt} scales; for other choices pass fmt='{elem}' with "
                             "block_size= and scale_fmt=")
        fmt, block_size, scale_fmt = elem, size, sfmt
    grid = GRIDS[_element_format(fmt)]
    axis = _normalise_axis(axis, a.ndim)
    block_size = _check_granularity(a.shape, axis, block_size, "block_size")
    if scale_fmt is None and (block_size is not None or axis is not None):
        scale_fmt = "fp32"
    if scale_fmt is None:
        out = grid.round(a)
    else:
        if scale_fmt != "e8m0" and scale_fmt != "fp32" and isinstance(scale_fmt, str):
            try:
                scale_fmt = _dtypes.canonical(scale_fmt, name="scale_fmt")
            except (KeyError, ValueError):
                pass
        scale_fmt = _v.choice("scale_fmt", scale_fmt, SCALE_FORMATS)
        blocks, scale = _float_scales(a, grid, block_size, scale_fmt, axis)
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.where(scale > 0, grid.round(blocks / np.where(scale > 0, scale, 1.0)),
                         0.0)
        out = (q * scale).reshape(a.shape)
    if torch_like:
        import torch

        return torch.as_tensor(out, dtype=torch.float32, device=x.device)
    return out


# --- number formats ----------------------------------------------------------------------------

#: Every format `gpuinfer.dtypes` knows that stores values (tf32 is a compute mode).
FORMATS = tuple(name for name in _dtypes.DTYPES if name != "tf32")
_INT_RANGES = {"int8": (-128, 127), "int4": (-8, 7)}


def _format_name(name) -> str:
    if not isinstance(name, str):
        raise TypeError(f"name must be a format name such as 'fp8_e4m3', got {name!r}")
    canonical = _dtypes.canonical(name, name="name")
    return _v.choice("name", canonical, FORMATS)


def format_properties(name) -> dict:
    """Bits of a value, bytes per element with any block scales (`dtypes`), block size,
    largest value, smallest positive normal value and relative precision (machine
    epsilon for a float, the gap above 1.0; for an integer format, 1 step out of the
    largest value) of a number format. Block formats (mxfp4, nvfp4) report their
    element's grid (E2M1)."""
    name = _format_name(name)
    spec = _dtypes.get(name)
    common = {"format": name, "bits": spec.bits, "bytes": spec.bytes_per_element,
              "block_size": spec.block_size}
    if name in _INT_RANGES:
        lo, hi = _INT_RANGES[name]
        return {**common, "kind": "integer", "min": float(lo), "max": float(hi),
                "min_positive_normal": 1.0, "relative_precision": 1.0 / hi}
    grid = GRIDS[BLOCK_FORMATS[name][0] if name in BLOCK_FORMATS else name]
    return {**common, "kind": "float", "min": -grid.max_value, "max": grid.max_value,
            "min_positive_normal": grid.min_normal,
            "relative_precision": grid.relative_precision}


def representable_values(name) -> np.ndarray:
    """Every positive finite value a format can hold, ascending (numpy float64): floats
    from their exponent and mantissa bits (subnormals included), integers 1..max of the
    symmetric grid. fp8_e4m3 has 126, fp4_e2m1 7 (0.5, 1, 1.5, 2, 3, 4, 6), fp16 31,743:
    the gaps between them show range against precision."""
    name = _format_name(name)
    if name in BLOCK_FORMATS:
        elem = BLOCK_FORMATS[name][0]
        raise ValueError(f"{name}'s values depend on each block's scale; its elements are "
                         f"{elem}: use representable_values('{elem}')")
    if name in _INT_RANGES:
        return np.arange(1, _INT_RANGES[name][1] + 1, dtype=np.float64)
    grid = GRIDS[name]
    if grid.exponent_bits + grid.mantissa_bits > 15:
        raise ValueError(f"{name} has 2**{grid.exponent_bits + grid.mantissa_bits} positive "
                         "codes, too many to list; formats of at most 16 bits only")
    return grid.values()


def formats_table():
    """`format_properties` for every format, as a pandas DataFrame."""
    import pandas as pd

    return pd.DataFrame([format_properties(f) for f in FORMATS])


# --- SmoothQuant --------------------------------------------------------------------------------

def smoothquant_scales(act_absmax, weight_absmax, alpha=0.5):
    """SmoothQuant's per-input-channel smoothing factors (Xiao et al. 2023, eq. 4):
    s_j = max|X_j|**alpha / max|W_j|**(1 - alpha), for activations X [tokens, d_in] and
    a weight W [d_out, d_in] whose input channel j sees X_j. Dividing X's column j by s_j
    and multiplying W's column j by s_j leaves X @ W.T unchanged while moving the range
    of outlier activation channels into the weights. `alpha` in [0, 1] sets how much
    (0.5 splits it evenly). A channel whose activations or weights are all zero gets
    s_j = 1 (nothing to move). Returns a float numpy array of len(act_absmax)."""
    act = _v.non_negative("act_absmax", act_absmax, array=True)
    w = _v.non_negative("weight_absmax", weight_absmax, array=True)
    if act.shape != w.shape or act.ndim != 1:
        raise ValueError(f"act_absmax {act.shape} and weight_absmax {w.shape} must be 1-D "
                         "with one entry per input channel each")
    alpha = _v.number("alpha", alpha, lo=0, hi=1, expected="a number in [0, 1]")
    both = (act > 0) & (w > 0)
    safe_a, safe_w = np.where(both, act, 1.0), np.where(both, w, 1.0)
    return np.where(both, safe_a**alpha / safe_w ** (1 - alpha), 1.0)


# --- the chapter's synthetic data (reproducible, labelled synthetic: not a real model's) --------

def example_weights(d_out=512, d_in=256, *, tails="gaussian", seed=0):
    """A synthetic weight matrix [d_out, d_in] for the chapter's comparisons: each row
    (output channel) has its own scale, spread log-normally (sigma 1), and its entries are
    Gaussian or, with `tails="heavy"`, Student-t with 5 degrees of freedom (rare large
    weights); divided by sqrt(d_in), as an initialised layer is. Not a real model's."""
    d_out = _v.count("d_out", d_out, maximum=1 << 16)
    d_in = _v.count("d_in", d_in, maximum=1 << 16)
    tails = _v.choice("tails", tails, ("gaussian", "heavy"))
    rng = np.random.default_rng(_v.count("seed", seed, minimum=0))
    row_scale = np.exp(rng.normal(0.0, 1.0, size=(d_out, 1)))
    entries = rng.normal(size=(d_out, d_in)) if tails == "gaussian" else \
        rng.standard_t(5, size=(d_out, d_in))
    return entries * row_scale / np.sqrt(d_in)


def example_activations(n_tokens=256, d_in=256, *, outliers=(3, 77, 140, 201),
                        outlier_gain=20.0, seed=0):
    """Synthetic activations [n_tokens, d_in]: Gaussian entries, each token's magnitude
    varying log-normally (sigma 0.5), and a few feature channels (`outliers`)
    `outlier_gain` times larger in every token: the pattern of outlier features that
    LLM.int8() (Dettmers et al. 2022) reports in large transformers. Not a real model's."""
    n_tokens = _v.count("n_tokens", n_tokens, maximum=1 << 20)
    d_in = _v.count("d_in", d_in, maximum=1 << 16)
    outlier_gain = _v.positive("outlier_gain", outlier_gain)
    idx = [_v.count("outlier channel", i, minimum=0, maximum=d_in - 1) for i in outliers]
    rng = np.random.default_rng(_v.count("seed", seed, minimum=0))
    x = rng.normal(size=(n_tokens, d_in)) * np.exp(rng.normal(0.0, 0.5, size=(n_tokens, 1)))
    x[:, idx] *= outlier_gain
    return x


def example_kv(n_tokens=4096, head_dim=128, *, outlier_channels=(5, 40, 99),
               outlier_gain=15.0, seed=0):
    """Synthetic keys and values of one attention head, (K, V), each [n_tokens, head_dim]:
    Gaussian, with a few key channels `outlier_gain` times larger in every token (KIVI,
    Liu et al. 2024, finds such fixed outlier channels in keys and none in values).
    Not a real model's cache."""
    n_tokens = _v.count("n_tokens", n_tokens, maximum=1 << 22)
    head_dim = _v.count("head_dim", head_dim, maximum=1 << 12)
    outlier_gain = _v.positive("outlier_gain", outlier_gain)
    idx = [_v.count("outlier channel", i, minimum=0, maximum=head_dim - 1)
           for i in outlier_channels]
    rng = np.random.default_rng(_v.count("seed", seed, minimum=0))
    keys, values = rng.normal(size=(n_tokens, head_dim)), rng.normal(size=(n_tokens, head_dim))
    keys[:, idx] *= outlier_gain
    return keys, values
