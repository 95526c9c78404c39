"""First-principles pieces of the scale simulator: FLOPs, bytes, seconds.

Each function is one formula of docs/SIMULATOR.md, written so a test can check it by hand.
The simulator (`simulator.py`) only composes these; no function here knows about sync or
async. Sizes come from `ModelArgs`, peaks from `DeviceSpec`, efficiencies from
`SimConstants`; nothing is looked up from a table of answers.
"""
from __future__ import annotations

import math

from llamarl_core.sim.constants import GIB, SimConstants
from llamarl_core.models.args import ModelArgs
from llamarl_core.config.hardware import DeviceSpec


# ---- sizes -------------------------------------------------------------------------------
def matmul_params(model: ModelArgs) -> int:
    """Parameters that take part in a matmul per token: all but the input embedding table,
    which is a row lookup (when tied, the table is also the output head, so it counts)."""
    lookup = 0 if model.tie_embeddings else model.vocab_size * model.dim
    return model.num_params() - lookup


def train_flops_per_token(model: ModelArgs, seq_tokens: float) -> float:
    """Forward + backward FLOPs per trained token: 6 per matmul parameter, plus causal
    attention (QK^T and AV: 4*dim*ctx forward per layer, mean ctx = seq/2, x3 for backward)."""
    attention = 6.0 * model.n_layers * model.dim * seq_tokens
    return 6.0 * matmul_params(model) + attention


def decode_flops_per_token(model: ModelArgs, context_tokens: float) -> float:
    """Forward FLOPs of one generated token attending to `context_tokens` cached tokens."""
    return 2.0 * matmul_params(model) + 4.0 * model.n_layers * model.dim * context_tokens


def kv_bytes_per_token_per_device(model: ModelArgs, tp: int, bytes_per_elem: int) -> float:
    """KV heads are split over TP ranks; beyond n_kv_heads ranks they are replicated."""
    return model.kv_bytes_per_token(bytes_per_elem) / min(tp, model.n_kv_heads)


# ---- communication -----------------------------------------------------------------------
def link_bytes_per_s(device: DeviceSpec, span_devices: int, c: SimConstants) -> float:
    """Achievable per-device bandwidth of a group whose members span `span_devices`
    consecutive devices: NVLink if that fits in one node, else InfiniBand."""
    if span_devices <= device.devices_per_node:
        return device.nvlink_gbps * 1e9 * c.nvlink_efficiency
    return device.ib_gbps * 1e9 * c.ib_efficiency


def allreduce_seconds(nbytes: float, group_devices: int, device: DeviceSpec,
                      c: SimConstants, span_devices: int | None = None) -> float:
    """Ring all-reduce: 2(n-1) steps, each paying one hop latency (which dominates the
    small per-layer all-reduces of decode), moving 2(n-1)/n of the buffer per device. A ring
    that leaves the node runs at the pace of its InfiniBand hops."""
    n = group_devices
    if n <= 1:
        return 0.0
    span = span_devices or n
    hop_s = c.nvlink_hop_latency_s if span <= device.devices_per_node else c.ib_hop_latency_s
    return 2 * (n - 1) * hop_s + 2.0 * (n - 1) / n * nbytes / link_bytes_per_s(device, span, c)


def gather_seconds(total_bytes: float, group_devices: int, device: DeviceSpec,
                   c: SimConstants, span_devices: int | None = None) -> float:
    """All-gather (or reduce-scatter) of a buffer of `total_bytes`: each device moves
    (n-1)/n of it."""
    n = group_devices
    if n <= 1:
        return 0.0
    return (n - 1) / n * total_bytes / link_bytes_per_s(device, span_devices or n, c)


# ---- generation --------------------------------------------------------------------------
def decode_step_seconds(model: ModelArgs, device: DeviceSpec, c: SimConstants, tp: int,
                        batch: int, context_tokens: float, bytes_per_param: float) -> float:
    """One decode step of a TP group holding `batch` sequences: the slower of reading the
    weights + KV cache from HBM and doing the matmuls, plus two TP all-reduces per layer
    and the engine's per-layer host overhead."""
    weight_bytes = matmul_params(model) * bytes_per_param / tp
    kv_bytes = batch * context_tokens * kv_bytes_per_token_per_device(
        model, tp, c.kv_bytes_per_elem)
    memory_s = (weight_bytes + kv_bytes) / (device.hbm_gbps * 1e9 * c.decode_hbm_efficiency)
    flops = batch * decode_flops_per_token(model, context_tokens) / tp
    compute_s = flops / (device.bf16_tflops * 1e12 * c.decode_mfu)
    activation_bytes = batch * model.dim * c.train_bytes_per_param
    comm_s = 2 * model.n_layers * allreduce_seconds(activation_bytes, tp, device, c)
    return max(memory_s, compute_s) + comm_s + model.n_layers * c.decode_layer_overhead_s


def prefill_seconds(model: ModelArgs, device: DeviceSpec, c: SimConstants, tp: int,
                    prompt_tokens: float) -> float:
    """Compute-bound forward over all prompt tokens of one TP group."""
    flops = prompt_tokens * decode_flops_per_token(model, 0.0) / tp
    return flops / (device.bf16_tflops * 1e12 * c.prefill_mfu)


def kv_capacity_sequences(model: ModelArgs, device: DeviceSpec, c: SimConstants, tp: int,
                          resident_bytes_per_device: float, seq_tokens: float) -> int:
    """Sequences of `seq_tokens` whose KV cache fits beside what is already resident."""
    free = device.memory_gib * GIB - resident_bytes_per_device - c.reserved_gib * GIB
    per_seq = seq_tokens * kv_bytes_per_token_per_device(model, tp, c.kv_bytes_per_elem)
    return max(0, math.floor(free / per_seq))


def chunk_decode_steps(sequences: int, batch: int, new_tokens: float, tail_factor: float,
                       batching: str) -> float:
    """Decode steps one replica runs for a chunk of `sequences` samples, at most `batch` at a
    time, mean length `new_tokens`, longest `tail_factor` x the mean: the engine as built
    (generation/scheduler.py). Chunk by chunk (sync mode, or the what-if of an async chunked one), a
    chunk ends when its longest row ends, so it pays the tail.

    continuous: a finished row's slot is refilled at once, so the slots stay full for
        sequences x mean / batch steps, then the last rows drain: + (longest - mean). With
        every row in one batch that is just the longest row.
    static:     each batch of rows runs until its longest row ends.
    streaming:  async generators as built (executors/stream.py): the next
        chunk's prompts fill the slots this chunk's finished rows free, so in steady state no
        chunk pays a tail: sequences x mean / batch."""
    longest = new_tokens * tail_factor
    if batching == "static":
        return math.ceil(sequences / batch) * longest
    if batching == "streaming":
        return sequences * new_tokens / batch
    if batching != "continuous":
        raise ValueError(f"batching must be 'continuous' or 'static', got {batching!r}")
    return max(sequences / batch, 1.0) * new_tokens + (longest - new_tokens)


def generation_seconds(model: ModelArgs, device: DeviceSpec, c: SimConstants, *, tp: int,
                       replicas: int, sequences: int, prompt_tokens: float,
                       new_tokens: float, bytes_per_param: float, resident_bytes: float,
                       batching: str = "continuous", max_batch_size: int = 0) -> dict:
    """Time for `replicas` TP groups to generate `sequences` samples, one chunk each, at the
    largest batch the KV cache and the engine's slots (`max_batch_size`, 0 = no cap) hold; decode steps by `chunk_decode_steps` (every step priced
    at the full batch: decode is memory-bound, a thinner batch saves little)."""
    per_replica = math.ceil(sequences / replicas)
    max_new = new_tokens * c.max_to_mean_new_tokens
    capacity = kv_capacity_sequences(model, device, c, tp, resident_bytes,
                                     prompt_tokens + max_new)
    if capacity < 1:
        raise ValueError(
            f"no KV cache fits: {resident_bytes / GIB:.1f} GiB resident + "
            f"{c.reserved_gib} GiB reserved on a {device.memory_gib:.1f} GiB {device.name} "
            f"(tp={tp}); raise the TP degree or use fewer bytes per parameter")
    batch = min(per_replica, capacity, max_batch_size or capacity)
    steps = chunk_decode_steps(per_replica, batch, new_tokens, c.max_to_mean_new_tokens, batching)
    step_s = decode_step_seconds(model, device, c, tp, batch,
                                 prompt_tokens + new_tokens / 2, bytes_per_param)
    prefill_s = prefill_seconds(model, device, c, tp, per_replica * prompt_tokens)
    return {"seconds": prefill_s + steps * step_s, "batch_per_replica": batch,
            "kv_capacity_sequences": capacity, "sequences_per_replica": per_replica,
            "decode_steps": steps, "decode_step_s": step_s, "prefill_s": prefill_s}


# ---- training ----------------------------------------------------------------------------
def training_seconds(model: ModelArgs, device: DeviceSpec, c: SimConstants, *, devices: int,
                     fsdp: int, tp: int, tokens: float, seq_tokens: float) -> dict:
    """One optimizer step over `tokens` tokens on `devices` devices (dp x fsdp x tp).

    Compute at `train_mfu`; FSDP all-gathers weights twice (forward, backward) and
    reduce-scatters gradients once; HSDP replicas all-reduce the gradient shards; those are
    mostly hidden behind compute. TP all-reduces activations 4x per layer on the critical
    path (2 forward, 2 backward)."""
    dp = devices // (fsdp * tp)
    flops = tokens * train_flops_per_token(model, seq_tokens)
    compute_s = flops / (devices * device.bf16_tflops * 1e12 * c.train_mfu)
    weight_bytes_per_tp_rank = model.num_params() * c.train_bytes_per_param / tp
    fsdp_s = 3 * gather_seconds(weight_bytes_per_tp_rank, fsdp * tp, device, c)
    grad_shard_bytes = weight_bytes_per_tp_rank / fsdp
    dp_s = allreduce_seconds(grad_shard_bytes, dp, device, c, span_devices=devices)
    hidden_s = min(fsdp_s + dp_s, c.train_comm_overlap * compute_s)
    tokens_per_tp_group = tokens / (dp * fsdp)
    tp_bytes = tokens_per_tp_group * model.dim * c.train_bytes_per_param
    tp_s = 4 * model.n_layers * (allreduce_seconds(tp_bytes, tp, device, c)
                                 if tp > 1 else 0.0)
    seconds = compute_s + fsdp_s + dp_s - hidden_s + tp_s
    return {"seconds": seconds, "compute_s": compute_s, "fsdp_comm_s": fsdp_s,
            "dp_comm_s": dp_s, "tp_comm_s": tp_s, "flops": flops, "dp": dp}


def train_state_bytes_per_device(model: ModelArgs, c: SimConstants, fsdp: int,
                                 tp: int) -> float:
    """Weights, grads and Adam state, sharded over the fsdp x tp group."""
    return model.num_params() * c.train_state_bytes_per_param / (fsdp * tp)
