"""Tensor-parallel layers on torch.distributed, and their timing. Lab: *Tensor-parallel
layers*; chapter: *Beyond one GPU*.

Each rank holds a shard of an MLP (column-parallel, then row-parallel), the partial sums
are all-reduced, and the result is checked against the unsharded layer; the step and
all-reduces of several sizes are timed with `bench.time_fn` on rank 0 while the other
ranks keep in step. gloo on CPU processes, NCCL with one GPU a rank; never a home-made
engine. `gpuinfer.predict.parallel` holds the model these measurements are compared with.
"""

from __future__ import annotations

import numpy as np

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from gpuinfer.measure import torch_device as _device
from gpuinfer import dtypes as _dtypes
from gpuinfer.predict import collectives
from gpuinfer import validate as _validate

#: The lab's sizes. On GPUs (NCCL): an MLP of Llama-2-70B's width (d_model 8192, d_ff
#: 4 x d_model) at a decode batch of 16, fp16, and all-reduces from 4 KiB to 256 MiB (9
#: sizes: from the latency floor to far past every link's ridge). On CPU processes (gloo):
#: a 512-wide MLP at batch 8, fp32, and 4 KiB to 8 MiB (7 sizes), seconds in all.
GPU_LAB = {"d_model": 8192, "batch": 16, "top_message_bytes": 256 * 2**20, "n_sizes": 9,
           "min_run_s": 0.1, "dtype": "fp16"}
CPU_LAB = {"d_model": 512, "batch": 8, "top_message_bytes": 8 * 2**20, "n_sizes": 7,
           "min_run_s": 0.05, "dtype": "fp32"}
SMALLEST_MESSAGE_BYTES = 4096
#: Seconds a rank waits for the others before torch.distributed gives up.
DEFAULT_TIMEOUT_S = 120

# The lab's runner. Workers start once (torch.multiprocessing spawn, or torchrun) and do
# every measurement in that one start: process start-up costs seconds.


def _shard_args(weight, rank, world_size):
    if not hasattr(weight, "shape") or len(weight.shape) < 2:
        raise TypeError(f"weight must be a 2-D tensor [d_in, d_out], got {weight!r:.80}")
    world_size = _validate.count("world_size", world_size, maximum=1 << 20)
    rank = _validate.count("rank", rank, minimum=0, maximum=world_size - 1,
                           why_maximum=f"ranks are 0 to world_size - 1 = {world_size - 1}")
    return rank, world_size


def column_shard(weight, rank, world_size):
    """Rank `rank`'s column block of `weight` [d_in, d_out] -> [d_in, d_out / N]:
    a column-parallel layer, whose output each rank holds a slice of."""
    rank, world_size = _shard_args(weight, rank, world_size)
    d_out = weight.shape[-1]
    if d_out % world_size:
        raise ValueError(f"{world_size} ranks do not divide the {d_out} output columns")
    w = d_out // world_size
    return weight[..., rank * w:(rank + 1) * w].contiguous()


def row_shard(weight, rank, world_size):
    """Rank `rank`'s row block of `weight` [d_in, d_out] -> [d_in / N, d_out]:
    a row-parallel layer, whose outputs are partial sums to be all-reduced."""
    rank, world_size = _shard_args(weight, rank, world_size)
    d_in = weight.shape[0]
    if d_in % world_size:
        raise ValueError(f"{world_size} ranks do not divide the {d_in} input rows")
    w = d_in // world_size
    return weight[rank * w:(rank + 1) * w].contiguous()


def mlp_reference(x, w_in, w_out):
    """The unsharded layer pair the lab shards: gelu(x @ w_in) @ w_out.
    x: [batch, d_model], w_in: [d_model, d_ff], w_out: [d_ff, d_model]."""

    return F.gelu(x @ w_in) @ w_out


def tp_mlp_partial(x, w_in_shard, w_out_shard, out=None):
    """One rank's share of the tensor-parallel MLP, before the all-reduce: the column-
    parallel layer (and its elementwise gelu) needs no communication; the row-parallel
    layer leaves a partial sum [batch, d_model] that the ranks add up."""

    h = F.gelu(x @ w_in_shard)  # [batch, d_ff / N]
    return torch.matmul(h, w_out_shard, out=out)  # [batch, d_model], partial


def tp_mlp_forward(x, w_in_shard, w_out_shard, group=None):
    """The tensor-parallel MLP on one rank: partial product, then one all-reduce (sum),
    after which every rank holds the full output [batch, d_model]."""

    y = tp_mlp_partial(x, w_in_shard, w_out_shard)
    dist.all_reduce(y, group=group)
    return y


def _lockstep_s(call, group, leader, device, min_run_s, chunk=32):
    """Time a collective `call()` with `bench.time_fn` on the leader rank while the other
    ranks keep joining it.

    The timer decides how many calls to make as it goes, so the ranks cannot agree on a
    count in advance. Instead every rank calls in chunks of `chunk` and, after each chunk,
    all-reduces a separate int32 stop flag with MAX (zero until the leader raises it; MAX
    keeps it at 1, where a flag summed inside an fp16 payload grew N-fold a call to inf).
    Only the followers read the flag, so no host synchronisation is added to the leader's
    timed calls; the leader's share of the flag is one 4-byte all-reduce every `chunk`
    calls. After timing, the leader raises the flag and pads its calls to the end of the
    followers' chunk. Returns the leader's Timing (None on the others)."""

    from gpuinfer.measure import bench
    from gpuinfer.measure import torch_device

    flag = torch.zeros(1, device=device, dtype=torch.int32)

    def exchange_flag():
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)

    if not leader:
        while True:
            for _ in range(chunk):
                call()
            exchange_flag()
            if int(flag.item()) > 0:
                return None
    calls = [0]

    def counted():
        call()
        calls[0] += 1
        if calls[0] % chunk == 0:
            exchange_flag()  # zero: the followers go on

    timing = bench.time_fn(counted, device=device, min_run_s=min_run_s)
    flag.fill_(1)
    for _ in range(chunk - calls[0] % chunk):
        call()
    exchange_flag()
    torch_device.synchronize(device)
    return timing


def _timed_allreduce(n_elems, group, leader, device, tdtype, min_run_s):

    buf = torch.zeros(n_elems, device=device, dtype=tdtype)

    def call():
        dist.all_reduce(buf, group=group)

    return _lockstep_s(call, group, leader, device, min_run_s)


def _timed_tp_step(x, w_in, w_out, group, leader, device, min_run_s):

    batch, d_model = x.shape[0], w_out.shape[1]
    out = torch.zeros(batch, d_model, device=device, dtype=x.dtype)  # written in place

    def call():
        tp_mlp_partial(x, w_in, w_out, out=out)
        dist.all_reduce(out, group=group)

    return _lockstep_s(call, group, leader, device, min_run_s)


def _join_group(backend, rank, world_size, device, timeout_s):
    """init_process_group; NCCL is told its rank's GPU (`device_id`), so it binds the
    communicator to that device at once instead of guessing (and warning) later."""
    import datetime


    extra = {"device_id": device} if backend == "nccl" else {}
    dist.init_process_group(backend, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=timeout_s), **extra)


def _worker(rank, world_size, port, config, results):
    """One rank of `run_tp_lab` (or of `torchrun -m gpuinfer.measure.distributed`): join the group, check the sharded layer against the
    unsharded one, then time the all-reduces and the sharded step for every group size."""
    import os


    from gpuinfer.measure import bench

    backend = config["backend"]
    if port is not None:  # spawned by run_tp_lab; under torchrun the launcher sets these
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    if backend == "nccl":
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:  # gloo: CPU only; bench.time_fn's clock never touches CUDA on a CPU
        torch.set_num_threads(config["threads_per_rank"])
        device = torch.device("cpu")
    _join_group(backend, rank, world_size, device, config["timeout_s"])
    try:
        tdtype = _device.torch_dtype(config["dtype"])
        bpe = _dtypes.bytes_per_element(config["dtype"])
        rows = []
        sizes = [n for n in config["group_sizes"] if n > 1]
        groups = {n: dist.new_group(list(range(n))) for n in sizes}  # every rank creates all
        d_model, d_ff, batch = config["d_model"], config["d_ff"], config["batch"]
        # The same weights on every rank, drawn on the rank's own device (no full-width
        # fp32 copy through host memory on every rank) from a seeded generator, in fp32.
        gen = torch.Generator(device=device).manual_seed(config["seed"])
        x = torch.randn(batch, d_model, generator=gen, device=device)
        w_in = torch.randn(d_model, d_ff, generator=gen, device=device) * d_model ** -0.5
        w_out = torch.randn(d_ff, d_model, generator=gen, device=device) * d_ff ** -0.5
        ref = mlp_reference(x, w_in, w_out)  # [batch, d_model], unsharded, fp32
        x_dev = x.to(tdtype)
        min_t = config["min_run_s"]

        for n in [1, *sizes]:
            member = rank < n
            group = groups.get(n)
            if member:
                w_in_s = column_shard(w_in, rank, n).to(tdtype)
                w_out_s = row_shard(w_out, rank, n).to(tdtype)
                # Correctness: the sharded layer against the unsharded one.
                if n > 1:
                    y = tp_mlp_forward(x_dev, w_in_s, w_out_s, group=group)
                else:
                    y = tp_mlp_partial(x_dev, w_in_s, w_out_s)
                err = float((y.float() - ref).abs().max())
                # Compute only: the rank's shard without the all-reduce.
                compute = bench.time_fn(lambda w_in_s=w_in_s, w_out_s=w_out_s:
                                        tp_mlp_partial(x_dev, w_in_s, w_out_s),
                                        device=device, min_run_s=min_t)
                step = _timed_tp_step(x_dev, w_in_s, w_out_s, group, rank == 0, device,
                                      min_t) if n > 1 else compute
                if rank == 0:
                    rows.append({"kind": "step", "n_devices": n, "batch": batch,
                                 "d_model": d_model, "d_ff": d_ff,
                                 "message_bytes": batch * d_model * bpe,
                                 "max_abs_error": err, "compute_s": compute.median_s,
                                 "compute_iqr_s": compute.iqr_s,
                                 "seconds": step.median_s, "iqr_s": step.iqr_s})
                for n_bytes in (config["message_bytes"] if n > 1 else []):
                    n_elems = max(1, int(n_bytes // bpe))
                    t = _timed_allreduce(n_elems, group, rank == 0, device, tdtype, min_t)
                    if rank == 0:
                        rows.append({"kind": "allreduce", "n_devices": n,
                                     "message_bytes": n_elems * bpe, "seconds": t.median_s,
                                     "iqr_s": t.iqr_s})
            dist.barrier()  # ranks outside this group wait here
        if rank == 0:
            results.put(rows)
    finally:
        dist.destroy_process_group()


def default_backend() -> str:
    """"nccl" when at least two GPUs are visible (and torch has NCCL), else "gloo"."""

    if torch.cuda.is_available() and torch.cuda.device_count() >= 2 and dist.is_nccl_available():
        return "nccl"
    return "gloo"


#: Seconds `preflight` gives its ranks to join and all-reduce once: NCCL's first call
#: builds its communicator (a second or two on two GPUs); a pair that cannot reach each
#: other hangs instead, and is stopped after this.
PREFLIGHT_TIMEOUT_S = 60.0


def _preflight_worker(rank, world_size, port, backend, timeout_s, results):
    """One rank of `preflight`: join the group, all-reduce [rank + 1] * 4, and rank 0
    reports the first element (1 + 2 + ... + world_size when the backend works)."""
    import os


    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
    else:
        device = torch.device("cpu")
    _join_group(backend, rank, world_size, device, timeout_s)
    try:
        t = torch.full((4,), float(rank + 1), device=device)
        dist.all_reduce(t)
        if rank == 0:
            results.put(float(t[0].item()))
    finally:
        dist.destroy_process_group()


def preflight(backend, world_size=2, timeout_s=PREFLIGHT_TIMEOUT_S):
    """Can `world_size` ranks on `backend` ("nccl" or "gloo") all-reduce at all? Spawns
    them for one small all-reduce and checks its sum, within `timeout_s` seconds.
    Returns (True, "") or (False, why): a rank that raised (NCCL built without, a GPU
    that refuses), a sum that is wrong, or ranks that hung (stopped). Two GPUs in a VM
    (Kaggle's T4 pair) can fail NCCL's transports where gloo still works."""
    import time


    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'gloo' or 'nccl', got {backend!r}")
    world_size = collectives.check_devices(world_size, "world_size")
    timeout_s = _validate.positive("timeout_s", timeout_s)
    results = mp.get_context("spawn").SimpleQueue()
    try:
        context = mp.start_processes(_preflight_worker, nprocs=int(world_size),
                                     args=(int(world_size), _free_port(), backend,
                                           timeout_s, results),
                                     join=False, start_method="spawn")
        deadline = time.monotonic() + timeout_s
        while not context.join(timeout=0.1):
            if time.monotonic() > deadline:
                for process in context.processes:
                    if process.is_alive():
                        process.terminate()
                return False, f"the ranks did not finish one all-reduce in {timeout_s:g} s"
    except Exception as error:  # a rank raised: torch reports its traceback here
        lines = [line for line in str(error).strip().splitlines() if line.strip()]
        return False, (lines[-1] if lines else type(error).__name__)[:300]
    want = world_size * (world_size + 1) / 2
    got = results.get() if not results.empty() else None
    if got != want:
        return False, f"the all-reduce summed to {got}, not {want:g}"
    return True, ""


def lab_backend(timeout_s=PREFLIGHT_TIMEOUT_S):
    """The lab's backend and a line saying why: "nccl" when two or more GPUs are visible
    and NCCL passes `preflight`; "gloo" (2 ranks as CPU processes) otherwise, with the
    reason NCCL failed where it was tried. Returns (backend, note)."""
    backend = default_backend()
    if backend != "nccl":
        return "gloo", ""
    ok, why = preflight("nccl", 2, timeout_s)
    if ok:
        return "nccl", "NCCL passed a 2-rank all-reduce: the lab measures the GPUs."
    return "gloo", (f"NCCL failed a 2-rank all-reduce ({why}).\nFalling back to gloo: 2 "
                    "ranks as CPU processes, as on a machine without GPUs.")


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _lab_config(world_size, backend, d_model, d_ff, batch, message_bytes, dtype,
                min_run_s, seed, timeout_s, gpus_visible) -> dict:
    """Check the lab's settings and fill in the defaults for a CPU (gloo) or GPU (nccl) run."""
    import os

    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'gloo' or 'nccl', got {backend!r}")
    gpu = backend == "nccl"
    world_size = collectives.check_devices(world_size, "world_size")
    if world_size < 2:
        raise ValueError("world_size must be at least 2 to measure communication")
    if gpu and gpus_visible < 2:
        raise ValueError("the nccl backend needs at least two visible GPUs")
    lab = GPU_LAB if gpu else CPU_LAB
    dtype = _dtypes.canonical(dtype or lab["dtype"])
    d_model = _validate.count("d_model", d_model or lab["d_model"], maximum=1 << 20)
    d_ff = _validate.count("d_ff", d_ff or 4 * d_model, maximum=1 << 22)
    batch = _validate.count("batch", batch or lab["batch"], maximum=1 << 20)
    if message_bytes is None:
        message_bytes = [int(s) for s in np.geomspace(SMALLEST_MESSAGE_BYTES,
                                                      lab["top_message_bytes"], lab["n_sizes"])]
    if isinstance(message_bytes, (str, bytes)) or not hasattr(message_bytes, "__iter__"):
        raise TypeError(f"message_bytes must be a list of sizes in bytes, got {message_bytes!r}")
    message_bytes = [_validate.positive("message_bytes", v) for v in message_bytes]
    seed = _validate.count("seed", seed, minimum=0)
    timeout_s = _validate.positive("timeout_s", timeout_s)
    if min_run_s is not None:
        min_run_s = _validate.positive("min_run_s", min_run_s)
    group_sizes = [n for n in (2 ** k for k in range(world_size.bit_length()))
                   if n <= world_size]
    for n in group_sizes:
        if d_ff % n:
            raise ValueError(f"{n} ranks do not divide d_ff = {d_ff}")
    return {"backend": backend, "dtype": dtype, "d_model": int(d_model), "d_ff": int(d_ff),
            "batch": int(batch), "message_bytes": [int(v) for v in message_bytes],
            "group_sizes": group_sizes, "seed": int(seed), "timeout_s": timeout_s,
            "min_run_s": min_run_s or lab["min_run_s"],
            "threads_per_rank": max(1, (os.cpu_count() or 2) // world_size)}


def _frame(rows, config):
    import pandas as pd

    df = pd.DataFrame(rows)
    df.insert(0, "backend", config["backend"])
    df.insert(1, "dtype", config["dtype"])
    return df


def _spawn_and_collect(worker, nprocs, args, results, poll_s=0.1):
    """Start `nprocs` spawned ranks of `worker(rank, *args)` and return what rank 0 puts
    on `results` (a SimpleQueue of the spawn context), read while the ranks still run: a
    pipe holds some 64 KiB, so rank 0 blocks on a larger put until it is read, and
    waiting for the ranks to end first would wait forever. A rank that fails raises here."""

    context = mp.start_processes(worker, args=args, nprocs=nprocs, join=False,
                                 start_method="spawn")
    while results.empty():
        if context.join(timeout=poll_s):  # every rank ended (raises if one failed)
            if results.empty():
                raise RuntimeError("the ranks ended without sending rank 0's results")
            break
    got = results.get()
    while not context.join():
        pass
    return got


def run_tp_lab(world_size=None, *, backend=None, d_model=None, d_ff=None, batch=None,
               message_bytes=None, dtype=None, min_run_s=None, seed=0,
               timeout_s=DEFAULT_TIMEOUT_S):
    """Start `world_size` ranks once (torch.multiprocessing spawn) and, in that one start,
    for each group size N = 1, 2, 4, ... up to world_size:
    shard an MLP (column- then row-parallel), check its output against the unsharded
    layer, time the shard's compute alone and the whole step (compute + all-reduce), and
    time all-reduces of each size in `message_bytes` (bytes). Returns a pandas DataFrame,
    one row a measurement (`kind` "step" or "allreduce"), seconds as medians of rank 0's
    timings.

    Defaults: gloo on CPU processes (2 ranks, fp32, small sizes) unless several GPUs are
    visible, then NCCL, one rank a GPU, fp16, larger sizes. The same measurement runs
    under torchrun: `torchrun --standalone --nproc-per-node 8 -m gpuinfer.measure.distributed`."""

    backend = backend or default_backend()
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend must be 'gloo' or 'nccl', got {backend!r}")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if world_size is None:
        world_size = gpus if backend == "nccl" else 2
    if backend == "nccl" and collectives.check_devices(world_size, "world_size") > gpus:
        raise ValueError(f"world_size {world_size} exceeds the {gpus} visible GPUs")
    config = _lab_config(world_size, backend, d_model, d_ff, batch, message_bytes, dtype,
                         min_run_s, seed, timeout_s, gpus)
    results = mp.get_context("spawn").SimpleQueue()
    rows = _spawn_and_collect(_worker, int(world_size),
                              (int(world_size), _free_port(), config, results), results)
    return _frame(rows, config)


class _Report:
    """Rank 0's results under torchrun: printed, and written to CSV if asked."""

    def __init__(self, config, csv_path):
        self.config, self.csv_path = config, csv_path

    def put(self, rows):
        df = _frame(rows, self.config)
        print(df.to_string())
        if self.csv_path:
            df.to_csv(self.csv_path, index=False)


def main(argv=None) -> int:
    """`torchrun --standalone --nproc-per-node N -m gpuinfer.measure.distributed [options]`: the lab's
    measurement, one process a rank, started by torchrun instead of from a notebook."""
    import argparse
    import os


    parser = argparse.ArgumentParser(prog="python -m gpuinfer.measure.distributed", description=main.__doc__)
    parser.add_argument("--backend", choices=("gloo", "nccl"), default=None)
    parser.add_argument("--d-model", type=int, default=None)
    parser.add_argument("--d-ff", type=int, default=None)
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--message-bytes", type=int, nargs="+", default=None)
    parser.add_argument("--min-run-time", type=float, default=None)
    parser.add_argument("--csv", default=None, help="write rank 0's rows to this CSV file")
    args = parser.parse_args(argv)
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        parser.error("start it with torchrun, which sets RANK and WORLD_SIZE: "
                     "torchrun --standalone --nproc-per-node 2 -m gpuinfer.measure.distributed")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    config = _lab_config(world, args.backend or default_backend(), args.d_model, args.d_ff,
                         args.batch, args.message_bytes, args.dtype, args.min_run_time, 0,
                         DEFAULT_TIMEOUT_S, gpus)
    _worker(rank, world, None, config, _Report(config, args.csv) if rank == 0 else None)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
