"""The sharded layer on torch.distributed: shards that sum to the unsharded layer, the
lab runner on 2 gloo processes (spawned and under torchrun), and bad setups."""


import pytest

from gpuinfer import distributed


# --- the sharded layers ----------------------------------------------------------------

def test_column_then_row_shards_sum_to_the_unsharded_layer():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 64, generator=g, dtype=torch.float64)
    w_in = torch.randn(64, 256, generator=g, dtype=torch.float64)
    w_out = torch.randn(256, 64, generator=g, dtype=torch.float64)
    partials = [distributed.tp_mlp_partial(x, distributed.column_shard(w_in, r, 4),
                                        distributed.row_shard(w_out, r, 4)) for r in range(4)]
    assert distributed.column_shard(w_in, 1, 4).shape == (64, 64)
    assert distributed.row_shard(w_out, 1, 4).shape == (64, 64)
    torch.testing.assert_close(sum(partials), distributed.mlp_reference(x, w_in, w_out))
    with pytest.raises(ValueError, match="do not divide"):
        distributed.column_shard(w_in, 0, 3)
    with pytest.raises(ValueError, match="do not divide"):
        distributed.row_shard(w_out, 0, 3)


def test_sharded_layer_on_two_gloo_processes_equals_the_unsharded_one():
    pytest.importorskip("torch")
    df = distributed.run_tp_lab(2, backend="gloo", d_model=64, d_ff=256, batch=4,
                             message_bytes=[4096, 65536], min_run_time=0.01)
    steps = df[df.kind == "step"].set_index("n_devices")
    assert list(steps.index) == [1, 2]
    assert steps.loc[2, "max_abs_error"] < 1e-5  # fp32: only the summation order differs
    assert (df.seconds > 0).all()
    assert sorted(df[df.kind == "allreduce"].message_bytes) == [4096, 65536]


def test_lab_runner_rejects_bad_setups():
    with pytest.raises(ValueError, match="backend"):
        distributed.run_tp_lab(2, backend="mpi")
    with pytest.raises(ValueError, match="world_size"):
        distributed.run_tp_lab(1, backend="gloo")
    with pytest.raises(ValueError, match="d_ff"):
        distributed.run_tp_lab(2, backend="gloo", d_model=64, d_ff=255)


def test_the_same_measurement_runs_under_torchrun(tmp_path):
    pytest.importorskip("torch")
    import subprocess
    import sys

    import pandas as pd

    csv = tmp_path / "tp.csv"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           "2", "-m", "gpuinfer.distributed", "--backend", "gloo", "--d-model", "64", "--d-ff",
           "256", "--batch", "4", "--message-bytes", "4096", "--min-run-time", "0.01",
           "--csv", str(csv)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    df = pd.read_csv(csv)
    assert df[df.kind == "step"].max_abs_error.max() < 1e-5
    assert list(df[df.kind == "allreduce"].message_bytes) == [4096]


def test_module_entry_point_asks_for_torchrun(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(SystemExit):
        distributed.main([])
