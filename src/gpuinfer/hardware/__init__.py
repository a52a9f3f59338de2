"""The accelerator catalogue, as data: dense datasheet peaks, the memory each card really
has, one cited record per device; MIG slices, measured rates, and the links between devices.

Chapter: *The roofline model* (and *Beyond one GPU* for the interconnects). Every number
is in SI units: bytes, bytes/s (decimal: 1 GB/s = 1e9 B/s), FLOP/s (integer formats:
operations/s), Hz. Nothing here imports torch or measures; `gpuinfer.measure.detection`
finds the device torch runs on and looks it up here.

One idea a module, each name imported from where it lives:
- `devices`: the cited device table (`Accelerator`, `names`, `catalogue`; the traps it
  gets right are in its docstring). A GPU is one record there: its NVLink and PCIe
  generation, MIG profiles, measured matmul and copy rates and example prices are fields
  of its entry, which the modules below (and `predict.cost`) read.
- `mig_slices`: MIG slices of one GPU (`mig_profiles`, `mig_slice`).
- `measured_rates`: what real code reaches (`achievable`, `achievable_table`, `derated`).
- `device_links`: the links between devices and NCCL's cost model per protocol
  (`interconnects`, `get_interconnect`, `interconnect_for`, `host_link`,
  `nccl_protocols`, `NCCL_*`).
- this package itself holds `get`: a device by any name it goes by (a catalogue row or a
  MIG slice of one).
"""

from __future__ import annotations

from gpuinfer.hardware.devices import Accelerator, catalogue_entry, find
from gpuinfer.hardware.mig_slices import mig_slice, parse_mig_name


def get(name) -> Accelerator:
    """Look up a device by catalogue name ("H100 SXM"), short name ("h100") or the
    name torch reports ("NVIDIA H100 80GB HBM3"); a MIG slice's name ("NVIDIA
    A100-SXM4-80GB MIG 1g.10gb") gives the slice (`mig_slice`). An Accelerator passes
    through. A non-string raises TypeError; an unknown name a KeyError listing the
    closest entries."""
    if isinstance(name, Accelerator):
        return name
    if isinstance(name, str):
        parsed = parse_mig_name(name)
        if parsed is not None and find(name) is None:
            return mig_slice(*parsed)
    return catalogue_entry(name)
