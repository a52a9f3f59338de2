"""What `chapters/03_batching` computes for its figures, tables and glued numbers: one
function a figure or block of prose, each returning {glue name: value} (and the rows a
figure draws). The formulas are `predict.batching`'s, `predict.llm`'s and the achievable
model's; these functions only assemble them."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

from gpuinfer import dtypes
from gpuinfer.predict import achievable, architectures, batching, llm, search, step_model
from gpuinfer.predict import validation
from gpuinfer.course import exercises
from gpuinfer.course.exercises import chapter03_batching as batching_exercises

#: The chapter's problems whose answers the page glues (as ans_<name with underscores>).
PROBLEMS = ("batching-md1-wait", "batching-greedy-by-hand", "batching-saturation-8",
            "batching-light-load-latency", "batching-decision-max-batch")


#: How close to the best capacity a policy must come to be a candidate
#: (`batching.best_policy`): a finite simulation's capacities differ by about a percent.
WITHIN = 0.02


def compute_bound_from(model: str, accelerator: str, query: int) -> int:
    """The smallest batch of `query`-token requests whose weight matmuls are compute-bound
    on `accelerator` (`llm.forward_step_breakdown`'s "linear" row), searched over 1..1024."""
    def memory_bound(b):
        return llm.forward_step_breakdown(model, accelerator, [query] * b, [0] * b, logits=[0] * b
                                          ).loc["linear", "bound"] == "memory"
    return search.largest_meeting(memory_bound, 1, 1024) + 1


def one_batch(model: str, accelerator: str, query: int, batch) -> dict:
    """Section 1's numbers: what a batch of `batch` (an array of batch sizes) costs on the
    roofline and on the achievable model, fp16, no LM head; the weight bytes the matmuls
    read; where Mixtral-8x7B's experts turn compute-bound."""
    batch = np.asarray(batch)
    service = batching.roofline_service_s(model, accelerator, tokens_per_request=query, lm_head=False)
    service_ach = batching.model_service_s(model, accelerator, tokens_per_request=query,
                                           lm_head=False)
    rate = batch / service(batch)
    ach_rate = batch / service_ach(batch)
    one = llm.forward_step_breakdown(model, accelerator, [query], [0], logits=[0])
    spec = architectures.get(model)
    weight_bytes = spec.n_layers * spec.linear_params_per_layer * dtypes.bytes_per_element("fp16")
    knee = compute_bound_from(model, accelerator, query)
    mix = architectures.get("mixtral-8x7b")
    lo, hi = validation.interval(float(ach_rate.max()), "dense throughput")
    return {"w_gb": weight_bytes / 1e9,
            "linear_share_1_pct": 100 * one.loc["linear", "share"],
            "s1_ms": service(1) * 1e3, "s4_ms": service(4) * 1e3,
            "s4_over_s1": service(4) / service(1),
            "s64_ms": service(64) * 1e3, "s64_over_s1": service(64) / service(1),
            "thr1": 1 / service(1), "thr_max": float(rate.max()),
            "thr_gain": float(rate.max() * service(1)),
            "knee_batch": float(knee), "knee_tokens": float(knee * query),
            "mix_touched_32": float(step_model.experts_touched(mix, query)),
            "mix_e": mix.n_experts,
            "mix_cb_tokens": llm.compute_bound_batch(mix, accelerator, "fp16"),
            "ach_s1_ms": service_ach(1) * 1e3,
            "ach_s4_over_s1": service_ach(4) / service_ach(1),
            "ach_thr_max": float(ach_rate.max()),
            "ach_thr_pct": 100 * float(ach_rate.max() / rate.max()),
            "ach_fixed_ms": achievable.FITTED.step_s * 1e3,
            "ach_thr_lo": lo, "ach_thr_hi": hi}


def batch_figure(service, batch, knee: int, title: str):
    """Latency of one batch against throughput, each point labelled with its batch size,
    a dotted line where the step turns compute-bound (`knee`)."""
    batch = np.asarray(batch)
    step_ms = service(batch) * 1e3
    rate = batch / service(batch)
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ax.loglog(rate, step_ms, "o-", color="black")
    for b, x, y in zip(batch, rate, step_ms):
        ax.annotate(f"{b}", (x, y), xytext=(4, -12), textcoords="offset points", fontsize=8)
    ax.axhline(service(knee) * 1e3, ls=":", color="grey")
    ax.annotate(f"compute-bound from batch {knee}", (rate[0], service(knee) * 1e3),
                xytext=(0, 4), textcoords="offset points", fontsize=8, color="dimgrey")
    ax.set_xlabel("throughput (requests/s)")
    ax.set_ylabel("latency of one batch (ms)")
    _plain_log_ticks(ax.xaxis, ax.yaxis)
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    return fig


def md1_figure(md1, s1: float):
    """The M/D/1 table (`md1`: utilisation -> simulated mean wait and p99, in service
    times) beside the Pollaczek-Khinchine curve."""
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    grid = np.linspace(0.05, 0.97, 200)
    ax.semilogy(grid, [batching.md1_mean_wait(r / s1, s1) / s1 for r in grid], "-",
                color="black", label="mean wait, Pollaczek-Khinchine")
    ax.semilogy(md1.index, md1["mean wait / S"], "o", color="black", mfc="white",
                label="mean wait, simulated")
    ax.semilogy(md1.index, md1["p99 latency / S"], "s--", color="grey",
                label="p99 latency, simulated")
    ax.set_xlabel("utilisation $\\rho = \\lambda S$")
    ax.set_ylabel("time / service time S (log)")
    ax.set_title("M/D/1: one request per batch", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def md1_values(md1, s1: float) -> dict:
    """Section 2's numbers: the formula's mean wait at half and 90% load, the simulated
    p99 at 90% (in service times `s1`)."""
    return {**{f"md1_wait_{int(r * 100)}": batching.md1_mean_wait(r / s1, s1) / s1
               for r in (0.5, 0.9)},
            "md1_p99_90": float(md1.loc[0.9, "p99 latency / S"])}


def latency_cdf_figure(runs: dict, rate: float):
    """The latency distribution of each policy's run but the first (batch 1, overloaded)."""
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for (name, df), ls in zip(list(runs.items())[1:], ["-", "--", "-.", ":"]):
        lat = np.sort(df["latency"].to_numpy()) * 1e3
        ax.semilogx(lat, np.arange(1, len(lat) + 1) / len(lat), ls=ls, color="black",
                    label=name)
    ax.set_xlabel("latency (ms, log)")
    ax.xaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
    _plain_log_ticks(ax.xaxis)
    ax.set_ylabel("fraction of requests at or below")
    ax.set_title(f"{rate:,.0f} requests/s, Poisson (batch 1 overloaded, not shown)",
                 fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return fig


def policy_values(table, rate: float, service) -> dict:
    """Section 3's numbers from the policies' summary `table` (`batching.summarize` rows
    "batch 1", "static 32", "greedy 32", "32, delay 2 ms") at `rate` requests/s."""
    return {"mix_rate": rate,
            "b1_p50_s": table.loc["batch 1", "p50_s"],
            "b1_capacity": 1 / service(1),
            "static_p99_ms": table.loc["static 32", "p99_s"] * 1e3,
            "static_busy": table.loc["static 32", "busy_fraction"] * 100,
            "greedy_p99_ms": table.loc["greedy 32", "p99_s"] * 1e3,
            "greedy_batch": table.loc["greedy 32", "mean_batch_per_batch"],
            "greedy_busy": table.loc["greedy 32", "busy_fraction"] * 100,
            "delay_p99_ms": table.loc["32, delay 2 ms", "p99_s"] * 1e3,
            "delay_batch": table.loc["32, delay 2 ms", "mean_batch_per_batch"],
            "delay_busy": table.loc["32, delay 2 ms", "busy_fraction"] * 100}


def generation_figure(gen):
    """p99 of a whole reply against throughput, static and continuous batching."""
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for (policy, df), (marker, ls) in zip(gen.groupby("policy"), [("o", "-"), ("s", "--")]):
        ax.semilogy(df["served (req/s)"], df["p99 (s)"], marker=marker, ls=ls,
                    color="black", mfc="white", label=f"{policy} batching")
    ax.set_xlabel("throughput (requests/s)")
    ax.set_ylabel("p99 latency of a whole reply (s, log)")
    ax.set_title("generation, max 32 sequences, mean 128 output tokens", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def generation_values(gen, loads, tokens) -> dict:
    """The generation section's numbers: each policy's p99 at the highest offered load
    (`loads[-1]`) and the most it served, and the 99th percentile of the output lengths."""
    top = gen.groupby("policy")["p99 (s)"].last()
    served = gen.groupby("policy")["served (req/s)"].max()
    return {"gen_static_p99": float(top["static"]), "gen_cont_p99": float(top["continuous"]),
            "gen_load": float(loads[-1]),
            "gen_static_max": float(served["static"]),
            "gen_cont_max": float(served["continuous"]),
            "gen_tokens_p99": float(np.percentile(tokens, 99))}


def capacity(table, max_batch, delay=0.0) -> float:
    """A `batching.sweep` table's capacity under the SLO for one (max_batch, delay)."""
    rows = table[(table["max_batch"] == max_batch) & (table["max_queue_delay_s"] == delay)]
    return float(rows["capacity_per_s"].iloc[0])


def capacity_figure(policy_table, delays, max_batches, slo_s: float, title: str):
    """Capacity under the SLO against max_batch, one line per queue delay, saturation
    (every batch full) beside."""
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for d, (marker, ls) in zip(delays, [("o", "-"), ("s", "--"), ("^", ":")]):
        df = policy_table[policy_table["max_queue_delay_s"] == d].sort_values("max_batch")
        ax.loglog(df["max_batch"], df["capacity_per_s"].clip(lower=1), marker=marker, ls=ls,
                  color="black", mfc="white", label=f"capacity, delay {d * 1e3:g} ms")
    sat = policy_table.drop_duplicates("max_batch").sort_values("max_batch")
    ax.loglog(sat["max_batch"], sat["saturation_per_s"], color="grey", lw=3, alpha=0.5,
              label="saturation (every batch full)")
    ax.set_xlabel("max_batch")
    ax.set_xticks(max_batches)
    ax.set_ylabel(f"requests/s with p99 \u2264 {slo_s * 1e3:g} ms")
    _plain_log_ticks(ax.xaxis, ax.yaxis)
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def policy_choice(ach_table, policy_table, service, service_ach, slo_s: float,
                  delays, max_batches) -> dict:
    """Section 4's decision: the policy `batching.best_policy` (within 2%) picks on the
    achievable model's sweep `ach_table` and on the ceiling's `policy_table`, their
    capacities beside an unbatched server's and max_batch 64's, the choice's interval
    within the model's error (`batching_exercises.decision_choice`) and a sentence on it."""
    best = batching.best_policy(policy_table, within=WITHIN)
    ach_best = batching.best_policy(ach_table, within=WITHIN)
    gain = max(max(capacity(policy_table, mb, d) for d in delays)
               / capacity(policy_table, mb) - 1 for mb in max_batches)
    dec = batching_exercises.decision_choice(ach_table)
    verdict = (f"A max_batch of {dec['runner_up_batch']:.0f}, the best other limit, serves "
               f"{dec['other']:,.0f} requests/s ({dec['other_low']:,.0f} to "
               f"{dec['other_high']:,.0f}), "
               + ("a range that overlaps that one: the two could swap places within the "
                  "model's error, so measure both (a cautious check: both come from one model, "
                  "so their ratio is better known than either)" if dec["flips"] else
                  "a range wholly below that one: the choice holds within the model's error"))
    return {"slo_ms": slo_s * 1e3, "policy_within_pct": 100 * WITHIN,
            "best_batch": float(best["max_batch"]),
            "best_delay_ms": float(best["max_queue_delay_s"]) * 1e3,
            "best_capacity": float(best["capacity_per_s"]),
            "cap64": capacity(policy_table, 64),
            "s64_ms_again": service(64) * 1e3,
            "delay_gain_pct": gain * 100,
            "ach_best_batch": float(ach_best["max_batch"]),
            "ach_best_delay_ms": float(ach_best["max_queue_delay_s"]) * 1e3,
            "ach_best_capacity": float(ach_best["capacity_per_s"]),
            "ach_best_pct": 100 * float(ach_best["capacity_per_s"] / best["capacity_per_s"]),
            "ach_best_fraction": float(ach_best["capacity_fraction_of_saturation"]) * 100,
            "ach_cap1": capacity(ach_table, 1),
            "ach_best_over_1": float(ach_best["capacity_per_s"]) / capacity(ach_table, 1),
            "ach_cap64": capacity(ach_table, 64),
            "ach_s64_ms": service_ach(64) * 1e3,
            "ach_best_cap_lo": dec["low"], "ach_best_cap_hi": dec["high"],
            "ach_runner_batch": dec["runner_up_batch"],
            "ach_runner_capacity": dec["other"],
            "ach_choice_verdict": verdict}


def load_curve_figure(service, max_batches, slo_s: float):
    """p99 latency against throughput as the offered load rises to 97% of saturation,
    one line per max_batch (`max_batches`: three), the SLO beside."""
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    curves = {}
    for mb, marker, ls in zip(max_batches, "o^s", ["-", ":", "--"]):
        rates = np.linspace(0.1, 0.97, 9) * batching.saturation_throughput(service, mb)
        curves[mb] = batching.load_curve(rates, service, mb, n=2000)
        ax.loglog(curves[mb]["throughput_per_s"], curves[mb]["p99_s"] * 1e3, marker=marker,
                  ls=ls, color="black", mfc="white", label=f"max_batch {mb}")
    ax.axhline(slo_s * 1e3, color="grey", lw=2, alpha=0.6)
    first = curves[max_batches[0]]["throughput_per_s"].iloc[0]
    ax.annotate("SLO", (first, slo_s * 1e3), xytext=(0, 4), textcoords="offset points",
                fontsize=8, color="dimgrey")
    ax.set_xlabel("throughput (requests/s, log)")
    ax.set_ylabel("p99 latency (ms, log)")
    ax.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
    _plain_log_ticks(ax.xaxis, ax.yaxis)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def passage_gains(model: str, accelerator: str, batches) -> pd.DataFrame:
    """Throughput relative to batch 1 (rows: `batches`) of 32-token queries and 512-token
    passages, on the roofline and on the achievable model, no LM head."""
    batches = np.asarray(batches)
    columns = {}
    for tokens, what in ((32, "queries"), (512, "passages")):
        for make, where in ((batching.roofline_service_s, "roofline"),
                            (batching.model_service_s, "achievable")):
            s = make(model, accelerator, tokens_per_request=tokens, lm_head=False)
            thr = batches / s(batches)
            columns[f"{what}, {where}"] = thr / thr[0]
    return pd.DataFrame(columns, index=pd.Index(batches, name="batch"))


def passage_figure(gains):
    """`passage_gains`' four curves against the batch size."""
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for column, style, colour, fill, label in [
            ("queries, roofline", "o-", "black", "white", "32-token queries"),
            ("passages, roofline", "s--", "black", None, "512-token passages"),
            ("queries, achievable", "o:", "0.5", "white", "32-token queries, achievable model"),
            ("passages, achievable", "s:", "0.5", None, "512-token passages, achievable model")]:
        ax.loglog(gains.index, gains[column], style, color=colour, label=label,
                  **({"mfc": fill} if fill else {}))
    ax.set_xlabel("batch size")
    ax.set_ylabel("throughput relative to batch 1")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def passage_values(gains, accelerator: str) -> dict:
    """Section 5's numbers: each curve's gain at the largest batch, and the share of a
    512-token Mixtral-8x7B step spent in its expert matmuls on `accelerator`."""
    last = gains.iloc[-1]
    mix512 = llm.forward_step_breakdown("mixtral-8x7b", accelerator, 512)
    return {"query_gain_128": float(last["queries, roofline"]),
            "passage_gain_128": float(last["passages, roofline"]),
            "passage_ach_gain_128": float(last["passages, achievable"]),
            "query_ach_gain_128": float(last["queries, achievable"]),
            "mix_512_expert_pct": 100 * float(mix512.loc["experts", "share"])}


def problem_values(service) -> dict:
    """The problems' answers (ans_<name>) and the numbers their solutions quote."""
    return {**{"ans_" + name.replace("-", "_"): float(exercises.get(name).answer())
               for name in PROBLEMS},
            "ex_s8_ms": service(8) * 1e3,
            "ex_md1_90_ms": batching.md1_mean_wait(90.0, 0.010) * 1e3}


def _plain_log_ticks(*axes):
    for axis in axes:
        axis.set_major_formatter(ScalarFormatter())
        axis.set_minor_formatter(NullFormatter())
