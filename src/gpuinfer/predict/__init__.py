"""Predictions: formulas and cited tables, runnable anywhere (no torch, no timer).

By topic, in the order the chapters meet them:

The roofline and the step
    roofline       the roofline (Williams et al. 2009): an operations table on a device,
                   each row max(bytes / bandwidth, FLOPs / peak), summed
    architectures  the model catalogue: transformer shapes (dense, mixture-of-experts,
                   latent attention) from published configs, parameter counts
    step_model     a forward step as operations, each one's FLOPs and bytes; the bytes a
                   model holds (weights, experts touched, the KV cache)
    step_cost      a step's time in closed form from a few aggregates (for simulators)
    llm            the step on a device: decode and prefill times, ceilings, memory
                   limits, MBU/MFU
What engines reach
    achievable     the ceiling derated by fitted and cited efficiencies and per-step
                   overheads (one model every decision uses)
    calibration    that model's fit on published engine measurements, its held-out error
    validation     the model validated across publishers, and the interval every decision
                   shows
Serving
    batching       arrivals, Triton's dynamic batcher and continuous batching, capacity
                   under an SLO, open- and closed-loop load
    paged_kv       the paged KV cache: blocks, budgets, sequences held, what paging gains
    engine_step    an engine's step (tensor parallel included) for the simulator
    llm_simulator  an LLM server, event by event: prefill, decode, chunked prefill,
                   disaggregation
    llm_slo        SLO attainment and goodput (TTFT, TPOT, inter-token gaps)
    llm_serving    offline throughput as trtllm-bench and vllm bench report it, the chunk
                   budget within a step objective
    speculative    speculative decoding: expected tokens and speed-up, engines' variants
    colocation, mig_sizing
                   several models on one GPU; MIG slices a model needs
    fleet_sizing   machines a demand needs within a latency objective, and their cost
Beyond one GPU
    collectives    NCCL's all-reduce cost model: protocols, algorithms, rings, fits
    parallel       tensor and pipeline parallelism of a decoder, TP options priced
    multinode      NVLS_TREE and TP x PP across servers
    expert_parallel  mixtures of experts across GPUs: all-to-alls, routing imbalance,
                   EP/TP/DP-attention layouts, MoE options priced
Cost and small models
    cost           cost per million predictions, break-even utilisation and demand
    tabular        a small MLP on tabular data: its kernels on the roofline, plus overhead
    search         the largest whole number meeting a monotone objective
"""
