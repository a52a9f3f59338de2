"""Exercises of the chapter *Batching, latency and SLOs* and the lab *Batching under load*."""

from .. import batching
from . import register

WHERE = "chapters/03_batching"
LAB = "labs/06_batching_under_load"

# The chapter's running example: a forward step of Llama-3-8B at 512 tokens of context,
# fp16, on an A100 80GB, from the roofline.
MODEL, GPU, CONTEXT = "llama-3-8b", "A100 80GB", 512


@register("batching-md1-wait", where=WHERE,
          question="Mean queueing wait of an M/D/1 server: 80 requests/s, 10 ms each",
          unit="s", hint="Utilisation rho = rate x service time; Pollaczek-Khinchine: "
          "W_q = rho / (2 mu (1 - rho)) with mu = 1 / service time.")
def _():
    return batching.md1_mean_wait(80.0, 0.010)


@register("batching-greedy-by-hand", where=WHERE,
          question="Requests at 0, 2, 4 and 6 ms; every batch takes 5 ms; max_batch 4, "
          "no queue delay. When does the last request finish?", unit="s",
          hint="A batch starts when the GPU is free and takes everyone waiting then. "
          "Walk the timeline: who is waiting at 0 ms, at 5 ms, at 10 ms?")
def _():
    df = batching.simulate([0.0, 0.002, 0.004, 0.006], 0.005, max_batch=4)
    return float(df["finish"].max())


@register("batching-saturation-64", where=WHERE,
          question="Saturation throughput of Llama-3-8B (fp16, 512 tokens of context) on "
          "an A100 80GB with max_batch 64, from the roofline", unit="requests/s",
          hint="Every batch is full: 64 / S(64), with S from "
          "batching.roofline_service_time (bytes / bandwidth vs FLOPs / peak).")
def _():
    service = batching.roofline_service_time(MODEL, GPU, context=CONTEXT)
    return batching.saturation_throughput(service, 64)


@register("batching-light-load-latency", where=WHERE,
          question="At light load (one request, nobody else), the chapter's model with "
          "max_batch 8 and max_queue_delay 2 ms: the request's latency", unit="s",
          hint="Alone, the request waits the whole queue delay for company that never "
          "comes, then runs as a batch of one.")
def _():
    service = batching.roofline_service_time(MODEL, GPU, context=CONTEXT)
    return float(batching.simulate([0.0], service, 8, 0.002)["latency"].iloc[0])


# --- the lab: a measured table, given here so the answers do not depend on a device ---
LAB_TABLE = {1: 0.004, 2: 0.0041, 4: 0.0043, 8: 0.0048, 16: 0.0058, 32: 0.0080}


@register("lab-batching-saturation", where=LAB,
          question="With the measured table {1: 4.0, 2: 4.1, 4: 4.3, 8: 4.8, 16: 5.8, "
          "32: 8.0} ms, the saturation throughput at max_batch 32", unit="requests/s",
          hint="Full batches: 32 requests every S(32).")
def _():
    return batching.saturation_throughput(LAB_TABLE, 32)


@register("lab-batching-interpolated", where=LAB,
          question="Same table: the service time of a batch of 24, read linearly between "
          "the measured 16 and 32", unit="s",
          hint="Linear interpolation: S(16) + (24 - 16) / (32 - 16) x (S(32) - S(16)).")
def _():
    return batching.service_table(list(LAB_TABLE), list(LAB_TABLE.values()))(24)


@register("lab-batching-merged-md1", where=LAB,
          question="Two models, batch 1 each, 10 ms a request, sharing one GPU; they "
          "receive 40 and 30 requests/s (Poisson). Mean queueing wait", unit="s",
          hint="Two independent Poisson streams merge into one Poisson stream at the sum "
          "of the rates; with equal service times the GPU is one M/D/1 queue.")
def _():
    return batching.md1_mean_wait(40.0 + 30.0, 0.010)
