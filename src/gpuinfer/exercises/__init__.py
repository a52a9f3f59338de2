"""Self-check exercises: `check(name, answer)` says whether a numeric answer is right,
within a tolerance, and gives a hint if it is not, without ever printing the answer.

One module here per page that asks exercises, named after the page
(`chapters/01_roofline` -> `chapter01_roofline`, `labs/04_quantised_weights` ->
`lab04_quantised_weights`), registers that page's exercises with `@register(...)` on a
function that *computes* the answer with the package, so an answer cannot drift from the
formulas the course teaches; helpers several pages share live in `common`. Modules are
discovered automatically: a contributor adds a file, nothing else.

A wrong answer that is off by a factor people often slip by (a percentage for a
fraction, the sparse peak for the dense one, GiB for GB, a unit prefix, rounding up for
rounding down) gets a hint about that slip; an exercise can add its own slips with
`slips={factor: "hint"}` (they are tried first). A slip's hint fires only *near* that
slip's value (`Exercise.slip_tolerance`: never wider than a quarter of the slip's
distance from the right answer), so an answer that is merely off gets a neutral "not
yet" and the exercise's hint, not a wrong diagnosis. Outside a notebook or an
interactive prompt (`python -c`, a script) `check` also prints its verdict. `answer_key()` lists every answer for instructors (the
workshop's answer key is generated from it); learners' pages never show it.
"""

from __future__ import annotations

import difflib
import importlib
import math
import pkgutil
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable

from .. import validate as _v

#: Slips a learner makes, as (answer given / right answer, hint). The first two apply
#: only where the unit is a fraction or a percentage.
COMMON_SLIPS = (
    (100.0, "It looks like a percentage: give a fraction (0.69, not 69)."),
    (0.01, "It looks 100 times too small: the question asks for a percentage."),
    (2.0, "Twice the answer: a sparse (2:4) peak, or counting a copy's bytes twice?"),
    (0.5, "Half the answer: the dense peak is half the sparse one, not the other way "
          "round; or a factor 2 (bytes per fp16 weight, FLOPs per multiply-add) is missing."),
    (2**30 / 1e9, "Off by 1.074: GB (1e9 B) and GiB (2**30 B) mixed up."),
    (1e9 / 2**30, "Off by 1/1.074: GB (1e9 B) and GiB (2**30 B) mixed up."),
    (1e3, "A factor 1,000 off: check the unit prefix (k, M, G; ms against s)."),
    (1e-3, "A factor 1,000 off: check the unit prefix (k, M, G; ms against s)."),
    (1e6, "A factor 10**6 off: check the unit (bytes against MB, s against us)."),
    (1e-6, "A factor 10**6 off: check the unit (bytes against MB, s against us)."),
    (1e9, "A factor 10**9 off: check the unit (bytes against GB, FLOP against GFLOP)."),
    (1e-9, "A factor 10**9 off: check the unit (bytes against GB, FLOP against GFLOP)."),
)


@dataclass(frozen=True)
class Exercise:
    name: str
    question: str
    unit: str
    hint: str
    answer: Callable[[], float]
    rel_tol: float = 0.02
    abs_tol: float = 0.0
    where: str = ""  # the chapter or lab that asks it
    slips: dict = field(default_factory=dict)  # {answer given / right answer: hint}

    @cached_property
    def right(self) -> float:
        """The answer, computed once (the package is deterministic)."""
        return float(self.answer())

    def is_correct(self, value) -> bool:
        return math.isclose(float(value), self.right, rel_tol=self.rel_tol,
                            abs_tol=self.abs_tol)

    def slip_tolerance(self, factor) -> float:
        """Relative distance from `right * factor` within which that slip's hint fires:
        the exercise's tolerance (at least 0.5%), but never more than a quarter of the
        slip's own distance from 1, so that a slip's window stays near the slip's value
        (GiB for GB is a factor 1.074: its window is under 1.9% wide, not the 5% an
        exercise may accept around the right answer)."""
        return min(max(self.rel_tol, 0.005), abs(factor - 1.0) / 4)

    def slip(self, value) -> str | None:
        """The hint for a recognised slip, or None."""
        right = self.right
        if right == 0:
            return None
        unit = self.unit.lower()
        for factor, hint in [*self.slips.items(), *COMMON_SLIPS]:
            if factor == 100.0 and "fraction" not in unit:
                continue
            if factor == 0.01 and "%" not in unit and "percent" not in unit:
                continue
            if math.isclose(value, right * factor, rel_tol=self.slip_tolerance(factor)):
                return hint
        if self.abs_tol >= 0.5 and abs(value - right) <= 1.0 + self.abs_tol:
            return "Off by one: round as the question says (down, for a count that must fit)."
        return None


_REGISTRY: dict[str, Exercise] = {}


def register(name, *, question, unit, hint, where, rel_tol=0.02, abs_tol=0.0, slips=None):
    """Decorator: register the function that computes the answer to exercise `name`.
    `slips`: {factor: hint} for this exercise's own common mistakes (an answer equal to
    the right one times `factor` gets `hint`)."""
    for label, value in (("name", name), ("question", question), ("unit", unit),
                         ("hint", hint), ("where", where)):
        if not isinstance(value, str) or not value.strip():
            raise TypeError(f"exercise {label} must be a non-empty string, got {value!r}")
    if name in _REGISTRY:  # refused now, not only when the function is decorated
        raise ValueError(f"exercise name={name!r} is registered already (in "
                         f"{_REGISTRY[name].where}); pick another name")
    rel_tol = _v.non_negative("rel_tol", rel_tol)
    abs_tol = _v.non_negative("abs_tol", abs_tol)
    slips = dict(slips or {})
    for factor, text in slips.items():
        _v.positive("a slip's factor", factor)
        if not isinstance(text, str):
            raise TypeError(f"a slip's hint must be a string, got {text!r}")

    def decorate(fn):
        _v.callable_("the answer function", fn)
        if name in _REGISTRY:
            raise ValueError(f"exercise {name!r} is registered twice")
        _REGISTRY[name] = Exercise(name, question, unit, hint, fn, rel_tol, abs_tol, where,
                                   slips)
        return fn

    return decorate


class Result:
    """The verdict: truthy when right; its repr and str are the one-line message, so a
    notebook, an interactive prompt and `print` all show it."""

    def __init__(self, ok: bool, message: str):
        self.ok, self.message = ok, message

    def __bool__(self):
        return self.ok

    def __repr__(self):
        return self.message

    def __str__(self):
        return self.message

    def _repr_markdown_(self):
        return ("✅ " if self.ok else "❌ ") + self.message


def _load_all():
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")


def names() -> list[str]:
    """Every registered exercise's name."""
    _load_all()
    return sorted(_REGISTRY)


def get(name) -> Exercise:
    _load_all()
    if not isinstance(name, str):
        raise TypeError(f"an exercise name is a string such as 'roofline-ridge-a100', got {name!r}")
    if name not in _REGISTRY:
        close = difflib.get_close_matches(name, list(_REGISTRY), n=3, cutoff=0.4)
        hint = (f"; did you mean {' or '.join(map(repr, close))}?" if close
                else "; exercises.names() lists them")
        raise _v.UnknownName(f"no exercise named {name!r}{hint}")
    return _REGISTRY[name]


def _interactive() -> bool:
    """True in a notebook, IPython or the interactive prompt, which show a returned
    value themselves; False in `python -c` or a script, which do not."""
    import sys

    shell = sys.modules.get("IPython")
    if shell is not None and getattr(shell, "get_ipython", lambda: None)() is not None:
        return True
    return hasattr(sys, "ps1") or bool(sys.flags.interactive)


def check(name, answer) -> Result:
    """Is `answer` (a number, in the unit the question asks for) right? Never reveals it.
    A wrong answer off by a common slip (a percentage, the sparse peak, GiB, a prefix)
    gets a hint about that slip. Returns the verdict (a `Result`: truthy when right);
    outside a notebook or an interactive prompt it also prints it, so
    `python -c "from gpuinfer.exercises import check; check(...)"` shows it."""
    result = _verdict(name, answer)
    if not _interactive():
        print(result)
    return result


def _verdict(name, answer) -> Result:
    ex = get(name)
    try:
        value = float(answer)
    except (TypeError, ValueError):
        return Result(False, f"{name}: give a number in {ex.unit}, not {answer!r}.")
    if not math.isfinite(value):
        return Result(False, f"{name}: {answer!r} is not a finite number.")
    if ex.is_correct(value):
        return Result(True, f"{name}: correct.")
    slip = ex.slip(value)
    if slip:
        return Result(False, f"{name}: not yet. {slip} (Answer in {ex.unit}.)")
    return Result(False, f"{name}: not yet. Hint: {ex.hint} (Answer in {ex.unit}.)")


def answer_key(where=None):
    """Every exercise with its answer (a DataFrame: `where`, `name`, `question`, `unit`,
    `answer`, `tolerance`), for instructors; `where` filters to one page
    ("labs/01_weight_reads"). The workshop's printable answer key is built from it."""
    import pandas as pd

    rows = []
    for name in names():
        ex = _REGISTRY[name]
        if where is not None and ex.where != where:
            continue
        # 0.2% reads "±0.2%", not "±0%"; a float's rounding slack (1e-6 or less) is exact.
        tol = (f"±{ex.rel_tol:.1%}".replace(".0%", "%") if ex.rel_tol > 1e-6 else "") + (
            f" ±{ex.abs_tol:g}" if ex.abs_tol > 1e-6 else "")
        rows.append({"where": ex.where, "name": name, "question": ex.question,
                     "unit": ex.unit, "answer": ex.right,
                     "tolerance": tol.strip() or "exact"})
    if where is not None and not rows:
        pages = sorted({e.where for e in _REGISTRY.values()})
        raise _v.UnknownName(f"no exercise is asked in {where!r}; pages with exercises: "
                             f"{', '.join(pages)}")
    return pd.DataFrame(rows, columns=["where", "name", "question", "unit", "answer", "tolerance"])
