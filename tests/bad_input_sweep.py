"""A sweep of the public API with bad inputs, bounded: `python -m tests.bad_input_sweep`.

Each case is a valid base call with one argument replaced by a bad value (wrong type,
NaN, inf, negative, zero, huge, empty, an unknown name, an odd count). Cases run in a
worker subprocess, each under a per-case alarm; a case that does not return within the
alarm, or takes the worker down, is a hang (the worker is restarted after it). Each
result is classified:

- clear:   TypeError / ValueError (incl. validate.UnknownName) / NotImplementedError
           whose message names the parameter;
- obscure: another exception, or a message that does not name the parameter;
- hang:    no answer within the time limit;
- silent:  a value came back (`wrong` when it holds NaN, inf or a negative number,
           which no quantity here may be for these inputs; `ok` otherwise: some bad-looking
           inputs are legitimate, e.g. context=0).

Not part of the unit suite (it takes a minute or two); each defect it found is a fast
test in tests/test_bad_inputs.py. `--show KIND` prints the cases of one kind;
`--only MODULE` restricts the sweep to one module.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import selectors
import subprocess
import sys
import tempfile

NAN, INF = "float('nan')", "float('inf')"
NUM_BAD = ["None", "'x'", "True", NAN, INF, "-1", "0", "1e30", "[]"]
COUNT_BAD = ["None", "'x'", "2.5", NAN, INF, "-1", "0", "10**15"]
NAME_BAD = ["'nope'", "3", "None", "''"]
FRAC_BAD = ["None", NAN, "-0.1", "0", "1.5", "69"]
ARR_BAD = ["[]", "None", "'x'", f"[1.0, {NAN}]", "[1.0, -1.0]", f"[1.0, {INF}]"]
FN_BAD = ["None", "3", "'x'"]
DF_BAD = ["None", "3", "'x'", "[]", "{}"]
KINDS = {"num": NUM_BAD, "count": COUNT_BAD, "name": NAME_BAD, "frac": FRAC_BAD,
         "arr": ARR_BAD, "fn": FN_BAD, "df": DF_BAD}

# (call target, base arguments as source text, {parameter: kind}); positional arguments
# are written "p=..." too: the sweep calls everything by keyword except where the
# function takes *args (none here).
SVC = "batching.service_table([1, 8, 32], [0.01, 0.012, 0.02])"
SIM = ("batching.simulate(batching.poisson_arrivals(50, 200), " + SVC + ", 8, 0.005)")
BASES = [
    # roofline
    ("roofline.attainable_flops", "intensity=10, peak_flops=1e12, bandwidth=1e11",
     {"intensity": "num", "peak_flops": "num", "bandwidth": "num"}),
    ("roofline.op_time_s", "flops=1e9, bytes_=1e6, peak_flops=1e12, bandwidth=1e11",
     {"flops": "num", "bytes_": "num", "peak_flops": "num", "bandwidth": "num"}),
    ("roofline.matmul_flops", "m=8, n=8, k=8", {"m": "count", "n": "count", "k": "count"}),
    ("roofline.matmul_bytes", "m=8, n=8, k=8, dtype='fp16'",
     {"m": "count", "dtype": "name"}),
    ("roofline.matmul_intensity", "m=8, n=8, k=8, dtype='fp16'", {"k": "count", "dtype": "name"}),
    ("roofline.ridge_rows", "n=8192, k=8192, accelerator='A100', dtype='fp16'",
     {"n": "count", "k": "count", "accelerator": "name", "dtype": "name"}),
    ("roofline.peak_or_nan", "accelerator='A100', dtype='fp16'",
     {"accelerator": "name", "dtype": "name"}),
    ("roofline.bandwidth_or_nan", "accelerator='A100'", {"accelerator": "name"}),
    ("roofline.evaluate", "ops={'a': {'flops': 1e9, 'bytes': 1e6, 'dtype': 'fp16'}}, "
     "accelerator='A100'", {"ops": "df", "accelerator": "name"}),
    ("roofline.total_s", "ops={'a': {'flops': 1e9, 'bytes': 1e6, 'dtype': 'fp16'}}, "
     "accelerator='T4'", {"ops": "df", "accelerator": "name"}),
    ("roofline.step_s", "terms={'a': (1e9, 1e6, 'fp16')}, accelerator='A100'",
     {"terms": "df", "accelerator": "name"}),
    ("roofline.plot", "accelerator='A100', dtype='fp16'", {"accelerator": "name", "dtype": "name"}),
    # dtypes
    ("dtypes.bytes_per_element", "dtype='fp16'", {"dtype": "name"}),
    ("dtypes.canonical", "dtype='fp16'", {"dtype": "name"}),
    ("dtypes.get", "dtype='fp16'", {"dtype": "name"}),
    ("dtypes.peak_dtype", "dtype='fp16'", {"dtype": "name"}),
    ("dtypes.value_bits", "dtype='fp16'", {"dtype": "name"}),
    ("dtypes.formats", "dtype='int4', kv_dtype='fp8', compute_dtype='fp16'",
     {"dtype": "name", "kv_dtype": "name", "compute_dtype": "name"}),
    # llm
    ("llm.get", "name='llama-3-8b'", {"name": "name"}),
    ("llm.kv_cache_bytes_per_token", "model='llama-3-8b', dtype='fp16'",
     {"model": "name", "dtype": "name"}),
    ("llm.weight_bytes", "model='llama-3-8b', dtype='fp16'", {"model": "name", "dtype": "name"}),
    ("llm.decode_step_s", "model='llama-3-8b', accelerator='A100', batch=4, context=512",
     {"model": "name", "accelerator": "name", "batch": "count", "context": "count"}),
    ("llm.decode_step_s", "model='llama-3-8b', accelerator='T4', batch=4, context=512, "
     "dtype='fp16'", {"dtype": "name", "kv_dtype": "name", "compute_dtype": "name"}),
    ("llm.decode_ceiling", "model='llama-3-8b', accelerator='A100', batch=4, context=512",
     {"batch": "count", "context": "count", "dtype": "name"}),
    ("llm.decode_step_bytes", "model='llama-3-8b', batch=4, context=512",
     {"batch": "count", "context": "count", "kv_dtype": "name"}),
    ("llm.decode_step_flops", "model='llama-3-8b', batch=4, context=512",
     {"model": "name", "batch": "count", "context": "count"}),
    ("llm.decode_intensity", "model='llama-3-8b', batch=4, context=512",
     {"batch": "count", "context": "count"}),
    ("llm.decode_step_breakdown", "model='llama-3-8b', accelerator='A100', batch=4",
     {"batch": "count", "compute_dtype": "name"}),
    ("llm.forward_step_s", "model='llama-3-8b', accelerator='A100', new_tokens=128",
     {"new_tokens": "count", "context": "count", "logits": "count"}),
    ("llm.prefill_s", "model='llama-3-8b', accelerator='A100', prompt_tokens=512",
     {"prompt_tokens": "count", "batch": "count", "dtype": "name"}),
    ("llm.max_batch", "model='llama-3-8b', accelerator='A100', context=2048",
     {"context": "count", "reserve_bytes": "num", "kv_dtype": "name"}),
    ("llm.max_context", "model='llama-3-8b', accelerator='A100', batch=4",
     {"batch": "count", "reserve_bytes": "num"}),
    ("llm.max_batch_within", "model='llama-3-8b', accelerator='A100', context=2048, "
     "step_s=0.05", {"context": "count", "step_s": "num"}),
    ("llm.mbu", "model='llama-3-8b', accelerator='A100', tokens_per_s=50",
     {"tokens_per_s": "num", "batch": "count", "context": "count"}),
    ("llm.mfu", "model='llama-3-8b', accelerator='A100', tokens_per_s=50",
     {"tokens_per_s": "num", "batch": "count", "compute_dtype": "name"}),
    ("llm.mla_kv_cache_bytes_per_token", "n_layers=61, kv_lora_rank=512, qk_rope_head_dim=64",
     {"n_layers": "count", "kv_lora_rank": "count", "qk_rope_head_dim": "count",
      "bytes_per_element": "num"}),
    ("llm.weight_read_ceiling_from", "n_params=8e9, bytes_per_param=2, bandwidth=2e12",
     {"n_params": "num", "bytes_per_param": "num", "bandwidth": "num", "batch": "count"}),
    ("llm.compute_bound_batch", "model='llama-3-8b', accelerator='A100'",
     {"model": "name", "accelerator": "name", "dtype": "name"}),
    ("llm.attention_dominant_context", "model='llama-3-8b', accelerator='A100', batch=8",
     {"batch": "count"}),
    ("llm.experts_touched", "model='mixtral-8x7b', tokens=4", {"tokens": "count"}),
    ("llm.step_constants", "model='llama-3-8b'", {"model": "name", "dtype": "name"}),
    ("llm.step_weight_bytes", "model='llama-3-8b', tokens=1", {"tokens": "count"}),
    ("llm.routed_expert_weight_bytes", "model='mixtral-8x7b', tokens=4", {"tokens": "count"}),
    ("llm.decode_step_time_overlapped", "model='llama-3-8b', accelerator='A100', batch=4",
     {"batch": "count", "context": "count"}),
    # parallel
    ("parallel.allreduce_s", "n_bytes=1e6, n_devices=8, bandwidth=1e11, latency=1e-6",
     {"n_bytes": "num", "n_devices": "count", "bandwidth": "num", "latency": "num",
      "base_latency": "num"}),
    ("parallel.allreduce_bytes_sent", "n_bytes=1e6, n_devices=8",
     {"n_bytes": "num", "n_devices": "count"}),
    ("parallel.allreduce_bus_bandwidth", "n_bytes=1e6, n_devices=8, seconds=1e-4",
     {"n_bytes": "num", "n_devices": "count", "seconds": "num"}),
    ("parallel.allreduce_crossover_bytes", "n_devices=8, bandwidth=1e11, latency=1e-6",
     {"n_devices": "count", "bandwidth": "num", "latency": "num"}),
    ("parallel.interconnect_allreduce_s", "n_bytes=1e6, n_devices=8, interconnect='nvlink4'",
     {"n_bytes": "num", "n_devices": "count", "interconnect": "name", "protocol": "name"}),
    ("expert_parallel.all_to_all_s", "sent_bytes=1e6, n_devices=8, interconnect='nvlink4'",
     {"sent_bytes": "num", "n_devices": "count", "interconnect": "name"}),
    ("parallel.tp_step_s", "model='llama-3-70b', accelerator='H100', n_devices=4",
     {"model": "name", "n_devices": "count", "batch": "count", "interconnect": "name",
      "new_tokens": "count", "context": "count"}),
    ("parallel.tp_max_batch", "model='llama-3-70b', accelerator='H100', n_devices=4, "
     "context=2048", {"n_devices": "count", "context": "count", "kv_sharding": "name"}),
    ("parallel.min_tp_degree", "model='llama-3-70b', accelerator='H100', context=2048",
     {"context": "count", "batch": "count", "max_devices": "count"}),
    ("parallel.shard", "model='llama-3-8b', n_devices=2", {"model": "name", "n_devices": "count"}),
    ("parallel.valid_tp_degrees", "model='llama-3-8b'", {"model": "name", "max_devices": "count"}),
    ("parallel.launch_floor_s", "model='llama-3-8b', per_kernel_s=5e-6",
     {"per_kernel_s": "num", "kernels_per_layer": "count"}),
    ("expert_parallel.uniform_routing_imbalance", "tokens=64, n_devices=8",
     {"tokens": "count", "n_devices": "count", "experts_per_token": "count"}),
    ("parallel.fit_allreduce", "n_bytes=[1e5, 1e6, 1e7], seconds=[1e-5, 2e-5, 1e-4], "
     "n_devices=8", {"n_bytes": "arr", "seconds": "arr", "n_devices": "count"}),
    ("parallel.tp_kv_cache_bytes_per_token", "model='llama-3-70b', n_devices=4",
     {"n_devices": "count", "kv_sharding": "name"}),
    ("parallel.pp_decode_breakdown", "model='llama-3-70b', accelerator='H100', n_stages=4",
     {"n_stages": "count", "batch": "count"}),
    ("parallel.crossover_devices", "model='llama-3-70b', accelerator='H100'",
     {"batch": "count", "max_devices": "count"}),
    # batching
    ("batching.poisson_arrivals", "rate=10, n=100", {"rate": "num", "n": "count", "seed": "count"}),
    ("batching.md1_mean_wait", "rate=10, service_s=0.01", {"rate": "num", "service_s": "num"}),
    ("batching.service_table", "batches=[1, 8], seconds=[0.01, 0.02]",
     {"batches": "arr", "seconds": "arr"}),
    ("batching.saturation_throughput", f"service_s={SVC}, max_batch=8",
     {"service_s": "fn", "max_batch": "count"}),
    ("batching.simulate", f"arrivals=batching.poisson_arrivals(50, 200), service_s={SVC}, "
     "max_batch=8, max_queue_delay=0.005",
     {"arrivals": "arr", "service_s": "fn", "max_batch": "count", "max_queue_delay": "num"}),
    ("batching.capacity", f"service_s={SVC}, max_batch=8, slo_s=0.1, n=500",
     {"max_batch": "count", "max_queue_delay": "num", "slo_s": "num", "quantile": "num",
      "n": "count", "rel_tol": "frac"}),
    ("batching.load_curve", f"arrival_rates=[10, 50], service_s={SVC}, max_batch=8, n=300",
     {"arrival_rates": "arr", "max_batch": "count", "n": "count", "slo_s": "num"}),
    ("batching.summarize", f"df={SIM}", {"df": "df", "slo_s": "num"}),
    ("batching.simulate_closed_loop", f"n_clients=4, service_s={SVC}, max_batch=8, n=300",
     {"n_clients": "count", "max_batch": "count", "think_time": "num", "n": "count"}),
    ("batching.simulate_generation", "arrivals=batching.poisson_arrivals(20, 50), "
     "output_tokens=16, step_s=" + SVC + ", max_batch=8",
     {"arrivals": "arr", "output_tokens": "count", "max_batch": "count", "policy": "name"}),
    ("batching.roofline_service_s", "model='llama-3-8b', accelerator='A100'",
     {"model": "name", "context": "count", "tokens_per_request": "count", "overhead_s": "num"}),
    ("batching.sweep", f"service_s={SVC}, max_batches=[1, 8], max_queue_delays=[0.0], "
     "slo_s=0.1, n=300", {"max_batches": "arr", "max_queue_delays": "arr", "slo_s": "num"}),
    # quant
    ("quant.qrange", "bits=8", {"bits": "count"}),
    ("quant.bytes_per_weight", "bits=4, group_size=128",
     {"bits": "num", "group_size": "count", "scale_bytes": "num", "zero_point_bytes": "num"}),
    ("quant.scale_zero_point", "lo=-1.0, hi=1.0, bits=8", {"lo": "num", "hi": "num", "bits": "count"}),
    ("quant.quantize", "x=quant.example_weights(8, 16), bits=8",
     {"x": "arr", "bits": "count", "axis": "count", "method": "name", "group_size": "count",
      "percentile": "num"}),
    ("quant.fake_quantize", "x=quant.example_weights(8, 16), bits=4",
     {"x": "arr", "bits": "count", "method": "name"}),
    ("quant.calibrate", "x=quant.example_weights(8, 16), bits=8",
     {"x": "arr", "bits": "count", "method": "name", "num_bins": "count"}),
    ("quant.sqnr_db", "x=[1.0, 2.0], x_hat=[1.0, 2.1]", {"x": "arr", "x_hat": "arr"}),
    ("quant.mse", "x=[1.0, 2.0], x_hat=[1.0, 2.1]", {"x": "arr", "x_hat": "arr"}),
    ("quant.max_abs_error", "x=[1.0, 2.0], x_hat=[1.0, 2.1]", {"x": "arr", "x_hat": "arr"}),
    ("quant.ideal_sqnr_db", "bits=8", {"bits": "count", "signal": "name"}),
    ("quant.pack_int4", "q=[1, 2, 3, 4]", {"q": "arr"}),
    ("quant.pack_int4", "q=[1, 2, 3]", {}),
    ("quant.unpack_int4", "packed=quant.pack_int4([1, 2, 3, 4])", {"packed": "arr"}),
    ("quant.smoothquant_scales", "act_absmax=[1.0, 20.0], weight_absmax=[0.5, 0.5]",
     {"act_absmax": "arr", "weight_absmax": "arr", "alpha": "frac"}),
    ("quant.mx_scale", "amax=[1.0, 3.0]", {"amax": "arr", "fmt": "name"}),
    ("quant.nvfp4_scales", "block_amax=[1.0, 3.0], tensor_amax=3.0",
     {"block_amax": "arr", "tensor_amax": "num"}),
    ("quant.fake_quantize_float", "x=quant.example_weights(8, 32), fmt='fp8_e4m3'",
     {"x": "arr", "fmt": "name", "block_size": "count"}),
    ("quant.representable_values", "name='fp8_e4m3'", {"name": "name"}),
    ("quant.format_properties", "name='fp8_e4m3'", {"name": "name"}),
    ("quant.example_weights", "d_out=8, d_in=16", {"d_out": "count", "d_in": "count",
                                                   "tails": "name", "seed": "count"}),
    ("quant.example_activations", "n_tokens=8, d_in=256", {"n_tokens": "count",
                                                          "outlier_gain": "num"}),
    ("quant.example_kv", "n_tokens=8, head_dim=128", {"n_tokens": "count", "head_dim": "count"}),
    # plots
    ("plots.step_time_vs_batch", "rows=[{'batch': 1, 'seconds': 0.01}, "
     "{'batch': 8, 'seconds': 0.012}], floor_s=0.005",
     {"rows": "df", "floor_s": "num"}),
    ("plots.step_time_vs_batch", "rows=[{'batch': 1, 'seconds': -0.01}, "
     "{'batch': 8, 'seconds': 0.012}]", {}),
    ("plots.bandwidth_vs_size", "rows=[{'bytes': 1e6, 'achieved_gb_per_s': 500.0}, "
     "{'bytes': 1e8, 'achieved_gb_per_s': 900.0}], bandwidth_bytes_per_s=1e12, cache_bytes=4e7",
     {"rows": "df", "bandwidth_bytes_per_s": "num", "cache_bytes": "num"}),
    ("plots.bandwidth_vs_size", "rows=[{'bytes': 1e6, 'achieved_gb_per_s': -500.0}]", {}),
    ("roofline.plot", "accelerator='A100', points=[{'intensity': 10.0, 'flops': -1e12}]", {}),
    ("roofline.plot", "accelerator='A100', points={'a': float('nan')}", {}),
    ("plots.bytes_label", "value=1e6", {"value": "num"}),
    # decoding
    ("decoding.DecodeStack(decoding.lab_model('mistral-7b', 'cpu', weight_budget_bytes=2e6), 'fp32', 'cpu').kv_cache_bytes", "batch=2, context=16",
     {"batch": "count", "context": "count"}),
    ("decoding.DecodeStack(decoding.lab_model('mistral-7b', 'cpu', weight_budget_bytes=2e6), 'fp32', 'cpu').step_flops", "batch=2, context=16",
     {"batch": "count", "context": "count"}),
    ("decoding.matrix_shapes", "spec=gpuinfer.predict.llm.get('llama-3-8b')", {"spec": "name"}),
    ("decoding.lab_model", "model='mistral-7b', weight_budget_bytes=1e8",
     {"model": "name", "weight_budget_bytes": "num", "width_divisor": "count"}),
    ("decoding.weight_traffic_bytes_per_weight", "kernel='int8-dequant', dtype='fp16', "
     "device='cpu'", {"kernel": "name", "dtype": "name"}),
    ("decoding.kernel_available", "kernel='dense', device='cpu'", {"kernel": "name"}),
    ("decoding.sweep_estimate_s", "model='llama-3-8b', accelerator='A100', batches=[1, 8], "
     "context=128, weight_format='fp16', dtype='fp16', min_run_s=0.05",
     {"batches": "arr", "context": "count", "min_run_s": "num", "weight_format": "name"}),
    # bench
    ("lab_measurements.measured_roofline", "rows=[{'flops': 1e9, 'bytes': 1e6, 'seconds': 1e-3}]",
     {"rows": "df"}),
    ("lab_measurements.measured_roofline", "rows=[{'flops': -1e9, 'bytes': 1e6, 'seconds': 1e-3}]", {}),
    ("lab_measurements.measured_roofline", "rows=[{'flops': 1e9, 'bytes': float('nan'), 'seconds': 1e-3}]",
     {}),
    ("bench.timing_estimate_s", "call_s=1e-3, min_run_s=0.05",
     {"call_s": "num", "min_run_s": "num", "warmup": "count", "min_blocks": "count"}),
    ("bench.clock_scaled_peak", "peak_flops=1e12, state={'sm_clock_mhz': 1000.0, "
     "'sm_clock_max_mhz': 1400.0}", {"peak_flops": "num", "state": "df"}),
    ("bench.time_fn", "fn=lambda: None, min_run_s=0.01",
     {"fn": "fn", "warmup": "count", "min_run_s": "num", "min_blocks": "count"}),
    ("bench.time_calls", "fn=lambda: None, n=3", {"fn": "fn", "n": "count"}),
    ("bench.read_sizes_for", "cache=4e7, memory=8e10", {"cache": "num", "memory": "num"}),
    ("bench.matmul_estimate_s", "shapes=[(256, 256, 256)], dtype='fp32', accelerator='A100', "
     "min_run_s=0.05", {"shapes": "df", "dtype": "name", "min_run_s": "num"}),
    ("bench.throttle_reasons", "mask=0", {"mask": "count"}),
    ("bench.weight_read_bandwidth", "sizes_bytes=[1e6], device='cpu', min_run_s=0.01",
     {"sizes_bytes": "arr", "dtype": "name", "min_run_s": "num"}),
    ("bench.matmul_tflops", "shapes=[(64, 64, 64)], device='cpu', min_run_s=0.01, "
     "dtype='fp32'", {"shapes": "df", "dtype": "name", "min_run_s": "num"}),
    # exercises
    ("exercises.check", "name='nope', answer=1.0", {"answer": "num"}),
    # the defects issue 25 names, one case each
    ("batching.capacity", "service_s=lambda b: 0.01 + 1e-5 * b, max_batch=1 << 20, slo_s=1.0",
     {}),
    ("batching.summarize", f"df={SIM}.assign(latency=float('nan'))", {}),
    ("batching.summarize", f"df={SIM}.assign(latency=-1.0)", {}),
    ("llm.decode_step_s", "model='llama-3-8b', accelerator='T4', dtype='bf16'", {}),
    ("llm.decode_step_s", "model='llama-3-8b', accelerator='T4', compute_dtype='int4'", {}),
    ("llm.compute_bound_batch", "model='llama-3-8b', accelerator='T4', dtype='bf16'", {}),
    ("llm.mfu", "model='llama-3-8b', accelerator='T4', tokens_per_s=50, dtype='bf16'", {}),
    ("exercises.register", "name=gpuinfer.course.exercises.names()[0], question='q', unit='u', "
     "hint='h', where='w'", {}),
    # files other helpers own (reported, not fixed here)
    ("(lambda **k: serving.MemoryPlan(**k).capacity_bytes)",
     "accelerator=hardware.get('A100'), deployments=(), reserve_bytes=-1e12", {}),
    ("(lambda **k: serving.MemoryPlan(**k).capacity_bytes)",
     "accelerator=hardware.get('A100'), deployments=(), reserve_bytes=1e9",
     {"reserve_bytes": "num"}),
    ("reference.results_row", "lab=1, what='x', value=1.0, unit='GB/s'",
     {"lab": "count", "value": "num", "fraction": "frac"}),
    ("cost.cost_per_million", "price_per_hour=2.0, throughput_per_s=100",
     {"price_per_hour": "num", "throughput_per_s": "num", "utilisation": "frac"}),
    ("cost.machines_needed", "demand_per_s=100, throughput_per_s=30",
     {"demand_per_s": "num", "throughput_per_s": "num"}),
    ("speculative.expected_tokens", "acceptance=0.7, k=4", {"acceptance": "frac", "k": "count"}),
    ("speculative.speedup", "acceptance=0.7, k=4, cost_ratio=0.1",
     {"acceptance": "frac", "k": "count", "cost_ratio": "num"}),
    ("tabular.mlp_flops", "batch=8", {"batch": "count", "hidden": "arr"}),
    ("tabular.host_copy_s", "n_bytes=1e6, link='pcie4'", {"n_bytes": "num", "link": "name"}),
    ("llm_serving.kv_blocks", "tokens=100", {"tokens": "count", "block_size": "count"}),
    ("llm_serving.kv_cache_budget", "model='llama-3-8b', accelerator='A100'",
     {"model": "name", "accelerator": "name", "gpu_memory_utilization": "frac"}),
    ("hardware.get", "name='A100'", {"name": "name"}),
    ("hardware.derated", "name='A100', bandwidth_fraction=0.8",
     {"name": "name", "bandwidth_fraction": "frac"}),
    ("hardware.mig_slice", "name='A100', profile='1g.10gb'", {"name": "name", "profile": "name"}),
    ("achievable.decode_step_s", "model='llama-3-8b', accelerator='A100', batch=4",
     {"batch": "count", "context": "count", "dtype": "name"}),
    # the decisions moved into the package this round (issue 25)
    ("search.largest_meeting", "ok=lambda n: n < 10, lo=1, hi=100",
     {"ok": "fn", "lo": "count", "hi": "count"}),
    ("parallel.tp_step_s", "model='llama-2-70b', accelerator='H100 SXM', n_devices=4, "
     "batch=8, context=1024", {"model": "name", "accelerator": "name", "n_devices": "count",
                               "batch": "count", "context": "count", "dtype": "name"}),
    ("parallel.tp_max_batch_within", "model='llama-2-70b', accelerator='H100 SXM', n_devices=4, "
     "context=1024, tpot_s=0.03", {"n_devices": "count", "context": "count",
                                   "tpot_s": "num", "accelerator": "name"}),
    ("parallel.tp_options", "model='llama-2-70b', prices={'H200': 5.0}, context=1024, "
     "tpot_s=0.03, options=(4, 8)", {"prices": "df", "context": "count", "tpot_s": "num",
                                     "options": "arr"}),
    ("expert_parallel.moe_max_batch_within", "model='qwen3-30b-a3b', accelerator='H100 SXM', "
     "n_devices=8, context=1024, tpot_s=0.03", {"model": "name", "n_devices": "count",
                                                "context": "count", "tpot_s": "num",
                                                "layout": "name", "dtype": "name"}),
    ("expert_parallel.moe_options", "model='qwen3-30b-a3b', prices={'H100 SXM': 4.0}, "
     "context=1024, tpot_s=0.03, n_devices=8, options=('EP + DP attention',)",
     {"prices": "df", "context": "count", "tpot_s": "num", "n_devices": "count",
      "options": "arr"}),
    ("achievable.decode_options", "model='llama-2-7b', options={'a': {'dtype': 'fp16'}, "
     "'b': {'dtype': 'int8'}}, accelerator='T4'",
     {"options": "df", "accelerator": "name", "batch": "count", "context": "count",
      "baseline": "name"}),
    ("achievable.max_batch_within", "model='llama-3-8b', accelerator='A100', context=4096, "
     "tpot_s=0.035", {"context": "count", "tpot_s": "num", "dtype": "name",
                      "accelerator": "name"}),
    ("cost.priced", "table=__import__('pandas').DataFrame({'tokens_per_s': [10.0, 20.0]}), "
     "price_per_hour=1.0", {"table": "df", "price_per_hour": "num", "utilisation": "frac"}),
    ("reference.gpt_fast_fraction", "weight_format='bf16'", {"weight_format": "name"}),
    ("llm_serving.chunk_step_s", "model='llama-3-8b', accelerator='H100 SXM', budget=512, "
     "decodes=32, decode_context=2048, prompt_tokens=4096",
     {"budget": "count", "decodes": "count", "decode_context": "count",
      "prompt_tokens": "count", "n_devices": "count"}),
    ("llm_serving.largest_chunk_budget", "model='llama-3-8b', accelerator='H100 SXM', "
     "decodes=32, decode_context=2048, prompt_tokens=4096, step_slo_s=0.015",
     {"decodes": "count", "prompt_tokens": "count", "step_slo_s": "num",
      "granularity": "count"}),
    ("paged_kv.kv_sequences", "model='llama-3-8b', accelerator='A100', tokens=4096",
     {"tokens": "count", "instances": "count", "block_size": "count",
      "gpu_memory_utilization": "frac", "kv_cache_bytes": "num"}),
    ("batching.model_service_s", "model='mistral-7b', accelerator='A100', "
     "tokens_per_request=32", {"model": "name", "accelerator": "name", "context": "count",
                               "tokens_per_request": "count", "overhead_s": "num"}),
    ("fleet_sizing.Machine", "name='m', price_per_hour=1.0, service_time=0.001",
     {"price_per_hour": "num", "service_time": "num", "max_batch": "count",
      "queues": "count"}),
    ("fleet_sizing.fleet_options", "options=[fleet_sizing.Machine('m', 1.0, 0.001)], "
     "demand_per_s=100, slo_s=0.01, n=500", {"options": "df", "demand_per_s": "num",
                                             "slo_s": "num", "n": "count"}),
    ("mig_sizing.smallest_mig_profile", "model='llama-3-8b', accelerator='H100 SXM', batch=8, "
     "context=4096, tpot_s=0.015, dtype='int8'", {"accelerator": "name", "batch": "count",
                                                 "tpot_s": "num", "context": "count"}),
]


#: Measurements that do real work before they time anything, with the seconds each case
#: may take: `bench.weight_read_bandwidth`'s default CPU sizes read up to twice the last
#: level cache, so it first fills a pool of about 1 GB on a CPU with a 480 MiB L3 (about
#: 8 s on this project's 2-core machine; its timing itself is about 0.2 s). Slow, not
#: stuck: a case still over this limit is a hang.
SLOW = {"bench.weight_read_bandwidth": 60.0}

#: Answers that may be negative: signed tensors (weights, activations, their quantised
#: copies) and ratios in dB.
NEGATIVE_OK = ["quant.fake_quantize", "quant.quantize", "quant.sqnr_db", "quant.example_",
               "quant.dequantize", "quant.unpack_int4", "quant.scale_zero_point",
               "quant.representable_values", "quant.calibrate", "quant.qrange"]
#: (target, words of the arguments...): a NaN or inf answer the docstring promises for
#: that input (NaN peak: "unknown" gives NaN; M/D/1 beyond rho = 1: inf; a static-batching
#: delay of inf is a policy, shown as such).
DOCUMENTED = [("roofline.op_time_s", "float('nan')"),
              ("batching.md1_mean_wait", "1e30"),
              ("batching.sweep", "float('inf')"),
              ("bench.clock_scaled_peak", "peak_flops=float('nan')"),  # peak unknown
              ("bench.clock_scaled_peak", "state={}"),  # clocks not read
              ("bench.timing_estimate_s", "call_s=float('nan')")]  # no roofline time


def cases(only=None):
    """Every (target, argument text, parameter, bad value) of the sweep."""
    out = []
    for target, base, params in BASES:
        if only and not target.startswith(only + "."):
            continue
        if not params:
            out.append((target, base, None, None))
        for param, kind in params.items():
            for bad in KINDS[kind]:
                args = _replace(base, param, bad)
                out.append((target, args, param, bad))
    return out


def _replace(base, param, bad):
    """`base` with `param=...` set to `bad` (added when the base leaves it default)."""
    parts, depth, cur = [], 0, ""
    for ch in base:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    done = False
    for i, p in enumerate(parts):
        if p.split("=", 1)[0].strip() == param:
            parts[i] = f"{param}={bad}"
            done = True
    if not done:
        parts.append(f"{param}={bad}")
    return ", ".join(parts)


WORKER = r'''
import json, math, os, signal, sys, warnings
RESULTS = os.fdopen(os.dup(1), "w")  # the results; what the calls print goes to stderr
os.dup2(2, 1)
sys.stdout = sys.stderr
import numpy as np
import matplotlib
matplotlib.use("Agg")
import torch  # imported once here, so no case pays for it inside its time limit
import gpuinfer
from gpuinfer import (roofline, llm, parallel, batching, quant, plots, dtypes, decoding,
                      bench, exercises, serving, reference, cost, speculative, tabular,
                      llm_serving, hardware, achievable, lab_measurements, search,
                      expert_parallel, paged_kv, fleet_sizing, mig_sizing)
warnings.simplefilter("ignore")

class Hang(BaseException):
    pass

def alarm(*_):
    raise Hang()

signal.signal(signal.SIGALRM, alarm)

def bad_number(x, depth=0, negative_ok=False):
    if depth > 3:
        return False
    if isinstance(x, bool):
        return False
    if isinstance(x, (int, float, np.integer, np.floating)):
        return (not math.isfinite(float(x))) or (float(x) < 0 and not negative_ok)
    if isinstance(x, np.ndarray) and x.dtype.kind in "iuf":
        return bool(np.any(~np.isfinite(x)) or (np.any(x < 0) and not negative_ok))
    if isinstance(x, dict):
        return any(bad_number(v, depth + 1, negative_ok) for v in x.values())
    if hasattr(x, "select_dtypes"):
        num = x.select_dtypes("number").to_numpy(dtype=float)
        return bool(np.any(np.isnan(num)) or np.any(np.isinf(num)))
    return False

NEGATIVE_OK = tuple(json.loads(sys.argv[2]))
DOCUMENTED = [tuple(x) for x in json.loads(sys.argv[3])]
SLOW = json.loads(sys.argv[4])

def wrong(target, args, value):
    """NaN or inf in the answer, or a negative number where none may be, unless the
    docstring promises it for this input (`DOCUMENTED`)."""
    if any(target == t and all(w in args for w in words) for t, *words in DOCUMENTED):
        return False
    if target.startswith(NEGATIVE_OK):
        return bad_number(value, negative_ok=True)
    return bad_number(value)

for line in sys.stdin:
    i, target, args, param = json.loads(line)
    signal.setitimer(signal.ITIMER_REAL, max(float(sys.argv[1]), SLOW.get(target, 0.0)))
    try:
        value = eval(f"{target}({args})")
        signal.setitimer(signal.ITIMER_REAL, 0)
        res = ("silent", "wrong" if wrong(target, args, value) else "ok", repr(value)[:120])
    except Hang:
        res = ("hang", "", "")
    except (TypeError, ValueError, NotImplementedError) as e:
        signal.setitimer(signal.ITIMER_REAL, 0)
        msg = str(e)
        names = param is None or param.rstrip("_") in msg or param in msg
        res = ("clear" if names else "obscure", type(e).__name__, msg[:200])
    except BaseException as e:
        signal.setitimer(signal.ITIMER_REAL, 0)
        res = ("obscure", type(e).__name__, str(e)[:200])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    print(json.dumps([i] + list(res)), file=RESULTS, flush=True)
    import matplotlib.pyplot as plt
    plt.close("all")
'''


def run(all_cases, per_case_s=5.0):
    """Results {i: (kind, detail, message)} for `all_cases`, a worker restarted after
    any case that takes it down or outlives its alarm (a loop the alarm cannot stop)."""
    results, todo = {}, list(range(len(all_cases)))
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONWARNINGS="ignore")
    while todo:
        with tempfile.TemporaryFile("w+") as feed:  # a file, not a pipe: no deadlock
            for i in todo:
                t, a, p, _ = all_cases[i]
                feed.write(json.dumps([i, t, a, p]) + "\n")
            feed.seek(0)
            proc = subprocess.Popen([sys.executable, "-c", WORKER, str(per_case_s),
                                     json.dumps(NEGATIVE_OK), json.dumps(DOCUMENTED),
                                     json.dumps(SLOW)],
                                    stdin=feed, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, text=True, env=env)
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        pending = list(todo)
        while pending:
            if not sel.select(timeout=max(per_case_s, *SLOW.values()) * 3 + 10):  # stuck
                proc.kill()
                results[pending[0]] = ("hang", "killed", "")
                break
            line = proc.stdout.readline()
            if not line:  # the worker died
                results[pending[0]] = ("obscure", "worker died", "")
                break
            i, *res = json.loads(line)
            results[i] = tuple(res)
            pending.remove(i)
        proc.wait()
        todo = [i for i in todo if i not in results]
    return results


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--show", action="append", default=[],
                    help="print the cases of this kind (clear, obscure, hang, silent, wrong)")
    ap.add_argument("--only", help="only this module, e.g. batching")
    ap.add_argument("--per-case-s", type=float, default=5.0)
    opts = ap.parse_args(argv)
    all_cases = cases(opts.only)
    results = run(all_cases, opts.per_case_s)
    counts = collections.Counter()
    for i, (kind, detail, msg) in sorted(results.items()):
        label = "silent-wrong" if kind == "silent" and detail == "wrong" else kind
        counts[label] += 1
        if kind in opts.show or label in opts.show or (detail == "wrong" and "wrong" in opts.show):
            t, a, p, b = all_cases[i]
            print(f"[{label}] {t}({a})  -> {detail}: {msg}")
    n = len(all_cases)
    print(f"cases {n}: " + ", ".join(f"{k} {counts[k]} ({100 * counts[k] / n:.1f}%)"
                                      for k in ("clear", "obscure", "hang", "silent-wrong",
                                                "silent")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
