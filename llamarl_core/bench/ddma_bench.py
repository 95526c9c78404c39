"""DDMA layouts on this host: T trainer ranks → G generator ranks, against memcpy per link.

    llamarl bench weight-sync --layout 1:1 --layout 2:1 --layout 2:2 [--sizes-mb 1024]

T + G processes (gloo, free port). The model is float32 tensors of 16 MiB; trainer rank t
holds only its FSDP dim-0 rows of each; the G generator ranks form one replica with TP = G
(so each receives half of every matrix when G = 2). Per transport (``shm``, ``collective``),
alternating memcpy and sync in one loop so machine noise hits both alike:

- ``memcpy``: trainer rank 0 copies the bytes of the largest link (one trainer → one
  generator) inside its own memory: what one link would cost at memcpy speed (its median over the
  rounds of that transport);
- a sync, timed end to end on trainer rank 0: barrier, t0, every trainer ``send`` / every
  generator ``receive`` (until it has adopted the version), barrier, t1.

``bytes`` is everything that moves (all links), ``gbps`` = bytes / seconds, and
``fraction_of_memcpy`` = memcpy seconds of the largest link / sync seconds: 1.0 means every
link moved its bytes as fast as a local memcpy of them, all links at once. Medians.
"""
from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

BYTES_PER_MIB = 1 << 20
TENSOR_MIB = 16
ROWS = 1024  # each tensor is [ROWS, cols]: splits evenly across 2 trainers and 2 TP ranks
TRANSPORTS = ("shm", "collective")
WARMUP = 2  # one per slot: first touches of each mapping, first connections


def _shapes(size_mb: float) -> dict[str, tuple[tuple[int, int], torch.dtype]]:
    per = TENSOR_MIB * BYTES_PER_MIB // 4 // ROWS
    n = max(1, int(size_mb // TENSOR_MIB))
    return {f"layers.{i:04d}.attention.wq.weight": ((ROWS, per), torch.float32) for i in range(n)}


def _heads(tp: int):
    """ModelArgs whose heads split over `tp` ranks (all tp_slice reads of it: wq splits its rows)."""
    from llamarl_core.models import ModelArgs
    return ModelArgs(vocab_size=256, dim=64 * tp, n_layers=1, n_heads=tp, n_kv_heads=tp, ffn_dim=tp)


def _one(rank: int, T: int, G: int, size_mb: float, repeats: int, store, epoch0: int) -> dict | None:
    import torch.distributed as dist

    from llamarl_core.transport.ddma import DdmaReceiver, DdmaSender  # noqa: I001
    from llamarl_core.transport.ddma_plan import build_plan, fsdp_rows

    shapes = _shapes(size_mb)
    plan = build_plan(shapes, trainer_ranks=T, generator_ranks=G, tp_size=G, args=_heads(G))
    link_bytes = max(plan.link_nbytes(t, g) for t in range(T) for g in range(G))
    nbytes = sum(plan.link_nbytes(t, g) for t in range(T) for g in range(G))
    local = None
    if rank < T:
        gen = torch.Generator().manual_seed(rank)
        local = {n: torch.randn(fsdp_rows(s[0], T, rank)[1] - fsdp_rows(s[0], T, rank)[0], s[1], generator=gen)
                 for n, (s, _) in shapes.items()}
    src = torch.cat([t.reshape(-1) for t in local.values()]).view(torch.uint8)[:link_bytes] if rank == 0 else None
    dst = torch.empty_like(src) if rank == 0 else None
    raw: dict[str, list[float]] = {k: [] for t in TRANSPORTS for k in (t, f"memcpy_{t}")}
    version = 0
    for i, transport in enumerate(TRANSPORTS):  # one transport at a time: its slots are freed before the next
        kw = dict(transport=transport, store=store, epoch=epoch0 + i, timeout_s=600, run_id=f"bench-ddma-{epoch0}")
        if rank < T:
            end = DdmaSender(plan, rank, **kw)
        else:  # torch.empty: no pages are touched before the first swap replaces them
            params = {t.name: torch.empty(t.shape) for t in plan.slots[rank - T]}
            end = DdmaReceiver(plan, rank - T, params, **kw)
        for it in range(repeats + WARMUP):
            if rank == 0:
                t0 = time.perf_counter()
                dst.copy_(src)
                memcpy_s = time.perf_counter() - t0
            version += 1
            dist.barrier()
            t0 = time.perf_counter()
            end.send(local, version) if rank < T else end.receive()
            dist.barrier()
            if it >= WARMUP and rank == 0:
                raw[transport].append(time.perf_counter() - t0)
                raw[f"memcpy_{transport}"].append(memcpy_s)
        end.close()
        params = end = None
    if rank != 0:
        return None
    med = {k: statistics.median(v) for k, v in raw.items()}
    cases = [{"trainer_ranks": T, "generator_ranks": G, "generator_tp": G, "transport": t, "bytes": nbytes,
              "link_bytes": link_bytes, "seconds": med[t], "gbps": nbytes / med[t] / 1e9,
              "memcpy_seconds": med[f"memcpy_{t}"], "fraction_of_memcpy": med[f"memcpy_{t}"] / med[t],
              "raw_seconds": raw[t], "raw_memcpy_seconds": raw[f"memcpy_{t}"]} for t in TRANSPORTS]
    return {"cases": cases}


def _worker(rank: int, port: int, T: int, G: int, size_mb: float, repeats: int, epoch0: int,
            out_path: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, is_master=False, wait_for_workers=False)
    dist.init_process_group("gloo", store=dist.PrefixStore(f"bench{epoch0}", store), rank=rank,
                            world_size=T + G)
    try:
        result = _one(rank, T, G, size_mb, repeats, store, epoch0)
        if rank == 0:
            Path(out_path).write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def parse_layout(text: str) -> tuple[int, int]:
    try:
        t, g = (int(x) for x in text.split(":"))
    except ValueError:
        raise ValueError(f"--layout {text!r}: expected T:G, e.g. 2:1") from None
    if t < 1 or g < 1 or t + g > 4:
        raise ValueError(f"--layout {text!r}: need T>=1, G>=1 and T+G <= 4 processes on this host")
    return t, g


def run_layout_bench(layouts, size_mb: float = 1024, repeats: int = 5) -> list[dict]:
    """One entry of the ``layouts`` contract per (layout, transport)."""
    import torch.distributed as dist
    import torch.multiprocessing as mp

    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    cases = []
    with tempfile.TemporaryDirectory(prefix="llamarl-ddmabench-") as tmp:
        for i, (T, G) in enumerate(layouts):
            path = str(Path(tmp, f"{i}.json"))
            mp.spawn(_worker, args=(server.port, T, G, size_mb, repeats, 10 * i, path), nprocs=T + G, join=True)
            cases += json.loads(Path(path).read_text())["cases"]
    return cases


def print_layouts(cases: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="DDMA layouts: T trainer ranks → G generator ranks (TP = G), medians")
    for col in ("T:G", "transport", "MiB moved", "seconds", "GB/s", "× memcpy per link"):
        table.add_column(col, justify="right")
    for c in cases:
        table.add_row(f"{c['trainer_ranks']}:{c['generator_ranks']}", c["transport"],
                      f"{c['bytes'] / BYTES_PER_MIB:.0f}", f"{c['seconds']:.3f}", f"{c['gbps']:.2f}",
                      f"{c['fraction_of_memcpy']:.2f}")
    Console().print(table)
