"""Every exercise the course asks is registered, and every registered exercise is asked:
the names in the notebooks' `check("name", ...)` calls and the registry
(`gpuinfer.course.exercises`) must match both ways. (tests/test_exercises.py checks each
registered answer; this checks that the pages and the registry agree.)"""

import json
import pathlib
import re

import pytest

import sitecheck
from gpuinfer.course import exercises

ROOT = sitecheck.ROOT
_CHECK = re.compile(r"""check\(\s*(?:\\?["'])([\w.-]+)(?:\\?["'])""")
# Names prose uses to show the call's shape, not to ask an exercise.
PLACEHOLDERS = {"name", "exercise-name", "your-exercise"}


def _text(path: pathlib.Path) -> str:
    if path.suffix == ".ipynb":
        return "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"])
    return path.read_text()


def _pages():
    return sorted([*ROOT.glob("chapters/*.ipynb"), *ROOT.glob("labs/*.ipynb"),
                   *ROOT.glob("chapters/*.md"), *ROOT.glob("labs/*.md"),
                   *ROOT.glob("workshop/*.md"), *ROOT.glob("appendix/*.md")])


def _asked() -> dict:
    asked = {}
    for path in _pages():
        for name in set(_CHECK.findall(_text(path))) - PLACEHOLDERS:
            asked.setdefault(name, set()).add(str(path.relative_to(ROOT).with_suffix("")))
    return asked


def test_the_pattern_finds_check_calls():
    assert _CHECK.findall('check("roofline-ridge-h100", 295)') == ["roofline-ridge-h100"]
    assert _CHECK.findall("`check('lab-x', your_answer)`") == ["lab-x"]
    assert _CHECK.findall('check(\\"a-b\\", 1)') == ["a-b"]  # inside a notebook's JSON string


def test_every_exercise_asked_is_registered():
    registered = set(exercises.names())
    unknown = {n: sorted(p) for n, p in _asked().items() if n not in registered}
    assert not unknown, f"check() names with no registered exercise: {unknown}"


@pytest.mark.parametrize("name", exercises.names())
def test_every_registered_exercise_is_asked_where_it_says(name):
    where = exercises.get(name).where
    files = [ROOT / f"{where}{s}" for s in (".ipynb", ".md") if (ROOT / f"{where}{s}").exists()]
    if not files:
        pytest.fail(f"{name}: registered for {where}, which does not exist")
    assert name in _CHECK.findall(_text(files[0])), f"{name}: {where} never asks check({name!r}, ...)"
