"""gpuinfer: the package behind the course *GPU inference performance*.

Every value is in SI base units: bytes, bytes/s, FLOP, FLOP/s, seconds.
Bandwidth is decimal (1 GB/s = 1e9 B/s).

Modules, named after the ideas they hold:
    dtypes     bytes per element of each number format
    hardware   the cited catalogue of accelerators, and what torch is running on
    roofline   arithmetic intensity and attainable FLOP/s (Williams et al. 2009)
    llm        transformer shapes, weight and KV-cache bytes, decode ceilings
    bench      the one timer every lab uses, and the measurements built on it
    parallel   sharding across devices: ring all-reduce, tensor/pipeline-parallel
               decode, tensor-parallel layers on torch.distributed
    quant      integer quantisation: scales, calibration (min-max, percentile,
               entropy), SQNR; number formats and their range and precision
    tabular    a small MLP on tabular data: its counts, a synthetic batch, and
               time as kernel overhead + roofline work
    cost       cost per million predictions, break-even utilisation and demand
    exercises  self-check answers for the worked problems
"""

__version__ = "0.1.0"
