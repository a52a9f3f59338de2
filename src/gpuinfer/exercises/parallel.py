"""Exercises of the chapter *Beyond one GPU* and the lab *Tensor-parallel layers*."""

from .. import llm, parallel
from . import register

WHERE = "chapters/08_multi_gpu"
LAB = "labs/07_tensor_parallel"


@register("parallel-allreduce-batch64", where=WHERE,
          question="Time of one ring all-reduce of Llama-2-70B's fp16 activations at batch "
          "64 ([64, 8192]) across 8 H100 SXM on NVLink 4, with the catalogue's bandwidth "
          "and NCCL's latency model", unit="seconds",
          hint="Bytes = batch x d_model x 2. Bandwidth term: 2(N-1)/N x bytes / the "
          "per-direction bandwidth; then add 2(N-1) step latencies and the base latency.")
def _():
    m = llm.get("llama-2-70b")
    return parallel.interconnect_allreduce_time(64 * m.d_model * 2, 8, "NVLink 4")


@register("parallel-fewest-h100", where=WHERE,
          question="Fewest H100 SXM (a valid tensor-parallel degree) that hold Llama-2-70B in "
          "fp16 plus the KV cache of 32 sequences of 4096 tokens", unit="devices",
          hint="Each device holds weights / N plus its KV heads for every sequence; try "
          "N = 1, 2, 4, ... and compare with 80 GB.")
def _():
    return parallel.min_tp_degree("llama-2-70b", "H100 SXM", 4096, batch=32)


@register("parallel-crossover-batch1", where=WHERE,
          question="Smallest tensor-parallel degree at which Llama-2-70B's batch-1 decode "
          "spends at least as long in all-reduces as in its sharded weight read, on H100 "
          "SXM with NVLink 4", unit="devices",
          hint="The weight read shrinks as 1/N; 160 all-reduces of 16 KB each cost about "
          "(2(N-1) x 0.6 + 6.6) microseconds, nearly all latency.")
def _():
    return parallel.crossover_devices("llama-2-70b", "H100 SXM", batch=1)


@register("parallel-kv-per-device-16", where=WHERE,
          question="KV-cache bytes one token costs each device when Llama-2-70B (8 KV heads) "
          "is sharded by heads over 16 devices, in fp16", unit="bytes",
          hint="A KV head cannot be split: with more devices than KV heads, each device "
          "still holds one head for every layer, K and V.")
def _():
    return parallel.tp_kv_cache_bytes_per_token("llama-2-70b", 16, "fp16")


@register("lab-tp-bytes-sent", where=LAB,
          question="Bytes each of 4 ranks sends in a ring all-reduce of an 8 MiB tensor",
          unit="bytes", hint="Reduce-scatter then all-gather: each sends (N-1)/N of the "
          "tensor twice.")
def _():
    return parallel.allreduce_bytes_sent(8 * 2**20, 4)


@register("lab-tp-bus-bandwidth", where=LAB,
          question="Bus bandwidth of a 2-rank all-reduce of 8e6 bytes that took 10 ms",
          unit="bytes/s", hint="Algorithm bandwidth (bytes / seconds) times 2(N-1)/N, "
          "as nccl-tests reports it.")
def _():
    return parallel.allreduce_bus_bandwidth(8e6, 2, 0.010)


@register("lab-tp-pcie-allreduce", where=LAB,
          question="Time of a ring all-reduce of 1 MiB between 2 GPUs over PCIe Gen4 x16, "
          "with the catalogue's bandwidth and NCCL's latency model", unit="seconds",
          hint="Two devices: each sends the message once, 2(N-1)/N = 1, at the "
          "per-direction bandwidth; add 2(N-1) = 2 step latencies and the base latency.")
def _():
    return parallel.interconnect_allreduce_time(2**20, 2, "PCIe Gen4 x16")
