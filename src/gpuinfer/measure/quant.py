"""Integer quantisation: grids with scales, calibration, error metrics, the bytes a
quantised weight costs, int4 packing, and SmoothQuant.

Chapter: *Quantisation*; lab: *Quantised weights*. Works on numpy arrays and torch
tensors (a torch tensor stays on its device; calibration by percentile or entropy and
SmoothQuant run on the CPU in float64).

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

Rotations (`hadamard`, `rotate`): an orthonormal Walsh-Hadamard matrix H (QuaRot,
SpinQuant's fixed part, QuIP#'s incoherence processing) multiplies the activations, x H,
and the weights they feed by its transpose, H^T W, so the product is unchanged while an
outlier channel's energy is spread over every channel before quantisation.

The low-precision float formats are `gpuinfer.measure.float_formats`', the chapter's
synthetic tensors `gpuinfer.measure.quant_examples`'.
"""

from __future__ import annotations

import math

import numpy as np

import torch

from gpuinfer import dtypes as _dtypes
from gpuinfer import validate as _v
from gpuinfer.measure.quant_inputs import (check_granularity, finite_array, is_torch,
                                           normalise_axis)

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

        if symmetric:
            return torch.int8 if bits <= 8 else torch.int16
        return torch.uint8 if bits <= 8 else torch.int32
    if symmetric:
        return np.int8 if bits <= 8 else np.int16
    return np.uint8 if bits <= 8 else np.int32


# --- granularity ----------------------------------------------------------------------------

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


# --- calibration ------------------------------------------------------------------------------

def _calibration_rows(calibration, shape, axis):
    """The calibration set as rows matching the granularity of a tensor of `shape`."""
    batches = calibration if isinstance(calibration, (list, tuple)) else [calibration]
    if not batches:
        raise ValueError("calibration is an empty list; pass at least one array")
    rows = []
    for b in batches:
        arr = finite_array(b, "calibration")
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
    on_device = is_torch(x) and calibration is None and method == "minmax"
    xa = x if on_device else finite_array(x)
    shape = tuple(xa.shape)
    axis = normalise_axis(axis, len(shape))
    group_size = check_granularity(shape, axis, group_size)
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
    torch_like = is_torch(x)
    if not torch_like:
        x = finite_array(x)
    elif not x.is_floating_point():
        x = x.float()
    shape = tuple(x.shape)
    axis_n = normalise_axis(axis, len(shape))
    lo, hi = calibrate(x, bits, axis_n, symmetric, method, group_size=group_size,
                       calibration=calibration, percentile=percentile, num_bins=num_bins)
    scale, zero_point = scale_zero_point(lo, hi, bits, symmetric)
    sshape = _scale_shape(shape, axis_n, group_size)
    scale = scale.reshape(sshape).astype(np.float32)
    zero_point = zero_point.reshape(sshape)
    qmin, qmax = qrange(bits, symmetric)
    int_dtype = _int_dtype(bits, symmetric, torch_like)
    if torch_like:

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
    if is_torch(a):
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
    torch_like = is_torch(q)
    q_np = _integer_array("q", q)
    if q_np.size == 0:
        raise ValueError("q is empty: it must hold at least one integer")
    scale_np = scale.detach().cpu().double().numpy() if is_torch(scale) else scale
    _v.positive("scale", scale_np, array=True)
    zp_np = _integer_array("zero_point", zero_point)
    if torch_like:

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
    a, b = finite_array(x, "x"), finite_array(x_hat, "x_hat")
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
    if is_torch(q):
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
    if is_torch(packed):
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



# --- rotations before quantisation (chapter *Quantisation*, low-bit practice) -------------

def hadamard(n, *, seed=None) -> np.ndarray:
    """The n x n Walsh-Hadamard matrix scaled to be orthonormal (H H^T = I; entries
    +-1/sqrt(n)), by Sylvester's construction, for n a power of two up to 2**14. With
    `seed`, each row's sign is flipped at random first (QuaRot's randomised Hadamard,
    still orthonormal)."""
    n = _v.count("n", n, maximum=1 << 14)
    _v.ensure(n & (n - 1) == 0, f"n must be a power of two (Sylvester's construction), got {n}")
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    h /= math.sqrt(n)
    if seed is not None:
        signs = np.random.default_rng(_v.count("seed", seed, minimum=0)).choice([-1.0, 1.0], n)
        h = signs[:, None] * h
    return h


def rotate(x, *, seed=None) -> np.ndarray:
    """`x` [..., n] times `hadamard(n, seed=seed)` along its last axis: what a rotated
    model does to a layer's input (the layer's weight W [n, out] becomes H^T W, so
    (x H)(H^T W) = x W). A numpy array, float64."""
    a = finite_array(x)
    _v.ensure(a.ndim >= 1, "x must have at least one axis")
    return a @ hadamard(a.shape[-1], seed=seed)
