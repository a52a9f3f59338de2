"""The package's layers, read from its source (no module is imported or run):

- the layer of a module is its folder (`hardware/`, `predict/`, `measure/`, `course/`; the
  root's plain modules are the shared vocabulary): a module imports only from its own
  layer and the ones above it in LAYERS, counting imports inside functions;
- no layer above `measure` imports torch; a `measure` module imports torch at its top;
- no import cycle among gpuinfer modules (a lazy import hides a cycle from Python, not
  from a reader);
- one import path per public name: a name is used (in the package, the tests, the pages
  and the workshop) only through the module that defines it, never through another module
  that imported it;
- no `module._private` name of a gpuinfer module used from another module or a page.
"""

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "gpuinfer"

#: The layers, top to bottom: a module may import from its own layer and the ones above
#: it, never from one below. The layer is the module's folder, so a new module is placed
#: when it is created (the root's plain modules are the vocabulary every layer shares).
LAYERS = ("vocabulary", "hardware", "predict", "measure", "course")
#: The layers that may import torch, ONNX Runtime or Triton: the measurement layer (at the
#: top of each module) and what shows it.
MAY_IMPORT_TORCH = {"measure", "course"}

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
    """The module an expression such as `_b` or `gpuinfer.course.exercises.chapter01_roofline` names, by
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
    tree = ast.parse("def f():\n    from ..measure import bench as _b\n    from .llm import get\n")
    targets, aliases, _ = _imports("gpuinfer.predict.roofline", MODULES["gpuinfer.predict.roofline"], tree)
    assert targets == {"gpuinfer.measure.bench", "gpuinfer.predict.llm"} and aliases == {"_b": "gpuinfer.measure.bench"}
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [("a", "b", "c")]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_a_private_name_is_found_through_an_alias_and_a_from_import():
    tree = ast.parse("from gpuinfer.measure import bench as _b\n"
                     "from gpuinfer.measure.bench import _sweep\n"
                     "import gpuinfer\nfrom gpuinfer.course import exercises\n"
                     "_b._device('cpu'); _b.time_fn; self._x; _b.__doc__\n"
                     "exercises.chapter01_roofline._gpt_fast_fraction; gpuinfer.measure.bench._kind\n")
    path = PACKAGE / "x.py"
    _, aliases, names = _imports("gpuinfer.x", path, tree)
    assert _private_uses(tree, aliases, names) == {
        "gpuinfer.measure.bench._device", "gpuinfer.measure.bench._sweep", "gpuinfer.measure.bench._kind",
        "gpuinfer.course.exercises.chapter01_roofline._gpt_fast_fraction"}


# --- the package --------------------------------------------------------------------------

def test_no_import_cycle_among_gpuinfer_modules():
    cycles = _cycles(_graph())
    assert not cycles, f"import cycles: {sorted(cycles)}"


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
    found = sorted(_package_private_uses())
    assert not found, "private names used across modules (make them public): " + "; ".join(
        f"{f}: {u}" for f, u in found)


def _layer(module):
    """The layer of a gpuinfer module, from its path; None for the root package and its
    command line, which may import anything."""
    parts = module.split(".")
    if module in ("gpuinfer", "gpuinfer.__main__") or parts[0] != "gpuinfer":
        return None
    if parts[1] in LAYERS:
        return parts[1]
    return "vocabulary" if len(parts) == 2 else "unknown"


def _imports_above(module):
    """The gpuinfer modules `module` imports from a layer below its own."""
    mine = LAYERS.index(_layer(module))
    targets, _, _ = _imports(module, MODULES[module], _parse(MODULES[module]))
    return sorted(t for t in targets if t in MODULES and _layer(t) is not None
                  and LAYERS.index(_layer(t)) > mine)


def _torch_imports(path):
    """(at the top, inside functions): whether the file imports torch there."""
    tree = _parse(path)
    top = any(_is_torch(n) for n in tree.body)
    deep = any(_is_torch(n) for n in ast.walk(tree) if n not in tree.body)
    return top, deep


def _is_torch(node):
    """An import of torch, not counting its compiler's configuration (`torch._inductor`,
    1.6 s to load, read only where a model is compiled)."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        names = [node.module or ""]
    else:
        return False
    return any(n.split(".")[0] == "torch" and not n.startswith("torch._inductor")
               for n in names)


LAYERED = sorted(m for m in MODULES if _layer(m) is not None)


def test_every_module_is_in_a_layer():
    loose = sorted(m for m in LAYERED if _layer(m) == "unknown")
    assert not loose, f"put these modules in one of the layers' folders {LAYERS}: {loose}"


@pytest.mark.parametrize("module", LAYERED)
def test_a_module_imports_only_from_its_layer_and_the_ones_above(module):
    assert not _imports_above(module), (
        f"{module} ({_layer(module)}) imports from a lower layer: {_imports_above(module)}")


@pytest.mark.parametrize("module", LAYERED)
def test_torch_is_imported_at_the_top_of_a_measure_module_and_nowhere_above(module):
    top, deep = _torch_imports(MODULES[module])
    if _layer(module) not in MAY_IMPORT_TORCH:
        assert not (top or deep), f"{module} ({_layer(module)}) imports torch"
    elif _layer(module) == "measure":
        assert not deep, f"{module}: import torch at the top, not inside a function"


def test_the_layer_checks_see_a_planted_violation():
    """The checks' own check, on the same helpers."""
    assert _layer("gpuinfer.course.plots") == "course"
    assert _layer("gpuinfer.course.exercises.chapter01_roofline") == "course"
    assert _layer("gpuinfer.validate") == "vocabulary"
    assert _layer("gpuinfer.hardware") == "hardware"
    assert _layer("gpuinfer.somewhere.x") == "unknown"
    assert _layer("gpuinfer.__main__") is None
    assert LAYERS.index("predict") < LAYERS.index("measure")
    tree = ast.parse("def f():\n    import torch\n")
    assert _is_torch(tree.body[0].body[0]) and not _is_torch(ast.parse("import numpy").body[0])
    assert not _is_torch(ast.parse("import torch._inductor.config as c").body[0])


# --- one import path per public name ----------------------------------------------------------



def _borrowed(module, path):
    """The names a module's top imports from another gpuinfer module (not modules)."""
    names = set()
    for node in _parse(path).body:
        if isinstance(node, ast.ImportFrom) and _resolve(module, path, node).startswith("gpuinfer"):
            base = _resolve(module, path, node)
            names |= {a.asname or a.name for a in node.names if f"{base}.{a.name}" not in MODULES}
    return names


BORROWED = {m: _borrowed(m, p) for m, p in MODULES.items()}


def _second_paths(tree, module, path):
    """`m.x` or `from m import x` where gpuinfer module m imported x from another gpuinfer
    module: a second import path for x. (Submodules of a package are not names; a
    standard module a test patches through its user, `detection.os`, is not the course's.)"""
    _, aliases, names = _imports(module, path, tree)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            owner = _dotted(node.value, aliases)
            if owner in MODULES and node.attr in BORROWED[owner]:
                found.add(f"{owner}.{node.attr}")
    for name, base in names:
        if base in MODULES and name in BORROWED[base]:
            found.add(f"{base}.{name}")
    return found


def test_a_name_is_imported_from_the_module_that_defines_it():
    found = set()
    for module, path in MODULES.items():
        found |= {f"{path.relative_to(ROOT)}: {u}" for u in _second_paths(_parse(path), module, path)}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        found |= {f"{path.relative_to(ROOT)}: {u}"
                  for u in _second_paths(_parse(path), "tests.x", path)}
    for where, source in _code_cells():
        tree = _python(source)
        if tree is not None:
            found |= {f"{where}: {u}" for u in _second_paths(tree, "gpuinfer.__notebook__",
                                                              PACKAGE / "__notebook__.py")}
    assert not found, "names reached through a module that only imported them: " + "; ".join(
        sorted(found))


def test_the_second_path_check_sees_a_planted_one():
    # llm_serving imports MAX_BATCH from batching, for its own use.
    tree = ast.parse("from gpuinfer.predict import llm_serving\n"
                     "from gpuinfer.predict.llm_serving import MAX_TOKENS\n"
                     "llm_serving.MAX_BATCH; llm_serving.offline_throughput; llm_serving.np\n")
    found = _second_paths(tree, "tests.x", ROOT / "tests" / "x.py")
    assert found == {"gpuinfer.predict.llm_serving.MAX_BATCH",
                     "gpuinfer.predict.llm_serving.MAX_TOKENS"}


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
    assert not found, "private names in the course's code: " + "; ".join(found)
