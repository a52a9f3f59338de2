"""Number formats and their sizes. Chapter: *The roofline model*.

`bytes_per_element("int4") == 0.5`: two int4 values share a byte.
"""

from __future__ import annotations

BYTES_PER_ELEMENT: dict[str, float] = {
    "fp32": 4.0,
    "tf32": 4.0,  # stored as fp32; only the tensor cores read 19 of its bits
    "fp16": 2.0,
    "bf16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
}

# Spellings people use for the same formats.
_ALIASES = {
    "float32": "fp32",
    "float": "fp32",
    "float16": "fp16",
    "half": "fp16",
    "bfloat16": "bf16",
    "float8": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
}

DTYPES = tuple(BYTES_PER_ELEMENT)


def canonical(dtype) -> str:
    """The course's name for a dtype ("fp16"), from a string or a torch dtype."""
    if not isinstance(dtype, str):
        # torch.float16 -> "float16"; avoid importing torch here.
        dtype = str(dtype).removeprefix("torch.")
    name = dtype.strip().lower()
    name = _ALIASES.get(name, name)
    if name not in BYTES_PER_ELEMENT:
        raise ValueError(f"unknown dtype {dtype!r}; known dtypes: {', '.join(DTYPES)}")
    return name


def bytes_per_element(dtype) -> float:
    """Bytes one element of `dtype` occupies (int4: 0.5)."""
    return BYTES_PER_ELEMENT[canonical(dtype)]


def torch_dtype(dtype):
    """The torch dtype used to *store* `dtype` in the labs (fp32, fp16, bf16, int8)."""
    import torch

    table = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16,
             "bf16": torch.bfloat16, "int8": torch.int8}
    name = canonical(dtype)
    if name not in table:
        raise ValueError(f"{name} has no plain torch storage dtype; use one of {', '.join(table)}")
    return table[name]
