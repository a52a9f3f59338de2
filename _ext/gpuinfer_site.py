"""Sphinx extension of the course website: the calculator's catalogue, the workshop's links
and agendas, exercises numbered per page, and every notebook page's reader's copy (the
notebook as Jupyter and Colab show it: numbers in the text, solutions folded) behind its
download and Colab buttons.

1. Appendix *Calculator*. At the end of every HTML build it writes
`_static/gpuinfer-catalogue.js` (and the same data as `_static/gpuinfer-catalogue.json`)
from `gpuinfer.hardware.catalogue()`, `gpuinfer.predict.llm.catalogue()` and, for every model and
number format, `gpuinfer.predict.llm.step_constants()`: the constants of the per-operation decode
model, from which _static/calculator.js rebuilds a step exactly as `gpuinfer.predict.llm` does
(tests/test_calculator.py checks the two agree on a grid). Beside the ceiling: the
achievable model's constants (`gpuinfer.predict.achievable.FITTED`, each GPU's matmul fraction per
peak), the 80% intervals of its out-of-sample errors by regime (`gpuinfer.predict.validation.
interval` of 1: the ratios), the fp8 KV cache's bytes and the engines' memory fractions
(`gpuinfer.predict.paged_kv`). One source of truth, never a hand copy. Units are SI: bytes,
bytes/s, FLOP/s, FLOP.
"""

from __future__ import annotations

import json
import math
import pathlib
import re

from docutils import nodes
from sphinx.util import logging
from docutils.parsers.rst import Directive, directives

GLOBAL_NAME = "GPUINFER_CATALOGUE"
FILENAME = "gpuinfer-catalogue"


def _clean(value):
    """JSON has no NaN: missing numbers become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):  # numpy scalar
        return _clean(value.item())
    return value


def catalogue_payload() -> dict:
    """The calculator's data, computed by the package: formats, accelerators (with their
    achievable matmul fractions), models with their step constants per format, the memory
    reserve `max_batch` subtracts, the achievable model with its intervals, the fp8 KV
    cache and the engines' memory fractions."""
    import gpuinfer
    from gpuinfer.predict import achievable, llm
    from gpuinfer import dtypes
    from gpuinfer.hardware import devices
    from gpuinfer.predict import architectures
    from gpuinfer.predict import step_model

    formats = {}
    for name in dtypes.DTYPES:
        weight, kv, compute = dtypes.formats(name)
        formats[name] = {"bytes_per_element": dtypes.bytes_per_element(weight),
                         "kv_dtype": kv, "compute_dtype": compute,
                         "peak": dtypes.peak_dtype(compute)}

    accelerators = []
    for row in devices.catalogue().to_dict("records"):
        peaks = {k.removeprefix("peak_").removesuffix("_flops"): _clean(v)
                 for k, v in row.items() if k.startswith("peak_")}
        accelerators.append({
            "name": row["name"], "kind": row["kind"],
            "memory_bytes": _clean(row["memory_bytes"]),
            "bandwidth_bytes_per_s": _clean(row["bandwidth_bytes_per_s"]),
            "peak_flops": {k: v for k, v in peaks.items() if v is not None},
            "source": row["source"], "note": row["note"],
            # Whether memory_bytes is what the card reports (a cited figure) or a
            # datasheet/assumed figure: the page says which.
            "memory_cited": not str(row["memory_source"]).startswith(("UNSOURCED", "ASSUMED")),
            "memory_source": row["memory_source"]})

    models = []
    for row in architectures.catalogue().to_dict("records"):
        name = row["name"]
        models.append({
            "name": name, "n_params": int(row["n_params"]),
            # Mixtures of experts: active parameters, experts, and their step's rows
            # (llm.operations: a router, shared experts and experts before the LM head).
            "n_active_params": int(row["n_active_params"]),
            "n_experts": int(row["n_experts"]), "experts_per_token": int(row["experts_per_token"]),
            "operations": list(step_model.operations(name)),
            "attention": row["attention"], "n_layers": int(row["n_layers"]),
            "n_heads": int(row["n_heads"]), "n_kv_heads": int(row["n_kv_heads"]),
            "kv_cache_bytes_per_token": {d: step_model.kv_cache_bytes_per_token(name, d)
                                         for d in dtypes.DTYPES},
            "step": {d: step_model.step_constants(name, d) for d in dtypes.DTYPES},
            "source": row["source"]})

    for acc in accelerators:  # achievable.matmul_fraction, for each peak the device has
        acc["matmul_fraction"] = {p: achievable.matmul_fraction(acc["name"], p)
                                  for p in acc["peak_flops"]}
    return {"version": gpuinfer.__version__, "dtypes": formats,
            "reserve_bytes": llm.DEFAULT_RESERVE_BYTES,
            "operations": list(step_model.OPERATIONS),
            "accelerators": accelerators, "models": models,
            "achievable": achievable_payload(),
            # The KV-cache format an engine offers beside the activations' (vLLM's
            # kv_cache_dtype="fp8", TensorRT-LLM's FP8 KV cache): its bytes per token are
            # each model's kv_cache_bytes_per_token[KV_FP8].
            "kv_dtypes": [KV_FP8],
            "memory_utilization": memory_utilization_payload()}


#: The fp8 KV cache the calculator offers: e4m3, the format the engines store.
KV_FP8 = "fp8_e4m3"


def achievable_payload() -> dict:
    """The achievable model the calculator times a step with: `achievable.FITTED`'s
    constants (calculator.js's `achievableStepS` mirrors `achievable.row_rates` and
    `achievable.overheads`), each format's bits, peak, whether it is quantised and its
    weight-only bandwidth factor, and the central `coverage` of measured / predicted
    (`validation.interval(1, regime, per=...)`: the ratios an interval multiplies by)."""
    import inspect

    from gpuinfer.predict import achievable, validation
    from gpuinfer import dtypes

    eff = achievable.FITTED
    if not eff.cuda_graphs:
        raise ValueError("the calculator times steps replayed as CUDA graphs; FITTED has "
                         "cuda_graphs=False, which calculator.js does not model")
    coverage = inspect.signature(validation.interval).parameters["coverage"].default
    return {
        "matmul": eff.matmul, "matmul_scale": eff.matmul_scale, "bandwidth": eff.bandwidth,
        "attention": eff.attention, "attention_dtype": eff.attention_dtype,
        "step_s": eff.step_s, "kernel_gap_s": eff.kernel_gap_s,
        "kernels_per_layer": eff.kernels_per_layer, "sequence_s": eff.sequence_s,
        "formats": {d: {"bits": dtypes.get(d).bits, "peak": dtypes.get(d).peak,
                        "quantised": dtypes.get(d).quantised,
                        "weight_only": eff.weight_only_fraction(d)} for d in dtypes.DTYPES},
        "coverage": coverage,
        "intervals": {regime: {per: list(validation.interval(1.0, regime, per=per))
                               for per in validation.PER}
                      for regime in validation.INTERVAL_REGIMES}}


def memory_utilization_payload() -> list:
    """The memory fractions an engine lets weights, activations and KV cache use
    (`paged_kv.kv_cache_budget`'s `gpu_memory_utilization`), the calculator's choices
    beside the whole card (null)."""
    from gpuinfer.predict import paged_kv

    return [{"value": None, "name": "whole card"},
            {"value": paged_kv.VLLM_GPU_MEMORY_UTILIZATION, "name": "vLLM"},
            {"value": paged_kv.ACHIEVABLE_GPU_MEMORY_UTILIZATION, "name": "achievable"}]


def write_catalogue(outdir) -> pathlib.Path:
    """Write the payload as a script (works from file:// too) and as JSON; return the script."""
    static = pathlib.Path(outdir) / "_static"
    static.mkdir(parents=True, exist_ok=True)
    text = json.dumps(catalogue_payload(), indent=1, allow_nan=False)
    (static / f"{FILENAME}.json").write_text(text + "\n")
    script = static / f"{FILENAME}.js"
    script.write_text("// Generated at build time from gpuinfer's catalogues "
                      "(_ext/gpuinfer_site.py). Do not edit.\n"
                      f"window.{GLOBAL_NAME} = {text};\n")
    return script


def _on_build_finished(app, exception):
    if exception is None and app.builder.format == "html":
        write_catalogue(app.outdir)
        write_reader_copies(app)


# --- the reader's copy of every notebook page (gpuinfer.course.book.reader_copy) -----------------
#
# Jupyter and Colab show MyST raw: a chapter's {glue:text} roles instead of numbers, its
# solutions unfolded. After the HTML is written, each notebook page gets its reader's copy,
# with the numbers this build glued: into _build/reader/<page>.ipynb (the tree the pages
# workflow publishes on the branch `gpuinfer_reader_branch`, which the Colab buttons open)
# and over _build/html/_sources/<page>.ipynb (what the download button serves).

READER_DIR = "reader"
logger = logging.getLogger(__name__)


def site_url(config) -> str:
    """Where GitHub Pages serves this book: https://OWNER.github.io/NAME/ from the
    repository URL in _config.yml (html_theme_options.repository_url)."""
    url = (config.html_theme_options or {}).get("repository_url", "").rstrip("/")
    match = re.fullmatch(r"https://github\.com/([^/]+)/([^/]+)", url)
    return f"https://{match[1].lower()}.github.io/{match[2]}/" if match else ""


def write_reader_copies(app) -> list[pathlib.Path]:
    from gpuinfer.course import book

    out = pathlib.Path(app.outdir)
    executed = out.parent / "jupyter_execute"
    reader = out.parent / READER_DIR
    src = pathlib.Path(app.srcdir)
    pages = sorted(d for d in app.env.found_docs
                   if str(app.env.doc2path(d, base=False)).endswith(".ipynb"))
    bib = src / "references.bib"
    references = book.bib_labels(bib.read_text()) if bib.exists() else {}
    titles = book.page_titles(src / f"{d}.ipynb" for d in pages)
    written = []
    for docname in pages:
        glue_file = executed / f"{docname}.glue.json"
        glue = ({key: value["data"]["text/plain"]
                 for key, value in json.loads(glue_file.read_text()).items()
                 if "text/plain" in value.get("data", {})} if glue_file.exists() else {})
        notebook = json.loads((src / f"{docname}.ipynb").read_text())
        if not glue_file.exists() and "{glue" in json.dumps(notebook):
            logger.info(f"reader's copy of {docname}: no {glue_file.name} from this build; "
                        "skipped")
            continue
        copy = book.reader_copy(notebook, glue, references=references, titles=titles,
                                docname=docname, site_url=site_url(app.config))
        text = json.dumps(copy, indent=1, ensure_ascii=False) + "\n"
        for target in (reader / f"{docname}.ipynb", out / "_sources" / f"{docname}.ipynb"):
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        written.append(reader / f"{docname}.ipynb")
    return written


def launch_reader_copies_on_colab(app, pagename, templatename, context, doctree):
    """The Colab button opens the page's reader's copy: the same notebook on the branch
    `gpuinfer_reader_branch` (published by .github/workflows/pages.yml) instead of the
    source on repository.branch. Empty: the buttons open the source."""
    branch = app.config.gpuinfer_reader_branch
    if not branch:
        return
    source = (app.config.html_theme_options or {}).get("repository_branch", "main")
    for group in context.get("header_buttons") or []:
        for button in group.get("buttons", []) if isinstance(group, dict) else []:
            url = button.get("url", "")
            if url.startswith("https://colab.research.google.com/github/"):
                button["url"] = url.replace(f"/blob/{source}/", f"/blob/{branch}/", 1)


# --- workshop: links to pages that may not exist yet, and agendas that add up ---------

_TITLED = re.compile(r"^(?P<title>.+?)\s*<(?P<target>[^<>]+)>$", re.S)


def _page_node(env, title: str, target: str) -> nodes.Node:
    """A link to `target` (a docname from the book's root), shown with that page's own
    title, if the book has the page; else `title` in italics: planned, not written yet."""
    docname = target.strip().lstrip("/").removesuffix(".md").removesuffix(".ipynb")
    if docname in env.found_docs:
        from sphinx import addnodes

        ref = addnodes.pending_xref("", refdomain="std", reftype="doc", reftarget="/" + docname,
                                    refexplicit=False, refwarn=True, refdoc=env.docname)
        ref += nodes.inline(title, title)
        return ref
    return nodes.emphasis(title, title)


def page_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    match = _TITLED.match(text.strip())
    if not match:
        msg = inliner.reporter.error(f"{{page}} needs `Title <docname>`, got {text!r}", line=lineno)
        return [inliner.problematic(rawtext, rawtext, msg)], [msg]
    env = inliner.document.settings.env
    return [_page_node(env, match["title"], match["target"])], []


def _clock(minutes: int) -> str:
    return f"{minutes // 60:d}:{minutes % 60:02d}"


class Agenda(Directive):
    """A timetable: one row per line, `minutes | docname or - | title | what happens`."""

    has_content = True
    option_spec = {"total": directives.positive_int, "start": directives.unchanged}

    def run(self):
        env = self.state.document.settings.env
        start = self.options.get("start", "9:00")
        if not re.fullmatch(r"\d{1,2}:\d{2}", start):
            raise self.error(f"agenda :start: must be H:MM, got {start!r}")
        h, m = map(int, start.split(":"))
        clock = 60 * h + m
        rows = []
        for line in self.content:
            if not line.strip():
                continue
            cells = [c.strip() for c in line.split("|")]
            if len(cells) != 4 or not cells[0].isdigit():
                raise self.error(f"agenda row must be `minutes | page or - | title | what`, got {line!r}")
            rows.append((int(cells[0]), *cells[1:]))
        total = sum(r[0] for r in rows)
        if "total" in self.options and total != self.options["total"]:
            raise self.error(f"agenda rows add up to {total} minutes, not :total: "
                             f"{self.options['total']}")
        table = nodes.table(classes=["gpuinfer-agenda"])
        group = nodes.tgroup(cols=4)
        table += group
        for width in (12, 8, 35, 45):
            group += nodes.colspec(colwidth=width)
        head = nodes.thead()
        group += head
        body = nodes.tbody()
        group += body

        def row(cells, parent):
            r = nodes.row()
            for cell in cells:
                entry = nodes.entry()
                para = nodes.paragraph()
                para += cell if isinstance(cell, nodes.Node) else nodes.Text(cell)
                entry += para
                r += entry
            parent += r

        row(["When", "Minutes", "Session", "What happens"], head)
        for minutes, target, title, what in rows:
            session = nodes.Text(title) if target in ("", "-") else _page_node(env, title, target)
            row([f"{_clock(clock)}–{_clock(clock + minutes)}", str(minutes), session, what], body)
            clock += minutes
        return [table]


# --- one copy of each script per page ----------------------------------------------------

def _script_key(js):
    attributes = getattr(js, "attributes", {}) or {}
    filename = getattr(js, "filename", js) or ""  # an inline script: None from the registry, "" from the builder
    return (str(filename), tuple(sorted((k, str(v)) for k, v in attributes.items())))


def drop_duplicate_scripts(app, pagename, templatename, context, doctree):
    """Keep the first of identical <script> entries. sphinx-thebe 0.3 adds its inline
    configuration (`const THEBE_JS_URL = ...`) twice under Sphinx 7.4 (once through the
    registry, once through the builder), and the second copy throws "Identifier
    'THEBE_JS_URL' has already been declared" on every page."""
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for js in scripts:
        key = _script_key(js)
        if key not in seen:
            seen.add(key)
            unique.append(js)
    scripts[:] = unique


def drop_launch_buttons_of_text_pages(app, pagename, templatename, context, doctree):
    """Only .ipynb pages open on Colab. A page written as a MyST text notebook (the
    machine page, the instructor notes) runs at build time only; Colab cannot open its
    .md file, so its rocket button would lead nowhere."""
    if str(app.env.doc2path(pagename, base=False)).endswith(".ipynb"):
        return
    buttons = context.get("header_buttons")
    if buttons:
        buttons[:] = [b for b in buttons if b.get("label") != "launch-buttons"]


def number_exercises_per_page(app, env):
    """Exercises count from 1 on every page ("Exercise 2" in lab 1, not "Exercise 36").

    sphinx-exercise numbers exercises with Sphinx's numfig, which counts across the whole
    book. Sphinx's toctree collector assigns those numbers on ``env-get-updated``; this
    handler runs after it and renumbers each page's exercises in the order Sphinx found
    them. Pages whose numbers it changes are returned for rewriting.
    """
    changed = []
    for docname, figtypes in env.toc_fignumbers.items():
        numbers = figtypes.get("exercise")
        if not numbers:
            continue
        ordered = sorted(numbers, key=lambda label: numbers[label])
        renumbered = {label: (i,) for i, label in enumerate(ordered, start=1)}
        if renumbered != numbers:
            figtypes["exercise"] = renumbered
            changed.append(docname)
    return changed


def setup(app):
    # After Sphinx's TocTreeCollector, which assigns figure numbers at the default 500.
    app.connect("env-get-updated", number_exercises_per_page, priority=900)
    app.connect("build-finished", _on_build_finished)
    app.connect("html-page-context", drop_duplicate_scripts)
    # After sphinx-book-theme's add_launch_buttons (priority 501).
    app.connect("html-page-context", drop_launch_buttons_of_text_pages, priority=600)
    app.add_config_value("gpuinfer_reader_branch", "", "html", types=[str])
    app.connect("html-page-context", launch_reader_copies_on_colab, priority=600)
    app.add_role("page", page_role)
    app.add_directive("agenda", Agenda)
    return {"version": "0.1", "parallel_read_safe": True, "parallel_write_safe": True}
