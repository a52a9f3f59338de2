"""What `chapters/05_serving` computes for its prose, tables and figures: one function a
block of glued values (`book.glue_all`). The measurements (the fusion table, the tuning
search) run on the page; these functions read them, and everything else comes from the
catalogue and the models."""

from __future__ import annotations

import dataclasses

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch

from gpuinfer import dtypes, hardware
from gpuinfer.course import findings
from gpuinfer.course import exercises
from gpuinfer.course.exercises import chapter05_serving as serving_exercises
from gpuinfer.hardware import devices, mig_slices
from gpuinfer.measure import fusion, reference
from gpuinfer.predict import (achievable, architectures, batching, colocation, llm,
                              mig_sizing, paged_kv, step_model, validation)

GB = 1e9
#: The exercises of this page (`check` answers each; `exercise_block` glues them).
EXERCISES = ("serving-gelu-unfused-bytes", "serving-h200-instances",
             "serving-h200-instances-tensorrt", "serving-kv-instance-bytes",
             "serving-decision-mig-profile")


def fusion_block(table, n, dtype, accelerator, *, gpu_elements, gpu_dtype="fp16") -> dict:
    """The fusion section's values from the page's measured `table` (rows unfused, fused;
    columns "MB moved", "ms", "GB/s"), `n` elements of `dtype` on `accelerator` (the
    catalogue entry), and the largest L2 of the catalogue's GPUs beside one intermediate
    of the page's GPU size (`gpu_elements` of `gpu_dtype`), both in MiB."""
    u, f = table.iloc[0], table.iloc[1]
    roof_pct = 100 * f["GB/s"] * 1e9 / accelerator.bandwidth   # the fused kernel, of the roof
    lead = (f"Here the fused kernel moved {f['GB/s']:,.1f} GB/s, {roof_pct:.0f}% of the "
            f"{accelerator.bandwidth / 1e9:,.0f} GB/s the catalogue lists for {accelerator.name}")
    l2 = {a.name: a.cache_bytes for a in map(hardware.get, devices.names())
          if a.kind == "gpu" and a.cache_bytes}
    l2_top = max(l2, key=l2.get)
    return {"fusion_bytes_ratio": u["MB moved"] / f["MB moved"],
            "fusion_time_ratio": u["ms"] / f["ms"],
            "fusion_n_mib": n * dtypes.bytes_per_element(dtype) / 2**20,
            "fusion_roof": lead,
            "fusion_verdict": findings.fusion(u["MB moved"] / f["MB moved"], u["ms"] / f["ms"]),
            "fusion_gpu_mib": gpu_elements * dtypes.bytes_per_element(gpu_dtype) / 2**20,
            "fusion_l2_top": l2_top,
            "fusion_l2_top_mib": l2[l2_top] / 2**20}


def _candidates(n: int) -> str:
    return f"{n} candidate" + ("" if n == 1 else "s")


def tuning_block(tuned) -> dict:
    """The tuning section's values from `tuning.autotune`'s table (fastest first, with a
    "direct" candidate and its "direct (control)" twin): the control's gap and spread (%),
    the distinct candidates (the control is the same kernel as "direct", never counted),
    how many stand clear of the fastest by the page's rule (the medians' gap over the
    larger IQR), the spread of the search, and two sentences that follow the numbers: the
    ranking (tune_ranking) and the verdict (tune_verdict). Where the control fails the
    same rule, the rule cannot be trusted on this run and neither sentence ranks."""
    by = tuned.set_index("candidate")
    a, b = by.loc["direct"], by.loc["direct (control)"]
    gap_pct = 100 * abs(a["seconds"] - b["seconds"]) / min(a["seconds"], b["seconds"])
    iqr_pct = 100 * max(a["iqr_s"], b["iqr_s"]) / a["seconds"]
    # The page's rule, applied to one kernel timed twice: a gap over the larger IQR would
    # call the kernel "really slower" than itself.
    control_fails = abs(a["seconds"] - b["seconds"]) > max(a["iqr_s"], b["iqr_s"])
    real = tuned[tuned["candidate"] != "direct (control)"].reset_index(drop=True)
    best, others = real.iloc[0], real.iloc[1:]
    # "Really slower" than the fastest: the medians' gap exceeds the larger of the two IQRs.
    distinct = int((others["seconds"] - best["seconds"]
                    > np.maximum(others["iqr_s"], best["iqr_s"])).sum())
    n_other = len(others)
    if control_fails or iqr_pct > 50:
        ranking = (f"by that rule this run's control would be really slower than itself (its "
                   f"medians {gap_pct:.1f}% apart, its IQR {iqr_pct:.1f}%), so on this run "
                   "the rule cannot be trusted and the table ranks nothing")
        verdict = (f"On this run the noise swamps the comparison: the control differs from "
                   f"itself by {gap_pct:.1f}% against an IQR of {iqr_pct:.1f}% of its median, "
                   "so the ranking above is luck. On a quiet machine or a GPU the same search "
                   "can tell real alternatives apart")
    else:
        if n_other == 0:
            ranking = "this run has no other candidate to rank"
        elif distinct == n_other == 1:
            ranking = ("this run ranks the other candidate as really slower than the "
                       "fastest; it does not tie with it")
        elif distinct == n_other:
            ranking = (f"this run ranks {'both' if n_other == 2 else f'all {n_other}'} "
                       "other candidates as really slower than the fastest; none ties with it")
        elif distinct == 0 and n_other == 1:
            ranking = "this run ranks the other candidate as tied with the fastest"
        elif distinct == 0:
            ranking = (f"this run ranks none of the other {n_other} candidates as really "
                       "slower: each ties with the fastest")
        else:
            ranking = (f"this run ranks {distinct} of the other {_candidates(n_other)} as "
                       f"really slower; the remaining {n_other - distinct} tie"
                       f"{'s' if n_other - distinct == 1 else ''} with the fastest")
        if distinct:
            verdict = (f"On this run the control agrees with itself to within its IQR "
                       f"({gap_pct:.1f}% against {iqr_pct:.1f}%), and {_candidates(distinct)} "
                       f"stand{'s' if distinct == 1 else ''} clear of the noise: real "
                       "alternatives (a different algorithm, a different layout) can differ "
                       "by more than it, which is what a search is for")
        else:
            verdict = ("On this run the control agrees with itself, but every candidate ties "
                       "with the fastest: for this shape on this device, a search buys nothing")
    return {"tune_control_gap_pct": gap_pct, "tune_control_iqr_pct": iqr_pct,
            "tune_n_candidates": len(real), "tune_n_distinct": distinct,
            "tune_spread": float(tuned["speedup_vs_slowest"].iloc[0]),
            "tune_ranking": ranking, "tune_verdict": verdict}


def gptfast_block() -> dict:
    """gpt-fast's int8 weight-only tokens/s over its bf16 (torch.compile) tokens/s,
    Llama-2-7B on an A100 (the README's table, in `reference`)."""
    q, dec = reference.published("quantised"), reference.published("decode")
    int8_tps = q.loc[q["weight_format"] == "int8", "value"].iloc[0]
    bf16_tps = dec.loc[dec["what"] == "gpt-fast, torch.compile", "value"].iloc[0]
    return {"gptfast_int8_gain": int8_tps / bf16_tps}


def memory_block() -> dict:
    """An A100 80GB's bytes: its 80 GiB of HBM, what CUDA reports (catalogue), and the
    reserve `colocation.memory_plan` holds back (GiB)."""
    a100 = hardware.get("A100 80GB")
    return {"a100_bytes": a100.memory_bytes, "a100_gib": a100.memory_bytes / 2**30,
            "a100_hbm_bytes": 80 * 2**30, "reserve_gib": llm.DEFAULT_RESERVE_BYTES / 2**30}


def plan_block(deployments_for, accelerator="A100 80GB", chat_model="llama-3-8b") -> dict:
    """The memory plan's values for the page's `deployments_for(backend, chat_instances=2)`
    (the chat deployment first) on `accelerator`: the plan's use and capacity (GB), the chat
    model's weights and KV cache, a third chat instance (and the same plan counted as 80e9
    bytes with nothing held back, as "80 GB" read in SI units), and how many chat
    instances fit with the PyTorch and TensorRT backends. `chat_model`: the chat
    deployment's model (its KV cache per token, kB)."""
    plan = colocation.memory_plan(deployments_for("pytorch"), accelerator)
    chat = plan.deployments[0]
    three = colocation.memory_plan(deployments_for("pytorch", chat_instances=3), accelerator)
    marketing = dataclasses.replace(hardware.get(accelerator), memory_bytes=80e9)
    three_marketing = colocation.memory_plan(deployments_for("pytorch", chat_instances=3),
                                             marketing, reserve_bytes=0)
    trt_chat, *trt_others = deployments_for("tensorrt")
    return {"plan_used_gb": plan.used_bytes / GB,
            "plan_capacity_gb": plan.capacity_bytes / GB,
            "chat_weights_gb": chat.weight_bytes / GB,
            "chat_kv_gb": chat.kv_cache_bytes / GB,
            "kv_per_token_kb": step_model.kv_cache_bytes_per_token(chat_model) / 1e3,
            "three_free_gb": three.free_bytes / GB,
            "three_marketing_short_mb": -three_marketing.free_bytes / 1e6,
            "chat_max_a100": colocation.max_instances(chat, accelerator, others=plan.deployments[1:]),
            "chat_max_a100_trt": colocation.max_instances(trt_chat, accelerator, others=trt_others),
            "trt_instance_gb": trt_chat.per_instance_bytes / GB}


def engine_fraction_block(chat, accelerator="A100 80GB", chat_model="llama-3-8b") -> dict:
    """LLM engines' memory fractions beside the plan's `chat` deployment on `accelerator`: vLLM's
    default fraction (and two instances'), what a TensorRT-LLM instance's cache (0.9 of
    what is free after its weights, `chat_model` in fp16) leaves (GB), and the fraction one
    chat instance needs."""
    acc = hardware.get(accelerator)
    # TensorRT-LLM's first instance: its cache takes 0.9 of what is free after its weights.
    trt_cache = paged_kv.kv_cache_budget(chat_model, acc, free_gpu_memory_fraction=0.9)
    return {"eng_vllm_default": paged_kv.VLLM_GPU_MEMORY_UTILIZATION,
            "eng_two_vllm": 2 * paged_kv.VLLM_GPU_MEMORY_UTILIZATION,
            "eng_trt_left_gb": (acc.memory_bytes - chat.weight_bytes
                                - llm.DEFAULT_RESERVE_BYTES - trt_cache) / GB,
            "eng_chat_fraction": colocation.engine_memory_fraction(chat, acc)}


def instances_block(step_one, step_two, instances, model, out_tokens, batch=32) -> dict:
    """One instance at `batch` against two at half: each setup's step (ms) from the page's
    `step_one(b)` and `step_two(b)`, the request rates full batches of `out_tokens`-token
    replies sustain, the weights a decode step reads (all but the embedding table, GB),
    and the served rates at the highest offered load of the simulated `instances` table."""
    sat_one = batch / (out_tokens * step_one(batch))          # full batches, requests/s
    sat_two = batch / (out_tokens * step_two(batch))
    # What a decode step reads: every weight but the embedding table (a gather of rows).
    read = step_model.weight_bytes(model) - 2 * architectures.get(model).embedding_params
    last = instances.iloc[-1]
    return {"inst_step_one_ms": step_one(batch) * 1e3, "inst_step_two_ms": step_two(batch) * 1e3,
            "inst_sat_one": sat_one, "inst_sat_two": sat_two, "inst_sat_ratio": sat_one / sat_two,
            "inst_weights_gb": read / GB,
            "inst_top_rate": float(instances.index[-1]),
            "inst_top_one": last[("served/s", "1 x 32")],
            "inst_top_two": last[("served/s", "2 x 16")]}


def contention_block(contention, service_s, rate_a, max_batch=64) -> dict:
    """Two embedding models on one GPU: model A's p99 alone and at B's highest load, one
    model's p99 at that load, the GPU's busy share alone (%), and the saturation rate and
    batch-1 time of `service_s` (batch -> seconds)."""
    c0, c_top = contention.iloc[0], contention.iloc[-1]
    return {"rate_a": rate_a, "a_p99_alone": c0["A p99 (ms)"],
            "b_top": float(contention.index[-1]), "a_p99_top": c_top["A p99 (ms)"],
            "one_p99_top": c_top["one model p99 (ms)"], "busy_alone": c0["GPU busy"] * 100,
            "emb_sat": batching.saturation_throughput(service_s, max_batch),
            "emb_batch1_ms": service_s(1) * 1e3}



def mig_block(model="llama-3-8b", accelerator="H100 SXM", context=2048, dtype="int4") -> dict:
    """Seven users of one `model` (`dtype` weights, one sequence of `context` tokens each):
    seven 1g.10gb slices of `accelerator` against the whole card serving the seven in one batch,
    and against seven different models run in turn on the whole card. On the ceiling
    (`llm.decode_step_s`) and on the achievable model (fitted on whole GPUs: on a slice an
    extrapolation), with the validation rows' intervals (`validation.choice`) and the
    sentences that follow the order of the options; and the slices' SM counts."""
    whole = hardware.get(accelerator)
    part = mig_slices.mig_slice(accelerator, "1g.10gb")
    profiles = mig_slices.mig_profiles(accelerator)
    per_gpu = int(profiles.loc["1g.10gb", "max_instances"])
    tpot_slice = llm.decode_step_s(model, part, 1, context, dtype)
    slice_gpu_tps = per_gpu / tpot_slice
    tpot_whole = llm.decode_step_s(model, whole, 7, context, dtype)
    out = {"mig_slice_tpot_ms": tpot_slice * 1e3,
           "mig_slice_user_tps": 1e3 / (tpot_slice * 1e3),
           "mig_slice_gpu_tps": slice_gpu_tps,
           "mig_whole_tpot_ms": tpot_whole * 1e3,
           "mig_whole_user_tps": 1 / tpot_whole,
           "mig_whole_gpu_tps": 7 / tpot_whole,
           "mig_ratio": 7 / tpot_whole / slice_gpu_tps}
    # The achievable model beside (fitted on whole GPUs: on a slice an extrapolation).
    slice_a = achievable.decode_step_s(model, part, 1, context, dtype)
    whole_a = achievable.decode_step_s(model, whole, 7, context, dtype)
    # Within the model's error (dense-throughput rows, higher wins): whole GPU against slices.
    mig = validation.choice(7 / whole_a, 7 / slice_a, "dense throughput", per="rate")
    out.update({"mig_slice_tpot_ms_ach": slice_a * 1e3, "mig_whole_tpot_ms_ach": whole_a * 1e3,
                "mig_ratio_ach": (7 / whole_a) / (7 / slice_a),
                "mig_whole_tps_ach": 7 / whole_a, "mig_whole_tps_lo": mig["low"],
                "mig_whole_tps_hi": mig["high"], "mig_slices_tps_ach": 7 / slice_a,
                "mig_whole_verdict": (
                    "inside that range: measure both before choosing" if mig["flips"] else
                    "below that range: the whole GPU stays ahead within the model's error")})
    # Seven different models (fine-tunes) on the whole GPU cannot batch: each round of seven
    # batch-1 steps reads seven sets of weights (and, achievable, pays seven fixed costs).
    step_one_model = llm.decode_step_s(model, whole, 1, context, dtype)
    serial_a = 7 / (7 * achievable.decode_step_s(model, whole, 1, context, dtype))
    slices_win_a = 7 / slice_a > serial_a
    slices_win_c = slice_gpu_tps > 7 / (7 * step_one_model)
    best, other = (7 / slice_a, serial_a) if slices_win_a else (serial_a, 7 / slice_a)
    models = validation.choice(best, other, "batch-1", per="rate")
    other_lo, other_hi = validation.interval(other, "batch-1", per="rate")
    order = ("the seven slices ahead by {:.1f} times: the whole GPU runs the seven steps one "
             "after another, each paying the fixed cost of a step, while the slices pay theirs "
             "side by side" if slices_win_a else
             "the whole GPU ahead by {:.1f} times: reading each model through the whole bus "
             "outweighs paying the fixed cost of a step seven times in turn").format(best / other)
    order += (", the opposite of the ceiling's order, which has no fixed cost"
              if slices_win_a != slices_win_c else ", the order the ceiling gives too")
    sms = profiles["sm_count"]
    out.update({
        "mig_seven_models_tps": 7 / (7 * step_one_model),      # 7 tokens per 7 steps
        "mig_seven_models_tps_ach": serial_a,
        "mig_models_best_lo": models["low"], "mig_models_best_hi": models["high"],
        "mig_models_other_lo": other_lo, "mig_models_other_hi": other_hi,
        "mig_models_order": order,
        "mig_models_verdict": (
            "close enough that the order could change within the model's error: measure both "
            "before choosing" if models["flips"] else
            "apart, so the order holds within the model's error; a slice is still an "
            "extrapolation of a model fitted on whole GPUs, so measure one slice before "
            "committing"),
        "mig_models_clause": (
            "For several different models that each fit a slice it buys throughput as well: "
            "the slices run their steps side by side where the whole GPU runs them in turn"
            if slices_win_a else
            "It pays where tenants must not share, or where several different small models "
            "would each leave a whole GPU idle"),
        "mig_1g_sms": sms["1g.10gb"], "mig_card_sms": sms["7g.80gb"],
        "mig_1g_pct": 100 * sms["1g.10gb"] / sms["7g.80gb"],
        "mig_stranded_sms": sms["7g.80gb"] - 7 * sms["1g.10gb"],
        "mig_int4_weights_gb": step_model.weight_bytes(model, dtype) / GB,
        "mig_kv_seq_gb": context * step_model.kv_cache_bytes_per_token(model) / GB})
    return out


def fit_block(fit) -> dict:
    """The MIG sizing table's values (`mig_sizing.mig_options` for the page's batch): how
    many sequences 1g.20gb holds, the achievable and ceiling steps of 3g.40gb and 7g.80gb
    (ms), and 3g.40gb's step where 80% of published batched dense measurements fall."""
    out = {"fit_1g20_max": float(fit.loc["1g.20gb", "max_batch"])}
    for key, profile in (("3g40", "3g.40gb"), ("7g", "7g.80gb")):
        out[f"fit_{key}_tpot"] = fit.loc[profile, "tpot_s"] * 1e3              # achievable
        out[f"fit_{key}_ceil"] = fit.loc[profile, "tpot_ceiling_s"] * 1e3      # the roofline's
    lo, hi = validation.interval(fit.loc["3g.40gb", "tpot_s"], "dense throughput", per="cost")
    out.update({"fit_3g40_tpot_lo": lo * 1e3, "fit_3g40_tpot_hi": hi * 1e3})
    return out


def decision_pick(achievable_=True) -> str:
    """The decision exercise's profile (`serving_exercises.DECISION`) on the achievable
    model, or on the roofline's ceiling with achievable_=False."""
    d = serving_exercises.DECISION
    return mig_sizing.smallest_mig_profile(
        d["model"], d["gpu"], d["batch"], d["context"], d["tpot_s"], d["dtype"],
        compute_dtype=d["compute_dtype"], achievable=achievable_)


def exercise_block() -> dict:
    """The values the problems' statements and solutions quote: each exercise's answer
    (ans_*), the instance-counting arithmetic on an H200 (GB), Llama-3-8B's KV cache, and
    the MIG decision's profiles (steps in ms, their intervals on the dense-throughput rows)
    with a sentence on whether the choice could flip within the model's error."""
    out = {"ans_" + name.replace("-", "_"): float(exercises.get(name).answer())
           for name in EXERCISES}
    h200 = hardware.get("H200")
    w7 = step_model.weight_bytes("llama-2-7b")
    usable = h200.memory_bytes - llm.DEFAULT_RESERVE_BYTES
    kv8 = step_model.kv_cache_bytes_per_token("llama-3-8b")
    out.update({
        "ex_gelu_fused_bytes": fusion.elementwise_chain_bytes(
            1_000_000, fusion.GELU_TANH_OP_INPUTS, "fp16", fused=True),
        "ex_7b_weights_gb": w7 / GB, "ex_h200_bytes": h200.memory_bytes,
        "ex_h200_usable_gb": usable / GB, "ex_7b_instance_gb": (w7 + 2e9) / GB,
        "ex_trt_left_gb": (usable - w7) / GB, "ex_8b_kv_per_token": kv8,
        "ex_8b_weights_gb": step_model.weight_bytes("llama-3-8b") / GB,
        "ex_8b_kv_gb": 16 * 4096 * kv8 / GB})
    d = serving_exercises.DECISION
    opts = mig_sizing.mig_options(d["model"], accelerator=d["gpu"], batch=d["batch"],
                                  context=d["context"], dtype=d["dtype"],
                                  compute_dtype=d["compute_dtype"])
    out.update({
        "dec_tpot_target_ms": d["tpot_s"] * 1e3,
        "dec_1g10_max": float(opts.loc["1g.10gb", "max_batch"]),
        "dec_1g20_max": float(opts.loc["1g.20gb", "max_batch"]),
        "dec_1g20_tpot": opts.loc["1g.20gb", "tpot_s"] * 1e3,
        "dec_3g40_tpot": opts.loc["3g.40gb", "tpot_s"] * 1e3,
        "dec_1g20_tpot_ceil": opts.loc["1g.20gb", "tpot_ceiling_s"] * 1e3,
        "dec_3g40_tpot_ceil": opts.loc["3g.40gb", "tpot_ceiling_s"] * 1e3,
        "dec_bw_pct": 100 * achievable.FITTED.bandwidth,
        "dec_step_ms": achievable.FITTED.step_s * 1e3})
    # The decision within the model's error: could a smaller profile meet the target, or
    # the chosen one miss it?
    unc = serving_exercises.decision_intervals()
    chosen = decision_pick(True)
    smaller = unc.loc[:chosen].drop(index=chosen)
    for key, profile in (("1g20", "1g.20gb"), ("3g40", "3g.40gb")):
        out[f"dec_{key}_tpot_lo"] = unc.loc[profile, "tpot_low_s"] * 1e3
        out[f"dec_{key}_tpot_hi"] = unc.loc[profile, "tpot_high_s"] * 1e3
    smaller_meets, chosen_misses = bool(smaller["could_meet"].any()), bool(unc.loc[chosen, "could_miss"])
    # A flip up goes to the next profile with a shorter step (the same memory slices give
    # the same step: 4g.40gb is 3g.40gb's).
    later = unc.loc[chosen:].drop(index=chosen)
    faster = later[later["tpot_s"] < unc.loc[chosen, "tpot_s"]]
    up = faster.index[0] if len(faster) else None
    if smaller_meets and chosen_misses:
        out["dec_mig_verdict"] = (
            f"the target lies inside both {smaller.index[smaller['could_meet']][0]}'s range "
            f"and {chosen}'s: the choice could move either way within the model's error, "
            "so measure first")
    elif smaller_meets:
        out["dec_mig_verdict"] = (
            f"the target lies inside {smaller.index[smaller['could_meet']][0]}'s range (it "
            "could meet it): the choice could move down within the model's error, so "
            "measure first")
    elif chosen_misses:
        out["dec_mig_verdict"] = (
            f"the target lies inside {chosen}'s range (it could miss it)"
            + (", while no smaller profile's range reaches down to it" if len(smaller) else "")
            + (f": the choice can only move up, to {up}, so measure first" if up
               else ": no profile is sure to meet it, so measure first"))
    else:
        out["dec_mig_verdict"] = (
            "the target lies between the two ranges: the choice holds within the model's "
            "error, though the slice itself is an extrapolation")
    n1 = int(opts.loc["1g.10gb", "max_batch"])
    out["dec_1g10_holds"] = f"{n1} such sequence{'' if n1 == 1 else 's'}"
    return out


# --- figures: each returns its matplotlib Figure ------------------------------------------

def fusion_figure(table, accelerator, device_name, n, dtype):
    """The fusion table's predicted (bytes over `accelerator`'s bandwidth) and measured
    times per call, log scale; `device_name`: where the measurement ran."""
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    pos = np.arange(len(table))
    ax.bar(pos - 0.2, table["predicted ms"], 0.4, color="white", edgecolor="black",
           hatch="//", label=f"bytes / {accelerator.name} datasheet bandwidth")
    ax.bar(pos + 0.2, table["ms"], 0.4, color="dimgrey", edgecolor="black",
           label=f"measured here ({device_name})")
    ax.set_xticks(pos, table.index, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("time per call (ms, log)")
    ax.set_title(f"tanh-GELU over {n:,} {dtype} elements", fontsize=9)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def tuning_figure(tuned, title):
    """Each candidate's median and interquartile range (`tuning.autotune`'s table), log."""
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    pos = np.arange(len(tuned))
    ax.barh(pos - 0.2, tuned["seconds"] * 1e6, 0.4, color="dimgrey", edgecolor="black",
            label="median")
    ax.barh(pos + 0.2, tuned["iqr_s"] * 1e6, 0.4, color="white", edgecolor="black",
            hatch="//", label="interquartile range")
    ax.set_yticks(pos, tuned["candidate"], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("time per call (µs, log)")
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.grid(True, axis="x", alpha=0.3)
    return fig


def plan_figure(plan, gpus=("L4", "A100 80GB", "H200")):
    """The memory plan's deployments stacked by kind (weights, KV cache, workspace, GB),
    against each of `gpus`' bytes less the reserve."""
    table = plan.table().set_index("deployment")
    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    left = 0.0
    parts = [("weights_bytes", "white", "//"), ("kv_cache_bytes", "lightgrey", ".."),
             ("workspace_bytes", "dimgrey", "")]
    for _, row in table.iterrows():
        for col, colour, hatch in parts:
            if row[col] > 0:
                ax.barh(0, row[col] / GB, height=0.5, left=left, color=colour,
                        edgecolor="black", hatch=hatch)
                left += row[col] / GB
    handles = [Patch(facecolor=c, edgecolor="black", hatch=h,
                     label=col[:-6].replace("_", " ")) for col, c, h in parts]
    for g, ls in zip(gpus, [":", "--", "-"]):
        usable = colocation.memory_plan(plan.deployments, g).capacity_bytes / GB
        ax.axvline(usable, color="black", ls=ls, lw=1)
        ax.text(usable, 1.01, g, transform=ax.get_xaxis_transform(), fontsize=8, ha="center")
    ax.set_yticks([])
    ax.set_ylim(-0.5, 0.6)
    ax.set_xlabel("GB (1e9 bytes); lines: each GPU's bytes less the reserve")
    ax.set_title("the example plan (PyTorch backend) against three GPUs", fontsize=9, pad=14)
    ax.legend(handles=handles, fontsize=8, loc="lower right")
    return fig


def instances_figure(instances, title):
    """p99 request latency against offered load, one instance against two (log)."""
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    labels = {"1 x 32": "one instance, batch <= 32", "2 x 16": "two instances, batch <= 16 each"}
    for setup, style in [("1 x 32", "o-"), ("2 x 16", "s--")]:
        ax.plot(instances.index, instances[("p99 (s)", setup)], style, color="black",
                mfc="white", label=labels[setup])
    ax.set_yscale("log")
    ax.set_xlabel("offered load (chat requests/s, 256 output tokens each)")
    ax.set_ylabel("p99 request latency (s, log)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def contention_figure(contention, title):
    """Model A's p99 as model B's load grows, beside one model serving both loads."""
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    ax.plot(contention.index, contention["A p99 (ms)"], "o-", color="black", mfc="white",
            label="model A's p99, model B on the same GPU")
    ax.plot(contention.index, contention["one model p99 (ms)"], "s--", color="black",
            label="p99 if one model served both loads")
    ax.set_xlabel("model B's load (requests/s)")
    ax.set_ylabel("p99 latency (ms)")
    ax.set_title(title, fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return fig
