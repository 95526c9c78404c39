"""Per-device memory estimates, in GiB, for each role. Pure arithmetic on sizes.

Every formula here is written out, with its assumptions, in docs/PLAN_MEMORY.md; a unit test
recomputes one recipe's numbers by hand. Symbols: N parameters, d model dim, f FFN dim, L
layers, V vocab, B sequences per batch, S tokens per sequence, P prompt tokens, b bytes per
element. Estimates leave out the framework's own overhead (CUDA context, allocator
fragmentation), which is why `fits()` keeps 10% of the device free.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from llamarl_core.config.choices import DTYPE_BYTES, QUANT_BYTES
from llamarl_core.models.args import ModelArgs

GIB = 2**30
USABLE_FRACTION = 0.9
MASTER_BYTES = 4  # trainer parameters are fp32 (executors/trainer_model.py MASTER_DTYPE)
# Activation bytes per token per layer per unit of d, for 16-bit training with fused
# (flash/SDPA) attention: Korthikanti et al. 2022, "Reducing Activation Recomputation", eq. 2
# without the 5·a·s/h attention-score term that fused attention never materialises.
ACT_BYTES_PER_TOKEN_DIM_16BIT = 34


@dataclass(frozen=True)
class MemoryEstimate:
    weights: float
    gradients: float
    optimizer: float
    activations: float
    kv_cache: float
    reference: float = 0.0               # the frozen KL reference's weights (algorithm.kl_coef > 0)

    @property
    def total(self) -> float:
        return (self.weights + self.gradients + self.optimizer + self.activations + self.kv_cache
                + self.reference)

    def to_dict(self) -> dict:  # to the MiB; the total adds up the parts shown, so plan.json reads back the same
        parts = {k: round(v, 3) for k, v in asdict(self).items()}
        return {"total": round(sum(parts.values()), 3), **parts}


def embedding_params(m: ModelArgs) -> int:
    """Input embedding plus the output head (shared when tied)."""
    return m.vocab_size * m.dim * (1 if m.tie_embeddings else 2)


SAMPLING_VOCAB_ROWS = 4  # fp32 [B, V] alive while sampling: logits, weights, padded copy, truncated log-probs


def norm_params(m: ModelArgs) -> int:
    """RMSNorm weights (two per block and the final one): replicated on every TP rank."""
    return (2 * m.n_layers + 1) * m.dim


def generator_weight_bytes(m: ModelArgs, *, tp: int, dtype: str, quantization: str) -> float:
    """Bytes of one copy of the weights one generator TP rank holds: the block linears' TP
    slice (in their wire dtype: fp8 = 1 byte), norms, embedding and head whole (TP keeps them
    replicated, transport/tensor_parallel.py)."""
    b = DTYPE_BYTES[dtype]
    n_embed, n_norm = embedding_params(m), norm_params(m)
    n_block = m.num_params() - n_embed - n_norm
    b_block = 1 if quantization == "fp8" else b  # fp8 arrives quantized (generation/fp8_weights.py)
    return n_block * b_block / tp + (n_norm + n_embed) * b


def generator_memory(m: ModelArgs, *, tp: int, pp: int, dtype: str, quantization: str,
                     batch: int, prompt_tokens: int, seq_tokens: int, slots: int = 2,
                     adapter_params: int = 0, target_params: int = 0) -> MemoryEstimate:
    """`slots`: weight copies held. A generator role holds two DDMA slots (it computes from one
    while the next version lands in the other, transport/ddma.py); the synchronous actor's
    engine one (colocated_memory). int8 adds its quantized copy of the block linears.
    LoRA (`adapter_params` > 0, plan/lora.py): one copy of the weights it built, the DDMA slots
    of the adapters alone, and the base copy of the `target_params` it merges from."""
    b = DTYPE_BYTES[dtype]
    if adapter_params:
        weights = (generator_weight_bytes(m, tp=tp, dtype=dtype, quantization=quantization)
                   + slots * adapter_params * b + target_params * b)
    else:
        weights = slots * generator_weight_bytes(m, tp=tp, dtype=dtype, quantization=quantization)
    if quantization == "int8":
        weights += (m.num_params() - embedding_params(m) - norm_params(m)) * QUANT_BYTES["int8"] / tp
    weights /= pp
    # KV heads are split over TP ranks; beyond n_kv_heads ranks each holds one head's copy.
    kv_heads_local = math.ceil(m.n_kv_heads / tp)
    kv = batch * seq_tokens * 2 * (m.n_layers / pp) * kv_heads_local * m.head_dim * b
    # Prefill is the peak: one layer's hidden states, QKV and MLP intermediates for the whole
    # batch; sampling holds a few fp32 [B, V] (the head is replicated: every TP rank has all V).
    act = (batch * prompt_tokens * (4 * m.dim + 3 * m.ffn_dim / tp) * b
           + SAMPLING_VOCAB_ROWS * batch * m.vocab_size * 4)
    return MemoryEstimate(weights / GIB, 0.0, 0.0, act / GIB, kv / GIB)


def trainer_memory(m: ModelArgs, *, fsdp: int, tp: int, pp: int, dtype: str,
                   micro_batch: int, seq_tokens: int, activation_checkpointing: bool,
                   reference: bool = False, adapter_params: int = 0) -> MemoryEstimate:
    """LoRA (`adapter_params` > 0): the frozen base in the compute dtype plus the fp32 adapters
    as weights (executors/trainer_model.py: `hold_base_in`), gradients and AdamW state for the
    adapters only, and no reference copy (the reference is the base: `models.lora.adapters_disabled`)."""
    n = m.num_params()
    b = DTYPE_BYTES[dtype]
    shard = fsdp * tp * pp
    # FSDP gathers one layer's full weights (plus one prefetched) at a time.
    layer_params = (n - embedding_params(m) - m.dim) / m.n_layers
    gather = 2 * layer_params * b / tp if fsdp > 1 else 0.0
    # The runtime keeps fp32 master parameters whatever the compute dtype b (FSDP2
    # MixedPrecisionPolicy gathers them in b; gradients are reduced and kept in fp32).
    weights = n * MASTER_BYTES / shard + gather
    gradients = n * MASTER_BYTES / shard
    optimizer = n * 8 / shard  # AdamW exp_avg + exp_avg_sq, fp32
    tokens = micro_batch * seq_tokens
    per_layer_full = ACT_BYTES_PER_TOKEN_DIM_16BIT * (b / 2) * tokens * m.dim / tp
    layers_local = m.n_layers / pp
    if activation_checkpointing:
        act = layers_local * tokens * m.dim * b + per_layer_full  # layer inputs + one recompute
    else:
        act = layers_local * per_layer_full
    act += 2 * tokens * m.vocab_size * 4 / tp  # fp32 logits and their gradient
    # The KL reference (executors/trainer_model.py): frozen, stored in the compute dtype and
    # sharded exactly like the trained weights; its FSDP gathers come after the policy's forward
    # has resharded, so they reuse the gather term above. Its forward's fp32 log-probabilities
    # over the vocabulary sit beside the policy's activations.
    ref = n * b / shard if reference and not adapter_params else 0.0
    if adapter_params:
        weights = n * b / shard + gather + adapter_params * MASTER_BYTES / shard
        gradients = adapter_params * MASTER_BYTES / shard
        optimizer = adapter_params * 8 / shard
    if reference:
        act += tokens * m.vocab_size * 4 / tp
    return MemoryEstimate(weights / GIB, gradients / GIB, optimizer / GIB, act / GIB, 0.0, ref / GIB)


def colocated_memory(train: MemoryEstimate, gen: MemoryEstimate) -> MemoryEstimate:
    """Synchronous hybrid engine: training state stays resident while it generates.

    Generation adds its own (TP-resharded) weight copy and the KV cache; activations of the
    two phases do not coexist, so the larger one counts.
    """
    return MemoryEstimate(train.weights + gen.weights, train.gradients, train.optimizer,
                          max(train.activations, gen.activations), gen.kv_cache, train.reference)


def reward_memory() -> MemoryEstimate:
    """Verifiers are CPU string processing; they hold no model."""
    return MemoryEstimate(0.0, 0.0, 0.0, 0.0, 0.0)


def fits(est: MemoryEstimate, capacity_gib: float) -> bool:
    return est.total <= USABLE_FRACTION * capacity_gib
