"""What `chapters/02_decode_kv_cache` computes for its tables, figures and prose: one
function a table, figure or block of glued values, each returning {glue_name: value} (or
the numbers a figure draws). The formulas live in `predict` and `hardware`; the tests are
in `tests/test_pages_chapter02.py`."""

import dataclasses

import numpy as np
import pandas as pd

from gpuinfer import dtypes, hardware
from gpuinfer.course.exercises import chapter02_decode_kv_cache as decode_exercises
from gpuinfer.course.exercises import check, get, names
from gpuinfer.hardware import measured_rates
from gpuinfer.measure import reference
from gpuinfer.predict import (achievable, architectures, llm, llm_serving, paged_kv, search,
                              step_model, validation)

#: The chapter's running example (chapter 1's): Llama-2-7B on an A100 80GB.
MODEL, GPU = "llama-2-7b", "A100 80GB"
#: The GPUs of its memory and phase tables: Colab's free tier, a server, a big one.
GPUS = ("T4", "A100 80GB", "H200")
#: FlashMLA's deep dive: DeepSeek's H800s throttled to ~1,600 MHz give "~865 TFlops", and the
#: kernel reaches up to 660 TFLOP/s
#: (https://github.com/deepseek-ai/FlashMLA/blob/main/docs/20250422-new-kernel-deep-dive.md).
FLASHMLA_THROTTLED_FLOPS, FLASHMLA_BEST_FLOPS = 865e12, 660e12
#: The share of the card vLLM leaves unused by default (1 - gpu_memory_utilization).
VLLM_UNUSED = 1 - paged_kv.VLLM_GPU_MEMORY_UTILIZATION


def phase_values(prompt_tokens: int = 2048) -> dict:
    """The two phases' floors for a `prompt_tokens` prompt (`llm.prefill_s`, and
    `llm.decode_step_s` at batch 1 with the prompt as context): on the A100 the TTFT (ms),
    prefill per token (us), TPOT (ms) and a decoded token's cost over a prefilled one's, and
    that ratio on a T4 and an H200."""
    def floors(gpu):
        prefill_s = llm.prefill_s(MODEL, gpu, prompt_tokens=prompt_tokens)
        return prefill_s, llm.decode_step_s(MODEL, gpu, batch=1, context=prompt_tokens)

    prefill_s, decode_s = floors(GPU)
    values = {"ph_ttft_ms": prefill_s * 1e3, "ph_prefill_us": prefill_s / prompt_tokens * 1e6,
              "ph_tpot_ms": decode_s * 1e3, "ph_ratio": decode_s / (prefill_s / prompt_tokens)}
    for gpu, key in (("T4", "ph_t4_ratio"), ("H200", "ph_h200_ratio")):
        prefill_s, decode_s = floors(gpu)
        values[key] = decode_s / (prefill_s / prompt_tokens)
    return values


def batch1_step(context: int = 2048) -> dict:
    """The batch-1 step with `context` tokens cached: attention's share (%) and bytes (MB),
    the weight matmuls' memory and compute times (ms) and their ratio, the step (ms), its
    ceiling (tokens/s) and the A100's ridge."""
    b1 = llm.decode_step_breakdown(MODEL, GPU, batch=1, context=context)
    lin = b1.loc["linear"]
    return {"b1_attn_share_pct": 100 * b1.loc["attention", "share"],
            "b1_attn_mb": b1.loc["attention", "bytes"] / 1e6,
            "b1_linear_memory_ms": lin["memory_s"] * 1e3,
            "b1_linear_compute_ms": lin["compute_s"] * 1e3,
            "b1_ratio": lin["memory_s"] / lin["compute_s"],
            "b1_step_ms": b1["seconds"].sum() * 1e3,
            "b1_tps": 1 / b1["seconds"].sum(),
            "a100_ridge": hardware.get(GPU).ridge_point("fp16")}


def crossover_context(model: str, batch: int) -> float:
    """The context (tokens a sequence) at which a batch's KV cache reads as many bytes as
    the step's weights: weights' bytes / (batch x KV bytes a token)."""
    weights = llm.decode_step_bytes(model, batch=batch, context=0)
    return weights / (batch * step_model.kv_cache_bytes_per_token(model))


def kv_crossover(batch: int = 16) -> dict:
    """Where the KV cache overtakes the weights at `batch` (Llama-2-7B, Llama-3-8B, and
    Llama-2-7B at batch 1: tokens), and Llama-2-7B's per-sequence ceiling at `batch` with an
    empty cache and with 4,096 tokens (tokens/s)."""
    cross_l2 = crossover_context("llama-2-7b", batch)
    return {"kv_batch": batch, "cross_l2": cross_l2,
            "cross_l3": crossover_context("llama-3-8b", batch),
            "cross_l2_b1": cross_l2 * batch,
            "tps_16_4k_per_seq": llm.decode_ceiling(MODEL, GPU, batch=batch, context=4096) / batch,
            "tps_16_0_per_seq": llm.decode_ceiling(MODEL, GPU, batch=batch, context=0) / batch}


def kv_bytes(context: int = 4096) -> dict:
    """KV cache a token (KiB) and a `context`-token sequence (GB) for Llama-2-7B, Llama-3-8B
    and Llama-3-70B in fp16, the query-head bug's factor, and DeepSeek-V3's latent cache in
    bf16."""
    values = {}
    for name, key in (("llama-2-7b", "l2"), ("llama-3-8b", "l3"), ("llama-3-70b", "l370")):
        m = architectures.get(name)
        right = step_model.kv_cache_bytes_per_token(m, "fp16")
        wrong = step_model.kv_cache_bytes_per_token(dataclasses.replace(m, n_kv_heads=m.n_heads), "fp16")
        values[f"kv_{key}_kib"] = right / 2**10
        if key != "l370":
            values[f"kv_{key}_gb_4k"] = context * right / 1e9
        if key != "l2":
            values[f"kv_{key}_bug"] = wrong / right
    dsv3 = architectures.get("deepseek-v3")
    dsv3_kv = step_model.kv_cache_bytes_per_token(dsv3, "bf16")
    values.update({"dsv3_heads": dsv3.n_heads, "dsv3_kv_kib": dsv3_kv / 2**10,
                   "dsv3_kv_gb_4k": context * dsv3_kv / 1e9})
    return values


def memory_fit() -> dict:
    """What memory holds: the A100's and T4's bytes, the reserve, the 4,096-token sequences
    that fit (`llm.max_batch`) per GPU and model, Llama-3-8B's weights, the T4's room and the
    longest Llama-2-7B sequence it holds, and the A100 under vLLM's default utilisation."""
    a100, t4 = hardware.get("A100 80GB"), hardware.get("T4")
    reserve = llm.DEFAULT_RESERVE_BYTES
    values = {"a100_mem_gb": a100.memory_bytes / 1e9, "a100_mem_gib": a100.memory_bytes / 2**30,
              "t4_mem_gb": t4.memory_bytes / 1e9, "reserve_gib": reserve / 2**30}
    for gpu, gkey in (("A100 80GB", "a100"), ("H200", "h200")):
        for model, mkey in (("llama-2-7b", "l2"), ("llama-3-8b", "l3")):
            values[f"mb_{gkey}_{mkey}"] = llm.max_batch(model, gpu, 4096)
    values.update({
        "l3_gb": step_model.weight_bytes("llama-3-8b") / 1e9,
        "t4_free_gb": (t4.memory_bytes - reserve) / 1e9,
        "mb_h200_l3_128k": llm.max_batch("llama-3-8b", "H200", 131072),
        "vllm_util_pct": 100 * paged_kv.VLLM_GPU_MEMORY_UTILIZATION,
        "vllm_unused_pct": 100 * VLLM_UNUSED,
        "vllm_unused_gb": VLLM_UNUSED * a100.memory_bytes / 1e9,
        "mb_a100_l2_vllm": llm.max_batch("llama-2-7b", a100, 4096,
                                         reserve_bytes=VLLM_UNUSED * a100.memory_bytes),
        "t4_max_context": llm.max_context(MODEL, "T4", batch=1)})
    return values



def attention_intensity() -> dict:
    """Attention's intensity at batch 256 (1,024 tokens) for Llama-3-8B and -70B, MLA's
    (one and two query tokens, TP8), a Hopper GPU's datasheet and throttled ridges and
    MLA's roof, and the weight matmuls' compute-bound batches on an A100."""
    hopper = hardware.get("H100 SXM")
    values = {key: llm.decode_step_breakdown(m, GPU, batch=256, context=1024).loc["attention", "intensity"]
              for key, m in (("ai_l3_256", "llama-3-8b"), ("ai_l370", "llama-3-70b"))}
    ds = architectures.get("deepseek-v3")
    mla = step_model.mla_decode_intensity(ds.n_heads, ds.kv_lora_rank, ds.qk_rope_head_dim)
    values.update({"mla_intensity": mla, "mla_mtp_intensity": 2 * mla,
                   "mla_tp8_intensity": step_model.mla_decode_intensity(
                       ds.n_heads, ds.kv_lora_rank, ds.qk_rope_head_dim, n_devices=8),
                   "hopper_ridge": hopper.ridge_point("bf16"),
                   "hopper_throttled_ridge": FLASHMLA_THROTTLED_FLOPS / hopper.bandwidth,
                   "mla_roof_tflops": mla * hopper.bandwidth / 1e12,
                   "cb_a100_l2": llm.compute_bound_batch("llama-2-7b", GPU),
                   "cb_a100_l3": llm.compute_bound_batch("llama-3-8b", GPU)})
    return values


def dominant_contexts() -> pd.DataFrame:
    """The context (tokens a sequence) beyond which attention takes more of a step than the
    weight matmuls at their compute-bound batch (`llm.attention_dominant_context`): index
    model (Llama-2-7B, Llama-3-8B, Llama-3-70B), a column a GPU (A100 80GB, H100 SXM, H200)."""
    return pd.DataFrame({gpu: {m: llm.attention_dominant_context(m, gpu)
                               for m in ("llama-2-7b", "llama-3-8b", "llama-3-70b")}
                         for gpu in ("A100 80GB", "H100 SXM", "H200")})


def attention_takeover() -> dict:
    """Where attention takes over (`dominant_contexts`: a few pairs, and its range per
    model), Llama-3-70B on an H200 (weights, memory, the batch that fits at that context
    against the compute-bound one, vLLM's budget, FP8 weights) and two mixtures of experts
    on an H100 in bf16."""
    h200, dominant = hardware.get("H200"), dominant_contexts()
    values = {"dom_a100_l2": dominant.loc["llama-2-7b", "A100 80GB"],
              "dom_a100_l3": dominant.loc["llama-3-8b", "A100 80GB"],
              "dom_h100_l3": dominant.loc["llama-3-8b", "H100 SXM"],
              "dom_h200_l3": dominant.loc["llama-3-8b", "H200"],
              "dom_h200_l370": dominant.loc["llama-3-70b", "H200"]}
    for m, key in (("llama-2-7b", "l2"), ("llama-3-8b", "l3"), ("llama-3-70b", "l370")):
        values[f"dom_{key}_min"] = dominant.loc[m].min()
        values[f"dom_{key}_max"] = dominant.loc[m].max()
    context = int(round(dominant.loc["llama-3-70b", "H200"]))
    values.update({
        "l370_weights_gb": step_model.weight_bytes("llama-3-70b") / 1e9,
        "h200_mem_gb": h200.memory_bytes / 1e9,
        "mb_h200_l370": llm.max_batch("llama-3-70b", "H200", context),
        "cb_h200_l370": llm.compute_bound_batch("llama-3-70b", "H200"),
        "h200_vllm_budget_gb": (1 - VLLM_UNUSED) * h200.memory_bytes / 1e9,
        "l370_min_utilisation": step_model.weight_bytes("llama-3-70b") / h200.memory_bytes,
        "l370_fp8_gb": step_model.weight_bytes("llama-3-70b", "fp8_e4m3") / 1e9})
    for m, key in (("mixtral-8x7b", "mixtral"), ("deepseek-v3", "dsv3")):
        values[f"dom_{key}_h100"] = llm.attention_dominant_context(m, "H100 SXM", dtype="bf16")
    return values


def attention_split(model: str, contexts) -> pd.DataFrame:
    """The figure's curves: at `model`'s compute-bound batch on the A100, the weight matmuls'
    (linear + lm_head) and attention's time a step (ms) at each context (index)."""
    b = int(llm.compute_bound_batch(model, GPU))
    split = [llm.decode_step_breakdown(model, GPU, b, int(c))["seconds"] for c in contexts]
    return pd.DataFrame({"matmuls": [(s["linear"] + s["lm_head"]) * 1e3 for s in split],
                         "attention": [s["attention"] * 1e3 for s in split]},
                        index=pd.Index(contexts, name="context"))


def overlap_at(batch: int = 512, context: int = 128) -> dict:
    """The per-operation sum against perfect overlap at `batch` and `context` (tokens/s,
    the gain in %), the step's matmuls and attention (ms), both steps (ms), and the
    achievable model's tokens/s with its dense-throughput range."""
    per_op = llm.decode_ceiling(MODEL, GPU, batch=batch, context=context)
    pooled = batch / llm.decode_step_time_overlapped(MODEL, GPU, batch=batch, context=context)
    ach = achievable.decode_tokens_per_s(MODEL, GPU, batch, context)
    s = llm.decode_step_breakdown(MODEL, GPU, batch, context)
    lo, hi = validation.interval(ach, "dense throughput")
    return {"b512_per_op": per_op, "b512_pooled": pooled, "b512_gain_pct": 100 * (pooled / per_op - 1),
            "b512_linear_ms": s.loc["linear", "seconds"] * 1e3,
            "b512_attn_ms": s.loc["attention", "seconds"] * 1e3,
            "b512_sum_ms": s["seconds"].sum() * 1e3, "b512_pooled_ms": batch / pooled * 1e3,
            "b512_ach": ach, "b512_ach_lo": lo, "b512_ach_hi": hi}


def throughput_curves(context: int, points: int = 60) -> pd.DataFrame:
    """The figure's curves at `context`: total tokens/s on the per-operation sum
    ("summed"), under perfect overlap ("overlap") and on the achievable model ("achievable"),
    at batches from 1 to the batch that fits (index, `points` on a log scale)."""
    cap = llm.max_batch(MODEL, GPU, context)
    batch = np.unique(np.geomspace(1, cap, points).round().astype(int))
    ctx = np.full_like(batch, context)
    return pd.DataFrame(
        {"summed": llm.decode_ceiling(MODEL, GPU, batch, ctx),
         "overlap": batch / llm.decode_step_time_overlapped(MODEL, GPU, batch, ctx),
         "achievable": [achievable.decode_tokens_per_s(MODEL, GPU, int(b), context) for b in batch]},
        index=pd.Index(batch, name="batch"))


def full_batch() -> dict:
    """The batch that fits at 128 and 4,096 tokens and what it reaches (tokens/s: the sum,
    perfect overlap, a sequence's share, one sequence alone, the achievable model)."""
    mb_128, mb_4k = llm.max_batch(MODEL, GPU, 128), llm.max_batch(MODEL, GPU, 4096)
    return {"mb_128": mb_128, "mb_4k": mb_4k,
            "tps_max_128": llm.decode_ceiling(MODEL, GPU, mb_128, 128),
            "tps_pooled_128": mb_128 / llm.decode_step_time_overlapped(MODEL, GPU, mb_128, 128),
            "tps_max_4k": llm.decode_ceiling(MODEL, GPU, mb_4k, 4096),
            "tps_seq_max_4k": llm.decode_ceiling(MODEL, GPU, mb_4k, 4096) / mb_4k,
            "tps_b1_4k": llm.decode_ceiling(MODEL, GPU, 1, 4096),
            "ach_max_128": achievable.decode_tokens_per_s(MODEL, GPU, mb_128, 128),
            "ach_max_4k": achievable.decode_tokens_per_s(MODEL, GPU, mb_4k, 4096)}


def _eager_tokens_per_s() -> float:
    """The PyTorch team's gpt-fast post: the same Llama-2-7B run eagerly (tokens/s)."""
    blog = reference.published("decode").query("source == 'pytorch2023gptfastblog'")
    return float(blog.loc[blog["what"].str.contains("eager"), "value"].iloc[0])


def _fmt_verdict(fmt_choice: dict) -> str:
    """The sentence on the T4's format choice within the model's error."""
    int8_range = f"int8's, {fmt_choice['other_low']:.1f} to {fmt_choice['other_high']:.1f}"
    if fmt_choice["flips"]:
        return (f"{int8_range}, overlaps it. The absolute rates are uncertain; their ratio "
                "less so: the model's errors for two formats on the same engine and GPU move "
                "together, so the two swap places only where an engine falls shorter of the "
                "model on int4 than on int8; measure both")
    return f"{int8_range}, lies below it: int4 stays the faster within the model's error"


def gpt_fast_anchors() -> dict:
    """gpt-fast's batch-1 runs per weight format against the A100's ceilings: tokens/s, MBU
    (datasheet and reached bandwidth), MFU, what a step's fixed cost accounts for in the
    quantised runs' lower MBU, int4's bytes per weight with and without a zero point, the
    eager run, the achievable model's worst miss, and a T4's format choice with its range."""
    a100 = hardware.get(GPU)
    gf = reference.GPT_FAST_TOKENS_PER_S
    bw_reached = measured_rates.achievable(GPU)["bandwidth_bytes_per_s"]
    mbu = {f: llm.mbu(MODEL, GPU, tps, dtype=f) for f, tps in gf.items()}
    ceiling = {f: llm.decode_ceiling(MODEL, GPU, dtype=f) for f in gf}
    model = {f: achievable.decode_tokens_per_s(MODEL, GPU, 1, 0, f) for f in gf}
    values = {"gf_bf16": gf["bf16"], "gf_int8": gf["int8"], "gf_int4": gf["int4"],
              "a100_bw_reached_gbs": bw_reached / 1e9,
              "gf_mbu_pct": 100 * mbu["bf16"],
              "gf_reached_pct": 100 * (mbu["bf16"] * a100.bandwidth / bw_reached),
              "gf_mfu_pct": 100 * llm.mfu(MODEL, GPU, gf["bf16"], dtype="bf16"),
              "gf_mbu_256_pct": 100 * llm.mbu(MODEL, GPU, gf["bf16"], context=256),
              "gf_int8_mbu_pct": 100 * mbu["int8"], "gf_int4_mbu_pct": 100 * mbu["int4"],
              "gf_int4_speedup": gf["int4"] / gf["bf16"]}
    # A step's fixed cost (the achievable model's step_s and the gaps between kernels) does
    # not shrink with its bytes: keep bf16's efficiency on the rest of its step, add only
    # that fixed cost, and see how much of the quantised runs' lost MBU it accounts for.
    fixed_s = float(achievable.overheads(0.0, architectures.get(MODEL).n_layers, achievable.FITTED))
    bf16_eff = (1 / ceiling["bf16"]) / (1 / gf["bf16"] - fixed_s)
    values.update({"fit_fixed_ms": 1e3 * fixed_s, "gf_bf16_eff_pct": 100 * bf16_eff})
    share = []
    for f in ("int8", "int4"):
        mbu_fixed = llm.mbu(MODEL, GPU, 1 / (1 / ceiling[f] / bf16_eff + fixed_s), dtype=f)
        lost, fixed = mbu["bf16"] - mbu[f], mbu["bf16"] - mbu_fixed
        values.update({f"gf_{f}_fixed_mbu_pct": 100 * mbu_fixed, f"gf_{f}_lost_pts": 100 * lost,
                       f"gf_{f}_fixed_pts": 100 * fixed})
        share.append(fixed / lost)
    values["gf_fixed_share"] = "most" if min(share) > 0.5 else "part"
    eager = _eager_tokens_per_s()
    values.update({
        # gpt-fast's int4 stores a bf16 scale and zero point per 32 weights: "int4-g32-zp".
        "gf_int4_asym_mbu_pct": 100 * llm.mbu(MODEL, GPU, gf["int4"], dtype="int4-g32-zp"),
        "int4_factor": 2 / dtypes.bytes_per_element("int4"),
        "int4_asym_factor": 2 / dtypes.bytes_per_element("int4-g32-zp"),
        "gf_eager_tps": eager,
        "gf_eager_mbu_pct": 100 * llm.mbu(MODEL, GPU, eager, dtype="bf16"),
        "model_worst_pct": 100 * max(abs(model[f] / gf[f] - 1) for f in gf)})
    t4 = {f: {"model": achievable.decode_tokens_per_s(MODEL, "T4", 1, 0, f),
              "ceiling": llm.decode_ceiling(MODEL, "T4", dtype=f)} for f in ("fp16", "int8", "int4")}
    for f in ("int8", "int4"):
        for k in ("model", "ceiling"):
            values[f"t4_{f}_x_{k}"] = t4[f][k] / t4["fp16"][k]
    values.update({"t4_fp16_model": t4["fp16"]["model"],
                   "frac_l3_8b_h100": achievable.fraction_of_ceiling("llama-3-8b", "H100 SXM"),
                   "frac_l2_70b_h200": achievable.fraction_of_ceiling("llama-2-70b", "H200"),
                   "t4_int4_model": t4["int4"]["model"], "t4_int4_ceiling": t4["int4"]["ceiling"]})
    fmt_choice = validation.choice(t4["int4"]["model"], t4["int8"]["model"], "batch-1", per="rate")
    values.update({"t4_int4_lo": fmt_choice["low"], "t4_int4_hi": fmt_choice["high"],
                   "t4_fmt_verdict": _fmt_verdict(fmt_choice)})
    return values


def problems_answered() -> bool:
    """Whether every registered answer of the chapter's problems passes its own `check`."""
    return all(check(name, get(name).answer())
               for name in names() if get(name).where == decode_exercises.WHERE)


def problem_values() -> dict:
    """The numbers the first five problems' statements and solutions quote (KV bytes, the
    query-head bug, sequences that fit on an H200, an MBU by hand, attention's takeover for
    Llama-2-13B)."""
    h200, h100 = hardware.get("H200"), hardware.get("H100 SXM")
    m70 = dataclasses.replace(architectures.get("llama-3-70b"), n_kv_heads=64)
    step = llm.decode_step_bytes("llama-3-8b", batch=32, context=2048)
    m13_bytes = llm.decode_step_bytes("llama-2-13b", batch=1, context=0)
    cb_13b = llm.compute_bound_batch("llama-2-13b", GPU)
    kv70, bug = get("decode-kv-bytes-llama3-70b").answer(), get("decode-query-head-bug-llama3-70b").answer()
    return {"ans_kv70": kv70, "ans_kv70_kib": kv70 / 2**10, "ans_bug": bug, "ans_bug_gb": bug / 1e9,
            "ans_true_gb": 8192 * step_model.kv_cache_bytes_per_token("llama-3-70b") / 1e9,
            "ans_bug_fit": llm.max_batch(m70, "H200", 8192, "int8"),
            "ans_true_fit": llm.max_batch("llama-3-70b", "H200", 8192, "int8"),
            "ans_h200_gb": h200.memory_bytes / 1e9,
            "ans_reserve_gb": llm.DEFAULT_RESERVE_BYTES / 1e9,
            "ans_seq_gb": 8192 * step_model.kv_cache_bytes_per_token("llama-3-8b") / 1e9,
            "ans_mb": get("decode-max-batch-h200-llama3-8b-8k").answer(),
            "ans_w_gb": llm.decode_step_bytes("llama-3-8b", batch=32, context=0) / 1e9,
            "ans_step_gb": step / 1e9,
            "ans_kv_gb": 32 * 2048 * step_model.kv_cache_bytes_per_token("llama-3-8b") / 1e9,
            "ans_tbs": step * 1600 / 32 / 1e12,
            "ans_h100_tbs": h100.bandwidth / 1e12,
            "ans_mbu": get("decode-mbu-llama3-8b-h100").answer(),
            "ans_mfu_pct": 100 * llm.mfu("llama-3-8b", "H100 SXM", 1600, batch=32, context=2048),
            "ans_dom": get("decode-attention-dominant-context-13b-a100").answer(),
            "cb_a100_13b": cb_13b,
            "ans_dom_w_gb": m13_bytes / 1e9,
            "ans_dom_rule": m13_bytes / (cb_13b * step_model.kv_cache_bytes_per_token("llama-2-13b"))}


def batch_with_chunk(chunk: int) -> int:
    """The largest batch (up to the decision's answer) whose step, with a `chunk`-token
    slice of a 4,096-token prompt beside it (`llm_serving.chunk_step_s`: the chunk that
    ends the prompt, the worst step), still meets the decision's TPOT; 0 if none does."""
    d = decode_exercises
    top = achievable.max_batch_within(d.DECISION_MODEL, d.DECISION_GPU, d.DECISION_CONTEXT,
                                      d.DECISION_TPOT_S)
    return search.largest_meeting(lambda n: llm_serving.chunk_step_s(
        d.DECISION_MODEL, d.DECISION_GPU, n + chunk, decodes=n,
        decode_context=d.DECISION_CONTEXT, prompt_tokens=d.DECISION_CONTEXT)
        <= d.DECISION_TPOT_S, 1, top)


def _range_verdict(dec_range: dict) -> str:
    """The sentence on the decision's batch range against memory and the ceiling."""
    fits, ceiling = dec_range["fits"], dec_range["ceiling"]
    bind = (f"Memory's {fits} sequences lie inside that range: with a faster engine memory, "
            "not the objective, would bind" if dec_range["memory_binds"] else
            f"Memory's {fits} sequences lie above it: the objective binds either way")
    ceil = (f"the ceiling's {ceiling} lies inside it" if dec_range["ceiling_inside"] else
            f"the ceiling's {ceiling} lies above it too")
    return f"{bind}, and {ceil}"


def decision(chunk: int = 256) -> dict:
    """The decision problem's numbers: the TPOT, the batch an engine meets it at
    (`achievable.max_batch_within`) against memory and the ceiling, the hand rule's terms,
    the batch range within the model's error and its verdict, and the batch that meets it
    with a `chunk`-token prefill chunk in every step."""
    d, fit = decode_exercises, achievable.FITTED
    a100 = hardware.get(d.DECISION_GPU)
    args = (d.DECISION_MODEL, d.DECISION_GPU, d.DECISION_CONTEXT, d.DECISION_TPOT_S)
    dec_b = achievable.max_batch_within(*args)
    fits = llm.max_batch(d.DECISION_MODEL, d.DECISION_GPU, d.DECISION_CONTEXT)
    ceil_b = achievable.max_batch_within(*args, achievable=False)
    fixed_s = fit.step_s + architectures.get(d.DECISION_MODEL).n_layers * fit.kernels_per_layer * fit.kernel_gap_s
    matmul_bytes = llm.decode_step_bytes("llama-3-8b", batch=1, context=0)
    dec_range = d.decision_batch_range()
    lo, hi = validation.interval(1.0, d.DECISION_REGIME)
    return {
        "ans_dec_w_gb": matmul_bytes / 1e9,
        "ans_tpot_ms": d.DECISION_TPOT_S * 1e3,
        "ans_dec_batch": get("decode-decision-batch-tpot").answer(),
        "ans_dec_fits": fits,
        "ans_dec_fits_tpot_ms": 1e3 * achievable.decode_step_s(d.DECISION_MODEL, d.DECISION_GPU, fits,
                                                               d.DECISION_CONTEXT),
        "ans_dec_fixed_ms": fixed_s * 1e3,
        "ans_dec_bw_frac": fit.bandwidth,
        "ans_dec_rule": (((d.DECISION_TPOT_S - fixed_s) * fit.bandwidth * a100.bandwidth - matmul_bytes)
                         / (d.DECISION_CONTEXT * step_model.kv_cache_bytes_per_token(d.DECISION_MODEL))),
        "ans_dec_tps": achievable.decode_tokens_per_s(d.DECISION_MODEL, d.DECISION_GPU, dec_b,
                                                      d.DECISION_CONTEXT),
        "ans_dec_ceil_batch": ceil_b,
        "ans_dec_ceil_tps": llm.decode_ceiling(d.DECISION_MODEL, d.DECISION_GPU, ceil_b, d.DECISION_CONTEXT),
        "ans_dec_ceil_at_b_tps": llm.decode_ceiling(d.DECISION_MODEL, d.DECISION_GPU, dec_b,
                                                    d.DECISION_CONTEXT),
        "ans_dec_ratio_lo": lo, "ans_dec_ratio_hi": hi,
        "ans_dec_batch_lo": float(dec_range["low"]), "ans_dec_batch_hi": float(dec_range["high"]),
        "ans_dec_range_verdict": _range_verdict(dec_range),
        "dec_a100_bw_gbs": a100.bandwidth / 1e9,
        "ans_dec_chunk": chunk,
        "ans_dec_chunk_batch": batch_with_chunk(chunk),
        "ans_dec_chunk_step_ms": 1e3 * llm_serving.chunk_step_s(
            d.DECISION_MODEL, d.DECISION_GPU, dec_b + chunk, decodes=dec_b,
            decode_context=d.DECISION_CONTEXT, prompt_tokens=d.DECISION_CONTEXT)}
