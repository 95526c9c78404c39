"""Which device a rank computes on, which backend its groups use, and whether this host can run
a plan at all (checked by `llamarl train` before anything starts).

    resources.device=cpu           every rank on the CPU; groups on gloo
    GPU, one rank per GPU          rank -> cuda:<LOCAL_RANK> (its command's CUDA_VISIBLE_DEVICES
                                   holds only its role's GPUs); groups `cpu:gloo,cuda:nccl`:
                                   CUDA tensors (weights, trainer collectives) on NCCL, host
                                   tensors (rollouts, handshakes) on gloo
    GPU, share_devices             generator and trainer on one GPU: NCCL refuses two ranks of
                                   one communicator on one device, so groups are gloo only and
                                   the weights move by CUDA IPC (weight_transport cuda_ipc)
    reward ranks                   CPU always
"""
from __future__ import annotations

import os

import torch

from llamarl_core.config.errors import ConfigError
from llamarl_core.config.schema import LlamaRLConfig


def backend(cfg: LlamaRLConfig) -> str:
    if cfg.resources.device == "cpu" or cfg.resources.share_devices:
        return "gloo"
    return "cpu:gloo,cuda:nccl"


def rank_device(cfg: LlamaRLConfig, role: str) -> str:
    """This rank's torch device; on a GPU it also becomes the current CUDA device."""
    if cfg.resources.device == "cpu" or role == "reward":
        return "cpu"
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    return f"cuda:{local_rank}"


def gpus_needed_here(plan) -> int:
    """GPUs node 0 (this host, where `train` starts the roles) of `plan` (a LaunchPlan) must have."""
    return max((max(r.devices) + 1 for r in plan.roles if r.devices and 0 in r.nodes), default=0)


def check_host(plan, recipe: str) -> None:
    """One-line ConfigError when this host lacks what the plan's GPU roles need."""
    if plan.device == "cpu":
        return
    need = gpus_needed_here(plan)
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    want = f"recipe {recipe} needs {need} CUDA GPU(s) on this host (resources.device={plan.device})"
    if have == 0:
        raise ConfigError(f"{want}; this host has none (torch {torch.__version__}, "
                          f"torch.cuda.is_available()={torch.cuda.is_available()})")
    if have < need:
        raise ConfigError(f"{want}; this host has {have} ({torch.cuda.get_device_name(0)})")
    planned = max((round(r.capacity_gib, 3) for r in plan.roles if r.devices), default=0.0)
    actual = torch.cuda.get_device_properties(0).total_memory / 2**30
    if actual < 0.95 * planned:
        raise ConfigError(f"{want} with {planned:.0f} GiB each; this host's {torch.cuda.get_device_name(0)} "
                          f"has {actual:.0f} GiB (use resources.device=cuda to plan for it)")
