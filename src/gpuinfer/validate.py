"""One policy for checking what a caller passed: every public function of the package
checks its arguments here, so a bad value gets the same clear error everywhere.

The policy:
- A bad *type* (None, a string, a bool, a list where a single number goes) raises
  TypeError; a bad *value* (negative, zero, NaN, inf, a fraction where a count goes, a
  size beyond any machine) raises ValueError; an unknown *name* raises KeyError that lists
  the closest known names. (Unknown names are looked up by `choice`/`names`.)
- Every message names the parameter, the value given and what was expected:
  "batch must be a whole number >= 1, got 2.5".
- Numbers come back as Python floats or ints; with `array=True` a function accepts a
  number or an array-like of numbers and gets back a float numpy array (0-d for a number);
  `scalar_or_array` turns a result back into a float where the input was a number.
- bools are never numbers here (`True` is not a batch of 1).

Chapter: none; every module uses it. Units are whatever the caller's parameter states.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import math
import numbers
from typing import Iterable

import numpy as np

__all__ = ["UnknownName", "number", "positive", "non_negative", "count", "fraction", "choice",
           "same_shape", "scalar_or_array", "is_number", "callable_", "ensure", "checked",
           "rule", "optional", "positive_or_nan"]


class UnknownName(KeyError, ValueError):
    """An unknown name (a model, a device, a format, a policy): a KeyError, as a look-up
    failure, and a ValueError, as a bad argument value, so either `except` catches it."""

    def __str__(self):  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


def _show(value) -> str:
    """A short repr for an error message (arrays are summarised, not dumped)."""
    if isinstance(value, np.ndarray) and value.size > 6:
        return f"an array of shape {value.shape}"
    if isinstance(value, (list, tuple)) and len(value) > 6:
        return f"a {type(value).__name__} of {len(value)} items"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def is_number(value) -> bool:
    """A real number (int, float, numpy scalar, 0-d array), never a bool or a string."""
    if isinstance(value, (bool, np.bool_)):
        return False
    if isinstance(value, numbers.Real):
        return True
    return isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf"


def _as_float_array(name, value, expected) -> np.ndarray:
    """`value` as a float array; TypeError for what is not numeric."""
    if value is None or isinstance(value, (str, bytes, bool, np.bool_, dict, set)):
        raise TypeError(f"{name} must be {expected}, got {_show(value)}")
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # a torch tensor
        value = value.detach().cpu().numpy()
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be {expected}, got {_show(value)}") from None
    if arr.dtype.kind == "b" or arr.dtype.kind not in "iuf":
        raise TypeError(f"{name} must be {expected}, got {_show(value)}")
    if arr.size == 0:
        raise ValueError(f"{name} must be {expected}, got an empty array")
    return arr.astype(float, copy=False)


def number(name, value, *, lo=None, hi=None, lo_open=False, hi_open=False,
           integer=False, allow_inf=False, array=False, expected=None):
    """Check a real number (or, with `array=True`, every element of an array-like)
    against a range and return it as a float (or a float array).

    `lo`/`hi`: bounds, inclusive unless `lo_open`/`hi_open`; `integer`: whole numbers
    only (2.0 passes, 2.5 does not; the result is still a float: use `count` for an int);
    `allow_inf`: +inf passes the upper side (a limit "without bound"). NaN never passes.
    `expected`: the words for the message; built from the bounds when not given.
    """
    if expected is None:
        expected = _describe(lo, hi, lo_open, hi_open, integer, array)
    if not array and not is_number(value):
        if isinstance(value, (list, tuple, np.ndarray)) or hasattr(value, "__array__"):
            raise TypeError(f"{name} takes a single number, not an array: "
                            f"got {_show(value)}")
        raise TypeError(f"{name} must be {expected}, got {_show(value)}")
    arr = _as_float_array(name, value, expected)
    bad = np.isnan(arr)
    if allow_inf:
        bad |= np.isneginf(arr)
    else:
        bad |= ~np.isfinite(arr)
    if lo is not None:
        bad |= (arr <= lo) if lo_open else (arr < lo)
    if hi is not None:
        bad |= (arr >= hi) if hi_open else (arr > hi)
    if integer:
        finite = np.isfinite(arr)
        bad |= finite & (arr != np.round(arr))
    if np.any(bad):
        first = arr[bad].flat[0] if arr.ndim else arr.item()
        where = "" if arr.ndim == 0 else f" (e.g. {first:g})"
        raise ValueError(f"{name} must be {expected}, got {_show(value)}{where}")
    return arr if array else float(arr)


def _describe(lo, hi, lo_open, hi_open, integer, array) -> str:
    """'a whole number >= 1 and <= 10' from the bounds."""
    words = "a whole number" if integer else "a number"
    bounds = []
    if lo is not None:
        bounds.append(f"{'>' if lo_open else '>='} {lo:g}")
    if hi is not None:
        bounds.append(f"{'<' if hi_open else '<='} {hi:g}")
    text = " ".join([words, " and ".join(bounds)]).strip()
    return text + (" (or an array of them)" if array else "")


def positive(name, value, *, integer=False, array=False, allow_inf=False):
    """A number > 0 (finite unless `allow_inf`)."""
    kind = "a positive whole number" if integer else (
        "a positive number" if allow_inf else "a positive, finite number")
    if array:
        kind += " (or an array of them)"
    return number(name, value, lo=0, lo_open=True, integer=integer, array=array,
                  allow_inf=allow_inf, expected=kind)


def non_negative(name, value, *, integer=False, array=False):
    """A finite number >= 0."""
    kind = "a whole number >= 0" if integer else "a finite number >= 0"
    if array:
        kind += " (or an array of them)"
    return number(name, value, lo=0, integer=integer, array=array, expected=kind)


def count(name, value, *, minimum=1, maximum=None, why_maximum=""):
    """A whole number (int, or a float such as 4.0) from `minimum` to `maximum`,
    returned as an int. `why_maximum` explains the upper bound in the error: a count
    that no machine could mean (10**12 warm-up calls) is refused before any work."""
    expected = f"a whole number >= {minimum}"
    if maximum is not None:
        expected += f" and <= {maximum:,}"
    if not is_number(value):
        raise TypeError(f"{name} must be {expected}, got {_show(value)}")
    v = float(value)
    if not math.isfinite(v) or v != round(v) or v < minimum:
        raise ValueError(f"{name} must be {expected}, got {_show(value)}")
    if maximum is not None and v > maximum:
        raise ValueError(f"{name} must be {expected}, got {_show(value)}"
                         + (f": {why_maximum}" if why_maximum else ""))
    return int(v)


def fraction(name, value, *, zero_ok=False, one_ok=True, array=False):
    """A fraction: in (0, 1] by default (`zero_ok` admits 0, `one_ok=False` refuses 1).
    A percentage (69 for 69%) is refused with a hint."""
    lo_word = "[0" if zero_ok else "(0"
    hi_word = "1]" if one_ok else "1)"
    expected = f"a fraction in {lo_word}, {hi_word}"
    try:
        return number(name, value, lo=0, lo_open=not zero_ok, hi=1, hi_open=not one_ok,
                      array=array, expected=expected)
    except ValueError:
        arr = np.asarray(value, dtype=float) if not isinstance(value, str) else None
        if arr is not None and np.all(np.isfinite(arr)) and np.all(arr > 1) \
                and np.all(arr <= 100):
            raise ValueError(f"{name} must be {expected}, got {_show(value)}: a fraction, "
                             f"not a percentage ({float(np.ravel(arr)[0]):g}% is "
                             f"{float(np.ravel(arr)[0]) / 100:g})") from None
        raise


def choice(name, value, options: Iterable, *, normalise=None):
    """`value` if it is one of `options` (compared after `normalise`, e.g. str.lower),
    else `UnknownName` (a KeyError and a ValueError) naming the closest options
    (TypeError for a non-string)."""
    options = list(options)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {', '.join(map(repr, options))}; "
                        f"got {_show(value)}")
    key = normalise(value) if normalise else value
    table = {(normalise(o) if normalise else o): o for o in options}
    if key in table:
        return table[key]
    close = difflib.get_close_matches(key, list(table), n=3, cutoff=0.5)
    hint = f" (did you mean {' or '.join(repr(table[c]) for c in close)}?)" if close else ""
    raise UnknownName(f"{name}={value!r} is not known{hint}. Known: "
                      f"{', '.join(map(repr, options))}")


def each(name, values, check, *, of=""):
    """A non-empty list or tuple, each item passed through `check(f"{name}[i]", item)`
    (for example `count` or a `choice` bound with functools.partial); returns the checked
    items as a list. A string, a number or None is refused (TypeError), and so is an empty
    list (ValueError), naming `name` and, with `of`, what the items must be."""
    expected = f"a non-empty list or tuple{' of ' + of if of else ''}"
    if not isinstance(values, (list, tuple)):
        raise TypeError(f"{name} must be {expected}, got {_show(values)}")
    if not values:
        raise ValueError(f"{name} must be {expected}, got {_show(values)}")
    return [check(f"{name}[{i}]", v) for i, v in enumerate(values)]


def same_shape(**arrays):
    """Broadcast arrays named by keyword; ValueError naming them and their shapes when
    they do not broadcast (instead of numpy's anonymous message). Returns the arrays."""
    try:
        return np.broadcast_arrays(*arrays.values())
    except ValueError:
        shapes = ", ".join(f"{k} {np.shape(v)}" for k, v in arrays.items())
        raise ValueError(f"these arrays must have matching lengths (or be single "
                         f"numbers): {shapes}") from None


def scalar_or_array(x):
    """A 0-d result as a Python float, an array as a float array."""
    arr = np.asarray(x, dtype=float)
    return float(arr) if arr.ndim == 0 else arr


def callable_(name, fn):
    """`fn` if it can be called, else TypeError."""
    if not callable(fn):
        raise TypeError(f"{name} must be a function (callable), got {_show(fn)}")
    return fn


def ensure(condition, message, exc=ValueError):
    """Raise `exc(message)` unless `condition`: for checks between arguments."""
    if not condition:
        raise exc(message)


def positive_or_nan(name, value, *, array=True):
    """A positive, finite number or array in which NaN may stand for "unknown" (a peak
    the catalogue lacks): NaN passes and gives NaN results; 0, negatives, inf do not."""
    expected = "a positive, finite number (or NaN: unknown)"
    if not array and not is_number(value):
        raise TypeError(f"{name} must be {expected}, got {_show(value)}")
    arr = _as_float_array(name, value, expected)
    known = arr[~np.isnan(arr)]
    if np.any(known <= 0) or np.any(np.isinf(known)):
        raise ValueError(f"{name} must be {expected}, got {_show(value)}")
    return arr if array else float(arr)


def rule(check, **options):
    """A check for `checked`: `check(name, value, **options)`, e.g.
    `rule(non_negative, array=True)` for FLOPs given as a number or an array."""
    def apply(name, value):
        return check(name, value, **options)

    apply.__name__ = getattr(check, "__name__", "check")
    return apply


def optional(check):
    """A check for `checked` that lets None (a default decided later) through."""
    def apply(name, value):
        return None if value is None else check(name, value)

    apply.__name__ = f"optional {getattr(check, '__name__', 'check')}"
    return apply


def checked(*, returns=None, **checks):
    """Decorator: check a function's arguments before its body runs, so the body is the
    formula alone (the pages print it with `inspect.getsource`).

    `checks`: {parameter: check}, a check being called as `check(name, value)` and
    returning the value the body gets (`positive`, `count`, ... or a `rule`). `returns`:
    applied to the body's result (`scalar_or_array` gives a float for number inputs).
    The unchecked body is the wrapper's `__wrapped__`."""
    def decorate(fn):
        signature = inspect.signature(fn)
        unknown = set(checks) - set(signature.parameters)
        if unknown:
            raise TypeError(f"checked: {fn.__name__} has no parameter {sorted(unknown)}")

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError as e:
                raise TypeError(f"{fn.__name__}(): {e}") from None
            bound.apply_defaults()
            for name, check in checks.items():
                bound.arguments[name] = check(name, bound.arguments[name])
            result = fn(*bound.args, **bound.kwargs)
            return result if returns is None else returns(result)

        return wrapper

    return decorate
