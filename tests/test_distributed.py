"""The sharded layer on torch.distributed: shards that sum to the unsharded layer, the
lab runner on 2 gloo processes (spawned and under torchrun), and bad setups."""


import pytest

from gpuinfer.measure import distributed


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
                             message_bytes=[4096, 65536], min_run_s=0.01)
    steps = df[df.kind == "step"].set_index("n_devices")
    assert list(steps.index) == [1, 2]
    assert steps.loc[2, "max_abs_error"] < 1e-5  # fp32: only the summation order differs
    assert (df.seconds > 0).all()
    assert sorted(df[df.kind == "allreduce"].message_bytes) == [4096, 65536]


def _lockstep_rank(rank, port, results):
    """One rank of the lockstep test: the leader's timer makes exactly 40 calls."""
    import datetime
    import os

    import torch
    import torch.distributed as dist

    from gpuinfer.measure import bench

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    try:
        buf = torch.zeros(8, dtype=torch.float16)   # the payload: fp16, as on a GPU
        calls = [0]

        def call():
            dist.all_reduce(buf)
            calls[0] += 1

        def forty_calls(fn, device=None, min_run_s=None):
            for _ in range(40):
                fn()
            return "timed"

        bench.time_fn = forty_calls
        got = distributed._lockstep_s(call, None, rank == 0, torch.device("cpu"), 0.0)
        results.put((rank, got, calls[0], bool(torch.isfinite(buf).all()),
                     float(buf.abs().max())))
    finally:
        dist.destroy_process_group()


def test_lockstep_followers_stop_after_forty_calls_and_the_payload_stays_finite():
    # 40 timed calls on the leader: the followers go in chunks of 32, so the leader pads
    # to 64 calls (40 + 24). The stop flag is its own int32 tensor reduced with MAX; the
    # fp16 payload stays zero (a flag summed inside it doubled every call: 2**40 is inf).
    pytest.importorskip("torch")
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = distributed._free_port()
    procs = [ctx.Process(target=_lockstep_rank, args=(r, port, results)) for r in range(2)]
    for p in procs:
        p.start()
    got = sorted(results.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    assert got == [(0, "timed", 64, True, 0.0), (1, None, 64, True, 0.0)]


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
           "2", "-m", "gpuinfer.measure.distributed", "--backend", "gloo", "--d-model", "64", "--d-ff",
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


# --- the runner: large results, NCCL's device, impossible shards ---------------------------

def test_results_larger_than_a_pipe_do_not_deadlock(tmp_path):
    # Rank 0 puts ~1.3 MB of rows; a pipe holds ~64 KiB, so waiting for the ranks to end
    # before reading (mp.spawn(join=True), then get) waited forever. Run in a subprocess
    # so that a regression fails on its timeout instead of hanging the suite.
    pytest.importorskip("torch")
    import subprocess
    import sys

    (tmp_path / "bigrows.py").write_text(
        "def worker(rank, results, n):\n"
        "    if rank == 0:\n"
        "        results.put([{'i': i, 'pad': 'x' * 120} for i in range(n)])\n")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import bigrows\n"
            "import torch.multiprocessing as mp\n"
            "from gpuinfer.measure import distributed\n"
            "q = mp.get_context('spawn').SimpleQueue()\n"
            "rows = distributed._spawn_and_collect(bigrows.worker, 2, (q, 10_000), q)\n"
            "print(len(rows), rows[-1]['i'])\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["10000", "9999"]


def test_nccl_is_told_its_rank_s_gpu(monkeypatch):
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    calls = []
    monkeypatch.setattr(dist, "init_process_group", lambda *a, **kw: calls.append((a, kw)))
    distributed._join_group("nccl", 1, 2, torch.device("cuda", 1), 30)
    distributed._join_group("gloo", 1, 2, torch.device("cpu"), 30)
    (nccl_args, nccl_kw), (gloo_args, gloo_kw) = calls
    assert nccl_args == ("nccl",) and nccl_kw["device_id"] == torch.device("cuda", 1)
    assert nccl_kw["rank"] == 1 and nccl_kw["world_size"] == 2
    assert gloo_args == ("gloo",) and gloo_kw["rank"] == 1 and gloo_kw["world_size"] == 2
    assert "device_id" not in gloo_kw and gloo_kw["timeout"].total_seconds() == 30


def test_impossible_shards_are_refused():
    torch = pytest.importorskip("torch")
    w = torch.zeros(8, 16)
    with pytest.raises(ValueError, match="rank"):
        distributed.column_shard(w, 4, 4)       # ranks are 0..3: was an empty tensor
    with pytest.raises(ValueError, match="world_size"):
        distributed.row_shard(w, 0, 0)
    with pytest.raises(TypeError, match="2-D"):
        distributed.column_shard([1, 2, 3], 0, 1)
    with pytest.raises(ValueError, match="message_bytes"):
        distributed.run_tp_lab(2, backend="gloo", message_bytes=[4096, -1])
