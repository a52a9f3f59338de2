"""Numbers handed to the website's prose format as numbers, whatever type computed them."""

import numpy as np
import pytest

from gpuinfer import book


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
