"""Efficiency constants of the scale simulator: the only numbers it was allowed to fit.

Everything else the simulator uses comes from the model's sizes (`ModelArgs`) and the
device's datasheet peaks (`DeviceSpec`). These constants turn peaks into achievable rates;
ONE set is shared by every model, GPU count and split, and each one sits in the range that
published measurements support (sources in docs/SIMULATOR.md, section "Constants").
They were calibrated once against the paper's 8B and 70B step times, with the splits and the
streaming-generator assumption of that time (docs/SIMULATOR.md, "Constants and their
sensitivity"); they were not
refitted when the simulator learned the system as built (recipes' splits, whole chunks, DDMA
link bytes), so what moved is the model of our system, not the constants.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

GIB = 2**30


@dataclass(frozen=True)
class SimConstants:
    # --- compute -------------------------------------------------------------------------
    # Model-FLOPs utilisation of training (6N + attention counted, recompute not counted).
    # Large-scale Llama 3 pre-training reported 38-43% on H100 (arXiv 2407.21783, table 4).
    train_mfu: float = 0.40
    # Utilisation of prefill (one big forward pass, no backward): a bit above training.
    prefill_mfu: float = 0.50
    # Utilisation of decode matmuls when decode is compute-bound (very large batches).
    decode_mfu: float = 0.50
    # --- memory bandwidth ----------------------------------------------------------------
    # Fraction of peak HBM bandwidth a decode step reaches reading weights + KV cache;
    # memory-bound GEMV/attention kernels reach 60-80% on H100.
    decode_hbm_efficiency: float = 0.70
    # --- interconnect --------------------------------------------------------------------
    # Achieved fraction of NVLink / InfiniBand peak for large NCCL collectives (bus bandwidth
    # ~350-370 of 450 GB/s intra-node, ~40 of 50 GB/s per 400G NIC).
    nvlink_efficiency: float = 0.80
    ib_efficiency: float = 0.80
    # Latency of one step of a ring collective (NCCL LL protocol): an all-reduce over n
    # devices takes 2(n-1) steps, e.g. 42 us for TP 8 on NVLink, 0.24 ms for TP 16 over IB.
    nvlink_hop_latency_s: float = 3e-6
    ib_hop_latency_s: float = 8e-6
    # Fraction of FSDP / data-parallel gradient traffic hidden behind compute.
    train_comm_overlap: float = 0.80
    # --- engine overheads ----------------------------------------------------------------
    # Host-side cost per transformer layer per decode step (kernel launches, Python,
    # synchronisation) of an eager PyTorch engine: ~15-20 kernels per layer at 4-5 us each.
    decode_layer_overhead_s: float = 80e-6
    # Longest generated sample / mean generated length in a batch. A synchronous step waits
    # for the longest sample; an asynchronous generator streams and does not (section 5).
    max_to_mean_new_tokens: float = 3.0
    # Per-step fixed cost shared by both modes: reward scoring, data transfer to the trainer,
    # the optimizer step, controller bookkeeping.
    step_overhead_s: float = 1.0
    # Fixed cost of one weight sync (barrier, dtype conversion / quantisation kernels).
    weight_sync_overhead_s: float = 0.2
    # --- memory --------------------------------------------------------------------------
    # Memory per device kept free for activations, the allocator and NCCL buffers.
    reserved_gib: float = 8.0
    # Bytes of training state per parameter: bf16 weights (2) + bf16 grads (2) + fp32 master
    # weights, Adam m and v (4+4+4). Resident during generation in a colocated sync system.
    train_state_bytes_per_param: float = 16.0
    # Bytes per element of the trainer's weights and of the KV cache (bf16).
    train_bytes_per_param: float = 2.0
    kv_bytes_per_elem: int = 2

    def to_dict(self) -> dict:
        return asdict(self)


DEFAULT_CONSTANTS = SimConstants()

# The constants that were fitted (the rest are definitions: bytes per parameter and element);
# `llamarl bench --simulate` reports each one's sensitivity (sim/sensitivity.py).
FITTED = ("train_mfu", "prefill_mfu", "decode_mfu", "decode_hbm_efficiency", "nvlink_efficiency",
          "ib_efficiency", "nvlink_hop_latency_s", "ib_hop_latency_s", "train_comm_overlap",
          "decode_layer_overhead_s", "max_to_mean_new_tokens", "step_overhead_s",
          "weight_sync_overhead_s", "reserved_gib")

__all__ = ["SimConstants", "DEFAULT_CONSTANTS", "FITTED", "GIB"]
