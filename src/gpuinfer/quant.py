"""Uniform integer quantisation: scales, zero points, calibration and error metrics.

Chapter: *Quantisation*; lab: *Quantised weights*. Works on numpy arrays and torch
tensors (a torch tensor stays on its device; calibration by percentile or entropy runs
on the CPU).

    q     = clip(round(x / scale) + zero_point, qmin, qmax)      (integers)
    x_hat = (q - zero_point) * scale                             (dequantised)

- `symmetric=True`: zero_point = 0 and the *restricted* signed range
  [-(2**(bits-1) - 1), 2**(bits-1) - 1] (int8: -127..127, as TensorRT uses), so +a and
  -a quantise to +-q alike; scale = amax / qmax.
- `symmetric=False`: unsigned range [0, 2**bits - 1] and a zero point, so a one-sided
  range (after a ReLU) uses every level; the range is widened to include 0 so that 0 is
  exactly representable (padding, ReLU zeros); scale = (hi - lo) / (qmax - qmin).
- Granularity: per tensor (`axis=None`), per channel (`axis=k`: one scale per index
  along axis k, torch's `quantize_per_channel` convention) or group-wise
  (`group_size=g`: one scale per g consecutive elements along the last axis, which for
  an [out_features, in_features] weight is per output row and per group of inputs, as
  gpt-fast's and GPTQ's int4 do). A grouped scale has shape x.shape[:-1] + (n_groups,).
- Calibration picks the clipping range: "minmax" (the extremes), "percentile" (clip the
  rarest values), "entropy" (TensorRT's histogram search for the threshold that
  minimises the KL divergence between the clipped and the quantised distributions).
  The range comes from `x` itself, or from a calibration set passed as `calibration`.

Integers are stored one per element (int8 / uint8 for bits <= 8); `pack_int4` packs two
4-bit values into a byte, which is what saves the memory.
"""

from __future__ import annotations

import math

import numpy as np

from . import dtypes as _dtypes

METHODS = ("minmax", "percentile", "entropy")
MIN_BITS, MAX_BITS = 2, 16
DEFAULT_PERCENTILE = 99.99
DEFAULT_ENTROPY_BINS = 2048


# --- integer ranges ----------------------------------------------------------------------

def _check_bits(bits) -> int:
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) \
            or not MIN_BITS <= bits <= MAX_BITS:
        raise ValueError(f"bits must be a whole number from {MIN_BITS} to {MAX_BITS}, "
                         f"got {bits!r}")
    return int(bits)


def qrange(bits=8, symmetric=True) -> tuple[int, int]:
    """(qmin, qmax) of the integer grid: symmetric 8 bits -> (-127, 127) (restricted
    range, zero point 0); asymmetric 8 bits -> (0, 255)."""
    bits = _check_bits(bits)
    if symmetric:
        top = 2 ** (bits - 1) - 1
        return -top, top
    return 0, 2**bits - 1


def ideal_sqnr_db(bits, signal="sine") -> float:
    """Textbook signal-to-quantisation-noise ratio of a b-bit uniform quantiser driven at
    full scale: 6.02 b + 1.76 dB for a sine, 6.02 b dB for a uniformly distributed
    signal (noise power step**2 / 12). 8 bits, sine: 49.92 dB."""
    bits = _check_bits(bits)
    per_bit = 20 * math.log10(2)  # 6.0206 dB
    if signal == "sine":
        return per_bit * bits + 10 * math.log10(1.5)  # + 1.7609 dB
    if signal == "uniform":
        return per_bit * bits
    raise ValueError(f"signal must be 'sine' or 'uniform', got {signal!r}")


# --- numpy / torch --------------------------------------------------------------------------

def _is_torch(x) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def _numpy(x) -> np.ndarray:
    if _is_torch(x):
        return x.detach().to("cpu").double().numpy()
    arr = np.asarray(x)
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"expected a numeric array or tensor, got dtype {arr.dtype}")
    return arr.astype(np.float64, copy=False)


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
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise ValueError(f"axis must be an integer or None, got {axis!r}")
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


def _check_granularity(shape, axis, group_size):
    if group_size is None:
        return
    if axis is not None:
        raise ValueError("give axis (per-channel) or group_size (group-wise), not both: "
                         "groups already run along the last axis, one scale per row")
    if isinstance(group_size, bool) or not isinstance(group_size, (int, np.integer)) \
            or group_size <= 0:
        raise ValueError(f"group_size must be a positive integer, got {group_size!r}")
    if len(shape) == 0 or shape[-1] % group_size:
        raise ValueError(f"group_size {group_size} must divide the last dimension "
                         f"of shape {tuple(shape)}")


# --- calibration ------------------------------------------------------------------------------

def _calibration_rows(calibration, shape, axis):
    """The calibration set as rows matching the granularity of a tensor of `shape`."""
    batches = calibration if isinstance(calibration, (list, tuple)) else [calibration]
    if not batches:
        raise ValueError("calibration is an empty list; pass at least one array")
    rows = []
    for b in batches:
        arr = _numpy(b)
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
    histogram P is closest (KL divergence) to its quantised version Q."""
    absx = np.abs(values[np.isfinite(values)])
    amax = float(absx.max()) if absx.size else 0.0
    if amax == 0.0:
        return 0.0
    levels = 2 ** (bits - 1)  # positive half of the grid (128 for int8, as TensorRT)
    if num_bins < levels:
        raise ValueError(f"num_bins ({num_bins}) must be at least 2**(bits-1) = {levels}")
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


def calibrate(x, bits=8, axis=None, symmetric=True, method="minmax", *, group_size=None,
              calibration=None, percentile=DEFAULT_PERCENTILE,
              num_bins=DEFAULT_ENTROPY_BINS):
    """The clipping range (lo, hi) as numpy arrays of shape [n_scales] for each scale of
    `x`'s granularity, from `x` or from the `calibration` set (an array, or a list of
    batches, with the same channels along `axis`). Same units as x."""
    bits = _check_bits(bits)
    if method not in METHODS:
        raise ValueError(f"unknown calibration method {method!r}; use one of {', '.join(METHODS)}")
    shape = tuple(x.shape) if hasattr(x, "shape") else np.shape(x)
    axis = _normalise_axis(axis, len(shape))
    _check_granularity(shape, axis, group_size)
    if method == "entropy" and not symmetric:
        raise ValueError("entropy calibration is TensorRT's symmetric method: use "
                         "symmetric=True, or method 'minmax' / 'percentile'")
    if not 0 < percentile <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {percentile!r}")
    if calibration is not None and group_size is not None:
        raise ValueError("group-wise scales come from the tensor itself (weights); a "
                         "calibration set is for per-tensor or per-channel ranges")

    if calibration is None and method == "minmax" and _is_torch(x):
        # Stay on the device for the common case: a weight's extremes.
        rows = _torch_rows(x, axis, group_size)
        lo = rows.amin(dim=1).double().cpu().numpy()
        hi = rows.amax(dim=1).double().cpu().numpy()
        return _finite(lo, hi)
    rows = _rows(_numpy(x), axis, group_size) if calibration is None else \
        _calibration_rows(calibration, shape, axis)
    if rows.shape[1] == 0:
        raise ValueError("cannot calibrate on an empty tensor")
    if method == "minmax":
        lo, hi = rows.min(axis=1), rows.max(axis=1)
    elif method == "percentile":
        if symmetric:
            hi = np.percentile(np.abs(rows), percentile, axis=1)
            lo = -hi
        else:
            lo = np.percentile(rows, 100 - percentile, axis=1)
            hi = np.percentile(rows, percentile, axis=1)
    else:
        hi = np.array([_entropy_threshold(r, bits, int(num_bins)) for r in rows])
        lo = -hi
    return _finite(lo, hi)


def _finite(lo, hi):
    if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))):
        raise ValueError("the tensor (or calibration set) holds inf or nan")
    return lo, hi


def _torch_rows(x, axis, group_size):
    if group_size is not None:
        return x.reshape(-1, group_size)
    if axis is None:
        return x.reshape(1, -1)
    return x.movedim(axis, 0).reshape(x.shape[axis], -1)


def scale_zero_point(lo, hi, bits=8, symmetric=True):
    """Scale (units of x per integer step) and integer zero point for the range [lo, hi]
    (numpy arrays). A range of width 0 gets scale 1, so that zeros stay zeros."""
    qmin, qmax = qrange(bits, symmetric)
    lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
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


def dequantize(q, scale, zero_point, dtype=None):
    """x_hat = (q - zero_point) * scale, as float32 (or `dtype`, e.g. torch.float16).
    A group-wise scale (last dimension n_groups, dividing q's) is expanded over its
    groups."""
    torch_like = _is_torch(q)
    if torch_like:
        import torch

        scale = torch.as_tensor(scale, device=q.device)
        zero_point = torch.as_tensor(zero_point, device=q.device)
    else:
        q, scale, zero_point = np.asarray(q), np.asarray(scale), np.asarray(zero_point)
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
        import torch

        out = (q.float() - zero_point.float()) * scale.float()
        return out.to(dtype) if dtype is not None else out
    out = (q.astype(np.float32) - zero_point.astype(np.float32)) * scale.astype(np.float32)
    return out.astype(dtype) if dtype is not None else out


def fake_quantize(x, bits=8, axis=None, symmetric=True, method="minmax", **options):
    """dequantize(quantize(x, ...)): x as the quantised model sees it, in float32."""
    return dequantize(*quantize(x, bits, axis, symmetric, method, **options))


# --- error metrics -----------------------------------------------------------------------------

def _pair(x, x_hat):
    a, b = _numpy(x), _numpy(x_hat)
    if a.shape != b.shape:
        raise ValueError(f"x {a.shape} and x_hat {b.shape} must have the same shape")
    if a.size == 0:
        raise ValueError("x is empty")
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
    bf16 zero per group): 0.5 + 4 / 32 = 0.625 B, so 3.2x fewer bytes than fp16, not 4x.
    `group_size=None`: one scale per row, whose cost is negligible (0 here)."""
    bits = _check_bits(bits)
    if scale_bytes < 0 or zero_point_bytes < 0:
        raise ValueError(f"scale_bytes and zero_point_bytes must be >= 0, got "
                         f"{scale_bytes!r}, {zero_point_bytes!r}")
    if group_size is None:
        return bits / 8
    if isinstance(group_size, bool) or int(group_size) != group_size or group_size <= 0:
        raise ValueError(f"group_size must be a positive integer, got {group_size!r}")
    return bits / 8 + (scale_bytes + zero_point_bytes) / group_size


# --- packing int4 ----------------------------------------------------------------------------

def pack_int4(q):
    """Two 4-bit integers per byte (element 2j in the low nibble, 2j+1 in the high one),
    halving the last dimension: what makes int4 weights take 0.5 byte each. Accepts
    symmetric (-7..7, two's complement nibbles) or asymmetric (0..15) values."""
    torch_like = _is_torch(q)
    if q.shape[-1] % 2:
        raise ValueError(f"the last dimension ({q.shape[-1]}) must be even to pack pairs")
    lo_ok = (q.min() >= -8) if torch_like else (np.min(q) >= -8)
    hi_ok = (q.max() <= 15) if torch_like else (np.max(q) <= 15)
    if not (bool(lo_ok) and bool(hi_ok)):
        raise ValueError("values must fit in 4 bits (-8..7 signed or 0..15 unsigned)")
    if torch_like:
        import torch

        nib = (q.to(torch.int16) & 0xF).to(torch.uint8)
        return nib[..., 0::2] | (nib[..., 1::2] << 4)
    nib = (np.asarray(q).astype(np.int16) & 0xF).astype(np.uint8)
    return nib[..., 0::2] | (nib[..., 1::2] << 4)


def unpack_int4(packed, signed=True):
    """Inverse of `pack_int4`: int8 values (-8..7 if `signed`, else 0..15), last
    dimension doubled."""
    torch_like = _is_torch(packed)
    if torch_like:
        import torch

        low, high = (packed & 0xF).to(torch.int8), (packed >> 4).to(torch.int8)
        out = torch.stack([low, high], dim=-1).reshape(*packed.shape[:-1], -1)
        return torch.where(out > 7, out - 16, out) if signed else out
    packed = np.asarray(packed, dtype=np.uint8)
    out = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(*packed.shape[:-1], -1)
    out = out.astype(np.int8)
    return np.where(out > 7, out - 16, out).astype(np.int8) if signed else out


# --- number formats ----------------------------------------------------------------------------

_TORCH_FORMATS = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16",
                  "fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2", "int8": "int8"}
FORMATS = ("fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8", "int4")


def format_properties(name) -> dict:
    """Bits, bytes per element, largest and smallest positive normal value, and relative
    precision (machine epsilon: the gap above 1.0; for an integer format, 1 step out of
    the largest value) of a number format, read from torch.finfo / torch.iinfo (int4,
    which torch has no iinfo for, from its 4-bit two's complement range)."""
    if name not in FORMATS:
        raise ValueError(f"unknown format {name!r}; known formats: {', '.join(FORMATS)}")
    import torch

    if name == "int4":
        lo, hi, bits = -8, 7, 4
        info = None
    else:
        tdtype = getattr(torch, _TORCH_FORMATS[name])
        info = torch.finfo(tdtype) if tdtype.is_floating_point else torch.iinfo(tdtype)
        bits = info.bits
    if info is not None and isinstance(info, torch.finfo):
        return {"format": name, "bits": bits,
                "bytes": _dtypes.bytes_per_element(name.split("_")[0]),
                "kind": "float", "min": float(info.min), "max": float(info.max),
                "min_positive_normal": float(info.smallest_normal),
                "relative_precision": float(info.eps)}
    if info is not None:
        lo, hi = int(info.min), int(info.max)
    return {"format": name, "bits": bits, "bytes": _dtypes.bytes_per_element(name),
            "kind": "integer", "min": float(lo), "max": float(hi),
            "min_positive_normal": 1.0, "relative_precision": 1.0 / hi}


def representable_values(name) -> np.ndarray:
    """Every positive finite value a format can hold, ascending (numpy float64): floats
    enumerated from their bit patterns with torch, integers 1..max. fp8_e4m3 has 126,
    fp16 31,743 (subnormals included): the gaps between them show range vs precision."""
    props = format_properties(name)
    if props["kind"] == "integer":
        return np.arange(1, int(props["max"]) + 1, dtype=np.float64)
    bits = props["bits"]
    if bits > 16:
        raise ValueError(f"{name} has 2**{bits - 1} positive codes, too many to list; "
                         "formats of at most 16 bits only")
    import torch

    tdtype = getattr(torch, _TORCH_FORMATS[name])
    codes = torch.arange(1, 2 ** (bits - 1), dtype=torch.int64)  # sign bit 0
    store = {8: torch.uint8, 16: torch.int16, 32: torch.int32}[bits]
    values = codes.to(store).view(tdtype).double().numpy()
    return np.sort(values[np.isfinite(values)])


def formats_table():
    """`format_properties` for every format, as a pandas DataFrame."""
    import pandas as pd

    return pd.DataFrame([format_properties(f) for f in FORMATS])
