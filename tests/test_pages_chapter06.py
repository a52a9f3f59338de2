"""course.pages.chapter06_cpu_vs_gpu: what chapter 6's figures and prose are computed from,
against hand arithmetic, the catalogue and the overlap model's terms (a fixed dispatch
time stands in for the one the page measures)."""

import dataclasses
import types

import matplotlib
import numpy as np
import pandas as pd
import pytest
import torch

from gpuinfer import dtypes, hardware
from gpuinfer.hardware import device_links
from gpuinfer.predict import achievable, batching, cost, roofline, tabular
from gpuinfer.course.exercises import chapter06_cpu_vs_gpu as cost_exercises
from gpuinfer.course.pages import chapter06_cpu_vs_gpu as page

matplotlib.use("Agg")
HIDDEN = tabular.DEFAULT_HIDDEN       # (1024, 1024, 1024)
DISPATCH = 5e-6                       # seconds an op: a stand-in for the page's measurement
EFF = dataclasses.replace(achievable.FITTED, matmul_scale=1.0)   # the page's bare GEMM


def test_model_values_count_the_mlp_by_hand():
    # 64 -> 1024 -> 1024 -> 1024 -> 1 with biases: 64x1024 + 1024 + 2 x (1024^2 + 1024)
    # + 1024 + 1 = 66,560 + 2,099,200 + 1,025 = 2,166,785 parameters; 3 linear + 3 ReLU
    # + the last linear = 7 kernels; 2 FLOPs a weight a prediction.
    v = page.model_values(HIDDEN)
    assert v["n_params_m"] == pytest.approx(2.166785)
    assert v["weights_fp16_mb"] == pytest.approx(2.166785 * 2)
    assert v["n_kernels"] == 2 * len(HIDDEN) + 1 == 7
    weights = 64 * 1024 + 2 * 1024 * 1024 + 1024
    assert v["mflop_per_pred"] == pytest.approx(2 * weights / 1e6, rel=0.01)


def _timing(median_s, iqr_s):
    return types.SimpleNamespace(median_s=median_s, iqr_s=iqr_s)


def test_batch1_reading_says_only_what_the_spreads_allow():
    measured = pd.DataFrame({"us per pass": [100.0], "spread": [0.01]}, index=[1])
    runs = {"eager PyTorch": np.array([150e-6, 160e-6])}
    # 7 ops of 10 us in a 100 us pass: 70%, clear of one half by more than 2% spreads.
    v = page.batch1_reading(measured, _timing(10e-6, 0.1e-6), 7, True, runs, 100e-6, 256)
    assert v["here_overhead_pct"] == pytest.approx(70.0)
    assert v["here_b1_reading"].startswith("on this CPU dispatch is most")
    assert v["eager_over_best_b1"] == pytest.approx(1.5) and v["cpu_batch"] == 256.0
    v = page.batch1_reading(measured, _timing(1e-6, 0.01e-6), 7, True, runs, 100e-6, 256)
    assert v["here_b1_reading"].startswith("on this CPU the batch-1 pass is mostly the work")
    v = page.batch1_reading(measured, _timing(10e-6, 0.1e-6), 7, False, runs, 100e-6, 256)
    assert v["here_b1_reading"].startswith("on a GPU")
    # A noisy run still orders a large effect: 7 ops of 0.23 us in 100 us are 1.6%, a
    # 0.032 of one half, below 1 / (1 + 0.6 + 0.01 + 0.05) = 0.60 despite a 60% IQR.
    v = page.batch1_reading(measured, _timing(0.23e-6, 0.138e-6), 7, True, runs, 100e-6, 256)
    assert v["here_b1_reading"].startswith("on this CPU the batch-1 pass is mostly the work")
    # 7 ops of 7.5 us in 100 us: 52.5%, 1.05 times one half, inside 1 + 0.01 + 0.01 + 0.05
    # = 1.07: the sentence says the run was too noisy, and claims no tie.
    v = page.batch1_reading(measured, _timing(7.5e-6, 0.075e-6), 7, True, runs, 100e-6, 256)
    assert v["here_b1_reading"].startswith("this run's timings were too noisy (their "
                                           "spreads add up to 2% of the medians)")
    assert "equal" not in v["here_b1_reading"]


def test_dispatch_on_the_cpu_is_the_measured_overhead():
    assert page.dispatch_s(torch.device("cpu"), 3e-6) == 3e-6


def test_rate_values_and_the_bare_gemm():
    assert EFF.matmul_scale == 1.0 and EFF.bandwidth == achievable.FITTED.bandwidth
    v = page.rate_values(EFF, DISPATCH)
    # gpt-fast's 1,700 GB/s over the A100 80GB's 2,039 GB/s: 83.4%. Its bf16 Llama-2-7B
    # decode (104.9 tokens/s x about 13.2 GB a step = 1,390 GB/s, 68% of the datasheet)
    # stays below that fraction.
    assert v["bw_fraction_pct"] == pytest.approx(100 * 1700 / 2039, rel=1e-3)
    assert v["gf_mbu_pct"] < v["bw_fraction_pct"]
    assert v["t4_peak_tflops"] == 65.0 and v["dispatch_us"] == pytest.approx(5.0)
    assert v["min_kernel_us"] == pytest.approx(2.9)


def test_the_overlap_model_is_the_achievable_models_rows():
    # Each kernel of the MLP on the derated T4 is its row of the achievable model, and the
    # eager overlap model is achievable.overheads without CUDA graphs or a step cost.
    ops = tabular.mlp_ops(4096, hidden=HIDDEN, dtype="fp16")
    assert np.allclose(roofline.evaluate(ops, achievable.derated_accelerator("T4", EFF))["seconds"],
                       achievable.table_s(ops, "T4", EFF))
    dev = np.maximum(achievable.table_s(tabular.mlp_ops(1, hidden=HIDDEN, dtype="fp16"),
                                        "T4", EFF), page.MIN_KERNEL_S).sum()
    eager = page.dataclasses.replace(EFF, step_s=0.0, kernel_gap_s=0.0, cuda_graphs=False,
                                     launch_s=DISPATCH, kernels_per_layer=7)
    assert np.isclose(achievable.overheads(dev, 1, eager), tabular.predicted_latency_s(
        1, achievable.derated_accelerator("T4", EFF), DISPATCH, hidden=HIDDEN, dtype="fp16",
        min_kernel_s=page.MIN_KERNEL_S))


def test_a_throttled_t4_loses_its_matmul_peak_not_its_batch_1_time():
    note = hardware.get("T4").note
    assert "1590 MHz" in note and "900 MHz" in note
    cool, hot = page.throttled_t4(EFF)
    assert hot.peak_flops("fp16") == pytest.approx(cool.peak_flops("fp16") * 900 / 1590)
    v = page.throttle_values(HIDDEN, EFF, DISPATCH)
    cool_b1 = tabular.predicted_latency_s(1, cool, DISPATCH, hidden=HIDDEN, dtype="fp16",
                                          host_link=device_links.host_link("T4"),
                                          min_kernel_s=page.MIN_KERNEL_S)
    assert v["t4_b1_hot_us"] == pytest.approx(cool_b1 * 1e6)     # batch 1: no matmul peak
    assert v["t4_tput_hot_m"] < v["t4_tput_cool_m"]


def _batch1_table():
    """The page's batch-1 table (us), rebuilt from the same package calls."""
    fp16 = dtypes.bytes_per_element("fp16")
    ops = tabular.mlp_ops(1, hidden=HIDDEN, dtype="fp16")
    rows = {}
    for name in page.BATCH1_GPUS:
        acc, link = achievable.derated_accelerator(name, EFF), device_links.host_link(name)
        roof = roofline.evaluate(ops, acc)["seconds"]
        rows[name] = {"copies": (tabular.host_copy_s(64 * fp16, link)
                                 + tabular.host_copy_s(1 * fp16, link)),
                      "host: 7 launches": 7 * DISPATCH,
                      "GPU: 1st launch + kernels": DISPATCH + np.maximum(
                          roof, page.MIN_KERNEL_S).sum(),
                      "GPU: roofline work": roof.sum(),
                      "total": tabular.predicted_latency_s(
                          1, acc, DISPATCH, hidden=HIDDEN, dtype="fp16", host_link=link,
                          min_kernel_s=page.MIN_KERNEL_S)}
    table = pd.DataFrame(rows).T * 1e6
    table["fixed share"] = 1 - table["GPU: roofline work"] / table["total"]
    return table


def test_batch1_values_and_the_overlap_model_term_by_term():
    table = _batch1_table()
    # The model: copies plus the slower of the host's launches and the GPU's work.
    paced = table[["host: 7 launches", "GPU: 1st launch + kernels"]].max(axis=1)
    assert np.allclose(table["total"], table["copies"] + paced)
    assert device_links.host_link("T4").name == "PCIe Gen3 x16"
    v = page.batch1_values(table, 200e-6, HIDDEN, DISPATCH)
    assert v["t4_over_here_b1"] == pytest.approx(200 / table.loc["T4", "total"])
    # fp16 weights, 4,333,570 bytes = 4.13 MiB: more than the T4's 4 MiB L2, less than
    # the L4's 48 MiB and the H200's 50 MiB.
    assert v["weights_fp16_mib"] == pytest.approx(2_166_785 * 2 / 2**20)
    assert v["t4_l2_mib"] < v["weights_fp16_mib"] < min(v["l4_l2_mib"], v["h200_l2_mib"])
    # On the datasheet peaks the estimate is no slower than on the derated ones.
    assert v["t4_b1_ceil_us"] <= v["t4_b1_us"] * (1 + 1e-9)


def test_the_datasheet_throughput_and_the_latency_figure():
    batches = np.array([1, 256, 65536])
    # The page's estimate loop, over the GPUs its figure draws.
    predicted = {name: tabular.predicted_latency_s(
        batches, achievable.derated_accelerator(name, EFF), DISPATCH, hidden=HIDDEN,
        dtype="fp16", host_link=device_links.host_link(name), min_kernel_s=page.MIN_KERNEL_S)
        for name in page.CURVE_GPUS}
    assert set(predicted) == {"T4", "H200"}
    t4 = predicted["T4"]
    assert (np.diff(t4) >= 0).all()
    # The datasheet's peaks are higher than the derated ones: more predictions/s.
    assert page.datasheet_throughput(HIDDEN, 65536, DISPATCH) > 65536 / t4[-1]
    measured = pd.DataFrame({"us per pass": [10.0, 20.0], "predictions/s": [1e5, 2e5]},
                            index=[1, 4])
    fig = page.latency_figure(measured, "torch.float32", batches, predicted)
    assert [ax.get_xscale() for ax in fig.axes] == ["log", "log"]
    matplotlib.pyplot.close(fig)


def test_large_batch_eager_kernels_are_memory_bound_fused_ones_not():
    v = page.large_batch_values(HIDDEN, 65536, 6e6, 60e6, 1e5, 8e6)
    assert v["t4_over_here"] == pytest.approx(60.0) and v["h200_over_t4_big"] == 10.0
    per_kernel = roofline.evaluate(tabular.mlp_ops(65536, hidden=HIDDEN, dtype="fp16"), "T4")
    assert (per_kernel.loc[["linear1", "linear2"], "bound"] == "compute").all()
    assert (per_kernel.filter(like="relu", axis=0)["bound"] == "memory").all()
    # A ReLU over 65,536 x 1024 fp16 values reads and writes 2 x 128 MiB: 268 MB at
    # 320 GB/s is 0.84 ms.
    assert v["big_relu_ms"] == pytest.approx(1e3 * 2 * 65536 * 1024 * 2 / 320e9, rel=0.01)
    assert v["big_mem_ms"] > v["big_compute_ms"] > v["big_fused_mem_ms"]


def _price(name, per_hour):
    return types.SimpleNamespace(name=name, price_per_hour=per_hour)


CPU, GPU = _price("cpu", 1.0), _price("gpu", 2.0)


def test_cost_values_by_hand():
    # CPU $1/h at 1,000/s: 1 / 3.6e6 x 1e6 = $0.278 a million; GPU $2/h at 100,000/s:
    # $0.00556. The GPU breaks even at (2 / 1e5) / (1 / 1e3) = 2% busy; against the CPU's
    # worst (500/s) 1%; at half its throughput 4%; on a datasheet 200,000/s 1%.
    v = page.cost_values(CPU, GPU, 1000.0, 1e5, 500.0, 2e5, 4, 5)
    assert v["cpu_cost_full"] == pytest.approx(1e6 / 3.6e6)
    assert v["gpu_cost_full"] == pytest.approx(2e6 / 3.6e8)
    assert v["gpu_cost_1pct"] == pytest.approx(100 * v["gpu_cost_full"])
    assert v["u_break_even_pct"] == pytest.approx(2.0)
    assert v["u_break_even_worst_pct"] == pytest.approx(1.0)
    assert v["u_break_even_half_pct"] == pytest.approx(4.0)
    assert v["u_break_even_ceil_pct"] == pytest.approx(1.0)
    assert v["cpu_spread"] == 2.0 and v["cpu_cores"] == 4.0 and v["cpu_repeats"] == 5.0
    # At the break-even the two cost the same a prediction.
    assert cost.cost_per_million(2.0, 1e5, 0.02) == pytest.approx(cost.cost_per_million(1.0, 1e3))


def test_demand_values_do_not_depend_on_the_gpus_throughput():
    # One GPU machine ($2/h) against $1/h CPU machines of 1,000/s each: two CPU machines
    # cost as much as the GPU from just above 1,000/s, whatever the GPU serves alone.
    v = page.demand_values(CPU, GPU, 1000.0, 1e5)
    assert v["d_break_even"] == pytest.approx(1000.0)
    assert v["d_break_even_busy_pct"] == pytest.approx(1.0)
    assert page.demand_values(CPU, GPU, 1000.0, 2e5)["d_break_even"] == v["d_break_even"]
    for figure in (page.utilisation_figure, page.demand_figure):
        fig = figure(CPU, GPU, 1000.0, 1e5)
        assert fig.axes[0].get_xscale() == "log" and fig.axes[0].get_ylabel()
        matplotlib.pyplot.close(fig)


def test_problem_values_agree_with_the_problems_model():
    c = cost_exercises
    v = page.problem_values(HIDDEN)
    roof = roofline.evaluate(tabular.mlp_ops(1, hidden=HIDDEN, dtype="fp16"), "T4")["seconds"]
    assert np.isclose(roof.sum(), c.WORK_T4_S)
    # The problem's T4 at batch 1: two copies, then the GPU's launch and kernels (GPU-paced).
    assert v["ex_total_us"] == pytest.approx(v["ex_copies_us"] + v["ex_gpu_us"])
    assert v["ex_copies_us"] == pytest.approx(2 * c.COPY_S * 1e6)
    assert v["ex_host_us"] == pytest.approx(7 * c.KERNEL_S * 1e6)
    assert v["ex_cpu_cores"] == 4.0 and v["ex_cpu_eager_us"] == pytest.approx(480.0)
    # The eager machine count is what one core's capacity under the SLO gives, four cores.
    core = batching.capacity(c.DECISION_CPU_EAGER_S, 1, slo_s=c.DECISION_SLO_S)
    assert cost.machines_needed(c.DECISION_DEMAND_PER_S, c.DECISION_CPU_CORES * core) \
        == v["ex_cpu_machines_eager"]
    # Rented by the machine: the cheapest option is the same on the T4's ceiling, where it
    # serves more (the CPU machine wins either way).
    gpu_usd_ceiling = cost.cost_per_million_at_demand(
        cost.example_price("AWS g4dn.xlarge").price_per_hour, v["ex_gpu_capacity_ceil"],
        c.DECISION_DEMAND_PER_S)
    assert v["ex_gpu_capacity_ceil"] > v["ex_gpu_capacity"]
    assert min(v["ex_cpu_usd"], gpu_usd_ceiling) == min(v["ex_cpu_usd"], v["ex_gpu_usd"])
    assert set(v) >= {"ans_" + n.replace("-", "_") for n in page.PROBLEMS}
