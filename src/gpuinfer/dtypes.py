"""Number formats: one vocabulary for the whole package. Chapters: *The roofline model*,
*Quantisation*.

Each format knows the bits of its values, how many values share a scale (block formats),
the bits of that scale, and which of a device's peaks computes in it. Its
`bytes_per_element` counts the scales: symmetric group-wise int4 with an fp16 scale per
32 values stores 0.5 + 2/32 = 0.5625 bytes a weight (gpt-fast's int4, asymmetric, also
keeps a zero point per group: 0.625), MXFP4 (an 8-bit power-of-two scale per 32, OCP MX
v1.0) 0.53125, NVFP4 (an E4M3 scale per 16, plus one fp32 scale per tensor, which we do
not count) 0.5625.

`int4` is group 32; `int4-g128` (any group size: `int4-g64`, ...) names another, and
`int4-g32-zp` the asymmetric kind with an fp16 zero point per group too (gpt-fast's: 0.625).

    bytes_per_element("int4") == 0.5625    value_bits("int4") == 4
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuinfer import validate as _v


@dataclass(frozen=True)
class Format:
    """A number format as stored in memory.

    `bits`: bits of each value; `block_size`: values sharing one scale (None: no block
    scale; a per-tensor or per-channel scale costs nothing per element); `scale_bits`:
    bits of each block scale; `peak`: the catalogue peak a matmul *in this format* uses
    ("fp16", "fp8", "int8", "fp4"); `kind`: "float" or "int"; `quantised`: a format
    that models store weights in but compute in a wider one by default (weight-only)."""

    name: str
    bits: float
    kind: str
    peak: str
    block_size: int | None = None
    scale_bits: float = 0.0
    quantised: bool = False
    note: str = ""

    @property
    def bytes_per_element(self) -> float:
        """Bytes per value, the block scales included."""
        scale = self.scale_bits / self.block_size if self.block_size else 0.0
        return (self.bits + scale) / 8


FORMATS: dict[str, Format] = {f.name: f for f in [
    Format("fp32", 32, "float", "fp32"),
    Format("tf32", 32, "float", "tf32",
           note="stored as fp32; only the tensor cores read 19 of its bits"),
    Format("fp16", 16, "float", "fp16"),
    Format("bf16", 16, "float", "bf16"),
    Format("fp8_e4m3", 8, "float", "fp8", quantised=True,
           note="E4M3: 4 exponent bits, 3 mantissa bits, max 448 (OCP FP8)"),
    Format("fp8_e5m2", 8, "float", "fp8", quantised=True,
           note="E5M2: 5 exponent bits, 2 mantissa bits, max 57,344 (OCP FP8)"),
    Format("int8", 8, "int", "int8", quantised=True,
           note="per-channel scales (one per output row: under 0.1% of the bytes, not counted)"),
    Format("int4", 4, "int", "int4", block_size=32, scale_bits=16, quantised=True,
           note="group-wise, an fp16 scale per 32 values"),
    Format("fp4_e2m1", 4, "float", "fp4", quantised=True,
           note="E2M1 values alone: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives"),
    Format("mxfp4", 4, "float", "fp4", block_size=32, scale_bits=8, quantised=True,
           note="OCP MX: E2M1 values, an E8M0 (power-of-two) scale per 32"),
    Format("nvfp4", 4, "float", "fp4", block_size=16, scale_bits=8, quantised=True,
           note="NVIDIA: E2M1 values, an E4M3 scale per 16 (and one fp32 per tensor)"),
]}

# Spellings people use for the same formats.
_ALIASES = {
    "float32": "fp32", "float": "fp32", "float16": "fp16", "half": "fp16",
    "bfloat16": "bf16", "fp8": "fp8_e4m3", "float8": "fp8_e4m3", "e4m3": "fp8_e4m3",
    "float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2", "e5m2": "fp8_e5m2",
    "fp4": "fp4_e2m1", "e2m1": "fp4_e2m1", "float4_e2m1fn_x2": "fp4_e2m1",
    "int4-g32": "int4", "int4_g32": "int4",
}
_GROUPED_INT4 = re.compile(r"int4[-_]g(\d+)([-_]zp)?$")

DTYPES = tuple(FORMATS)
#: The peaks a device catalogue can list (`Format.peak` of every format).
PEAKS = ("fp32", "tf32", "fp16", "bf16", "fp8", "int8", "fp4", "int4")


def get(dtype, *, name="dtype") -> Format:
    """The Format for a name ("fp16", "int4", "int4-g128", "nvfp4"), an alias ("half",
    "fp8") or a torch dtype. Unknown names raise an error that is both a KeyError and a
    ValueError, naming the known formats (and the parameter, `name`)."""
    label = name
    if isinstance(dtype, Format):
        return dtype
    if dtype is None or isinstance(dtype, (bool, int, float)):
        raise TypeError(f"{label} must be a format name such as 'fp16', got {dtype!r}")
    if not isinstance(dtype, str):
        dtype = str(dtype).removeprefix("torch.")  # torch.float16 -> "float16"
    name = dtype.strip().lower()
    name = _ALIASES.get(name, name)
    if name in FORMATS:
        return FORMATS[name]
    grouped = _GROUPED_INT4.match(name)
    if grouped:
        group = _v.count("int4 group size", int(grouped[1]), minimum=1, maximum=1 << 20)
        if grouped[2]:  # asymmetric: a zero point beside each scale (gpt-fast's int4)
            return Format(f"int4-g{group}-zp", 4, "int", "int4", block_size=group,
                          scale_bits=32, quantised=True,
                          note=f"group-wise, an fp16 scale and an fp16 zero point per {group}")
        return Format(f"int4-g{group}", 4, "int", "int4", block_size=group, scale_bits=16,
                      quantised=True, note=f"group-wise, an fp16 scale per {group} values")
    return FORMATS[_v.choice(label, name, list(FORMATS))]


def canonical(dtype, *, name="dtype") -> str:
    """The course's name for a dtype ("fp16"), from a name, an alias or a torch dtype."""
    return get(dtype, name=name).name


def bytes_per_element(dtype) -> float:
    """Bytes one value of `dtype` occupies, its share of block scales included
    (int4: 0.5625; fp16: 2)."""
    return get(dtype).bytes_per_element


def value_bits(dtype) -> float:
    """Bits of the values alone, no scales (int4: 4)."""
    return get(dtype).bits


def peak_dtype(dtype) -> str:
    """Which catalogue peak a matmul in `dtype` uses ("fp8_e4m3" -> "fp8")."""
    return get(dtype).peak


def formats(dtype, kv_dtype=None, compute_dtype=None) -> tuple[str, str, str]:
    """(weight, KV cache, compute) format names for a model stored in `dtype`. The one
    rule: a quantised weight format is weight-only unless told otherwise (the KV cache
    and the matmuls stay fp16, as gpt-fast's int8/int4 do); a wide format computes in
    itself. `kv_dtype`/`compute_dtype` override (e.g. FP8 W8A8: compute_dtype="fp8")."""
    weight = get(dtype)
    default = "fp16" if weight.quantised else weight.name
    kv = canonical(kv_dtype, name="kv_dtype") if kv_dtype is not None else default
    compute = (canonical(compute_dtype, name="compute_dtype") if compute_dtype is not None
               else default)
    return weight.name, kv, compute


def table():
    """Every format as a DataFrame: bits, block size, scale bits, bytes per element."""
    import pandas as pd

    return pd.DataFrame([{"format": f.name, "kind": f.kind, "bits": f.bits,
                          "block_size": f.block_size, "scale_bits": f.scale_bits,
                          "bytes_per_element": f.bytes_per_element, "peak": f.peak,
                          "note": f.note} for f in FORMATS.values()]).set_index("format")
