"""Helpers for the course's notebooks: numbers in prose, and where the notebook runs.

`glue` hands a computed value to the website's prose (myst-nb's glue) so the text
cannot drift from the package; on Colab, where myst-nb is not installed, it does nothing.
"""

from __future__ import annotations

import math
import re

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


def glue_all(values: dict) -> dict:
    """Glue every {name: value} a page's computation returned (`glue` for each), and return
    `values`, so that a page can glue a function's results and read them in one line."""
    if not isinstance(values, dict):
        raise TypeError(f"values must be a dict of name: value, not {type(values).__name__}")
    for name, value in values.items():
        glue(name, value)
    return values


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



# --- the reader's copy: a page opened outside the website reads as it does on it ------------
#
# Jupyter and Colab render Markdown, not MyST: a chapter opened there shows `{glue:text}`
# roles where the website shows numbers, and `{solution}` fences where it shows a folded
# answer. At build time the website writes each notebook page's *reader copy* (the
# extension in _ext/gpuinfer_site.py): the same cells with every role resolved (the glued
# numbers from that build, terms as words, citations as authors and year, page links as
# links), every directive as Markdown and HTML Jupyter and Colab both render (admonitions
# as quotes, dropdowns and solutions folded in <details>), and the cells the website hides
# collapsed (Jupyter's source_hidden, Colab's form view). The download button and the
# Colab button open that copy; d2l sends its Colab buttons to generated notebooks the same
# way. `python -m gpuinfer.course.book reader NOTEBOOK...` writes one locally (it runs the page).

_ROLE = re.compile(r"\{(?P<role>glue:text|glue|term|doc|cite|cite:p|cite:t|ref|numref|eq)\}"
                   r"`(?P<text>[^`]*)`")
_FENCE = re.compile(r"^(?P<indent>[ ]{0,3})(?P<fence>`{3,}|:{3,})\{(?P<name>[\w:-]+)\}"
                    r"[ \t]*(?P<arg>.*)$")
_MYST_ONLY_LINE = re.compile(r"^\s*(\([\w-]+\)=|%\s.*|%)\s*$")
_LINK = re.compile(r"\]\((?P<target>[^()\s]+)\)")
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)
_OPTION = re.compile(r"^\s*:(?P<key>[\w-]+):\s*(?P<value>.*)$")
_TITLED_TARGET = re.compile(r"^(?P<title>.+?)\s*<(?P<target>[^<>]+)>$", re.S)
#: Cell tags the website acts on, and the title the reader's copy gives such a cell.
HIDDEN_TAGS = {"remove-cell": "Hidden on the website: setup, the numbers the text quotes "
                              "and the page's checks",
               "remove-input": "Hidden on the website: the code behind the output below",
               "hide-input": "Show the code", "hide-cell": "Show the code"}
SETUP_TITLE = "Setup: installs the course's package on Colab (does nothing elsewhere)"
READER_NOTE_ID = "reader-copy-note"


def glue_values(notebook) -> dict:
    """{key: text/plain} of every value an executed notebook glued (myst-nb's outputs)."""
    values = {}
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []):
            meta = (output.get("metadata") or {}).get("scrapbook")
            if not meta:
                continue
            prefix = meta.get("mime_prefix", "")
            text = (output.get("data") or {}).get(prefix + "text/plain")
            if text is not None:
                values[meta["name"]] = "".join(text) if isinstance(text, list) else text
    return values


def bib_labels(bib_text: str) -> dict:
    """{key: "Williams et al. 2009"} from a BibTeX file's author (or editor) and year."""
    labels = {}
    for entry in re.split(r"(?m)^@", bib_text)[1:]:
        head = re.match(r"\w+\s*\{\s*([^,\s]+)\s*,", entry)
        if not head:
            continue
        fields = dict((k.lower(), v) for k, v in re.findall(
            r"(?m)(?:^|,)\s*(\w+)\s*=\s*\{(.*)\}\s*,?\s*$", entry))
        authors = fields.get("author") or fields.get("editor") or head[1]
        people = [a.strip().strip("{}") for a in re.split(r"\s+and\s+", authors)]
        if len(people) > 1 and people[-1].lower() == "others":
            people = people[:-1] + ["", ""]             # "X and others": X et al.
        first = people[0].split(",")[0].strip() if "," in people[0] else people[0].split()[-1]
        name = first if len(people) == 1 else (f"{first} and {_surname(people[1])}"
                                               if len(people) == 2 else f"{first} et al.")
        if authors.startswith("{") or people[0].startswith("{"):
            name = authors.strip("{}")          # a corporate author, {PyTorch Labs}
        labels[head[1]] = f"{name} {fields.get('year', '')}".strip()
    return labels


def _surname(person: str) -> str:
    return person.split(",")[0].strip() if "," in person else person.split()[-1]


def _format_glued(text: str, spec: str) -> str:
    """What myst-nb's {glue:text} shows: the text/plain value, formatted by `spec`."""
    import ast

    try:
        value = ast.literal_eval(text)
    except (SyntaxError, ValueError):
        value = text
    if not spec:
        return str(value)
    kind = spec[-1]
    if kind == "s":
        value = str(value)
    elif kind in "bcdoxX":
        value = int(value)
    elif kind in "eEfFgGn%":
        value = float(value)
    return format(value, spec)


class _Page:
    """What resolving one page's MyST needs: its glued values, citation labels, page
    titles, and its exercise numbers (counted from 1 on each page, as the website does)."""

    def __init__(self, glue, references, titles, docname=None, site_url=None):
        self.glue, self.references, self.titles = glue, references or {}, titles or {}
        self.docname, self.site_url = docname, site_url
        self.exercises, self.missing = {}, []

    def link(self, target: str) -> str:
        """A page of the book (a docname relative to this page, or from the root with a
        leading /): its website address when the site is known, else its notebook."""
        import posixpath

        target = target.removesuffix(".md").removesuffix(".ipynb")
        if self.site_url and self.docname:
            here = posixpath.dirname(self.docname)
            page = posixpath.normpath(target.lstrip("/") if target.startswith("/")
                                      else posixpath.join(here, target))
            return f"{self.site_url.rstrip('/')}/{page}.html"
        return f"{target}.ipynb"

    def page_link(self, match) -> str:
        target = match["target"]
        if _EXTERNAL.match(target) or target.startswith("#") or "." in target.rsplit("/", 1)[-1]:
            return match[0]
        return f"]({self.link(target)})"

    def role(self, match) -> str:
        role, text = match["role"], match["text"]
        if role in ("glue:text", "glue"):
            key, _, spec = text.partition(":")
            if key not in self.glue:
                self.missing.append(key)
                return f"[{key}: not computed]"
            return _format_glued(self.glue[key], spec)
        titled = _TITLED_TARGET.match(text.strip())
        if role == "term":
            return titled["title"] if titled else text
        if role == "doc":
            target = (titled["target"] if titled else text).strip()
            name = target.removesuffix(".md").removesuffix(".ipynb")
            title = titled["title"] if titled else self.titles.get(
                name.rsplit("/", 1)[-1], self.titles.get(name, name))
            return f"[*{title}*]({self.link(name)})"
        if role.startswith("cite"):
            keys = [k.strip() for k in text.split(",")]
            return "(" + "; ".join(self.references.get(k, k) for k in keys) + ")"
        return titled["title"] if titled else text      # ref, numref, eq

    def markdown(self, text: str) -> str:
        """Markdown with every MyST directive and role resolved."""
        lines, out, i = text.split("\n"), [], 0
        while i < len(lines):
            match = _FENCE.match(lines[i])
            if not match:
                if not _MYST_ONLY_LINE.match(lines[i]):       # a target label, a comment
                    out.append(lines[i])
                i += 1
                continue
            fence = match["fence"]
            close = re.compile(rf"^\s{{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$")
            j, options = i + 1, {}
            while j < len(lines) and _OPTION.match(lines[j]):
                option = _OPTION.match(lines[j])
                options[option["key"]] = option["value"].strip()
                j += 1
            body_start = j
            while j < len(lines) and not close.match(lines[j]):
                j += 1
            body = self.markdown("\n".join(lines[body_start:j]).strip("\n"))
            out.extend(self.directive(match["name"], match["arg"].strip(), options,
                                      body).split("\n"))
            i = j + 1
        text = _LINK.sub(self.page_link, "\n".join(out))
        return _ROLE.sub(self.role, text)

    def directive(self, name, arg, options, body) -> str:
        classes = options.get("class", "").split()
        if name == "exercise":
            number = len(self.exercises) + 1
            self.exercises[options.get("label", f"exercise-{number}")] = number
            return _quote(f"**Exercise {number}.** {arg}".rstrip(), body)
        if name == "solution":
            number = self.exercises.get(arg)
            what = f"Solution to exercise {number}" if number else "Solution"
            return _folded(f"{what} (click to open)", body)
        title = arg or name.replace("-", " ").capitalize()
        if name not in ("admonition", "note", "tip", "hint", "important", "warning",
                        "caution", "attention", "seealso", "dropdown", "topic"):
            title = arg or name
        if "dropdown" in classes or name == "dropdown":
            return _folded(title, body)
        return _quote(f"**{title}**", body)


def _quote(title: str, body: str) -> str:
    text = f"{title}\n\n{body}" if body else title
    return "\n".join("> " + line if line.strip() else ">" for line in text.split("\n"))


def _folded(summary: str, body: str) -> str:
    return f"<details>\n<summary><b>{summary}</b></summary>\n\n{body}\n\n</details>"


def reader_copy(notebook: dict, glue: dict, *, references=None, titles=None,
                docname=None, site_url=None, strict=True) -> dict:
    """The notebook as a reader opens it in Jupyter or Colab: MyST resolved (the glued
    values `glue`, {key: text/plain}, formatted as the website formats them), solutions
    folded, the cells the website hides collapsed, outputs cleared, a note at the top
    saying where the numbers come from. `references`: {bibtex key: label} (`bib_labels`);
    `titles`: {page name: title}; `docname` ("chapters/01_roofline") and `site_url` link
    the page and the pages it names to the website (else to their notebooks). A glued key the page uses but `glue` lacks raises
    KeyError (with strict=False it reads "[key: not computed]")."""
    import copy

    nb = copy.deepcopy(notebook)
    page = _Page(glue, references, titles, docname, site_url)
    for cell in nb["cells"]:
        source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        if cell["cell_type"] == "markdown":
            cell["source"] = page.markdown(source)
        elif cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
            tags = set(cell.get("metadata", {}).get("tags", []))
            hidden = [t for t in HIDDEN_TAGS if t in tags]
            if hidden:
                title = SETUP_TITLE if "%pip install" in source else HIDDEN_TAGS[hidden[0]]
                cell["source"] = f"# @title {title}\n{source}"
                meta = cell.setdefault("metadata", {})
                meta.setdefault("jupyter", {})["source_hidden"] = True
                meta["cellView"] = "form"
            else:
                cell["source"] = source
    if page.missing and strict:
        raise KeyError(f"the page glues values the build did not compute: "
                       f"{sorted(set(page.missing))}")
    title = _first_title(notebook) or docname or "this page"
    where = (f"[*{title}*]({page.link('/' + docname)}), a page of the course website"
             if site_url and docname else f"*{title}*, a page of the course website")
    note = {"cell_type": "markdown", "id": READER_NOTE_ID, "metadata": {},
            "source": (f"> *Reader's copy* of {where}. The numbers in the text were computed "
                       "when the website was built (on a CPU); the cells recompute them on "
                       "your runtime. Solutions are folded: click to open one. Cells marked "
                       "with a title are hidden on the website (setup, the numbers the text "
                       "quotes, the page's checks): run them, no need to read them.")}
    first_md = next((i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "markdown"), 0)
    nb["cells"].insert(first_md + 1, note)
    return nb


def _first_title(notebook) -> str | None:
    for cell in notebook.get("cells", []):
        if cell["cell_type"] == "markdown":
            source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            match = re.search(r"(?m)^#\s+(.+)$", source)
            if match:
                return match[1].strip()
    return None


def page_titles(paths) -> dict:
    """{notebook stem: its first heading} of the given notebook files (for {doc} links)."""
    import json
    import pathlib

    titles = {}
    for path in map(pathlib.Path, paths):
        title = _first_title(json.loads(path.read_text()))
        if title:
            titles[path.stem] = titles[str(path.with_suffix(""))] = title
    return titles


def _main(argv=None) -> int:
    """python -m gpuinfer.course.book reader [--out DIR] NOTEBOOK...: run each notebook (in
    this environment, which needs myst-nb for the glued values) and write its reader's
    copy to DIR/<same path> (default _build/reader)."""
    import argparse
    import json
    import pathlib

    parser = argparse.ArgumentParser(prog="python -m gpuinfer.course.book")
    sub = parser.add_subparsers(dest="command", required=True)
    reader = sub.add_parser("reader", help="write the reader's copy of notebooks")
    reader.add_argument("notebooks", nargs="+", type=pathlib.Path)
    reader.add_argument("--out", type=pathlib.Path, default=pathlib.Path("_build/reader"))
    reader.add_argument("--bib", type=pathlib.Path, default=pathlib.Path("references.bib"))
    args = parser.parse_args(argv)
    import nbformat
    from nbclient import NotebookClient

    references = bib_labels(args.bib.read_text()) if args.bib.exists() else {}
    titles = page_titles({p for n in args.notebooks for p in n.resolve().parent.parent.glob("*/*.ipynb")})
    for path in args.notebooks:
        executed = nbformat.read(path, as_version=4)
        NotebookClient(executed, timeout=600, resources={"metadata": {"path": str(path.parent)}}
                       ).execute()
        source = json.loads(path.read_text())
        copy_ = reader_copy(source, glue_values(executed), references=references, titles=titles)
        target = args.out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(copy_, indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
