"""What `chapters/09_llm_serving` computes for its tables, figures and prose: one function a
figure or block of glued values, each returning {glue_name: value}. The simulations the
reader sees (the traces, the goodput searches) run on the page; these functions read what
they returned, and everything else comes from `predict` and `hardware`. The tests are in
`tests/test_pages_chapter09.py`."""

from __future__ import annotations

import dataclasses
import functools

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from gpuinfer import hardware
from gpuinfer.course import exercises
from gpuinfer.course.exercises import chapter09_llm_serving as ex
from gpuinfer.hardware import device_links, measured_rates
from gpuinfer.predict import (achievable, architectures, batching, engine_step, llm,
                              llm_serving, llm_simulator, llm_slo, paged_kv, parallel,
                              speculative, step_model, validation)

#: The goodput search's grid: from its start it multiplies by 4, then halves the bracket's
#: logarithm until the bracket is within rel_tol (4^(1/32) at 0.05).
GRID_STEP = 4 ** (1 / 32)
#: The problems of this page, in the order the page lists them.
EXERCISES = ("llm-ttft-lone", "llm-chunk-budget", "llm-two-instances", "llm-mla-kv",
             "llm-spec-batch", "llm-prefix-hit-rate", "llm-routing-prefill-ratio",
             "llm-offload-breakeven", "llm-kv-transfer-ms")


def lone_block(lone, model, accelerator) -> dict:
    """The lone request's TTFT, TPOT and latency (`simulate_llm`'s one row), `accelerator`'s
    catalogue numbers (TFLOP/s, TB/s, GB and GiB, ridge), the weights a decode step reads
    (every weight but the embedding table, GB), and the achievable model's rates (%)."""
    r = lone.iloc[0]
    h100 = hardware.get(accelerator)
    best = measured_rates.achievable(accelerator)["matmul_bf16_flops"]        # MAMF, measured (cited)
    peak = h100.peak_flops("bf16")
    return {"lone_ttft_ms": r["ttft"] * 1e3, "lone_tpot_ms": r["tpot"] * 1e3,
            "lone_ratio": r["ttft"] / r["tpot"], "lone_latency_s": r["latency"],
            "h100_ridge": h100.ridge_point("fp16"),
            "h100_peak_tflops": h100.peak_flops("fp16") / 1e12,
            "h100_bw_tbs": h100.bandwidth / 1e12,
            "h100_mem_gb": h100.memory_bytes / 1e9,
            "h100_mem_gib": h100.memory_bytes / 2**30,      # what CUDA's total_memory reports
            # A decode step gathers one row of the embedding table: it reads every other weight.
            "decode_weights_gb": (step_model.weight_bytes(model)
                                  - 2 * architectures.get(model).embedding_params) / 1e9,
            "mamf_tflops": best / 1e12, "peak_tflops": peak / 1e12,
            "mamf_pct": 100 * best / peak,
            "ach_matmul_pct": 100 * achievable.FITTED.matmul_scale
            * achievable.matmul_fraction(accelerator, "fp16"),
            "ach_bw_pct": 100 * achievable.FITTED.bandwidth,
            "ach_step_ms": achievable.FITTED.step_s * 1e3}


def prefill_runs(steps):
    """Runs of prefill steps back to back (no decode between them) in a trace's `steps`
    (`simulate_llm(..., return_steps=True)`): a DataFrame with each run's steps (n),
    seconds (s) and prompt tokens (tokens). A running reply waits through a whole run."""
    prefilling = (steps["prefill_tokens"] > 0).to_numpy()
    run = np.cumsum(~prefilling)[prefilling]
    return steps[prefilling].groupby(run).agg(n=("seconds", "size"), s=("seconds", "sum"),
                                              tokens=("prefill_tokens", "sum"))


def load_block(load, whole_steps, rate, prefill_cap, cols) -> dict:
    """The two schedulers under load: `load` (summarize_llm's columns "whole" and "chunks of
    512"), each of `cols` in ms, the whole-prefill trace's longest step and longest run of
    prefill steps (`whole_steps`), at `rate` requests/s with `prefill_cap` tokens a step."""
    w, c = load["whole"], load["chunks of 512"]
    values = {}
    for key in cols:
        values[f"w_{key[:-2]}_ms"] = w[key] * 1e3
        values[f"c_{key[:-2]}_ms"] = c[key] * 1e3
    runs = prefill_runs(whole_steps)
    longest = runs.loc[runs["s"].idxmax()]
    return values | {"load_rate": rate, "v0_cap": float(prefill_cap),
                     "load_tokens_per_s": w["output_tokens_per_s"],
                     "w_longest_step_ms": whole_steps["seconds"].max() * 1e3,
                     "w_run_steps": float(longest["n"]), "w_run_ms": longest["s"] * 1e3,
                     "w_run_tokens": float(longest["tokens"])}


def steps_figure(runs, model, accelerator, rate, window_s=(20, 22)):
    """Two seconds of step durations (ms) for each scheduler's trace in `runs`
    ({name: (requests, steps)}), `window_s` since the first arrival."""
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for (name, (_, steps)), ls in zip(runs.items(), ["-", "--"]):
        w = steps[(steps["start"] > window_s[0]) & (steps["start"] < window_s[1])]
        ax.step(w["start"], w["seconds"] * 1e3, where="post", ls=ls, color="black", lw=1,
                label=name)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("time since the first arrival (s)")
    ax.set_ylabel("duration of each step (ms)")
    ax.set_title(f"{model}, {accelerator}, {rate:g} requests/s: two seconds of steps", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


#: The clause every overlap verdict carries (`validation.choice`: two intervals overlap).
CONSERVATIVE = ("a conservative check: the two predictions share the model's bias, so "
                "their ratio is better known than either")


def grid_steps(hi, lo) -> int:
    """How many steps of the goodput search's grid (GRID_STEP) separate rate `hi` from `lo`."""
    return round(np.log(hi / lo) / np.log(GRID_STEP))


def goodput_brackets(trace, search, chunks=(None, 512)) -> dict:
    """{(chunk or None, achievable): (lo, hi)}: the goodput search's bracket for `trace`
    (a `simulate_llm` partial) with whole prefills (None) or chunks, on the ceiling (False,
    searched from 8 requests/s) and the achievable model (True, from 4): the trace met
    the goal at lo and missed it at hi (`llm_slo.goodput_bracket`, `search` its keywords)."""
    return {(c, a): llm_slo.goodput_bracket(functools.partial(
        trace, prefill_chunk=c, achievable=a), **search, rate=4.0 if a else 8.0)
        for c in chunks for a in (False, True)}


def brackets_table(brackets, chunks=(None, 512)):
    """The brackets as the page shows them: "lo to hi" for each chunk size and model."""
    return pd.DataFrame({name: [f"{lo:.2f} to {hi:.2f}" for lo, hi in (brackets[(c, a)]
                                                                     for c in chunks)]
                         for name, a in [("ceiling", False), ("achievable", True)]},
                        index=["whole" if c is None else f"chunks of {c}" for c in chunks])


def chunk_table(trace, goodput, good, good_ach, model, accelerator,
                chunks=(None, 256, 512, 1024, 2048), prompt=4000):
    """For each chunk size: a lone `prompt`-token request's TTFT (ms) on the ceiling and
    the achievable model (`simulate_llm` at batch 1), and the trace's goodput on each
    (`goodput` of the `trace` partial; the sizes already searched, `good` and `good_ach`,
    are reused)."""
    def lone_ttft_ms(c, a):
        return 1e3 * llm_simulator.simulate_llm([0.0], [prompt], [1], model, accelerator,
                                                max_batch=1, prefill_chunk=c,
                                                achievable=a)["ttft"].iloc[0]
    rows = {}
    for c in chunks:
        good_c = good[c] if c in good else goodput(functools.partial(trace, prefill_chunk=c))
        good_c_ach = good_ach[c] if c in good_ach else goodput(
            functools.partial(trace, prefill_chunk=c, achievable=True), rate=4.0)
        rows["whole" if c is None else c] = {
            f"lone {prompt // 1000}k TTFT (ms), ceiling": lone_ttft_ms(c, False),
            f"lone {prompt // 1000}k TTFT (ms), achievable": lone_ttft_ms(c, True),
            "goodput, ceiling": good_c, "goodput, achievable": good_c_ach}
    return pd.DataFrame(rows).T.rename_axis("chunk (tokens)")


def goodput_block(brackets, ttft_slo_s, tpot_slo_s, goal) -> dict:
    """The goodput section: `brackets` {(chunk or None, achievable): (lo, hi)} from
    `llm_slo.goodput_bracket`, the objectives (s) and the attainment `goal`: the goodputs,
    the gain of chunks of 512 as a range, and the sentence about the search's grid."""
    good = {c: brackets[(c, False)][0] for c in (None, 512)}
    good_ach = {c: brackets[(c, True)][0] for c in (None, 512)}
    values = {"slo_ttft_ms": ttft_slo_s * 1e3, "slo_tpot_ms": tpot_slo_s * 1e3,
              "slo_goal_pct": 100 * goal,
              "good_whole": good[None], "good_512": good[512],
              "good_gain": good[512] / good[None],
              "good_whole_ach": good_ach[None], "good_512_ach": good_ach[512],
              "good_gain_ach": good_ach[512] / good_ach[None],
              "grid_pct": 100 * (GRID_STEP - 1)}
    for tag, a in (("", False), ("_ach", True)):
        (lo_w, hi_w), (lo_c, hi_c) = brackets[(None, a)], brackets[(512, a)]
        values[f"good_gain_lo{tag}"] = lo_c / hi_w
        values[f"good_gain_hi{tag}"] = hi_c / lo_w
        values[f"good_gain_steps{tag}"] = float(grid_steps(lo_c, lo_w))
    steps = [grid_steps(brackets[(512, a)][0], brackets[(None, a)][0]) for a in (False, True)]
    values["gain_grid_text"] = (
        f"Both gains come out as {steps[0]} steps of the grid, 4^({steps[0]}/32) = "
        f"{4 ** (steps[0] / 32):.3f}" + (" (the square root of 2) on both models: a value the "
                                         "grid makes exact, not a law" if steps[0] == 8 else
                                         ": a value the grid makes exact, not a law")
        if steps[0] == steps[1] else
        f"The gains come out as {steps[0]} and {steps[1]} steps of the grid: whole steps, "
        "whatever the true ratios are")
    return values


def overload_block(served, ttft_slo_s, tpot_slo_s, over=1.2) -> dict:
    """What fails just past the whole-prefill goodput: `served` (the page's trace at `over`
    x that goodput); the share of replies over the TPOT objective (%) and a sentence on the
    TTFT's."""
    late = (served["ttft"] > ttft_slo_s).mean()
    return {"over_pct": 100 * (over - 1),
            "over_tpot_pct": 100 * (served["tpot"] > tpot_slo_s).mean(),
            "over_ttft_text": f"none start later than {ttft_slo_s:g} s" if late == 0 else
            f"only {100 * late:.0f}% start later than {ttft_slo_s:g} s"}


def dense_error_block(good_ach) -> dict:
    """The achievable goodputs `good_ach` {None: whole, 512: chunks} with the model's error
    on dense throughput runs: the 80% interval of the ratio, chunks' range, and whether
    the two ranges (chunks', whole prefills') overlap."""
    dense_lo, dense_hi = validation.interval(1.0, "dense throughput")
    c_whole = validation.choice(good_ach[512], good_ach[None], "dense throughput", per="rate")
    return {"dense_ratio_lo": dense_lo, "dense_ratio_hi": dense_hi,
            "good_512_ach_lo": c_whole["low"], "good_512_ach_hi": c_whole["high"],
            "chunk_vs_whole_text": (
                f"whole prefills' range ({c_whole['other_low']:.1f} to "
                f"{c_whole['other_high']:.1f}) overlaps it: measure both before you settle the "
                f"scheduler ({CONSERVATIVE})" if c_whole["flips"] else
                f"whole prefills' range ({c_whole['other_low']:.1f} to "
                f"{c_whole['other_high']:.1f}) lies below it: chunking wins within the "
                "model's error")}


def itl_block(good_itl, itl_slo_s) -> dict:
    """The goodputs with an objective on the longest gap (`itl_slo_s`): `good_itl`
    {(chunk or None, achievable): requests/s}."""
    return {"itl_slo_ms": itl_slo_s * 1e3} | {
        f"itl_{'whole' if c is None else c}_{'ach' if a else 'ceil'}": g
        for (c, a), g in good_itl.items()}


def _and_list(sizes) -> str:
    """Chunk sizes as prose: "256", "256 and 1,024", "256, 512 and 1,024"."""
    return " and ".join([", ".join(f"{c:,}" for c in sizes[:-1]), f"{sizes[-1]:,}"]
                        if len(sizes) > 1 else [f"{sizes[0]:,}"])


def chunk_block(table, seed_goodputs, model, accelerator) -> dict:
    """The chunk-size section from `table` (chunk -> lone 4k TTFT and goodput, ceiling and
    achievable) and `seed_goodputs` (chunks of 256 and 512's achievable goodputs on another
    trace, seed 1): TTFT penalties, the optima, whether the achievable optimum is a tie,
    and which goodputs the model's error reaches."""
    ttft = table["lone 4k TTFT (ms), ceiling"]
    ttft_ach = table["lone 4k TTFT (ms), achievable"]
    gp, gp_ach = table["goodput, ceiling"], table["goodput, achievable"]
    best_chunk = gp.drop("whole").idxmax()
    best_chunk_ach = gp_ach.drop("whole").idxmax()
    spec_m = architectures.get(model)
    a1, b1 = seed_goodputs
    # Is the achievable optimum a move or a tie? Its margin over the runner-up, in steps of
    # the search's grid, against the trace-to-trace spread of a goodput (up to about a fifth).
    ranked = gp_ach.drop("whole").sort_values(ascending=False)
    first, second = ranked.index[:2]
    margin = ranked.iloc[0] / ranked.iloc[1] - 1
    n_steps = grid_steps(ranked.iloc[0], ranked.iloc[1])
    inside = [c for c in ranked.index[1:]
              if validation.choice(ranked.iloc[0], ranked[c], "dense throughput",
                                   per="rate")["flips"]]
    lo_c, hi_c = validation.interval(ranked.iloc[0], "dense throughput")
    return {
        "ch_whole_ms": ttft["whole"], "ch_256_pct": 100 * (ttft[256] / ttft["whole"] - 1),
        "ch_whole_ms_ach": ttft_ach["whole"],
        "ch_256_pct_ach": 100 * (ttft_ach[256] / ttft_ach["whole"] - 1),
        "ch_512_pct_ach": 100 * (ttft_ach[512] / ttft_ach["whole"] - 1),
        "best_chunk": float(best_chunk), "best_chunk_goodput": gp[best_chunk],
        "best_chunk_ach": float(best_chunk_ach),
        "best_chunk_goodput_ach": gp_ach[best_chunk_ach],
        "good_256": gp[256], "good_2048": gp[2048], "good_512_ach_t": gp_ach[512],
        "good_2048_ach": gp_ach[2048],
        "cbb": llm.compute_bound_batch(model, accelerator),
        "act_mb": spec_m.activations_per_token_per_layer * 2 * spec_m.n_layers / 1e6,  # fp16
        "chunk_seed_text": f"on another trace (seed 1) 256 beats 512 again, by "
        f"{100 * (a1 / b1 - 1):.0f}%" if a1 > b1 else
        "on another trace (seed 1) 512 wins: the two are within the noise",
        "chunk_margin_pct": 100 * (gp_ach[256] / gp_ach[512] - 1),
        "chunk_ach_text": f"chunks of {first} tokens serve the most, "
        f"{ranked.iloc[0]:.1f} requests/s, {100 * margin:.0f}% ({n_steps} step"
        f"{'' if n_steps == 1 else 's'} of the search's grid) ahead of chunks of {second}",
        "chunk_tie_text": "a tie: the margin is inside the spread of a goodput from one trace "
        "to the next (up to about a fifth, below)" if margin < 0.2 else
        "a lead beyond one trace's noise (a goodput moves by up to about a fifth from one "
        "trace to the next, below), though not beyond what the model leaves out",
        "best_chunk_ach_lo": lo_c, "best_chunk_ach_hi": hi_c,
        "chunk_model_text": (
            "a range that overlaps every other chunk size's" if len(inside) == len(ranked) - 1
            else "a range that overlaps that of chunks of " + _and_list(inside) if inside
            else "a range no other chunk size's reaches")}


def chunk_ride_block(model, accelerator, decodes=32, context=1000, chunk=512,
                     prompt=4000) -> dict:
    """A `chunk`-token piece of a `prompt`-token prompt riding in a step with `decodes`
    decodes at `context` cached tokens (`llm_serving.chunk_step_s`), against the two as
    separate steps (the decodes alone, the chunk alone: `parallel.tp_step_s`), in ms, on
    the ceiling and the achievable model: riding along, the chunk shares the decodes'
    weight read."""
    out = {}
    for tag, a in (("ceil", False), ("ach", True)):
        ride = llm_serving.chunk_step_s(model, accelerator, chunk + decodes, decodes=decodes,
                                        decode_context=context, prompt_tokens=prompt,
                                        achievable=a)
        alone = parallel.tp_step_s(model, accelerator, 1, decodes, context, achievable=a)
        piece = parallel.tp_step_s(model, accelerator, 1, 1, prompt - chunk,
                                   new_tokens=chunk, achievable=a)
        out |= {f"ride_{tag}_ms": 1e3 * ride, f"ride_apart_{tag}_ms": 1e3 * (alone + piece)}
    return out | {"ride_decodes": decodes, "ride_chunk": chunk}


def link_block(model, nvlink_bytes_per_s) -> dict:
    """A prompt's KV cache over NVLink (`nvlink_bytes_per_s`) and over a GPU's 400 Gb/s RDMA
    NIC (one of a DGX H100's eight InfiniBand NDR ports): MB and ms."""
    per_token_b = step_model.kv_cache_bytes_per_token(model)
    nic = device_links.get_interconnect("InfiniBand NDR x8").bandwidth_bytes_per_s / 8
    return {"kv_4k_mb": 4000 * per_token_b / 1e6,
            "kv_4k_ms": 4000 * per_token_b / nvlink_bytes_per_s * 1e3,
            "kv_1k_mb": 1000 * per_token_b / 1e6,
            "kv_1k_ms": 1000 * per_token_b / nvlink_bytes_per_s * 1e3,
            "nvlink_gbs": nvlink_bytes_per_s / 1e9, "rdma_nic_gbs": nic / 1e9,
            "kv_4k_nic_ms": 1e3 * paged_kv.kv_transfer_s(model, 4000, link_bytes_per_s=nic)}


def split_block(per_gpu, per_gpu_ach, good_whole, best_chunk_ach_goodput) -> dict:
    """Disaggregation against one GPU: `per_gpu` and `per_gpu_ach` {configuration: goodput
    per GPU} (ceiling, achievable), whole prefills' goodput, and the achievable goodput of
    the best chunk size; whether the model's error reaches the best split."""
    best_split_ach = max(v for k, v in per_gpu_ach.items() if "prefill +" in k)
    c_split = validation.choice(best_chunk_ach_goodput, best_split_ach, "dense throughput",
                                per="rate")
    return {
        "dis_11": per_gpu["1 prefill + 1 decode GPU"],
        "dis_12": per_gpu["1 prefill + 2 decode GPU"],
        "dis_21": per_gpu["2 prefill + 1 decode GPU"],
        "dis_vs_whole": per_gpu["1 prefill + 1 decode GPU"] / good_whole,
        "dis_11_ach": best_split_ach,
        "dis_chunk_margin_ach_pct": 100 * (best_chunk_ach_goodput / best_split_ach - 1),
        "dis_model_text": (
            "It is inside the model's error too: 80% of the published dense throughput runs "
            f"would put the chunked GPU between {c_split['low']:.1f} and "
            f"{c_split['high']:.1f} requests/s and the split between "
            f"{c_split['other_low']:.1f} and {c_split['other_high']:.1f}: the two ranges "
            f"overlap. Measure both before you choose ({CONSERVATIVE})" if c_split["flips"] else
            "The model's error does not reach it: 80% of the published dense throughput runs "
            f"would put the chunked GPU between {c_split['low']:.1f} and "
            f"{c_split['high']:.1f} requests/s, above the split's whole range "
            f"({c_split['other_low']:.1f} to {c_split['other_high']:.1f})")}


def seed_block(configs, n, ttft_slo_s, tpot_slo_s, prompts, model, accelerator) -> dict:
    """Each configuration at its goodput on three other traces (seeds 1-3): `configs`
    {name: (goodput per GPU, serve, GPUs)}, the attainment's range (%); the trace's span
    over the TTFT objective; how busy the 1+1 split's prefill GPU is (`prompts`: the trace's
    prompt lengths)."""
    att = [llm_slo.slo_attainment(serve(batching.poisson_arrivals(g * gpus, n, seed=s)),
                                  ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s)
           for g, serve, gpus in configs.values() for s in (1, 2, 3)]
    split = configs["1+1"][0]
    mean_prefill_s = np.mean([llm.prefill_s(model, accelerator, int(p)) for p in prompts])
    return {"seed_att_lo": 100 * min(att), "seed_att_hi": 100 * max(att),
            "ng_requests": float(n), "trace_span_x": n / (2 * split) / ttft_slo_s,
            "d11_prefill_busy_pct": 100 * 2 * split * mean_prefill_s}


def paging_block(use, budget, fits, lengths, model, accelerator, max_len=8192) -> dict:
    """The paged cache: `use` (kv_memory_use), the cache `budget` (bytes), sequences that
    `fits` each way, the sequences' `lengths`; what paging buys in decode throughput on each
    model, and whether the model's error reaches the gain."""
    gain = {a: paged_kv.paging_gain(model, accelerator, lengths, max_len=max_len, achievable=a)
            for a in (False, True)}
    tp, tc = gain[True]["tokens_per_s_paged"], gain[True]["tokens_per_s_contiguous"]
    page = validation.choice(tp, tc, "dense throughput", per="rate")
    tc_lo, tc_hi = validation.interval(tc, "dense throughput", per="rate")
    return {"contig_used_pct": 100 * use["contiguous_used"],
            "paged_used_pct": 100 * use["paged_used"],
            "budget_gb": budget / 1e9,
            "fits_contig": float(fits["contiguous, 8,192 reserved"]),
            "fits_paged": float(fits["paged, blocks of 16"]),
            "mean_len": lengths.mean(),
            "paging_batch_ratio": gain[False]["batch_ratio"],
            "paging_gain_ceil": gain[False]["throughput_gain"],
            "paging_gain_ach": gain[True]["throughput_gain"],
            "paging_tps_paged_ach": tp, "paging_tps_contig_ach": tc,
            "paging_tps_paged_ceil": gain[False]["tokens_per_s_paged"],
            "paging_tps_contig_ceil": gain[False]["tokens_per_s_contiguous"],
            "paging_tps_paged_lo": page["low"], "paging_tps_paged_hi": page["high"],
            "paging_tps_contig_lo": tc_lo, "paging_tps_contig_hi": tc_hi,
            "paging_verdict": "the two ranges overlap, so the gain could vanish within the "
            f"model's error: measure both ({CONSERVATIVE})" if page["flips"] else
            "apart, so the gain holds within the model's error, though its size is the "
            "model's"}


def prefix_block(cold_s, warm_s, saved_gb, budget) -> dict:
    """A cached system prompt: TTFT cold and warm (ms), and the memory saved (GB and % of
    the cache `budget`, bytes)."""
    return {"pc_cold_ms": cold_s * 1e3, "pc_warm_ms": warm_s * 1e3, "pc_saved_gb": saved_gb,
            "pc_saved_pct": 100 * saved_gb * 1e9 / budget}


def memory_block(mem, model) -> dict:
    """The memory settings' table `mem` (setting -> cache GB, 4k-token sequences) and the
    model's weights (GB)."""
    return {"mem_vllm_seqs": mem.loc["vLLM, 0.9", "4k-token sequences"],
            "mem_two_seqs": mem.loc["2 x vLLM, 0.45 each", "4k-token sequences"],
            "mem_trt_gb": mem.loc["TensorRT-LLM, 0.9", "cache (GB)"],
            "mem_vllm_gb": mem.loc["vLLM, 0.9", "cache (GB)"],
            "weights_gb": step_model.weight_bytes(model) / 1e9}



def attention_block(model, accelerator, context=4096) -> dict:
    """Decode attention's intensity at batch 1 and at the largest batch that fits, the
    model's heads, and MLA's (by hand and the package's, 128 heads on a GPU and 16 under
    TP8, DeepSeek-V3 at 32k tokens)."""
    most = llm.max_batch(model, accelerator, context)
    att = {b: llm.decode_step_breakdown(model, accelerator, batch=b, context=context).loc["attention"]
           for b in (1, most)}
    spec = architectures.get(model)
    mla_i = {tp: llm.decode_step_breakdown(engine_step.tp_shard("deepseek-v3", tp), accelerator,
                                           batch=1, context=32768).loc["attention",
                                                                       "intensity"]
             for tp in (1, 8)}
    return {"att_i_1": att[1]["intensity"], "att_i_max": att[most]["intensity"],
            "att_b_max": float(most), "l3_heads": float(spec.n_heads),
            "l3_kv_heads": float(spec.n_kv_heads), "l3_head_dim": float(spec.head_dim),
            "mla_intensity": step_model.mla_decode_intensity(ex.MLA_HEADS, ex.MLA_LATENT,
                                                             ex.MLA_ROPE),
            "mla_i_dp": mla_i[1], "mla_i_tp8": mla_i[8]}


def flash_block(fa) -> dict:
    """Prefill attention with the scores written and with FlashAttention (`fa`: GB, ms)."""
    return {"fa_naive_gb": fa.loc["scores written", "GB moved"],
            "fa_flash_gb": fa.loc["FlashAttention", "GB moved"],
            "fa_naive_ms": fa.loc["scores written", "ms"],
            "fa_flash_ms": fa.loc["FlashAttention", "ms"]}


def kv_size_block(kv) -> dict:
    """KV bytes a token `kv` {model: bytes}: MLA's KiB and its saving over MHA (with
    128-wide and with 192-wide keys), Llama's KiB."""
    kib = {m: b / 1024 for m, b in kv.items()}
    return {"mla_kib": kib["deepseek-v3, MLA"],
            "mla_ratio": kv["deepseek-v3, if MHA"] / kv["deepseek-v3, MLA"],
            "mla_ratio_192": 61 * 128 * (192 + 128) * 2 / kv["deepseek-v3, MLA"],
            "l3_70_kib": kib["llama-3-70b"], "l2_7_kib": kib["llama-2-7b"]}


def speedup_figure(model, draft, accelerator, k, context):
    """Speculation's decode speed-up against the batch (log), three acceptances on the
    ceiling and 0.8 on the achievable model, up to the batch that fits at `context`."""
    grid = np.unique(np.geomspace(1, llm.max_batch(model, accelerator, context), 15).astype(int))
    fig, ax = plt.subplots(figsize=(6.5, 4.0))
    for a, (marker, ls) in zip((0.6, 0.8, 0.9), [("o", ":"), ("s", "--"), ("^", "-")]):
        gain = [speculative.decode_speedup(model, draft, accelerator, acceptance=a, k=k, batch=int(b),
                                           context=context, achievable=False) for b in grid]
        ax.semilogx(grid, gain, marker=marker, ms=3, ls=ls, color="black", label=f"alpha {a}")
    gain = [speculative.decode_speedup(model, draft, accelerator, acceptance=0.8, k=k, batch=int(b),
                                       context=context, achievable=True) for b in grid]
    ax.semilogx(grid, gain, marker="s", ms=3, ls="-", color="grey",
                label="alpha 0.8, achievable")
    ax.axhline(1, color="grey", lw=2, alpha=0.6)
    ax.axvline(llm.compute_bound_batch(model, accelerator) / (k + 1), color="grey", ls=":", lw=1)
    ax.set_xlabel("batch (sequences, log; up to what fits at 256 tokens of context)")
    ax.set_ylabel("decode speed-up from speculation")
    ax.set_title(f"{model} with a Llama-3.2-1B draft, k = {k}, {accelerator}", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def perturbed_models():
    """The achievable model with the matmul rate, then the bandwidth, alone at each end of
    the dense-throughput interval (chapter 7's validation). A uniform error in every step
    cancels in a speed-up (a ratio of step times); these are what move a cut-off."""
    rate_lo, rate_hi = validation.interval(1.0, "dense throughput")
    fit = achievable.FITTED
    return ([dataclasses.replace(fit, matmul_scale=fit.matmul_scale * f)
             for f in (rate_lo, rate_hi)]
            + [dataclasses.replace(fit, bandwidth=fit.bandwidth * f) for f in (rate_lo, rate_hi)])


def speculation_block(spec, model, draft, accelerator, k, context) -> dict:
    """The speculation section from `spec` (batch x "alpha a[, achievable]" speed-ups): the
    round at batch 1 on each model, the formula's speed-up, the knee, the cut-off batches
    at three contexts and within the model's error (`cut_<context>_ach_lo/hi`)."""
    values = {f"spec_{a[2]}_{b}": spec.loc[b, f"alpha {a}"]
              for a in ("0.6", "0.8", "0.9") for b in (1, 16, 256)}
    r = {a: speculative.round_breakdown(model, draft, accelerator, acceptance=0.8, k=k, batch=1,
                                        context=context, achievable=a) for a in (False, True)}
    values |= {"spec_c": r[False]["cost_ratio"], "spec_c_ach": r[True]["cost_ratio"],
               "spec_draft_ms_ach": r[True]["draft_s"] / k * 1e3,
               "spec_plain_ms_ach": r[True]["plain_step_s"] * 1e3,
               "spec_8_1_ach": spec.loc[1, "alpha 0.8, achievable"],
               "spec_formula": speculative.speedup(0.8, k, r[False]["cost_ratio"]),
               "spec_e": speculative.expected_tokens(0.8, k),
               "spec_knee": llm.compute_bound_batch(model, accelerator) / (k + 1),
               "mb_8k": float(llm.max_batch(model, accelerator, 8192))}
    for c in (0, context, 512):
        for a in (False, True):
            values[f"cut_{c}_{'ach' if a else 'ceil'}"] = float(speculative.cutoff_batch(
                model, draft, accelerator, acceptance=0.8, k=k, context=c, achievable=a))
    rate_lo, rate_hi = validation.interval(1.0, "dense throughput")
    cut_err = [speculative.cutoff_batch(model, draft, accelerator, acceptance=0.8, k=k, context=context,
                                        achievable=e) for e in perturbed_models()]
    return values | {"cut_rate_lo": rate_lo, "cut_rate_hi": rate_hi,
                     f"cut_{context}_ach_lo": float(min(cut_err)),
                     f"cut_{context}_ach_hi": float(max(cut_err))}


def tree_block(trees, tree, model, draft, accelerator, k, context, chain_cut_lo) -> dict:
    """The tree against the chain (`trees`: (name, model) -> tokens a round, speed-up,
    cut-off): the tree's cut-off within the model's error against the chain's lowest
    (`chain_cut_lo`)."""
    name = f"tree of {speculative.tree_nodes(tree)}"
    values = {"tree_nodes": float(speculative.tree_nodes(tree)),
              "tree_verify_ratio": (speculative.tree_nodes(tree) + 1) / (k + 1),
              "tree_e": trees.loc[(name, "ceiling"), "tokens a round"]}
    for tag, m in (("ceil", "ceiling"), ("ach", "achievable")):
        values[f"tree_speedup_{tag}"] = trees.loc[(name, m), "speed-up, batch 1"]
        values[f"tree_cut_{tag}"] = float(trees.loc[(name, m), "stops paying at batch"])
        values[f"chain_cut_{tag}"] = float(trees.loc[("chain of 4", m), "stops paying at batch"])
    tree_err = [speculative.cutoff_batch(model, draft, accelerator, acceptance=0.8, k=k, context=context,
                                         achievable=e, tree=tree) for e in perturbed_models()]
    return values | {
        "tree_cut_ach_lo": float(min(tree_err)), "tree_cut_ach_hi": float(max(tree_err)),
        "tree_cut_verdict": (
            "in every case below the chain's lowest, so under load the tree is the first "
            "thing to cut; the batch to cut it at is one to measure"
            if max(tree_err) < chain_cut_lo else
            "a range that overlaps the chain's: which to cut first is one to measure")}


def off_from(schedule) -> float:
    """The first batch of a speculation schedule's ranges with k = 0 (inf if none)."""
    return min([first for first, _, k in schedule if k == 0], default=np.inf)


def schedule_block(schedule, grid, model, draft, accelerator, k, context) -> dict:
    """The speculation schedule (`speculation_schedule` over `grid`): where it turns off,
    its first k, the speed-up at batch 512 with and without it, and where it turns off
    within the model's error."""
    offs = [off_from(speculative.speculation_schedule(
        model, draft, accelerator, acceptance=0.8, batches=grid, context=context, max_k=k,
        achievable=e)) for e in perturbed_models()]
    off_lo, off_hi = min(offs), max(offs)
    err = ("within the model's error (the matmul rate or the bandwidth alone off by the dense "
           "interval, as for the cut-off above)")
    return {
        "sched_off_from": float(off_from(schedule)), "sched_k1": float(schedule[0][2]),
        "sched_always_512": speculative.decode_speedup(model, draft, accelerator, acceptance=0.8,
                                                       k=k, batch=512, context=context,
                                                       achievable=True),
        "sched_512": speculative.scheduled_speedup(model, draft, accelerator, acceptance=0.8,
                                                   schedule=schedule, batch=512,
                                                   context=context, achievable=True),
        "sched_off_range_text": (
            f"It stays there {err}" if off_lo == off_hi else
            f"{err[0].upper() + err[1:]} it moves: from batch {off_lo:.0f}"
            + (f" to {off_hi:.0f}" if np.isfinite(off_hi) else
               f" to beyond {grid[-1]}, where the grid ends"))}


def hits_block(hits) -> dict:
    """Prefix hits of the chat and the agent (`hits`: hit rate, last prompt, last TTFT cold
    and cached on each model)."""
    values = {}
    for key, name in (("chat", "chat, 8 turns"), ("agent", "agent, 30 steps")):
        values[f"pc_{key}_hit_pct"] = 100 * hits.loc[name, "hit rate"]
        for m in ("ceiling", "achievable"):
            values[f"pc_{key}_cold_{m[:3]}"] = hits.loc[name, f"last TTFT {m} (ms), cold"]
            values[f"pc_{key}_warm_{m[:3]}"] = hits.loc[name, f"last TTFT {m} (ms), cached"]
    return values | {"pc_agent_prompt": hits.loc["agent, 30 steps", "last prompt (tokens)"]}


def routing_block(routing) -> dict:
    """Random routing against KV-aware (`routing`: replicas -> hit rates and the ratio of
    prefill tokens)."""
    ratio = "prefill tokens, random / KV-aware"
    return {"rt_4_hit_pct": 100 * routing.loc[4, "hit rate, random"],
            "rt_4_ratio": routing.loc[4, ratio], "rt_8_ratio": routing.loc[8, ratio]}


def offload_block(offload, model, accelerator, ssd="NVMe SSD, 7 GB/s", ssd_gbs=7.0) -> dict:
    """Reload or recompute (`offload`: (tier, model) -> reload s, recompute s, break-even
    GB/s): the SSD's and host memory's numbers, a 1,024-token prefix's break-even, and
    whether the model's error over all published runs reaches the SSD's `ssd_gbs`."""
    short = paged_kv.kv_reload_or_recompute(model, accelerator, 1024, bandwidth_bytes_per_s=7e9,
                                            achievable=True)
    # The break-even moves with the recompute's seconds, as a rate does (bytes / seconds).
    # No regime of the validation is a lone prefill: the errors over all published runs.
    c_off = validation.choice(offload.loc[(ssd, "achievable"), "break-even (GB/s)"], ssd_gbs,
                              "all", per="rate", fixed_other=True)   # the SSD's: a fixed bar
    values = {"off_ssd_reload_s": offload.loc[(ssd, "ceiling"), "reload (s)"],
              "off_pcie_reload_s": offload.loc[("host memory, PCIe Gen5 x16", "ceiling"),
                                               "reload (s)"]}
    for m in ("ceiling", "achievable"):
        values[f"off_recompute_{m[:3]}"] = offload.loc[(ssd, m), "recompute (s)"]
        values[f"off_breakeven_{m[:3]}"] = offload.loc[(ssd, m), "break-even (GB/s)"]
    return values | {
        "off_1k_breakeven": short["breakeven_bytes_per_s"] / 1e9,
        "off_breakeven_ach_lo": c_off["low"], "off_breakeven_ach_hi": c_off["high"],
        "all_ratio_lo": validation.interval(1.0, "all")[0],
        "all_ratio_hi": validation.interval(1.0, "all")[1],
        "off_flip_text": (
            "The SSD's 7 GB/s lies inside that range: measure the prefill before you pick "
            "the tier" if c_off["flips"] else
            "The SSD's 7 GB/s lies outside that range: the choice holds within the model's "
            "error")}


def transfer_block(transfer, prefill) -> dict:
    """The KV transfer of a disaggregated prefill (`transfer`: (model, link) -> KV GB,
    transfer ms) against the TP8 prefill `prefill` {achievable: s}, and within the model's
    error on tensor-parallel runs (the transfer's share moves the other way)."""
    t70 = transfer.loc["llama-3-70b"]
    eight = t70.loc["8 NICs, 400 Gb/s", "transfer (ms)"]
    pf_lo, pf_hi = validation.interval(prefill[True], "tp>1", per="cost")
    return {"xfer_70_gb": t70.loc["1 NIC, 400 Gb/s", "KV (GB)"],
            "xfer_70_1nic_ms": t70.loc["1 NIC, 400 Gb/s", "transfer (ms)"],
            "xfer_70_8nic_ms": eight,
            "xfer_ds_1nic_ms": transfer.loc[("deepseek-v3", "1 NIC, 400 Gb/s"), "transfer (ms)"],
            "xfer_ds_pct": 100 * transfer.loc[("deepseek-v3", "1 NIC, 400 Gb/s"), "KV (GB)"]
            / t70.loc["1 NIC, 400 Gb/s", "KV (GB)"],
            "xfer_prefill_ms_ach": 1e3 * prefill[True],
            "xfer_prefill_ms_ceil": 1e3 * prefill[False],
            "xfer_pct_ach": 100 * eight / (1e3 * prefill[True]),
            "xfer_pct_ceil": 100 * eight / (1e3 * prefill[False]),
            "xfer_prefill_ms_lo": 1e3 * pf_lo, "xfer_prefill_ms_hi": 1e3 * pf_hi,
            "xfer_pct_lo": 100 * eight / (1e3 * pf_hi), "xfer_pct_hi": 100 * eight / (1e3 * pf_lo)}


def chunk_budget_range(model, accelerator) -> list:
    """The problem's largest chunk budget where an engine's steps run at the ends of the
    dense interval: a step measured at 1/r of the achievable one meets the objective where
    the achievable step is at most r x the objective (r: measured / predicted rate)."""
    return [llm_serving.largest_chunk_budget(model, accelerator, **ex.CHUNK_QUESTION,
                                             step_slo_s=ex.STEP_SLO_S * r,
                                             granularity=ex.BUDGET_STEP, achievable=True)
            for r in validation.interval(1.0, "dense throughput")]


def exercise_block(model, accelerator) -> dict:
    """The problems' answers (`ans_*`) and their solutions' steps."""
    values = {"ans_" + name.replace("-", "_"): float(exercises.get(name).answer())
              for name in EXERCISES}
    chunk_budget = {a: llm_serving.largest_chunk_budget(model, accelerator, **ex.CHUNK_QUESTION,
                                                        step_slo_s=ex.STEP_SLO_S, achievable=a)
                    for a in (True, False)}
    for name, budget in [("step", chunk_budget[True]), ("next", chunk_budget[True] + 64)]:
        values[f"ex_budget_{name}_ms"] = llm_serving.chunk_step_s(
            model, accelerator, budget, **ex.CHUNK_QUESTION, achievable=True) * 1e3
    budget_range = chunk_budget_range(model, accelerator)
    pre = llm.forward_step_breakdown(model, accelerator, [ex.TTFT_PROMPT], [0])["seconds"] * 1e3  # ms
    return values | {
        "ex_budget_ceil": float(chunk_budget[False]),
        "ex_budget_lo": float(budget_range[0]), "ex_budget_hi": float(budget_range[1]),
        "kv_per_token_b": float(step_model.kv_cache_bytes_per_token(model)),
        "ex_spec_ceil": float(ex.speculation_stops_paying(False)),
        "ex_two_single": float(paged_kv.kv_sequences(model, accelerator, ex.TWO_CONTEXT,
                                                     gpu_memory_utilization=0.9)),
        "ex_spec_e": speculative.expected_tokens(ex.SPEC_ACCEPTANCE, ex.SPEC_K),
        "ex_mla_kib": step_model.mla_kv_cache_bytes_per_token(ex.MLA_V2_LAYERS, ex.MLA_LATENT,
                                                              ex.MLA_ROPE) / 1024,
        "ex_linear_b": ex.matmul_weights() / 1e9,
        "ex_linear_ms": pre["linear"], "ex_attn_ms": pre["attention"],
        "ex_lmhead_ms": pre["lm_head"],
        "ex_offload_ceil_gbs": ex.offload_breakeven_gbs(False),
        "ex_routing_hit_pct": 100 * ex.chat_hits(False)["hit_rate"]}
