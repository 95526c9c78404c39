"""Device specifications used by the planner (memory) and the scale simulator (speed).

Numbers are vendor datasheet peaks (dense, no sparsity); efficiency factors that turn peaks
into achievable rates live in the simulator and are documented in docs/SIMULATOR.md.
"""
from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceSpec:
    name: str
    memory_gib: float          # usable device memory per device
    bf16_tflops: float         # dense peak, TFLOP/s
    hbm_gbps: float            # memory bandwidth, GB/s
    nvlink_gbps: float         # per-device unidirectional intra-node bandwidth, GB/s
    ib_gbps: float             # per-device inter-node bandwidth, GB/s
    devices_per_node: int
    is_gpu: bool = True
    measured: bool = True      # False: `cuda` planned on a host without a GPU (stand-in numbers)


DEVICES: dict[str, DeviceSpec] = {
    # H100 SXM5 80GB: 989 TFLOP/s bf16 dense, 3.35 TB/s HBM3, NVLink4 450 GB/s per direction,
    # one 400 Gb/s (50 GB/s) ConnectX-7 NIC per GPU.
    "h100-80gb": DeviceSpec("h100-80gb", memory_gib=80 * 1e9 / 2**30, bf16_tflops=989.0,
                            hbm_gbps=3350.0, nvlink_gbps=450.0, ib_gbps=50.0, devices_per_node=8),
    # H200 SXM 141GB: same compute as H100, 4.8 TB/s HBM3e.
    "h200-141gb": DeviceSpec("h200-141gb", memory_gib=141 * 1e9 / 2**30, bf16_tflops=989.0,
                             hbm_gbps=4800.0, nvlink_gbps=450.0, ib_gbps=50.0, devices_per_node=8),
}


def host_memory_gib() -> float:
    """Physical memory of this machine in GiB (Linux /proc/meminfo, else sysconf)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024 / 2**30
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def cpu_spec(num_cores: int | None = None, memory_gib: float | None = None) -> DeviceSpec:
    """A CPU "device" is one worker process; they share the host's memory and cores."""
    cores = num_cores or os.cpu_count() or 1
    mem = memory_gib if memory_gib is not None else host_memory_gib()
    return DeviceSpec("cpu", memory_gib=mem, bf16_tflops=0.1 * cores, hbm_gbps=20.0,
                      nvlink_gbps=5.0, ib_gbps=1.0, devices_per_node=cores, is_gpu=False)


def cuda_spec() -> DeviceSpec:
    """`resources.device=cuda`: any NVIDIA GPU, memory and count read from this host's device 0.

    Speed numbers (for the simulator) are the H100's unless the device names itself an H200.
    Without a visible GPU the spec is an H100-80GB stand-in with `measured=False`, so a plan
    can still be printed here; `llamarl train` refuses to start on such a host (runtime/host.py).
    """
    import torch

    base = DEVICES["h100-80gb"]
    if not torch.cuda.is_available():
        return DeviceSpec("cuda", base.memory_gib, base.bf16_tflops, base.hbm_gbps, base.nvlink_gbps,
                          base.ib_gbps, base.devices_per_node, measured=False)
    props = torch.cuda.get_device_properties(0)
    like = DEVICES["h200-141gb"] if "H200" in props.name else base
    return DeviceSpec("cuda", props.total_memory / 2**30, like.bf16_tflops, like.hbm_gbps, like.nvlink_gbps,
                      like.ib_gbps, torch.cuda.device_count())


def get_device(name: str) -> DeviceSpec:
    if name == "cpu":
        return cpu_spec()
    if name == "cuda":
        return cuda_spec()
    if name not in DEVICES:
        raise KeyError(f"unknown device {name!r}; known: cpu, {', '.join(DEVICES)}")
    return DEVICES[name]
