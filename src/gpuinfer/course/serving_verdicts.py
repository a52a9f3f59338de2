"""What labs 5-8 measure means (serving and scaling: lab 5 CPU or GPU, lab 6 batching
under load, lab 7 tensor-parallel layers, lab 8 Triton's dynamic batching), read from the
numbers in front of the learner: each function states a conclusion only where
`measure.spread.compare` orders the numbers beyond their spreads, and otherwise returns
`spread.inconclusive(...)`. They return text; the labs print it.
"""

from __future__ import annotations



from gpuinfer import validate as _v
from gpuinfer.measure.spread import (MIN_EFFECT, NOISY_SPREAD, TOO_NOISY, Spread, compare,
                                     inconclusive, ratio)

#: Lab 5: a batch-1 pass is "mostly dispatch" when its kernels' fixed cost (kernels x one
#: tiny kernel) is over this share of it: past half, fewer launches shorten it more than
#: any faster chip could.
MOSTLY_DISPATCH = 0.5


#: Labs 5 and 6: batching is "nearly free" when the largest batch's throughput gain over
#: batch 1 is at least this share of the batch: a step that grew at most 4x for the whole
#: batch is read as fixed cost, not work.
NEARLY_FREE_SHARE = 0.25


#: Labs 5 and 6: batching "helps" when that gain is at least this: twice batch 1's
#: throughput, the least gain worth a batching server's queue and its latency.
HELPS_GAIN = 2.0


#: Lab 5: threads scale "near perfectly" at this share of the thread count (the usual
#: mark for a parallel efficiency worth counting on when sizing a CPU fleet).
GOOD_SCALING = 0.8


#: Lab 6: batching "raised capacity" when the chosen policy serves at least this many
#: times max_batch 1's requests within the SLO; below it the gain is too small to pay for
#: a batching server's memory and complexity.
CAPACITY_GAIN = 1.5


#: Lab 8: a light-load request that spends more than this outside the model (seconds) pays
#: far more than its work there (64 floats serialised, a few system calls: well under a
#: millisecond on an idle machine), so its cores were busy with something else.
OUTSIDE_MODEL_S = 0.005


def _vs(x: Spread, bound: float) -> str:
    """`compare` of a measurement with a fixed bound (no spread of its own)."""
    return compare(x, Spread(_v.positive("bound", bound), 0.0))


def _largest(*spreads) -> float:
    return max(s.spread for s in spreads)


def dispatch_share(kernel: Spread, pass_: Spread, n_kernels) -> str:
    """Lab 5: is a batch-1 pass (`pass_`, s) mostly its `n_kernels` kernels' fixed cost
    (`kernel`: one tiny kernel, s) or work? Inconclusive when the kernels alone took
    longer than the pass that contains them."""
    n = _v.count("n_kernels", n_kernels)
    dispatch = Spread(n * kernel.median, kernel.spread)
    if dispatch.median > pass_.median:
        return inconclusive(f"{n} tiny kernels took longer than the whole pass",
                            kernel.spread, pass_.spread)
    half = Spread(MOSTLY_DISPATCH * pass_.median, pass_.spread)
    order = compare(dispatch, half)
    if order == "larger":
        return ("Mostly dispatch: a faster chip would barely change batch-1 latency; fewer "
                "launches would\n(CUDA graphs: one launch for the whole pass; fusion).")
    if order == "smaller":
        return ("Mostly work (reading the weights): more bandwidth, or smaller weights, would "
                "lower it.")
    return inconclusive("dispatch against work", kernel.spread, pass_.spread)


def batching_gain(one: Spread, top: Spread, batch, *, serving=False) -> str:
    """Labs 5 and 6: what batch `batch`'s step (`top`, s) against batch 1's (`one`, s)
    says: nearly free, helps, or buys little, each only beyond the noise. `serving`
    adds what it means for a batching server's capacity (lab 6)."""
    batch = _v.positive("batch", batch)
    gain = Spread(batch * one.median / top.median, one.spread + top.spread)
    if gain.median > batch:
        return inconclusive(f"batch {batch:,.0f} ran faster than batch 1", one.spread,
                            top.spread)
    free = _vs(gain, NEARLY_FREE_SHARE * batch)
    helps = _vs(gain, HELPS_GAIN)
    if free == "larger":
        text = (f"Nearly free: throughput rose {gain.median:,.1f}x; the step is fixed cost "
                "(or one read of the\nweights every sequence shares), not work.")
        then = "Expect batching to raise capacity a lot."
    elif free == "smaller" and helps == "larger":
        text = (f"Batching helps, less than in proportion: throughput rose {gain.median:,.1f}x; "
                "the work grows\nwith the batch too.")
        then = "Expect batching to raise capacity, by less than the batch size."
    elif helps == "smaller":
        text = (f"Batching buys little here ({gain.median:,.1f}x the throughput): the time "
                "grows with the work.")
        then = "Expect the policy sweep to keep max_batch small."
    else:
        return inconclusive("the throughput batching bought", one.spread, top.spread)
    return f"{text}\n{then}" if serving else text


def gpu_at_batch_one(cpu: Spread, accelerator, *, predicted) -> str:
    """Lab 5: the GPU's batch-1 pass (`accelerator`: one measured Spread, or the ends of a
    predicted range, s) against one CPU core's (`cpu`, s). A range is stated only where
    both ends fall on the same side of the CPU beyond its noise."""
    accelerator = sorted(accelerator, key=lambda s: s.median)
    _v.ensure(len(accelerator) >= 1, "gpu must hold at least one time")
    orders = {compare(cpu, g) for g in accelerator}
    ratios = [cpu.median / g.median for g in accelerator]
    what = "predicted for a T4" if predicted else "measured"
    if orders == {"larger"}:
        shown = " to ".join(f"{r:,.1f}x" for r in sorted(ratios))
        return f"At batch 1 the GPU ({what}) is {shown} faster than one CPU core."
    if orders == {"smaller"}:
        shown = " to ".join(f"{1 / r:,.1f}x" for r in sorted(ratios, reverse=True))
        return f"At batch 1 the GPU ({what}) is {shown} slower than one CPU core."
    if orders == {"larger", "smaller"}:
        return ("At batch 1 the GPU's predicted range straddles one CPU core: faster when "
                "launches overlap\nthe GPU's work, slower when the host waits for each.")
    return inconclusive("the GPU at batch 1 against one CPU core", cpu.spread,
                        *(g.spread for g in accelerator))


def threads_speedup(one: Spread, together: Spread, n_threads) -> str:
    """Lab 5: one batch on `n_threads` threads (`together`, s) against one thread
    (`one`, s), timed side by side."""
    n = _v.count("n_threads", n_threads)
    if n == 1:
        return "torch has one thread here: there is no second thread to compare with."
    speed = ratio(one, together)
    head = (f"CPU: {n} threads on one batch ran {speed.median:.2g}x as fast as one "
            f"(perfect: {n}x).")
    order = compare(one, together)
    if order == "smaller":
        return (f"{head}\n  Slower than one thread: the threads contend (hyperthreads of one "
                "core, or other work\n  here). Size a CPU fleet by cores x one thread.")
    if order != "larger":
        return inconclusive(f"{n} threads against one", one.spread, together.spread)
    if _vs(speed, GOOD_SCALING * n) == "smaller":
        return (f"{head}\n  Faster, less than perfect: threads share caches, memory or "
                "(hyperthreads) a core, or\n  other work runs here. Check the "
                "cores-times-one-thread assumption on your CPU machine.")
    return f"{head}\n  Near perfect: cores x one thread is a fair estimate on this machine."


def policy_choice(chosen, spread) -> str:
    """Lab 6: the max_batch `batching.best_policy` chose from each version of the measured
    table (`chosen`: {which table: max_batch}, e.g. the median, fastest and slowest of
    the runs), `spread` the table's largest. One answer is stated only if all agree."""
    chosen = {str(k): int(_v.count("max_batch", b, minimum=0))
              for k, b in dict(chosen).items()}
    _v.ensure(len(chosen) >= 1, "chosen must name at least one table")
    if len(set(chosen.values())) == 1:
        b = next(iter(chosen.values()))
        if b == 0:
            return "No policy meets the SLO on any version of the table: loosen it."
        return (f"max_batch {b} is chosen from every version of the table ("
                f"{', '.join(chosen)} timings).")
    shown = ", ".join(f"{b or 'none'} from the {k} timings" for k, b in chosen.items())
    return (inconclusive("the chosen max_batch", _v.non_negative("spread", spread))
            + f"\nmax_batch {shown}: the choice sits on an edge the noise moves.")


def capacity_gain(best, one, *, kept, chosen, two_steps_s, slo_s) -> str:
    """Lab 6: what the chosen policy's capacity (`best`: requests/s within the SLO, one
    per version of the measured table) against max_batch 1's (`one`, the same; 0 where
    batch 1 never meets the SLO) says, and why max_batch stops where it does. `kept`: the
    chosen capacity over its full-batch throughput; `two_steps_s`: {max_batch: two steps
    of that batch, s} (a request may wait for the batch in service, then run in its own);
    `slo_s`: the p99 objective, s."""
    kept = _v.positive("kept", kept)
    slo_s = _v.positive("slo_s", slo_s)
    steps = {int(b): _v.positive("two_steps_s", s) for b, s in dict(two_steps_s).items()}
    chosen = int(_v.count("max_batch", chosen))
    one = [_v.non_negative("one", c) for c in one]
    if max(one, default=0.0) == 0:
        return "Without batching the SLO cannot be met at any rate: loosen it, or batch."
    best = [_v.positive("best", c) for c in best]
    _v.ensure(len(best) == len(one), "best and one must hold one capacity per table")
    if min(one) == 0:
        return inconclusive("max_batch 1 meets the SLO on some versions of the table, not "
                            "on others", Spread.of(best).spread)
    # Paired: each table's gain, so a load that slowed every batch cancels out.
    gain = Spread.of([b / o for b, o in zip(best, one)])
    if kept > 1 + MIN_EFFECT:
        return inconclusive("a capacity above its full-batch throughput", gain.spread)
    if gain.median < 1 / (1 + MIN_EFFECT):
        return inconclusive("the chosen policy serves less than max_batch 1", gain.spread)
    fits = max([b for b, s in steps.items() if s <= slo_s], default=0)
    above = [b for b in sorted(steps) if b > fits]
    order = _vs(gain, CAPACITY_GAIN)
    if order == "larger":
        text = f"Batching raised capacity {gain.median:.1f}x."
        if chosen == fits and above:
            text += (f" max_batch stops at {chosen}: a request may wait for the\nbatch in "
                     f"service, then run in its own, and two steps of batch {chosen} "
                     f"({steps[chosen] * 1e3:.1f} ms) fit in\nthe {slo_s * 1e3:.1f} ms SLO; "
                     f"two of batch {above[0]} ({steps[above[0]] * 1e3:.1f} ms) do not.")
        elif chosen < fits:
            text += (f" Batches up to {fits} fit twice in the SLO, but none serves\nmore than "
                     f"2% above max_batch {chosen}, so the smaller is kept.")
        return text + (f"\nWithin the SLO it runs at {kept:.0%} of its full-batch throughput: "
                       "the rest is the headroom\nits queue needs to keep the p99 short.")
    if order == "smaller":
        return (f"Batching raised capacity only {gain.median:.2f}x under this SLO. A request "
                f"may wait for\nthe batch in service, then run in its own: two steps fit in "
                f"{slo_s * 1e3:.1f} ms only up to batch {fits},\nso the larger batches' gain "
                "(the saturation column) is out of reach; a looser SLO reaches it.")
    return inconclusive("capacity with batching against without", gain.spread)


def two_models(ratios, loads) -> str:
    """Lab 6: two models sharing one device against one model, at each total load in
    `loads` (requests/s): `ratios`, one Spread a load of the simulated p99 with two models
    over the p99 with one, over the versions of the measured table (paired: the same
    table on both sides). Only loads where the two differ beyond the noise are named."""
    ratios, loads = list(ratios), [float(x) for x in loads]
    _v.ensure(len(ratios) == len(loads) >= 1, "ratios and loads must be as long as each other")
    orders = [_vs(r, 1.0) for r in ratios]
    higher = [f"{x:,.0f}" for x, o in zip(loads, orders) if o == "larger"]
    lower = [f"{x:,.0f}" for x, o in zip(loads, orders) if o == "smaller"]
    if higher and lower:
        return (f"Splitting costs latency at {', '.join(higher)}/s and lowers it at "
                f"{', '.join(lower)}/s: where\nbatches fill, halving them hurts; where they "
                "stay small, two queues finish sooner.")
    if higher:
        return (f"Splitting costs latency at {', '.join(higher)}/s: each model's batches "
                "carry half the requests,\nbut each step still reads a full set of weights, "
                "so halving batches hurts"
                + ("." if len(higher) == len(loads) else
                   " (at the other loads the two are within the noise)."))
    if lower:
        return (f"Splitting lowers the p99 at {', '.join(lower)}/s: where batching buys "
                "little there is little\nto lose, and two queues' smaller batches finish "
                "sooner.")
    return inconclusive("two models' p99 against one's", *(r.spread for r in ratios))


def tp_step(one_step: Spread, top_step: Spread, one_compute: Spread, top_compute: Spread,
            allreduce_s, n) -> str:
    """Lab 7: did sharding over `n` ranks pay? The unsharded step (`one_step`, s) against
    the sharded one (`top_step`), explained by the parts the lab prints: each rank's
    compute (`one_compute` unsharded, `top_compute` sharded) and the fitted all-reduce
    (`allreduce_s`). Inconclusive when a rank's compute alone took longer than the whole
    step that contains it (the load changed between the timings)."""
    n = _v.count("n", n)
    allreduce_s = _v.non_negative("allreduce_s", allreduce_s)
    spreads = (one_step.spread, top_step.spread, one_compute.spread, top_compute.spread)
    if compare(top_compute, top_step) == "larger" or top_compute.median > 1.5 * top_step.median:
        return inconclusive(f"each rank's compute ({top_compute.median * 1e3:.3g} ms) took "
                            f"longer than the whole step\n({top_step.median * 1e3:.3g} ms) "
                            "that contains it: the load changed between the timings",
                            *spreads)
    saved = one_compute.median - top_compute.median
    parts = (f"compute {'saved' if saved >= 0 else 'grew by'} {abs(saved) * 1e3:.3g} ms, "
             f"all-reduce added {allreduce_s * 1e3:.3g} ms (fit)")
    speed = one_step.median / top_step.median
    cost = compare(Spread(top_compute.median + allreduce_s, top_compute.spread), one_compute)
    noisy = "its parts, timed apart, are too noisy to say which outweighs the other"
    order = compare(one_step, top_step)
    if order == "larger":
        why = {"smaller": "the compute saved exceeds the all-reduce added",
               "larger": "although its parts predict a loss: the parts were timed apart, "
                         "under\nanother load"}.get(cost, noisy)
        return f"Sharding paid on this run ({speed:.2f}x; {parts}):\n{why}."
    if order == "smaller":
        why = {"larger": "the all-reduce costs more than the compute saved" if saved > 0 else
               "each rank's shard took no less than the whole layer (the ranks share\n"
               "cores), and the all-reduce came on top",
               "smaller": "although its parts predict a gain: the step pays more than its "
                          "compute and\nits all-reduce, ranks waiting for each other (on a "
                          "shared CPU, for a descheduled one)"}.get(cost, noisy)
        return f"Sharding made the step slower on this run ({speed:.2f}x; {parts}):\n{why}."
    return inconclusive(f"the {n}-rank step against the unsharded one; {parts}", *spreads)


def tp_split(one_compute: Spread, top_compute: Spread, n, top_step=None) -> str:
    """Lab 7: how far each of `n` ranks' compute (`top_compute`, s) fell from the
    unsharded compute (`one_compute`): near 1/n, or much less than that (ranks sharing
    cores or memory bandwidth). Empty when nothing beyond the noise needs saying, or when
    the shard's timing outlasts the sharded step (`top_step`, s) that contains it: then
    the timings disagree, and `tp_step` says so."""
    n = _v.count("n", n)
    share = top_compute.median / one_compute.median
    if top_step is not None and (compare(top_compute, top_step) == "larger"
                                 or top_compute.median > 1.5 * top_step.median):
        return ""
    if compare(top_compute, one_compute) == "larger":
        return (f"Each rank's shard took longer ({share:.0%}) than the whole layer did on "
                "its own: the ranks\ncompete for the same cores (and memory bandwidth), "
                "so the split bought nothing here.")
    if _vs(ratio(top_compute, one_compute), 1.5 / n) == "larger":
        return (f"Each rank's compute fell only to {share:.0%} of the whole (a perfect split: "
                f"{1 / n:.0%}): the ranks\nshare cores (or memory bandwidth), so the split "
                "bought less than it divides.")
    return ""


def tp_accounting(predicted: Spread, measured: Spread) -> str:
    """Lab 7: does compute + all-reduce (`predicted`, s) account for the measured sharded
    step (`measured`, s)? Parts that add up to more than their whole are inconsistent:
    they were timed apart, under another load."""
    share = predicted.median / measured.median
    order = compare(predicted, measured)
    if order == "larger":
        return inconclusive(f"compute + all-reduce add up to {share:.0%} of the measured "
                            "step: the parts were timed apart,\nunder another load",
                            predicted.spread, measured.spread)
    if order == "smaller":
        return (f"Compute + all-reduce accounts for {share:.0%} of the measured step: the "
                "rest is\nsynchronisation, a collective waiting for the slowest rank (and, "
                "on a shared CPU,\nfor a descheduled one).")
    if _largest(predicted, measured) > TOO_NOISY:
        return inconclusive("the step against its parts", predicted.spread, measured.spread)
    return (f"Compute + all-reduce accounts for the measured step ({share:.0%}), within this "
            "run's noise.")


def p50_gap(real: Spread, simulated: Spread) -> str:
    """Lab 8: the real server's light-load p50 against the simulator's (s)."""
    gap = real.median - simulated.median
    order = compare(real, simulated)
    if order == "larger":
        return (f"At the lightest load the real p50 is {gap * 1e3:.2f} ms above the "
                "simulator's: time the\nsimulator does not know about (gRPC, Triton's queue, "
                "PyTriton's hop back to this process).")
    if order == "smaller":
        return (f"At the lightest load the real p50 is {-gap * 1e3:.2f} ms below the "
                "simulator's: the model ran\nfaster inside the server than in the timing "
                "above (a noisy or shared machine).")
    return inconclusive("the real p50 against the simulator's", real.spread, simulated.spread)


def fell_behind(early: Spread, late: Spread):
    """Lab 8: did a server fall behind its load? `early`, `late`: the median latency (s,
    `quantile_spread(..., 50)`) of the first and the last third of a run's requests, by
    arrival. A server that falls behind queues, and its latency grows over the run. True
    (it grew beyond the noise), False (it did not, and the thirds are steady enough that
    a growing queue would have shown: within `NOISY_SPREAD` together), None (too noisy)."""
    order = compare(late, early)
    if order == "larger":
        return True
    if order == "smaller" or early.spread + late.spread <= NOISY_SPREAD:
        return False
    return None


def kept_up(early: Spread, late: Spread, rate) -> str:
    """Lab 8: did the server keep up with `rate` requests/s (`fell_behind`)? The run's
    tail (answers still coming back after the last request was sent), which pulls an
    answered-over-span rate below the load on a short run, does not enter."""
    rate = _v.positive("rate", rate)
    behind = fell_behind(early, late)
    shown = f"{early.median * 1e3:.1f} ms in the first third, {late.median * 1e3:.1f} ms in the last"
    if behind is None:
        return inconclusive(f"whether the server kept up at {rate:,.0f}/s", early.spread,
                            late.spread)
    if behind:
        return (f"At {rate:,.0f}/s the median latency grew over the run ({shown}):\nthe queue "
                "grew, so the server fell behind the load.")
    if compare(late, early) == "smaller":
        return (f"At {rate:,.0f}/s the median latency fell over the run ({shown}):\nno queue "
                "built up, so the server kept up (its first requests paid for a cold start).")
    return (f"At {rate:,.0f}/s the median latency held over the run ({shown}):\nno queue "
            "built up: the server kept up, within this run's noise.")


def calibrated_throughput(behind, calibrated: Spread, real: Spread, capacity) -> str:
    """Lab 8: does the calibrated simulator's throughput (`calibrated`, requests/s) match
    the real server's (`real`) at the heaviest load? Only a server that fell behind
    (`behind`, from `fell_behind`) tests it; one that kept up leaves the predicted
    `capacity` (requests/s) untested."""
    if behind is None:
        return inconclusive("whether the server kept up, so whether its throughput tests "
                            "the calibration", calibrated.spread, real.spread)
    if not behind:
        return ("The real server kept up with every rate offered, so matching its throughput "
                "tests little:\nthe latencies are the test here, and the capacity predicted "
                f"above ({capacity:,.0f}/s) is untested. To test it,\noffer more than it: this "
                "client sends about 2,000 requests/s at most, so serve a slower model\n(see "
                "below).")
    order = compare(calibrated, real)
    shown = f"{calibrated.median:,.0f} against {real.median:,.0f} requests/s"
    if order == "inconclusive":
        if _largest(calibrated, real) > TOO_NOISY:
            return inconclusive("the calibrated throughput against the real",
                                calibrated.spread, real.spread)
        return (f"The server fell behind; the calibrated simulator's throughput matches the "
                f"real server's\nwithin this run's noise ({shown}).")
    return (f"The calibrated simulator {'over' if order == 'larger' else 'under'}states the "
            f"real throughput ({shown}):\nthe client fell behind, or the hand-off changes with "
            "the load.")


def capacity_with_handoff(model: Spread, server) -> str:
    """Lab 8: capacity within the p99 objective from the model's own times (`model`,
    requests/s) against the calibrated server's (`server`: one capacity for each of the
    hand-off's quartiles and its median, 0 where none meets the objective)."""
    server = [_v.non_negative("server", c) for c in server]
    _v.ensure(len(server) >= 1, "server must hold at least one capacity")
    if max(server) == 0:
        return ("With the hand-off and the transport no rate meets the objective: the "
                "capacity changed,\nnot only the latency, and no offset on the latencies "
                "repairs that.")
    if min(server) == 0:
        return inconclusive("the capacity with the hand-off: some of its quartiles meet the "
                            "objective, some do not", model.spread)
    s = Spread.of(server)
    order = compare(model, Spread(CAPACITY_GAIN * s.median, s.spread))
    if order == "larger":
        return ("The capacity changed, not only the latency: no offset on the latencies "
                "repairs that.\nRe-derive the policy (lab 6's sweep) from the calibrated "
                "table before trusting it.")
    if order == "smaller":
        return ("Here the hand-off is small next to the model: an offset on the latencies is "
                "nearly enough.")
    return inconclusive("the capacity with the hand-off against without", model.spread,
                        s.spread)


def p99_trend(p99s, rates, n_requests) -> str:
    """Lab 8: how the measured p99 (Spreads, s, one per rate in `rates`, requests/s)
    moved from the lightest to the heaviest load, over runs of `n_requests` each."""
    p99s, rates = list(p99s), [float(r) for r in rates]
    _v.ensure(len(p99s) == len(rates) >= 2, "p99s and rates must match, two or more")
    n = _v.count("n_requests", n_requests)
    lo, hi = p99s[0], p99s[-1]
    order = compare(lo, hi)
    if order == "larger":
        return (f"The p99 fell as the load rose ({lo.median * 1e3:.1f} ms at {rates[0]:,.0f}/s, "
                f"{hi.median * 1e3:.1f} ms at {rates[-1]:,.0f}/s): not what\nqueueing does. "
                f"A p99 of {n} requests is set by its three or four slowest, so a few stalls "
                f"set it,\nand the run at {rates[0]:,.0f}/s lasts {rates[-1] / rates[0]:.1f}x "
                f"as long as the one at {rates[-1]:,.0f}/s: it likely met more of\nthe stalls "
                "a shared machine has (another process taking the cores, a garbage "
                "collection).\nRerun before reading the light-load p99 as the server's.")
    if order == "smaller":
        return (f"The p99 rose with the load ({lo.median * 1e3:.1f} to {hi.median * 1e3:.1f} "
                "ms): requests queue behind fuller batches.")
    return inconclusive("the p99 from the lightest to the heaviest load", lo.spread, hi.spread)


def handoff_vs_outside(hop: Spread, outside: Spread) -> str:
    """Lab 8: the per-batch hand-off measured under load (`hop`, s) against all a
    light-load request paid outside the model (`outside`, s)."""
    order = compare(hop, outside)
    if order == "larger":
        return (f"The hand-off under load ({hop.median * 1e3:.1f} ms) exceeds all a light-load "
                f"request paid outside the model\n({outside.median * 1e3:.1f} ms): it grows "
                "with the load (each hop waits longer for a busy core), so the calibrated\n"
                "table overstates light-load latency, and no transport is left for the offset.")
    if order == "smaller":
        return (f"The hand-off ({hop.median * 1e3:.1f} ms) is part of what a light-load request "
                f"paid outside the model\n({outside.median * 1e3:.1f} ms); the rest is the "
                "transport, added to every latency below.")
    return inconclusive("the hand-off against the light-load time outside the model",
                        hop.spread, outside.spread)


def calibration(measured_p50s, calibrated_p50s, rates, *, calibrated_at) -> str:
    """Lab 8: the calibrated simulator's p50 (Spreads, s) against the measured p50
    (Spreads, s) at each rate in `rates` (requests/s); `calibrated_at`: the rate whose
    batch-to-batch gaps gave the hand-off. Says where the calibration holds."""
    measured_p50s, calibrated_p50s = list(measured_p50s), list(calibrated_p50s)
    rates = [float(r) for r in rates]
    _v.ensure(len(measured_p50s) == len(calibrated_p50s) == len(rates) >= 1,
              "measured_p50s, calibrated_p50s and rates must match")
    orders = [compare(c, m) for m, c in zip(measured_p50s, calibrated_p50s)]
    if all(o == "inconclusive" for o in orders):
        if max(_largest(m, c) for m, c in zip(measured_p50s, calibrated_p50s)) > TOO_NOISY:
            return inconclusive("the calibrated p50 against the measured", *(
                s.spread for s in measured_p50s + calibrated_p50s))
        return ("The calibrated simulator's p50 matches the measured one at every rate, "
                "within this run's noise.")
    words = {"larger": "overstates", "smaller": "understates", "inconclusive": "matches"}
    lines = [f"at {r:,.0f}/s it {words[o]} the p50 ({c.median * 1e3:.1f} against "
             f"{m.median * 1e3:.1f} ms)" for r, o, m, c in
             zip(rates, orders, measured_p50s, calibrated_p50s)]
    return ("The calibrated simulator does not match everywhere: " + ";\n".join(lines)
            + f".\nIts hand-off was measured at {calibrated_at:,.0f}/s: a calibration holds "
            "near the load it was taken at,\nnot at every load (here the hand-off itself "
            "changes with the load).")


def outside_model(outside: Spread, n_cores) -> str:
    """Lab 8: a light-load request's time outside the model (`outside`, s): far more than
    its work there (`OUTSIDE_MODEL_S`) means the cores were busy elsewhere."""
    order = _vs(outside, OUTSIDE_MODEL_S)
    if order == "larger":
        return (f"A light-load request spends {outside.median * 1e3:.0f} ms outside the model, "
                "far more than its work there\n(serialising 64 floats, a few system calls): "
                f"client, Triton, stub and model share {n_cores} cores\nhere, and each hop "
                "waits for one. On a machine with cores to spare it is far smaller.")
    if order == "smaller":
        return (f"A light-load request spends {outside.median * 1e3:.1f} ms outside the model: "
                "the transport and the hops\nare cheap on this machine.")
    return inconclusive("the time outside the model", outside.spread)


def two_models_on_server(one_p99s, two_p99s, rates, hop_s) -> str:
    """Lab 8: the real server's p99 with two models against one (Spreads, s, one per rate
    in `rates`); `hop_s`: the per-batch hand-off measured under load, s."""
    one_p99s, two_p99s = list(one_p99s), list(two_p99s)
    rates = [float(r) for r in rates]
    _v.ensure(len(one_p99s) == len(two_p99s) == len(rates) >= 1,
              "one_p99s, two_p99s and rates must match")
    orders = [compare(t, o) for o, t in zip(one_p99s, two_p99s)]
    lower = [f"{r:,.0f}" for r, o in zip(rates, orders) if o == "smaller"]
    higher = [f"{r:,.0f}" for r, o in zip(rates, orders) if o == "larger"]
    text = []
    if lower:
        text.append(f"At {', '.join(lower)}/s two models had a lower p99 than one, beyond "
                    "the noise: each model has\nits own stub and hand-off, and where the "
                    f"hand-off ({hop_s * 1e3:.1f} ms a batch here), not the model, sets\n"
                    "the pace, two pipelines beat one. The simulator runs both models' "
                    "batches in turn on one\ndevice, the case of a GPU that the model fills.")
    if higher:
        text.append(f"At {', '.join(higher)}/s two models had a higher p99 than one: the "
                    "batches they split cost more\nthan the second hand-off pipeline bought.")
    if not text:
        return inconclusive("two models' p99 against one's",
                            *(s.spread for s in one_p99s + two_p99s))
    return "\n".join(text)
