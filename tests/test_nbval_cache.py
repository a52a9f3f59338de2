"""The plugin that hands nbval's outputs to the book build (tests/plugins/nbval_cache.py)."""

import types

import nbformat
import pytest

from tests.plugins import nbval_cache


def _notebook():
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_markdown_cell("# Title"),
                nbformat.v4.new_code_cell("print(1)", metadata={"tags": ["remove-input"]}),
                nbformat.v4.new_code_cell("2 + 2")]
    return nb


def _item(outputs):
    return types.SimpleNamespace(test_outputs=outputs)


def _outputs():
    stream = nbformat.NotebookNode(output_type="stream", name="stdout", text="1\n")
    result = nbformat.NotebookNode(output_type="execute_result", data={"text/plain": "4"},
                                   metadata={}, execution_count=7)
    return [_item([stream]), _item([result])]


def test_the_outputs_land_in_the_code_cells_in_order_and_the_notebook_is_valid():
    nb = _notebook()
    out = nbval_cache.executed_notebook(_outputs(), nb)
    code = [c for c in out.cells if c.cell_type == "code"]
    assert code[0].outputs[0].text == "1\n" and code[1].outputs[0].data["text/plain"] == "4"
    assert [c.execution_count for c in code] == [1, 2]   # renumbered from 1, not nbval's 7
    assert code[1].outputs[0].execution_count == 2
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")  # input untouched


def test_a_cell_that_did_not_run_leaves_the_notebook_to_the_build():
    assert nbval_cache.executed_notebook([_item(None), _item([])], _notebook()) is None
    assert nbval_cache.executed_notebook(_outputs()[:1], _notebook()) is None


def test_the_book_build_finds_the_stored_notebook_by_its_sources(tmp_path, monkeypatch):
    jupyter_cache = pytest.importorskip("jupyter_cache")
    monkeypatch.setenv("NBVAL_JUPYTER_CACHE", str(tmp_path / ".jupyter_cache"))
    nb = _notebook()
    nbval_cache.store(nbval_cache.executed_notebook(_outputs(), nb), tmp_path / "page.ipynb", 1.5)
    cache = jupyter_cache.get_cache(str(tmp_path / ".jupyter_cache"))
    _, merged = cache.merge_match_into_notebook(nb)   # what myst-nb's cache mode calls
    assert merged.cells[2].outputs[0].data["text/plain"] == "4"
    edited = _notebook()
    edited.cells[2].source = "2 + 3"                   # an edited cell must miss the cache
    with pytest.raises(KeyError):
        cache.match_cache_notebook(edited)
