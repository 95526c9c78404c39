"""Weight-sync bandwidth: DDMA over each transport against its ceilings, same bytes, same run.

Two processes (gloo, free port): rank 0 is trainer rank 0, rank 1 one generator rank (1:1,
no TP: the generator receives every byte). For every size, in one loop so machine noise hits
all four alike, in turn:

- ``memcpy``: ``dst.copy_(src)`` of the same bytes inside rank 0 (the ceiling of a copy);
- ``broadcast``: bare ``dist.broadcast`` of the same bytes in the plan's pieces, with no
  slot or version protocol: the ceiling of the collective transport;
- ``collective`` and ``shm``: ``DdmaSender.send`` / ``DdmaReceiver.receive`` (what a run
  does, transport/ddma.py), each into its own two slots.

A sync is timed end to end on rank 0: barrier, t0, send (rank 1: receive until adopted),
barrier, t1; so it includes the transfer into the generator's slot and the swap, plus one
barrier (its median is reported separately). Both sides' own ``SyncStats`` are kept too:
for ``shm`` the trainer's is its write into the slot, the generator's its adoption. Sizes
are MiB (2**20 B); GB/s is 1e9 B/s. State: float32 tensors of at most 16 MiB each (like a
model's layers), no wire conversion, so bytes on the wire equal the bytes memcpy moves. One
thread per process (2-core machine). T:G layouts with TP: ``ddma_bench`` (``--layout``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from llamarl_core.bench.provenance import git_commit, load_average, machine
from llamarl_core.config.schema import ControllerConfig

BYTES_PER_MIB = 1 << 20
TENSOR_MIB = 16
BUCKET_MB = ControllerConfig.weight_bucket_mb  # what a run uses unless the recipe says otherwise
VARIANTS = ("memcpy", "broadcast", "collective", "shm")
TRANSPORTS = VARIANTS[2:]
WARMUP = 2  # one per slot: first touches of each mapping, first connections


def _checksum(params: dict[str, torch.Tensor]) -> float:
    return float(sum(params[name].double().sum() for name in sorted(params)))


def _named_views(flat: torch.Tensor) -> dict[str, torch.Tensor]:
    per = TENSOR_MIB * BYTES_PER_MIB // flat.element_size()
    return {f"layers.{i:04d}.weight": flat[s : s + per] for i, s in enumerate(range(0, flat.numel(), per))}


def _stats_row(stats) -> dict:
    return {"seconds": stats.seconds, "gbps": stats.gbps, "wait_seconds": stats.wait_seconds, "bytes": stats.bytes}


def _endpoints(rank: int, plan, store, epoch0: int) -> dict:
    from llamarl_core.transport.ddma import DdmaReceiver, DdmaSender

    ends = {}
    for i, transport in enumerate(TRANSPORTS):
        kw = dict(transport=transport, store=store, epoch=epoch0 + i, timeout_s=600, run_id=f"bench-ws-{epoch0 + i}")
        if rank == 0:
            ends[transport] = DdmaSender(plan, 0, **kw)
        else:  # torch.empty: no pages are touched before the first swap replaces them
            params = {t.name: torch.empty(t.shape) for t in plan.slots[0]}
            ends[transport] = DdmaReceiver(plan, 0, params, **kw)
    return ends


def _one_size(rank: int, size_mb: float, repeats: int, bucket_mb: float, store, epoch0: int) -> dict | None:
    import torch.distributed as dist

    from llamarl_core.transport.ddma_plan import build_plan, piece_bytes

    numel = int(size_mb * BYTES_PER_MIB) // 4
    flat = torch.randn(numel) if rank == 0 else torch.zeros(numel)
    tensors = _named_views(flat)
    plan = build_plan({n: (tuple(t.shape), t.dtype) for n, t in tensors.items()}, trainer_ranks=1,
                      generator_ranks=1, max_piece_bytes=piece_bytes(bucket_mb))
    ends = _endpoints(rank, plan, store, epoch0)
    dst = torch.empty_like(flat) if rank == 0 else None
    bare = flat.clone() if rank == 0 else torch.empty_like(flat)  # bare broadcast must not touch params
    pieces = [p.numel * 4 for p in plan.pieces]
    raw: dict[str, list] = {v: [] for v in VARIANTS}
    raw.update({f"{t}_{side}": [] for t in TRANSPORTS for side in ("sender", "receiver")})
    raw["barrier"] = []
    version = 0
    for it in range(repeats + WARMUP):
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
        works = [dist.broadcast(piece, src=0, async_op=True) for piece in bare.view(torch.uint8).split(pieces)]
        for w in works:
            w.wait()
        dist.barrier()
        row["broadcast"] = time.perf_counter() - t0
        version += 1
        for transport, end in ends.items():
            dist.barrier()
            t0 = time.perf_counter()
            stats = end.send(tensors, version) if rank == 0 else end.receive()
            dist.barrier()
            row[transport] = time.perf_counter() - t0
            side_stats = [None, None]
            dist.all_gather_object(side_stats, _stats_row(stats))
            row[f"{transport}_sender"], row[f"{transport}_receiver"] = side_stats
        if it >= WARMUP:
            for k, v in row.items():
                raw[k].append(v)
    # the same reduction on both sides (per tensor, in name order): a sum of the flat buffer in one
    # go rounds differently from the sum of its pieces' sums, so equal bytes compared unequal
    sums = {t: _checksum(e.params if rank else tensors) for t, e in ends.items()}
    checksums = [None, None]  # the generator must hold exactly the trainer's bytes, over each transport
    dist.all_gather_object(checksums, sums)
    if checksums[0] != checksums[1]:
        raise RuntimeError(f"weight sync bench: generator checksums {checksums[1]} != trainer {checksums[0]}")
    for end in ends.values():
        end.close()
    if rank != 0:
        return None
    nbytes = numel * 4
    med_s = {v: statistics.median(raw[v]) for v in VARIANTS}
    gbps = {v: nbytes / med_s[v] / 1e9 for v in VARIANTS}
    side_gbps = {k: statistics.median(r["gbps"] for r in raw[k]) for k in raw if k.endswith(("_sender", "_receiver"))}
    return {
        "size_mb": size_mb, "bytes": nbytes, "num_tensors": len(tensors), "num_pieces": len(plan.pieces),
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
        rows = [_one_size(rank, s, repeats, bucket_mb, store, 10 * i) for i, s in enumerate(sizes_mb)]
        if rank == 0:
            Path(out_path).write_text(json.dumps(rows))
    finally:
        dist.destroy_process_group()


def run_weight_sync_bench(sizes_mb=(10, 64, 256, 1024), repeats: int = 5, out=None,
                          bucket_mb: float = BUCKET_MB, command: str | None = None) -> dict:
    """Measure memcpy / broadcast / DDMA collective / DDMA shm GB/s for each size; write JSON to
    ``out`` if given, recording ``command`` (how `llamarl bench weight-sync` was called)."""
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
        "command": command,
        "commit": git_commit(),
        "config": {"sizes_mb": list(sizes_mb), "repeats": repeats, "bucket_mb": bucket_mb,
                   "tensor_mb": TENSOR_MIB, "dtype": "float32", "wire_dtype": "float32",
                   "sync": "ddma 1:1"},
        "machine": machine(device="cpu", threads_per_process=1),
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

    table = Table(title=f"DDMA weight sync 1:1, GB/s, median of {result['config']['repeats']} "
                        "(x = ratio to memcpy); shm write/adopt: one side alone")
    for col in ("MiB", "pieces", "memcpy", "bare bcast", "collective", "shm", "shm write", "shm adopt"):
        table.add_column(col, justify="right")
    for r in result["sizes"]:
        g, x, side = r["median_gbps"], r["ratio_to_memcpy"], r["median_side_gbps"]
        table.add_row(f"{r['size_mb']:g}", str(r["num_pieces"]), f"{g['memcpy']:.2f}",
                      *(f"{g[v]:.2f} ({x[v]:.2f}x)" for v in VARIANTS[1:]),
                      f"{side['shm_sender']:.2f}", f"{side['shm_receiver']:.2f}")
    Console().print(table)



def parser(prog: str) -> argparse.ArgumentParser:
    """`llamarl bench weight-sync`: these sizes over every transport, or with --layout the DDMA
    layouts at one size (ddma_bench.py), added to the JSON at --out beside its other cases."""
    p = argparse.ArgumentParser(prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes-mb", type=float, nargs="+", default=[10, 64, 256, 1024], help="message sizes in MiB")
    p.add_argument("--repeats", type=_at_least_1, default=5, help="timings per size (default 5)")
    p.add_argument("--bucket-mb", type=float, default=BUCKET_MB, help="DDMA piece size in MiB (a run's default)")
    p.add_argument("--layout", action="append", default=[], type=_layout, metavar="T:G",
                   help="DDMA from T trainer ranks to G generator ranks (repeatable) at one --sizes-mb; adds "
                        "a 'layouts' list to the JSON, keeping its other cases")
    return p


def _at_least_1(text: str) -> int:
    if int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text} must be >= 1")
    return int(text)


def _layout(text: str) -> tuple[int, int]:
    from llamarl_core.bench.ddma_bench import parse_layout
    try:
        return parse_layout(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def run(args, command: str) -> int:
    if not args.layout:
        print_table(run_weight_sync_bench(args.sizes_mb, args.repeats, args.out, args.bucket_mb, command))
        return 0
    from llamarl_core.bench.ddma_bench import print_layouts, run_layout_bench

    if len(args.sizes_mb) != 1:
        print("llamarl bench weight-sync: --layout measures one size; give one --sizes-mb (e.g. 1024)",
              file=sys.stderr)
        return 2
    cases = run_layout_bench(args.layout, size_mb=args.sizes_mb[0], repeats=args.repeats)
    print_layouts(cases)
    out = Path(args.out)
    result = json.loads(out.read_text()) if out.exists() else {}
    result.update(layouts=cases, layouts_loadavg=load_average(), layouts_command=command,
                  layouts_commit=git_commit())
    out.write_text(json.dumps(result, indent=1) + "\n")
    return 0
