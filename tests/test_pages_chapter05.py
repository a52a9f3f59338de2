"""course.pages.chapter05_serving: what chapter 5's prose quotes, against arithmetic done
by hand from the catalogue and the model cards (and the checks the page used to run on
the package's functions)."""

import math

import pandas as pd
import pytest

from gpuinfer import hardware
from gpuinfer.course import exercises
from gpuinfer.course.exercises import check
from gpuinfer.course.exercises import chapter05_serving as serving_exercises
from gpuinfer.course.pages import chapter05_serving as page
from gpuinfer.hardware import devices, mig_slices
from gpuinfer.measure import fusion
from gpuinfer.predict import colocation, llm

GB = 1e9


def test_the_unfused_gelu_chain_moves_nine_times_the_fused_bytes():
    # Six ops read one tensor and write one (2 tensors each), two read two (3 each):
    # 6 x 2 + 2 x 3 = 18 tensors against the fused kernel's read and write, 2: 9 times.
    n = 1_000_000
    unfused = fusion.elementwise_chain_bytes(n, fusion.GELU_TANH_OP_INPUTS, "fp16", fused=False)
    fused = fusion.elementwise_chain_bytes(n, fusion.GELU_TANH_OP_INPUTS, "fp16", fused=True)
    assert unfused == 18 * n * 2 and fused == 2 * n * 2


def test_fusion_block_reads_the_measured_table():
    table = pd.DataFrame({"MB moved": [18.0, 2.0], "ms": [5.0, 1.0], "GB/s": [3.6, 2.0]},
                         index=["unfused", "fused"])
    cpu = hardware.get("CPU")
    values = page.fusion_block(table, 2**20, "fp32", cpu, gpu_elements=2**26)
    assert values["fusion_bytes_ratio"] == 9.0 and values["fusion_time_ratio"] == 5.0
    assert values["fusion_n_mib"] == 4.0                  # 2**20 elements x 4 bytes
    assert values["fusion_gpu_mib"] == 128.0              # 2**26 x 2 bytes (fp16) = 128 MiB
    assert f"{100 * 2e9 / cpu.bandwidth:.0f}% of the" in values["fusion_roof"]
    # The largest L2 of the catalogue's GPUs, and the page's claim that a GPU intermediate
    # is larger than it.
    l2 = [a.cache_bytes for a in map(hardware.get, devices.names())
          if a.kind == "gpu" and a.cache_bytes]
    assert values["fusion_l2_top_mib"] * 2**20 == max(l2) < 128 * 2**20


def _tuned(control_s, iqr_s=5e-6, other_s=300e-6):
    rows = [("direct", 100e-6, iqr_s), ("direct (control)", control_s, iqr_s),
            ("im2col + GEMM", other_s, 10e-6)]
    df = pd.DataFrame(rows, columns=["candidate", "seconds", "iqr_s"]).sort_values("seconds")
    df["speedup_vs_slowest"] = df["seconds"].max() / df["seconds"]
    return df.reset_index(drop=True)


def test_tuning_block_counts_what_stands_clear_of_the_noise():
    values = page.tuning_block(_tuned(102e-6))
    # Control 2% off (102 vs 100 us), IQR 5% of the median; im2col's gap (200 us) is over
    # the larger IQR (10 us): the one other candidate is distinct, a spread of 3x. The
    # control is the direct kernel again: two candidates, not three.
    assert values["tune_control_gap_pct"] == pytest.approx(2.0)
    assert values["tune_control_iqr_pct"] == pytest.approx(5.0)
    assert values["tune_n_distinct"] == 1 and values["tune_n_candidates"] == 2
    assert values["tune_spread"] == pytest.approx(3.0)
    assert "1 candidate stands clear" in values["tune_verdict"]
    assert values["tune_ranking"] == ("this run ranks the other candidate as really slower "
                                      "than the fastest; it does not tie with it")


def test_tuning_block_never_counts_the_control_and_says_none_ties():
    # Four rows: direct 100, its control 101 (1 us apart, inside the 5 us IQR), and two
    # more at 200 and 300 us, each over 10 us behind: both other candidates are slower.
    df = _tuned(101e-6)
    df = pd.concat([df, pd.DataFrame({"candidate": ["channels-last"], "seconds": [200e-6],
                                      "iqr_s": [5e-6]})]).sort_values("seconds")
    df["speedup_vs_slowest"] = df["seconds"].max() / df["seconds"]
    values = page.tuning_block(df.reset_index(drop=True))
    assert values["tune_n_candidates"] == 3 and values["tune_n_distinct"] == 2
    assert values["tune_ranking"] == ("this run ranks both other candidates as really "
                                      "slower than the fastest; none ties with it")
    assert "2 candidates stand clear" in values["tune_verdict"]


def test_tuning_block_distrusts_the_rule_when_the_control_fails_it():
    # The cold reader's run: the control's twins 7.4% apart against an IQR of 7.3% of the
    # median: by the page's rule the kernel is slower than itself.
    values = page.tuning_block(_tuned(107.4e-6, iqr_s=7.3e-6))
    assert values["tune_control_gap_pct"] == pytest.approx(7.4)
    assert "the rule cannot be trusted" in values["tune_ranking"]
    assert values["tune_verdict"].startswith("On this run the noise swamps")
    values = page.tuning_block(_tuned(130e-6))         # 30 us apart, IQR 5 us
    assert values["tune_verdict"].startswith("On this run the noise swamps")


def test_tuning_block_says_when_every_candidate_ties():
    # IQR 45% of the median (under 50%), im2col 40 us behind: within the larger IQR, a tie.
    ties = page.tuning_block(_tuned(101e-6, iqr_s=45e-6, other_s=140e-6))
    assert ties["tune_n_distinct"] == 0
    assert "every candidate ties with the fastest" in ties["tune_verdict"]
    assert ties["tune_ranking"] == ("this run ranks the other candidate as tied with "
                                    "the fastest")


def deployments_for(backend, chat_instances=2):      # the page's example plan
    chat = colocation.deployment("chat", "llama-3-8b", instances=chat_instances, batch=16,
                                 context=4096, workspace_bytes=1 * GB, backend=backend)
    embed = colocation.deployment("embed", n_params=0.3e9, instances=2,
                                  workspace_bytes=0.5 * GB, backend=backend)
    classify = colocation.deployment("classify", n_params=0.1e9, dtype="fp32",
                                     workspace_bytes=0.5 * GB, backend=backend)
    return [chat, embed, classify]


def test_the_memory_plan_by_hand():
    values = page.plan_block(deployments_for)
    # Llama-3-8B: 8.03e9 parameters x 2 bytes = 16.06 GB; its KV cache 2 x 32 layers x 8 KV
    # heads x 128 x 2 bytes = 131,072 bytes a token, x 16 x 4096 tokens = 8.59 GB.
    assert values["chat_weights_gb"] == pytest.approx(16.06, abs=0.01)
    assert values["chat_kv_gb"] == pytest.approx(16 * 4096 * 131072 / GB)
    assert values["kv_per_token_kb"] == pytest.approx(131.072)
    # The A100 leaves 85.1e9 - 2**30 = 84.03 GB. PyTorch backend: the embedder 2 x (0.6 +
    # 0.5) GB, the classifier 0.4 + 0.5 GB; a chat instance 16.06 + 8.59 + 1 = 25.65 GB:
    # (84.03 - 3.1) / 25.65 = 3.2 -> 3. TensorRT: weights once (16.06 + 0.6 + 0.4), each
    # instance 9.59 GB, embed and classify workspaces 1.5 GB: (84.03 - 18.56) / 9.59 = 6.8 -> 6.
    assert values["chat_max_a100"] == 3 and values["chat_max_a100_trt"] == 6
    assert values["trt_instance_gb"] == pytest.approx(9.59, abs=0.01)
    # Three chat instances: 76.95 + 3.1 = 80.05 GB: fits 84.03 GB, not 80e9 bytes (by ~50 MB).
    assert values["three_free_gb"] == pytest.approx(84.03 - 80.05, abs=0.02)
    assert values["three_marketing_short_mb"] == pytest.approx(50, abs=3)


def test_engine_fractions():
    chat = deployments_for("pytorch")[0]
    values = page.engine_fraction_block(chat)
    assert values["eng_two_vllm"] == 2 * values["eng_vllm_default"] > 1   # two defaults overfill
    # One chat instance: 16.06 + 8.59 + 1 GB + 1 GiB of activations over 85.1 GB = 0.314.
    assert values["eng_chat_fraction"] == pytest.approx((16.06 + 8.59 + 1 + 2**30 / GB) / 85.1,
                                                        abs=0.001)
    # Beside a TensorRT-LLM instance less is left than another copy of the 16.06 GB weights.
    assert 0 < values["eng_trt_left_gb"] < 16.06


def test_one_instance_beats_two_and_reads_the_weights_without_the_embedding():
    def step_one(b):
        return llm.decode_step_s("llama-3-8b", "A100 80GB", b, 2048)

    def step_two(b):                       # two instances of half the batch, in turn
        return 2 * step_one(b // 2)

    instances = pd.DataFrame({("served/s", "1 x 32"): [9.9], ("served/s", "2 x 16"): [6.5]},
                             index=[10])
    values = page.instances_block(step_one, step_two, instances, "llama-3-8b", 256)
    # Two batch-16 steps read the weights twice: one instance sustains > 1.2x the rate.
    assert values["inst_sat_one"] > 1.2 * values["inst_sat_two"]
    assert values["inst_sat_one"] == pytest.approx(32 / (256 * step_one(32)))
    # 16.06 GB less the embedding table: 128,256 x 4,096 x 2 bytes = 1.05 GB -> 15.01 GB.
    assert values["inst_weights_gb"] == pytest.approx(15.01, abs=0.01)
    assert values["inst_top_rate"] == 10.0 and values["inst_top_two"] == 6.5


def test_mig_block_by_hand_and_within_its_intervals():
    values = page.mig_block()
    # An H100 SXM has 132 SMs; a 1g slice 16: 12% of them, and seven leave 132 - 112 = 20.
    assert (values["mig_1g_sms"], values["mig_card_sms"], values["mig_stranded_sms"]) == (16, 132, 20)
    assert values["mig_1g_pct"] == pytest.approx(100 * 16 / 132)
    part = mig_slices.mig_slice("H100 SXM", "1g.10gb")
    tpot = llm.decode_step_s("llama-3-8b", part, 1, 2048, "int4")
    assert values["mig_slice_tpot_ms"] == pytest.approx(tpot * 1e3)
    assert values["mig_slice_gpu_tps"] == pytest.approx(7 / tpot)       # seven slices
    # Each option's central value lies inside its own interval.
    best = max(values["mig_seven_models_tps_ach"], values["mig_slices_tps_ach"])
    assert values["mig_models_best_lo"] < best < values["mig_models_best_hi"]
    assert values["mig_whole_tps_lo"] < values["mig_whole_tps_ach"] < values["mig_whole_tps_hi"]
    # int4 (4 bits + a 16-bit scale per 32 weights = 0.5625 bytes) on every matmul weight,
    # LM head included: (8.030e9 - 0.525e9 embedding) x 0.5625 = 4.22 GB, plus the fp16
    # embedding table, 0.525e9 x 2 = 1.05 GB: 5.27 GB. 2,048 tokens x 131,072 B = 0.27 GB.
    assert values["mig_int4_weights_gb"] == pytest.approx(5.27, abs=0.01)
    assert values["mig_kv_seq_gb"] == pytest.approx(2048 * 131072 / GB)


def test_fit_block_interval_brackets_the_step():
    from gpuinfer.predict import mig_sizing

    fit = mig_sizing.mig_options("llama-3-8b", accelerator="H100 SXM", batch=8, context=4096)
    values = page.fit_block(fit)
    assert values["fit_3g40_tpot_lo"] < values["fit_3g40_tpot"] < values["fit_3g40_tpot_hi"]
    assert values["fit_3g40_ceil"] < values["fit_3g40_tpot"]      # the ceiling is faster


def test_the_exercises_answers_and_the_decision():
    for name in page.EXERCISES:
        assert check(name, exercises.get(name).answer()), name
        assert exercises.get(name).where == "chapters/05_serving"
    values = page.exercise_block()
    assert values["ex_gelu_fused_bytes"] == 2 * 1_000_000 * 2     # read x, write y, fp16
    assert values["ex_8b_kv_per_token"] == 2 * 32 * 8 * 128 * 2
    assert values["ex_h200_usable_gb"] == pytest.approx(
        (hardware.get("H200").memory_bytes - 2**30) / GB)
    d = serving_exercises.DECISION
    # The solution: 1g.20gb meets the target on the ceiling only; 2g.20gb has its memory
    # slices, hence its step; the profiles smaller than the choice are the two 20 GB ones.
    assert values["dec_1g20_tpot_ceil"] <= d["tpot_s"] * 1e3 < values["dec_1g20_tpot"]
    unc = serving_exercises.decision_intervals()
    assert unc.loc["1g.20gb", "tpot_s"] == unc.loc["2g.20gb", "tpot_s"]
    assert list(unc.loc[:"3g.40gb"].index[:-1]) == ["1g.20gb", "2g.20gb"]
    assert page.decision_pick(True) == "3g.40gb" and page.decision_pick(False) == "1g.20gb"
    assert values["dec_1g20_tpot_lo"] < values["dec_1g20_tpot"] < values["dec_1g20_tpot_hi"]
    # 1g.20gb's low end (18.1 ms) is over the 15 ms target, 3g.40gb's high end (24.0 ms)
    # over it too: the choice can only move up, past 4g.40gb (3g.40gb's memory slices, its
    # step) to 7g.80gb.
    assert values["dec_1g20_tpot_lo"] > d["tpot_s"] * 1e3 < values["dec_3g40_tpot_hi"]
    assert values["dec_mig_verdict"].endswith("the choice can only move up, to 7g.80gb, "
                                              "so measure first")
    assert "1g.20gb's range" not in values["dec_mig_verdict"]
    assert values["dec_1g10_holds"] == "1 such sequence"      # 1g.10gb: one, singular


def test_gptfast_and_memory_blocks():
    # gpt-fast's README: int8 weight-only over bf16, between 1 and the bytes ratio 2.
    assert 1 < page.gptfast_block()["gptfast_int8_gain"] < 2
    values = page.memory_block()
    assert values["a100_hbm_bytes"] == 80 * 1024**3 and values["reserve_gib"] == 1.0
    assert values["a100_gib"] < 80 and math.isclose(values["a100_gib"] * 2**30,
                                                     values["a100_bytes"])



def test_contention_block_reads_the_table_and_the_service_time():
    contention = pd.DataFrame({"A p99 (ms)": [10.0, 30.0], "one model p99 (ms)": [10.0, 15.0],
                               "GPU busy": [0.6, 0.9]}, index=[0.0, 800.0])

    def svc(b):                          # 1 ms + 0.1 ms a request
        return 1e-3 + 1e-4 * b

    values = page.contention_block(contention, svc, 400.0)
    # Full batches of 64: 64 / (1 + 6.4 ms) = 8,649 requests/s; a batch of one 1.1 ms.
    assert values["emb_sat"] == pytest.approx(64 / 7.4e-3)
    assert values["emb_batch1_ms"] == pytest.approx(1.1)
    assert values["busy_alone"] == 60.0 and values["b_top"] == 800.0


def test_the_figures_draw_what_their_captions_say():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plan = colocation.memory_plan(deployments_for("pytorch"), "A100 80GB")
    fig = page.plan_figure(plan)
    ax = fig.axes[0]
    # One line a GPU at its bytes less 1 GiB: the A100's at 85.1e9 - 2**30 = 84.03 GB.
    xs = sorted(line.get_xdata()[0] for line in ax.get_lines())
    assert len(xs) == 3 and xs[1] == pytest.approx(84.03, abs=0.01)
    # The bars add up to the plan: 2 x 25.65 + 2.2 + 0.9 GB = 54.4 GB.
    assert max(p.get_x() + p.get_width() for p in ax.patches) == pytest.approx(
        plan.used_bytes / GB)
    table = pd.DataFrame({"predicted ms": [1.0, 0.1], "ms": [2.0, 0.3]}, index=["u", "f"])
    fusion_ax = page.fusion_figure(table, hardware.get("CPU"), "here", 8, "fp32").axes[0]
    assert fusion_ax.get_yscale() == "log" and len(fusion_ax.patches) == 4
    tuned_ax = page.tuning_figure(_tuned(102e-6), "t").axes[0]
    assert tuned_ax.get_xscale() == "log" and len(tuned_ax.patches) == 6
    inst = pd.DataFrame({("p99 (s)", "1 x 32"): [1.0, 2.0], ("p99 (s)", "2 x 16"): [1.5, 9.0]},
                        index=[2, 4])
    assert len(page.instances_figure(inst, "t").axes[0].get_lines()) == 2
    cont = pd.DataFrame({"A p99 (ms)": [10.0, 30.0], "one model p99 (ms)": [10.0, 15.0]},
                        index=[0.0, 800.0])
    assert page.contention_figure(cont, "t").axes[0].get_xlabel().startswith("model B's load")
    plt.close("all")
