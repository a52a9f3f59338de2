"""The exercises asked in `labs/05_cpu_vs_gpu` (every registration here has
`where="labs/05_cpu_vs_gpu"`) and the helpers only they use."""

from gpuinfer.predict import cost, tabular
from gpuinfer.course.exercises import register

LAB = "labs/05_cpu_vs_gpu"


@register("lab-cpu-gpu-params", where=LAB,
          question="Parameters of an MLP 64 -> 256 -> 256 -> 1 (weights and biases)",
          unit="parameters", hint="Each layer has in x out weights and out biases.",
          rel_tol=0.0)
def _():
    return tabular.mlp_params(64, (256, 256), 1)


@register("lab-cpu-gpu-cost-at-demand", where=LAB,
          question="Cost per million predictions when 500 predictions/s arrive at one "
          "$0.526/h GPU machine able to serve 1,000,000/s", unit="USD",
          hint="You pay for the whole hour; only 500 x 3600 predictions share it.")
def _():
    return cost.cost_per_million_at_demand(0.526, 1e6, 500)


@register("lab-cpu-gpu-launch-bound-throughput", where=LAB,
          question="Most predictions/s a GPU can serve one at a time (batch 1) when each "
          "forward pass launches 7 kernels at 5 us each and the work itself is free",
          unit="predictions/s", hint="One prediction per (kernels x overhead) seconds.")
def _():
    return 1.0 / (tabular.mlp_kernels((1024, 1024, 1024)) * 5e-6)

LAB_CPU_GPU = "labs/05_cpu_vs_gpu"

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
