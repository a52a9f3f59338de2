"""The accelerator catalogue: dense datasheet peaks, the memory each card really has, one
cited row per device; MIG slices, achievable ceilings, and the links between devices.

Chapter: *The roofline model* (and *Beyond one GPU* for the interconnects). Every number
is in SI units: bytes, bytes/s (decimal: 1 GB/s = 1e9 B/s), FLOP/s (integer formats:
operations/s), Hz.

One idea a module; this package re-exports the public names of each:
- `devices`: the cited device table (`Accelerator`, `names`, `catalogue`; the traps it
  gets right are in its docstring). A GPU is one record there: its NVLink and PCIe
  generation, MIG profiles, measured matmul and copy rates and example prices are fields
  of its entry, which the modules below (and `cost`) read.
- `mig`: MIG slices of one GPU (`mig_profiles`, `mig_slice`).
- `lookup`: `get`, a device by any name it goes by (catalogue row or MIG slice).
- `measured`: what real code reaches (`achievable`, `achievable_table`, `derated`).
- `detection`: the device torch runs on (`detect`, `from_torch`, `cpu`), through torch and
  NVML; never fails on a GPU it does not know: it builds a labelled estimate.
- `links`: the links between devices and NCCL's cost model per protocol
  (`interconnects`, `get_interconnect`, `interconnect_for`, `host_link`,
  `nccl_protocols`, `NCCL_*`).
"""

from .detection import cpu, detect, from_torch
from .devices import GB, TB, TFLOPS, GiB, MiB, NVIDIA_SPARSITY, Accelerator, catalogue, names
from .links import (NCCL_LL_MAX_BUS_BANDWIDTH, NCCL_NVLINK_GB_PER_S, NCCL_NVLS,
                    NCCL_NVLS_TREE, NCCL_PROTOCOLS, ONE_SHOT_ALLREDUCE_NOTE, Interconnect,
                    NcclCost, get_interconnect, host_link, interconnect_for,
                    interconnect_names, interconnects, nccl_protocols)
from .lookup import get
from .measured import achievable, achievable_table, derated
from .mig import mig_profiles, mig_slice

__all__ = [
    "GB", "TB", "TFLOPS", "MiB", "GiB", "Accelerator", "NVIDIA_SPARSITY", "names", "get",
    "catalogue", "cpu", "derated", "mig_profiles", "mig_slice", "achievable",
    "achievable_table", "detect", "from_torch", "NCCL_NVLINK_GB_PER_S",
    "NCCL_LL_MAX_BUS_BANDWIDTH", "NCCL_NVLS", "NCCL_NVLS_TREE", "ONE_SHOT_ALLREDUCE_NOTE",
    "NcclCost", "NCCL_PROTOCOLS", "nccl_protocols", "Interconnect", "interconnect_names",
    "get_interconnect", "interconnect_for", "host_link", "interconnects",
]
