"""The weight-sync section of `scripts/gpu_check.py`: DDMA between two processes, each transport
against a device-to-device `copy_` of the same bytes in one process (the ceiling).

    CUDA: cuda_ipc (trainer and generator on one GPU) and, with 2+ GPUs, NCCL (collective)
    CPU:  shm and gloo (collective)

Rank 0 is the trainer, rank 1 the generator, through the endpoints a run builds
(transport/ddma.py). The time of a version is the generator's: from a store barrier both
pass until `receive()` has adopted it (woken by its arrival, no poll sleep), its stream synced.

    python -m llamarl_core.bench.gpu_sync DEVICE TRANSPORTS PORT SIZE_MB REPEATS RANK OUT   # one worker
"""
from __future__ import annotations

import datetime
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from llamarl_core.bench.gpu_sections import judge
from llamarl_core.transport.control import free_port

# gbps / copy_gbps each transport must reach (a floor: far below it, something serialises)
MIN_OVER_COPY = {"cuda_ipc": 0.2, "nccl": 0.1, "shm": 0.2, "gloo": 0.03}  # CPU: measured 0.69, 0.15 (16 MiB)
TENSOR_MB = 64  # tensors of up to 64 MiB, like a model's layers


def _copy_gbps(tensors: list[torch.Tensor], device: str, repeats: int) -> float:
    """Device-to-device `copy_` of the same bytes (the best of `repeats`)."""
    dst = [torch.empty_like(t) for t in tensors]
    best = math.inf
    for _ in range(repeats + 1):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for d, t in zip(dst, tensors):
            d.copy_(t)
        if device == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return sum(t.numel() * t.element_size() for t in tensors) / best / 1e9


def _measure(store, device: str, transport: str, epoch: int, size_mb: int, repeats: int, rank: int) -> dict:
    """One transport between the two workers (its own `xfer/{epoch}` keys)."""
    from llamarl_core.transport.ddma import DdmaReceiver, DdmaSender
    from llamarl_core.transport.ddma_plan import build_plan

    dev = "cpu"
    if device == "cuda":  # NCCL refuses two ranks on one GPU; CUDA IPC is for exactly that
        dev = f"cuda:{rank if transport == 'collective' else 0}"
        torch.cuda.set_device(dev)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    elem = torch.empty((), dtype=dtype).element_size()
    tensor_mb = min(TENSOR_MB, size_mb)
    per, count = tensor_mb * 2**20 // elem, max(1, size_mb // tensor_mb)
    shapes = {f"w{i}": ((per,), dtype) for i in range(count)}
    plan = build_plan(shapes, trainer_ranks=1, generator_ranks=1, dtype=dtype)
    kw = dict(transport=transport, store=store, epoch=epoch, timeout_s=120.0, run_id=f"gpucheck{epoch}{store.port}")
    if rank == 0:
        state = {n: torch.full(s, float(i + 1), dtype=dtype, device=dev) for i, (n, (s, _)) in enumerate(shapes.items())}
        end = DdmaSender(plan, 0, device=dev, **kw)
    else:
        state = {n: torch.zeros(s, dtype=dtype, device=dev) for n, (s, _) in shapes.items()}
        end = DdmaReceiver(plan, 0, state, **kw)
    seconds = []
    for v in range(repeats + 1):  # the first is a warm-up
        store.set(f"{epoch}/go/{v}/{rank}", "1")
        store.wait([f"{epoch}/go/{v}/0", f"{epoch}/go/{v}/1"])
        t0 = time.perf_counter()
        if rank == 0:
            end.send(state, v)
        else:
            end.receive()
            if device == "cuda":  # this process's own stream only: the receiving thread's has the next
                torch.cuda.current_stream().synchronize()
        seconds.append(time.perf_counter() - t0)
        store.set(f"{epoch}/done-by-check/{v}/{rank}", "1")
        store.wait([f"{epoch}/done-by-check/{v}/0", f"{epoch}/done-by-check/{v}/1"])
    nbytes = sum(math.prod(s) * elem for s, _ in shapes.values())
    result = {"bytes": nbytes, "repeats": repeats, "best_seconds": round(min(seconds[1:]), 6)}
    if rank == 1:
        result["received_equal"] = all(bool((t == float(i + 1)).all()) for i, t in enumerate(state.values()))
        result["copy_gbps"] = round(_copy_gbps(list(state.values()), device, repeats), 3)
        result["gbps"] = round(nbytes / min(seconds[1:]) / 1e9, 3)
    store.set(f"{epoch}/closed/{rank}", "1")
    end.close()
    store.wait([f"{epoch}/closed/0", f"{epoch}/closed/1"])
    return result


def worker(device, transports, port, size_mb, repeats, rank, out) -> None:
    """Rank 0 (trainer) or 1 (generator): every transport of `transports` (comma-separated) in turn."""
    import torch.distributed as dist

    rank = int(rank)
    store = dist.TCPStore("127.0.0.1", int(port), 2, is_master=rank == 0, timeout=datetime.timedelta(seconds=120))
    results = {t: _measure(store, device, t, i, int(size_mb), int(repeats), rank)
               for i, t in enumerate(transports.split(","))}
    Path(out).write_text(json.dumps(results))
    store.set(f"exit/{rank}", "1")
    if rank == 0:
        store.wait(["exit/1"])  # the store's host outlives its client


def _pair(device: str, transports: list[str], size: dict, timeout_s: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        port, outs = free_port("127.0.0.1"), [os.path.join(tmp, f"r{r}.json") for r in (0, 1)]
        cmd = [sys.executable, "-m", "llamarl_core.bench.gpu_sync", device, ",".join(transports), str(port),
               str(size["sync_mb"]), str(size["sync_repeats"])]
        procs = [subprocess.Popen(cmd + [str(r), outs[r]]) for r in (0, 1)]
        try:
            codes = [p.wait(timeout=timeout_s) for p in procs]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        if any(codes):
            raise RuntimeError(f"weight-sync workers ({', '.join(transports)}) exited with {codes}")
        sender, receiver = (json.loads(Path(o).read_text()) for o in outs)
        for t, r in receiver.items():
            r["sender_seconds"] = sender[t]["best_seconds"]
            r["gbps_over_copy"] = round(r["gbps"] / max(r["copy_gbps"], 1e-9), 4)
        return receiver


def weight_sync(device: str, size: dict) -> dict:
    if device == "cuda":
        transports = {"cuda_ipc": "cuda_ipc"} | ({"nccl": "collective"} if torch.cuda.device_count() >= 2 else {})
    else:
        transports = {"shm": "shm", "gloo": "collective"}
    out: dict = {"bytes": size["sync_mb"] * 2**20}
    checks = {}
    measured = _pair(device, list(transports.values()), size, timeout_s=100)
    for name, transport in transports.items():
        r = out[name] = measured[transport]
        checks[f"{name}.received_equal"] = (r["received_equal"], "==", True)
        checks[f"{name}.gbps_over_copy"] = (r["gbps_over_copy"], ">=", MIN_OVER_COPY[name])
    if device == "cuda" and "nccl" not in transports:
        out["nccl"] = {"verdict": "skip", "reason": "one GPU visible: NCCL needs two"}
    return judge(out, checks)


if __name__ == "__main__":
    worker(*sys.argv[1:])
