"""`get`: a device by any name it goes by, a catalogue row or a MIG slice of one."""

from __future__ import annotations

from .devices import Accelerator, catalogue_entry, find
from .mig import mig_slice, parse_mig_name


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
