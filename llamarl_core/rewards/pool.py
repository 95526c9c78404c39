"""``RewardPool``: score batches with persistent worker processes and a per-item deadline.

Flow per item: ``prepare`` in this process (bounded; settles most items) -> if it still
needs a symbolic check, the item goes to an idle worker and must answer within
``timeout_s`` of being sent, else the worker is killed and respawned and the item scores
0.0. A worker that dies (crash, memory limit) is respawned the same way. Workers start
when the pool is created (in the background) so their imports overlap other work; a
worker's start-up is not counted against ``timeout_s``.

``stats`` counts: items, in_process (settled without a worker), isolated, timeouts,
worker_crashes, errors (verifier raised; scored 0.0), restarts.
"""
from __future__ import annotations

import time
from multiprocessing.connection import wait

from llamarl_core.rewards.specs import get_spec
from llamarl_core.rewards.worker import WorkerHandle


class RewardPool:
    """Context manager: ``with RewardPool("math", num_workers=2) as pool: pool.score(c, r)``."""

    def __init__(self, name: str, num_workers: int = 1, timeout_s: float = 2.0) -> None:
        if num_workers < 1:
            raise ValueError(f"RewardPool num_workers must be >= 1, got {num_workers}")
        if not timeout_s > 0:
            raise ValueError(f"RewardPool timeout_s must be > 0, got {timeout_s}")
        self.spec = get_spec(name)
        self.name, self.num_workers, self.timeout_s = name, num_workers, timeout_s
        self.stats = dict.fromkeys(
            ("items", "in_process", "isolated", "timeouts", "worker_crashes", "errors",
             "restarts"), 0,
        )
        self._workers: list[WorkerHandle] = []
        if self.spec.isolated is not None:
            self._workers = [WorkerHandle(name) for _ in range(num_workers)]

    def __enter__(self) -> "RewardPool":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        for worker in self._workers:
            worker.close()
        self._workers = []

    def score(self, completions: list[str], references: list[str]) -> list[float]:
        """One float per (completion, reference) pair, in order; never raises on content."""
        if len(completions) != len(references):
            raise ValueError(
                f"score got {len(completions)} completions but {len(references)} references"
            )
        scores = [0.0] * len(completions)
        pending: list[tuple[int, tuple[str, str]]] = []
        for i, (completion, reference) in enumerate(zip(completions, references)):
            prepared = self.spec.prepare(completion, reference)
            if isinstance(prepared, float):
                scores[i] = prepared
                self.stats["in_process"] += 1
            else:
                pending.append((i, prepared))
        self.stats["items"] += len(completions)
        self.stats["isolated"] += len(pending)
        if pending:
            if not self._workers:
                raise RuntimeError(f"RewardPool({self.name!r}) is closed")
            self._run_isolated(pending, scores)
        return scores

    def _run_isolated(self, pending: list, scores: list[float]) -> None:
        pending = pending[::-1]  # pop() from the end keeps input order
        busy: dict[int, tuple[int, float]] = {}  # worker index -> (item index, deadline)
        while pending or busy:
            for w, worker in enumerate(self._workers):
                if w not in busy and pending:
                    item, (answer, reference) = pending.pop()
                    try:
                        worker.send(item, answer, reference)  # waits for start-up if needed
                    except OSError:  # it died while idle: replace it, then resend
                        self.stats["worker_crashes"] += 1
                        self._restart(w)
                        worker = self._workers[w]
                        worker.send(item, answer, reference)
                    busy[w] = (item, time.monotonic() + self.timeout_s)
            next_deadline = min(deadline for _, deadline in busy.values())
            conns = {self._workers[w].conn: w for w in busy}
            for conn in wait(list(conns), timeout=max(0.0, next_deadline - time.monotonic())):
                w = conns[conn]
                item, _ = busy.pop(w)
                try:
                    task_id, value, error = conn.recv()
                except (EOFError, OSError):
                    self.stats["worker_crashes"] += 1
                    self._restart(w)
                    continue
                scores[item] = value if task_id == item else 0.0
                self.stats["errors"] += error is not None
            now = time.monotonic()
            for w, (item, deadline) in list(busy.items()):
                if now >= deadline:
                    busy.pop(w)
                    scores[item] = 0.0
                    self.stats["timeouts"] += 1
                    self._restart(w)

    def _restart(self, w: int) -> None:
        self.stats["restarts"] += 1
        self._workers[w].restart()
