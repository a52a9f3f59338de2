"""gpuinfer: the package behind the course *GPU inference performance*.

Every value is in SI base units: bytes, bytes/s, FLOP, FLOP/s, seconds.
Bandwidth is decimal (1 GB/s = 1e9 B/s); memory is the bytes a card really has.

Modules, named after the ideas they hold. Predictions:
    dtypes        number formats: bits, block scales, bytes per element (int4: 0.5625)
    hardware      the cited catalogue of devices, links, MIG profiles and published
                  achievable ceilings; what torch is running on
    roofline      the roofline (Williams et al. 2009): an operations table on a device,
                  each row max(bytes / bandwidth, FLOPs / peak), summed
    llm           transformer shapes, weight and KV-cache bytes, a forward step (decode,
                  prefill, mixed) as operations on the roofline
    batching      arrivals, Triton's dynamic batcher and continuous batching, capacity
                  under an SLO, open- and closed-loop load
    llm_serving   an LLM server: prefill and decode steps on the roofline, chunked
                  prefill, a paged KV cache, disaggregation, SLO attainment, goodput
    speculative   speculative decoding: expected tokens and speed-up, from the roofline
    quant         integer and floating quantisation: scales, calibration, FP8/FP4 and
                  block formats, SmoothQuant, error metrics
    serving       layer fusion, kernel auto-tuning, memory plans for models on one GPU
    parallel      sharding across devices: NCCL's all-reduce, tensor/pipeline-parallel decode
    tabular       a small MLP on tabular data: its kernels on the roofline, plus overhead
    cost          cost per million predictions, break-even utilisation and demand
Measurements:
    bench         the one timer every lab uses, and the measurements built on it
    decoding      a model-shaped decode step to time, in dense, int8 or int4 weights
    distributed   tensor-parallel layers on torch.distributed (NCCL or gloo)
    triton_server a model behind NVIDIA Triton (PyTriton) and an open-loop client
    onnx_runtime  export to ONNX, ONNX Runtime's fusions and static int8 quantisation
    reference     GPU reference runs and published measurements
The course's plumbing:
    validate      one policy for checking arguments (clear errors, named parameters)
    exercises     self-check answers for the worked problems, and the instructors' key
    plots, book   figures, and numbers in prose (myst-nb glue)
"""

__version__ = "0.1.0"
