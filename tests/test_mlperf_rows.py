"""MLPerf Inference's closed results as a pool of their own (gpuinfer.predict.validation): every row
cited at a pinned commit with its lengths' basis, per GPU as the system's result divided by
its GPUs, mapped (Server as the offline maximum under its latency bound), below its ceiling,
and kept out of every statistic over the engines' rows."""

import re

import numpy as np
import pytest

from gpuinfer.predict import validation as V


@pytest.fixture(scope="module")
def rows():
    return V.dataset("mlperf")


@pytest.fixture(scope="module")
def mt():
    return V.mlperf_table()


def test_every_row_is_cited_at_a_pinned_commit_with_its_lengths_basis(rows):
    assert len(rows) == 18 and (rows["pool"] == "mlperf").all()
    pinned = re.compile(r"^https://github\.com/mlcommons/inference_results_v5\.1/blob/"
                        r"[0-9a-f]{40}/closed/[^/]+/results/.+/performance/run_1/"
                        r"mlperf_log_summary\.txt$")
    assert rows["url"].map(lambda u: bool(pinned.match(u))).all()
    assert rows["lengths_basis"].str.contains("output: ").all()
    assert rows["lengths_basis"].str.contains("input: assumed").all()
    assert set(rows["scenario"]) == {"offline", "server"}
    assert set(rows["kv_dtype_basis"]) <= {"stated", "inferred"}


def test_per_gpu_is_the_system_result_over_its_gpus(rows):
    # the note names the system's GPUs: "<n> GPUs"; per GPU = system / n
    n = rows["note"].str.extract(r", (\d+) GPUs,")[0].astype(int)
    np.testing.assert_allclose(rows["tokens_per_s_per_gpu"], rows["tokens_per_s"] / n, atol=0.01)
    b200 = rows.set_index("id").loc["mlperf51-nvidia-llama2-70b-99-b200-offline"]
    # NVIDIA's B200 x8 llama2-70b-99 Offline log: "Tokens per second: 101527"; 101527 / 8
    assert b200["tokens_per_s_per_gpu"] == pytest.approx(12690.875, abs=0.01)


def test_the_pool_stays_out_of_the_engines_rows():
    assert "mlperf" not in set(V.dataset()["pool"])
    with pytest.raises(ValueError, match="pool"):
        V.dataset("mlcommons")


def test_server_is_mapped_as_the_offline_maximum(rows, mt):
    assert (rows["kind"] == "throughput").all()
    t = mt.set_index("id")
    for system in ("nvidia-llama2-70b-99-b200", "amd-llama2-70b-99-mi300x"):
        off, srv = t.loc[f"mlperf51-{system}-offline"], t.loc[f"mlperf51-{system}-server"]
        assert srv["achievable"] == pytest.approx(off["achievable"], rel=1e-12)
        assert srv["measured"] < off["measured"]  # a latency bound costs throughput
    # the TPOT bound of each run's log: 200000000 ns for llama2-70b, 100000000 for 3.1-8b
    assert np.isnan(t.loc["mlperf51-nvidia-llama2-70b-99-b200-offline", "tpot_bound_s"])
    assert t.loc["mlperf51-nvidia-llama2-70b-99-b200-server", "tpot_bound_s"] == 0.2
    assert t.loc["mlperf51-nvidia-llama3.1-8b-b200-server", "tpot_bound_s"] == 0.1
    srv = mt[mt["scenario"] == "server"]
    assert (srv["within_bound"] == ~(srv["step_s"] > srv["tpot_bound_s"])).all()


def test_a_gpu_outside_the_catalogue_is_not_modelled_with_its_reason(mt):
    out = mt[~mt["modelled"]]
    assert set(out["accelerator"]) == {"MI325X"}
    assert out["why"].str.contains("MI325X").all() and out["achievable"].isna().all()


def test_no_mlperf_row_beats_its_ceiling(rows):
    assert V.ceiling_violations(rows=rows, dec=V.decompose(rows)).empty


def test_errors_by_scenario_and_gpu_are_the_rows_errors(mt):
    e = V.errors_by(mt, ["scenario", "accelerator"])
    assert e["n"].sum() == mt["modelled"].sum() == 16
    srv_h100 = mt[(mt["scenario"] == "server") & (mt["accelerator"] == "H100 SXM")]
    assert e.loc[("server", "H100 SXM"), "median_pct"] == pytest.approx(
        abs(100 * (srv_h100["achievable"].iloc[0] / srv_h100["measured"].iloc[0] - 1)))


def test_the_source_is_in_references_bib(rows):
    bib = open("references.bib", encoding="utf-8").read()
    assert set(rows["source"]) == {"mlperf2025inferencev51"}
    assert "{mlperf2025inferencev51," in bib and "{mlperf2025llama2ref," in bib
