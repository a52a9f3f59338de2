"""The package's layers, read from its source (no module is imported or run):

- no import cycle among gpuinfer modules, counting imports inside functions (a lazy
  import hides a cycle from Python, not from a reader);
- no `module._private` name of a gpuinfer module used from another module or from a
  notebook (chapters, labs, workshop): what a page or a module needs is public;
- the prediction modules (the roofline, the models, the catalogue, costs) import neither
  torch nor the measurement layer (`bench`, `device`, `environment`, `decoding`), anywhere.

Each check lists what it found; the ALLOWED sets hold the known exceptions being removed.
"""

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "gpuinfer"

#: The modules that predict: they hold formulas and cited tables, and run anywhere.
PREDICTION = {
    "gpuinfer.roofline", "gpuinfer.models", "gpuinfer.llm", "gpuinfer.dtypes", "gpuinfer.batching",
    "gpuinfer.llm_serving", "gpuinfer.speculative", "gpuinfer.parallel",
    "gpuinfer.multinode", "gpuinfer.cost", "gpuinfer.tabular", "gpuinfer.achievable",
    "gpuinfer.calibration", "gpuinfer.search", "gpuinfer.collectives", "gpuinfer.expert_parallel",
    "gpuinfer.step_model", "gpuinfer.step_cost", "gpuinfer.paged_kv", "gpuinfer.engine_step",
    "gpuinfer.llm_simulator", "gpuinfer.llm_slo", "gpuinfer.fleet_sizing", "gpuinfer.quant_examples",
    "gpuinfer.quant_inputs", "gpuinfer.validation",
    "gpuinfer.validate", "gpuinfer.colocation", "gpuinfer.mig_sizing",
    "gpuinfer.hardware", "gpuinfer.hardware.devices", "gpuinfer.hardware.links",
    "gpuinfer.hardware.lookup", "gpuinfer.hardware.measured", "gpuinfer.hardware.mig",
}
#: What a prediction module may not import: torch, and the measurement layer.
MEASUREMENT = {"gpuinfer.bench", "gpuinfer.device", "gpuinfer.environment",
               "gpuinfer.decoding", "gpuinfer.bench_suite", "gpuinfer.distributed"}

#: The rest of the measurement layer: modules that time, load or run real work (torch,
#: ONNX Runtime, Triton), that quantise real tensors (quant and its parts take numpy or
#: torch), or that read what such runs recorded. They may import anything.
MEASURING = MEASUREMENT | {
    "gpuinfer.__main__", "gpuinfer.gpu_check", "gpuinfer.quant", "gpuinfer.quality",
    "gpuinfer.fusion", "gpuinfer.tuning", "gpuinfer.serving", "gpuinfer.onnx_runtime",
    "gpuinfer.triton_server", "gpuinfer.tabular_model", "gpuinfer.reference",
    "gpuinfer.lab_verdicts", "gpuinfer.hardware.detection",
    "gpuinfer.float_formats", "gpuinfer.lab_measurements",
    "gpuinfer.real_model", "gpuinfer.profiling",
}
#: The pages' plumbing: glue, plots, verdict sentences, the exercises. A prediction module
#: never imports one of these (a formula does not depend on how a page shows it).
PRESENTATION = {"gpuinfer", "gpuinfer.book", "gpuinfer.plots", "gpuinfer.findings",
                "gpuinfer.quality_findings",
                "gpuinfer.exercises", "gpuinfer.release"}

#: Known `module._private` uses in files whose owners are removing them now; each entry is
#: (using file, "module._name"). A new use fails the test, and so does an entry that is
#: gone (remove it here then).
ALLOWED_PRIVATE: set = set()
#: Known cycles (each a sorted tuple of the modules in it) being broken now; a new cycle
#: fails the test, and so does an entry that is gone.
ALLOWED_CYCLES: set = set()
#: Prediction modules that still build torch objects in a function; to move to the
#: measurement layer (for example `device`) by their owners, then remove here.
ALLOWED_TORCH: set[str] = set()   # torch_dtype lives in device, the MLP in tabular_model


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _resolve(module, path, node) -> str:
    """The absolute module a `from ... import` names (before its imported names)."""
    if node.level == 0:
        return node.module or ""
    base = _package_of(module, path).split(".")
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module, path, tree):
    """(imported gpuinfer module, {local alias: module}, [(name, from module)]) for every
    import in `tree`, at any depth. `from pkg import x` counts as importing pkg.x when x
    is a module, else pkg."""
    targets, aliases, names = set(), {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                targets.add(a.name)
                if a.asname:
                    aliases[a.asname] = a.name
                else:
                    aliases.setdefault(a.name.split(".")[0], a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, path, node)
            for a in node.names:
                full = f"{base}.{a.name}"
                if full in MODULES:
                    targets.add(full)
                    aliases[a.asname or a.name] = full
                else:
                    targets.add(base)
                    names.append((a.name, base))
    return targets, aliases, names


def _private_uses(tree, aliases, names):
    """`alias._x` where alias is a gpuinfer module, and `from gpuinfer.m import _x`."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            owner = _dotted(node.value, aliases)
            if owner in MODULES:
                found.add(f"{owner}.{node.attr}")
    for name, base in names:
        if base in MODULES and _private(name):
            found.add(f"{base}.{name}")
    return found


def _dotted(node, aliases):
    """The module an expression such as `_b` or `gpuinfer.exercises.chapter01_roofline` names, by
    the aliases in force (None if it names none)."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, aliases)
        return f"{base}.{node.attr}" if base else None
    return None


def _private(name) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _parse(path):
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _graph():
    graph = {}
    for module, path in MODULES.items():
        targets, _, _ = _imports(module, path, _parse(path))
        graph[module] = {t for t in targets if t in MODULES and t != module}
    return graph


def _cycles(graph):
    """Every strongly connected component of more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(tuple(sorted(comp)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


# --- the checks themselves are checked on small cases ---------------------------------------

def test_the_cycle_finder_sees_function_level_imports_and_finds_cycles():
    tree = ast.parse("def f():\n    from . import bench as _b\n    from .llm import get\n")
    targets, aliases, _ = _imports("gpuinfer.roofline", MODULES["gpuinfer.roofline"], tree)
    assert targets == {"gpuinfer.bench", "gpuinfer.llm"} and aliases == {"_b": "gpuinfer.bench"}
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [("a", "b", "c")]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_a_private_name_is_found_through_an_alias_and_a_from_import():
    tree = ast.parse("from . import bench as _b\nfrom .bench import _sweep\n"
                     "import gpuinfer\nfrom gpuinfer import exercises\n"
                     "_b._device('cpu'); _b.time_fn; self._x; _b.__doc__\n"
                     "exercises.chapter01_roofline._gpt_fast_fraction; gpuinfer.bench._kind\n")
    path = PACKAGE / "x.py"
    _, aliases, names = _imports("gpuinfer.x", path, tree)
    assert _private_uses(tree, aliases, names) == {
        "gpuinfer.bench._device", "gpuinfer.bench._sweep", "gpuinfer.bench._kind",
        "gpuinfer.exercises.chapter01_roofline._gpt_fast_fraction"}


# --- the package --------------------------------------------------------------------------

def test_no_import_cycle_among_gpuinfer_modules():
    cycles = set(_cycles(_graph()))
    assert cycles - ALLOWED_CYCLES == set(), f"import cycles: {sorted(cycles)}"
    assert ALLOWED_CYCLES <= cycles, f"gone, remove from ALLOWED_CYCLES: {ALLOWED_CYCLES - cycles}"


def _package_private_uses():
    found = set()
    for module, path in MODULES.items():
        tree = _parse(path)
        _, aliases, names = _imports(module, path, tree)
        for use in _private_uses(tree, aliases, names):
            owner = use.rpartition(".")[0]
            if owner != module:
                found.add((str(path.relative_to(ROOT)), use))
    return found


def test_no_module_uses_another_modules_private_names():
    found = _package_private_uses()
    allowed = {(f, u) for f, u in ALLOWED_PRIVATE if f.endswith(".py")}
    new = sorted(found - allowed)
    assert not new, "private names used across modules (make them public): " + "; ".join(
        f"{f}: {u}" for f, u in new)
    gone = allowed - found
    assert not gone, f"fixed: remove from ALLOWED_PRIVATE: {sorted(gone)}"


def _forbidden_imports(module, path):
    targets, _, _ = _imports(module, path, _parse(path))
    return sorted(t for t in targets
                  if t == "torch" or t.startswith("torch.") or t in MEASUREMENT)


@pytest.mark.parametrize("module", sorted(PREDICTION))
def test_a_prediction_module_imports_neither_torch_nor_the_measurement_layer(module):
    assert module in MODULES, f"{module} is listed as a prediction module but not found"
    allowed = {"torch"} if module in ALLOWED_TORCH else set()
    assert set(_forbidden_imports(module, MODULES[module])) == allowed


def _layer(module):
    if module in PREDICTION:
        return "prediction"
    if module in MEASURING:
        return "measurement"
    if module in PRESENTATION or module.startswith("gpuinfer.exercises."):
        return "presentation"
    return None


def test_every_module_has_a_layer():
    """A new module is placed in a layer when it is added, so that the import rules
    above apply to it: an unclassified module would escape them."""
    loose = sorted(m for m in MODULES if _layer(m) is None)
    assert not loose, ("classify these modules in tests/test_layers.py (PREDICTION, "
                       f"MEASURING or PRESENTATION): {loose}")
    both = sorted(PREDICTION & (MEASURING | PRESENTATION))
    assert not both, f"in two layers at once: {both}"


@pytest.mark.parametrize("module", sorted(PREDICTION))
def test_a_prediction_module_imports_no_presentation_module(module):
    targets, _, _ = _imports(module, MODULES[module], _parse(MODULES[module]))
    shown = sorted(t for t in targets if t in MODULES and _layer(t) == "presentation")
    assert not shown, f"{module} imports presentation modules {shown}"


def test_the_layer_checks_see_a_planted_violation():
    """The checks' own check: a prediction module importing plots, or an unknown module,
    is caught (the rules above read these same helpers)."""
    assert _layer("gpuinfer.plots") == "presentation"
    assert _layer("gpuinfer.exercises.chapter01_roofline") == "presentation"
    assert _layer("gpuinfer.not_a_module") is None
    assert _layer("gpuinfer.roofline") == "prediction"


# --- the notebooks and the workshop's pages ---------------------------------------------------

NOTEBOOKS = sorted(p for d in ("chapters", "labs", "workshop") for p in (ROOT / d).glob("*.ipynb"))
PAGES = sorted((ROOT / "workshop").glob("*.md"))
FENCE = re.compile(r"^```(?:\{code-cell\}\s*)?(?:python|ipython3|py)?[^\n]*\n(.*?)^```",
                   re.S | re.M)


def _code_cells():
    for path in NOTEBOOKS:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        for i, cell in enumerate(cells):
            if cell["cell_type"] == "code":
                yield f"{path.relative_to(ROOT)} cell {i}", "".join(cell["source"])
    for path in PAGES:
        for i, m in enumerate(FENCE.finditer(path.read_text(encoding="utf-8"))):
            yield f"{path.relative_to(ROOT)} block {i}", m.group(1)


def _python(source):
    """A cell's Python: IPython magics and shell lines blanked; None if not Python."""
    lines = ["" if line.lstrip().startswith(("%", "!")) else line
             for line in source.splitlines()]
    try:
        return ast.parse("\n".join(lines))
    except SyntaxError:
        return None


def test_the_notebooks_are_found():
    assert len(NOTEBOOKS) > 10 and any("labs" in str(p) for p in NOTEBOOKS)


def test_no_notebook_uses_a_private_name_of_the_package():
    found = []
    for where, source in _code_cells():
        tree = _python(source)
        if tree is None:
            continue
        _, aliases, names = _imports("gpuinfer.__notebook__", PACKAGE / "__notebook__.py",
                                     tree)
        found += [f"{where}: {u}" for u in sorted(_private_uses(tree, aliases, names))]
    allowed = {(f, u) for f, u in ALLOWED_PRIVATE if f.endswith((".ipynb", ".md"))}
    seen = {(f.split(" cell ")[0].split(" block ")[0], f.rpartition(": ")[2]) for f in found}
    new = [f for f in found if (f.split(" cell ")[0].split(" block ")[0],
                                f.rpartition(": ")[2]) not in allowed]
    assert not new, "private names in the course's code: " + "; ".join(new)
    assert allowed <= seen, f"fixed: remove from ALLOWED_PRIVATE: {sorted(allowed - seen)}"
