"""The course's Sphinx extension (_ext/gpuinfer_site.py) on a two-page project: agendas
compute their clock times and refuse rows that do not add up; `{page}` links a page the
book has and only names one it does not have yet."""

import io
import re
import sys

import pytest

import sitecheck

sys.path.insert(0, str(sitecheck.ROOT / "_ext"))


def _build(tmp_path, index_md: str):
    from sphinx.application import Sphinx

    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(sitecheck.ROOT / '_ext')!r})\n"
        "extensions = ['myst_parser', 'gpuinfer_site']\n"
        "myst_enable_extensions = ['colon_fence']\n")
    (src / "index.md").write_text(index_md + "\n\n```{toctree}\n:hidden:\nwritten\n```\n")
    (src / "written.md").write_text("# A written chapter\n\nText.\n")
    warnings = io.StringIO()
    app = Sphinx(str(src), str(src), str(tmp_path / "out"), str(tmp_path / "doctrees"), "html",
                 status=None, warning=warnings, freshenv=True)
    app.build()
    return (tmp_path / "out" / "index.html").read_text(), warnings.getvalue()


AGENDA = """# Day

```{agenda}
:total: 50
:start: 9:30
20 | written | Planned title | Talk.
30 | chapters/not_yet | A chapter to come | Lab.
```
"""


def test_agenda_computes_times_and_links_pages(tmp_path):
    html, warnings = _build(tmp_path, AGENDA + "\nSee {page}`the future <chapters/not_yet>` "
                            "and {page}`this one <written>`.\n")
    assert "ERROR" not in warnings and "WARNING" not in warnings, warnings
    assert "9:30–9:50" in html and "9:50–10:20" in html
    assert 'href="written.html"' in html and "A written chapter" in html  # the page's own title
    assert "<em>A chapter to come</em>" in html and "<em>the future</em>" in html
    assert "Planned title" not in html


def test_agenda_that_does_not_add_up_fails_the_build(tmp_path):
    _, warnings = _build(tmp_path, AGENDA.replace(":total: 50", ":total: 60"))
    assert "agenda rows add up to 50 minutes, not :total: 60" in warnings


@pytest.mark.parametrize("row, message", [
    ("20 | written | Talk.", "must be `minutes | page or - | title | what`"),
    ("twenty | written | T | Talk.", "must be `minutes | page or - | title | what`"),
])
def test_agenda_rejects_malformed_rows(tmp_path, row, message):
    _, warnings = _build(tmp_path, f"# Day\n\n```{{agenda}}\n{row}\n```\n")
    assert message in warnings


def test_page_role_needs_a_target(tmp_path):
    _, warnings = _build(tmp_path, "# Day\n\n{page}`no target here`\n")
    assert "{page} needs `Title <docname>`" in warnings


def test_duplicate_inline_scripts_are_dropped():
    """sphinx-thebe's inline configuration arrives twice (filename None and "")."""
    import gpuinfer_site
    from sphinx.builders.html._assets import _JavaScript

    body = 'const THEBE_JS_URL = "x"'
    scripts = [_JavaScript(None, body=body), _JavaScript("a.js"), _JavaScript("", body=body),
               _JavaScript("a.js", **{"async": "async"})]
    context = {"script_files": scripts}
    gpuinfer_site.drop_duplicate_scripts(None, "index", "page.html", context, None)
    assert [(str(j.filename), j.attributes) for j in context["script_files"]] == [
        ("None", {"body": body}), ("a.js", {}), ("a.js", {"async": "async"})]


def _exercises(n: int, prefix: str) -> str:
    return "\n".join(f"```{{exercise}}\n:label: {prefix}-{i}\n\nQuestion {i}.\n```\n"
                     for i in range(1, n + 1))


def test_exercises_count_from_one_on_every_page(tmp_path):
    """sphinx-exercise alone numbers across the book (the second page's first exercise
    would be "Exercise 3"); the extension restarts the count on each page."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "conf.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(sitecheck.ROOT / '_ext')!r})\n"
        "extensions = ['myst_parser', 'sphinx_exercise', 'gpuinfer_site']\n")
    (src / "index.md").write_text("# First\n\n" + _exercises(2, "first") +
                                  "\n```{toctree}\n:hidden:\nsecond\n```\n")
    (src / "second.md").write_text("# Second\n\n" + _exercises(3, "second") +
                                   "\nSee {ref}`second-3`.\n")
    warnings = io.StringIO()
    from sphinx.application import Sphinx
    app = Sphinx(str(src), str(src), str(tmp_path / "out"), str(tmp_path / "doctrees"), "html",
                 status=None, warning=warnings, freshenv=True)
    app.build()
    # A second Sphinx app in one process re-registers Sphinx's own nodes: not ours to judge.
    ours = [w for w in warnings.getvalue().splitlines() if "already registered" not in w]
    assert not any("WARNING" in w for w in ours), ours
    first = (tmp_path / "out" / "index.html").read_text()
    second = (tmp_path / "out" / "second.html").read_text()
    numbers = lambda html: [int(n) for n in re.findall(r"Exercise (\d+)", html)]  # noqa: E731
    assert sorted(set(numbers(first))) == [1, 2]
    assert sorted(set(numbers(second))) == [1, 2, 3], numbers(second)
