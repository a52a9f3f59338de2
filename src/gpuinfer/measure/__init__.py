"""Measurements: what runs on the machine in front of the learner. These modules may
import torch (at the top), ONNX Runtime or Triton, and anything from the layers above.

The timer and the device
    bench          the one timer every lab uses, and the sweeps built on it
    torch_device   where tensors live: resolve a device, random inputs, CUDA graphs, memory
    environment    what the device is doing: NVML clocks, throttle reasons, a clock sampler
    detection      the device torch runs on, as a catalogue entry (or a labelled estimate)
    lab_measurements  the decode-step row every lab reports, the roofline a sweep measured
    lab_verdicts   what a lab's measurement means, noise-gated (compare, Spread)
    reference      GPU reference runs and published measurements in one CSV schema
Models to run
    decoding       a model-shaped decode step to time, in dense, int8 or int4 weights
    real_model     SmolLM2-135M end to end: KV cache, generation, speculative decoding
    profiling      a profiler's trace read against the per-operation roofline
    distributed    tensor-parallel layers on torch.distributed (NCCL or gloo)
    tabular_model  chapter 6's small MLP and its synthetic batch
Quantisation
    quant          integer quantisation: scales, calibration, int4 packing, SmoothQuant,
                   error metrics
    float_formats  FP8/FP6/FP4 grids and block formats (MX, NVFP4), fake quantisation
    quant_examples, quant_inputs
                   chapter 4's synthetic tensors; the checks the quantisers share
    quality        quantisation judged on a real model (perplexity) and published recovery
Systems
    fusion, tuning layer fusion, kernel auto-tuning
    onnx_runtime   export to ONNX, ONNX Runtime's fusions and static int8 quantisation
    triton_server  a model behind NVIDIA Triton (PyTriton) and an open-loop client
"""
