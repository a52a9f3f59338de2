"""Numbers handed to the website's prose format as numbers, whatever type computed them."""

import numpy as np
import pytest

from gpuinfer.course import book


@pytest.mark.parametrize("value, expected", [
    (np.float64(1.5), 1.5), (np.int64(30), 30), (np.array(2.0), 2.0), (1.25, 1.25), ("x", "x"),
])
def test_plain_unwraps_numpy_scalars(value, expected):
    out = book.plain(value)
    assert out == expected and type(out) is type(expected)
    # What myst-nb's {glue:text} does with the repr: float() must accept it.
    if not isinstance(expected, str):
        assert float(repr(out)) == expected


def test_plain_leaves_arrays_alone():
    arr = np.arange(3.0)
    assert book.plain(arr) is arr


def test_glue_passes_a_plain_number_to_myst_nb(monkeypatch):
    myst_nb = pytest.importorskip("myst_nb")
    seen = {}
    monkeypatch.setattr(myst_nb, "glue", lambda name, value, display=False: seen.update({name: value}))
    book.glue("ridge", np.float64(295.2))
    assert seen == {"ridge": 295.2} and type(seen["ridge"]) is float


# --- the reader's copy: a page opened in Jupyter or Colab reads as it does on the website ----

import json  # noqa: E402
import pathlib  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = sorted([*ROOT.glob("chapters/*.ipynb"), *ROOT.glob("labs/*.ipynb"),
                *ROOT.glob("workshop/*.ipynb")])

# MyST that only Jupyter Book renders (tests/test_notebooks.py holds the labs to it).
MYST_LEFTOVERS = [
    re.compile(r"\{(glue|glue:text|glue:figure|term|doc|cite|ref|numref|eq|download)\}`"),
    re.compile(r"^\s*(```+|~~~+|:::+)\s*\{", re.M),
    re.compile(r"^\s*\([\w-]+\)=\s*$", re.M),
]


def _cell(kind, source, tags=None, outputs=None):
    cell = {"cell_type": kind, "id": f"c{abs(hash(source)) % 10**8}", "metadata": {},
            "source": source.splitlines(keepends=True)}
    if tags:
        cell["metadata"]["tags"] = tags
    if kind == "code":
        cell["outputs"], cell["execution_count"] = outputs or [], 1 if outputs else None
    return cell


PAGE = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
    _cell("code", '%pip install -q "gpuinfer"', ["remove-cell"]),
    _cell("markdown", "# A page\n\n(sec-a)=\nA T4 reads {glue:text}`bw:,.0f` GB/s, a "
          "{term}`ridge point <Ridge point>` of {glue:text}`ridge:.1f`, "
          "{cite}`williams2009roofline` ({doc}`02_other`, [lab 1](../labs/01_lab)).\n"
          "% a MyST comment\n"),
    _cell("code", "book.glue('bw', 320.0)", ["remove-cell"],
          outputs=[{"output_type": "display_data", "data": {"text/plain": "4"},
                    "metadata": {}}]),
    _cell("markdown", "```{admonition} Takeaway\n:class: tip\nKeep it.\n```\n\n"
          "```{admonition} More\n:class: dropdown note\nFolded $x$.\n```"),
    _cell("code", "plot()", ["hide-input"]),
    _cell("markdown", "```{exercise}\n:label: ex-a\nFirst?\n```\n\n```{solution} ex-a\n"
          ":class: dropdown\n**{glue:text}`ans:.2f`**\n```\n\n"
          "````{exercise}\n:label: ex-b\nSecond, with code:\n```python\ncheck()\n```\n````\n\n"
          "```{solution} ex-b\n:class: dropdown\nIt is {glue:text}`n:d`.\n```"),
]}
GLUE = {"bw": "320.0", "ridge": "203.125", "ans": "0.456", "n": "7"}


def test_reader_copy_resolves_every_role_and_directive():
    nb = book.reader_copy(PAGE, GLUE, references={"williams2009roofline": "Williams et al. 2009"},
                          titles={"02_other": "Other page"})
    md = [c["source"] for c in nb["cells"] if c["cell_type"] == "markdown"]
    text = "\n".join(md)
    assert "reads 320 GB/s, a ridge point of 203.1, (Williams et al. 2009) " \
           "([*Other page*](02_other.ipynb), [lab 1](../labs/01_lab.ipynb))" in text
    assert "(sec-a)=" not in text and "MyST comment" not in text
    assert "> **Takeaway**\n>\n> Keep it." in text
    assert "<details>\n<summary><b>More</b></summary>\n\nFolded $x$.\n\n</details>" in text
    # Exercises numbered from 1 on the page; each solution folded under its own number,
    # with its glued answer formatted as the website formats it; nested fences kept.
    assert "> **Exercise 1.**\n>\n> First?" in text and "> **Exercise 2.**" in text
    assert "> ```python\n> check()\n> ```" in text
    assert "<summary><b>Solution to exercise 1 (click to open)</b></summary>\n\n**0.46**" in text
    assert "<summary><b>Solution to exercise 2 (click to open)</b></summary>\n\nIt is 7." in text
    for pattern in MYST_LEFTOVERS:
        assert not pattern.search(text), pattern
    # The note at the top says where the numbers come from, right under the title.
    assert nb["cells"][2]["id"] == book.READER_NOTE_ID and "Reader's copy" in md[1]
    assert "computed when the website was built" in md[1]
    # The source is left alone.
    assert "{glue:text}`bw:,.0f`" in "".join(PAGE["cells"][1]["source"])


def test_reader_copy_collapses_the_cells_the_website_hides_and_clears_outputs():
    nb = book.reader_copy(PAGE, GLUE)
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    setup, glued, plot = code
    assert setup["source"].startswith(f"# @title {book.SETUP_TITLE}\n%pip install")
    assert glued["source"].startswith("# @title Hidden on the website")
    assert plot["source"].startswith("# @title Show the code\nplot()")
    for cell in code:
        assert cell["metadata"]["jupyter"]["source_hidden"] is True      # Jupyter
        assert cell["metadata"]["cellView"] == "form"                    # Colab
        assert cell["outputs"] == [] and cell["execution_count"] is None


def test_reader_copy_links_pages_to_the_website_when_it_is_known():
    nb = book.reader_copy(PAGE, GLUE, docname="chapters/01_a", site_url="https://x.github.io/c/",
                          titles={"02_other": "Other page"})
    text = "\n".join(c["source"] for c in nb["cells"] if c["cell_type"] == "markdown")
    assert "[*Other page*](https://x.github.io/c/chapters/02_other.html)" in text
    assert "[lab 1](https://x.github.io/c/labs/01_lab.html)" in text
    assert "[*A page*](https://x.github.io/c/chapters/01_a.html)" in text    # the note


def test_reader_copy_refuses_a_page_whose_numbers_were_not_computed():
    with pytest.raises(KeyError, match=r"\['ans', 'n'\]"):
        book.reader_copy(PAGE, {"bw": "320.0", "ridge": "2"})
    nb = book.reader_copy(PAGE, {}, strict=False)
    assert "[bw: not computed]" in nb["cells"][1]["source"]


def test_glue_values_reads_what_myst_nb_glued():
    executed = {"cells": [{"cell_type": "code", "outputs": [
        {"output_type": "display_data", "metadata": {"scrapbook": {
            "name": "ridge", "mime_prefix": "application/papermill.record/"}},
         "data": {"application/papermill.record/text/plain": "203.125"}},
        {"output_type": "stream", "text": "x"}]}]}
    assert book.glue_values(executed) == {"ridge": "203.125"}


def test_bib_labels():
    bib = ("@article{a, author = {Williams, Samuel and Waterman, Andrew and Patterson, David},\n"
           "  year = {2009}\n}\n@misc{b,\n  author = {{PyTorch Labs}},\n  year = {2023}\n}\n"
           "@misc{c,\n  author = {Touvron, Hugo and others},\n  year = {2023}\n}\n"
           "@misc{d,\n  author = {Patarasuk, Pitch and Yuan, Xin},\n  year = {2009}\n}\n")
    assert book.bib_labels(bib) == {"a": "Williams et al. 2009", "b": "PyTorch Labs 2023",
                                    "c": "Touvron et al. 2023", "d": "Patarasuk and Yuan 2009"}


def _stand_in_glue(notebook):
    """Every key the page glues, valued 1: what the page's reader copy needs to resolve."""
    keys = set()
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            keys |= set(re.findall(r"\{glue(?::text)?\}`([^:`]+)", "".join(cell["source"])))
    return {key: "1" for key in keys}


@pytest.mark.parametrize("path", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_page_has_a_reader_copy_without_raw_myst_or_open_solutions(path):
    # The mechanism, on every notebook page as it is stored (the build supplies the real
    # numbers; here each glued key stands in as 1, so no page runs).
    notebook = json.loads(path.read_text())
    references = book.bib_labels((ROOT / "references.bib").read_text())
    nb = book.reader_copy(notebook, _stand_in_glue(notebook), references=references,
                          titles=book.page_titles(PAGES))
    assert [c.get("id") for c in nb["cells"] if c.get("id") != book.READER_NOTE_ID] == \
        [c.get("id") for c in notebook["cells"]]
    solutions = 0
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        for pattern in MYST_LEFTOVERS:
            match = pattern.search(cell["source"])
            assert not match, (cell.get("id"), match[0])
        # Every solution is inside a <details> block: folded until the reader opens it.
        for block in re.split(r"</details>", cell["source"]):
            if "Solution to exercise" in block:
                assert "<details>" in block.split("Solution to exercise")[0]
                solutions += 1
    stored = "\n".join("".join(c["source"]) for c in notebook["cells"])
    assert solutions == stored.count("{solution}")
    assert sum(c["cell_type"] == "markdown" for c in nb["cells"]) >= 2


# --- the website's extension writes the copies and points Colab at them ----------------------

sys.path.insert(0, str(ROOT / "_ext"))


def test_colab_buttons_open_the_reader_branch():
    import types

    import gpuinfer_site

    app = types.SimpleNamespace(config=types.SimpleNamespace(
        gpuinfer_reader_branch="reader", html_theme_options={"repository_branch": "main"}))
    colab = "https://colab.research.google.com/github/o/r/blob/main/chapters/01_roofline.ipynb"
    context = {"header_buttons": [{"type": "group", "buttons": [
        {"url": colab}, {"url": "https://github.com/o/r/blob/main/chapters/01_roofline.ipynb"}]}]}
    gpuinfer_site.launch_reader_copies_on_colab(app, "chapters/01_roofline", "", context, None)
    urls = [b["url"] for b in context["header_buttons"][0]["buttons"]]
    assert urls == [colab.replace("/blob/main/", "/blob/reader/"),
                    "https://github.com/o/r/blob/main/chapters/01_roofline.ipynb"]
    # The book's configuration names the branch the pages workflow publishes.
    import yaml

    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    branch = config["sphinx"]["config"]["gpuinfer_reader_branch"]
    workflow = (ROOT / ".github" / "workflows" / "pages.yml").read_text()
    assert branch and "gpuinfer_reader_branch" in workflow and "_build/reader" in workflow
    assert gpuinfer_site.site_url(types.SimpleNamespace(html_theme_options={
        "repository_url": "https://github.com/Gpu-Course/book"})) == "https://gpu-course.github.io/book/"


def test_the_build_writes_each_notebook_pages_reader_copy(tmp_path):
    import types

    import gpuinfer_site

    src, out = tmp_path / "src", tmp_path / "_build" / "html"
    (src / "chapters").mkdir(parents=True)
    (src / "chapters" / "01_a.ipynb").write_text(json.dumps(PAGE))
    (src / "intro.md").write_text("# Intro")
    glue_dir = tmp_path / "_build" / "jupyter_execute" / "chapters"
    glue_dir.mkdir(parents=True)
    (glue_dir / "01_a.glue.json").write_text(json.dumps(
        {k: {"data": {"text/plain": v}, "metadata": {}} for k, v in GLUE.items()}))
    env = types.SimpleNamespace(found_docs={"chapters/01_a", "intro"},
                                doc2path=lambda d, base=False: f"{d}.ipynb" if d != "intro"
                                else "intro.md")
    app = types.SimpleNamespace(outdir=str(out), srcdir=str(src), env=env,
                                config=types.SimpleNamespace(html_theme_options={}))
    written = gpuinfer_site.write_reader_copies(app)
    assert written == [tmp_path / "_build" / "reader" / "chapters" / "01_a.ipynb"]
    for copy in (written[0], out / "_sources" / "chapters" / "01_a.ipynb"):
        text = copy.read_text()
        assert "320 GB/s" in text and "{glue" not in text


def test_glue_all_glues_each_value_and_returns_them(monkeypatch):
    seen = []
    monkeypatch.setattr(book, "glue", lambda name, value, display=False: seen.append((name, value)))
    values = {"a_gbs": 2.0, "b_pct": 50}
    assert book.glue_all(values) is values
    assert seen == [("a_gbs", 2.0), ("b_pct", 50)]
    with pytest.raises(TypeError, match="values must be a dict"):
        book.glue_all([("a", 1)])
