"""The simulator on a CPU host: predicted sync and async step times of a CPU recipe.

Why: the cluster simulator (simulator.py) cannot be checked against a cluster we do not have;
this twin uses the same three rules (the engine as built, the weight sync as built, the overlap
as built) with the constants of the machine it runs on, so its step times can be checked
against what `llamarl bench sync-vs-async` measures on that machine (docs/SIMULATOR.md,
section "Tested on this CPU").

Measured constants (`CpuMeasured`, from `bench/cpu_constants.py` at the start of the bench):
FLOP/s of one thread at the recipe's decode shape (a matmul) and of a forward + backward of the
recipe's model on one micro-batch, each beside its twin on the other core (sync), beside the
other kernel (async) and alone; memcpy and gloo bytes/s. Fitted constants (`CpuFitted`, four,
with their sensitivity in docs/SIMULATOR.md): the fractions of those rates the engine's decode
and a training step reach, the engine's host cost per layer per decode step, and a fixed cost
per step.
The workload (mean prompt and completion lengths, the longest completion of a chunk, the share
of rows the async trainer trains) is an input, taken from the samples the runs generated.

    sync  (k = 0, the colocated actor on every rank; ranks = generator + trainer devices):
          step = gen(rows / ranks) + train(rows / ranks) + gradient all-reduce + c0
    async (k >= 1, generator and trainer on their own cores, overlapping):
          step = max(gen(rows), train(trained rows) + weight sync) + c0
Both cores are busy in sync (the two actor ranks run the same phase); in async each role runs
at its rate beside the other until the faster finishes, and the slower one then at its alone rate.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from llamarl_core.models.args import ModelArgs
from llamarl_core.sim.ddma_bytes import link_bytes
from llamarl_core.sim.model import chunk_decode_steps, matmul_params


@dataclass(frozen=True)
class CpuMeasured:
    # One thread each. decode: [batch, dim] x [dim, ffn]; train: the model's forward + backward on
    # a micro-batch. Sync pairs each with its twin on the other core, async with the other role.
    decode_flops_per_s: float  # beside a decode (sync)
    train_flops_per_s: float  # beside a training step (sync)
    decode_beside_train_flops_per_s: float  # async
    train_beside_decode_flops_per_s: float  # async
    decode_alone_speedup: float  # alone / beside a training step (>= 1)
    train_alone_speedup: float  # alone / beside a decode (>= 1)
    memcpy_bytes_per_s: float
    gloo_bytes_per_s: float  # point to point between two processes of this host
    allreduce_bytes_per_s: float  # bytes all-reduced over two gloo ranks per second

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class CpuFitted:
    """Fitted once on a calibration run (benchmarks/results/sync_vs_async_cpu_calibration.json,
    `bench/sim_cpu.py fit_efficiencies`; docs/SIMULATOR.md, "Tested on this CPU"), then held."""
    # Engine FLOP/s / matmul FLOP/s at the decode shape: attention over the KV cache, norms,
    # RoPE, sampling over the vocabulary and cache writes cost time the matmuls do not.
    decode_matmul_efficiency: float = 0.4380
    # Host cost of one transformer layer per decode step (the part that does not grow with
    # the batch: Python, op dispatch); from the engine alone at batch 32..256.
    decode_layer_overhead_s: float = 0.17e-3
    # Training step FLOP/s / a bare forward + backward's at the micro-batch shape: the head run
    # again for its gradient (chunked log-probs), the AIPO loss, the batch's host-side
    # preparation, the optimizer step.
    train_step_efficiency: float = 0.9723
    # Per step: reward round trip, store traffic, logging, the engine's refresh.
    step_overhead_s: float = 0.05

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class CpuWorkload:
    rows: int  # samples per step = prompts_per_step x group_size
    prompt_tokens: float  # mean
    new_tokens: float  # mean completion length
    longest_new_tokens: float  # the longest completion of a chunk (mean over chunks)
    async_trained_fraction: float = 1.0  # rows the one-rank trainer does not skip (advantage != 0)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class CpuSystem:
    """What the recipe configures (the same for both modes, only k differs)."""
    model: ModelArgs
    max_batch_size: int
    micro_batch_size: int
    batching: str  # "continuous" | "static"
    sync_ranks: int  # actor ranks in sync mode (= generator + trainer devices)
    param_bytes: int  # trainer and generator dtype bytes (float32: 4)
    weight_transport: str  # "shm" (one memcpy) | "collective" (gloo)
    streaming: bool = False  # async as built (executors/stream.py): the generator pays no tail


def generation_seconds(s: CpuSystem, w: CpuWorkload, f: CpuFitted, rows: int, flops_per_s: float) -> dict:
    """One replica generating `rows` samples on one thread at a decode rate `flops_per_s`."""
    nm, m = matmul_params(s.model), s.model
    ctx = w.prompt_tokens + w.new_tokens / 2
    flops = rows * (w.prompt_tokens * 2 * nm
                    + w.new_tokens * (2 * nm + 4 * m.n_layers * m.dim * ctx))
    steps = chunk_decode_steps(rows, s.max_batch_size, w.new_tokens,
                               w.longest_new_tokens / w.new_tokens, s.batching)
    compute_s = flops / (flops_per_s * f.decode_matmul_efficiency)
    overhead_s = steps * m.n_layers * f.decode_layer_overhead_s
    return {"seconds": compute_s + overhead_s, "compute_s": compute_s, "overhead_s": overhead_s,
            "decode_steps": steps, "flops": flops}


def train_flops(m: ModelArgs, rows: float, seq: float) -> float:
    """Forward + backward FLOPs of `rows` rows of `seq` tokens: 6 per matmul parameter per token,
    and the attention scores and values, 6 L d seq per token."""
    return rows * seq * (6 * matmul_params(m) + 6 * m.n_layers * m.dim * seq)


def training_seconds(s: CpuSystem, w: CpuWorkload, f: CpuFitted, rows: float, flops_per_s: float) -> dict:
    """One trainer rank's forward + backward + optimizer over `rows` rows, each padded to the
    micro-batch's longest (prompt + longest completion), at a training rate `flops_per_s`."""
    flops = train_flops(s.model, rows, w.prompt_tokens + w.longest_new_tokens)
    return {"seconds": flops / (flops_per_s * f.train_step_efficiency), "flops": flops}


def weight_sync_seconds(s: CpuSystem, c: CpuMeasured) -> dict:
    """DDMA from one trainer rank to one generator rank: shm is one copy into the generator's
    staging slot (memcpy), collective is one gloo send."""
    b = link_bytes(s.model, trainer_ranks=1, generator_ranks=1, tp=1, bytes_per_elem=s.param_bytes)
    rate = c.memcpy_bytes_per_s if s.weight_transport == "shm" else c.gloo_bytes_per_s
    return {"seconds": max(b["send_max"], b["recv_max"]) / rate, "bytes": b["send_max"]}


def simulate_sync(s: CpuSystem, w: CpuWorkload, c: CpuMeasured, f: CpuFitted) -> dict:
    per_rank = w.rows / s.sync_ranks
    gen = generation_seconds(s, w, f, math.ceil(per_rank), c.decode_flops_per_s)
    train = training_seconds(s, w, f, per_rank, c.train_flops_per_s)
    # DDP's all-reduce of the gradients over gloo, measured as such (a ring from the point-to-
    # point rate, 2(n-1)/n of the bytes, came out a third of it: gloo's reduction and latency)
    allreduce_s = s.model.num_params() * s.param_bytes / c.allreduce_bytes_per_s
    step = gen["seconds"] + train["seconds"] + allreduce_s + f.step_overhead_s
    return {"step_s": step, "generation_s": gen["seconds"], "training_s": train["seconds"],
            "allreduce_s": allreduce_s, "weight_sync_s": 0.0, "overhead_s": f.step_overhead_s,
            "decode_steps": gen["decode_steps"], "layers": s.model.n_layers, "rows_per_rank": per_rank}


def simulate_async(s: CpuSystem, w: CpuWorkload, c: CpuMeasured, f: CpuFitted) -> dict:
    if s.streaming and s.batching == "continuous":
        s = replace(s, batching="streaming")
    gen_busy = generation_seconds(s, w, f, w.rows, c.decode_beside_train_flops_per_s)["seconds"]
    train_busy = training_seconds(s, w, f, w.rows * w.async_trained_fraction,
                                  c.train_beside_decode_flops_per_s)["seconds"]
    # Both roles compute at their beside-each-other rates until the faster one is done; the
    # slower one's remaining work then runs at its alone rate.
    if train_busy >= gen_busy:
        gen_s, train_s = gen_busy, gen_busy + (train_busy - gen_busy) / c.train_alone_speedup
    else:
        gen_s, train_s = train_busy + (gen_busy - train_busy) / c.decode_alone_speedup, train_busy
    sync = weight_sync_seconds(s, c)
    step = max(gen_s, train_s + sync["seconds"]) + f.step_overhead_s
    return {"step_s": step, "generation_s": gen_s, "training_s": train_s,
            "weight_sync_s": sync["seconds"], "weight_sync_bytes": sync["bytes"],
            "overhead_s": f.step_overhead_s, "bottleneck": "trainer" if train_s + sync["seconds"] >= gen_s
            else "generator"}


def simulate_cpu(s: CpuSystem, w: CpuWorkload, c: CpuMeasured, f: CpuFitted = CpuFitted()) -> dict:
    sync, asyn = simulate_sync(s, w, c, f), simulate_async(s, w, c, f)
    return {"sync": sync, "async": asyn, "speedup": sync["step_s"] / asyn["step_s"],
            "weight_sync_s": asyn["weight_sync_s"], "measured_constants": c.to_dict(),
            "fitted_constants": f.to_dict(), "workload": w.to_dict()}
