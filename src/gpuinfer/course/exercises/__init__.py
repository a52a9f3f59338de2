"""Self-check exercises: `check(name, answer)` says whether a numeric answer is right,
within a tolerance, and gives a hint if it is not, without ever printing the answer.

One module here per page that asks exercises, named after the page
(`chapters/01_roofline` -> `chapter01_roofline`, `labs/04_quantised_weights` ->
`lab04_quantised_weights`), registers that page's exercises with `@register(...)` on a
function that *computes* the answer with the package, so an answer cannot drift from the
formulas the course teaches; helpers several pages share live in `common`. Modules are
discovered automatically: a contributor adds a file, nothing else.

A wrong answer that is off by a factor people often slip by (a percentage for a
fraction, the sparse peak for the dense one, GiB for GB, a unit prefix, rounding the wrong
way) gets a hint about that slip, but only where the slip can happen: each exercise has a
*kind* (bytes, bandwidth, FLOP/s, intensity, time, rate, count, fraction, money, ...),
read from its unit (`kind_of`) or declared with `kind=`, and each of `COMMON_SLIPS` names
the kinds it applies to (no "sparse peak" on a time or a token count, no GiB on a count).
An exercise can add its own slips with `slips={factor: "hint"}` (they are tried first). A slip's hint fires only *near* that
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

from gpuinfer import validate as _v

#: What an answer can be. A generic slip's hint fires only for the kinds it names.
KINDS = {
    "bytes": "a number of bytes (B, GB, bytes per weight)",
    "bandwidth": "bytes per second",
    "flop_rate": "FLOP per second",
    "flop_ratio": "one FLOP rate over another (a peak's ratio to another peak)",
    "intensity": "FLOP per byte",
    "time": "seconds (s, ms, us)",
    "rate": "things per second (tokens/s, requests/s)",
    "count": "how many of something (sequences, GPUs, experts, tokens, parameters)",
    "fraction": "a fraction from 0 to 1",
    "percent": "a percentage",
    "money": "a price or cost (USD)",
    "ratio": "a dimensionless ratio or factor",
    "decibel": "decibels",
    "value": "a value in the units of another quantity (a quantiser's scale or output)",
    "other": "not said: only the exercise's own slips apply",
}

#: A unit's kind: the first pattern that matches the lower-cased unit (`kind_of`).
_UNIT_KINDS = (
    (r"^(usd|eur|\$)", "money"),
    (r"flop/byte|flop per byte", "intensity"),
    (r"flop/s|flops per second", "flop_rate"),
    (r"\b(bytes|[kmgt]?b)/s\b|bytes per second", "bandwidth"),
    (r"/s\b|per second", "rate"),
    (r"fraction", "fraction"),
    (r"%|percent", "percent"),
    (r"\bdb\b", "decibel"),
    (r"\bbytes?\b|^[kmgt]i?b\b", "bytes"),
    (r"^(s|seconds?|ms|milliseconds?|us|µs|microseconds?|ns)\b", "time"),
    (r"^(sequences|devices|gpus|experts|instances|servers|rows|tokens|parameters|requests|"
     r"layers|blocks|batches|launches|kernels|calls|users|steps|nodes)\b", "count"),
    (r"ratio|dimensionless|plain number|\btimes\b", "ratio"),
    (r"^units of", "value"),
)


def kind_of(unit: str) -> str | None:
    """The kind of an answer in `unit` ("bytes (exact)" -> "bytes", "tokens/s" -> "rate",
    "requests per batch" -> "count"), or None when the unit does not say."""
    import re

    text = unit.strip().lower()
    return next((kind for pattern, kind in _UNIT_KINDS if re.search(pattern, text)), None)


@dataclass(frozen=True)
class Slip:
    """A slip people make on answers of some kinds: the answer given / the right one, and
    the hint. It is tried only on exercises whose kind is in `kinds`."""

    factor: float
    hint: str
    kinds: frozenset


def _slips(kinds, *pairs):
    return tuple(Slip(f, h, frozenset(kinds.split())) for f, h in pairs)


#: Slips a learner makes, each for the kinds of answer it can happen to.
COMMON_SLIPS = (
    *_slips("fraction", (100.0, "It looks like a percentage: give a fraction (0.69, not 69).")),
    *_slips("percent", (0.01, "It looks 100 times too small: the question asks for a "
                              "percentage.")),
    *_slips("flop_rate flop_ratio",
            (2.0, "Twice the answer: the sparse (2:4) peak? Ordinary dense matmuls get the "
                  "dense one, half of it."),
            (0.5, "Half the answer: the dense peak is half the sparse one, not the other way "
                  "round; or a multiply-add counted as one FLOP instead of two?")),
    *_slips("intensity",
            (2.0, "Twice the answer: an fp16 value is 2 bytes, not 1 (or a multiply-add "
                  "counted as 4 FLOPs)?"),
            (0.5, "Half the answer: a multiply-add is 2 FLOPs (or an fp16 value counted as "
                  "4 bytes)?")),
    *_slips("bytes bandwidth",
            (2.0, "Twice the answer: bytes counted twice (a copy's read and its write), or 2 "
                  "bytes a value where the format stores 1?"),
            (0.5, "Half the answer: a factor 2 is missing (2 bytes an fp16 value; a copy "
                  "reads and writes each byte)?"),
            (2**30 / 1e9, "Off by 1.074: GB (1e9 B) and GiB (2**30 B) mixed up."),
            (1e9 / 2**30, "Off by 1/1.074: GB (1e9 B) and GiB (2**30 B) mixed up."),
            (1e3, "A factor 1,000 off: check the unit prefix (B, kB, MB, GB)."),
            (1e-3, "A factor 1,000 off: check the unit prefix (B, kB, MB, GB)."),
            (1e6, "A factor 10**6 off: check the unit (bytes against MB)."),
            (1e-6, "A factor 10**6 off: check the unit (bytes against MB)."),
            (1e9, "A factor 10**9 off: check the unit (bytes against GB)."),
            (1e-9, "A factor 10**9 off: check the unit (bytes against GB).")),
    *_slips("time",
            (1e3, "A factor 1,000 off: check the unit (s against ms, ms against us)."),
            (1e-3, "A factor 1,000 off: check the unit (s against ms, ms against us)."),
            (1e6, "A factor 10**6 off: check the unit (s against us)."),
            (1e-6, "A factor 10**6 off: check the unit (s against us).")),
    *_slips("flop_rate rate money",
            (1e3, "A factor 1,000 off: check the unit prefix (k, M, G; per thousand "
                  "against per million)."),
            (1e-3, "A factor 1,000 off: check the unit prefix (k, M, G; per thousand "
                   "against per million)."),
            (1e6, "A factor 10**6 off: check the unit prefix (k, M, G)."),
            (1e-6, "A factor 10**6 off: check the unit prefix (k, M, G)."),
            (1e9, "A factor 10**9 off: check the unit (FLOP against GFLOP, per second "
                  "against per billion)."),
            (1e-9, "A factor 10**9 off: check the unit (FLOP against GFLOP, per second "
                   "against per billion).")),
    *_slips("count",
            (1e-3, "A factor 1,000 small: give the number itself, not in thousands."),
            (1e-6, "A factor 10**6 small: give the number itself, not in millions."),
            (1e-9, "A factor 10**9 small: give the number itself (7e9), not in billions.")),
)

#: What the off-by-one hint says, by the way the question rounds (`Exercise.rounding`).
ROUNDING_HINTS = {
    "down": "Off by one: round down (the most that fits is the whole number at or below "
            "the exact value).",
    "up": "Off by one: round up (the fewest that suffice, or the first that reaches it, is "
          "the whole number at or above the exact value).",
    None: "Off by one: round as the question says.",
}


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
    kind: str = ""  # one of KINDS: which generic slips can apply

    @property
    def common_slips(self) -> list[Slip]:
        """The generic slips that can happen to an answer of this exercise's kind."""
        return [s for s in COMMON_SLIPS if self.kind in s.kinds]

    @property
    def rounding(self) -> str | None:
        """"up" or "down": how the question rounds a whole-number answer, from its words
        ("round down", "rounded up"; "smallest", "fewest", "from which" round up; "most",
        "largest", "fit" round down); None when it does not say."""
        import re

        text = f"{self.unit} {self.question}".lower()
        said = re.search(r"\bround(?:ed)? (down|up)\b", text)
        if said:
            return said[1]
        if re.search(r"\b(smallest|fewest|from which|from how many|at least)\b", text):
            return "up"
        if re.search(r"\b(largest|most|fits?|holds?)\b", text):
            return "down"
        return None

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
        for factor, hint in [*self.slips.items(),
                             *((s.factor, s.hint) for s in self.common_slips)]:
            if math.isclose(value, right * factor, rel_tol=self.slip_tolerance(factor)):
                return hint
        if self.abs_tol >= 0.5 and abs(value - right) <= 1.0 + self.abs_tol:
            return ROUNDING_HINTS[self.rounding]
        return None


_REGISTRY: dict[str, Exercise] = {}


def register(name, *, question, unit, hint, where, rel_tol=0.02, abs_tol=0.0, slips=None,
             kind=None):
    """Decorator: register the function that computes the answer to exercise `name`.
    `slips`: {factor: hint} for this exercise's own common mistakes (an answer equal to
    the right one times `factor` gets `hint`). `kind`: one of `KINDS`, by default read
    from `unit` (`kind_of`); a unit that does not say needs it."""
    for label, value in (("name", name), ("question", question), ("unit", unit),
                         ("hint", hint), ("where", where)):
        if not isinstance(value, str) or not value.strip():
            raise TypeError(f"exercise {label} must be a non-empty string, got {value!r}")
    if name in _REGISTRY:  # refused now, not only when the function is decorated
        raise ValueError(f"exercise name={name!r} is registered already (in "
                         f"{_REGISTRY[name].where}); pick another name")
    rel_tol = _v.non_negative("rel_tol", rel_tol)
    abs_tol = _v.non_negative("abs_tol", abs_tol)
    # A unit that says nothing gets "other": only the exercise's own slips apply to it
    # (tests/test_exercises_slips.py asks for a kind= then).
    kind = _v.choice("kind", kind_of(unit) or "other" if kind is None else kind, KINDS)
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
                                   slips, kind)
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
    A wrong answer off by a common slip its kind of answer allows (a percentage for a
    fraction, the sparse peak for FLOP/s, GiB for bytes, a prefix) gets a hint about it. Returns the verdict (a `Result`: truthy when right);
    outside a notebook or an interactive prompt it also prints it, so
    `python -c "from gpuinfer.course.exercises import check; check(...)"` shows it."""
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
