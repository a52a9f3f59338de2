"""The exercises asked in `chapters/03_batching` (every registration here has
`where="chapters/03_batching"`) and the helpers only they use."""

from gpuinfer.predict import batching, validation
from gpuinfer.course.exercises import register

WHERE = "chapters/03_batching"

# The chapter's running example: an embedding service. A request is one forward pass of
# e5-mistral-7b-instruct (Mistral-7B's shape, `llm.get("mistral-7b")`) over a 32-token
# query, fp16, no LM head (the embedding is a pooled hidden state), on an A100 80GB.
MODEL, GPU, QUERY_TOKENS = "mistral-7b", "A100 80GB", 32
DECISION_SLO_S, DECISION_BATCHES = 0.050, (1, 2, 4, 8, 16, 32)
#: The validation rows whose errors bound the decision's capacity (`validation.interval`):
#: batched passes of a dense model.
DECISION_REGIME = "dense throughput"


def decision_choice(table, within=0.02) -> dict:
    """A `batching.sweep` table's choice within the achievable model's error in
    `DECISION_REGIME`: the policy `batching.best_policy(table, within)` picks, and the
    best capacity of any other `max_batch` (runner_up_batch), as `validation.choice`
    per="rate" gives them ({"value", "low", "high", "other", "flips"}: flips True when the
    runner-up's capacity lies inside the chosen policy's interval: measure both)."""
    best = batching.best_policy(table, within=within)
    others = table[table["max_batch"] != best["max_batch"]]
    runner = others.loc[others["capacity_per_s"].idxmax()]
    return {"batch": float(best["max_batch"]), "runner_up_batch": float(runner["max_batch"]),
            **validation.choice(float(best["capacity_per_s"]), float(runner["capacity_per_s"]),
                                DECISION_REGIME, per="rate")}


def _ratio(wrong, right) -> float:
    """A slip's factor: the answer a slip gives over the right one."""
    return float(wrong) / float(right)


#: The example's batch service time on the roofline, S(b) (batch -> seconds); what an
#: engine achieves is `batching.model_service_s` with the same arguments.
ROOFLINE_SERVICE = batching.roofline_service_s(MODEL, GPU, tokens_per_request=QUERY_TOKENS,
                                                  lm_head=False)


@register("batching-md1-wait", where=WHERE,
          question="Mean queueing wait of an M/D/1 server: 80 requests/s, 10 ms each. In "
          "seconds.", unit="s",
          hint="Utilisation rho = rate x service time; Pollaczek-Khinchine: "
          "W_q = rho / (2 mu (1 - rho)) with mu = 1 / service time.",
          slips={2.0: "That is the M/M/1 wait, for exponential service times; a fixed "
                 "service time halves it: rho / (2 mu (1 - rho)).",
                 1.5: "That adds the service time: W_q is the wait before service starts.",
                 1000.0: "Give seconds, not milliseconds."})
def _():
    return batching.md1_mean_wait(80.0, 0.010)


@register("batching-greedy-by-hand", where=WHERE,
          question="Requests at 0, 2, 4 and 6 ms; every batch takes 5 ms; max_batch 4, "
          "no queue delay. When does the last request finish? In seconds.", unit="s",
          hint="A batch starts when the GPU is free and takes everyone waiting then. "
          "Walk the timeline: who is waiting at 0 ms, at 5 ms, at 10 ms?",
          slips={1000.0: "Give seconds, not milliseconds.",
                 11 / 15: "That runs the last request as soon as it arrives: the GPU is "
                 "busy until 10 ms."})
def _():
    df = batching.simulate([0.0, 0.002, 0.004, 0.006], 0.005, max_batch=4)
    return float(df["finish"].max())


@register("batching-saturation-8", where=WHERE,
          question="Saturation throughput (every batch full) of the chapter's embedding "
          "service, 32-token queries to e5-mistral-7b-instruct (Mistral-7B's shape, fp16) "
          "on an A100 80GB, with max_batch 8, from the roofline. In requests/s, 3 "
          "significant figures.", unit="requests/s",
          hint="Every batch is full: 8 / S(8), with S from batching.roofline_service_s"
          "(model, GPU, tokens_per_request=32, lm_head=False): a forward pass over 256 "
          "tokens.",
          # 8 / S(1) over 8 / S(8) = S(8) / S(1), about 1.7: the slip's own factor.
          slips={_ratio(8 / ROOFLINE_SERVICE(1),
                        batching.saturation_throughput(ROOFLINE_SERVICE, 8)):
                 "That is 8 / S(1): a batch of 8 queries is 256 tokens, past the "
                 "ridge point, so it takes longer than a batch of 1."})
def _():
    return batching.saturation_throughput(ROOFLINE_SERVICE, 8)


@register("batching-light-load-latency", where=WHERE,
          question="At light load (one request, nobody else), the chapter's embedding "
          "service with max_batch 8 and max_queue_delay 2 ms: the request's latency, in "
          "seconds, with the roofline's service time S(1) (batching.roofline_service_s"
          "(\"mistral-7b\", \"A100 80GB\", tokens_per_request=32, lm_head=False)).", unit="s",
          hint="Alone, the request waits the whole queue delay for company that never "
          "comes, then runs as a batch of one.")
def _():
    return float(batching.simulate([0.0], ROOFLINE_SERVICE, 8, 0.002)["latency"].iloc[0])


@register("batching-decision-max-batch", where=WHERE,
          question="Decision: the chapter's embedding service must keep the p99 latency "
          "within 50 ms. Among max_batch 1, 2, 4, 8, 16 and 32 (greedy, no queue delay), "
          "which serves the most requests/s within the SLO, on what an engine achieves "
          "(batching.model_service_s(\"mistral-7b\", \"A100 80GB\", tokens_per_request=32, "
          "lm_head=False): "
          "the achievable model, the ceiling beside)? Take the "
          "smallest limit within 2% of the best capacity (batching.sweep, then "
          "batching.best_policy), since a smaller batch holds less memory. A batch size.",
          unit="requests per batch",
          hint="Capacity under the SLO (batching.capacity) grows with max_batch while a "
          "batch is memory-bound and stops growing once it is compute-bound (32 tokens a "
          "query: a few queries pass the ridge point). Saturation throughput alone is "
          "flat past that point: it cannot choose.", rel_tol=0.0)
def _():
    achieved = batching.model_service_s(MODEL, GPU, tokens_per_request=QUERY_TOKENS,
                                           lm_head=False)
    table = batching.sweep(achieved, DECISION_BATCHES, [0.0], slo_s=DECISION_SLO_S, n=2000)
    return float(batching.best_policy(table, within=0.02)["max_batch"])
