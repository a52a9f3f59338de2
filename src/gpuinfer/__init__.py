"""gpuinfer: the package behind the course *GPU inference performance*.

Every value is in SI base units: bytes, bytes/s, FLOP, FLOP/s, seconds.
Bandwidth is decimal (1 GB/s = 1e9 B/s); memory is the bytes a card really has.

Modules, named after the ideas they hold. Predictions (none imports torch):
    dtypes        number formats: bits, block scales, bytes per element (int4: 0.5625)
    hardware      the cited catalogue (a package: devices, mig, measured ceilings, links
                  and NCCL's cost model, detection of what torch runs on)
    roofline      the roofline (Williams et al. 2009): an operations table on a device,
                  each row max(bytes / bandwidth, FLOPs / peak), summed
    models        the model catalogue: transformer shapes (dense, mixture-of-experts,
                  latent attention) from published configs, parameter counts
    llm           weight and KV-cache bytes, a forward step as operations on the roofline
                  (re-exports `models`' names)
    achievable    what engines reach: the ceiling derated by fitted and cited efficiencies
                  and per-step overheads (one model every decision uses)
    calibration   that model's fit on published engine measurements, and its held-out error
    batching      arrivals, Triton's dynamic batcher and continuous batching, capacity
                  under an SLO, open- and closed-loop load
    llm_serving   an LLM server: prefill and decode steps, chunked prefill, a paged KV
                  cache, tensor parallelism, disaggregation, SLO attainment, goodput,
                  offline throughput as trtllm-bench and vllm bench report it
    speculative   speculative decoding: expected tokens and speed-up, the variants engines ship
    quant         integer and floating quantisation: scales, calibration, FP8/FP4 and
                  block formats, SmoothQuant, error metrics
    quality       quantisation judged on a real model (perplexity) and on published recovery
    fusion, tuning, colocation, mig_sizing
                  layer fusion, kernel auto-tuning, several models on one GPU, MIG slices
                  (`serving` re-exports them for one release)
    parallel      sharding across devices: NCCL's collectives, tensor/pipeline/expert
                  parallelism; multinode: NVLS_TREE and TP x PP across servers
    tabular       a small MLP on tabular data: its kernels on the roofline, plus overhead
    cost          cost per million predictions, break-even utilisation and demand
Measurements:
    device        where tensors live: resolve a device, random inputs, CUDA graphs, memory
    environment   what the device is doing: NVML clocks, throttle reasons, a clock sampler
    bench         the one timer every lab uses, and the sweeps built on it
    decoding      a model-shaped decode step to time, in dense, int8 or int4 weights
    distributed   tensor-parallel layers on torch.distributed (NCCL or gloo)
    tabular_model chapter 6's small MLP and its synthetic batch, in torch
    triton_server a model behind NVIDIA Triton (PyTriton) and an open-loop client
    onnx_runtime  export to ONNX, ONNX Runtime's fusions and static int8 quantisation
    bench_suite, gpu_check
                  `python -m gpuinfer bench` and `gpu-check` (the workshop's dry-run report)
    reference     GPU reference runs and published measurements
The course's plumbing:
    validate      one policy for checking arguments (clear errors, named parameters)
    exercises     self-check answers for the worked problems, and the instructors' key
    findings, lab_verdicts
                  the sentences chapters and labs print about their own run, branching on it
    plots, book   figures, and numbers in prose (myst-nb glue)
"""

__version__ = "0.1.0"
