"""gpuinfer: the package behind the course *GPU inference performance*.

Every value is in SI base units: bytes, bytes/s, FLOP, FLOP/s, seconds.
Bandwidth is decimal (1 GB/s = 1e9 B/s); memory is the bytes a card really has.

Modules, named after the ideas they hold, in three layers that `tests/test_layers.py`
enforces (no import cycle; no `module._private` used across modules; a prediction module
imports neither torch, the measurement layer nor the pages' plumbing).

Predictions (none imports torch):
    dtypes        number formats: bits, block scales, bytes per element (int4: 0.5625)
    hardware      the cited catalogue (a package: devices, mig, measured ceilings, links
                  and NCCL's cost model; its `detection` of what torch runs on measures)
    roofline      the roofline (Williams et al. 2009): an operations table on a device,
                  each row max(bytes / bandwidth, FLOPs / peak), summed
    models        the model catalogue: transformer shapes (dense, mixture-of-experts,
                  latent attention) from published configs, parameter counts
    step_model    a forward step as operations, each one's FLOPs and bytes; the bytes a
                  model holds (weights, experts touched, the KV cache)
    step_cost     a step's time in closed form from a few aggregates (for simulators)
    llm           the step on a device: decode and prefill times, ceilings, memory limits,
                  MBU/MFU (re-exports `models`, `step_model` and `step_cost`)
    achievable    what engines reach: the ceiling derated by fitted and cited efficiencies
                  and per-step overheads (one model every decision uses); decode options
                  side by side, the largest batch within a time per output token
    calibration   that model's fit on published engine measurements, and its held-out error
    search        the largest whole number meeting a monotone objective (every sizing search)
    batching      arrivals, Triton's dynamic batcher and continuous batching, capacity
                  under an SLO, open- and closed-loop load, a model's batch service time
    fleet_sizing  machines a demand needs within a latency objective, and what they cost
    paged_kv      the paged KV cache: blocks, budgets, sequences held, what paging gains
    engine_step   an engine's step (tensor parallel included) for the simulator
    llm_simulator an LLM server, event by event: prefill, decode, chunked prefill,
                  disaggregation
    llm_slo       SLO attainment and goodput (TTFT, TPOT, inter-token gaps)
    llm_serving   offline throughput as trtllm-bench and vllm bench report it, the chunk
                  budget within a step objective (re-exports the four above)
    speculative   speculative decoding: expected tokens and speed-up, the variants engines ship
    collectives   NCCL's all-reduce cost model: protocols, algorithms, rings, fits
    parallel      tensor and pipeline parallelism of a decoder, TP options priced
                  (re-exports `collectives`); multinode: NVLS_TREE and TP x PP across servers
    expert_parallel  mixtures of experts across GPUs: all-to-alls, routing imbalance,
                  EP/TP/DP-attention layouts, MoE options priced (on the achievable model)
    colocation, mig_sizing
                  several models on one GPU, MIG slices (`serving` re-exports them, with
                  fusion and tuning, for one release)
    tabular       a small MLP on tabular data: its kernels on the roofline, plus overhead
    cost          cost per million predictions, break-even utilisation and demand, a table
                  of options priced
    quant_examples, quant_inputs
                  the quantisation chapter's synthetic tensors; the checks quantisers share
Measurements (may run torch, ONNX Runtime or Triton):
    quant         integer quantisation: scales, calibration, int4 packing, SmoothQuant,
                  error metrics (re-exports float_formats and quant_examples)
    float_formats FP8/FP6/FP4 grids and block formats (MX, NVFP4), fake quantisation
    quality       quantisation judged on a real model (perplexity) and on published recovery
    fusion, tuning
                  layer fusion, kernel auto-tuning
    device        where tensors live: resolve a device, random inputs, CUDA graphs, memory
    environment   what the device is doing: NVML clocks, throttle reasons, a clock sampler
    bench         the one timer every lab uses, and the sweeps built on it
    lab_measurements
                  the decode-step row every lab reports, the roofline a sweep measured,
                  a lab's ceilings for a GPU the catalogue lacks
    decoding      a model-shaped decode step to time, in dense, int8 or int4 weights
    distributed   tensor-parallel layers on torch.distributed (NCCL or gloo)
    tabular_model chapter 6's small MLP and its synthetic batch, in torch
    triton_server a model behind NVIDIA Triton (PyTriton) and an open-loop client
    onnx_runtime  export to ONNX, ONNX Runtime's fusions and static int8 quantisation
    bench_suite, gpu_check
                  `python -m gpuinfer bench` and `gpu-check` (the workshop's dry-run report)
    reference     GPU reference runs and published measurements (gpt-fast's fractions)
The pages' plumbing (presentation):
    validate      one policy for checking arguments (clear errors, named parameters);
                  every layer uses it, so the test holds it to the prediction layer's rules
    exercises     one module per page: its questions' constants and self-check answers,
                  and the instructors' key (the answers call the modules above)
    findings, lab_verdicts
                  the sentences chapters and labs print about their own run, branching on
                  it (lab_verdicts reads bench's timings, so the test files it as measurement)
    plots, book   figures, and numbers in prose (myst-nb glue)
"""

__version__ = "0.2.0"  # pyproject.toml's version (tests/test_release.py keeps them equal)
