"""gpuinfer.predict.cost against hand-worked examples."""

import math

import numpy as np
import pytest

from gpuinfer.predict import cost


def test_cost_per_million_by_hand():
    # $0.526 per hour / 3600 s = $1.4611e-4 per second; at 1,000 predictions/s that is
    # $1.4611e-7 per prediction, $0.14611 per million.
    assert cost.cost_per_million(0.526, 1000) == pytest.approx(0.146111, rel=1e-5)
    # Half busy: twice the cost per prediction.
    assert cost.cost_per_million(0.526, 1000, 0.5) == pytest.approx(0.292222, rel=1e-5)
    np.testing.assert_allclose(cost.cost_per_million(0.526, 1000, np.array([1.0, 0.1])),
                               [0.146111, 1.46111], rtol=1e-5)


def test_break_even_utilisation_by_hand():
    # CPU: $0.34/h at 5,000/s fully busy -> $0.018889 per million. GPU: $0.526/h at
    # 100,000/s -> $0.0014611 per million fully busy; equal at u = 0.0014611 / 0.018889.
    u = cost.break_even_utilisation(0.526, 100_000, 0.34, 5_000)
    assert u == pytest.approx((0.526 / 100_000) / (0.34 / 5_000), rel=1e-12)
    assert u == pytest.approx(0.07735, rel=1e-4)
    assert cost.cost_per_million(0.526, 100_000, u) == pytest.approx(
        cost.cost_per_million(0.34, 5_000))
    # A baseline that is itself only half busy halves the bar.
    assert cost.break_even_utilisation(0.526, 100_000, 0.34, 5_000, 0.5) == pytest.approx(u / 2)
    # A machine slower per dollar never breaks even: u > 1.
    assert cost.break_even_utilisation(1.0, 100, 0.1, 1000) > 1


def test_machines_and_utilisation_at_demand():
    assert cost.machines_needed(1, 1000) == 1
    assert cost.machines_needed(1000, 1000) == 1
    assert cost.machines_needed(1001, 1000) == 2
    np.testing.assert_array_equal(cost.machines_needed(np.array([10, 2500]), 1000), [1, 3])
    assert cost.utilisation_at_demand(2500, 1000) == pytest.approx(2500 / 3000)
    assert cost.utilisation_at_demand(100, 1000) == pytest.approx(0.1)


def test_cost_at_demand_pays_for_idle_capacity():
    # One $0.526/h machine serving 100/s of its 1,000/s: $0.526 / 360,000 predictions.
    assert cost.cost_per_million_at_demand(0.526, 1000, 100) == pytest.approx(
        0.526 / (3600 * 100) * 1e6)
    assert cost.cost_per_million_at_demand(0.526, 1000, 100) == pytest.approx(
        cost.cost_per_million(0.526, 1000, 0.1))


def test_break_even_demand_by_hand():
    # GPU $0.526/h (100,000/s) vs CPUs at $0.34/h (5,000/s each): two CPUs ($0.68/h) cost
    # more than the GPU, one ($0.34/h) less: the GPU wins above 5,000/s.
    assert cost.break_even_demand(0.526, 100_000, 0.34, 5_000) == 5_000
    d = 5_000 * 1.01
    assert cost.cost_per_million_at_demand(0.526, 100_000, d) < \
        cost.cost_per_million_at_demand(0.34, 5_000, d)
    assert cost.cost_per_million_at_demand(0.526, 100_000, 4_000) > \
        cost.cost_per_million_at_demand(0.34, 5_000, 4_000)
    # Cheaper per hour: wins at any demand. Too slow to ever need the extra CPUs: never.
    assert cost.break_even_demand(0.3, 100_000, 0.34, 5_000) == 0.0
    assert cost.break_even_demand(0.526, 4_000, 0.34, 5_000) == math.inf


def test_example_prices_are_labelled():
    for p in cost.EXAMPLE_PRICES:
        assert p.price_per_hour > 0 and p.currency and p.as_of and p.source.startswith("https://")
    assert cost.example_price("aws g4dn.xlarge").price_per_hour == 0.526
    assert len(cost.example_prices()) == len(cost.EXAMPLE_PRICES)


@pytest.mark.parametrize("call, words", [
    (lambda: cost.cost_per_million(-1, 10), "price_per_hour"),
    (lambda: cost.cost_per_million(1, 0), "throughput_per_s"),
    (lambda: cost.cost_per_million(1, 10, 1.5), "utilisation"),
    (lambda: cost.cost_per_million(1, 10, 0), "utilisation"),
    (lambda: cost.cost_per_million(1, math.nan), "throughput_per_s"),
    (lambda: cost.break_even_utilisation(1, 10, 1, 10, 2), "baseline_utilisation"),
    (lambda: cost.machines_needed(0, 10), "demand_per_s"),
])
def test_bad_input_names_what_was_wrong(call, words):
    with pytest.raises(ValueError, match=words):
        call()


def test_unknown_example_price():
    with pytest.raises(KeyError, match="g4dn"):
        cost.example_price("p5")


@pytest.mark.parametrize("call, error, words", [
    (lambda: cost.cost_per_million(1, [1, 2], [0.5, 0.5, 0.5]), ValueError, "matching lengths"),
    (lambda: cost.cost_per_million(1, 1, 50), ValueError, "percentage"),
    (lambda: cost.cost_per_million(float("nan"), 1), ValueError, "price_per_hour"),
    (lambda: cost.cost_per_million(None, 1), TypeError, "price_per_hour"),
    (lambda: cost.machines_needed("3", 1), TypeError, "demand_per_s"),
    (lambda: cost.machines_needed([1, 2], [1, 2, 3]), ValueError, "matching lengths"),
    (lambda: cost.break_even_demand(1, [1, 2], 1, 1), TypeError, "throughput_per_s"),
    (lambda: cost.example_price("aws g4"), KeyError, "did you mean"),
])
def test_bad_input_gets_a_clear_error(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_price_per_gpu_hour():
    # p5.48xlarge: 39.33 USD/h for 8 H100s = 4.91625 USD a GPU-hour; g4dn.xlarge: one T4.
    assert cost.price_per_gpu_hour("AWS p5.48xlarge (Capacity Block)") == pytest.approx(39.33 / 8)
    assert cost.price_per_gpu_hour("AWS g4dn.xlarge") == pytest.approx(0.526)
    with pytest.raises(ValueError, match="no GPUs"):
        cost.price_per_gpu_hour("AWS c5.2xlarge")


def test_price_per_gpu_hour_takes_a_gpu_name():
    # The GPU an example instance holds: p5e.48xlarge's 43.26 USD/h over 8 H200s = 5.4075;
    # an alias hardware.get knows ("h100" is the H100 SXM) and spaces are forgiven.
    assert cost.price_per_gpu_hour("H200") == pytest.approx(43.26 / 8)
    assert cost.price_per_gpu_hour(" h100 ") == pytest.approx(39.33 / 8)
    assert cost.price_per_gpu_hour("A10G") == pytest.approx(1.006)
    assert cost.price_per_gpu_hour("T4") == cost.price_per_gpu_hour("AWS g4dn.xlarge")
    # A catalogue GPU no example instance holds, a typo and a non-string: clear errors.
    with pytest.raises(KeyError, match="L4 is in no example instance"):
        cost.price_per_gpu_hour("L4")
    with pytest.raises(KeyError, match="did you mean 'H200'"):
        cost.price_per_gpu_hour("H2000")
    with pytest.raises(TypeError, match="name must be"):
        cost.price_per_gpu_hour(8)


# --- priced: a table of options, each with its price and cost per million ---------------------

def _options():
    import pandas as pd

    # Two GPUs, two formats each; throughputs in tokens/s chosen to divide easily.
    idx = pd.MultiIndex.from_tuples([("T4", "fp16"), ("T4", "int8"), ("A10G", "int8")],
                                    names=["GPU", "weights"])
    return pd.DataFrame({"accelerator": ["T4", "T4", "A10G"],
                         "tokens_per_s": [20.0, 32.0, 50.0]}, index=idx)


def test_priced_by_hand():
    # T4 at 0.526 USD/h: 0.526 / (3600 x 20) x 1e6 = 7.3056; at 32 tokens/s: 4.5660.
    # A10G at 1.006 USD/h, 50 tokens/s: 1.006 / (3600 x 50) x 1e6 = 5.5889.
    prices = {"T4": 0.526, "A10G": 1.006}
    expect = [0.526 / 72000 * 1e6, 0.526 / 115200 * 1e6, 1.006 / 180000 * 1e6]
    for by in ("accelerator", "GPU"):           # a column or an index level
        t = cost.priced(_options(), prices, by=by)
        assert list(t["price_per_hour"]) == [0.526, 0.526, 1.006]
        assert np.allclose(t["cost_per_million"], expect, rtol=1e-12)
    assert "cost_per_million" not in _options().columns          # a copy, not in place
    # One price per row, or one for all; half busy: twice the cost; another column name.
    t = cost.priced(_options(), [0.526, 0.526, 1.006], utilisation=0.5, column="usd")
    assert np.allclose(t["usd"], 2 * np.array(expect))
    assert np.allclose(cost.priced(_options(), 3.6)["cost_per_million"],
                       [3.6 / (3600 * x) * 1e6 for x in (20, 32, 50)])   # 50, 31.25, 20


@pytest.mark.parametrize("price, kw, error, words", [
    ({"T4": 0.526}, {"by": "accelerator"}, ValueError, "A10G"),
    ({"T4": 0.5, "A10G": 1.0}, {"by": "vendor"}, ValueError, "by"),
    (0.5, {"by": "accelerator"}, TypeError, "price_per_hour"),
    (-0.5, {}, ValueError, "price_per_hour"),
    ([0.5, 1.0], {}, ValueError, "price_per_hour"),
    (0.5, {"throughput": "ceiling_tokens_per_s"}, ValueError, "throughput"),
    (0.5, {"utilisation": 50}, ValueError, "utilisation"),
])
def test_priced_bad_input(price, kw, error, words):
    with pytest.raises(error, match=words):
        cost.priced(_options(), price, **kw)
    with pytest.raises(TypeError, match="table"):
        cost.priced([20.0, 32.0], 0.5)
