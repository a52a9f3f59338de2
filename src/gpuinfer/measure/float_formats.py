"""Low-precision floating-point formats: each one's grid of values, rounding onto it
with per-tensor, per-channel or per-block scales, and the properties of every number
format `gpuinfer.dtypes` knows.

Chapter: *Quantisation*; lab: *Quantised weights*. `quant` builds its integer formats
beside these.

Floats (`fake_quantize_float`): round to nearest, ties to even, onto the grid of
fp8_e4m3 (max 448), fp8_e5m2 (max 57,344) or fp4_e2m1 (0, 0.5, 1, 1.5, 2, 3, 4, 6),
subnormals included, saturating at the format's maximum; optionally scaled per tensor,
per channel or per block, with scales stored in fp32, E8M0 (powers of two: MXFP4, OCP
Microscaling Formats v1.0) or E4M3 under one fp32 scale per tensor (NVFP4). Works on
numpy arrays and torch tensors (computed on the CPU in float64; a torch tensor comes back
as float32 on its device).

Format names are `gpuinfer.dtypes` names (`dtypes.canonical`): "fp8" is fp8_e4m3, "fp4"
is fp4_e2m1; `FORMATS` lists the formats `dtypes` knows that store values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

import torch

from gpuinfer import dtypes as _dtypes
from gpuinfer import validate as _v
from gpuinfer.measure.quant_inputs import (check_granularity, finite_array, is_torch,
                                           normalise_axis)


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
    torch_like = is_torch(x)
    a = finite_array(x)
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
    axis = normalise_axis(axis, a.ndim)
    block_size = check_granularity(a.shape, axis, block_size, "block_size")
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

