import math

import pandas as pd
import pytest

pytest.importorskip("torch")

from gpuinfer.measure import bench, decoding, reference
from gpuinfer import hardware
from gpuinfer.predict import llm
from gpuinfer.measure import environment
from gpuinfer.measure import detection
from gpuinfer.hardware import measured_rates
from gpuinfer.predict import architectures  # noqa: E402


def _env(device_type="cuda", entry="H200"):
    return {"device": "NVIDIA H200" if device_type == "cuda" else "x86_64",
            "catalogue_entry": entry, "device_type": device_type, "torch": "2.13.0",
            "cuda": "12.8" if device_type == "cuda" else "", "date": "2026-12-02"}


def test_tidy_weight_reads_by_hand():
    rows = [{"dtype": "fp16", "bytes": 2e9, "seconds": 0.5e-3, "achieved_gb_per_s": 4000.0}]
    df = reference.tidy(rows, "weight_read", _env())
    row = df.iloc[0]
    assert row["value"] == pytest.approx(4e12)            # 4,000 GB/s in B/s
    assert row["ceiling"] == hardware.get("H200").bandwidth  # 4.8e12 B/s
    assert row["fraction_of_ceiling"] == pytest.approx(4000 / 4800)
    assert row["unit"] == "B/s" and row["device_type"] == "cuda"
    assert list(df.columns) == reference.COLUMNS


def test_tidy_matmul_and_decode_rows_from_bench():
    mm = bench.matmul_tflops([(4, 64, 64)], device="cpu", min_run_s=0.01, progress=False)
    env = environment.environment("cpu")
    t = reference.tidy(mm, "matmul", env).iloc[0]
    assert t["value"] == pytest.approx(mm.iloc[0]["achieved_tflops"] * 1e12)
    assert t["ceiling"] == pytest.approx(mm.iloc[0]["roofline_tflops"] * 1e12)
    spec = decoding.lab_model("mistral-7b", "cpu", width_divisor=8, weight_budget_bytes=1e6)
    row = decoding.DecodeStack(spec, device="cpu").measure(2, 8, min_run_s=0.01)
    d = reference.tidy([row], "decode", env).iloc[0]
    assert d["value"] == pytest.approx(2 / row["seconds"])
    assert d["ceiling"] == pytest.approx(llm.decode_ceiling(spec, detection.cpu(), 2, 8, "fp32"))
    assert d["intensity"] == pytest.approx(row["step_flops"] / row["step_bytes"])
    # llm's model also counts the activations: the same intensity within 1%.
    assert d["intensity"] == pytest.approx(llm.decode_intensity(spec, 2, 8, "fp32"), rel=0.01)
    with pytest.raises(ValueError, match="experiment"):
        reference.tidy([row], "prefill", env)
    with pytest.raises(ValueError, match="tokens_per_s"):
        reference.tidy([{k: v for k, v in row.items() if k != "tokens_per_s"}], "decode", env)
    with pytest.raises(ValueError, match="env lacks"):
        reference.tidy([row], "decode", {"device": "x"})


def test_tidy_reads_of_a_gpu_the_catalogue_does_not_know():
    # Rows carry the bandwidth they were compared with (NaN: no datasheet entry); tidy
    # takes it from there instead of looking the name up (a KeyError before).
    rows = [{"dtype": "fp16", "bytes": 1e9, "seconds": 1e-3, "achieved_gb_per_s": 1000.0,
             "datasheet_gb_per_s": math.nan}]
    env = {**_env(), "device": "NVIDIA GeForce RTX 4090",
           "catalogue_entry": "NVIDIA GeForce RTX 4090"}
    row = reference.tidy(rows, "weight_read", env).iloc[0]
    assert row["value"] == pytest.approx(1e12) and math.isnan(row["ceiling"])
    # Old rows without the column still read the catalogue: an H200's 4.8 TB/s.
    old = reference.tidy([{k: v for k, v in rows[0].items() if k != "datasheet_gb_per_s"}],
                         "weight_read", _env())
    assert old.iloc[0]["ceiling"] == 4.8e12


def test_save_load_round_trip_and_listing(tmp_path):
    rows = [{"dtype": "fp16", "bytes": 2e9, "seconds": 0.5e-3, "achieved_gb_per_s": 4000.0}]
    gpu = reference.tidy(rows, "weight_read", _env())
    cpu = reference.tidy([{**rows[0], "dtype": "fp32", "achieved_gb_per_s": 20.0}],
                         "weight_read", _env("cpu", "CPU"))
    reference.save(gpu, tmp_path / reference.default_filename(_env()))
    reference.save(cpu, tmp_path / reference.default_filename(_env("cpu", "CPU")))
    assert [p.name for p in reference.files(tmp_path)] == ["cpu-x86-64.csv", "h200.csv"]
    back = reference.load(tmp_path / "h200.csv")
    assert back.iloc[0]["value"] == pytest.approx(4e12)
    table = reference.available(tmp_path)
    assert list(table["weight_read"]) == [1, 1]
    # A CPU run is never presented as a GPU result.
    assert "not a GPU" in table.set_index("file").loc["cpu-x86-64.csv", "label"]
    assert "not a GPU" not in table.set_index("file").loc["h200.csv", "label"]
    only_gpu = reference.runs("weight_read", device_type="cuda", directory=tmp_path)
    assert set(only_gpu["catalogue_entry"]) == {"H200"}
    assert reference.runs("matmul", directory=tmp_path).empty


def test_load_names_what_is_wrong(tmp_path):
    bad = tmp_path / "bad.csv"
    pd.DataFrame({"device": ["x"], "value": [1.0]}).to_csv(bad, index=False)
    with pytest.raises(ValueError, match="missing column"):
        reference.load(bad)
    rows = [{"dtype": "fp16", "bytes": 2e9, "seconds": 0.5e-3, "achieved_gb_per_s": 4000.0}]
    df = reference.tidy(rows, "weight_read", _env())
    df["experiment"] = "warp_speed"
    with pytest.raises(ValueError, match="warp_speed"):
        reference.save(df, tmp_path / "x.csv")
    with pytest.raises(FileNotFoundError):
        reference.load(tmp_path / "none.csv")
    with pytest.raises(KeyError, match="device_type"):
        reference.runs(device_type="tpu", directory=tmp_path)
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(ValueError, match="empty.csv"):
        reference.load(empty)
    with pytest.raises(TypeError, match="path"):
        reference.load(None)


def test_shipped_reference_runs_load():
    table = reference.available()
    assert len(table) >= 1
    for name in table["file"]:
        df = reference.load(reference.DIRECTORY / name)
        assert set(df["experiment"]) <= set(reference.UNITS)
        assert (df["value"] > 0).all()


def test_published_anchors_beside_their_ceilings():
    pub = reference.published()
    h100 = pub[(pub["experiment"] == "matmul") & (pub["catalogue_entry"] == "H100 SXM")].iloc[0]
    # Bekman's MAMF table (ml-engineering, compute/accelerator/README.md at the commit
    # hardware.measured_rates cites): H100 SXM 794.5 of 989 TFLOP/s, 80.3%; A100 SXM 271.2 of 312.
    assert h100["value"] == 794.5e12
    assert h100["fraction_of_ceiling"] == pytest.approx(794.5 / 989)
    a100 = pub[(pub["experiment"] == "matmul") & (pub["catalogue_entry"] == "A100 80GB")].iloc[0]
    assert a100["value"] == 271.2e12
    # One figure, one place: the published table and hardware.achievable agree.
    for _, row in pub[pub["experiment"] == "matmul"].iterrows():
        assert measured_rates.achievable(row["catalogue_entry"])["matmul_bf16_flops"] == row["value"]
    fast = pub[(pub["experiment"] == "decode") & (pub["value"] == 104.9)].iloc[0]
    # Llama-2-7B, 6.74e9 parameters x 2 bytes at 2,039 GB/s: ~151 tokens/s; 104.9 is ~69%.
    ceiling = 2039e9 / (architectures.get("llama-2-7b").n_params * 2)
    assert fast["ceiling"] == pytest.approx(ceiling)
    assert fast["fraction_of_ceiling"] == pytest.approx(0.69, abs=0.01)
    with pytest.raises(ValueError, match="experiment"):
        reference.published("prefill")


def test_speedup_against_the_dense_row():
    env = _env()
    base = {"dtype": "fp16", "model": "m", "batch": 1, "context": 0, "step_flops": 2e9,
            "cuda_graph": True, "ceiling_tokens_per_s": 100.0}
    rows = [{**base, "weight_format": "fp16", "kernel": "dense", "step_bytes": 2e9,
             "seconds": 1e-3, "tokens_per_s": 1e3},
            {**base, "weight_format": "int8", "kernel": "int8-dequant", "step_bytes": 1e9,
             "seconds": 2e-3, "tokens_per_s": 500.0}]
    sp = reference.speedup(reference.tidy(rows, "quantised", env)).set_index("kernel")
    assert sp.loc["int8-dequant", "speedup"] == pytest.approx(0.5)
    assert sp.loc["int8-dequant", "bytes_ratio"] == pytest.approx(2.0)
    assert sp.loc["dense", "speedup"] == 1.0
    assert not math.isnan(sp.loc["dense", "bytes_ratio"])


def test_results_row_for_the_room_sheet():
    import csv

    line = reference.results_row(3, "batch-1 decode step", 123.456, "tokens/s", 0.51234,
                                 pair="A1", device="cpu")
    row = next(csv.reader([line]))
    assert len(row) == len(reference.SHEET_COLUMNS)
    assert row[0] == "A1" and row[1] == "3" and row[7] == "123.5" and row[9] == "0.512"
    assert next(csv.reader([reference.results_row(9, "x", 2, "x", device="cpu")]))[9] == ""
    with pytest.raises(ValueError, match="fraction"):
        reference.results_row(1, "x", 1.0, "GB/s", -0.5)
    with pytest.raises(TypeError, match="what"):
        reference.results_row(1, None, 1.0, "GB/s")


def test_reference_rows_cover_labs_1_to_4():
    rows = reference.reference_rows()
    assert list(rows.columns) == reference.SHEET_COLUMNS
    assert set(rows.lab) == {1, 2, 3, 4}
    assert rows.fraction_of_ceiling.between(0, 1.5).all()


def test_every_published_figure_cites_a_key_of_the_bibliography():
    import pathlib
    import re

    bib = (pathlib.Path(__file__).resolve().parents[1] / "references.bib").read_text()
    keys = set(re.findall(r"^@\w+\{([^,]+),", bib, flags=re.M))
    missing = {p["source"] for p in reference.PUBLISHED} - keys
    assert not missing, f"PUBLISHED cites keys references.bib lacks: {missing}"


def test_engine_measurements_are_the_achievable_models_table():
    from gpuinfer.predict import calibration
    from gpuinfer.measure import reference

    df = reference.engine_measurements()
    assert len(df) == len(calibration.measurements())
    # gpt-fast's rows are the same figures as GPT_FAST_TOKENS_PER_S.
    gf = df[df["engine"] == "gpt-fast"].set_index("weight_format")["tokens_per_s"]
    assert gf["bf16"] == reference.GPT_FAST_TOKENS_PER_S["bf16"]
    assert gf["int8"] == reference.GPT_FAST_TOKENS_PER_S["int8"]
    assert gf["int4-g32-zp"] == reference.GPT_FAST_TOKENS_PER_S["int4"]
    assert len(reference.engine_measurements("train")) == 6


def test_tidy_and_save_refuse_an_unknown_device_and_bad_seconds(tmp_path):
    rows = [{"dtype": "fp16", "bytes": 2e9, "seconds": 0.5e-3, "achieved_gb_per_s": 4000.0}]
    # A catalogue entry that names no device (and is not the GPU's own torch name, as
    # bench.environment records an uncatalogued GPU) has no ceiling: refused.
    with pytest.raises(ValueError, match="catalogue_entry.*'Warp Drive 9000'"):
        reference.tidy(rows, "weight_read", _env(entry="Warp Drive 9000"))
    # A negative or NaN time is a broken measurement, in tidy and in save.
    for bad in (-1e-3, math.nan):
        with pytest.raises(ValueError, match="seconds"):
            reference.tidy([{**rows[0], "seconds": bad}], "weight_read", _env())
    df = reference.tidy(rows, "weight_read", _env())
    for column, bad in (("seconds", -0.5e-3), ("seconds", math.nan),
                        ("catalogue_entry", "Warp Drive 9000")):
        with pytest.raises(ValueError, match=column):
            reference.save(df.assign(**{column: bad}), tmp_path / "x.csv")
    assert not (tmp_path / "x.csv").exists()


# --- gpt-fast's fraction of its ceiling ------------------------------------------------------------

# Llama-2-7B (Touvron et al. 2023, config.json): 32 layers, d_model 4096, MLP 11008,
# vocabulary 32000. Weights a decode step's matmuls read, by hand:
#   per layer 4 x 4096^2 (q, k, v, o) + 3 x 4096 x 11008 (gate, up, down) = 202,375,168;
#   32 layers: 6,476,005,376; LM head 32,000 x 4,096 = 131,072,000: 6,607,077,376 weights
#   (the embedding table is gathered a row at a time).
LLAMA2_7B_MATMUL_WEIGHTS = 32 * (4 * 4096**2 + 3 * 4096 * 11008) + 32000 * 4096


@pytest.mark.parametrize("fmt, bytes_per_weight, tokens_per_s", [
    ("bf16", 2, 104.9), ("int8", 1, 155.6), ("int4", 0.5625, 196.8)])
def test_gpt_fast_fraction_is_its_tokens_over_the_weight_read_ceiling(fmt, bytes_per_weight,
                                                                      tokens_per_s):
    # gpt-fast README (gptfast2023): Llama-2-7B, batch 1, A100-80GB (2,039 GB/s).
    # bf16: 2.039e12 / 13,214,154,752 B = 154.30 tokens/s; 104.9 / 154.30 = 0.680.
    # int8: 2.039e12 / 6,607,077,376 B = 308.61 tokens/s; 155.6 / 308.61 = 0.504.
    # int4 (0.5625 B a weight): 2.039e12 / 3,716,481,024 B = 548.64; 196.8 / 548.64 = 0.359.
    # The package also counts the activations and one embedding row (under 0.1% at bf16,
    # about 0.2% at int4, where the weights are fewest bytes).
    assert LLAMA2_7B_MATMUL_WEIGHTS == 6_607_077_376
    ceiling = 2039e9 / (LLAMA2_7B_MATMUL_WEIGHTS * bytes_per_weight)
    assert reference.gpt_fast_fraction(fmt) == pytest.approx(tokens_per_s / ceiling, rel=3e-3)


def test_gpt_fast_fraction_each_format_has_its_own():
    f = reference.gpt_fast_fraction
    assert f("fp16") == f("bf16")              # the same bytes a weight
    assert f("int4") < f("int8") < f("bf16")   # unpacking costs time: 0.36 < 0.50 < 0.68
    assert f() == f("bf16")


@pytest.mark.parametrize("bad, error", [("int3", ValueError), (8, TypeError),
                                        (None, TypeError)])
def test_gpt_fast_fraction_rejects_unknown_formats(bad, error):
    with pytest.raises(error, match="weight_format"):
        reference.gpt_fast_fraction(bad)
