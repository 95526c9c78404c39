"""This CPU's own constants for the simulator's CPU twin (sim/cpu.py), measured in a few seconds.

Two processes of one torch thread each, as the recipes run their roles:
  * decode FLOP/s of rank 0: a matmul at the recipe's decode shape ([batch, dim] x [dim, ffn],
    through the engine's own projection kernel);
  * training FLOP/s of rank 0: a forward and backward of the recipe's model (its logits, a
    log-softmax, a sum) on one micro-batch at the planned shape, FLOPs counted by
    `sim.cpu.train_flops`. A bare matmul at the training shape stood here before; the share of
    a training step that is not matmuls (norms, attention, the head's softmax, elementwise
    backward) differs between CPUs, so an efficiency fitted against a matmul on one machine
    did not hold on the next;
  each while rank 1 runs the same kernel (sync: both actor ranks run one phase), while rank 1
  runs the other one (async: generator beside trainer; a training step slows a neighbour more
  than a decode matmul does), and alone (the slower async role once the faster is done);
  * memcpy bytes/s of a tensor the size of the model's weights (rank 0, rank 1 idle);
  * gloo bytes/s of one point-to-point send of that many bytes, rank 0 -> rank 1, and of an
    all-reduce of them over the two ranks (a ring's two passes and gloo's reduction included).
Each rate is the best of a few timed repeats (noise on a shared machine only slows things).
"""
from __future__ import annotations

import os
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from llamarl_core.transport.control import free_port

MATMUL_SECONDS = 0.4  # per shape and condition
TRAIN_SECONDS = 1.2  # per condition: a 16-row micro-batch's forward and backward takes ~0.1 s


def _decode_kernel(m: int, k: int, n: int):
    """y = x @ W^T, [m, k] x [k, n], through the generation engine's own projection
    (generation/fused.py `Proj`: the kernel cpu_gemm.py picks for the shape, MKL or oneDNN)."""
    from llamarl_core.generation.fused import Proj

    x, proj = torch.randn(m, k), Proj(torch.randn(n, k))

    def run() -> None:
        with torch.inference_mode():
            proj(x)
    return run, 2 * m * k * n


def _train_kernel(model_args, rows: int, seq: int):
    """A forward and backward of a model of `model_args` on [rows, seq] random tokens (its logits,
    a log-softmax, a sum): the training step's kernels without its host side. FLOPs as
    `sim.cpu.train_flops` counts them, over the seq - 1 positions the model runs."""
    from llamarl_core.models.llama import Llama
    from llamarl_core.sim.cpu import train_flops

    torch.manual_seed(0)
    model = Llama(model_args)
    x = torch.randint(0, model_args.vocab_size, (rows, seq))

    def run() -> None:
        logits = model(x[:, :-1])
        torch.log_softmax(logits, -1).gather(-1, x[:, 1:, None]).sum().backward()
    return run, train_flops(model_args, rows, seq - 1)


def _best_rate(kernel, seconds: float) -> float:
    """FLOP/s of `kernel` (run, flops per run): the best window of `seconds` / 4 (at least one run
    each) while `seconds` pass, after two runs to warm up."""
    run, flops = kernel
    for _ in range(2):
        run()
    best, t_end = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        t0, reps = time.perf_counter(), 0
        while reps == 0 or time.perf_counter() - t0 < seconds / 4:
            run()
            reps += 1
        best = max(best, flops * reps / (time.perf_counter() - t0))
    return best


def _run_until(kernel, flag: str) -> None:
    """Run `kernel` until rank 0 creates the file `flag` (rank 1's side of a paired measurement;
    a file, since a gloo receive does not report completion until waited on)."""
    run, _ = kernel
    while not os.path.exists(flag):
        run()


def _copy_rate(nbytes: int, repeats: int = 5) -> float:
    src, dst = torch.ones(nbytes, dtype=torch.uint8), torch.empty(nbytes, dtype=torch.uint8)
    dst.copy_(src)
    best = min(_timed(lambda: dst.copy_(src)) for _ in range(repeats))
    return nbytes / best


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _worker(rank: int, port: int, shapes: dict, seconds: dict, model_args, nbytes: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    kernels = {"decode": _decode_kernel(*shapes["decode"]), "train": _train_kernel(model_args, *shapes["train"])}
    result = {}
    # Rank 0 measures `mine` while rank 1 runs `other` until told, so rank 0 is never measured
    # alone: sync pairs a role with its twin (both actor ranks run the same phase), async the
    # generator with the trainer.
    for mine, other in (("decode", "decode"), ("train", "train"), ("decode", "train"), ("train", "decode")):
        flag = f"{out}.{mine}_beside_{other}.done"
        dist.barrier()
        if rank == 0:
            result[f"{mine}_beside_{other}"] = _best_rate(kernels[mine], seconds[mine])
            open(flag, "w").close()
        else:
            _run_until(kernels[other], flag)
    dist.barrier()
    if rank == 0:  # alone: rank 1 sleeps in the barrier below (a socket read), rank 0 has the host
        for kind in ("decode", "train"):
            result[f"{kind}_alone"] = _best_rate(kernels[kind], seconds[kind])
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
    times = []
    for _ in range(5):  # what a data-parallel step does with its gradients
        dist.barrier()
        times.append(_timed(lambda: dist.all_reduce(buf)))
    result["allreduce"] = buf.numel() * 4 / min(times)
    if rank == 0:
        torch.save(result, out)
    dist.destroy_process_group()


def measure_cpu_constants(*, model_args, decode_rows: int, train_rows: int, train_seq: int,
                          weight_bytes: int, seconds: dict | None = None) -> dict:
    """The fields of `sim.cpu.CpuMeasured`, plus `shapes`, `weight_bytes` and `seconds`.
    Shapes: decode [decode_rows, dim] x [dim, ffn]; train a [train_rows, train_seq] micro-batch."""
    shapes = {"decode": (decode_rows, model_args.dim, model_args.ffn_dim), "train": (train_rows, train_seq)}
    seconds = seconds or {"decode": MATMUL_SECONDS, "train": TRAIN_SECONDS}  # per kernel and condition
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="llamarl-cpu-constants-") as d:
        out = os.path.join(d, "constants.pt")
        mp.start_processes(_worker, args=(free_port("127.0.0.1"), shapes, seconds, model_args, int(weight_bytes), out), nprocs=2,
                           start_method="spawn", join=True)
        r = torch.load(out, weights_only=True)  # a dict of floats it wrote itself
    return {"decode_flops_per_s": r["decode_beside_decode"], "train_flops_per_s": r["train_beside_train"],
            "decode_beside_train_flops_per_s": r["decode_beside_train"],
            "train_beside_decode_flops_per_s": r["train_beside_decode"],
            "decode_alone_speedup": max(1.0, r["decode_alone"] / r["decode_beside_train"]),
            "train_alone_speedup": max(1.0, r["train_alone"] / r["train_beside_decode"]),
            "memcpy_bytes_per_s": r["memcpy"], "gloo_bytes_per_s": r["gloo"],
            "allreduce_bytes_per_s": r["allreduce"],
            "shapes": {k: list(v) for k, v in shapes.items()}, "weight_bytes": int(weight_bytes),
            "seconds": time.perf_counter() - t0}
