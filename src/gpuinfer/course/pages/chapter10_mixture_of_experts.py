"""What `chapters/10_mixture_of_experts` computes for its tables, figures and prose: one
function a table, figure or block of glued values, each returning {glue_name: value} (or a
DataFrame where the page shows one). The formulas live in `predict` and `hardware`; the
tests are in `tests/test_pages_chapter10.py`."""

from __future__ import annotations

import dataclasses
import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from gpuinfer import hardware
from gpuinfer.course import exercises
from gpuinfer.course.exercises import chapter10_mixture_of_experts as moe_exercises
from gpuinfer.hardware import device_links
from gpuinfer.predict import (architectures, expert_parallel, llm, search, speculative,
                              step_model, validation)

#: deepseek2025inference: output tokens/s per H800 node (DeepSeek's inference system).
DEEPSEEK_NODE_TPS = 14.8e3
#: sglang2025largeep: output tokens/s per node of 8 H100 (SGLang's large-scale EP).
SGLANG_NODE_TPS = 22.3e3
#: sglang2025gb200: decode, output tokens/s per GPU on a GB200 NVL72.
SGLANG_GB200_TPS = 13386.0
#: nvidia2025wideep: "up to 1.8x" per GPU from wide expert parallelism.
NVIDIA_WIDEEP_GAIN = 1.8
#: deepep2025 (README): the H800's NVLink, "~160 GB/s" (not in the catalogue: an assumption
#: taken from the measuring team's own figure), over which its EP8 low-latency kernels ran.
H800_NVLINK_BYTES_PER_S = 160e9
#: The racks of the section on rack-scale EP: (GPU, EP degree, redundant experts).
RACK = {"EP8, 8 GB200 of an NVL72": ("GB200", 8, 0),
        "EP32, 4 servers of 8 B200 (InfiniBand)": ("B200", 32, 0),
        "EP32, 32 GB200 of an NVL72": ("GB200", 32, 0),
        "EP72, a whole NVL72 (+32 redundant)": ("GB200", 72, 32)}
#: The problems of this page.
EXERCISES = ("moe-b1-step-ms-mixtral-h200", "moe-experts-touched-qwen3-235b-32",
             "moe-step-gb-mixtral-4", "moe-rule-batch-mixtral-a100",
             "moe-dispatch-bytes-ep32", "moe-node-limited-copies-16", "moe-decision-qwen3-235b")


def active_without_embedding(model) -> float:
    """Active parameters less the input embedding (a gather, not a matmul): what OpenAI's
    gpt-oss model card counts as active."""
    m = architectures.get(model)
    return m.n_active_params - m.embedding_params


def sizes_block() -> dict:
    """Mixtral's and DeepSeek-V3's sizes (B parameters, GB), gpt-oss's active parameters
    with and without the embedding, gpt-oss-120b's memory."""
    mx, ds = architectures.get("mixtral-8x7b"), architectures.get("deepseek-v3")
    values = {"mx_total_b": mx.n_params / 1e9, "mx_active_b": mx.n_active_params / 1e9,
              "ds_total_b": ds.n_params / 1e9, "ds_active_b": ds.n_active_params / 1e9,
              "ds_active_pct": 100 * ds.n_active_params / ds.n_params,
              "mx_mem_gb": step_model.weight_bytes(mx) / 1e9,
              "mx_b1_gb": step_model.step_weight_bytes(mx, "fp16", 1) / 1e9,
              "ds_mem_fp8_gb": step_model.weight_bytes(ds, "fp8") / 1e9,
              "ds_b1_fp8_gb": step_model.step_weight_bytes(ds, "fp8", 1) / 1e9}
    for key, name in (("oss20", "gpt-oss-20b"), ("oss120", "gpt-oss-120b")):
        values[f"{key}_active_b"] = architectures.get(name).n_active_params / 1e9
        values[f"{key}_active_noemb_b"] = active_without_embedding(name) / 1e9
    return values | {"oss120_mem_gb": step_model.weight_bytes("gpt-oss-120b") / 1e9}


def weights_figure(batches, curves, every, cases):
    """GB of weights a decode step reads against the batch, one panel a case ({label:
    (model, dtype)}): the experts touched (`curves`), every weight (`every`, GB) and the
    active weights at batch 1."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), layout="constrained")
    for ax, (label, (m, dt)) in zip(axes, cases.items()):
        ax.semilogx(batches, curves[label], "o-", ms=3, color="black", mfc="none",
                    label=f"{m.name}: experts touched")
        ax.axhline(every[label], color="0.4", ls="--",
                   label=f"dense model of equal total size ({every[label]:,.0f} GB)")
        ax.axhline(float(step_model.step_weight_bytes(m, dt, 1)) / 1e9, color="0.6", ls=":",
                   label="active weights (batch 1)")
        ax.set_xlabel("batch (tokens decoded together)")
        ax.set_ylabel("GB of weights one decode step reads")
        ax.set_title(label, fontsize=10)
        ax.set_ylim(bottom=0)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    return fig


def read_block(read) -> dict:
    """The weights a step reads (`read`: batch or "every weight" x case, GB), their share of
    every weight, and the experts touched at a few batches."""
    mx, ds = read["Mixtral-8x7B, fp16"], read["DeepSeek-V3, fp8"]
    values = {}
    for b in (1, 64, 1024):
        values |= {f"mx_gb_{b}": float(mx[b]), f"ds_gb_{b}": float(ds[b]),
                   f"mx_frac_{b}": float(mx[b] / mx["every weight"]),
                   f"ds_frac_{b}": float(ds[b] / ds["every weight"])}
    mixtral, dsv3 = architectures.get("mixtral-8x7b"), architectures.get("deepseek-v3")
    return values | {"mx_every_gb": float(mx["every weight"]),
                     "ds_every_gb": float(ds["every weight"]),
                     "mx_touched_8": float(step_model.experts_touched(mixtral, 8)),
                     "ds_touched_64": float(step_model.experts_touched(dsv3, 64)),
                     "ds_touched_1024": float(step_model.experts_touched(dsv3, 1024))}


def turn_block(turn) -> dict:
    """Where decode turns compute-bound (`turn`: (model, GPU) -> compute-bound batch, ridge
    x E/k and their ratio) on an H100, and DeepSeek-V3's on an H200 and in fp8."""
    h100 = hardware.get("H100 SXM")
    ds = architectures.get("deepseek-v3")
    values = {"ridge_h100": h100.peak_flops("fp16") / h100.bandwidth}
    for key, name in (("mx", "mixtral-8x7b"), ("ds", "deepseek-v3"), ("q30", "qwen3-30b-a3b"),
                      ("l70", "llama-3-70b")):
        name = architectures.get(name).name
        values[f"cbb_{key}_h100"] = float(turn.loc[(name, "H100 SXM"), "compute-bound batch"])
        values[f"cbb_{key}_ratio"] = float(turn.loc[(name, "H100 SXM"), "over ridge x E/k"])
    return values | {
        "cbb_oss120_ratio": float(turn.loc[("gpt-oss-120b", "H100 SXM"), "over ridge x E/k"]),
        "cbb_ds_h200": float(turn.loc[(ds.name, "H200"), "compute-bound batch"]),
        "cbb_ds_h100_fp8": llm.compute_bound_batch(ds, h100, "fp8", compute_dtype="fp8")}


def speed_figure(speed, title):
    """Tokens/s against the batch (log-log) for each column of `speed`."""
    fig, ax = plt.subplots(figsize=(7, 4.3))
    for (name, col), style in zip(speed.items(), ("o-", "s--", "^:")):
        ax.loglog(speed.index, col, style, ms=4, color="black", mfc="none", label=name)
    ax.set_xlabel("batch (sequences decoded together)")
    ax.set_ylabel("tokens/s, all sequences (roofline)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def gptfast_clause(mixtral_fraction, dense_fraction) -> str:
    """Mixtral against a dense model of its active size run as efficiently (each run's
    measured / ceiling): a 5% band either side reads as "about as fast"."""
    vs = mixtral_fraction / dense_fraction
    if vs < 0.95:
        return (f"Mixtral is {100 * (1 - vs):.0f}% slower (the router, the gather of two "
                "experts' weights a layer, more and smaller kernels)")
    if vs > 1.05:
        return (f"Mixtral is {100 * (vs - 1):.0f}% faster: its step reads more bytes than "
                "Llama-2-7B's "
                "(two experts a layer beside the attention), which amortise the fixed cost "
                "of a step better, and its expert kernels keep up")
    return ("Mixtral is about as fast: its router and the gather of two experts' weights "
            "a layer cost little beside the weight read")


def speed_block(speed, trio, accelerator, context, top) -> dict:
    """Mixtral against the two dense models (`trio` {name: spec}, `speed`: tokens/s by
    batch) at batch 1 and 64, gpt-fast's published Mixtral and Llama-2-7B int8 runs on an
    A100, and DeepSeek-V3's KV cache at its compute-bound batch on `accelerator`."""
    mx, da, dt = trio                                 # Mixtral, dense active, dense total
    s1 = speed.loc[1]
    s64 = {n: float(llm.decode_ceiling(m, accelerator, 64, context)) for n, m in trio.items()}
    runs = validation.table().set_index("id")
    gf_mx = runs.loc["gptfast-mixtral-8x7b-int8-a100-tp1"]
    gf_l7 = runs.loc["gptfast-llama2-7b-int8-a100"]
    ds = architectures.get("deepseek-v3")
    cbb_fp8 = llm.compute_bound_batch(ds, accelerator, "fp8", compute_dtype="fp8")
    return {"tps_mx_1": float(s1[mx]), "tps_da_1": float(s1[da]), "tps_dt_1": float(s1[dt]),
            "tps_mx_64": s64[mx], "tps_da_64": s64[da], "tps_dt_64": s64[dt],
            "trio_top": float(top),
            "gf_mx_int8": float(gf_mx["measured"]),
            "gf_mx_frac": float(gf_mx["measured_over_ceiling"]),
            "gf_l7_frac": float(gf_l7["measured_over_ceiling"]),
            "gf_dense_equiv": float(gf_l7["measured_over_ceiling"] * gf_mx["ceiling"]),
            "gf_mx_pred": float(gf_mx["achievable"]),
            "gf_mx_pred_lo": validation.interval(float(gf_mx["achievable"]), "batch-1")[0],
            "gf_mx_pred_hi": validation.interval(float(gf_mx["achievable"]), "batch-1")[1],
            "gf_mx_vs_dense": gptfast_clause(gf_mx["measured_over_ceiling"],
                                             gf_l7["measured_over_ceiling"]),
            "ds_mla_kb": step_model.kv_cache_bytes_per_token(ds) / 1e3,
            "ds_cbb_kv_tb": cbb_fp8 * 4096 * step_model.kv_cache_bytes_per_token(ds) / 1e12,
            "ds_cbb_h200_fp8": cbb_fp8}


def skew_block(skew, n_devices) -> dict:
    """Routing skew (`skew`: (tokens, router) -> distinct experts, busiest GPU / mean,
    experts and step ms) on `n_devices` GPUs, beside the uniform model's expectations."""
    ds = architectures.get("deepseek-v3")
    values = {"skew_touched": float(skew.loc[(64, "skewed (Zipf)"), "distinct experts"]),
              "uni_touched_meas": float(skew.loc[(64, "uniform"), "distinct experts"]),
              "uni_touched_model": float(step_model.experts_touched(ds, 64))}
    for t in (64, 2048):
        for key, lab in (("u", "uniform"), ("z", "skewed (Zipf)")):
            values[f"skew_{t}_{key}_imb"] = float(skew.loc[(t, lab), "busiest GPU / mean"])
            values[f"skew_{t}_{key}_exp"] = float(skew.loc[(t, lab), "experts ms"])
            values[f"skew_{t}_{key}_step"] = float(skew.loc[(t, lab), "step ms"])
    return values | {"uni_imb_model": expert_parallel.uniform_routing_imbalance(
        64, n_devices, ds.experts_per_token, ds.n_experts // n_devices)}


def layouts_block(layout_table, ds_case, qw_case) -> dict:
    """The three layouts' step times, KV and communication ms (`layout_table`: (case, batch,
    layout) rows, on the ceiling) for DeepSeek-V3 (`ds_case`) and Qwen3 (`qw_case`), and
    DeepSeek-V3's batch-64 step on the achievable model (`moe_exercises.DECISION_EFFICIENCY`:
    NCCL's all-reduces with their latency, the all-to-alls at DeepEP's measured fraction),
    with the sentence comparing TP and EP + DP attention there (`layouts_verdict`)."""
    def at(case, batch, layout, col):
        return float(layout_table.loc[(case, batch, layout), col])
    values = {}
    for b in (64, 512):
        for key, lay in (("tp", "TP"), ("eptp", "EP + TP attention"),
                         ("epdp", "EP + DP attention")):
            values |= {f"ds8_{key}_{b}_ms": at(ds_case, b, lay, "ms_per_step"),
                       f"qw8_{key}_{b}_ms": at(qw_case, b, lay, "ms_per_step"),
                       f"ds8_{key}_{b}_kv": at(ds_case, b, lay, "kv_GB_per_gpu"),
                       f"qw8_{key}_{b}_kv": at(qw_case, b, lay, "kv_GB_per_gpu"),
                       f"ds8_{key}_{b}_comm": at(ds_case, b, lay, "comm_ms"),
                       f"qw8_{key}_{b}_tpg": at(qw_case, b, lay, "tokens_per_s_per_gpu")}
    ach = expert_parallel.moe_layouts("deepseek-v3", "H200", 8, batch=64, context=4096,
                                      dtype="fp8", achievable=moe_exercises.DECISION_EFFICIENCY)
    values |= {"ds8_tp_64_comm_ach": float(ach.loc["TP", "comm_ms"]),
               "ds8_epdp_64_comm_ach": float(ach.loc["EP + DP attention", "comm_ms"]),
               "ds8_tp_64_ms_ach": float(ach.loc["TP", "ms_per_step"]),
               "ds8_epdp_64_ms_ach": float(ach.loc["EP + DP attention", "ms_per_step"]),
               "ds8_epdp_512_tpg": at(ds_case, 512, "EP + DP attention",
                                      "tokens_per_s_per_gpu")}
    return values | {"ds8_64_verdict": layouts_verdict(values)}


def layouts_verdict(values) -> str:
    """Whether DeepSeek-V3's batch-64 step separates TP from EP + DP attention: a tie when
    the two achievable steps' 80% intervals overlap (`validation.choice` in the MoE regime,
    per="cost"), else the layout faster on both the ceiling and the achievable model."""
    ceil = values["ds8_tp_64_ms"] / values["ds8_epdp_64_ms"]
    ach = values["ds8_tp_64_ms_ach"] / values["ds8_epdp_64_ms_ach"]
    ms = sorted([values["ds8_tp_64_ms_ach"], values["ds8_epdp_64_ms_ach"]])
    c = validation.choice(ms[0], ms[1], "moe throughput", per="cost")
    if c["flips"]:
        return (f"their 80% intervals overlap ({c['low']:.0f}-{c['high']:.0f} against "
                f"{c['other_low']:.0f}-{c['other_high']:.0f} ms), closer than this model can "
                "separate: at batch 64 the layouts tie")
    faster = "EP + DP attention" if ceil > 1 and ach > 1 else (
        "TP" if ceil < 1 and ach < 1 else None)
    if faster is None:
        return "ahead on one and behind on the other: the model cannot rank them at batch 64"
    return f"{faster} ahead on both: at batch 64 it is the faster layout"


def deepep_figure(deepep, link):
    """The all-to-all's floor (`all_to_all_floor_s` on `link`) against bytes sent, EP8 to EP256,
    with DeepEP's measured low-latency dispatch (`deepep`: EP -> dispatch MB and us)."""
    sizes = np.geomspace(1e4, 1e9, 80)          # bytes each GPU sends
    fig, ax = plt.subplots(figsize=(7, 4.3))
    for n, style in ((8, "-"), (16, "--"), (64, "-."), (256, ":")):
        t = [expert_parallel.all_to_all_floor_s(s, n, link) * 1e6 for s in sizes]
        where = "NVLink" if n <= link.domain_gpus else "across servers"
        ax.loglog(sizes, t, style, color="black", label=f"floor, EP{n} ({where})")
    ax.loglog(deepep["dispatch MB"] * 1e6, deepep["DeepEP dispatch (us)"], "o", color="0.3",
              mfc="none", label="DeepEP low-latency dispatch, EP8-256 (H800, measured)")
    for n, r in deepep.loc[[8, 16, 256]].iterrows():
        ax.annotate(f"{n}", (r["dispatch MB"] * 1e6, r["DeepEP dispatch (us)"]), fontsize=7,
                    xytext=(4, 0), textcoords="offset points")
    ax.set_xlabel("bytes each GPU sends in one all-to-all")
    ax.set_ylabel("time (microseconds)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    return fig


def deepep_block(deepep) -> dict:
    """The all-to-all's floor against DeepEP's measurements (`deepep`: EP -> dispatch MB,
    floor and measured us, their ratio), EP8's floor on the measuring H800s' own NVLink
    (`H800_NVLINK_BYTES_PER_S`), and the published tokens/s of a node."""
    ratio = "dispatch: floor / measured"
    h800_8 = float(deepep.loc[8, "dispatch MB"]) * 1e6 / H800_NVLINK_BYTES_PER_S
    return {"a2a_mb": float(deepep.loc[256, "dispatch MB"]),
            "a2a_mb_8": float(deepep.loc[8, "dispatch MB"]),
            "a2a_ceil_256": float(deepep.loc[256, "dispatch floor (us)"]),
            "a2a_frac_256": float(deepep.loc[256, ratio]),
            "a2a_frac_min": float(deepep.loc[16:, ratio].min()),
            "a2a_frac_max": float(deepep.loc[16:, ratio].max()),
            "deepep_ll_256_us": float(deepep.loc[256, "DeepEP dispatch (us)"]),
            "deepep_ll_8_us": float(deepep.loc[8, "DeepEP dispatch (us)"]),
            "a2a_ceil_8": float(deepep.loc[8, "dispatch floor (us)"]),
            "a2a_frac_8": float(deepep.loc[8, ratio]),
            "a2a_h800_gbs": H800_NVLINK_BYTES_PER_S / 1e9,
            "a2a_h800_floor_8": 1e6 * h800_8,
            "a2a_h800_frac_8": 1e6 * h800_8 / float(deepep.loc[8, "DeepEP dispatch (us)"]),
            "a2a_nic_8": float(deepep.loc[8, "dispatch MB"]) * 1e6 / device_links.get_interconnect(
                "InfiniBand NDR x8").bandwidth_bytes_per_s * 8 * 1e6,
            "ds_node_tps": DEEPSEEK_NODE_TPS, "sg_node_tps": SGLANG_NODE_TPS}


def node_limited_block(node_limited) -> dict:
    """Node-limited routing (`node_limited`: one row a dispatch rule, in the page's order: one
    copy a pair, one a node, one a node within M nodes): the network copies a token, the
    nodes it reaches and the NIC time, and the saving of the limited rule over one a pair."""
    pair, any_node, limited = node_limited.index
    copies = node_limited["network copies a token"]
    return {"nl_pair": float(copies[pair]), "nl_any": float(copies[any_node]),
            "nl_lim": float(copies[limited]),
            "nl_any_nodes": float(node_limited.loc[any_node, "destinations a token"]),
            "nl_lim_nodes": float(node_limited.loc[limited, "destinations a token"]),
            "nl_pair_us": float(node_limited.loc[pair, "floor (us)"]),
            "nl_lim_us": float(node_limited.loc[limited, "floor (us)"]),
            "nl_pair_meas_us": float(node_limited.loc[pair, "at DeepEP's 43 GB/s (us)"]),
            "nl_lim_meas_us": float(node_limited.loc[limited, "at DeepEP's 43 GB/s (us)"]),
            "nl_saving": float(copies[pair] / copies[limited])}


def formats_block(formats) -> dict:
    """Weight formats (`formats`: (model, format) -> memory GB, batch-1 read, GPUs to hold
    it)."""
    oss = "bf16 (+ MXFP4 experts)"
    ds = architectures.get("deepseek-v3").name
    return {"oss120_gb": float(formats.loc[("gpt-oss-120b", oss), "memory (GB)"]),
            "oss120_b1": float(formats.loc[("gpt-oss-120b", oss), "batch-1 read (GB)"]),
            "oss20_gb": float(formats.loc[("gpt-oss-20b", oss), "memory (GB)"]),
            "ds_bf16_gb": float(formats.loc[(ds, "bf16"), "memory (GB)"]),
            "ds_fp8_gb": float(formats.loc[(ds, "fp8"), "memory (GB)"]),
            "ds_bf16_h200s": float(formats.loc[(ds, "bf16"), "H200s to hold it"]),
            "ds_fp8_h200s": float(formats.loc[(ds, "fp8"), "H200s to hold it"]),
            "ds_fp8_h100s": float(formats.loc[(ds, "fp8"), "H100s to hold it"])}


def deepseek_fp4():
    """DeepSeek-V3 as served on Blackwell racks: NVFP4 routed experts, the rest in fp8
    (W8A8), an fp8 latent KV cache."""
    return dataclasses.replace(architectures.get("deepseek-v3"),
                               name="DeepSeek-V3, NVFP4 experts", expert_dtype="nvfp4")


def rack_step(accelerator, n, redundant, per_gpu, achievable, **kw) -> dict:
    """One decode step of `deepseek_fp4()` on EP`n` `accelerator`s (`redundant` experts),
    `per_gpu` sequences a GPU at 4,096 tokens. The matmuls at the fp8 peak: the experts' FP4 GEMMs
    could run at twice it, so the expert rows are on the slow side."""
    return expert_parallel.ep_decode_breakdown(
        deepseek_fp4(), accelerator, n, batch=per_gpu * n, context=4096, dtype="fp8",
        kv_dtype="fp8", compute_dtype="fp8", redundant_experts=redundant, achievable=achievable, **kw)


def rack_row(accelerator, n, redundant) -> dict:
    """One row of `rack_table`: EP`n` on `accelerator`s with `redundant` experts."""
    def fits(b):
        return rack_step(accelerator, n, redundant, b, False)["fits"]

    def meets(b, tpot, ach):
        return fits(b) and rack_step(accelerator, n, redundant, b, ach)["total_s"] <= tpot

    row = {"weights GB/GPU": rack_step(accelerator, n, redundant, 1, False)[
               "weight_bytes_per_device"] / 1e9,
           "memory batch/GPU": search.largest_meeting(fits, 1, None)}
    for tpot in (0.020, 0.050):
        for ach, tag in ((True, "achievable"), (False, "ceiling")):
            b = search.largest_meeting(lambda b: meets(b, tpot, ach), 1, None)  # noqa: B023
            s = rack_step(accelerator, n, redundant, b, ach)
            if ach:
                row[f"{tpot * 1e3:.0f} ms: batch/GPU"] = b
                row[f"{tpot * 1e3:.0f} ms: all-to-all ms"] = 1e3 * s["comm_s"]
            row[f"{tpot * 1e3:.0f} ms: tokens/s/GPU, {tag}"] = s["tokens_per_s_per_gpu"]
    return row


def rack_table() -> pd.DataFrame:
    """Each of RACK's layouts: weights a GPU, the largest batch a GPU that fits, and at a
    20 and a 50 ms TPOT the batch, all-to-all ms and tokens/s a GPU (achievable, ceiling)."""
    return pd.DataFrame({label: rack_row(*where) for label, where in RACK.items()}).T


def rack_block(rack) -> dict:
    """The rack section (`rack`: rack_table), the gains of the whole NVL72 over EP8 and of
    NVLink over InfiniBand, each with the MoE-throughput regime's 80% interval."""
    ep8, ib, r32, r72 = rack.index
    nvl72 = device_links.interconnect_for(hardware.get("GB200"))
    values = {"rack_fp4_gb": step_model.weight_bytes(deepseek_fp4(), "fp8") / 1e9,
              "rack_fp8_gb": step_model.weight_bytes("deepseek-v3", "fp8") / 1e9,
              "rack_domain": float(nvl72.domain_gpus),
              "rack_nvlink_gbs": nvl72.bandwidth_bytes_per_s / 1e9,
              "rack_nic_gbs": device_links.get_interconnect(
                  "InfiniBand NDR x8").bandwidth_bytes_per_s / 8 / 1e9}
    for key, lab in (("ep8", ep8), ("ib", ib), ("ep32", r32), ("ep72", r72)):
        values[f"rack_{key}_wgb"] = float(rack.loc[lab, "weights GB/GPU"])
        values[f"rack_{key}_mem"] = float(rack.loc[lab, "memory batch/GPU"])
        for t in (20, 50):
            values |= {
                f"rack_{key}_{t}_tps": float(rack.loc[lab, f"{t} ms: tokens/s/GPU, achievable"]),
                f"rack_{key}_{t}_ceil": float(rack.loc[lab, f"{t} ms: tokens/s/GPU, ceiling"]),
                f"rack_{key}_{t}_a2a": float(rack.loc[lab, f"{t} ms: all-to-all ms"]),
                f"rack_{key}_{t}_b": float(rack.loc[lab, f"{t} ms: batch/GPU"])}
    tps = rack["20 ms: tokens/s/GPU, achievable"]
    wide = validation.choice(tps[r72], tps[ep8], "moe throughput", per="rate")
    net = validation.choice(tps[r32], tps[ib], "moe throughput", per="rate")
    return values | {
        "rack_gain20": float(tps[r72] / tps[ep8]),
        "rack_gain50": float(rack.loc[r72, "50 ms: tokens/s/GPU, achievable"]
                             / rack.loc[ep8, "50 ms: tokens/s/GPU, achievable"]),
        "rack_ib_loss": float(tps[r32] / tps[ib]),
        "rack_ep72_20_lo": wide["low"], "rack_ep72_20_hi": wide["high"],
        "rack_ep32_20_lo": net["low"],
        "rack_wide_flip": f"EP8's ({wide['other_low']:,.0f}-{wide['other_high']:,.0f}) "
        "overlaps it, so the wide layout's gain is within the model's error here (a "
        "conservative check: the two predictions share the model's bias, so their ratio is "
        "better known than either): measure both" if wide["flips"] else
        f"EP8's ({wide['other_low']:,.0f}-{wide['other_high']:,.0f}) lies below it: the "
        "wide layout's gain outlasts the model's error",
        "rack_net_flip": f"the network's ({net['other_low']:,.0f}-{net['other_high']:,.0f}) "
        "overlaps it: measure before paying for the rack" if net["flips"] else
        f"the network's whole interval ({net['other_low']:,.0f}-{net['other_high']:,.0f}) "
        f"lies below its low end ({net['low']:,.0f}): the rack's lead outlasts the "
        "model's error",
        "sg_gb200_tps": SGLANG_GB200_TPS, "nv_wideep_gain": NVIDIA_WIDEEP_GAIN,
        "sg_gb200_vs_50": sglang_vs_50ms(SGLANG_GB200_TPS,
                                         float(rack.loc[r72, "50 ms: tokens/s/GPU, achievable"]),
                                         float(rack.loc[r72, "50 ms: tokens/s/GPU, ceiling"])),
        "sg_gb200_verdict": measured_verdict(SGLANG_GB200_TPS, wide["low"], wide["high"],
                                             float(tps[r72]),
                                             float(rack.loc[r72, "20 ms: tokens/s/GPU, ceiling"]),
                                             moe_rows_max_ep())}


def moe_rows_max_ep() -> int:
    """The widest expert parallelism among the rows the MoE-throughput interval is drawn
    from (`validation.validation_errors`)."""
    e = validation.validation_errors()
    return int(e.loc[(e["kind"] == "throughput") & e["moe"], "ep"].max())


def sglang_vs_50ms(measured, achievable, ceiling) -> str:
    """A measured tokens/s a GPU against EP72's figures at the looser 50 ms TPOT (nearer a
    throughput run's batch): the clause after "at a 50 ms TPOT the model gives ..."."""
    where = ("above both" if measured > ceiling else
             "between the two" if measured > achievable else "below both")
    return (f"{achievable:,.0f} achievable and {ceiling:,.0f} on the ceiling; the "
            f"measurement lies {where}")


def measured_verdict(measured, low, high, achievable, ceiling, max_ep) -> str:
    """Where a measured tokens/s a GPU lies against EP72's 80% interval (`low`-`high`),
    its achievable figure and its ceiling (all at a 20 ms TPOT): the clause after
    "SGLang measured ...". The measurement ran at its own batch and latency, so it places
    the model's figures, it does not check them. `max_ep`: the widest EP of the rows the
    interval is drawn from."""
    where = (f"above EP72's 80% interval (up to {high:,.0f}) and above the achievable "
             f"{achievable:,.0f}" if measured > high else
             f"below EP72's 80% interval (from {low:,.0f})" if measured < low else
             f"inside EP72's 80% interval ({low:,.0f}-{high:,.0f})")
    bound = (f"below the ceiling's {ceiling:,.0f}" if measured <= ceiling else
             f"above even the 20 ms ceiling's {ceiling:,.0f}, at SGLang's own (looser) latency")
    cover = ("; the MoE interval does not cover this regime (GB200, NVFP4, wide EP: the "
             f"rows it is drawn from run EP of at most {max_ep})"
             if not low <= measured <= high else "")
    return f"{where}, {bound}{cover}. It places the model's figures, it does not check them"


def eplb_table(rng, p, n_experts, k, tokens=4096) -> pd.DataFrame:
    """One layer's router statistics (`tokens` tokens each picking `k` of `n_experts` with
    probabilities `p`, drawn from `rng`), and the busiest GPU over the mean with the experts
    placed in order and by EPLB, at a few (EP, redundant experts)."""
    history = np.array([rng.choice(n_experts, k, replace=False, p=p) for _ in range(tokens)])
    loads = np.bincount(history.ravel(), minlength=n_experts)
    rows = {}
    for n, r in ((8, 0), (8, 32), (64, 0), (64, 64), (72, 32)):
        in_order = loads.reshape(n, -1).sum(axis=1) if r == 0 else np.array([np.nan])
        rows[(n, r)] = {"experts in order": in_order.max() / in_order.mean(),
                        "EPLB": expert_parallel.eplb_imbalance(loads, n, r)}
    eplb = pd.DataFrame(rows).T
    eplb.index.names = ["EP", "redundant"]
    return eplb


def mtp_draft_cost() -> float:
    """DeepSeek-V3's MTP module as a draft: one more block of its 61 (an estimate)."""
    return 1 / architectures.get("deepseek-v3").n_layers


def mtp_table(rack) -> pd.DataFrame:
    """MTP on a whole NVL72 (EP72 + 32 redundant) at DeepSeek's acceptances, at a few
    sequences a GPU (up to `rack`'s batch at 20 ms): the verify step over a plain step and
    the speed-up, on each model."""
    mtp = {}
    for per_gpu in (1, 16, 64, int(rack.iloc[-1]["20 ms: batch/GPU"])):
        row = {}
        for ach, tag in ((True, "achievable"), (False, "ceiling")):
            verify = (rack_step("GB200", 72, 32, per_gpu, ach, new_tokens=2)["total_s"]
                      / rack_step("GB200", 72, 32, per_gpu, ach)["total_s"])
            row[f"verify / plain step, {tag}"] = verify
            for a in (0.85, 0.90):
                row[f"speedup at {a:.2f}, {tag}"] = speculative.speedup(
                    a, 1, mtp_draft_cost(), verify_cost=verify)
        mtp[per_gpu] = row
    mtp = pd.DataFrame(mtp).T
    mtp.index.name = "sequences a GPU"
    return mtp


def eplb_mtp_block(eplb, mtp, rack) -> dict:
    """EPLB's balance (`eplb`) and MTP's speed-up (`mtp`) at batch 1 and at the whole
    rack's 20 ms batch (`rack`), beside the ideal speed-up at DeepSeek's acceptances."""
    b20 = int(rack.loc[rack.index[-1], "20 ms: batch/GPU"])
    return {"eplb_8_order": float(eplb.loc[(8, 0), "experts in order"]),
            "eplb_8_0": float(eplb.loc[(8, 0), "EPLB"]),
            "eplb_8_32": float(eplb.loc[(8, 32), "EPLB"]),
            "eplb_64_order": float(eplb.loc[(64, 0), "experts in order"]),
            "eplb_64_0": float(eplb.loc[(64, 0), "EPLB"]),
            "eplb_64_64": float(eplb.loc[(64, 64), "EPLB"]),
            "eplb_72_32": float(eplb.loc[(72, 32), "EPLB"]),
            "mtp_ideal_85": speculative.speedup(0.85, 1, mtp_draft_cost()),
            "mtp_ideal_90": speculative.speedup(0.90, 1, mtp_draft_cost()),
            "mtp_b1_85": float(mtp.loc[1, "speedup at 0.85, achievable"]),
            "mtp_b20_85": float(mtp.loc[b20, "speedup at 0.85, achievable"]),
            "mtp_b20_85_ceil": float(mtp.loc[b20, "speedup at 0.85, ceiling"]),
            "mtp_b20_verify": float(mtp.loc[b20, "verify / plain step, achievable"]),
            "mtp_b20": float(b20)}


def decision_table(achievable=True) -> pd.DataFrame:
    """The decision problem's options (`expert_parallel.moe_options`), cheapest first;
    `achievable`: True, False (the ceiling) or an Efficiency (the problem's own,
    `DECISION_EFFICIENCY`, prices the all-to-alls as DeepEP measured them)."""
    return expert_parallel.moe_options(
        moe_exercises.DECISION_MODEL, moe_exercises.DECISION_LAYOUTS,
        tpot_s=moe_exercises.DECISION_TPOT_S, context=moe_exercises.DECISION_CONTEXT,
        prices=moe_exercises.DECISION_PRICES, n_devices=moe_exercises.DECISION_GPUS,
        formats=moe_exercises.DECISION_FORMATS, achievable=achievable)


def decision_block(dec, dec_ceil, dec_a2a) -> dict:
    """The decision's solution: `dec` (decision_table on the problem's model), `dec_ceil`
    (on the ceiling) and `dec_a2a` (the all-to-alls at their ceiling), each cheapest first;
    the best option's step, its all-to-all ms, the best other layout, and the cost within
    the MoE-throughput regime's 80% interval."""
    best, ceil, a2a = dec.iloc[0], dec_ceil.iloc[0], dec_a2a.iloc[0]
    step = expert_parallel.ep_decode_breakdown(
        moe_exercises.DECISION_MODEL, best["GPU"], moe_exercises.DECISION_GPUS,
        int(best["batch"]), moe_exercises.DECISION_CONTEXT, best["format"], attention="dp",
        achievable=moe_exercises.DECISION_EFFICIENCY)
    alt = dec[dec["layout"] != best["layout"]].iloc[0]
    lo, hi = validation.interval(1.0, "moe throughput")
    usd = float(best["usd_per_million"])
    second = validation.choice(usd, float(dec.iloc[1]["usd_per_million"]), "moe throughput",
                               per="cost")
    other = validation.choice(usd, float(alt["usd_per_million"]), "moe throughput",
                              per="cost")
    return {"dec_ceil_ms": float(best["ceiling_step_ms"]), "dec_ceil_batch": float(ceil["batch"]),
            "dec_ceil_usd": float(ceil["usd_per_million"]),
            "dec_second_mem_batch": float(dec.iloc[1]["memory_batch"]),
            "dec_batch": float(best["batch"]), "dec_mem_batch": float(best["memory_batch"]),
            "dec_ms": float(best["step_ms"]), "dec_tps": float(best["tokens_per_s"]),
            "dec_price": moe_exercises.DECISION_PRICES["H200"],
            "dec_h100_fp16_usd": float(dec.query("GPU == 'H100 SXM' and format == 'fp16'")[
                "usd_per_million"].min()),
            "dec_second_usd": float(dec.iloc[1]["usd_per_million"]),
            "dec_second_batch": float(dec.iloc[1]["batch"]),
            "qw_fp16_gb": step_model.weight_bytes("qwen3-235b-a22b", "fp16") / 1e9,
            "dec_a2a_ceiling_usd": float(a2a["usd_per_million"]),
            "dec_a2a_ceiling_batch": float(a2a["batch"]),
            "dec_a2a_frac": expert_parallel.deepep_fraction(moe_exercises.DECISION_GPUS)[0],
            "dec_comm_ms": 1e3 * step["comm_s"],
            "dec_alt_usd": float(alt["usd_per_million"]),
            "dec_ratio_lo": lo, "dec_ratio_hi": hi,
            "dec_usd_lo": usd / hi, "dec_usd_hi": usd / lo,
            "dec_second_lo": second["other_low"], "dec_second_hi": second["other_high"],
            "dec_alt_lo": other["other_low"], "dec_alt_hi": other["other_high"],
            "dec_flip": decision_flip_clause(second, other),
            "dec_own": (f"below its own interval: the central 80% of the MoE rows' ratios "
                        f"({lo:.2f}-{hi:.2f}) lie below 1 (the model is biased high there), "
                        "so the interval sits above the prediction" if hi < 1 else
                        "inside its own interval")}


def decision_flip_clause(second, other) -> str:
    """The decision's runner-up (`second`) and best other layout (`other`), each a
    `validation.choice` against the winner: whether their 80% intervals overlap the
    winner's (the choice could flip within the model's error)."""
    def one(name, c):
        span = f"{c['other_low']:.2f}-{c['other_high']:.2f} USD"
        return (f"{name}'s interval ({span}) overlaps it" if c["flips"] else
                f"{name}'s interval ({span}) lies above it")
    text = (one("the runner-up (H100, fp8, EP + DP attention)", second) + ", and "
            + one("the best other layout", other))
    if second["flips"] or other["flips"]:
        return text + (": if the model errs differently on different GPUs or layouts, the "
                       "choice could flip. Measure your engine, in both layouts and on both "
                       "GPUs, before you buy")
    return text + ": the choice outlasts the model's error"


def exercise_block(turn, names=EXERCISES) -> dict:
    """The answers (`ans_*`) of the problems `names` and their solutions' steps (the inputs
    differ from the ones the page prints); `turn`: the page's compute-bound table
    (Mixtral's ridge x E/k on an H100)."""
    values = {"ans_" + name.replace("-", "_"): float(exercises.get(name).answer())
              for name in names}
    h200, a100 = hardware.get("H200"), hardware.get("A100 80GB")
    mx, ds = architectures.get("mixtral-8x7b"), architectures.get("deepseek-v3")
    qw = architectures.get("qwen3-235b-a22b")
    a2a32 = expert_parallel.moe_all_to_all_bytes(ds, 128, 32)
    link = device_links.interconnect_for(hardware.get("H100 SXM"))
    return values | {
        "h200_bw_tbs": h200.bandwidth / 1e12,
        "mx_every_ms": step_model.step_weight_bytes(mx, "fp16", 1 << 30) / h200.bandwidth * 1e3,
        "qw_miss_32": (1 - qw.experts_per_token / qw.n_experts) ** 32,
        "mx_touched_4": float(step_model.experts_touched(mx, 4)),
        "mx_4_over_1": float(step_model.step_weight_bytes(mx, "fp16", 4)
                             / step_model.step_weight_bytes(mx, "fp16", 1)),
        "a100_ridge": a100.ridge_point("fp16"),
        "mx_rule_a100": a100.ridge_point("fp16") * mx.n_experts / mx.experts_per_token,
        "mx_cbb_a100": llm.compute_bound_batch(mx, a100, "fp16"),
        "ex_a2a32_disp_us": 1e6 * expert_parallel.all_to_all_floor_s(
            a2a32["dispatch_sent_bytes"], 32, link),
        "ex_a2a32_comb_us": 1e6 * expert_parallel.all_to_all_floor_s(
            a2a32["combine_sent_bytes"], 32, link),
        # 32 GPUs, 8 to a node: 24 of the 31 others sit on other nodes.
        "ex_a2a32_offnode_pct": 100 * 24 / 31,
        "ds_moe_layers": float(ds.n_moe_layers),
        "mx_ridge_ek": float(turn.loc[(mx.name, "H100 SXM"), "ridge x E/k"]),
        "nl16_miss": math.comb(48, 8) / math.comb(64, 8),
        "nl16_nodes": expert_parallel.nodes_touched(256, 8, 16, 4)}
