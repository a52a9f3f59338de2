"""Helpers for the course's notebooks: numbers in prose, and where the notebook runs.

`glue` hands a computed value to the website's prose (myst-nb's glue) so the text
cannot drift from the package; on Colab, where myst-nb is not installed, it does nothing.
"""

from __future__ import annotations

import math

_PREFIXES = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]


def glue(name: str, value, display: bool = False):
    """myst-nb's glue when building the book; a no-op elsewhere (Colab, plain Jupyter).

    Numpy and torch scalars are glued as Python numbers: myst-nb formats the text repr,
    and `np.float64(1.0)` would not format as `{glue:text}`name:.1f``."""
    try:
        from myst_nb import glue as _glue
    except ImportError:
        return None
    _glue(name, plain(value), display=display)
    return None


def plain(value):
    """A numpy or torch scalar (0-d) as the Python number it holds; anything else as is."""
    if getattr(value, "shape", None) == () and hasattr(value, "item"):
        return value.item()
    return value


def si(value: float, unit: str, digits: int = 3) -> str:
    """`value` with an SI prefix and `digits` significant figures: si(1.4e10, "B") ->
    '14.0 GB'; si(3.35e12, "B/s") -> '3.35 TB/s'. Decimal prefixes, as bandwidth is."""
    if value is None or not math.isfinite(value):
        return f"n/a {unit}"
    for factor, prefix in _PREFIXES:
        if abs(value) >= factor:
            return f"{value / factor:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}"


def number(value: float, digits: int = 3) -> str:
    """A count for prose: whole numbers at or above 10**(digits-1) keep every digit, with
    thousands separators (2285.7 -> '2,286'); smaller values get `digits` significant
    figures (0.69341 -> '0.693')."""
    if value is None or not math.isfinite(value):
        return "n/a"
    if abs(value) >= 10 ** (digits - 1):
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"

