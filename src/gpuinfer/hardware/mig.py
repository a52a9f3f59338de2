"""MIG: slices of one GPU, as Accelerators and as NVIDIA's profile tables.

Chapter: *Serving* (sharing a GPU). NVIDIA's MIG user guide: a GPU has 7 compute slices
(SM groups) and 8 memory slices (memory controllers with their L2 and DRAM); a profile
"<g>g.<m>gb" takes g compute slices and some memory slices. The guide's tables give each
profile's fraction of SMs (g/7), fraction of memory (slices/8) and the most instances;
`nvidia-smi mig -lgip` (NVIDIA's own issue threads) gives the GiB and SMs each reports.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass

from .. import validate as _v
from .devices import MIG_GUIDE_GPUS, Accelerator, GiB, catalogue_entry

_MIG_GUIDE = "https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html"


@dataclass(frozen=True)
class _MigProfile:
    profile: str
    compute_slices: int  # of 7
    memory_slices: int  # of 8
    max_instances: int
    sm_count: float = math.nan  # from nvidia-smi mig -lgip, where seen
    memory_bytes: float = math.nan  # reported by nvidia-smi mig -lgip / deviceQuery


def _lgip(*rows):
    """Profiles from `nvidia-smi mig -lgip` rows: (profile, g, memory slices, instances,
    SMs, GiB)."""
    return [_MigProfile(p, g, m, n, sm, gib * GiB if gib == gib else math.nan)
            for p, g, m, n, sm, gib in rows]


_NAN = math.nan
_MIG_TABLES = {
    "A100 40GB": dict(
        card_sms=108,
        profiles=_lgip(("1g.5gb", 1, 1, 7, 14, 4.75), ("1g.5gb+me", 1, 1, 1, 14, _NAN),
                       ("1g.10gb", 1, 2, 4, 14, _NAN), ("2g.10gb", 2, 2, 3, 28, 9.75),
                       ("3g.20gb", 3, 4, 2, 42, 19.62), ("4g.20gb", 4, 4, 1, 56, 19.62),
                       ("7g.40gb", 7, 8, 1, 98, 39.50)),
        source=_MIG_GUIDE + "; nvidia-smi mig -lgip on an A100-SXM4-40GB (Argonne ALCF's "
               "ThetaGPU documentation, 'Nvidia Multi-Instance GPU (MIG) mode'): 14/28/42/"
               "56/98 SMs and 4.75/9.75/19.62/19.62/39.50 GiB; an A100 has 108 SMs "
               "(https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/nvidia-ampere"
               "-architecture-whitepaper.pdf)",
        note="The guide prints 1/8 of memory for 1g.10gb; a 10 GB slice of a 40 GB card "
             "is 2/8, and 2/8 is used here. 1g.5gb+me and 1g.10gb (newer drivers, not in "
             "that -lgip) take the 1g's 14 SMs; their memory_bytes is DERIVED. Even 7g "
             "has 98 of the 108 SMs: MIG leaves ten idle."),
    "A100 80GB": dict(
        card_sms=108,
        profiles=[_MigProfile("1g.10gb", 1, 1, 7, 14, 10.2e9),
                  _MigProfile("1g.10gb+me", 1, 1, 1, 14),
                  _MigProfile("1g.20gb", 1, 2, 4, 14),
                  _MigProfile("2g.20gb", 2, 2, 3, 28, 20.9e9),
                  _MigProfile("3g.40gb", 3, 4, 2, 42, 42.4e9),
                  _MigProfile("4g.40gb", 4, 4, 1, 56),
                  _MigProfile("7g.80gb", 7, 8, 1, 98)],
        source=_MIG_GUIDE + " (the guide names the 80GB profiles after the 40GB table); "
               "memory and SMs of 1g.10gb/2g.20gb/3g.40gb: https://arcs-njit-edu.github.io/"
               "Docs/MIG/profile-comparison (deviceQuery, decimal GB to 3 figures)",
        note="memory_bytes of the other profiles is DERIVED (memory slices / 8 x the card's "
             "memory_bytes); their SMs are the A100 40GB's -lgip counts (the same GA100 "
             "partitions: 14 per compute slice, 98 for 7g)."),
    "H100 SXM": dict(
        card_sms=132,
        profiles=_lgip(("1g.10gb", 1, 1, 7, 16, 9.75), ("1g.10gb+me", 1, 1, 1, 16, 9.75),
                       ("1g.20gb", 1, 2, 4, 26, 19.62), ("2g.20gb", 2, 2, 3, 32, 19.62),
                       ("3g.40gb", 3, 4, 2, 60, 39.50), ("4g.40gb", 4, 4, 1, 64, 39.50),
                       ("7g.80gb", 7, 8, 1, 132, 79.25)),
        source=_MIG_GUIDE + "; nvidia-smi mig -lgip on an H100 80GB: "
               "https://jbarrow.ai/field_notes/nvidia-mig/",
        note=""),
    "H100 NVL": dict(
        card_sms=132,
        profiles=_lgip(("1g.12gb", 1, 1, 7, 16, 10.75), ("1g.12gb+me", 1, 1, 1, 16, 10.75),
                       ("1g.24gb", 1, 2, 4, 26, 21.62), ("2g.24gb", 2, 2, 3, 32, 21.62),
                       ("3g.47gb", 3, 4, 2, 60, 46.38), ("4g.47gb", 4, 4, 1, 64, _NAN),
                       ("7g.94gb", 7, 8, 1, 132, _NAN)),
        source=_MIG_GUIDE + "; nvidia-smi mig -lgip on an H100 NVL: "
               "https://github.com/NVIDIA/gpu-operator/pull/900 and "
               "https://github.com/NVIDIA/mig-parted/pull/101",
        note="The 4g.47gb name and the instance counts of 3g/4g/7g follow the other Hopper "
             "tables (not seen in a published -lgip); their memory_bytes are DERIVED. The "
             "SMs of 2g-7g are the H100 SXM's (the same 132-SM GH100)."),
    "H200": dict(
        card_sms=132,
        profiles=_lgip(("1g.18gb", 1, 1, 7, 16, 16.00), ("1g.18gb+me", 1, 1, 1, 16, 16.00),
                       ("1g.35gb", 1, 2, 4, 26, 32.25), ("2g.35gb", 2, 2, 3, 32, 32.25),
                       ("3g.71gb", 3, 4, 2, 60, 69.50), ("4g.71gb", 4, 4, 1, 64, 69.50),
                       ("7g.141gb", 7, 8, 1, 132, 139.75)),
        source=_MIG_GUIDE + "; nvidia-smi mig -lgip on an H200: "
               "https://github.com/NVIDIA/mig-parted/issues/120",
        note=""),
}
_MIG_TABLES["H100 PCIe"] = dict(
    _MIG_TABLES["H100 SXM"],
    card_sms=114,
    profiles=[dataclasses.replace(p, sm_count=math.nan) for p in _MIG_TABLES["H100 SXM"]["profiles"]],
    note="ASSUMED the H100 SXM's table: the guide lists H100-PCIE 80GB with 7 instances "
         f"({MIG_GUIDE_GPUS}); the -lgip figures were read on an H100 80GB. Its 114 SMs "
         "split differently from the SXM's 132 and no -lgip was found: compute is "
         "compute slices / 7.")
# The PCIe A100s are the same GA100 with the same memory: the SXM cards' MIG tables.
_MIG_TABLES["A100 40GB PCIe"] = _MIG_TABLES["A100 40GB"]
_MIG_TABLES.setdefault("A100 80GB PCIe", _MIG_TABLES["A100 80GB"])
_MIG_TABLES["H200 NVL"] = dict(
    _MIG_TABLES["H200"],
    note="ASSUMED the H200 SXM's table (the guide lists H200 NVL 141GB, 7 instances, "
         f"{MIG_GUIDE_GPUS}).")

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
    if sms == sms and table.get("card_sms"):
        return min(1.0, sms / table["card_sms"])
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
    for p in table["profiles"]:
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
            "source": table["source"], "note": table["note"]})
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
    rows = {p.profile: p for p in table["profiles"]}
    key = _v.choice("profile", profile.strip().lower(), list(rows))
    p = rows[key]
    if sm_count is not None:
        card = table.get("card_sms")
        sm_count = _v.count("sm_count", sm_count, maximum=card,
                            why_maximum=f"the SMs of a whole {acc.name}" if card else "")
    compute, memory_share = _compute_fraction(table, p, sm_count), p.memory_slices / 8
    sms = sm_count if sm_count is not None else p.sm_count
    compute_how = (f"{sms:g} of {table['card_sms']} SMs" if sms == sms and table.get("card_sms")
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
        source=table["source"], memory_source=how, estimated=True,
        note=f"ESTIMATE: MIG slice {key} of {acc.name}: peaks x {compute_how}, bandwidth "
             f"and L2 x {p.memory_slices}/8 memory slices, per the MIG user guide "
             f"({_MIG_GUIDE}). A slice has no NVLink/peer access.")


