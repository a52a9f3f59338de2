"""Triton through PyTriton: the libpython check, the measured summary against hand
arithmetic, and a real server on 127.0.0.1 whose dynamic batcher forms batches > 1."""

import math
import socket
import sysconfig

import numpy as np
import pandas as pd
import pytest

from gpuinfer.measure import tabular_model, triton_server as ts


# --- the Python-version trap ---------------------------------------------------------------

def _fake_sysconfig(monkeypatch, libdir, soname):
    values = {"LIBDIR": str(libdir), "INSTSONAME": soname}
    real = sysconfig.get_config_var
    monkeypatch.setattr(ts.sysconfig, "get_config_var",
                        lambda name: values.get(name, real(name)))


def test_backend_check_finds_the_interpreters_own_libpython(tmp_path, monkeypatch):
    (tmp_path / "libpython3.11.so.1.0").write_bytes(b"")
    _fake_sysconfig(monkeypatch, tmp_path, "libpython3.11.so.1.0")
    check = ts.python_backend_check()
    assert check["ok"] and check["libpython"] == str(tmp_path / "libpython3.11.so.1.0")
    assert check["fix"] == ""


def test_backend_check_refuses_a_python_without_a_shared_libpython(tmp_path, monkeypatch):
    _fake_sysconfig(monkeypatch, tmp_path, "libpython3.11.a")  # a static build's name
    check = ts.python_backend_check()
    assert not check["ok"]
    assert "make PYTHON=/usr/bin/python3" in check["fix"] and ts.PYTRITON_ISSUE_51 in check["fix"]
    with pytest.raises(RuntimeError, match="no shared libpython"):
        with ts._stub_library_path():
            pass


def test_stub_library_path_goes_first_and_is_restored(tmp_path, monkeypatch):
    (tmp_path / "libpython3.11.so.1.0").write_bytes(b"")
    _fake_sysconfig(monkeypatch, tmp_path, "libpython3.11.so.1.0")
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/other")
    with ts._stub_library_path():
        assert ts.os.environ["LD_LIBRARY_PATH"] == f"{tmp_path}:/opt/other"
    assert ts.os.environ["LD_LIBRARY_PATH"] == "/opt/other"
    monkeypatch.delenv("LD_LIBRARY_PATH")
    with ts._stub_library_path():
        assert ts.os.environ["LD_LIBRARY_PATH"] == str(tmp_path)
    assert "LD_LIBRARY_PATH" not in ts.os.environ


def test_free_port_can_be_bound_on_loopback():
    port = ts.free_port()
    with socket.socket() as s:
        s.bind((ts.HOST, port))
    assert 0 < port < 65536 and ts.HOST == "127.0.0.1"


# --- arguments -------------------------------------------------------------------------------

def test_served_model_checks_its_arguments():
    m = tabular_model.mlp(hidden=(8,))
    with pytest.raises(ValueError, match="max_batch"):
        ts.ServedModel("a", m, 64, 1, max_batch=0)
    with pytest.raises(ValueError, match="preferred"):
        ts.ServedModel("a", m, 64, 1, max_batch=8, preferred_batch_sizes=(16,))
    with pytest.raises(ValueError, match="max_queue_delay_s"):
        ts.ServedModel("a", m, 64, 1, max_queue_delay_s=-1e-3)
    with pytest.raises(ValueError, match="letters, digits"):
        ts.ServedModel("a model", m, 64, 1)
    with pytest.raises(TypeError, match="callable"):
        ts.ServedModel("a", "not a model", 64, 1)


# --- the measured summary --------------------------------------------------------------------

def test_summarize_by_hand():
    # Four requests, answered after 1, 2, 3 and 4 ms; the last answer at t = 10 ms.
    requests = pd.DataFrame({"model": ["m"] * 4, "arrival": [0.0, 0.002, 0.004, 0.006],
                             "sent": [0.0, 0.002, 0.004, 0.006],
                             "finish": [0.001, 0.004, 0.007, 0.010], "ok": [True] * 4})
    requests["latency"] = requests["finish"] - requests["arrival"]
    # Two batches, of 1 and 3 requests, 0.5 ms and 1.5 ms inside the model.
    batches = pd.DataFrame({"model": ["m", "m"], "start": [0.0005, 0.008],
                            "end": [0.001, 0.0095], "batch_size": [1, 3]})
    batches["seconds"] = batches["end"] - batches["start"]
    s = ts.summarize(requests, batches)
    assert s["requests"] == s["answered"] == 4
    assert s["p50_s"] == pytest.approx(0.0025)          # midway between 2 and 3 ms
    assert s["throughput_per_s"] == pytest.approx(4 / 0.010)
    assert s["mean_batch_per_batch"] == pytest.approx(2.0)      # (1 + 3) / 2
    assert s["mean_batch"] == pytest.approx((1 + 9) / 4)         # (1^2 + 3^2) / (1 + 3)
    assert s["busy_fraction"] == pytest.approx(0.002 / 0.010)


def test_summarize_counts_only_answered_requests():
    requests = pd.DataFrame({"model": ["m", "m"], "arrival": [0.0, 0.001],
                             "sent": [0.0, 0.001], "finish": [0.002, math.nan],
                             "ok": [True, False]})
    requests["latency"] = requests["finish"] - requests["arrival"]
    batches = pd.DataFrame({"model": ["m"], "start": [0.0], "end": [0.001],
                            "batch_size": [1], "seconds": [0.001]})
    s = ts.summarize(requests, batches)
    assert (s["requests"], s["answered"]) == (2, 1)
    assert s["p99_s"] == pytest.approx(0.002)


def test_simulate_like_uses_each_models_policy_and_the_real_arrivals():
    m = tabular_model.mlp(hidden=(8,))
    models = {"a": ts.ServedModel("a", m, 64, 1, max_batch=1),
              "b": ts.ServedModel("b", m, 64, 1, max_batch=4)}
    # Two requests to "a", 1 ms apart, each served alone in 2 ms: the second waits 1 ms.
    one = pd.DataFrame({"model": ["a", "a"], "arrival": [0.0, 0.001]})
    s = ts.simulate_like(one, 0.002, models)
    assert s["p50_s"] == pytest.approx((0.002 + 0.003) / 2) and s["mean_batch"] == 1.0
    # Shared: "a" at t=0 runs 0-2 ms; "b"'s two requests (t=0.5, 1 ms) then go as one batch.
    two = pd.DataFrame({"model": ["a", "b", "b"], "arrival": [0.0, 0.0005, 0.001]})
    s = ts.simulate_like(two, 0.002, models)
    assert s["mean_batch_per_batch"] == pytest.approx(1.5)          # batches of 1 and 2
    assert s["throughput_per_s"] == pytest.approx(3 / 0.004)        # all done at 4 ms


def test_service_times_are_positive_per_batch():
    table = ts.service_times(tabular_model.mlp(hidden=(32,)), [1, 4], 64, min_run_s=0.01)
    assert list(table["batch"]) == [1, 4] and (table["seconds"] > 0).all()


# --- a real Triton server ----------------------------------------------------------------------

def _refuses(url):
    host, port = url.split(":")
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex((host, int(port))) != 0


def test_triton_batches_concurrent_requests_on_the_cpu():
    pytest.importorskip("pytriton")
    import tritonclient.grpc as grpcclient

    if not ts.python_backend_check()["ok"]:
        pytest.fail(ts.python_backend_check()["fix"])
    module = tabular_model.mlp(hidden=(256, 256))
    x = tabular_model.synthetic_batch(64).numpy()                      # [64, 64]
    model = ts.ServedModel("mlp", module, 64, 1, max_batch=16, max_queue_delay_s=0.005)
    with ts.serve([model]) as server:
        url = server.grpc_url
        # The answer is the module's own output.
        with grpcclient.InferenceServerClient(url) as client:
            inp = grpcclient.InferInput("x", [1, 64], "FP32")
            inp.set_data_from_numpy(x[:1])
            y = client.infer("mlp", [inp]).as_numpy("y")
        assert np.allclose(y, module(tabular_model.synthetic_batch(64)[:1]).detach().numpy(),
                           rtol=1e-5, atol=1e-6)
        # 200 requests at 2,000 requests/s, open loop: many arrive within 5 ms of each other.
        requests = ts.poisson_load(server, {"mlp": 2000.0}, 200, x, seed=3, max_s=20)
        batches = server.log.frame()
        assert server.rss_bytes() > 0
    assert requests["ok"].all(), "every request was answered"
    assert batches["batch_size"].sum() == 200, "the log saw every request once"
    assert batches["batch_size"].max() > 1, "the dynamic batcher formed a batch"
    assert batches["batch_size"].max() <= 16, "never beyond max_batch_size"
    s = ts.summarize(requests, batches)
    assert s["mean_batch_per_batch"] > 1.0 and s["p50_s"] > 0
    assert _refuses(url), "the server stopped when the block ended"


def test_server_stops_after_an_error_inside_the_block():
    pytest.importorskip("pytriton")
    model = ts.ServedModel("tiny", tabular_model.mlp(hidden=(8,)), 64, 1, max_batch=4)
    with pytest.raises(ZeroDivisionError):
        with ts.serve([model]) as server:
            url = server.grpc_url
            raise ZeroDivisionError("an error inside the block")
    assert _refuses(url)
