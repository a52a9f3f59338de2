"""Layer fusion: an unfused chain of elementwise ops writes every intermediate tensor to
memory and reads it back; a fused kernel reads its inputs once and writes its output once.
`elementwise_chain_bytes` counts both; `gelu_tanh_unfused` is such a chain and
`gelu_tanh_fused` the same function in one kernel.

Chapter: *Serving systems and sharing a GPU*. Bytes, SI units.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
import torch.nn.functional as F

from gpuinfer import dtypes as _dtypes
from gpuinfer import validate as _v


def elementwise_chain_bytes(n_elements, op_inputs: Sequence[int], dtype="fp32", *,
                            fused=False, external_inputs=1) -> float:
    """DRAM bytes moved by a chain of elementwise ops over `n_elements` each.

    Unfused, op i reads `op_inputs[i]` full-size tensors and writes one:
    sum(op_inputs[i] + 1) x n x bytes. Fused into one kernel, the chain reads its
    `external_inputs` distinct tensors once and writes the result once:
    (external_inputs + 1) x n x bytes. Scalars and caches are not counted.
    """
    n = _v.count("n_elements", n_elements, maximum=1 << 50)
    if isinstance(op_inputs, (str, int, float)) or not hasattr(op_inputs, "__iter__"):
        raise TypeError(f"op_inputs must be a list of input counts, one per op, got {op_inputs!r}")
    ops = list(op_inputs)
    if not ops:
        raise ValueError("op_inputs is empty: give the tensor inputs of each op in the chain")
    ops = [_v.count("each op's input count", k, minimum=0, maximum=64) for k in ops]
    ext = _v.count("external_inputs", external_inputs, minimum=0, maximum=64)
    bpe = _dtypes.bytes_per_element(dtype)
    if fused:
        return (ext + 1) * n * bpe
    return sum(k + 1 for k in ops) * n * bpe


def gelu_tanh_unfused(x):
    """GELU, tanh approximation, one elementwise op per line, as an unfused graph runs
    it: every line is a kernel that reads its tensor inputs and writes a new tensor.
    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (Hendrycks & Gimpel 2016)."""

    y = torch.pow(x, 3)                 # reads x
    y = y * 0.044715                    # reads y
    y = x + y                           # reads x, y
    y = y * math.sqrt(2.0 / math.pi)    # reads y
    y = torch.tanh(y)                   # reads y
    y = y + 1.0                         # reads y
    y = x * y                           # reads x, y
    return y * 0.5                      # reads y


#: Tensor inputs of each op in `gelu_tanh_unfused`, in order.
GELU_TANH_OP_INPUTS = (1, 1, 2, 1, 1, 1, 2, 1)


def gelu_tanh_fused(x):
    """The same GELU as one kernel: torch's fused `gelu(approximate="tanh")`."""

    return F.gelu(x, approximate="tanh")
