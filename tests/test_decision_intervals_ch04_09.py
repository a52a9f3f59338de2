"""Issue 31, decisions with their uncertainty, chapters 4, 8 and 9: each page shows an
achievable-model answer with the interval of its regime (chapter 7's validation) and says
whether the runner-up lies inside it. Here the intervals are derived by hand from the
validation errors (the 10th and 90th percentiles of measured / achievable over the
regime's rows, every source weighing the same) and compared with what the pages compute
through `validation`; two predictions flip when their intervals overlap, a fixed bar when
it lies inside the chosen option's."""
import numpy as np
import pytest

from gpuinfer.predict import achievable, llm, llm_serving, parallel, paged_kv, validation
from gpuinfer.predict import step_model
from gpuinfer.predict import collectives
from gpuinfer.course.exercises import chapter04_quantisation as ch04
from gpuinfer.course.exercises import chapter08_multi_gpu as ch08
from gpuinfer.course.exercises import chapter09_llm_serving as ch09


def _ratios(rows):
    """The 10th and 90th percentiles (80% coverage) of measured / achievable rates, each
    source weighing the same (a row 1 / its source's rows; quantiles at the midpoints of
    the sorted ratios' cumulative weights)."""
    rows = rows.assign(r=rows["measured"] / rows["achievable"],
                       w=1 / rows.groupby("source")["source"].transform("size"))
    rows = rows.sort_values("r", kind="stable")
    mid = (rows["w"].cumsum() - rows["w"] / 2) / rows["w"].sum()
    return tuple(np.interp([0.1, 0.9], mid, rows["r"]))


@pytest.fixture(scope="module")
def errors():
    return validation.validation_errors("fitted")


def test_chapter08_decision_cost_range_and_flip(errors):
    # Regime "tp>1": the fit pool's modelled rows run with more than one GPU a group.
    lo, hi = _ratios(errors[errors["tp"] > 1])
    assert len(errors[errors["tp"] > 1]) >= 5 and lo < 1 < hi
    options = parallel.tp_options(ch08.MODEL, options=ch08.DECISION_DEGREES,
                                  prices=ch08.DECISION_PRICES, context=ch08.CONTEXT,
                                  tpot_s=ch08.DECISION_TPOT_S)
    best, second = options["usd_per_million"].iloc[:2]
    # A cost moves against the rate: a measured rate r x the predicted one costs best / r,
    # so the range runs from best / hi to best / lo (about 1.33 / 1.11 = 1.19 to
    # 1.33 / 0.49 = 2.7 USD a million tokens).
    page = validation.choice(best, second, "tp>1", per="cost")
    assert page["low"] == pytest.approx(best / hi) and page["high"] == pytest.approx(best / lo)
    # The runner-up (H200 TP8, about 1.54 USD) is dearer than the winner: the two ranges
    # overlap when its cheap end (second / hi) is below the winner's dear end (best / lo).
    assert second > best
    assert page["flips"] == bool(second / hi <= best / lo)
    # The ceiling beside it: the ceiling's cheapest choice (0.67 USD), below the whole range
    # (no overheads, so cheaper than any engine runs).
    ceiling = parallel.tp_options(ch08.MODEL, options=ch08.DECISION_DEGREES,
                                  prices=ch08.DECISION_PRICES, context=ch08.CONTEXT,
                                  tpot_s=ch08.DECISION_TPOT_S, achievable=False)["usd_per_million"].iloc[0]
    assert ceiling < page["low"]


def test_chapter08_tp16_step_range(errors):
    # TP16's batch-1 step (a time: per="cost") within the model's error at TP > 1 holds
    # TP8's step whenever TP8 / TP16 < 1 / lo (the tenth TP16 gains against 1 / 0.49).
    lo, hi = _ratios(errors[errors["tp"] > 1])
    tp8, tp16 = (parallel.tp_step_s(ch08.MODEL, "H100 SXM", n, 1, ch08.CONTEXT)
                 for n in (8, 16))
    page = validation.choice(tp16, tp8, "tp>1", per="cost")
    assert (page["low"], page["high"]) == pytest.approx((tp16 / hi, tp16 / lo))
    # Two predictions: flips when the ranges overlap.
    assert page["flips"] == bool(max(tp16, tp8) / hi <= min(tp16, tp8) / lo)


def test_chapter04_format_decision_range_against_the_bar(errors):
    # Regime "dense throughput": throughput rows of dense models.
    rows = errors[(errors["kind"] == "throughput") & ~errors["moe"]]
    lo, hi = _ratios(rows)
    table = achievable.decode_options(ch04.DECISION_MODEL, ch04.CANDIDATES, baseline="bf16",
                                      **ch04.DECISION_SETTING)
    fp8, bf16 = table.loc["W8A8 fp8", "tokens_per_s"], table.loc["bf16", "tokens_per_s"]
    bar = ch04.MIN_SPEEDUP * bf16                     # 1.3 x bf16's achievable tokens/s
    page = validation.choice(fp8, bar, "dense throughput", per="rate")
    # A rate: the range is fp8 x lo to fp8 x hi (about 29,200 x 0.77 = 22,600 to
    # 29,200 x 1.14 = 33,100 tokens/s).
    assert (page["low"], page["high"]) == pytest.approx((fp8 * lo, fp8 * hi))
    # fp8 clears the bar on the model (the answer); the bar is itself a prediction (1.3 x
    # bf16's), so the two ranges overlap when fp8 x lo is at most bar x hi.
    assert fp8 >= bar
    assert page["flips"] == bool(fp8 * lo <= bar * hi)
    # W4A16 stays out: its tokens/s x hi is under the bar (the page asserts it too).
    assert table.loc["W4A16 int4 g128", "tokens_per_s"] * hi < bar


def test_chapter09_offload_breakeven_range(errors):
    # No regime is a lone prefill: the page takes all the rows ("all").
    lo, hi = _ratios(errors)
    # 32,768 tokens x 131,072 B of fp16 cache (32 layers x 8 KV heads x 128 x 2 x 2 B)
    # over the achievable prefill's seconds.
    kv_bytes = ch09.OFFLOAD_TOKENS * 32 * 8 * 128 * 2 * 2
    assert kv_bytes == ch09.OFFLOAD_TOKENS * step_model.kv_cache_bytes_per_token(ch09.MODEL)
    seconds = float(achievable.step_s(ch09.MODEL, ch09.GPU, [ch09.OFFLOAD_TOKENS], [0],
                                      logits=[0]))
    breakeven_gbs = kv_bytes / seconds / 1e9
    r = paged_kv.kv_reload_or_recompute(ch09.MODEL, ch09.GPU, ch09.OFFLOAD_TOKENS,
                                        bandwidth_bytes_per_s=7e9, achievable=True)
    assert r["breakeven_bytes_per_s"] / 1e9 == pytest.approx(breakeven_gbs)
    # The break-even is bytes / seconds: a rate, so lo x to hi x it. The SSD's 7 GB/s is
    # a device's figure, not a prediction: a fixed bar, inside the range or not.
    page = validation.choice(breakeven_gbs, 7.0, "all", per="rate", fixed_other=True)
    assert (page["low"], page["high"]) == pytest.approx((breakeven_gbs * lo, breakeven_gbs * hi))
    assert page["flips"] == bool(breakeven_gbs * lo <= 7.0 <= breakeven_gbs * hi)


def test_chapter09_chunk_budget_range(errors):
    # A step measured at 1/r of the achievable one meets 15 ms where the achievable step is
    # at most r x 15 ms: scan the budgets by hand (multiples of 64 above the 32 decodes).
    rows = errors[(errors["kind"] == "throughput") & ~errors["moe"]]
    lo, hi = _ratios(rows)

    def largest(slo_s):
        ok = [b for b in range(64, ch09.DECODES + ch09.PROMPT + 1, 64)
              if llm_serving.chunk_step_s(ch09.MODEL, ch09.GPU, b, **ch09.CHUNK_QUESTION)
              <= slo_s]
        return max(ok, default=0)

    low, high = largest(ch09.STEP_SLO_S * lo), largest(ch09.STEP_SLO_S * hi)
    page = [llm_serving.largest_chunk_budget(ch09.MODEL, ch09.GPU, **ch09.CHUNK_QUESTION,
                                             step_slo_s=ch09.STEP_SLO_S * r,
                                             granularity=ch09.BUDGET_STEP)
            for r in validation.interval(1.0, "dense throughput")]
    assert page == [low, high]
    assert low <= ch09.largest_budget() <= high < ch09.largest_budget(False)


def test_chapter09_speculation_cutoff_moves_with_the_matmul_rate_against_the_bandwidth():
    # The speed-up is a ratio of step times: what moves its cut-off is where the target's
    # matmuls turn compute-bound, i.e. the matmul rate against the bandwidth. Slower matmuls
    # (or faster bytes) reach that point at a smaller batch; faster matmuls (or slower
    # bytes) at a larger one. Chapter 9 perturbs one rate at a time by the dense interval.
    import dataclasses
    from gpuinfer.predict import speculative
    lo, hi = validation.interval(1.0, "dense throughput")
    assert lo < 1 < hi
    fit = achievable.FITTED

    def cut(eff):
        return speculative.cutoff_batch("llama-3-8b", speculative.LLAMA_3_2_1B, "H100 SXM",
                                        acceptance=0.8, k=4, context=256, achievable=eff)
    base = cut(fit)
    assert cut(dataclasses.replace(fit, matmul_scale=fit.matmul_scale * lo)) < base
    assert cut(dataclasses.replace(fit, matmul_scale=fit.matmul_scale * hi)) > base
    assert cut(dataclasses.replace(fit, bandwidth=fit.bandwidth * lo)) > base
    assert cut(dataclasses.replace(fit, bandwidth=fit.bandwidth * hi)) < base


def test_chapter07_a_slower_step_meets_a_limit_at_the_batch_of_the_limit_over_its_factor():
    # A step k times the model's meets a TPOT limit t exactly where the model's step meets
    # t / k: chapter 7 scales the interactivity points' steps that way. At 10 ms and
    # k = 1.29 (the dense interval's slow end, on time), the batch is the largest whose
    # model step is within 10 / 1.29 = 7.75 ms.
    model, gpu, ctx, t, k = "llama-3-8b", "H100 SXM", 1024, 0.010, 1.29
    b = achievable.max_batch_within(model, gpu, ctx, t / k)
    assert k * achievable.decode_step_s(model, gpu, b, ctx) <= t
    assert k * achievable.decode_step_s(model, gpu, b + 1, ctx) > t
    assert b < achievable.max_batch_within(model, gpu, ctx, t)


def test_chapter04_fp8_cache_gain_range(errors):
    # Chapter 4's fp8 KV cache: Llama-3-8B, fp16 weights, H100 SXM, 8,192 tokens. The
    # cache holds 32 layers x 8 KV heads x 128 x 2 (K and V) values a token: 131,072 B in
    # fp16, 65,536 B in fp8.
    model, gpu, ctx = "llama-3-8b", "H100 SXM", 8192
    assert step_model.kv_cache_bytes_per_token(model) == 32 * 8 * 128 * 2 * 2
    assert step_model.kv_cache_bytes_per_token(model, "fp8_e4m3") == 32 * 8 * 128 * 2
    rows = errors[(errors["kind"] == "throughput") & ~errors["moe"]]
    lo, hi = _ratios(rows)
    for b16, b8 in ((32, 32), (llm.max_batch(model, gpu, ctx, "fp16", kv_dtype="fp16"),
                               llm.max_batch(model, gpu, ctx, "fp16", kv_dtype="fp8_e4m3"))):
        f16, f8 = (achievable.decode_tokens_per_s(model, gpu, b, ctx, "fp16", kv_dtype=k)
                   for b, k in ((b16, "fp16"), (b8, "fp8_e4m3")))
        page = validation.choice(f8, f16, "dense throughput", per="rate")
        # Two rates: each range is its value x lo to x hi; they overlap when fp8's low end
        # (f8 x lo) is at most fp16's high end (f16 x hi), i.e. f8 / f16 <= hi / lo.
        assert (page["low"], page["high"]) == pytest.approx((f8 * lo, f8 * hi))
        assert (page["other_low"], page["other_high"]) == pytest.approx((f16 * lo, f16 * hi))
        assert page["flips"] == bool(f8 / f16 <= hi / lo)


def test_chapter08_layouts_across_servers_range_and_ceilings(errors):
    # Sixteen sequences on 16 H100s. TP8 x PP2 with two micro-batches of 8: a stage is
    # half a TP8 batch-8 step, and with the pipeline full its tokens/s is at most
    # 2 x 8 / (2 x stage) = 16 / TP8's step; the send only lowers it. The same bound
    # holds on the ceiling (TP8's ceiling_s at batch 8), which the page uses.
    from gpuinfer.predict import multinode
    model, gpu, ctx = ch08.MODEL, "H100 SXM", ch08.CONTEXT
    tp8 = parallel.tp_step_s(model, gpu, 8, 8, ctx, achievable=False, parts=True)
    layout = multinode.tp_pp_decode(model, gpu, 8, 2, batch=8, context=ctx, achievable=False)
    assert layout["stage_s"] == pytest.approx(tp8["total_s"] / 2)
    assert layout["tokens_per_s"] <= 16 / tp8["total_s"]
    # TP16's ceiling: the shard's roofline plus 2 x 80 + 1 = 161 all-reduces, each no
    # faster than its bytes (16 x 8,192 x 2 B = 262,144 B) at NCCL's NVLink bus bandwidth
    # or, across the two servers, 2 x (2 - 1) / 2 x those bytes over a node's network
    # (eight NICs of the network's per-GPU bandwidth), whichever is longer.
    from gpuinfer.hardware import device_links
    tp16 = parallel.tp_step_s(model, gpu, 16, 16, ctx, achievable=False, parts=True)
    msg = 16 * 8192 * 2
    net = device_links.get_interconnect(collectives.DEFAULT_NETWORK)
    node_bw = net.bandwidth_bytes_per_s * (1 if net.scope == "per node" else 8)
    floor = max(msg / device_links.get_interconnect("NVLink 4").nccl_bus_bandwidth_bytes_per_s,
                2 * (2 - 1) / 2 * msg / node_bw)
    assert tp16["n_allreduces"] == 161
    assert tp16["ceiling_s"] == pytest.approx(tp16["ops"]["seconds"].sum() + 161 * floor)
    # The ceilings reverse the order the models give (the page says so where they do):
    # TP16's 16 / ceiling_s against TP8 x PP2's bound 16 / TP8's ceiling_s at batch 8.
    assert tp16["ceiling_s"] < tp8["ceiling_s"]
    # Within the model's error at TP > 1: two predicted rates overlap when the larger's low
    # end is at most the smaller's high end.
    lo, hi = _ratios(errors[errors["tp"] > 1])
    a8 = parallel.tp_step_s(model, gpu, 8, 8, ctx)
    a_layout = 16 / max(a8 + layout["send_s"], 2 * (a8 / 2 + layout["send_s"]))
    a_tp16 = 16 / parallel.tp_step_s(model, gpu, 16, 16, ctx)
    page = validation.choice(a_layout, a_tp16, "tp>1", per="rate")
    assert page["flips"] == bool(max(a_layout, a_tp16) * lo <= min(a_layout, a_tp16) * hi)

