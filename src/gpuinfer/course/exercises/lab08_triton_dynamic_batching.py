"""The exercises asked in `labs/08_triton_dynamic_batching` (every registration here has
`where="labs/08_triton_dynamic_batching"`) and the helpers only they use."""

import math

from gpuinfer.predict import batching
from gpuinfer.course.exercises import register

LAB_TRITON = "labs/08_triton_dynamic_batching"

# --- lab 8: a per-batch hand-off in the service table -----------------------------------
#: The model's own seconds at batch 1 and 32, and the hand-off every batch pays inside
#: the server (the gap between batches under load), s.
MODEL_S = {1: 0.41e-3, 32: 3.1e-3}
HANDOFF_S = 0.020
MAX_BATCH = 32
#: Demand for the fleet question, requests/s, and the most of its full-batch throughput
#: each server may run at (the headroom its queue needs).
FLEET_DEMAND, FLEET_UTILISATION = 3500, 0.8
#: A measured run: requests/s answered and their mean latency, s (offered: 1,500/s).
ANSWERED_PER_S, MEAN_LATENCY_S, OFFERED_PER_S = 943.0, 0.093, 1500.0


def server_service(handoff_s=HANDOFF_S):
    """Seconds a batch of b takes inside the server: the model's time (linear between
    batch 1 and 32) plus the per-batch hand-off."""
    sizes = sorted(MODEL_S)
    return batching.service_table(sizes, [MODEL_S[b] + handoff_s for b in sizes])


def full_batch_throughput(handoff_s=HANDOFF_S):
    """Requests/s with full batches of `MAX_BATCH` back to back."""
    return batching.saturation_throughput(server_service(handoff_s), MAX_BATCH)


@register("lab-triton-saturation-with-handoff", where=LAB_TRITON,
          question="A model takes 3.1 ms for a batch of 32 on its own; inside a server every "
          "batch also pays a 20 ms hand-off. With full batches of 32 back to back, how many "
          "requests a second can the server answer at most?",
          unit="requests/s (3 significant figures)",
          hint="A full batch leaves the server once every (model time + hand-off): the "
          "hand-off belongs in the service time of each batch, not of each request.",
          slips={
              # the model alone: 32 / 3.1 ms = 10,323/s
              full_batch_throughput(0.0) / full_batch_throughput(): "That is the model "
              "alone: the server pays the hand-off once per batch, so add it to each "
              "batch's time.",
              # the hand-off paid per request: 32 / (3.1 ms + 32 x 20 ms)
              (MAX_BATCH / (MODEL_S[32] + MAX_BATCH * HANDOFF_S)) / full_batch_throughput():
              "That pays the hand-off once per request; it is paid once per batch.",
          })
def _():
    return full_batch_throughput()


@register("lab-triton-servers-needed", where=LAB_TRITON,
          question="3,500 requests/s must be served by servers that each answer at most the "
          "full-batch throughput of the previous question, each kept at no more than 80% of "
          "it. How many servers?", unit="servers (a whole number)",
          hint="Each server may carry 0.8 x its full-batch throughput (with the hand-off); "
          "servers = ceil(3,500 / that).",
          rel_tol=0.0,
          slips={
              3 / 4: "That runs every server at its full-batch throughput: keep 20% "
                     "headroom for the queue (0.8 x the throughput).",
              1 / 4: "That uses the model's own throughput, without the per-batch "
                     "hand-off: the server answers far fewer.",
          })
def _():
    return math.ceil(FLEET_DEMAND / (FLEET_UTILISATION * full_batch_throughput()))


@register("lab-triton-requests-in-flight", where=LAB_TRITON,
          question="At 1,500 requests/s offered a server answered 943 a second with a mean "
          "latency of 93 ms. How many requests were inside it on average (Little's law)?",
          unit="requests (3 significant figures)",
          hint="Little's law: requests in the system = the rate through it x the mean "
          "time in it. Use the rate that came out (answered), in requests/s, and the "
          "latency in seconds.",
          slips={OFFERED_PER_S / ANSWERED_PER_S: "That uses the offered rate; only 943 a "
                 "second went through (the rest queued and grew the latency): use the "
                 "answered rate."})
def _():
    return ANSWERED_PER_S * MEAN_LATENCY_S
