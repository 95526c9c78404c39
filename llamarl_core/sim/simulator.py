"""Scale simulator: predicted RL step time, synchronous (colocated) vs asynchronous (LlamaRL).

Why a simulator: the CPU bench can only show ~1.0-1.2x on 2 cores; the paper's claim is
about thousands of GPUs. This module predicts a step from first principles (sizes in
`ModelArgs`, datasheet peaks in `DeviceSpec`, one documented set of efficiencies in
`SimConstants`) and is calibrated against the paper's published step times
(arXiv 2505.24034, section 6). Formulas and constants: docs/SIMULATOR.md.

    async (LlamaRL, max_offpolicy_steps >= 1)     sync (DeepSpeed-Chat-like, colocated)
    generator GPUs: |gen|gen|gen|...               all GPUs: |reshard|gen...|train|reshard|...
    trainer GPUs:   |train|train|...               step = reshard + gen(wait longest) + train
    step = max(gen, train) + weight_sync

Sync mode runs both phases on ALL devices (generator_devices + trainer_devices), generates at
the trainer's TP layout in bf16 with the training state resident (less room for KV cache),
and must wait for the longest sample before it can train.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from llamarl_core.sim import model as m
from llamarl_core.sim.constants import DEFAULT_CONSTANTS, GIB, SimConstants
from llamarl_core.sim.ddma_bytes import link_bytes
from llamarl_core.models.args import ModelArgs
from llamarl_core.config.hardware import DeviceSpec
from llamarl_core.config.streaming import is_sync


@dataclass
class SimInputs:
    model: ModelArgs
    device: DeviceSpec
    # generator executor (async): devices, TP degree, bytes per weight (2 = bf16, 1 = fp8)
    generator_devices: int
    generator_tp: int
    generator_bytes_per_param: float
    # trainer executor (async): devices, FSDP (sharding) size, TP size; dp = devices/(fsdp*tp)
    trainer_devices: int
    trainer_fsdp: int
    trainer_tp: int
    prompts_per_step: int
    group_size: int
    prompt_tokens: int
    new_tokens: int  # mean generated tokens per sample
    max_offpolicy_steps: int = 1
    # generation.batching as the engine builds it (sim/model.py `chunk_decode_steps`)
    batching: str = "continuous"
    # bytes per weight on the weight-sync wire (the generators' dtype: 2 = bf16); with
    # `wire_fp8` the block linears travel as fp8 + a float32 scale per row instead
    wire_bytes_per_param: float = 2.0
    wire_fp8: bool = False
    # resources.generator.max_batch_size: the engine's slots (0 = as many as the KV cache holds)
    max_batch_size: int = 0
    # as built, async generators stream (executors/stream.py): they keep their slots
    # full across steps, so no chunk pays the long tail (sim/model.py, "streaming");
    # sync mode always generates chunk by chunk
    streaming: bool = False

    def __post_init__(self) -> None:
        for name in ("generator_devices", "generator_tp", "trainer_devices", "trainer_fsdp",
                     "trainer_tp", "prompts_per_step", "group_size", "prompt_tokens",
                     "new_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"SimInputs.{name} must be a positive integer, got {value!r}")
        if self.generator_bytes_per_param <= 0:
            raise ValueError("SimInputs.generator_bytes_per_param must be > 0, got "
                             f"{self.generator_bytes_per_param!r}")
        if self.max_offpolicy_steps < 0:
            raise ValueError("SimInputs.max_offpolicy_steps must be >= 0, got "
                             f"{self.max_offpolicy_steps!r}")
        if self.generator_devices % self.generator_tp:
            raise ValueError(f"SimInputs.generator_devices={self.generator_devices} is not a "
                             f"multiple of generator_tp={self.generator_tp}")
        shard = self.trainer_fsdp * self.trainer_tp
        if self.trainer_devices % shard:
            raise ValueError(f"SimInputs.trainer_devices={self.trainer_devices} is not a "
                             f"multiple of trainer_fsdp*trainer_tp={self.trainer_fsdp}*"
                             f"{self.trainer_tp}={shard}")
        if (self.generator_devices + self.trainer_devices) % shard:
            raise ValueError("SimInputs: generator_devices + trainer_devices = "
                             f"{self.generator_devices + self.trainer_devices} (the sync "
                             f"baseline's devices) is not a multiple of trainer_fsdp*"
                             f"trainer_tp={shard}")

    @property
    def sequences(self) -> int:
        return self.prompts_per_step * self.group_size

    @property
    def tokens_per_step(self) -> int:
        return self.sequences * (self.prompt_tokens + self.new_tokens)


def _sync_generation_tp(inp: SimInputs, c: SimConstants, devices: int) -> int:
    """The trainer's TP degree, doubled until bf16 weights + training state + one sample's
    KV cache fit beside each other (405B on 80 GB GPUs needs TP 16, i.e. across nodes)."""
    tp = inp.trainer_tp
    state = m.train_state_bytes_per_device(inp.model, c, inp.trainer_fsdp, inp.trainer_tp)
    seq = inp.prompt_tokens + inp.new_tokens * c.max_to_mean_new_tokens
    while tp <= devices:
        weights = inp.model.num_params() * c.train_bytes_per_param / tp
        if devices % tp == 0 and m.kv_capacity_sequences(
                inp.model, inp.device, c, tp, state + weights, seq) >= 1:
            return tp
        tp *= 2
    raise ValueError(f"sync baseline: {inp.model.num_params() / 1e9:.0f}B weights plus "
                     f"training state fit on no TP degree <= {devices} {inp.device.name}")


def simulate_sync(inp: SimInputs, c: SimConstants = DEFAULT_CONSTANTS) -> dict:
    devices = inp.generator_devices + inp.trainer_devices
    seq = inp.prompt_tokens + inp.new_tokens
    tp = _sync_generation_tp(inp, c, devices)
    state = m.train_state_bytes_per_device(inp.model, c, inp.trainer_fsdp, inp.trainer_tp)
    gen_weights = inp.model.num_params() * c.train_bytes_per_param / tp
    gen = m.generation_seconds(
        inp.model, inp.device, c, tp=tp, replicas=devices // tp, sequences=inp.sequences,
        prompt_tokens=inp.prompt_tokens, new_tokens=inp.new_tokens,
        bytes_per_param=c.train_bytes_per_param, resident_bytes=state + gen_weights,
        batching=inp.batching, max_batch_size=inp.max_batch_size)
    train = m.training_seconds(inp.model, inp.device, c, devices=devices,
                               fsdp=inp.trainer_fsdp, tp=inp.trainer_tp,
                               tokens=inp.tokens_per_step, seq_tokens=seq)
    # Hybrid-engine reshard: gather the FSDP shards into whole TP-layout weights.
    shard_group = inp.trainer_fsdp * inp.trainer_tp
    reshard_s = m.gather_seconds(gen_weights, inp.trainer_fsdp, inp.device, c,
                                 span_devices=shard_group)
    step_s = reshard_s + gen["seconds"] + train["seconds"] + c.step_overhead_s
    return _step(step_s, gen, train, state, c, devices=devices, gen_tp=tp, gen_replicas=devices // tp,
                 weight_sync_s=reshard_s, reshard_s=reshard_s)


def _step(step_s: float, gen: dict, train: dict, state_bytes: float, c: SimConstants, **mode) -> dict:
    """One mode's step, in the keys both modes report (`mode`: the keys of its own)."""
    return {"step_s": step_s, "generation_s": gen["seconds"], "training_s": train["seconds"],
            "overhead_s": c.step_overhead_s, "gen_batch_per_replica": gen["batch_per_replica"],
            "kv_capacity_sequences": gen["kv_capacity_sequences"],
            "decode_step_s": gen["decode_step_s"], "decode_steps": gen["decode_steps"],
            "train_state_gib_per_device": state_bytes / GIB, "train_detail": train, **mode}


def ddma_seconds(inp: SimInputs, c: SimConstants = DEFAULT_CONSTANTS) -> dict:
    """One DDMA weight sync as built: every trainer rank sends the rows it owns
    (`fsdp_rows` over its FSDP group; under HSDP each replica serves its share of the
    generator ranks) of every parameter to each generator rank whose TP
    slice holds them, in the wire dtype (an fp8 generator: block linears as fp8 + row scales) (sim/ddma_bytes.py counts the bytes of each link).
    Each GPU has its own NIC and the roles sit on different nodes, so a sync lasts as long as
    the busiest sender or receiver needs at InfiniBand pace, plus a fixed cost."""
    b = link_bytes(inp.model, trainer_ranks=inp.trainer_devices,
                   trainer_shards=inp.trainer_fsdp if inp.trainer_fsdp > 1 else 0,
                   generator_ranks=inp.generator_devices, tp=inp.generator_tp,
                   bytes_per_elem=inp.wire_bytes_per_param, fp8_blocks=inp.wire_fp8)
    ib = inp.device.ib_gbps * 1e9 * c.ib_efficiency
    return {"seconds": max(b["send_max"], b["recv_max"]) / ib + c.weight_sync_overhead_s,
            "send_bytes_max": b["send_max"], "recv_bytes_max": b["recv_max"],
            "total_bytes": b["total"], "wire_bytes_per_param": inp.wire_bytes_per_param,
            "wire_fp8": inp.wire_fp8}


def async_batching(inp: SimInputs) -> str:
    """The decode-step rule of the async generators: streaming when built so (k >= 1 and a
    continuous engine), else the engine's chunk rule."""
    if inp.streaming and not is_sync(inp) and inp.batching == "continuous":
        return "streaming"
    return inp.batching


def simulate_async(inp: SimInputs, c: SimConstants = DEFAULT_CONSTANTS) -> dict:
    seq = inp.prompt_tokens + inp.new_tokens
    n = inp.model.num_params()
    replicas = inp.generator_devices // inp.generator_tp
    gen_weights = n * inp.generator_bytes_per_param / inp.generator_tp
    gen = m.generation_seconds(
        inp.model, inp.device, c, tp=inp.generator_tp, replicas=replicas,
        sequences=inp.sequences, prompt_tokens=inp.prompt_tokens,
        new_tokens=inp.new_tokens, bytes_per_param=inp.generator_bytes_per_param,
        resident_bytes=gen_weights, batching=async_batching(inp), max_batch_size=inp.max_batch_size)
    state = m.train_state_bytes_per_device(inp.model, c, inp.trainer_fsdp, inp.trainer_tp)
    if state + c.reserved_gib * GIB > inp.device.memory_gib * GIB:
        raise ValueError(f"trainer: {state / GIB:.1f} GiB of training state per device + "
                         f"{c.reserved_gib} GiB reserved exceed {inp.device.memory_gib:.1f} "
                         f"GiB; raise trainer_fsdp or trainer_tp")
    train = m.training_seconds(inp.model, inp.device, c, devices=inp.trainer_devices,
                               fsdp=inp.trainer_fsdp, tp=inp.trainer_tp,
                               tokens=inp.tokens_per_step, seq_tokens=seq)
    sync = ddma_seconds(inp, c)
    sync_s = sync["seconds"]
    # The trainer sends version v+1 (blocking until its bytes are out) before it takes the
    # next batch; the generator receives into a staging slot and swaps between decode steps,
    # so only the trainer's side of a step carries the sync (executors/trainer.py,
    # executors/generator.py). Knob at 0: no overlap (the plan runs it as sync).
    if is_sync(inp):
        busy_s = gen["seconds"] + train["seconds"] + sync_s
    else:
        busy_s = max(gen["seconds"], train["seconds"] + sync_s)
    return _step(busy_s + c.step_overhead_s, gen, train, state, c,
                 devices=inp.generator_devices + inp.trainer_devices, gen_tp=inp.generator_tp,
                 gen_replicas=replicas, weight_sync_s=sync_s, weight_sync=sync)


def simulate(inp: SimInputs, constants: SimConstants = DEFAULT_CONSTANTS) -> dict:
    """Predict one RL step in both modes; JSON-able."""
    sync = simulate_sync(inp, constants)
    asyn = simulate_async(inp, constants)
    ideal = sync["step_s"] / max(asyn["generation_s"], asyn["training_s"])
    # The other async rule, priced beside the one built: chunk by chunk when streaming is on
    # (what the generator did before it streamed), streaming when it is off.
    other = replace(inp, streaming=not inp.streaming)
    alt = simulate_async(other, constants)
    return {"sync": sync, "async": asyn, "speedup": sync["step_s"] / asyn["step_s"],
            "ideal_speedup": ideal, "constants": constants.to_dict(),
            "async_batching": async_batching(inp),
            f"what_if_{'chunked' if inp.streaming else 'streaming_chunks'}": {
                "async_step_s": alt["step_s"], "async_generation_s": alt["generation_s"],
                "speedup": sync["step_s"] / alt["step_s"]},
            "inputs": {k: v for k, v in vars(inp).items() if k not in ("model", "device")}
            | {"device": inp.device.name, "params_b": inp.model.num_params() / 1e9}}
