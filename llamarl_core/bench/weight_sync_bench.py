"""Weight-sync bandwidth: each transport against memcpy of the same bytes, same run.

Two processes (gloo, free port): rank 0 plays trainer rank 0, rank 1 a generator.
For every size, in one loop so machine noise hits all three alike, in turn:

- ``memcpy``: ``dst.copy_(src)`` of the same bytes inside rank 0 (the ceiling);
- ``collective``: ``WeightSyncSender.send`` / ``WeightSyncReceiver.receive`` over gloo;
- ``shm``: the same over ``/dev/shm``;
- ``broadcast``: bare ``dist.broadcast`` of the same bytes in ``bucket_mb`` pieces,
  with no packing or unpacking: the ceiling of the collective transport.

A sync is timed end to end on rank 0: barrier, t0, send (rank 1: receive), barrier,
t1; so it includes packing on the trainer, the transfer, and the copy into the
generator's parameters, plus one barrier (its median is reported separately).
Both sides' own ``SyncStats`` are kept too: for ``shm`` the receiver's GB/s is the
one-copy read out of shared memory. Sizes are MiB (2**20 B); GB/s is 1e9 B/s.
State: float32 tensors of at most 16 MiB each (like a model's layers), no wire
conversion, so bytes on the wire equal the bytes memcpy moves. One thread per
process (2-core machine).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from llamarl_core.bench.provenance import git_commit
from llamarl_core.config.schema import ControllerConfig

BYTES_PER_MIB = 1 << 20
TENSOR_MIB = 16
BUCKET_MB = ControllerConfig.weight_bucket_mb  # what a run uses unless the recipe says otherwise
VARIANTS = ("memcpy", "broadcast", "collective", "shm")


def _named_views(flat: torch.Tensor) -> dict[str, torch.Tensor]:
    per = TENSOR_MIB * BYTES_PER_MIB // flat.element_size()
    return {f"layers.{i:04d}.weight": flat[s : s + per] for i, s in enumerate(range(0, flat.numel(), per))}


def _stats_row(stats) -> dict:
    return {"seconds": stats.seconds, "gbps": stats.gbps, "wait_seconds": stats.wait_seconds,
            "num_buckets": stats.num_buckets, "bytes": stats.bytes}


def _one_size(rank: int, size_mb: float, repeats: int, bucket_mb: float, store) -> dict | None:
    import torch.distributed as dist

    from llamarl_core.transport.weight_sync import WeightSyncReceiver, WeightSyncSender

    numel = int(size_mb * BYTES_PER_MIB) // 4
    flat = torch.randn(numel) if rank == 0 else torch.zeros(numel)
    tensors = _named_views(flat)
    shapes = {n: (t.shape, t.dtype) for n, t in tensors.items()}
    kw = dict(group=None, src_rank=0, store=store, run_id="bench-ws", bucket_mb=bucket_mb)
    cls = WeightSyncSender if rank == 0 else WeightSyncReceiver
    ends = {t: cls(shapes, transport=t, **kw) for t in ("collective", "shm")}
    dst = torch.empty_like(flat) if rank == 0 else None
    bare = flat.clone() if rank == 0 else torch.empty_like(flat)  # bare broadcast must not touch params
    piece_bytes = int(bucket_mb * BYTES_PER_MIB)
    raw: dict[str, list] = {v: [] for v in VARIANTS}
    raw.update({f"{t}_{side}": [] for t in ("collective", "shm") for side in ("sender", "receiver")})
    raw["barrier"] = []
    version = 0
    warmup = 2  # one per shm slot: first touches of each mapping, first connections
    for it in range(repeats + warmup):
        if rank == 0:
            t0 = time.perf_counter()
            dst.copy_(flat)
            memcpy_s = time.perf_counter() - t0
        dist.barrier()
        t0 = time.perf_counter()
        dist.barrier()
        barrier_s = time.perf_counter() - t0
        row = {"memcpy": memcpy_s if rank == 0 else None, "barrier": barrier_s}
        dist.barrier()
        t0 = time.perf_counter()
        works = [dist.broadcast(piece, src=0, async_op=True) for piece in bare.view(torch.uint8).split(piece_bytes)]
        for w in works:
            w.wait()
        dist.barrier()
        row["broadcast"] = time.perf_counter() - t0
        for transport, end in ends.items():
            version += 1
            dist.barrier()
            t0 = time.perf_counter()
            stats = end.send(tensors, version) if rank == 0 else end.receive(tensors, timeout_s=600)
            dist.barrier()
            row[transport] = time.perf_counter() - t0
            side_stats = [None, None]
            dist.all_gather_object(side_stats, _stats_row(stats))
            row[f"{transport}_sender"], row[f"{transport}_receiver"] = side_stats
        if it >= warmup:
            for k, v in row.items():
                raw[k].append(v)
    checksums = [None, None]  # the generator must hold exactly the trainer's bytes
    dist.all_gather_object(checksums, float(flat.double().sum()))
    if checksums[0] != checksums[1]:
        raise RuntimeError(f"weight sync bench: generator checksum {checksums[1]} != trainer {checksums[0]}")
    for end in ends.values():
        end.close()
    if rank != 0:
        return None
    nbytes = numel * 4
    med_s = {v: statistics.median(raw[v]) for v in VARIANTS}
    gbps = {v: nbytes / med_s[v] / 1e9 for v in VARIANTS}
    side_gbps = {k: statistics.median(r["gbps"] for r in raw[k]) for k in raw if k.endswith(("_sender", "_receiver"))}
    return {
        "size_mb": size_mb, "bytes": nbytes, "num_tensors": len(tensors),
        "num_buckets": raw["collective_sender"][0]["num_buckets"],
        "median_seconds": med_s, "median_gbps": gbps, "median_side_gbps": side_gbps,
        "ratio_to_memcpy": {v: gbps[v] / gbps["memcpy"] for v in VARIANTS[1:]},
        "median_barrier_seconds": statistics.median(raw["barrier"]),
        "raw": raw,
    }


def _worker(rank: int, port: int, sizes_mb, repeats: int, bucket_mb: float, out_path: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, is_master=False, wait_for_workers=False)
    dist.init_process_group("gloo", store=dist.PrefixStore("bench", store), rank=rank, world_size=2)
    try:
        rows = [_one_size(rank, s, repeats, bucket_mb, store) for s in sizes_mb]
        if rank == 0:
            Path(out_path).write_text(json.dumps(rows))
    finally:
        dist.destroy_process_group()


def _command() -> str:
    prog = Path(sys.argv[0]).name
    if prog == Path(__file__).name:  # run as `python -m llamarl_core.bench.weight_sync_bench`
        prog = "python -m llamarl_core.bench.weight_sync_bench"
    return " ".join([prog, *sys.argv[1:]])


def _machine() -> dict:
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"cpu_count": os.cpu_count(), "platform": platform.platform(), "processor": platform.processor(),
            "python": platform.python_version(), "memory_gib": round(mem_gib, 1),
            "torch_version": torch.__version__, "device": "cpu", "threads_per_process": 1}


def run_weight_sync_bench(sizes_mb=(10, 64, 256, 1024), repeats: int = 5, out=None,
                          bucket_mb: float = BUCKET_MB) -> dict:
    """Measure memcpy / collective / shm GB/s for each size; write JSON to ``out`` if given."""
    import torch.distributed as dist
    import torch.multiprocessing as mp

    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="llamarl-wsbench-") as tmp:
        rows_path = str(Path(tmp, "rows.json"))
        mp.spawn(_worker, args=(server.port, list(sizes_mb), repeats, bucket_mb, rows_path), nprocs=2, join=True)
        rows = json.loads(Path(rows_path).read_text())
    result = {
        "benchmark": "weight_sync",
        "command": _command(),
        "commit": git_commit(),
        "config": {"sizes_mb": list(sizes_mb), "repeats": repeats, "bucket_mb": bucket_mb,
                   "tensor_mb": TENSOR_MIB, "dtype": "float32", "wire_dtype": "float32"},
        "machine": _machine(),
        "wall_seconds": time.perf_counter() - t0,
        "sizes": rows,
    }
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=1) + "\n")
    return result


def print_table(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"weight sync GB/s, median of {result['config']['repeats']} (x = ratio to memcpy); "
                        "shm write/read: one side's copy alone")
    for col in ("MiB", "buckets", "memcpy", "bare bcast", "collective", "shm", "shm write", "shm read"):
        table.add_column(col, justify="right")
    for r in result["sizes"]:
        g, x, side = r["median_gbps"], r["ratio_to_memcpy"], r["median_side_gbps"]
        table.add_row(f"{r['size_mb']:g}", str(r["num_buckets"]), f"{g['memcpy']:.2f}",
                      *(f"{g[v]:.2f} ({x[v]:.2f}x)" for v in VARIANTS[1:]),
                      f"{side['shm_sender']:.2f}", f"{side['shm_receiver']:.2f}")
    Console().print(table)


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description="weight-sync transports vs memcpy")
    p.add_argument("--sizes-mb", type=float, nargs="+", default=[10, 64, 256, 1024])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--bucket-mb", type=float, default=BUCKET_MB)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    print_table(run_weight_sync_bench(args.sizes_mb, args.repeats, args.out, args.bucket_mb))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
