"""Self-check exercises: `check(name, answer)` says whether a numeric answer is right,
within a tolerance, and gives a hint if it is not, without ever printing the answer.

Each topic module here (one per chapter or lab) registers its exercises with
`@register(...)` on a function that *computes* the answer with the package, so an answer
cannot drift from the formulas the course teaches. Modules are discovered automatically:
a contributor adds a file, nothing else.
"""

from __future__ import annotations

import importlib
import math
import pkgutil
from dataclasses import dataclass
from typing import Callable


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

    def is_correct(self, value) -> bool:
        return math.isclose(float(value), float(self.answer()), rel_tol=self.rel_tol,
                            abs_tol=self.abs_tol)


_REGISTRY: dict[str, Exercise] = {}


def register(name, *, question, unit, hint, where, rel_tol=0.02, abs_tol=0.0):
    """Decorator: register the function that computes the answer to exercise `name`."""
    if not rel_tol >= 0 or not abs_tol >= 0:
        raise ValueError(f"tolerances must be >= 0, got rel_tol={rel_tol}, abs_tol={abs_tol}")

    def decorate(fn):
        if name in _REGISTRY:
            raise ValueError(f"exercise {name!r} is registered twice")
        _REGISTRY[name] = Exercise(name, question, unit, hint, fn, rel_tol, abs_tol, where)
        return fn

    return decorate


class Result:
    """The verdict: truthy when right; shows a one-line message in a notebook."""

    def __init__(self, ok: bool, message: str):
        self.ok, self.message = ok, message

    def __bool__(self):
        return self.ok

    def __repr__(self):
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
    if name not in _REGISTRY:
        raise KeyError(f"no exercise named {name!r}; registered: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


def check(name, answer) -> Result:
    """Is `answer` (a number, in the unit the question asks for) right? Never reveals it."""
    ex = get(name)
    try:
        value = float(answer)
    except (TypeError, ValueError):
        return Result(False, f"{name}: give a number in {ex.unit}, not {answer!r}.")
    if not math.isfinite(value):
        return Result(False, f"{name}: {answer!r} is not a finite number.")
    if ex.is_correct(value):
        return Result(True, f"{name}: correct.")
    return Result(False, f"{name}: not yet. Hint: {ex.hint} (Answer in {ex.unit}.)")
