"""Exercises of the chapter *How to benchmark your own traffic*."""

import numpy as np

from .. import bench, hardware, llm, roofline
from . import register

WHERE = "chapters/07_benchmarking"

#: The per-call times of the mean-vs-median exercise: 19 calls of 2 ms and one of 42 ms.
SPIKY_CALLS_S = np.array([2.0e-3] * 19 + [42.0e-3])


@register("bench-flush-pool-a100", where=WHERE,
          question="Bytes of the rotating pool gpuinfer.bench reads from so that an A100's "
          "L2 cache cannot serve a timed read", unit="bytes",
          hint="The pool is CACHE_FLUSH_FACTOR times the last-level cache; the A100's L2 "
          "is in its catalogue entry (binary megabytes).")
def _():
    return bench.CACHE_FLUSH_FACTOR * hardware.get("A100 80GB").cache_bytes


@register("bench-mean-of-spiky-calls", where=WHERE,
          question="Mean seconds per call of 20 calls: 19 take 2 ms, one takes 42 ms",
          unit="seconds", hint="Add all twenty and divide by twenty; then compare with "
          "the median, which ignores the one slow call.")
def _():
    return float(np.mean(SPIKY_CALLS_S))


@register("bench-decode-fraction-l4", where=WHERE,
          question="Fraction of the weight-read ceiling reached by a batch-1 step through "
          "32 fp16 matrices of 4096 x 4096 that takes 5.0 ms on an L4",
          unit="fraction (0-1)", hint="Bytes read = matrices x 4096^2 x 2; divide by the "
          "5.0 ms to get bytes/s and by the L4's datasheet bandwidth.")
def _():
    ceiling = llm.weight_read_ceiling(32 * 4096 * 4096, 2, hardware.get("L4").bandwidth)
    return (1 / 5.0e-3) / ceiling


@register("bench-mfu-h100-matmul", where=WHERE,
          question="Fraction of the dense fp16 peak reached by an 8192 x 8192 x 8192 fp16 "
          "matmul that takes 1.50 ms on an H100 SXM", unit="fraction (0-1)",
          hint="FLOPs = 2 m n k; divide by the time, then by the dense (not sparse) "
          "fp16 peak.")
def _():
    return roofline.matmul_flops(8192, 8192, 8192) / 1.50e-3 / hardware.get("H100 SXM").peak_flops("fp16")
