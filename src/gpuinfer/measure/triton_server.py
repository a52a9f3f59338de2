"""NVIDIA Triton Inference Server for real, through PyTriton: a model served with Triton's
own dynamic batcher, an open-loop Poisson client, and what the batcher formed.

Lab: *Triton's dynamic batcher, measured* (labs/08). Times are seconds, rates requests/s,
memory bytes. Needs the `serving` extra (`pip install "gpuinfer[serving]"`), Linux.

- `serve` starts Triton on localhost, on free ports, binds each `ServedModel` (a torch
  module behind a PyTriton inference function) with `max_batch_size` and a
  `DynamicBatcher(max_queue_delay_microseconds, preferred_batch_size)`, and stops the
  server when the `with` block ends, whatever happens inside it.
- The inference function sees the batch Triton formed: it records each batch's size and
  how long the model took (`BatchLog`).
- `poisson_load` is an open-loop client: it sends each request at its Poisson arrival
  time without waiting for earlier answers (gRPC `async_infer`), bounded in count and in
  time, and records when each answer came back.
- `summarize` puts the measured run in the keys of `batching.summarize`, so a lab can set
  the server beside the simulator fed with the same arrivals.

Triton runs a Python model through a *stub* process that loads libpython. It must be the
same build as the interpreter that runs this code, or the model fails to load (pytriton
issue #51: `'_thread.RLock' object has no attribute '_recursion_count'` when a pyenv
3.11.7 venv meets Debian's 3.11.2 libpython). `python_backend_check` finds the running
interpreter's own libpython, and `serve` puts its folder first on the stub's library path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import pathlib
import socket
import sys
import sysconfig
import threading
import time
from typing import Callable, Mapping, Sequence

import numpy as np

import torch

from gpuinfer.predict import batching as _batching
from gpuinfer import validate as _v

PYTRITON_ISSUE_51 = "https://github.com/triton-inference-server/pytriton/issues/51"
HOST = "127.0.0.1"  # loopback only: the course never serves beyond this machine


# --- the Python-version trap -------------------------------------------------------------

def python_backend_check() -> dict:
    """Which libpython Triton's Python-backend stub should load: the running interpreter's
    own (`LIBDIR/INSTSONAME` from sysconfig). `ok` is False when that file does not exist
    (a Python built without `--enable-shared`); `fix` then says what to do."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    soname = sysconfig.get_config_var("INSTSONAME") or f"libpython{version}.so.1.0"
    path = pathlib.Path(libdir) / soname
    ok = bool(libdir) and path.is_file() and soname.startswith("libpython")
    fix = "" if ok else (
        f"Python {sys.version.split()[0]} at {sys.executable} has no shared libpython "
        f"({path} is missing), so Triton's Python stub would load another build and fail "
        f"({PYTRITON_ISSUE_51}). Make the venv from a Python built with --enable-shared: "
        "on Debian/Ubuntu `make PYTHON=/usr/bin/python3`; with pyenv, "
        "`env PYTHON_CONFIGURE_OPTS=--enable-shared pyenv install <version>`.")
    return {"python": sys.version.split()[0], "executable": sys.executable,
            "libpython": str(path), "ok": ok, "fix": fix}


@contextlib.contextmanager
def _stub_library_path():
    """LD_LIBRARY_PATH with this interpreter's libpython folder first, while Triton starts
    (the server and its stubs copy the environment then); restored afterwards."""
    check = python_backend_check()
    if not check["ok"]:
        raise RuntimeError(check["fix"])
    libdir = str(pathlib.Path(check["libpython"]).parent)
    old = os.environ.get("LD_LIBRARY_PATH")
    os.environ["LD_LIBRARY_PATH"] = libdir + (os.pathsep + old if old else "")
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("LD_LIBRARY_PATH", None)
        else:
            os.environ["LD_LIBRARY_PATH"] = old


def free_port(host=HOST) -> int:
    """A TCP port on `host` that nothing listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


# --- what the inference function saw -------------------------------------------------------

class BatchLog:
    """Every batch an inference function ran: model, start and end (s, on
    `time.perf_counter`'s clock, the client's too) and size. Thread-safe."""

    def __init__(self):
        self._rows: list[tuple[str, float, float, int]] = []
        self._lock = threading.Lock()

    def add(self, model, start_s, end_s, size):
        with self._lock:
            self._rows.append((str(model), float(start_s), float(end_s), int(size)))

    def clear(self):
        with self._lock:
            self._rows.clear()

    def __len__(self):
        return len(self._rows)

    def frame(self):
        """One row per batch: `model`, `start`, `end`, `seconds`, `batch_size`."""
        import pandas as pd

        with self._lock:
            rows = list(self._rows)
        df = pd.DataFrame(rows, columns=["model", "start", "end", "batch_size"])
        df.insert(3, "seconds", df["end"] - df["start"])
        return df


@dataclasses.dataclass(frozen=True)
class ServedModel:
    """A torch module served under `name`: input `x` [n_features] float32, output `y`
    [n_outputs] per request; Triton batches up to `max_batch` requests, waiting at most
    `max_queue_delay_s` for more (0: take what is queued), and starts at once when a
    `preferred_batch_sizes` size is queued."""

    name: str
    module: object
    n_features: int
    n_outputs: int
    max_batch: int = 32
    max_queue_delay_s: float = 0.0
    preferred_batch_sizes: tuple = ()

    def __post_init__(self):
        _v.ensure(isinstance(self.name, str) and self.name.replace("_", "").replace("-", "")
                  .isalnum(), f"name must be letters, digits, '_' or '-', got {self.name!r}",
                  TypeError if not isinstance(self.name, str) else ValueError)
        _v.ensure(callable(self.module), f"module must be callable (a torch module), "
                  f"got {type(self.module).__name__}", TypeError)
        _v.count("n_features", self.n_features)
        _v.count("n_outputs", self.n_outputs)
        mb = _v.count("max_batch", self.max_batch, maximum=4096)
        _v.non_negative("max_queue_delay_s", self.max_queue_delay_s)
        for p in self.preferred_batch_sizes:
            _v.count("each preferred batch size", p, maximum=mb,
                     why_maximum="a preferred batch cannot exceed max_batch")


def _infer_function(model: ServedModel, log: BatchLog) -> Callable:
    """The PyTriton inference function: runs the torch module on the batch Triton formed
    and records its size and the seconds the module took."""
    from pytriton.decorators import batch

    params = list(getattr(model.module, "parameters", lambda: [])())
    device = params[0].device if params else torch.device("cpu")

    @batch
    def infer(x):  # x: [batch, n_features] float32, the requests Triton batched
        start = time.perf_counter()
        with torch.inference_mode():
            y = model.module(torch.from_numpy(x).to(device)).cpu().numpy()  # [batch, n_outputs]
        log.add(model.name, start, time.perf_counter(), x.shape[0])
        return {"y": y.astype(np.float32, copy=False)}

    return infer


@dataclasses.dataclass
class Server:
    """A running Triton: its gRPC address, the batches its models ran, and its models."""

    grpc_url: str
    http_url: str
    log: BatchLog
    models: dict
    _triton: object = dataclasses.field(repr=False, default=None)

    def rss_bytes(self) -> float:
        """Resident memory (bytes) of the tritonserver process and its children (the
        Python stubs, one per model instance), read from /proc; nan where unreadable.
        The torch weights are not in it: PyTriton runs the model in *this* process."""
        try:
            pid = self._triton._triton_server._tritonserver_running_cmd.pid
        except AttributeError:
            return math.nan
        return _tree_rss_bytes(int(pid))

    def rss_by_process(self):
        """Resident memory (bytes) of each process of the server: the tritonserver
        binary and one Python stub per model instance. A DataFrame `pid`, `process`,
        `rss_bytes` (empty where /proc cannot be read)."""
        import pandas as pd

        try:
            pid = int(self._triton._triton_server._tritonserver_running_cmd.pid)
        except AttributeError:
            return pd.DataFrame(columns=["pid", "process", "rss_bytes"])
        return pd.DataFrame(_tree_processes(pid), columns=["pid", "process", "rss_bytes"])


def _tree_rss_bytes(pid: int) -> float:
    """VmRSS of `pid` and all its descendants (Linux /proc), bytes; nan if unreadable."""
    total = sum(rss for _, _, rss in _tree_processes(pid))
    return total if total > 0 else math.nan


def _tree_processes(pid: int) -> list:
    """(pid, name, VmRSS bytes) of `pid` and all its descendants, from Linux /proc."""
    proc = pathlib.Path("/proc")
    if not proc.is_dir():
        return []
    children: dict[int, list[int]] = {}
    for d in proc.iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    rows, stack = [], [pid]
    while stack:
        p = stack.pop()
        name, rss = "?", 0.0
        try:
            for line in (proc / str(p) / "status").read_text().splitlines():
                if line.startswith("Name:"):
                    name = line.split(None, 1)[1].strip()
                elif line.startswith("VmRSS:"):
                    rss = float(line.split()[1]) * 1024
        except OSError:
            continue
        rows.append((p, name, rss))
        stack.extend(children.get(p, []))
    return rows


def _quiet(triton):
    """Keep tritonserver's own log lines out of the notebook (PyTriton prints them)."""
    try:
        triton._initialize_server()
        triton._triton_server._verbose = False
    except AttributeError:  # another PyTriton: its logs are printed, nothing breaks
        pass


@contextlib.contextmanager
def serve(models: Sequence[ServedModel], *, quiet=True):
    """Start Triton on 127.0.0.1 (free ports), bind `models`, yield a `Server`; stop the
    server on leaving the block, also after an error. Takes a few seconds each way."""
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig

    models = list(models)
    _v.ensure(models and all(isinstance(m, ServedModel) for m in models),
              "models must be a non-empty list of ServedModel", TypeError)
    names = [m.name for m in models]
    _v.ensure(len(set(names)) == len(names), f"model names must differ, got {names}")
    http, grpc, metrics = free_port(), free_port(), free_port()
    config = TritonConfig(http_address=HOST, http_port=http, grpc_address=HOST,
                          grpc_port=grpc, metrics_address=HOST, metrics_port=metrics,
                          allow_metrics=False, exit_timeout_secs=5)
    log = BatchLog()
    triton = Triton(config=config)
    try:
        with _stub_library_path():
            if quiet:
                _quiet(triton)
            triton.__enter__()
            for m in models:
                batcher = DynamicBatcher(
                    max_queue_delay_microseconds=int(round(m.max_queue_delay_s * 1e6)),
                    preferred_batch_size=list(m.preferred_batch_sizes) or None)
                triton.bind(model_name=m.name, infer_func=_infer_function(m, log),
                            inputs=[Tensor(name="x", dtype=np.float32, shape=(m.n_features,))],
                            outputs=[Tensor(name="y", dtype=np.float32, shape=(m.n_outputs,))],
                            config=ModelConfig(max_batch_size=m.max_batch, batcher=batcher))
            triton.run()
        yield Server(f"{HOST}:{grpc}", f"{HOST}:{http}", log, {m.name: m for m in models},
                     triton)
    finally:
        triton.stop()


# --- an open-loop Poisson client ------------------------------------------------------------

def poisson_load(server: Server, rates: Mapping[str, float], n: int, inputs, *, seed=0,
                 max_s=30.0, warmup=8):
    """Send `n` requests as one Poisson stream of sum(rates) requests/s, each to model
    `name` with probability rates[name] / sum(rates), at its arrival time and without
    waiting for earlier answers (open loop). Request i sends row i of `inputs`
    ([n_rows, n_features], reused cyclically). Stops sending after `max_s` seconds and
    waits at most `max_s` more for answers. `warmup` requests per model go first,
    one at a time, and are not recorded (nor are their batches).

    Returns one row per request: `model`, `arrival` (scheduled, s from the first),
    `sent`, `finish` (nan if no answer), `latency` = finish - arrival (s), `ok`.
    """
    import pandas as pd
    import tritonclient.grpc as grpcclient

    _v.ensure(isinstance(server, Server), "server must be what serve() yields", TypeError)
    n = _v.count("n", n, maximum=100_000, why_maximum="a lab's load stays small")
    _v.positive("max_s", max_s)
    _v.ensure(isinstance(rates, Mapping) and rates, "rates must be {model name: requests/s}",
              TypeError)
    for name, rate in rates.items():
        _v.choice("model", name, list(server.models))
        _v.positive(f"rates[{name!r}]", rate)
    x = np.ascontiguousarray(np.asarray(inputs, dtype=np.float32))
    _v.ensure(x.ndim == 2 and len(x) > 0, f"inputs must be [rows, n_features], got shape "
              f"{x.shape}")
    names = list(rates)
    total = float(sum(rates.values()))
    arrivals = _batching.poisson_arrivals(total, n, seed)
    probs = np.array([rates[k] for k in names]) / total
    which = np.random.default_rng(seed + 1).choice(len(names), size=n, p=probs)

    def request(name, row):
        inp = grpcclient.InferInput("x", [1, x.shape[1]], "FP32")
        inp.set_data_from_numpy(row[None, :])
        return [inp]

    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        for name in names:
            for i in range(warmup):
                client.infer(name, request(name, x[i % len(x)]))
        server.log.clear()
        sent = np.full(n, np.nan)
        finish = np.full(n, np.nan)
        ok = np.zeros(n, dtype=bool)
        done = threading.Semaphore(0)

        def callback(i, result, error):
            finish[i] = time.perf_counter()
            ok[i] = error is None
            done.release()

        t0 = time.perf_counter()
        issued = 0
        for i in range(n):
            wait = t0 + arrivals[i] - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            now = time.perf_counter()
            if now - t0 > max_s:
                break
            sent[i] = now
            client.async_infer(names[which[i]], request(names[which[i]], x[i % len(x)]),
                               callback=lambda result, error, i=i: callback(i, result, error))
            issued += 1
        deadline = time.perf_counter() + max_s
        for _ in range(issued):
            if not done.acquire(timeout=max(0.0, deadline - time.perf_counter())):
                break
    finally:
        client.close()
    df = pd.DataFrame({"model": [names[k] for k in which], "arrival": arrivals,
                       "sent": sent - t0, "finish": finish - t0, "ok": ok})
    df["latency"] = df["finish"] - df["arrival"]
    df.attrs["t0"] = t0
    return df


def summarize(requests, batches, model=None) -> dict:
    """The measured run in `batching.summarize`'s keys: latency percentiles (s) over the
    answered requests, throughput (answered requests/s, first arrival to last answer),
    `mean_batch` (the batch the average request rode in: sum(size^2) / sum(size)),
    `mean_batch_per_batch`, `busy_fraction` (time inside the model / span), and
    `answered` / `requests`. `model` restricts both tables to one model."""
    if model is not None:
        requests = requests[requests["model"] == model]
        batches = batches[batches["model"] == model]
    _v.ensure(len(requests) > 0, "requests is empty: nothing was sent")
    done = requests[requests["ok"]]
    _v.ensure(len(done) > 0, "no request was answered: is the server up?")
    span = float(done["finish"].max() - requests["arrival"].min())
    lat = done["latency"].to_numpy()
    p50, p95, p99 = np.percentile(lat, [50, 95, 99])
    sizes = batches["batch_size"].to_numpy(dtype=float)
    t0 = requests.attrs.get("t0", 0.0)
    inside = batches[(batches["start"] - t0 >= requests["arrival"].min() - 1e-3)]
    return {"requests": int(len(requests)), "answered": int(len(done)),
            "p50_s": float(p50), "p95_s": float(p95), "p99_s": float(p99),
            "mean_latency_s": float(lat.mean()),
            "throughput_per_s": len(done) / span if span > 0 else math.nan,
            "mean_batch": float((sizes**2).sum() / sizes.sum()) if sizes.size else math.nan,
            "mean_batch_per_batch": float(sizes.mean()) if sizes.size else math.nan,
            "busy_fraction": float(inside["seconds"].sum() / span) if span > 0 else math.nan}


def simulate_like(requests, service_s, server_models: Mapping[str, ServedModel]) -> dict:
    """`batching.simulate` (one model) or `batching.simulate_shared` (several) fed the
    arrivals the client really scheduled, each model with its own `max_batch`,
    `max_queue_delay_s` and preferred sizes, and `service_s` (seconds, a callable or a
    {batch: seconds} table, the same for every model); `batching.summarize` of the result."""
    names = list(dict.fromkeys(requests["model"]))
    kwargs = {}
    for name in names:
        m = server_models[_v.choice("model", name, list(server_models))]
        kwargs[name] = dict(arrivals=requests.loc[requests["model"] == name, "arrival"].to_numpy(),
                            service_s=service_s, max_batch=m.max_batch,
                            max_queue_delay=m.max_queue_delay_s,
                            preferred_batch_sizes=list(m.preferred_batch_sizes) or None)
    if len(names) == 1:
        return _batching.summarize(_batching.simulate(**kwargs[names[0]]))
    return _batching.summarize(_batching.simulate_shared(kwargs))


def service_times(module, batches: Sequence[int], n_features: int, *, min_run_s=None):
    """Seconds the torch `module` takes per batch size, timed with `bench.time_fn` on the
    module's device (what the inference function runs, without the copies in and out):
    a DataFrame `batch`, `seconds` (the median), `iqr_s` (their interquartile range),
    ready for `batching.service_table`."""
    import pandas as pd

    from gpuinfer.measure import bench as _bench

    params = list(getattr(module, "parameters", lambda: [])())
    device = params[0].device if params else torch.device("cpu")
    rows = []
    for b in batches:
        b = _v.count("batch", b, maximum=65536)
        x = torch.randn(b, _v.count("n_features", n_features), device=device)  # [batch, n_features]
        with torch.inference_mode():
            t = _bench.time_fn(lambda x=x: module(x), device=device, min_run_s=min_run_s)
        rows.append({"batch": b, "seconds": t.median_s, "iqr_s": t.iqr_s})
    return pd.DataFrame(rows)


if __name__ == "__main__":  # `python -m gpuinfer.measure.triton_server`: the Makefile's check
    result = python_backend_check()
    if result["ok"]:
        print(f"Triton's Python stub will load {result['libpython']} "
              f"(Python {result['python']}): the same build as {result['executable']}")
    else:
        print(result["fix"], file=sys.stderr)
    sys.exit(0 if result["ok"] else 1)
