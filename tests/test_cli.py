import pytest

pytest.importorskip("torch")

from gpuinfer import __main__ as cli  # noqa: E402
from gpuinfer import reference  # noqa: E402


def test_bench_tiny_writes_a_run_that_reference_loads(tmp_path, capsys):
    out = tmp_path / "run.csv"
    assert cli.main(["bench", "--sizes", "tiny", "--out", str(out), "--device", "cpu",
                     "--threads", "1", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "catalogue entry: CPU" in printed and "not of this machine" in printed
    assert "decode step, batch 1" in printed and f"written to {out}" in printed
    df = reference.load(out)
    assert set(df["experiment"]) == {"weight_read", "matmul", "decode", "quantised"}
    assert set(df["device_type"]) == {"cpu"} and set(df["dtype"]) == {"fp32"}
    assert set(df["cpu_threads"]) == {1} and "1 thread;" in reference.label(df)
    assert (df["value"] > 0).all() and (df["ceiling"] > 0).all()
    assert (df["fraction_of_ceiling"] - df["value"] / df["ceiling"]).abs().max() < 1e-12
    decode = df[df["experiment"] == "decode"]
    assert sorted(decode["batch"]) == [1, 2]
    quant = df[df["experiment"] == "quantised"]
    assert "dense" in set(quant["kernel"]) and "int8-dequant" in set(quant["kernel"])


def test_bench_plan_sizes():
    import torch

    cpu = torch.device("cpu")
    quick, full = cli.bench_plan(cpu, "quick"), cli.bench_plan(cpu, "full")
    assert len(quick["matmul_shapes"]) < len(full["matmul_shapes"])
    assert len(quick["batches"]) < len(full["batches"])
    assert quick["flush_cache"] and quick["model"].d_model == full["model"].d_model
    with pytest.raises(ValueError, match="sizes"):
        cli.bench_plan(cpu, "huge")


def test_bench_rejects_unknown_sizes():
    with pytest.raises(SystemExit):
        cli.main(["bench", "--sizes", "huge"])
