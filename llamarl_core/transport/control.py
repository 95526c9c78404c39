"""The control plane: small values in the controller's TCPStore.

Keys (all under the run's store; values are small — TCPStore drops values over 8 MB):

    run/state                 "running" | "done" | "aborted"
    run/abort_reason          why the run stopped early (names role and rank)
    weights/published         policy version the trainer has published (absent before v0)
    weights/held/<grank>      version a generator rank holds
    dropped/<replica>         stale rollout chunks dropped from a generator replica (int)
    data/next_chunk/<replica> the chunk a generator replica starts at (resume: first untrained)
    hb/<role>/<rank>          when the rank's main loop last made progress, unix seconds
    pid/<role>/<rank>         the worker's pid (the controller reaps leftovers by pid)
    status/<role>/<rank>      JSON: what the rank is doing now, for the live view
    error/<role>/<rank>       the exception that ended a rank
    exit/<role>/<rank>        the exit code a rank reported just before leaving
    stats/<role>/<rank>       JSON counters of a generator or reward rank (busy/idle, tokens)
    metrics/latest            JSON of the trainer's last metrics line
"""
from __future__ import annotations

import json
import time
from datetime import timedelta

import torch.distributed as dist


def connect(host: str, port: int, timeout_s: float) -> dist.TCPStore:
    return dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=timeout_s))


class ControlPlane:
    def __init__(self, store: dist.Store):
        self.store = store

    # ---- strings and JSON ---------------------------------------------------------------
    def get_str(self, key: str, default: str = "") -> str:
        return self.store.get(key).decode() if self.store.check([key]) else default

    def set_json(self, key: str, value) -> None:
        self.store.set(key, json.dumps(value))

    def get_json(self, key: str, default=None):
        raw = self.get_str(key)
        return json.loads(raw) if raw else default

    def get_int(self, key: str) -> int:
        return int(self.store.add(key, 0))

    # ---- run state ----------------------------------------------------------------------
    def state(self) -> str:
        return self.get_str("run/state", "running")

    def finished(self) -> bool:
        return self.state() in ("done", "aborted")

    def mark_done(self) -> None:
        self.store.set("run/state", "done")

    def abort(self, reason: str) -> None:
        if not self.store.check(["run/abort_reason"]):
            self.store.set("run/abort_reason", reason)
        self.store.set("run/state", "aborted")

    def abort_reason(self) -> str:
        return self.get_str("run/abort_reason")

    # ---- weights and staleness ----------------------------------------------------------
    def publish_version(self, version: int) -> None:
        self.store.set("weights/published", str(version))  # one writer: trainer rank 0

    def published_version(self) -> int:
        """The newest published version, -1 before the trainer published version 0."""
        return int(self.get_str("weights/published", "-1"))

    def set_held(self, global_rank: int, version: int) -> None:
        self.store.set(f"weights/held/{global_rank}", str(version))

    def add_dropped(self, replica: int, n: int = 1) -> int:
        return int(self.store.add(f"dropped/{replica}", n))

    def dropped(self, replica: int) -> int:
        return self.get_int(f"dropped/{replica}")

    def set_next_chunk(self, replica: int, chunk: int) -> None:
        self.store.set(f"data/next_chunk/{replica}", str(chunk))

    def next_chunk(self, replica: int) -> int:
        return int(self.get_str(f"data/next_chunk/{replica}", "0"))

    # ---- liveness -----------------------------------------------------------------------
    def heartbeat(self, role: str, rank: int, progress_s: float | None = None) -> None:
        """`progress_s`: when the rank's main loop last made progress (default: now)."""
        self.store.set(f"hb/{role}/{rank}", repr(time.time() if progress_s is None else progress_s))

    def last_heartbeat(self, role: str, rank: int) -> float | None:
        raw = self.get_str(f"hb/{role}/{rank}")
        return float(raw) if raw else None

    def set_status(self, role: str, rank: int, **status) -> None:
        self.set_json(f"status/{role}/{rank}", status)

    def set_stats(self, role: str, rank: int, stats: dict) -> None:
        self.set_json(f"stats/{role}/{rank}", stats)

    def stats(self, role: str, rank: int) -> dict | None:
        return self.get_json(f"stats/{role}/{rank}")

    def status(self, role: str, rank: int) -> dict:
        return self.get_json(f"status/{role}/{rank}", {}) or {}
