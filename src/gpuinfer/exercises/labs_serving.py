"""Decisions asked in the labs *Small model: CPU or GPU?* and *Batching under load*: which
machine, or which batching policy, meets a target at the lowest cost. The numbers are
fixed here (not the learner's measurements), so that everyone gets the same answer."""

from .. import batching, cost
from . import register
from .batching import LAB_TABLE

LAB_CPU_GPU = "labs/05_cpu_vs_gpu"
LAB_BATCHING = "labs/06_batching_under_load"

# --- lab 5: a CPU fleet or a GPU machine for a steady stream of predictions -------------
#: Example prices (cost.EXAMPLE_PRICES): AWS c5.2xlarge and g4dn.xlarge, USD/h.
CPU_PRICE, GPU_PRICE = 0.34, 0.526
#: Predictions/s each machine serves within the latency target (illustrative settings:
#: 4 cores x 3,000/s; a T4 at batches of 1,024).
CPU_RATE, GPU_RATE = 12_000, 400_000
FLEET_DEMAND = 10_000  # predictions/s, steady


@register("lab-cpu-gpu-cheapest-fleet", where=LAB_CPU_GPU,
          question="10,000 predictions/s arrive steadily and each must be answered within "
          "5 ms. A CPU machine (USD 0.34/h) serves 12,000 predictions/s within 5 ms; a GPU "
          "machine (USD 0.526/h) serves 400,000/s within 5 ms. Renting whole machines of "
          "one kind, what does a million predictions cost with the cheaper choice?",
          unit="USD per million predictions (to 3 significant figures)",
          hint="For each kind: machines = ceil(demand / throughput); cost per hour = "
          "machines x price; cost per million = cost per hour / (3600 x demand) x 1e6. "
          "Keep the cheaper (cost.cost_per_million_at_demand does the arithmetic).",
          slips={
              # the GPU machine at this demand: 0.526 / 0.34
              GPU_PRICE / CPU_PRICE: "That is the GPU machine: it is 2.5% busy at this "
              "demand and you pay for its whole hour. One CPU machine serves 10,000/s alone.",
              # the GPU machine priced as if fully busy: (0.526 / 400,000) / (0.34 / 10,000)
              (GPU_PRICE / GPU_RATE) / (CPU_PRICE / FLEET_DEMAND): "You priced the GPU "
              "machine fully busy; at 10,000/s it idles 97.5% of the hour you pay for.",
              # the CPU machine priced as if fully busy: 10,000 / 12,000
              FLEET_DEMAND / CPU_RATE: "You priced the CPU machine fully busy (12,000/s); "
              "only 10,000/s arrive, and its whole hour is paid for.",
          })
def _():
    options = [cost.cost_per_million_at_demand(price, rate, FLEET_DEMAND)
               for price, rate in ((CPU_PRICE, CPU_RATE), (GPU_PRICE, GPU_RATE))]
    return min(options)


# --- lab 6: the batching policy that needs the fewest GPUs under a p99 SLO ---------------
FLEET_REQUESTS = 5_000  # requests/s, Poisson, split evenly over the GPUs
FLEET_SLO_S = 0.012     # p99 latency target, s
#: The A10G example price (AWS g5.xlarge, cost.EXAMPLE_PRICES), USD/h.
FLEET_GPU_PRICE = 1.006
FLEET_POLICIES = (1, 8, 32)  # max_batch, each with no queue delay


def _fleet_gpus():
    """GPUs each policy needs: ceil(demand / its capacity under the SLO)."""
    service = batching.service_table(list(LAB_TABLE), list(LAB_TABLE.values()))
    return {mb: cost.machines_needed(FLEET_REQUESTS, batching.capacity(
        service, mb, 0.0, slo=FLEET_SLO_S)) for mb in FLEET_POLICIES}


@register("lab-batching-cheapest-fleet", where=LAB_BATCHING,
          question="5,000 requests/s (Poisson) must be served with p99 latency within 12 ms, "
          "on GPUs whose service times are the problems' table (4.0 ms at batch 1 ... "
          "8.0 ms at 32), at USD 1.006/h each. The traffic is split evenly over the GPUs "
          "and every GPU runs the same policy: max_batch 1, 8 or 32, no queue delay. What "
          "does the cheapest fleet cost per hour?",
          unit="USD per hour (to the cent)",
          hint="For each policy: its capacity under the SLO (batching.capacity with "
          "slo=0.012), GPUs = ceil(5,000 / capacity), cost = GPUs x 1.006. Keep the cheapest.",
          slips={
              # max_batch 8 needs 4 GPUs where max_batch 32 needs 3 (capacities ~1,270/s
              # and ~2,360/s under the SLO)
              4 / 3: "That is max_batch 8's fleet: under a 12 ms p99 a larger batch serves "
              "more per GPU. Compare all three policies.",
              # sized by saturation throughput: 32 / 8 ms = 4,000/s, so 2 GPUs
              2 / 3: "You sized by saturation throughput (full batches back to back): "
              "there the queue, and the p99, grow without bound. Use the capacity under "
              "the SLO (batching.capacity).",
              # no batching: ~82/s each under the SLO, 62 GPUs
              62 / 3: "That is max_batch 1: without batching each GPU serves about 80 "
              "requests/s within 12 ms.",
          })
def _():
    return min(_fleet_gpus().values()) * FLEET_GPU_PRICE
