"""course.pages.chapter10_mixture_of_experts: what chapter 10's prose quotes, against
arithmetic done by hand from the model cards and the catalogue (and the checks the page used
to run on the package's functions)."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

from gpuinfer import hardware
from gpuinfer.course import exercises
from gpuinfer.course.exercises import chapter10_mixture_of_experts as moe_exercises
from gpuinfer.course.pages import chapter10_mixture_of_experts as page
from gpuinfer.hardware import device_links
from gpuinfer.predict import architectures, expert_parallel, speculative, step_model, validation

MIXTRAL, DSV3 = architectures.get("mixtral-8x7b"), architectures.get("deepseek-v3")


def test_model_sizes_match_their_model_cards():
    values = page.sizes_block()
    # Mistral's paper: 46.7B parameters, 12.9B active; DeepSeek-V3's: 671B, 37B active.
    assert values["mx_total_b"] == pytest.approx(46.7, rel=0.01)
    assert values["mx_active_b"] == pytest.approx(12.9, rel=0.01)
    assert values["ds_total_b"] == pytest.approx(671, rel=0.01)
    assert values["ds_active_b"] == pytest.approx(37, rel=0.02)
    # OpenAI's gpt-oss card counts 3.61B and 5.13B active, the input embedding left out.
    assert page.active_without_embedding("gpt-oss-20b") == pytest.approx(3.61e9, rel=0.01)
    assert page.active_without_embedding("gpt-oss-120b") == pytest.approx(5.13e9, rel=0.01)
    assert values["oss120_active_noemb_b"] == pytest.approx(5.13, rel=0.01)


def test_experts_touched_and_the_bytes_a_step_reads():
    # Mixtral, 2 of 8 experts a token: 8 tokens miss an expert with probability (6/8)^8,
    # so 8 x (1 - 0.75^8) = 7.20 experts are touched.
    assert step_model.experts_touched(MIXTRAL, 8) == pytest.approx(8 * (1 - 0.75**8))
    # A count measured on a routing trace is taken as given.
    assert step_model.experts_touched(DSV3, 64, touched=100.0) == 100.0
    batches = np.unique(np.geomspace(1, 4096, 30).astype(int))
    read = step_model.step_weight_bytes(DSV3, "fp8", batches)
    assert np.all(np.diff(read) >= 0), "bytes never fall with the batch"


def _read(mx, ds):
    return pd.DataFrame({"Mixtral-8x7B, fp16": mx, "DeepSeek-V3, fp8": ds},
                        index=[1, 8, 64, 1024, "every weight"])


def test_read_block_takes_shares_of_every_weight():
    values = page.read_block(_read([26.0, 60.0, 92.0, 93.0, 93.4], [37.0, 200.0, 500.0, 650.0, 671.0]))
    assert values["mx_frac_64"] == pytest.approx(92 / 93.4)
    assert values["ds_frac_1"] == pytest.approx(37 / 671)
    assert values["mx_every_gb"] == 93.4 and values["ds_gb_1024"] == 650.0


def test_turn_block_reads_the_h100s_ridge():
    values = page.turn_block(_turn())
    # H100 SXM: 989.4 TFLOP/s dense fp16 over 3.35 TB/s = 295 FLOP/byte.
    h100 = hardware.get("H100 SXM")
    assert values["ridge_h100"] == pytest.approx(h100.peak_flops("fp16") / h100.bandwidth)
    assert values["cbb_mx_h100"] == 1200.0 and values["cbb_mx_ratio"] == pytest.approx(1.1)


def _turn():
    names = [architectures.get(n).name for n in ("mixtral-8x7b", "deepseek-v3", "qwen3-30b-a3b",
                                                 "llama-3-70b", "gpt-oss-120b")]
    rows = {(n, g): {"E/k": 4.0, "ridge x E/k": 1000.0 + i, "compute-bound batch": 1200.0,
                     "over ridge x E/k": 1.1}
            for i, n in enumerate(names) for g in ("H100 SXM", "H200")}
    return pd.DataFrame(rows).T


def test_gptfast_clause_follows_the_published_rows():
    # Mixtral at 0.45 of its ceiling against Llama-2-7B at 0.60: 0.75, 25% slower; at 0.66,
    # 1.1, 10% faster; at 0.61, within the 5% band.
    assert page.gptfast_clause(0.45, 0.60).startswith("Mixtral is 25% slower")
    assert page.gptfast_clause(0.66, 0.60).startswith("Mixtral is 10% faster")
    assert page.gptfast_clause(0.61, 0.60).startswith("Mixtral is about as fast")


def test_mtp_draft_and_deepseeks_speedup():
    # One more block of 61: a draft at 1/61 of a step. At acceptance 0.85 a round yields
    # 1.85 tokens for 1 + 1/61 steps: 1.82x, DeepSeek's "1.8x".
    assert page.mtp_draft_cost() == pytest.approx(1 / 61)
    assert speculative.speedup(0.85, 1, 1 / 61) == pytest.approx(1.85 / (1 + 1 / 61))
    eplb = pd.DataFrame({"experts in order": [1.3, np.nan, 3.0, np.nan, np.nan],
                         "EPLB": [1.05, 1.01, 2.5, 1.1, 1.2]},
                        index=pd.MultiIndex.from_tuples([(8, 0), (8, 32), (64, 0), (64, 64),
                                                         (72, 32)]))
    mtp = pd.DataFrame({"speedup at 0.85, achievable": [1.7, 1.2],
                        "speedup at 0.85, ceiling": [1.8, 1.5],
                        "verify / plain step, achievable": [1.0, 1.4]}, index=[1, 40])
    rack = pd.DataFrame({"20 ms: batch/GPU": [30, 40]}, index=["EP8", "EP72"])
    values = page.eplb_mtp_block(eplb, mtp, rack)
    assert values["mtp_b20"] == 40 and values["mtp_b20_85"] == 1.2 and values["eplb_64_0"] == 2.5
    assert values["mtp_ideal_85"] == pytest.approx(1.85 / (1 + 1 / 61))


def test_eplb_table_balances_a_seeded_router():
    rng = np.random.default_rng(0)
    eplb = page.eplb_table(rng, np.full(256, 1 / 256), 256, 8, tokens=512)
    # The busiest GPU carries at least the mean; redundant copies never make it worse.
    assert (eplb["EPLB"] >= 1 - 1e-12).all()
    assert eplb.loc[(64, 64), "EPLB"] <= eplb.loc[(64, 0), "EPLB"]
    assert np.isnan(eplb.loc[(8, 32), "experts in order"])


def test_deepep_block_and_the_cited_node_rates():
    deepep = pd.DataFrame({"dispatch MB": [6.4, 2.0, 8.0], "dispatch floor (us)": [10.0, 40.0, 90.0],
                           "DeepEP dispatch (us)": [80.0, 118.0, 194.0]}, index=[8, 16, 256])
    deepep["dispatch: floor / measured"] = deepep["dispatch floor (us)"] / deepep[
        "DeepEP dispatch (us)"]
    values = page.deepep_block(deepep)
    # From EP16 on: 40 / 118 = 0.339 and 90 / 194 = 0.464.
    assert values["a2a_frac_min"] == pytest.approx(40 / 118)
    assert values["a2a_frac_max"] == pytest.approx(90 / 194)
    # EP8 on the H800's ~160 GB/s NVLink: 6.4e6 B / 160e9 B/s = 40 us, half of the 80 us.
    assert values["a2a_h800_floor_8"] == pytest.approx(40.0)
    assert values["a2a_h800_frac_8"] == pytest.approx(0.5)
    # Through one 400 Gb/s NIC (50e9 B/s): 6.4e6 / 50e9 = 128 us.
    assert values["a2a_nic_8"] == pytest.approx(128.0)
    assert values["ds_node_tps"] == 14_800 and values["sg_node_tps"] == 22_300


def test_exercise_block_solution_steps():
    values = page.exercise_block(_turn())
    # 32 GPUs, 8 a node: 24 of the 31 others are on other nodes.
    assert values["ex_a2a32_offnode_pct"] == pytest.approx(77.42, abs=0.01)
    # EP32's dispatch floor: 128 x 8 x 7168 x 31/32 = 7,110,656 B, 24/31 of them through
    # the 50e9 B/s a GPU of the network (5,505,024 B: 110.1 us), the other 7/31 over
    # NVLink's 450e9 B/s (1,605,632 B: 3.6 us) at the same time: 110.1 us, no latency.
    assert values["ex_a2a32_disp_us"] == pytest.approx(7_110_656 * 24 / 31 / 50e9 * 1e6)
    assert values["ex_a2a32_comb_us"] == pytest.approx(2 * 7_110_656 * 24 / 31 / 50e9 * 1e6)
    # Qwen3-235B routes 8 of 128 experts: an expert is missed by 32 tokens with
    # probability (120/128)^32 = 0.127.
    assert values["qw_miss_32"] == pytest.approx((120 / 128) ** 32)
    # The rule of thumb on an A100: ridge x E/k = ridge x 8/2.
    a100 = hardware.get("A100 80GB")
    assert values["mx_rule_a100"] == pytest.approx(4 * a100.peak_flops("fp16") / a100.bandwidth)
    assert values["mx_ridge_ek"] == 1000.0         # read from the page's table (Mixtral's row)
    assert values["ds_moe_layers"] == 58            # 61 layers, the first 3 dense


def test_the_page_lists_every_problem_of_the_chapter():
    assert sorted(page.EXERCISES) == sorted(
        n for n in exercises.names() if exercises.get(n).where == "chapters/10_mixture_of_experts")


def test_figures_draw_what_their_captions_say():
    batches = np.array([1, 8, 64])
    cases = {"Mixtral-8x7B, fp16": (MIXTRAL, "fp16"), "DeepSeek-V3, fp8": (DSV3, "fp8")}
    curves = {"Mixtral-8x7B, fp16": np.array([26.0, 60.0, 92.0]),
              "DeepSeek-V3, fp8": np.array([37.0, 200.0, 500.0])}
    fig = page.weights_figure(batches, curves, {"Mixtral-8x7B, fp16": 93.4,
                                                "DeepSeek-V3, fp8": 671.0}, cases)
    assert [ax.get_title() for ax in fig.axes] == list(cases)
    assert "dense model of equal total size (671 GB)" in [
        t.get_text() for t in fig.axes[1].get_legend().get_texts()]
    speed = pd.DataFrame({"a": [1.0, 10.0], "b": [2.0, 20.0]}, index=[1, 64])
    assert len(page.speed_figure(speed, "t").axes[0].get_lines()) == 2
    link = device_links.interconnect_for(hardware.get("H100 SXM"))
    deepep = pd.DataFrame({"dispatch MB": [1.0, 2.0, 8.0], "DeepEP dispatch (us)": [77, 118, 194]},
                          index=[8, 16, 256])
    ax = page.deepep_figure(deepep, link).axes[0]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    # EP8 and EP16..256: NVLink up to the 8 GPUs of a domain, the network past it.
    assert labels[:2] == ["floor, EP8 (NVLink)", "floor, EP16 (across servers)"]
    assert len(ax.get_lines()) == 5


def test_speed_block_reads_the_trio_and_gptfasts_runs():
    dense_active = dataclasses.replace(MIXTRAL, name="dense, active", n_experts=1,
                                       experts_per_token=1, expert_d_ff=2 * MIXTRAL.expert_d_ff)
    dense_total = dataclasses.replace(MIXTRAL, name="dense, total",
                                      experts_per_token=MIXTRAL.n_experts)
    trio = {m.name: m for m in (MIXTRAL, dense_active, dense_total)}
    speed = pd.DataFrame({n: [100.0 + i, 1000.0] for i, n in enumerate(trio)}, index=[1, 64])
    values = page.speed_block(speed, trio, hardware.get("H200"), 1024, 300)
    assert (values["tps_mx_1"], values["tps_da_1"], values["tps_dt_1"]) == (100.0, 101.0, 102.0)
    # DeepSeek-V3's MLA cache: 61 x 576 x 2 = 70,272 B a token.
    assert values["ds_mla_kb"] == pytest.approx(70.272)
    assert values["ds_cbb_kv_tb"] == pytest.approx(values["ds_cbb_h200_fp8"] * 4096 * 70_272 / 1e12)
    # The batch-1 rows' interval around gpt-fast's prediction: a rate, pred x lo to pred x hi.
    lo, hi = validation.interval(1.0, "batch-1")
    assert values["gf_mx_pred_lo"] == pytest.approx(values["gf_mx_pred"] * lo)
    assert values["gf_mx_pred_hi"] == pytest.approx(values["gf_mx_pred"] * hi)


def test_node_limited_block_reads_its_three_rules():
    table = pd.DataFrame({"destinations a token": [8.0, 5.5, 3.5],
                          "network copies a token": [7.0, 4.8, 3.0],
                          "floor (us)": [4000.0, 2000.0, 1700.0],
                          "at DeepEP's 43 GB/s (us)": [4700.0, 2300.0, 2000.0]},
                         index=["pair", "node", "limited"])
    values = page.node_limited_block(table)
    assert (values["nl_pair"], values["nl_any"], values["nl_lim"]) == (7.0, 4.8, 3.0)
    assert (values["nl_any_nodes"], values["nl_lim_nodes"]) == (5.5, 3.5)
    assert (values["nl_pair_us"], values["nl_lim_meas_us"]) == (4000.0, 2000.0)
    assert values["nl_saving"] == pytest.approx(7.0 / 3.0)      # one a pair over the limited


def test_skew_and_formats_blocks():
    rows = {(t, r): {"distinct experts": 200.0 + t / 64, "busiest GPU / mean": 1.2,
                     "experts ms": 1.0 + t / 1024, "step ms": 5.0}
            for t in (64, 2048) for r in ("uniform", "skewed (Zipf)")}
    values = page.skew_block(pd.DataFrame(rows).T, 8)
    # Uniform routing, 8 of 256 experts a token: 256 x (1 - (248/256)^64) = 222.4 touched.
    assert values["uni_touched_model"] == pytest.approx(256 * (1 - (248 / 256) ** 64))
    assert values["skew_2048_z_exp"] == 3.0
    oss = "bf16 (+ MXFP4 experts)"
    formats = pd.DataFrame(
        {"memory (GB)": [65.0, 13.0, 1342.0, 671.0], "batch-1 read (GB)": [5.0, 2.0, 74.0, 37.0],
         "H100s to hold it": [1, 1, 18, 9], "H200s to hold it": [1, 1, 10, 5]},
        index=pd.MultiIndex.from_tuples([("gpt-oss-120b", oss), ("gpt-oss-20b", oss),
                                         (DSV3.name, "bf16"), (DSV3.name, "fp8")]))
    assert page.formats_block(formats)["ds_fp8_h100s"] == 9.0


def test_the_rack_table_and_mtp():
    rack = page.rack_table()
    values = page.rack_block(rack)
    # An NVL72: 72 GPUs in one NVLink domain; a GPU's NIC, one of 8 NDR ports: 400 Gb/s.
    assert values["rack_domain"] == 72 and values["rack_nic_gbs"] == pytest.approx(50.0)
    assert values["rack_gain20"] == pytest.approx(values["rack_ep72_20_tps"]
                                                  / values["rack_ep8_20_tps"])
    # NVFP4 experts: 4.5 bits a weight against fp8's 8, so the model shrinks.
    assert values["rack_fp4_gb"] < values["rack_fp8_gb"]
    mtp = page.mtp_table(rack)
    # Verifying 2 tokens costs at least a plain step; never a speed-up past the ideal.
    assert (mtp["verify / plain step, achievable"] >= 1).all()
    assert (mtp["speedup at 0.85, achievable"] <= 1.85 / (1 + 1 / 61) + 1e-9).all()


def test_decision_block_reads_the_options():
    dec = page.decision_table(moe_exercises.DECISION_EFFICIENCY)
    values = page.decision_block(dec, dec, dec)
    lo, hi = validation.interval(1.0, "moe throughput")
    usd = dec.iloc[0]["usd_per_million"]
    # A cost moves against the rate: its range is usd / hi to usd / lo.
    assert values["dec_usd_lo"] == pytest.approx(usd / hi)
    assert values["dec_usd_hi"] == pytest.approx(usd / lo)
    alt = dec[dec["layout"] != dec.iloc[0]["layout"]].iloc[0]["usd_per_million"]
    assert values["dec_alt_usd"] == alt
    # Each other option's own interval, alt / hi to alt / lo, and the runner-up's likewise.
    assert values["dec_alt_lo"] == pytest.approx(alt / hi)
    assert values["dec_alt_hi"] == pytest.approx(alt / lo)
    assert values["dec_second_lo"] == pytest.approx(dec.iloc[1]["usd_per_million"] / hi)
    # The MoE ratios lie below 1 (hi < 1), so usd / hi > usd: the prediction is below its range.
    assert hi < 1 and values["dec_own"].startswith("below its own interval")


def test_decision_flip_clause_branches_on_overlap():
    over = {"other_low": 1.0, "other_high": 3.0, "flips": True}
    apart = {"other_low": 3.0, "other_high": 9.0, "flips": False}
    both = page.decision_flip_clause(apart, over)
    assert "(3.00-9.00 USD) lies above it" in both and "(1.00-3.00 USD) overlaps it" in both
    assert "could flip" in both
    assert page.decision_flip_clause(apart, apart).endswith("outlasts the model's error")


def test_layouts_verdict_branches_on_both_models():
    def v(tp, epdp, tp_ach, epdp_ach):
        return page.layouts_verdict({"ds8_tp_64_ms": tp, "ds8_epdp_64_ms": epdp,
                                     "ds8_tp_64_ms_ach": tp_ach, "ds8_epdp_64_ms_ach": epdp_ach})
    # Two step times' cost intervals, x / hi to x / lo, overlap while their ratio is at
    # most hi / lo (about 2.7 on the MoE rows): 28.3 / 27.6 = 1.03 ties.
    lo, hi = validation.interval(1.0, "moe throughput")
    assert v(19.9, 19.0, 28.3, 27.6).endswith("at batch 64 the layouts tie")
    apart = 1.1 * hi / lo                       # a ratio just past the overlap
    assert v(30, 20, 10 * apart, 10).startswith("EP + DP attention ahead on both")
    assert v(20, 30, 10, 10 * apart).startswith("TP ahead on both")
    assert v(30, 20, 10, 10 * apart).startswith("ahead on one and behind on the other")


def test_layouts_block_compares_ceiling_with_ceiling_and_achievable_with_achievable():
    idx = pd.MultiIndex.from_product([["ds", "qw"], [64, 512], list(expert_parallel.LAYOUTS)],
                                     names=["case", "batch", "layout"])
    table = pd.DataFrame({c: 1.0 for c in ("ms_per_step", "kv_GB_per_gpu", "comm_ms",
                                           "tokens_per_s_per_gpu")}, index=idx)
    values = page.layouts_block(table, "ds", "qw")
    ach = expert_parallel.moe_layouts("deepseek-v3", "H200", 8, batch=64, context=4096,
                                      dtype="fp8", achievable=moe_exercises.DECISION_EFFICIENCY)
    # The achievable all-to-all is DeepEP's measured speed: its ceiling (with latency) over
    # deepep_fraction(8), never the ceiling itself.
    fitted = expert_parallel.moe_layouts("deepseek-v3", "H200", 8, batch=64, context=4096,
                                         dtype="fp8", achievable=True)
    assert values["ds8_epdp_64_comm_ach"] == ach.loc["EP + DP attention", "comm_ms"]
    assert values["ds8_epdp_64_comm_ach"] > fitted.loc["EP + DP attention", "comm_ms"]
    assert values["ds8_tp_64_comm_ach"] == fitted.loc["TP", "comm_ms"]
    assert values["ds8_64_verdict"].endswith("tie")       # the stub's 1.0 ms on the ceiling


def test_measured_verdict_places_a_measurement():
    # 13,386 above an interval of 3,610-9,716 and the achievable 11,114, under the ceiling's
    # 22,164: the interval does not cover that regime.
    above = page.measured_verdict(13386, 3610, 9716, 11114, 22164, 8)
    assert above.startswith("above EP72's 80% interval (up to 9,716) and above the achievable 11,114")
    assert "below the ceiling's 22,164" in above and "does not cover this regime" in above
    assert "EP of at most 8" in above
    # At 50 ms: 13,386 between the achievable 12,298 and the ceiling 22,255.
    assert page.sglang_vs_50ms(13386, 12298, 22255).endswith("lies between the two")
    assert page.sglang_vs_50ms(30000, 12298, 22255).endswith("above both")
    inside = page.measured_verdict(5000, 3610, 9716, 11114, 22164, 8)
    assert inside.startswith("inside EP72's 80% interval (3,610-9,716)")
    assert "does not cover" not in inside
    assert "above even the 20 ms ceiling" in page.measured_verdict(3000, 3610, 9716, 4000, 2000, 8)
    # The course's MoE rows run EP of at most 8 (TensorRT-LLM's perf overview: EP 1, 4, 8).
    assert page.moe_rows_max_ep() == 8
