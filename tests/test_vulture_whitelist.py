"""tests/vulture_whitelist.py holds each name vulture would call unused, by its reason; each
reason is checked here, so an entry that stops being true fails instead of hiding dead code."""

import ast
import dataclasses
import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WHITELIST = ROOT / "tests" / "vulture_whitelist.py"
PAGES = [p for pattern in ("chapters/*.ipynb", "labs/*.ipynb", "workshop/*.md",
                           "workshop/*.ipynb", "appendix/*.md", "intro.md")
         for p in sorted(ROOT.glob(pattern))]


def _load():
    spec = importlib.util.spec_from_file_location("vulture_whitelist", WHITELIST)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)   # evaluates every listed name: a stale one fails here
    return module


def _names(list_name):
    """The last attribute name of each entry of `list_name` in the whitelist's source."""
    tree = ast.parse(WHITELIST.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and node.targets[0].id == list_name:
            return [n.attr for n in ast.walk(node.value) if isinstance(n, ast.Attribute)
                    and not isinstance(n.ctx, ast.Store) and not _is_inner(n, node.value)]
    raise AssertionError(f"{list_name} not in {WHITELIST.name}")


def _is_inner(node, root):
    """True for `a` in `a.b.c` (only the outermost attribute of a chain is the entry)."""
    return any(isinstance(p, ast.Attribute) and p.value is node for p in ast.walk(root))


def test_every_page_only_name_is_on_a_page():
    text = "\n".join(p.read_text(encoding="utf-8") for p in PAGES)
    names = _names("_PAGES")
    assert names, "no page-only names parsed"
    missing = [n for n in names if not re.search(rf"\b{re.escape(n)}\b", text)]
    assert not missing, f"no page uses these any more (delete them or the entry): {missing}"


def test_every_source_is_a_citation():
    def cites(value):
        if isinstance(value, dict):
            return bool(value) and all(cites(v) for v in value.values())
        return isinstance(value, str) and ("https://" in value or "github.com" in value)
    for value in _load()._SOURCES:
        assert cites(value), value


def test_every_protocol_name_is_defined_in_src_or_tests():
    """A protocol entry is a method or attribute this code defines for another library to
    call: it must still be defined (a def, or an assignment to the name) somewhere."""
    defined = set()
    for path in [*(ROOT / "src").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]:
        if path == WHITELIST:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                defined.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                defined.add(node.attr)
    names = _names("_PROTOCOLS")
    assert len(names) > 10
    stale = [n for n in names if n not in defined]
    assert not stale, f"defined nowhere any more (delete the entry): {stale}"


def test_every_field_is_a_dataclass_field():
    from gpuinfer.measure import triton_server
    fields = {f.name for f in dataclasses.fields(triton_server.Server)}
    assert set(_names("_FIELDS")) <= fields
