"""``RewardPool``: score batches with persistent worker processes and a per-item deadline.

Flow per item: ``prepare`` in this process (bounded; settles most items) -> if it still
needs a symbolic check, the item goes to an idle worker and must answer within
``timeout_s`` of being sent, else the worker is killed with its whole process tree
(``proc_tree.py``) and respawned, and the item scores 0.0; the other workers go on meanwhile,
so a reward that hangs costs one timeout per item, ``num_workers`` at a time. A worker that
dies (crash, memory limit) is respawned the same way. When a ``score`` call ends, whatever
its tasks started and left running is killed (``WorkerHandle.sweep``). Workers start
when the pool is created (in the background) so their imports overlap other work; a
worker's start-up is not counted against ``timeout_s``.

``stats`` counts: items, in_process (settled without a worker), isolated, timeouts (items),
worker_crashes, errors (items whose verifier raised, whose custom reward's worker died, or
whose custom reward returned no finite number within ``reward.max_abs``; scored 0.0),
restarts. ``first_error`` / ``first_timeout`` keep the first of each for the log.
A custom reward (``custom.py``) settles nothing in this process; with ``batch = True`` each
worker gets one share of a ``score`` call as two lists, due ``timeout_s`` per item.
"""
from __future__ import annotations

import time
from multiprocessing.connection import wait

from llamarl_core.config.schema import RewardResources, RewardSettings  # the defaults: one source
from llamarl_core.rewards.specs import get_spec
from llamarl_core.rewards.worker import WorkerHandle


class RewardPool:
    """Context manager: ``with RewardPool("math", num_workers=2) as pool: pool.score(c, r)``."""

    def __init__(self, name: str, num_workers: int = RewardResources.workers,
                 timeout_s: float = RewardResources.timeout_s,
                 max_abs: float = RewardSettings.max_abs, on_progress=None) -> None:
        """``on_progress()`` is called each time an item is settled (scored, failed or timed
        out): a role's liveness signal, so a reward that hangs on every sample (each costs one
        timeout) does not look like a hung rank to the controller's heartbeat watch."""
        if num_workers < 1:
            raise ValueError(f"RewardPool num_workers must be >= 1, got {num_workers}")
        if not timeout_s > 0:
            raise ValueError(f"RewardPool timeout_s must be > 0, got {timeout_s}")
        self.spec = get_spec(name)
        self.name, self.num_workers, self.timeout_s = name, num_workers, timeout_s
        self.on_progress = on_progress or (lambda: None)
        self.stats = dict.fromkeys(
            ("items", "in_process", "isolated", "timeouts", "worker_crashes", "errors",
             "restarts"), 0,
        )
        self.first_error: str | None = None    # the first error (a custom reward's traceback)
        self.first_timeout: str | None = None  # what the first timeout was
        self._workers: list[WorkerHandle] = []
        if self.spec.isolated is not None:
            self._workers = [WorkerHandle(name, max_abs=max_abs, index=w) for w in range(num_workers)]

    def __enter__(self) -> "RewardPool":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        for worker in self._workers:
            worker.close()
        self._workers = []

    def score(self, completions: list[str], references: list) -> list[float]:
        """One float per (completion, reference) pair, in order; never raises on content.
        For a custom reward each reference is the example dict its function receives."""
        if len(completions) != len(references):
            raise ValueError(
                f"score got {len(completions)} completions but {len(references)} references"
            )
        scores = [0.0] * len(completions)
        pending: list[tuple[int, tuple]] = []
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
            try:
                self._run_isolated(self._tasks(pending), scores)
            finally:  # nothing a user's reward started in the call outlives it (ours start none)
                for worker in self._workers if self.spec.custom else ():
                    worker.sweep()
        return scores

    def _tasks(self, pending: list[tuple[int, tuple]]) -> list[tuple[list[int], tuple]]:
        """(item indices, worker args) per task: one item each, or for a custom reward with
        ``batch = True`` one contiguous share of the items per worker, as two lists."""
        worker = self._workers[0]
        worker.wait_ready()  # its ready message says whether the function takes lists
        if not worker.info.get("batch"):
            return [([i], args) for i, args in pending]
        share = -(-len(pending) // len(self._workers))
        parts = [pending[k:k + share] for k in range(0, len(pending), share)]
        return [([i for i, _ in part], ([a[0] for _, a in part], [a[1] for _, a in part]))
                for part in parts]

    def _run_isolated(self, tasks: list, scores: list[float]) -> None:
        """Each task on an idle worker, due ``timeout_s`` per item after it was sent."""
        queue = list(enumerate(tasks))[::-1]  # pop() from the end keeps input order
        busy: dict[int, tuple[int, float]] = {}  # worker index -> (task index, deadline)
        while queue or busy:
            for w, worker in enumerate(self._workers):
                if w not in busy and queue:
                    t, (items, args) = queue.pop()
                    try:
                        worker.send(t, *args)  # waits for start-up if needed
                    except OSError:  # it died while idle: replace it, then resend
                        self.stats["worker_crashes"] += 1
                        self._restart(w)
                        worker = self._workers[w]
                        worker.send(t, *args)
                    busy[w] = (t, time.monotonic() + self.timeout_s * len(items))
            next_deadline = min(deadline for _, deadline in busy.values())
            conns = {self._workers[w].conn: w for w in busy}
            for conn in wait(list(conns), timeout=max(0.0, next_deadline - time.monotonic())):
                self.on_progress()
                w = conns[conn]
                t, _ = busy.pop(w)
                items = tasks[t][0]
                try:
                    task_id, value, errors = conn.recv()
                except (EOFError, OSError):
                    self.stats["worker_crashes"] += 1
                    code = self._workers[w].process.poll()
                    self._restart(w)
                    if self.spec.custom:  # the user's function took its process down
                        self._note_error(len(items), f"the reward worker process died (exit code "
                                                     f"{code}) while scoring")
                    continue
                if task_id != t:
                    continue
                for i, v in zip(items, value if isinstance(value, list) else [value]):
                    scores[i] = v
                for k, error in errors:  # (position in the task, why) per item that scored 0
                    self._note_error(1, error and f"reward {self.name}, sample {items[k]}: {error}")
            now = time.monotonic()
            for w, (t, deadline) in list(busy.items()):
                if now >= deadline:
                    self.on_progress()
                    busy.pop(w)
                    n = len(tasks[t][0])
                    self.stats["timeouts"] += n
                    if self.first_timeout is None:
                        self.first_timeout = (f"{self.name}: {n} item(s) still unscored after "
                                              f"{self.timeout_s * n:g} s (resources.reward.timeout_s="
                                              f"{self.timeout_s:g} per item): scored 0, worker restarted")
                    self._restart(w)

    def _note_error(self, n_items: int, error: str | None) -> None:
        self.stats["errors"] += n_items
        if self.first_error is None and error:
            self.first_error = error

    def _restart(self, w: int) -> None:
        self.stats["restarts"] += 1
        self._workers[w].restart()
