"""MIG: slices of one GPU, as Accelerators and as NVIDIA's profile tables.

Chapter: *Serving* (sharing a GPU). NVIDIA's MIG user guide: a GPU has 7 compute slices
(SM groups) and 8 memory slices (memory controllers with their L2 and DRAM); a profile
"<g>g.<m>gb" takes g compute slices and some memory slices. The guide's tables give each
profile's fraction of SMs (g/7), fraction of memory (slices/8) and the most instances;
`nvidia-smi mig -lgip` (NVIDIA's own issue threads) gives the GiB and SMs each reports.
"""

from __future__ import annotations

import re

from gpuinfer import validate as _v
from gpuinfer.hardware.devices import MIG_GUIDE_PROFILES, Accelerator, catalogue_entry, names

#: The MIG tables by GPU name, read from the catalogue entries (each GPU's `mig`).
_MIG_TABLES = {name: catalogue_entry(name).mig for name in names()
               if catalogue_entry(name).mig is not None}

_MIG_NAME = re.compile(r"^(?P<parent>.*?)\s+MIG\s+(?P<profile>\d+g\.\d+gb(?:\+me)?)\s*$",
                       re.IGNORECASE)


def parse_mig_name(name: str):
    """("NVIDIA A100-SXM4-80GB", "1g.10gb") from a MIG device's name, or None."""
    m = _MIG_NAME.match(name.strip())
    return (m["parent"], m["profile"].lower()) if m else None


def _mig_table(name):
    acc = catalogue_entry(name)
    table = _MIG_TABLES.get(acc.name)
    if table is None:
        have = ", ".join(_MIG_TABLES)
        raise ValueError(f"{acc.name} has no MIG (Multi-Instance GPU) profiles in the "
                         f"catalogue; MIG is an A100/A30/H100/H200/Blackwell data-centre "
                         f"feature. Profiles are tabulated for: {have}")
    return acc, table


def _compute_fraction(table, profile, sm_count=None):
    """The slice's share of the card's peaks: its SMs over the card's where known (a
    1g slice of an H100 has 16 of 132 SMs, 0.121, not 1/7), else compute slices / 7."""
    sms = sm_count if sm_count is not None else profile.sm_count
    if sms == sms and table.card_sms:
        return min(1.0, sms / table.card_sms)
    return profile.compute_slices / 7


def mig_profiles(name):
    """The MIG profiles of a GPU as a DataFrame indexed by profile ("1g.10gb" ...
    "7g.80gb" on an A100 80GB). Chapter: *Serving* (sharing a GPU).

    Columns: `compute_fraction` (the slice's SMs over the card's: 16/132 = 0.121 for an
    H100's 1g, 14/108 for an A100's, and 98/108 for an A100's 7g; compute slices / 7
    where the SMs are not known), `sm_count` (SMs `nvidia-smi mig -lgip` reports, NaN
    where not seen), `memory_fraction` and
    `bandwidth_fraction` (memory slices out of 8: a slice gets that share of the memory
    controllers, their L2 and their DRAM bandwidth), `memory_bytes` (what the slice
    reports where a published output gives it, else DERIVED as memory_fraction x the
    card's memory_bytes; `memory_source` says which), `max_instances`, `source`, `note`.
    A GPU without MIG raises ValueError."""
    import pandas as pd

    acc, table = _mig_table(name)
    rows = []
    for p in table.profiles:
        reported = p.memory_bytes == p.memory_bytes
        rows.append({
            "profile": p.profile,
            "compute_fraction": _compute_fraction(table, p),
            "sm_count": p.sm_count,
            "memory_fraction": p.memory_slices / 8,
            "bandwidth_fraction": p.memory_slices / 8,
            "memory_bytes": p.memory_bytes if reported else p.memory_slices / 8 * acc.memory_bytes,
            "memory_source": "reported" if reported else "derived",
            "max_instances": p.max_instances,
            "source": table.source, "note": table.note})
    return pd.DataFrame(rows).set_index("profile")


def mig_slice(name, profile, *, memory_bytes=None, sm_count=None) -> Accelerator:
    """A MIG slice of a catalogue GPU as an Accelerator: peaks x compute_fraction (the
    slice's SMs over the card's; `sm_count` is what torch reports for the slice, else the
    profile's -lgip count), bandwidth and L2 x bandwidth_fraction, memory from the
    profile (or `memory_bytes`, what torch reports for the slice). Labelled an estimate:
    the scaling follows the slice's share of SMs and memory slices, not a datasheet."""
    acc, table = _mig_table(name)
    if not isinstance(profile, str):
        raise TypeError(f"profile must be a MIG profile name such as '1g.10gb', got {profile!r}")
    rows = {p.profile: p for p in table.profiles}
    key = _v.choice("profile", profile.strip().lower(), list(rows))
    p = rows[key]
    if sm_count is not None:
        card = table.card_sms
        sm_count = _v.count("sm_count", sm_count, maximum=card,
                            why_maximum=f"the SMs of a whole {acc.name}" if card else "")
    compute, memory_share = _compute_fraction(table, p, sm_count), p.memory_slices / 8
    sms = sm_count if sm_count is not None else p.sm_count
    compute_how = (f"{sms:g} of {table.card_sms} SMs" if sms == sms and table.card_sms
                   else f"{p.compute_slices}/7 compute slices")
    if memory_bytes is not None:
        memory, how = _v.positive("memory_bytes", memory_bytes), "torch total_memory of this slice"
    elif p.memory_bytes == p.memory_bytes:
        memory, how = p.memory_bytes, "reported for the profile (see source)"
    else:
        memory, how = memory_share * acc.memory_bytes, "DERIVED: memory slices / 8 x the card's"
    return Accelerator(
        f"{acc.name} MIG {key}", memory, acc.bandwidth * memory_share,
        {d: v * compute for d, v in acc.peaks.items()}, tdp_w=None,
        cache_bytes=acc.cache_bytes * memory_share if acc.cache_bytes else None,
        source=table.source, memory_source=how, estimated=True,
        note=f"ESTIMATE: MIG slice {key} of {acc.name}: peaks x {compute_how}, bandwidth "
             f"and L2 x {p.memory_slices}/8 memory slices, per the MIG user guide "
             f"({MIG_GUIDE_PROFILES}). A slice has no NVLink/peer access.")


