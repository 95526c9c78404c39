"""This CPU's own constants for the simulator's CPU twin (sim/cpu.py), measured in a few seconds.

Two processes of one torch thread each, as the recipes run their roles:
  * matmul FLOP/s of rank 0 at the recipe's decode shape ([batch, dim] x [dim, ffn], through the
    engine's own projection kernel) while rank 1 runs the same matmul (both cores busy, as in a
    run);
  * training FLOP/s of rank 0: a forward and backward of the recipe's model (its logits, a
    log-softmax, a sum) on one micro-batch at the planned shape, FLOPs counted by
    `sim.cpu.train_flops`, while rank 1 runs the same, and with rank 1 idle (`alone_speedup`).
    A bare matmul at the training shape stood here before; the share of a training step that
    is not matmuls (norms, attention, the head's softmax, elementwise backward) differs between
    CPUs, so an efficiency fitted against a matmul on one machine did not hold on the next;
  * memcpy bytes/s of a tensor the size of the model's weights (rank 0, rank 1 idle);
  * gloo bytes/s of one point-to-point send of that many bytes, rank 0 -> rank 1.
Each rate is the best of a few timed repeats (noise on a shared machine only slows things).
"""
from __future__ import annotations

import os
import socket
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

MATMUL_SECONDS = 0.4  # per shape and condition
TRAIN_SECONDS = 1.2  # per condition: a micro-batch's forward and backward takes ~0.1-0.5 s


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _matmul_rate(m: int, k: int, n: int, engine: bool = False, seconds: float = MATMUL_SECONDS) -> float:
    """FLOP/s of y = x @ W^T, [m, k] x [k, n]: with `engine`, through the generation engine's own
    projection (generation/fused.py `Proj`: the kernel cpu_gemm.py picks for the shape, MKL or oneDNN); else `F.linear`,
    what a training step's forward runs."""
    from llamarl_core.generation.fused import Proj

    x, w = torch.randn(m, k), torch.randn(n, k)
    run = Proj(w) if engine else (lambda a: a @ w.T)
    with torch.inference_mode():
        for _ in range(3):
            run(x)
        best, t_end = 0.0, time.perf_counter() + seconds
        while time.perf_counter() < t_end:
            t0, reps = time.perf_counter(), 0
            while time.perf_counter() - t0 < seconds / 4:
                run(x)
                reps += 1
            best = max(best, 2 * m * k * n * reps / (time.perf_counter() - t0))
    return best


def _train_rate(model_args, rows: int, seq: int, seconds: float = TRAIN_SECONDS) -> float:
    """FLOP/s (as `sim.cpu.train_flops` counts them) of a forward and backward of a model of
    `model_args` on [rows, seq] random tokens: the training step's kernels without its host side."""
    from llamarl_core.models.llama import Llama
    from llamarl_core.sim.cpu import train_flops

    torch.manual_seed(0)
    model = Llama(model_args)
    x = torch.randint(0, model_args.vocab_size, (rows, seq))

    def step() -> None:
        logits = model(x[:, :-1])
        torch.log_softmax(logits, -1).gather(-1, x[:, 1:, None]).sum().backward()

    step()
    best, t_end = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        best = max(best, 1 / _timed(step))
    return best * train_flops(model_args, rows, seq - 1)  # the model runs seq - 1 positions


def _copy_rate(nbytes: int, repeats: int = 5) -> float:
    src, dst = torch.ones(nbytes, dtype=torch.uint8), torch.empty(nbytes, dtype=torch.uint8)
    dst.copy_(src)
    best = min(_timed(lambda: dst.copy_(src)) for _ in range(repeats))
    return nbytes / best


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _worker(rank: int, port: int, shapes: dict, model_args, nbytes: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    result = {}
    dist.barrier()  # both busy: the rates each role sees in a run
    result["decode_busy"] = _matmul_rate(*shapes["decode"], engine=True)
    dist.barrier()
    result["train_busy"] = _train_rate(model_args, *shapes["train"])
    dist.barrier()
    if rank == 0:  # alone: rank 1 sleeps in the barrier below (a socket read), rank 0 has the host
        result["train_alone"] = _train_rate(model_args, *shapes["train"])
        result["memcpy"] = _copy_rate(nbytes)
    dist.barrier()
    buf = torch.ones(nbytes // 4, dtype=torch.float32)
    times = []
    for _ in range(5):
        dist.barrier()
        t0 = time.perf_counter()
        if rank == 0:
            dist.send(buf, 1)
        else:
            dist.recv(buf, 0)
        dist.barrier()  # the send completes when the receiver has the bytes
        times.append(time.perf_counter() - t0)
    result["gloo"] = buf.numel() * 4 / min(times)
    if rank == 0:
        torch.save(result, out)
    dist.destroy_process_group()


def measure_cpu_constants(*, model_args, decode_rows: int, train_rows: int, train_seq: int,
                          weight_bytes: int) -> dict:
    """{decode_flops_per_s, train_flops_per_s, alone_speedup, memcpy_bytes_per_s,
    gloo_bytes_per_s, shapes, seconds} (the names of `sim.cpu.CpuMeasured`, plus detail).
    Shapes: decode [decode_rows, dim] x [dim, ffn]; train a [train_rows, train_seq] micro-batch."""
    shapes = {"decode": (decode_rows, model_args.dim, model_args.ffn_dim), "train": (train_rows, train_seq)}
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="llamarl-cpu-constants-") as d:
        out = os.path.join(d, "constants.pt")
        mp.start_processes(_worker, args=(_free_port(), shapes, model_args, int(weight_bytes), out), nprocs=2,
                           start_method="spawn", join=True)
        r = torch.load(out, weights_only=True)  # a dict of floats it wrote itself
    return {"decode_flops_per_s": r["decode_busy"], "train_flops_per_s": r["train_busy"],
            "alone_speedup": max(1.0, r["train_alone"] / r["train_busy"]),
            "memcpy_bytes_per_s": r["memcpy"], "gloo_bytes_per_s": r["gloo"],
            "shapes": {k: list(v) for k, v in shapes.items()}, "weight_bytes": int(weight_bytes),
            "seconds": time.perf_counter() - t0}
