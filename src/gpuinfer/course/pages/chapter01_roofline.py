"""What `chapters/01_roofline` computes for its tables, figures and prose: one function a
table, figure or block of glued values, each returning {glue_name: value} (and a DataFrame
where the page draws one). The formulas live in `predict` and `hardware`; the tests are in
`tests/test_pages_chapter01.py`."""

import dataclasses

import pandas as pd

from gpuinfer import dtypes, hardware
from gpuinfer.course.exercises import chapter01_roofline as roofline_exercises
from gpuinfer.course.exercises import check, get, names
from gpuinfer.hardware import measured_rates
from gpuinfer.hardware.devices import Accelerator
from gpuinfer.measure import reference
from gpuinfer.predict import achievable, architectures, llm, roofline, step_model, validation

# --- a T4's clocks and sustained rates (the section on datasheet ceilings) -----------------
#: An MLPerf BERT run on an AWS T4 set to 1590 MHz "dropping down to ~900 MHz":
#: https://github.com/mlcommons/inference_results_v0.5/issues/20
T4_MLPERF_MHZ = 900
#: A continuous cuBLAS fp16 4096^3 matmul on a T4, attributed to power capping at 70 W:
#: https://forums.developer.nvidia.com/t/about-gpu-peak-performance/264462
T4_SUSTAINED_FP16_FLOPS = 24e12
#: The share of its datasheet bandwidth a T4 is assumed to move: the catalogue holds no
#: measured T4 bandwidth; copies on other cards reach 75-90% of theirs (the A100 gpt-fast
#: measured: 83%). An assumption, not a T4 measurement: lab 1 measures yours.
T4_BW_FRACTIONS = (0.75, 0.90)
#: The platform comparison's workload: Llama-3-70B in FP8 W8A8, 4,096 tokens, a 30 ms TPOT.
CHOICE_MODEL, CHOICE_CONTEXT, CHOICE_TPOT_S = "llama-3-70b", 4096, 0.030
CHOICE_KW = dict(dtype="fp8_e4m3", compute_dtype="fp8_e4m3")


def _t4_rates() -> dict:
    """The T4's compute rates (FLOP/s: datasheet, at the base clock, at MLPerf's clock,
    sustained, best short run) and its assumed bandwidth range (B/s, low and high)."""
    t4 = hardware.get("T4")
    boost_mhz, base_mhz = t4.boost_clock_hz / 1e6, t4.base_clock_hz / 1e6
    return {"base": t4.peak_flops("fp16") * base_mhz / boost_mhz,
            "mlperf": t4.peak_flops("fp16") * T4_MLPERF_MHZ / boost_mhz,
            "sustained": T4_SUSTAINED_FP16_FLOPS,
            "best": measured_rates.achievable("T4")["matmul_fp16_flops"],
            "bw_low": T4_BW_FRACTIONS[0] * t4.bandwidth,
            "bw_high": T4_BW_FRACTIONS[1] * t4.bandwidth}


def ridge_points() -> dict:
    """The datasheet figures and fp16 ridge points (FLOP/byte) the first section quotes: T4,
    H100 SXM, H200, and the A100's dense and sparse (2:4, twice the dense) ones."""
    t4, a100, h100 = hardware.get("T4"), hardware.get("A100 80GB"), hardware.get("H100 SXM")
    return {"t4_bw_gbs": t4.bandwidth / 1e9,
            "t4_peak_tflops": t4.peak_flops("fp16") / 1e12,
            "t4_ridge": t4.ridge_point("fp16"),
            "h100_bw_tbs": h100.bandwidth / 1e12,
            "h100_peak_tflops": h100.peak_flops("fp16") / 1e12,
            "h100_ridge": h100.ridge_point("fp16"),
            "h200_ridge": hardware.get("H200").ridge_point("fp16"),
            "a100_peak_tflops": a100.peak_flops("fp16") / 1e12,
            "a100_sparse_tflops": 2 * a100.peak_flops("fp16") / 1e12,
            "a100_ridge": a100.ridge_point("fp16"),
            "a100_sparse_ridge": 2 * a100.ridge_point("fp16")}


def t4_practical_ridge() -> dict:
    """A T4's clocks, the compute rates they give (TFLOP/s), its assumed bandwidth range
    (GB/s) and the practical ridge's two ends (FLOP/byte, and as fractions of the
    datasheet's): the slowest compute over the most bandwidth, the fastest over the least."""
    t4, r = hardware.get("T4"), _t4_rates()
    low, high = r["sustained"] / r["bw_high"], r["best"] / r["bw_low"]
    return {"t4_tdp_w": t4.tdp_w,
            "t4_boost_mhz": t4.boost_clock_hz / 1e6,
            "t4_base_mhz": t4.base_clock_hz / 1e6,
            "t4_mlperf_mhz": T4_MLPERF_MHZ,
            "t4_base_tflops": r["base"] / 1e12,
            "t4_mlperf_tflops": r["mlperf"] / 1e12,
            "t4_sustained_tflops": r["sustained"] / 1e12,
            "t4_best_tflops": r["best"] / 1e12,
            "t4_bw_low_gbs": r["bw_low"] / 1e9,
            "t4_bw_high_gbs": r["bw_high"] / 1e9,
            "t4_sustained_ridge": low,
            "t4_best_ridge": high,
            "t4_ridge_low_frac": low / t4.ridge_point("fp16"),
            "t4_ridge_high_frac": high / t4.ridge_point("fp16")}


def reached_ceilings() -> dict:
    """What published measurements reach (`measured_rates.achievable`): the best matmul as
    a percentage of the A100's and H100's dense fp16 peaks, gpt-fast's A100 bandwidth (GB/s,
    and % of the datasheet) and the practical ridge they give (FLOP/byte)."""
    a100, h100 = hardware.get("A100 80GB"), hardware.get("H100 SXM")
    a100_got, h100_got = measured_rates.achievable("A100 80GB"), measured_rates.achievable("H100 SXM")
    a100_best = max(a100_got["matmul_fp16_flops"], a100_got["matmul_bf16_flops"])
    h100_best = max(h100_got["matmul_fp16_flops"], h100_got["matmul_bf16_flops"])
    a100_bw_reached = a100_got["bandwidth_bytes_per_s"]
    return {"a100_mamf_pct": 100 * a100_best / a100.peak_flops("fp16"),
            "h100_mamf_pct": 100 * h100_best / h100.peak_flops("fp16"),
            "a100_bw_reached_gbs": a100_bw_reached / 1e9,
            "a100_bw_reached_pct": 100 * a100_bw_reached / a100.bandwidth,
            "a100_ridge_reached": a100_got["ridge_point"]}


def format_ridges() -> dict:
    """Blackwell's and AMD's ridge points (FLOP/byte) format by format, and Blackwell
    Ultra's 4-bit ridge over its fp8 one."""
    values = {f"{key}_{fmt}_ridge": hardware.get(name).ridge_point(fmt)
              for name, key in (("B200", "b200"), ("GB300", "gb300"), ("MI355X", "mi355x"),
                                ("B300", "b300"))
              for fmt in ("fp16", "fp8", "fp4")}
    values["mi300x_fp8_ridge"] = hardware.get("MI300X").ridge_point("fp8")
    b300 = hardware.get("B300")
    values["b300_fp4_over_fp8"] = b300.ridge_point("fp4") / b300.ridge_point("fp8")
    return values


#: The L40S datasheet's fp16 tensor figure *with sparsity*, "362.05 | 733*" TFLOP/s, as
#: the first problem's statement prints it (the catalogue holds the dense 362).
L40S_SPARSE_FP16_FLOPS = 733e12
#: Small counts as a sentence writes them.
_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven",
          8: "eight", 9: "nine", 10: "ten"}


def _orders_verdict(lead: dict, amd: dict) -> str:
    """The sentence that says whether the two orders (`validation.choice`'s results for the
    leaders over the B200 and the MI300X over the H200) hold within the model's error."""
    where = {True: "inside", False: "below"}
    text = (f"The B200 lies {where[lead['flips']]} the leaders' range and the H200 "
            f"{where[amd['flips']]} the MI300X's")
    if lead["flips"] or amd["flips"]:
        return text + (": the absolute rates are uncertain; their ratio less so, since the two "
                       "predictions share the model's bias, and an order flips only where an "
                       "engine falls shorter of the model on one part than on the other, so "
                       "measure both before choosing on it")
    return text + ": both orders hold within the model's error"


def dense_throughput_rows() -> pd.DataFrame:
    """The validation rows (`validation.validation_errors`) of batched dense serving: the
    rows behind the "dense throughput" interval."""
    ve = validation.validation_errors()
    return ve[(ve["kind"] == "throughput") & ~ve["moe"]]


def platform_choice(choice: pd.DataFrame) -> dict:
    """The glued values of the platform comparison `choice` (the page's table: index GPU,
    columns "batch within 30 ms", "tokens/s per GPU", "80% low", "80% high", "ceiling
    tokens/s"): each part's speed, the B200 at 8 TB/s instead of 7.7, the matmul fractions
    and the MI300X's error, whether each order holds within the model's error, and what the
    dense-throughput range rests on (rows, TensorRT-LLM's share, sources)."""
    c = choice["tokens/s per GPU"]
    values = {"ch_mi355x_tps": float(c["MI355X"]), "ch_mi300x_tps": float(c["MI300X"]),
              "ch_h200_tps": float(c["H200"]), "ch_b200_tps": float(c["B200"]),
              "ch_mi355x_batch": float(choice.loc["MI355X", "batch within 30 ms"]),
              "ch_mi355x_lo": float(choice.loc["MI355X", "80% low"]),
              "ch_mi355x_hi": float(choice.loc["MI355X", "80% high"]),
              "ch_mi355x_ceil": float(choice.loc["MI355X", "ceiling tokens/s"]),
              "ch_bw_frac": achievable.FITTED.bandwidth}
    # The B200 at the 8 TB/s of NVIDIA's HGX page (the catalogue's note) instead of 7.7.
    b200_8 = dataclasses.replace(hardware.get("B200"), bandwidth=8e12)
    b_8 = achievable.max_batch_within(CHOICE_MODEL, b200_8, CHOICE_CONTEXT, CHOICE_TPOT_S, **CHOICE_KW)
    tps_8 = achievable.decode_tokens_per_s(CHOICE_MODEL, b200_8, int(b_8), CHOICE_CONTEXT, **CHOICE_KW)
    values["ch_b200_8tb_tps"] = tps_8
    values["ch_b200_8tb_clause"] = ("level with the leaders" if abs(tps_8 / c["MI355X"] - 1) < 0.01
                                    else "still behind them" if tps_8 < c["MI355X"]
                                    else "ahead of them")
    mm = achievable.matmul_fractions().set_index(["accelerator", "format"])["fraction"]
    values["ch_mi300x_mm_pct"] = 100 * mm[("MI300X", "bf16")]
    values["ch_h100_mm_pct"] = 100 * mm[("H100 SXM", "bf16")]
    amd_err = validation.errors_by(validation.table(), "accelerator").loc["MI300X"]
    values["ch_mi300x_err_clause"] = (f"{'over' if amd_err['bias_pct'] > 0 else 'under'}-predicts "
                                      f"by a median {amd_err['median_pct']:.0f}% "
                                      f"({amd_err['n']:.0f} rows)")
    lead = validation.choice(c["MI355X"], c["B200"], "dense throughput", per="rate")
    amd = validation.choice(c["MI300X"], c["H200"], "dense throughput", per="rate")
    values["ch_mi300x_lo"], values["ch_mi300x_hi"] = amd["low"], amd["high"]
    values["ch_orders_verdict"] = _orders_verdict(lead, amd)
    dense = dense_throughput_rows()
    trt = dense["engine"] == "TensorRT-LLM"
    values["ch_dense_n"] = float(len(dense))
    values["ch_dense_trt_n"] = float(trt.sum())
    values["ch_dense_n_sources"] = float(dense["source"].nunique())
    amd_ratio = (dense["measured"] / dense["achievable"])[dense["accelerator"] == "MI300X"]
    values["ch_mi300x_ratio"] = float(amd_ratio.median())
    values["ch_mi300x_tput_rows"] = (f"{_WORDS.get(len(amd_ratio), str(len(amd_ratio)))} "
                                     f"throughput row{'' if len(amd_ratio) == 1 else 's'}")
    lo1 = validation.interval(1.0, "dense throughput")[0]
    values["ch_dense_lo_clause"] = (
        f"and the range's low end, {lo1:.2f} times the prediction, falls among them"
        if amd_ratio.min() <= lo1 <= amd_ratio.max() else
        f"against the range's low end of {lo1:.2f} times the prediction")
    return values


def weight_read(n_params: float, bytes_per_param: float, bandwidth_bytes_per_s: float) -> dict:
    """The weight-read example's prose: its weights (GB), the read's time (ms) and the
    ceilings at batch 1 and 16 (tokens/s, `llm.weight_read_ceiling`)."""
    weight_bytes = n_params * bytes_per_param
    return {"seed_weight_gb": weight_bytes / 1e9,
            "seed_step_ms": weight_bytes / bandwidth_bytes_per_s * 1e3,
            "seed_tps_b1": llm.weight_read_ceiling(n_params, bytes_per_param, bandwidth_bytes_per_s),
            "seed_tps_b16": llm.weight_read_ceiling(n_params, bytes_per_param,
                                                    bandwidth_bytes_per_s, batch=16)}


def moe_step_bytes() -> dict:
    """Mixtral-8x7B's experts (E, k), its bf16 weights (GB), the bytes a step reads at
    batch 1, 8 and 64 (GB, `step_model.step_weight_bytes`) and the experts batch 8 touches."""
    mix = architectures.get("mixtral-8x7b")
    values = {"mix_e": mix.n_experts, "mix_k": mix.experts_per_token,
              "mix_total_gb": step_model.weight_bytes(mix, "bf16") / 1e9,
              "mix_touch_b8": float(step_model.experts_touched(mix, 8))}
    for b in (1, 8, 64):
        values[f"mix_b{b}_gb"] = step_model.step_weight_bytes(mix, "bf16", tokens=b) / 1e9
    return values


def step_table() -> dict:
    """The batch-1 step of Llama-2-7B on an A100 80GB (empty cache): its time (ms), the
    weight matmuls' share (%), the embedding row's bytes (kB) against the table's (MB), the
    ceiling against every parameter read once (tokens/s), the model's size."""
    a100, llama = hardware.get("A100 80GB"), architectures.get("llama-2-7b")
    step = llm.decode_step_breakdown("llama-2-7b", "A100 80GB", batch=1, context=0)
    return {"llama_params_b": llama.n_params / 1e9,
            "llama_gb": step_model.weight_bytes(llama, "fp16") / 1e9,
            "step_ms": step["seconds"].sum() * 1e3,
            "linear_share_pct": 100 * step.loc["linear", "share"],
            "embed_row_kb": step.loc["embedding", "bytes"] / 1e3,
            "embed_table_mb": llama.embedding_params * dtypes.bytes_per_element("fp16") / 1e6,
            "a100_ceiling": llm.decode_ceiling(llama, a100),
            "a100_weight_read_ceiling": llm.weight_read_ceiling(llama.n_params, 2, a100.bandwidth)}


def gpt_fast_blog() -> dict:
    """The PyTorch team's gpt-fast post (`reference.published`): the same Llama-2-7B on the
    same A100, eager and compiled (tokens/s)."""
    blog = reference.published("decode").query("source == 'pytorch2023gptfastblog'")
    eager = blog["what"].str.contains("eager")
    return {"eager": float(blog.loc[eager, "value"].iloc[0]),
            "compiled": float(blog.loc[~eager, "value"].iloc[0])}


def gpt_fast_anchor() -> dict:
    """gpt-fast's batch-1 bf16 run against the A100's ceilings: tokens/s, % of the datasheet
    ceiling and of the ceiling at the bandwidth its card reached, the eager and compiled
    runs and their steps (ms), and the achievable model's batch-1 fraction of the ceiling
    for three model-GPU pairs."""
    a100 = hardware.get("A100 80GB")
    bw_reached = measured_rates.achievable("A100 80GB")["bandwidth_bytes_per_s"]
    ceiling = llm.decode_ceiling("llama-2-7b", a100)
    step_s = 1 / ceiling
    tps = reference.GPT_FAST_TOKENS_PER_S["bf16"]
    fraction = llm.mbu("llama-2-7b", a100, tps)
    blog = gpt_fast_blog()
    values = {"gpt_fast_tps": tps,
              "gpt_fast_pct": 100 * fraction,
              # At batch 1 every row is memory-bound, so the ceiling scales with the bandwidth.
              "gpt_fast_reached_pct": 100 * (fraction * a100.bandwidth / bw_reached),
              "a100_reached_ceiling": ceiling * bw_reached / a100.bandwidth,
              "gf_eager_tps": blog["eager"],
              "gf_compiled_tps": blog["compiled"],
              "gf_eager_step_ms": 1e3 / blog["eager"],
              "gf_step_ms": 1e3 / tps,
              "gf_eager_overhead_ms": 1e3 / blog["eager"] - step_s * 1e3,
              "a100_reached_step_ms": 1e3 / (ceiling * bw_reached / a100.bandwidth)}
    for key, model, gpu in (("l3_8b_h100", "llama-3-8b", "H100 SXM"),
                            ("l2_7b_a100", "llama-2-7b", "A100 80GB"),
                            ("l2_70b_h200", "llama-2-70b", "H200")):
        values[f"frac_{key}"] = achievable.fraction_of_ceiling(model, gpu)
    return values


def linear_intensity(batches=(1, 16, 64), formats=("fp16", "int8", "int4")) -> pd.DataFrame:
    """The weight matmuls' intensity (FLOP/byte) of Llama-2-7B's decode step on an A100
    80GB, empty cache (index batch, a column a weight format)."""
    return pd.DataFrame(
        {fmt: [llm.decode_step_breakdown("llama-2-7b", "A100 80GB", b, 0, fmt).loc["linear", "intensity"]
               for b in batches] for fmt in formats},
        index=pd.Index(list(batches), name="batch"))


def batch1_intensity() -> dict:
    """Batch-1 intensity of the weight matmuls per format (FLOP/byte), int4's factor
    (2 / bytes a weight) and the share (%) of an H100's and a T4's fp16 peak it allows."""
    table = linear_intensity(batches=(1,))
    values = {"int4_factor": 2 / dtypes.bytes_per_element("int4")}
    for fmt in table.columns:
        values[f"i_b1_{fmt}"] = table.loc[1, fmt]
    for key, name in (("h100", "H100 SXM"), ("t4", "T4")):
        acc = hardware.get(name)
        values[f"{key}_fraction_b1_pct"] = 100 * roofline.attainable_flops(
            table.loc[1, "fp16"], acc.peak_flops("fp16"), acc.bandwidth) / acc.peak_flops("fp16")
    return values


def t4_at(flops: float, bandwidth: float) -> Accelerator:
    """The T4 with every peak scaled to an fp16 matmul rate `flops` (FLOP/s, a lower clock)
    and `bandwidth` (B/s) in place of the datasheet's."""
    t4 = hardware.get("T4")
    scale = flops / t4.peak_flops("fp16")
    return dataclasses.replace(t4, peaks={k: v * scale for k, v in t4.peaks.items()},
                               bandwidth=bandwidth)


def compute_bound_batches(formats=("fp16", "int8", "int4")) -> dict:
    """Where the weight matmuls turn compute-bound (`llm.compute_bound_batch`, sequences):
    Llama-2-7B per GPU and weight format, the T4 at its practical ridge's two ends, FP8 W8A8
    on an H100, two mixtures of experts (and E/k), the same search on the achievable
    model's rates (`achievable.compute_bound_batch`) and those rates on an A100."""
    r = _t4_rates()
    values = {"t4_cb_sustained": llm.compute_bound_batch("llama-2-7b", t4_at(r["sustained"], r["bw_high"])),
              "t4_cb_best": llm.compute_bound_batch("llama-2-7b", t4_at(r["best"], r["bw_low"]))}
    for name in ("T4", "A100 80GB", "H100 SXM"):
        for fmt in formats:
            values[f"cb_{name.split()[0].lower()}_{fmt}"] = llm.compute_bound_batch("llama-2-7b", name, fmt)
    values["cb_h100_fp8"] = llm.compute_bound_batch("llama-2-7b", "H100 SXM", "fp8_e4m3",
                                                    compute_dtype="fp8_e4m3")
    for name, key in (("mixtral-8x7b", "mixtral"), ("deepseek-v3", "dsv3")):
        spec = architectures.get(name)
        values[f"cb_h100_{key}"] = llm.compute_bound_batch(name, "H100 SXM", "bf16")
        values["mix_ek" if key == "mixtral" else "dsv3_ek"] = spec.n_experts / spec.experts_per_token
    values["dsv3_bf16_tb"] = step_model.weight_bytes("deepseek-v3", "bf16") / 1e12
    values["cb_dsv3_over_dense"] = (llm.compute_bound_batch("deepseek-v3", "H100 SXM", "bf16")
                                    / llm.compute_bound_batch("llama-2-7b", "H100 SXM", "fp16"))
    for name in ("A100 80GB", "H100 SXM"):
        for fmt in formats:
            values[f"acb_{name.split()[0].lower()}_{fmt}"] = achievable.compute_bound_batch(
                "llama-2-7b", name, fmt)
    a100_roof = achievable.derated_accelerator("A100 80GB")
    values["acb_a100_mm_frac"] = a100_roof.peak_flops("fp16") / hardware.get("A100 80GB").peak_flops("fp16")
    values["acb_bw_frac"] = achievable.FITTED.bandwidth
    values["acb_a100_ridge"] = a100_roof.ridge_point("fp16")
    return values


def intensity_curves(batches) -> pd.DataFrame:
    """The figure's curves: the weight matmuls' intensity (FLOP/byte) of Llama-2-7B's decode
    step on an A100 80GB at each batch in `batches` (index), a column a weight format."""
    return linear_intensity(batches=[int(b) for b in batches])


def kv_fit() -> dict:
    """Llama-2-7B's fp16 KV cache per token (MiB), the A100's memory and the reserve (GiB),
    and the 1,024-token sequences that fit with fp16 and int8 weights (`llm.max_batch`)."""
    a100 = hardware.get("A100 80GB")
    return {"kv_per_token_mib": step_model.kv_cache_bytes_per_token("llama-2-7b", "fp16") / 2**20,
            "a100_mem_gib": a100.memory_bytes / 2**30,
            "reserve_gib": llm.DEFAULT_RESERVE_BYTES / 2**30,
            "fits_1k_fp16": llm.max_batch("llama-2-7b", a100, context=1024, dtype="fp16"),
            "fits_1k_int8": llm.max_batch("llama-2-7b", a100, context=1024, dtype="int8")}


def matmul_shape_values(shape_table: pd.DataFrame) -> dict:
    """The intensities the prose reads off the page's table of one 4096 x 4096 projection at
    five m (column "FLOP/byte"; rows 1, 3 and 4: decode at batch 1 and 256, a 2,048-token
    prefill) and the limit for huge m (k n / (k + n))."""
    d_model = architectures.get("llama-2-7b").d_model
    col = shape_table["FLOP/byte"]
    return {"i_decode_b1": col.iloc[0], "i_decode_b256": col.iloc[2], "i_prefill_2k": col.iloc[3],
            "i_mm_limit": roofline.matmul_intensity(10**9, d_model, d_model, "fp16")}


def problem_values() -> dict:
    """The problems' registered answers (`ans_` + name) and the numbers their statements and
    solutions quote (L40S, H200 rule of thumb, Llama-2-13B's sizes on an A100)."""
    values = {"ans_" + name.replace("-", "_"): float(get(name).answer())
              for name in names() if get(name).where == roofline_exercises.WHERE}
    a100, l40s = hardware.get("A100 80GB"), hardware.get("L40S")
    llama13 = architectures.get("llama-2-13b")
    values.update({
        "l40s_peak_tflops": l40s.peak_flops("fp16") / 1e12,
        "l40s_bw_gbs": l40s.bandwidth / 1e9,
        "l40s_sparse_tflops": L40S_SPARSE_FP16_FLOPS / 1e12,
        "l40s_sparse_ridge": L40S_SPARSE_FP16_FLOPS / l40s.bandwidth,
        "cb_13b_h200_rule": hardware.get("H200").ridge_point("fp16") * dtypes.bytes_per_element("int4") / 2,
        "llama13_params_b": llama13.n_params / 1e9,
        "llama13_gb": step_model.weight_bytes(llama13) / 1e9,
        "llama13_kv_per_token": step_model.kv_cache_bytes_per_token(llama13),
        "llama13_seq_gb": 2048 * step_model.kv_cache_bytes_per_token(llama13) / 1e9,
        "a100_mem_gb": a100.memory_bytes / 1e9,
        "reserve_gb": llm.DEFAULT_RESERVE_BYTES / 1e9,
        "cb_13b_a100": llm.compute_bound_batch(llama13, a100),
        "a100_bw_gbs": a100.bandwidth / 1e9})
    return values


def problems_answered() -> bool:
    """Whether every registered answer of the chapter's problems passes its own `check`."""
    return all(check(name, get(name).answer())
               for name in names() if get(name).where == roofline_exercises.WHERE)


def _rows(n: int) -> str:
    return "one row" if n == 1 else f"{n} rows"


def batch1_rows() -> pd.DataFrame:
    """The validation rows (`validation.validation_errors`) behind the decision's range: the
    batch-1 ones."""
    ve = validation.validation_errors()
    return ve[ve["kind"] == roofline_exercises.DECISION_REGIME]


def _uncertainty_verdict(unc: dict, slo: float) -> str:
    """The sentence on the decision within the model's error (`decision_uncertainty`)."""
    gpu, fmt = unc["runner_up"]
    speed = (f"The objective's {slo:.0f} tokens/s lies inside the speed's range (the card could "
             "miss it)" if unc["slo_inside"] else
             f"The objective's {slo:.0f} tokens/s lies below the speed's range (the card meets it "
             "even at the range's low end)")
    cost_text = (f"the runner-up, the {gpu} with {fmt} at {unc['cost_other']:.2f} USD, lies "
                 + ("inside the cost's range (the choice could flip)" if unc["cost_flips"]
                    else "outside the cost's range"))
    end = ("measure a T4 first" if unc["slo_inside"] or unc["cost_flips"]
           else "the choice holds within the model's error where it was checked (a T4 still "
                "wants a measurement)")
    return f"{speed}, and {cost_text}: {end}"


def decision() -> dict:
    """The decision problem's numbers (`roofline_exercises.decision_table`):
    each option's tokens/s, ceiling, fraction, cost and shortcut, prices and bandwidths, the
    hand derivation's bytes and fitted constants, the fixed cost's share of each step, the
    margin over the objective, the model's leave-one-source-out error, its batch-1 interval
    and the sentences that branch on them."""
    t = roofline_exercises.decision_table()
    slo, fit = roofline_exercises.SLO_TOKENS_PER_S, achievable.FITTED
    a100 = hardware.get("A100 80GB")
    values = {"slo_tps": slo,
              "decision_fraction": reference.gpt_fast_fraction("bf16"),
              "decision_fraction_int8": reference.gpt_fast_fraction("int8")}
    for (gpu, fmt), row in t.iterrows():
        key = f"dec_{gpu.lower()}_{fmt}"
        values[f"{key}_tps"] = row["tokens_per_s"]
        values[f"{key}_ceil"] = row["ceiling_tokens_per_s"]
        values[f"{key}_frac"] = row["fraction_of_ceiling"]
        values[f"{key}_usd"] = row["cost_per_million"]
        values[f"{key}_short"] = row["shortcut_tokens_per_s"]
    for gpu, price in t["price_per_hour"].groupby(level="GPU").first().items():
        values[f"dec_{gpu.lower()}_price"] = price
        values[f"dec_{gpu.lower()}_bw_gbs"] = hardware.get(gpu).bandwidth / 1e9
    for fmt in ("fp16", "int8"):
        values[f"dec_bytes_{fmt}_gb"] = llm.decode_step_bytes("llama-2-7b", 1, 0, fmt) / 1e9
    gaps_s = architectures.get("llama-2-7b").n_layers * fit.kernels_per_layer * fit.kernel_gap_s
    fixed_s = fit.step_s + gaps_s
    t4_step_s = 1 / t.loc[("T4", "int8"), "tokens_per_s"]
    a100_step_s = 1 / achievable.decode_tokens_per_s("llama-2-7b", a100, 1, 0, "int8")
    margin = t.loc[("T4", "int8"), "tokens_per_s"] / slo
    values.update({
        "fit_bw": fit.bandwidth, "fit_int8": fit.weight_only_fraction("int8"),
        "fit_step_ms": fit.step_s * 1e3, "fit_gaps_ms": gaps_s * 1e3,
        "dec_t4_step_ms": t4_step_s * 1e3, "dec_a100_int8_step_ms": a100_step_s * 1e3,
        "dec_fixed_t4_pct": 100 * fixed_s / t4_step_s,
        "dec_fixed_a100_pct": 100 * fixed_s / a100_step_s,
        "dec_a100_int8_frac": achievable.fraction_of_ceiling("llama-2-7b", a100, dtype="int8"),
        "dec_margin_pct": 100 * (margin - 1),
        "dec_shortfall_pct": 100 * (1 - 1 / margin)})
    # The model's error on a source it was not fitted on (chapter 7): the batch-1 rows.
    loso = validation.loso()
    loso_n, loso_median, loso_p90, _ = validation.summary(
        loso[(loso["pool"] == "fit") & (loso["kind"] == "batch-1")])
    short = 100 * (1 - 1 / margin)
    values.update({
        "dec_loso_b1_n": float(loso_n), "dec_loso_b1_median": loso_median,
        "dec_loso_b1_p90": loso_p90,
        "dec_loso_clause": (f"{loso_median / short:.1f} times that shortfall"
                            if loso_median > 1.05 * short else
                            "about that shortfall" if loso_median > 0.95 * short
                            else "less than that shortfall"),
        "gf_int8_speedup": reference.GPT_FAST_TOKENS_PER_S["int8"] / reference.GPT_FAST_TOKENS_PER_S["bf16"]})
    unc = roofline_exercises.decision_uncertainty(t)
    values["dec_b1_ratio_lo"], values["dec_b1_ratio_hi"] = validation.interval(
        1.0, roofline_exercises.DECISION_REGIME)
    values.update({"dec_t4_int8_lo": unc["rate_low"], "dec_t4_int8_hi": unc["rate_high"],
                   "dec_usd_lo": unc["cost_low"], "dec_usd_hi": unc["cost_high"],
                   "dec_uncertainty_verdict": _uncertainty_verdict(unc, slo)})
    b1 = batch1_rows()
    gf, mi = b1[b1["source"] == "gptfast2023"], b1[b1["source"] == "oraclemi300x2024"]
    values["dec_b1_sources"] = (
        f"two sources, each weighing half: gpt-fast's {_rows(len(gf))}, all on A100 80GBs "
        f"power-limited to 330 W ({gf['tp'].min()} to {gf['tp'].max()} GPUs a run), and "
        f"{_rows(len(mi))} of Oracle's vLLM runs on MI300Xs")
    return values
