"""course.pages.chapter09_llm_serving: what chapter 9's prose quotes, against arithmetic done
by hand from the catalogue and the model cards (and the checks the page used to run on the
package's functions). Small seeded or synthetic cases only: the page runs the traces."""

import math

import numpy as np
import pandas as pd
import pytest

from gpuinfer import hardware
from gpuinfer.course import exercises
from gpuinfer.course.pages import chapter09_llm_serving as page
from gpuinfer.predict import llm, llm_simulator, paged_kv, speculative, step_model, validation

MODEL, GPU = "llama-3-8b", "H100 SXM"
DRAFT = speculative.LLAMA_3_2_1B


def test_a_lone_request_is_one_prefill_then_decode_steps():
    lone = llm_simulator.simulate_llm([0.0], [2000], [200], MODEL, GPU, max_batch=256,
                                      achievable=False)
    values = page.lone_block(lone, MODEL, GPU)
    # Alone, the first token is one prefill of the 2,000 prompt tokens, and the slowest gap
    # the last decode step: one token over 2,000 + 199 - 1 = 2,198 cached tokens.
    assert values["lone_ttft_ms"] == pytest.approx(1e3 * llm.prefill_s(MODEL, GPU, 2000), abs=1e-9)
    assert lone.iloc[0]["max_gap"] == pytest.approx(llm.decode_step_s(MODEL, GPU, 1, 2198),
                                                    abs=1e-12)
    h100 = hardware.get(GPU)
    assert values["h100_ridge"] == pytest.approx(h100.peak_flops("fp16") / h100.bandwidth)
    assert values["h100_mem_gib"] * 2**30 == pytest.approx(h100.memory_bytes)
    # Llama-3-8B's embedding table, 128,256 x 4,096 fp16 values, is not read by a decode step.
    assert values["decode_weights_gb"] == pytest.approx(
        (step_model.weight_bytes(MODEL) - 2 * 128_256 * 4096) / 1e9)


def _steps(prefill_tokens, seconds):
    return pd.DataFrame({"prefill_tokens": prefill_tokens, "seconds": seconds,
                         "start": np.cumsum([0.0] + list(seconds[:-1]))})


def test_prefill_runs_are_prefill_steps_back_to_back():
    # decode, prefill 8k, prefill 4k, decode, prefill 1k: two runs, of 2 steps (0.3 + 0.2 s,
    # 12k tokens) and of 1 (0.05 s, 1k tokens).
    steps = _steps([0, 8192, 4096, 0, 1024], [0.01, 0.3, 0.2, 0.01, 0.05])
    runs = page.prefill_runs(steps)
    assert runs["n"].tolist() == [2, 1]
    assert runs["s"].tolist() == pytest.approx([0.5, 0.05])
    assert runs["tokens"].tolist() == [12288, 1024]
    cols = ["ttft_p50_s"]
    load = pd.DataFrame({"whole": {"ttft_p50_s": 0.1, "output_tokens_per_s": 900.0},
                         "chunks of 512": {"ttft_p50_s": 0.2, "output_tokens_per_s": 900.0}})
    values = page.load_block(load, steps, 10.0, 8192, cols)
    assert values["w_ttft_p50_ms"] == pytest.approx(100) and values["c_ttft_p50_ms"] == pytest.approx(200)
    assert values["w_run_steps"] == 2 and values["w_run_ms"] == pytest.approx(500)
    assert values["w_longest_step_ms"] == pytest.approx(300)


def test_the_goodput_grid_and_the_gain_sentence():
    # 4^(8/32) = sqrt(2): eight steps of the grid, each 4^(1/32) - 1 = 4.43%.
    step = 4 ** (1 / 32)
    assert page.grid_steps(math.sqrt(2), 1.0) == 8
    brackets = {(None, False): (10.0, 10.0 * step), (512, False): (10.0 * math.sqrt(2), 15.0),
                (None, True): (4.0, 4.0 * step), (512, True): (4.0 * math.sqrt(2), 6.0)}
    values = page.goodput_block(brackets, 0.5, 0.015, 0.9)
    assert values["grid_pct"] == pytest.approx(4.427, abs=1e-3)
    assert values["good_gain_steps"] == values["good_gain_steps_ach"] == 8
    assert "the square root of 2" in values["gain_grid_text"]
    # The gain's range: chunks' lo over whole's hi, and chunks' hi over whole's lo.
    assert values["good_gain_lo"] == pytest.approx(math.sqrt(2) / step)
    assert values["good_gain_hi"] == pytest.approx(1.5)
    brackets[(512, True)] = (4.0 * 4 ** (9 / 32), 6.0)
    assert page.goodput_block(brackets, 0.5, 0.015, 0.9)["gain_grid_text"].startswith(
        "The gains come out as 8 and 9 steps")


def test_overload_counts_late_replies():
    served = pd.DataFrame({"ttft": [0.1, 0.2, 0.6, 0.3], "tpot": [0.02, 0.01, 0.03, 0.016]})
    values = page.overload_block(served, 0.5, 0.015, over=1.2)
    # 3 of 4 replies average over 15 ms; 1 of 4 starts after 0.5 s.
    assert values["over_tpot_pct"] == 75 and values["over_pct"] == pytest.approx(20)
    assert values["over_ttft_text"] == "only 25% start later than 0.5 s"
    served["ttft"] = 0.1
    assert page.overload_block(served, 0.5, 0.015)["over_ttft_text"].startswith("none")


def test_itl_block_names_each_goodput():
    values = page.itl_block({(None, False): 1.0, (512, True): 2.0}, 0.1)
    assert values == {"itl_slo_ms": 100.0, "itl_whole_ceil": 1.0, "itl_512_ach": 2.0}


def _chunk_table(ach):
    rows = {"whole": [100.0, 110.0, 10.0, ach[0]], 256: [120.0, 140.0, 12.0, ach[1]],
            512: [100.5, 125.0, 14.0, ach[2]], 2048: [100.2, 112.0, 11.0, ach[3]]}
    return pd.DataFrame(rows, index=["lone 4k TTFT (ms), ceiling",
                                     "lone 4k TTFT (ms), achievable", "goodput, ceiling",
                                     "goodput, achievable"]).T


def test_chunk_block_reads_the_optimum_and_its_margin():
    values = page.chunk_block(_chunk_table([4.0, 6.3, 6.0, 5.0]), [6.6, 6.0], MODEL, GPU)
    # 256 leads 512 by 6.3 / 6.0 - 1 = 5%, one step of the grid (ln 1.05 / ln 4^(1/32) = 1.1).
    assert values["best_chunk"] == 512 and values["best_chunk_ach"] == 256
    assert values["ch_256_pct"] == pytest.approx(20.0)
    assert values["chunk_margin_pct"] == pytest.approx(5.0)
    assert "5% (1 step of the search's grid) ahead of chunks of 512" in values["chunk_ach_text"]
    assert values["chunk_tie_text"].startswith("a tie")
    assert values["chunk_seed_text"] == "on another trace (seed 1) 256 beats 512 again, by 10%"
    lead = page.chunk_block(_chunk_table([4.0, 9.0, 3.5, 3.0]), [5.0, 6.0], MODEL, GPU)
    assert lead["chunk_tie_text"].startswith("a lead") and "512 wins" in lead["chunk_seed_text"]
    # 9 requests/s against 3.5 and 3: 2.6 and 3 times apart, wider than the dense interval's
    # spread (high / low, about 2.4).
    assert lead["chunk_model_text"] == "a range no other chunk size's reaches"
    one = page.chunk_block(_chunk_table([4.0, 6.3, 6.0, 2.0]), [5.0, 6.0], MODEL, GPU)
    assert one["chunk_model_text"] == "a range that overlaps that of chunks of 512"
    assert page.chunk_block(_chunk_table([4.0, 6.3, 6.2, 6.1]), [6.6, 6.0], MODEL, GPU)[
        "chunk_model_text"] == "a range that overlaps every other chunk size's"


def test_kv_transfer_of_llama_3_70b_over_a_nic():
    # 2 (K, V) x 80 layers x 8 KV heads x 128 x 2 bytes = 327,680 B a token; 8,000 tokens
    # are 2.62 GB, over 50e9 B/s 52.4 ms, over eight such NICs 6.55 ms.
    assert step_model.kv_cache_bytes_per_token("llama-3-70b") == 327_680
    assert paged_kv.kv_transfer_s("llama-3-70b", 8000, link_bytes_per_s=50e9) == pytest.approx(
        8000 * 327_680 / 50e9)
    transfer = pd.DataFrame(
        {"KV (GB)": [2.62144, 2.62144, 0.5622], "transfer (ms)": [52.4288, 6.5536, 11.24]},
        index=pd.MultiIndex.from_tuples([("llama-3-70b", "1 NIC, 400 Gb/s"),
                                         ("llama-3-70b", "8 NICs, 400 Gb/s"),
                                         ("deepseek-v3", "1 NIC, 400 Gb/s")]))
    values = page.transfer_block(transfer, {True: 0.2, False: 0.1})
    assert values["xfer_pct_ach"] == pytest.approx(100 * 6.5536 / 200)
    assert values["xfer_pct_ceil"] == pytest.approx(100 * 6.5536 / 100)
    assert values["xfer_ds_pct"] == pytest.approx(100 * 0.5622 / 2.62144)
    assert values["xfer_pct_lo"] < values["xfer_pct_ach"] < values["xfer_pct_hi"]


def test_link_block_times_llama_3_8b_cache():
    # Llama-3-8B: 2 x 32 layers x 8 KV heads x 128 x 2 bytes = 131,072 B a token; 1,000
    # tokens are 131 MB, over 450 GB/s 0.29 ms; over a 50 GB/s NIC 4,000 tokens take 10.5 ms.
    values = page.link_block(MODEL, 450e9)
    assert values["kv_1k_mb"] == pytest.approx(131.072)
    assert values["kv_1k_ms"] == pytest.approx(131.072e6 / 450e9 * 1e3)
    assert values["rdma_nic_gbs"] == pytest.approx(50.0)
    assert values["kv_4k_nic_ms"] == pytest.approx(4000 * 131_072 / 50e9 * 1e3)


def test_mla_caches_a_latent_and_scores_it_with_every_head():
    # DeepSeek-V3: 61 layers x (512 latent + 64 RoPE) x 2 bytes = 70,272 B a token; full MHA
    # over 128 heads of 128 would cache 2 x 61 x 128 x 128 x 2 = 3,997,696 B, 56.9 times.
    assert step_model.kv_cache_bytes_per_token("deepseek-v3") == 61 * 576 * 2
    kv = {"deepseek-v3, MLA": 70_272, "deepseek-v3, if MHA": 3_997_696,
          "llama-3-70b": 327_680, "llama-2-7b": 524_288}
    values = page.kv_size_block(kv)
    assert values["mla_ratio"] == pytest.approx(56.89, abs=0.01)
    assert values["mla_kib"] == pytest.approx(68.625) and values["l2_7_kib"] == 512
    # 128 heads x 2 FLOPs x (576 scored + 512 summed) over 576 x 2 bytes: 241.8 FLOP/byte.
    assert step_model.mla_decode_intensity(128, 512, 64) == pytest.approx(128 * 1088 / 576)


def test_decode_attention_intensity_is_the_group_size_at_every_batch():
    values = page.attention_block(MODEL, GPU)
    # GQA: 32 query heads share each of 8 KV heads; intensity does not grow with the batch.
    assert values["l3_heads"] / values["l3_kv_heads"] == 4
    assert values["att_i_1"] == pytest.approx(values["att_i_max"], abs=0.01)
    att = llm.decode_step_breakdown(MODEL, GPU, batch=int(values["att_b_max"]), context=4096)
    assert att.loc["attention", "bound"] == "memory"
    # Under TP8 each GPU scores 16 of the 128 heads against the whole latent: 1/8 the intensity.
    assert values["mla_i_dp"] / values["mla_i_tp8"] == pytest.approx(8, abs=0.1)


def test_paging_counts_whole_sequences_in_the_budget():
    lengths = np.array([1000, 2000, 3000])
    budget = paged_kv.kv_cache_budget(MODEL, GPU)
    gain = paged_kv.paging_gain(MODEL, GPU, lengths, max_len=8192, achievable=False)
    # Contiguous: every sequence reserves 8,192 tokens x 131,072 B.
    assert gain["batch_contiguous"] == budget // (8192 * 131_072)
    use = paged_kv.kv_memory_use(lengths, max_len=8192, block_size=16)
    # Paged: blocks of 16 hold 1,008 + 2,000 + 3,008 = 6,016 tokens, 2,005.3 a sequence.
    assert use["paged_reserved"] == 1008 + 2000 + 3008
    assert gain["batch_paged"] == budget // (use["paged_reserved"] / 3 * 131_072)


def test_speculation_rounds():
    # At acceptance 0.8 and k = 4 a round yields (1 - 0.8^5) / 0.2 = 3.3616 tokens.
    assert speculative.expected_tokens(0.8, 4) == pytest.approx(3.3616)
    r = {a: speculative.round_breakdown(MODEL, DRAFT, GPU, acceptance=0.8, k=4, batch=1,
                                        context=256, achievable=a) for a in (False, True)}
    assert r[True]["draft_s"] > r[False]["draft_s"]         # the draft pays the fixed costs too
    chain, tree = (speculative.round_breakdown(MODEL, DRAFT, GPU, acceptance=0.8, k=4, batch=1,
                                               context=256, achievable=False, tree=t)
                   for t in (None, (4, 2, 2, 1)))
    # 4 + 4 x 2 + 8 x 2 + 16 x 1 = 44 nodes; a wider tree passes more tokens a round.
    assert speculative.tree_nodes((4, 2, 2, 1)) == 44
    assert tree["expected_tokens"] > chain["expected_tokens"]


def test_schedule_off_from_reads_the_first_range_with_k_0():
    assert page.off_from([[1, 16, 4], [17, 64, 2], [65, 512, 0]]) == 65
    assert page.off_from([[1, 512, 2]]) == np.inf


def test_perturbed_models_move_one_rate_at_a_time():
    lo_m, hi_m, lo_b, hi_b = page.perturbed_models()
    assert lo_m.bandwidth == hi_m.bandwidth and lo_b.matmul_scale == hi_b.matmul_scale
    assert lo_m.matmul_scale < hi_m.matmul_scale and lo_b.bandwidth < hi_b.bandwidth


def test_random_routing_cannot_miss_on_one_replica():
    chat = dict(turns=8, system_tokens=1000, user_tokens=200, output_tokens=300)
    blind = paged_kv.conversation_prefix_hits(**chat, replicas=1, kv_aware=False)
    aware = paged_kv.conversation_prefix_hits(**chat, replicas=1)
    assert blind["hit_rate"] == aware["hit_rate"]
    # The KV-aware router: 21,952 of 23,600 prompt tokens cached (the problem's solution).
    assert aware["hit_rate"] == pytest.approx(21_952 / 23_600)
    routing = pd.DataFrame({4: {"hit rate, random": 0.6, "prefill tokens, random / KV-aware": 5.0},
                            8: {"hit rate, random": 0.5, "prefill tokens, random / KV-aware": 7.0}}).T
    assert page.routing_block(routing) == {"rt_4_hit_pct": 60.0, "rt_4_ratio": 5.0,
                                           "rt_8_ratio": 7.0}


def test_the_page_lists_every_problem_of_the_chapter():
    assert sorted(page.EXERCISES) == sorted(
        n for n in exercises.names() if exercises.get(n).where == "chapters/09_llm_serving")


def test_steps_figure_draws_the_window():
    steps = _steps([0, 4096, 0, 0], [0.01, 0.3, 0.01, 0.01])
    steps["start"] = [19.0, 20.5, 21.0, 23.0]               # two steps inside (20, 22)
    fig = page.steps_figure({"whole": (None, steps)}, MODEL, GPU, 10.0)
    (line,) = fig.axes[0].get_lines()
    assert list(line.get_ydata()) == pytest.approx([300.0, 10.0])
    assert "10 requests/s" in fig.axes[0].get_title()


def test_dense_error_block_says_whether_whole_prefills_lie_inside():
    lo, hi = validation.interval(1.0, "dense throughput")
    values = page.dense_error_block({None: 2.0, 512: 10.0})
    assert (values["dense_ratio_lo"], values["dense_ratio_hi"]) == (lo, hi)
    assert values["good_512_ach_lo"] == pytest.approx(10 * lo)
    # 2 requests/s, even at the interval's top (x hi ~ 1.02), is below 10 x lo (~ 4.2).
    assert "lies below it" in values["chunk_vs_whole_text"]
    assert "overlaps it" in page.dense_error_block({None: 9.5, 512: 10.0})["chunk_vs_whole_text"]


def test_split_block_compares_per_gpu():
    per_gpu = {"1 GPU, whole prefills": 4.0, "1 prefill + 1 decode GPU": 6.0,
               "1 prefill + 2 decode GPU": 5.0, "2 prefill + 1 decode GPU": 3.0}
    per_gpu_ach = {"1 GPU, whole prefills": 2.0, "1 prefill + 1 decode GPU": 2.5,
                   "1 prefill + 2 decode GPU": 2.4, "2 prefill + 1 decode GPU": 1.5}
    values = page.split_block(per_gpu, per_gpu_ach, 4.0, 2.75)
    # 6 / 4 = 1.5 times whole prefills; chunks' 2.75 over the best split's 2.5: 10% more.
    assert values["dis_vs_whole"] == 1.5 and values["dis_11_ach"] == 2.5
    assert values["dis_chunk_margin_ach_pct"] == pytest.approx(10.0)
    assert values["dis_model_text"].startswith("It is inside the model's error")


def test_seed_block_on_a_stub_server():
    def serve(arrivals):        # half the requests start late
        n = len(arrivals)
        return pd.DataFrame({"ttft": [0.1, 0.9] * (n // 2), "tpot": [0.01] * n})
    configs = {"whole": (4.0, serve, 1), "1+1": (5.0, serve, 2)}
    values = page.seed_block(configs, 10, 0.5, 0.015, [1000, 3000], MODEL, GPU)
    assert values["seed_att_lo"] == values["seed_att_hi"] == 50.0
    # 10 requests at 2 x 5 requests/s span 1 s, twice the 0.5 s objective.
    assert values["trace_span_x"] == pytest.approx(2.0)
    mean_s = (llm.prefill_s(MODEL, GPU, 1000) + llm.prefill_s(MODEL, GPU, 3000)) / 2
    assert values["d11_prefill_busy_pct"] == pytest.approx(100 * 10 * mean_s)


def test_paging_and_prefix_blocks():
    lengths = np.array([1000, 2000, 3000])
    use = paged_kv.kv_memory_use(lengths, max_len=8192, block_size=16)
    budget = paged_kv.kv_cache_budget(MODEL, GPU)
    fits = {"contiguous, 8,192 reserved": budget // (8192 * 131_072),
            "paged, blocks of 16": budget // (use["paged_reserved"] / 3 * 131_072)}
    values = page.paging_block(use, budget, fits, lengths, MODEL, GPU)
    # 6,000 of the 3 x 8,192 reserved tokens hold one: 24.4%.
    assert values["contig_used_pct"] == pytest.approx(100 * 6000 / (3 * 8192))
    assert values["mean_len"] == 2000
    assert values["paging_batch_ratio"] == pytest.approx(fits["paged, blocks of 16"]
                                                         / fits["contiguous, 8,192 reserved"])
    prefix = page.prefix_block(0.2, 0.1, 10.0, 50e9)
    assert prefix == {"pc_cold_ms": 200.0, "pc_warm_ms": 100.0, "pc_saved_gb": 10.0,
                      "pc_saved_pct": 20.0}


def test_flash_and_hits_blocks_read_their_tables():
    fa = pd.DataFrame({"GB moved": [5.0, 0.1], "ms": [3.0, 1.0]},
                      index=["scores written", "FlashAttention"])
    assert page.flash_block(fa) == {"fa_naive_gb": 5.0, "fa_flash_gb": 0.1, "fa_naive_ms": 3.0,
                                    "fa_flash_ms": 1.0}
    cols = {f"last TTFT {m} (ms), {w}": v for (m, w), v in
            {("ceiling", "cold"): 100.0, ("ceiling", "cached"): 10.0,
             ("achievable", "cold"): 150.0, ("achievable", "cached"): 20.0}.items()}
    hits = pd.DataFrame({"chat, 8 turns": {"hit rate": 0.93, "last prompt (tokens)": 4700.0,
                                           **cols},
                         "agent, 30 steps": {"hit rate": 0.98, "last prompt (tokens)": 20900.0,
                                             **cols}}).T
    values = page.hits_block(hits)
    assert values["pc_chat_hit_pct"] == pytest.approx(93.0)
    assert values["pc_agent_warm_ach"] == 20.0 and values["pc_agent_prompt"] == 20900.0


def test_speculation_block():
    spec = pd.DataFrame({"alpha 0.6": [1.5, 1.2, 0.8], "alpha 0.8": [2.0, 1.5, 0.9],
                         "alpha 0.9": [2.3, 1.7, 1.0], "alpha 0.8, achievable": [1.8, 1.3, 0.7]},
                        index=[1, 16, 256])
    values = page.speculation_block(spec, MODEL, DRAFT, GPU, 4, 256)
    assert values["spec_8_16"] == 1.5 and values["spec_8_1_ach"] == 1.8
    # Leviathan et al.: 3.3616 tokens a round over 4 c + 1 steps.
    assert values["spec_formula"] == pytest.approx(3.3616 / (4 * values["spec_c"] + 1))
    assert values["spec_knee"] == pytest.approx(llm.compute_bound_batch(MODEL, GPU) / 5)
    assert values["cut_256_ach_lo"] <= values["cut_256_ach"] <= values["cut_256_ach_hi"]


def test_tree_and_schedule_blocks():
    trees = pd.DataFrame({"tokens a round": [3.36, 3.36, 4.1, 4.1],
                          "speed-up, batch 1": [2.0, 1.8, 2.4, 2.0],
                          "stops paying at batch": [60.0, 40.0, 20.0, 10.0]},
                         index=pd.MultiIndex.from_tuples([("chain of 4", "ceiling"),
                                                          ("chain of 4", "achievable"),
                                                          ("tree of 44", "ceiling"),
                                                          ("tree of 44", "achievable")]))
    values = page.tree_block(trees, (4, 2, 2, 1), MODEL, DRAFT, GPU, 4, 256, chain_cut_lo=1e9)
    # 44 nodes and the root against a chain's 4 and the root: 45 / 5 = 9 times the tokens.
    assert values["tree_nodes"] == 44 and values["tree_verify_ratio"] == 9
    assert values["chain_cut_ach"] == 40 and values["tree_cut_ceil"] == 20
    assert values["tree_cut_verdict"].startswith("in every case below")
    sched = page.schedule_block([[1, 16, 4], [17, 64, 2], [65, 512, 0]],
                                [1, 16, 64, 256, 512], MODEL, DRAFT, GPU, 4, 256)
    assert sched["sched_off_from"] == 65 and sched["sched_k1"] == 4
    # Speculation off from batch 65: at 512 the schedule runs plain decode, speed-up 1.
    assert sched["sched_512"] == pytest.approx(1.0)


def test_offload_block_says_whether_the_ssd_lies_inside():
    rows = {(t, m): {"reload (s)": r, "recompute (s)": 0.5, "break-even (GB/s)": b}
            for t, r in (("host memory, PCIe Gen5 x16", 0.07), ("NVMe SSD, 7 GB/s", 0.61))
            for m, b in (("ceiling", 12.0), ("achievable", 5.0))}
    offload = pd.DataFrame(rows).T
    values = page.offload_block(offload, MODEL, GPU)
    assert values["off_ssd_reload_s"] == 0.61 and values["off_breakeven_ach"] == 5.0
    lo, hi = validation.interval(5.0, "all")
    assert (values["off_breakeven_ach_lo"], values["off_breakeven_ach_hi"]) == (lo, hi)
    assert ("inside" if lo <= 7 <= hi else "outside") in values["off_flip_text"]


def test_the_brackets_table_shows_each_search_as_lo_to_hi():
    brackets = {(None, False): (1.0, 1.25), (None, True): (0.5, 0.625),
                (512, False): (2.0, 2.5), (512, True): (1.0, 1.125)}
    t = page.brackets_table(brackets)
    assert list(t.index) == ["whole", "chunks of 512"]
    assert t.loc["whole", "ceiling"] == "1.00 to 1.25"
    assert t.loc["chunks of 512", "achievable"] == "1.00 to 1.12"   # 1.125 rounds to even


def test_the_chunk_table_reuses_the_searched_goodputs_and_searches_the_rest():
    asked = []

    def goodput(fn, rate=8.0):                 # stands in for llm_slo.goodput: records
        asked.append((fn.keywords.get("prefill_chunk"), fn.keywords.get("achievable"), rate))
        return 3.0

    def trace(**kw):                           # never run: goodput above does not call it
        raise AssertionError("not called")
    t = page.chunk_table(trace, goodput, {None: 1.0, 512: 2.0}, {None: 0.5, 512: 0.9},
                         "llama-3-8b", "H100 SXM", chunks=(None, 256, 512))
    assert list(t.index) == ["whole", 256, 512]
    assert t.loc["whole", "goodput, ceiling"] == 1.0 and t.loc[512, "goodput, achievable"] == 0.9
    assert t.loc[256, "goodput, ceiling"] == 3.0
    # only the 256-token chunk is searched: the ceiling from 8/s, the achievable from 4/s
    assert asked == [(256, None, 8.0), (256, True, 4.0)]
    # a lone 4,000-token prompt in chunks of 256 takes 16 steps, so longer than whole
    assert t.loc[256, "lone 4k TTFT (ms), ceiling"] > t.loc["whole", "lone 4k TTFT (ms), ceiling"]


def test_a_chunk_riding_with_decodes_costs_less_than_two_steps():
    from gpuinfer.predict import llm_serving, parallel
    v = page.chunk_ride_block("llama-3-8b", "H100 SXM", decodes=32, context=1000, chunk=512)
    for tag, a in (("ceil", False), ("ach", True)):
        alone = parallel.tp_step_s("llama-3-8b", "H100 SXM", 1, 32, 1000, achievable=a)
        piece = parallel.tp_step_s("llama-3-8b", "H100 SXM", 1, 1, 3488, new_tokens=512,
                                   achievable=a)
        assert v[f"ride_apart_{tag}_ms"] == pytest.approx(1e3 * (alone + piece), rel=1e-12)
        ride = llm_serving.chunk_step_s("llama-3-8b", "H100 SXM", 544, decodes=32,
                                        decode_context=1000, prompt_tokens=4000, achievable=a)
        assert v[f"ride_{tag}_ms"] == pytest.approx(1e3 * ride, rel=1e-12)
        # one weight read instead of two: the shared step is shorter than the two apart,
        # and longer than either alone
        assert 1e3 * max(alone, piece) < v[f"ride_{tag}_ms"] < v[f"ride_apart_{tag}_ms"]


def test_the_goodput_brackets_search_each_chunk_size_on_both_models(monkeypatch):
    from gpuinfer.predict import llm_slo
    seen = []

    def bracket(fn, rate, **search):           # stands in for the search: records its start
        seen.append((fn.keywords["prefill_chunk"], fn.keywords["achievable"], rate, search))
        return (1.0, 2.0)
    monkeypatch.setattr(llm_slo, "goodput_bracket", bracket)
    got = page.goodput_brackets(lambda **kw: None, {"n": 10})
    assert set(got) == {(None, False), (None, True), (512, False), (512, True)}
    # the ceiling searched from 8 requests/s, the achievable model (slower) from 4
    assert sorted((c or 0, a, r) for c, a, r, _ in seen) == [
        (0, False, 8.0), (0, True, 4.0), (512, False, 8.0), (512, True, 4.0)]
    assert all(s == {"n": 10} for *_, s in seen)
