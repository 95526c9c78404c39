"""``EnvPool``: a role's side of the environment workers (worker.py), non-blocking.

    pool.reset(episode, example) / pool.step(episode, text)   send, return at once
    pool.poll(timeout_s) -> [Reply, ...]                       whatever has been answered

The caller (the generator's episode loop, eval) is one thread that keeps many episodes going
at once: it sends a request for each episode whose model turn is done and collects replies
as they come, so a slow tool delays only its own episode. An episode lives in one worker
(its environment object is state there); a new one goes to the worker with the fewest open
episodes. One request per episode at a time.

Failures end the episode, never the run: an environment that raises or breaks the protocol
(envs/protocol.py) is answered ``failed`` and dropped (``errors``). A request not answered
within ``step_timeout_s`` of being sent kills its worker's process tree: that episode fails
with the timeout, every other episode open on the worker fails with "its worker was killed",
and the worker is started again (``timeouts``, ``restarts``). A worker that dies is handled
the same way (``crashes``). An episode whose worker died while it had no request pending
fails on its next ``step``. Start-up does not count against ``step_timeout_s``: requests for
a worker not ready yet wait in this process; a worker not ready within ``startup_timeout_s``,
or whose entry/tools do not load, raises one ``RuntimeError``.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from multiprocessing.connection import wait
from typing import Optional

from llamarl_core.config.schema import EnvConfig  # the defaults: one source
from llamarl_core.envs.protocol import STEP_COUNTS
from llamarl_core.envs.worker import MAX_MESSAGE_BYTES, EnvWorker, encode

STATS = ("episodes", "steps", "timeouts", "crashes", "errors", "restarts")


@dataclass(frozen=True)
class EnvSpec:
    """What a worker builds per episode: ``entry``'s class, else the tool env over ``tools``."""

    entry: Optional[str]
    tools: Optional[str]
    tool_parser: str = EnvConfig.tool_parser
    max_message_chars: int = EnvConfig.max_message_chars

    @classmethod
    def from_config(cls, env: EnvConfig) -> "EnvSpec":
        return cls(env.entry, env.tools, env.tool_parser, env.max_message_chars)


@dataclass
class Reply:
    episode: int
    kind: str                 # "reset" | "step"
    messages: list[dict]      # what the environment says (contents cut to max_message_chars)
    reward: Optional[float]   # this step's reward (None: none given; always None for reset)
    done: bool
    counts: dict              # {"tool_calls": int, "tool_errors": int} of this step
    error: Optional[str]      # why it failed (one line, then the traceback's tail); None if fine
    failed: bool              # the episode cannot go on: it is forgotten here
    seconds: float            # wall time from reset()/step() to the reply


@dataclass
class _Request:
    episode: int
    kind: str
    data: bytes
    sent_at: float                    # when reset()/step() was called
    deadline: Optional[float] = None  # set when written to a ready worker


class EnvPool:
    """Context manager: ``with EnvPool(EnvSpec("env.py:Guess", None)) as pool: ...``."""

    def __init__(self, spec: EnvSpec, workers: int = EnvConfig.workers,
                 step_timeout_s: float = EnvConfig.step_timeout_s, startup_timeout_s: float = 120.0) -> None:
        if not (spec.entry or spec.tools):
            raise ValueError("EnvPool needs an EnvSpec with entry or tools")
        if workers < 1 or not step_timeout_s > 0 or not startup_timeout_s > 0:
            raise ValueError(f"EnvPool needs workers >= 1 and positive timeouts, got {workers}, "
                             f"{step_timeout_s}, {startup_timeout_s}")
        self.spec, self.step_timeout_s, self.startup_timeout_s = spec, step_timeout_s, startup_timeout_s
        self.stats = dict.fromkeys(STATS, 0)
        self._workers = [EnvWorker(asdict(spec), k) for k in range(workers)]  # start in the background
        self._on: list[set[int]] = [set() for _ in range(workers)]    # open episodes per worker
        self._backlog: list[list[_Request]] = [[] for _ in range(workers)]  # sent before it was ready
        self._open: dict[int, int] = {}            # episode -> its worker
        self._inflight: dict[int, _Request] = {}   # episode -> its unanswered request
        self._closing: set[int] = set()            # closed with a request unanswered
        self._lost: dict[int, str] = {}            # episode -> why its worker went away meanwhile
        self._outbox: list[Reply] = []
        self._tools: Optional[list[dict]] = None

    def __enter__(self) -> "EnvPool":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @property
    def tools(self) -> list[dict]:
        """The tools' JSON schemas ([] without tools), from the first worker that is ready."""
        while self._tools is None:
            self._pump(0.05)
        return self._tools

    @property
    def pending(self) -> int:
        """Requests sent whose reply ``poll`` has not returned yet."""
        return len(self._inflight.keys() - self._closing) + len(self._outbox)

    def reset(self, episode: int, example: dict) -> None:
        if episode in self._open or episode in self._inflight:
            raise RuntimeError(f"episode {episode} is already open")
        self._lost.pop(episode, None)
        w = min(range(len(self._workers)), key=lambda k: (len(self._on[k]), k))
        self._open[episode] = w
        self._on[w].add(episode)
        self.stats["episodes"] += 1
        self._request(episode, "reset", {"op": "reset", "episode": episode, "example": example})

    def step(self, episode: int, text: str) -> None:
        if episode in self._inflight:
            raise RuntimeError(f"episode {episode} already has a request unanswered")
        self.stats["steps"] += 1
        if episode in self._lost:
            self._outbox.append(_failed(episode, "step", self._lost.pop(episode), time.monotonic()))
            return
        if episode not in self._open:
            raise KeyError(f"episode {episode} is not open (reset it first)")
        self._request(episode, "step", {"op": "step", "episode": episode, "text": text})

    def close_episode(self, episode: int) -> None:
        """Forget ``episode`` and drop its environment in the worker; no reply."""
        self._lost.pop(episode, None)
        self._outbox = [r for r in self._outbox if r.episode != episode]
        if episode in self._inflight:
            self._closing.add(episode)  # closed in the worker once its reply is in
        elif episode in self._open:
            w = self._forget(episode)
            try:
                self._workers[w].send({"op": "close", "episode": episode})
            except OSError:
                pass  # the worker is gone: poll notices

    def poll(self, timeout_s: float = 0.0) -> list[Reply]:
        """Replies ready now, failures included; waits up to ``timeout_s`` for the first."""
        deadline = time.monotonic() + timeout_s
        while True:
            self._pump(0.0 if self._outbox else max(0.0, deadline - time.monotonic()))
            if self._outbox or time.monotonic() >= deadline:
                break
        replies, self._outbox = self._outbox, []
        return replies

    def close(self) -> None:
        """Kill every worker with its process tree."""
        for worker in self._workers:
            worker.kill()
        self._workers, self._on, self._backlog = [], [], []
        self._open.clear(), self._inflight.clear(), self._closing.clear(), self._lost.clear()

    # -- internals ---------------------------------------------------------------------------

    def _request(self, episode: int, kind: str, message: dict) -> None:
        now, data = time.monotonic(), encode(message)
        if len(data) > MAX_MESSAGE_BYTES:
            self.close_episode(episode)
            self._outbox.append(_failed(episode, kind, f"the {kind} request is {len(data)} bytes, "
                                        f"over the {MAX_MESSAGE_BYTES}-byte cap", now))
            return
        request = self._inflight[episode] = _Request(episode, kind, data, now)
        w = self._open[episode]
        if self._workers[w].ready:
            self._write(w, request)
        else:
            self._backlog[w].append(request)

    def _write(self, w: int, request: _Request) -> None:
        request.deadline = time.monotonic() + self.step_timeout_s
        try:
            self._workers[w].conn.send_bytes(request.data)
        except OSError:
            self._lose_worker(w, "crashes", f"env worker {w} died", set())

    def _pump(self, wait_s: float) -> None:
        """Read what the workers have sent (waiting up to ``wait_s``, less when a deadline comes
        first), then fail what is overdue."""
        if not self._workers:
            raise RuntimeError("EnvPool is closed")
        due = [r.deadline for r in self._inflight.values() if r.deadline is not None]
        due += [w.started_at + self.startup_timeout_s for w in self._workers if not w.ready]
        wait_s = max(0.0, min([wait_s] + [d - time.monotonic() for d in due]))
        conns = {w.conn: k for k, w in enumerate(self._workers)}
        for conn in wait(list(conns), wait_s):
            self._drain(conns[conn])
        self._expire()

    def _drain(self, w: int) -> None:
        worker = self._workers[w]
        while True:
            try:
                if not worker.conn.poll(0):
                    return
                message = worker.recv()
            except (EOFError, OSError, ValueError) as exc:
                if not worker.ready:
                    raise RuntimeError(f"env worker {w} exited while starting (exit code "
                                       f"{_exit_code(worker)}): env.entry={self.spec.entry} "
                                       f"env.tools={self.spec.tools}") from None
                self._lose_worker(w, "crashes", f"env worker {w} died (exit code {_exit_code(worker)}"
                                                f"{'' if isinstance(exc, EOFError) else f'; {exc}'})", set())
                return
            if worker.ready:
                self._answer(w, message)
            elif message.get("ready") is True:
                self._on_ready(w, message)
            else:
                raise RuntimeError(f"env worker could not load env.entry={self.spec.entry} "
                                   f"env.tools={self.spec.tools}: {message.get('error')}")

    def _on_ready(self, w: int, message: dict) -> None:
        self._workers[w].ready = True
        if self._tools is None:
            self._tools = list(message.get("tools") or [])
        backlog, self._backlog[w] = self._backlog[w], []
        for request in backlog:
            if self._workers[w].ready and self._inflight.get(request.episode) is request:
                self._write(w, request)  # (a failed write restarts the worker: the rest failed)

    def _answer(self, w: int, message: dict) -> None:
        episode = message.get("episode")
        request = self._inflight.get(episode)
        if request is None or self._open.get(episode) != w or request.kind != message.get("kind"):
            return  # an answer to an episode already failed here
        del self._inflight[episode]
        failed = bool(message["failed"])
        if failed:
            self.stats["errors"] += 1
            self._forget(episode)  # the worker dropped its environment already
        if episode in self._closing:
            self._closing.discard(episode)
            if not failed:
                self._forget(episode)
                self._workers[w].send({"op": "close", "episode": episode})
            return
        reward = message["reward"]
        self._outbox.append(Reply(
            episode, request.kind, list(message["messages"]), None if reward is None else float(reward),
            bool(message["done"]), {k: int(message["counts"].get(k, 0)) for k in STEP_COUNTS},
            message["error"], failed, time.monotonic() - request.sent_at))

    def _expire(self) -> None:
        now = time.monotonic()
        for w, worker in enumerate(self._workers):
            if not worker.ready and now - worker.started_at > self.startup_timeout_s:
                raise RuntimeError(f"env worker {w} did not start within {self.startup_timeout_s:g} s "
                                   f"(env.entry={self.spec.entry} env.tools={self.spec.tools})")
            late = {e for e in self._on[w] if e in self._inflight
                    and (self._inflight[e].deadline or now) < now}
            if late:
                self.stats["timeouts"] += len(late)
                self._lose_worker(w, None, f"env worker {w} was killed: another episode's request "
                                           f"timed out", late)

    def _lose_worker(self, w: int, counter: Optional[str], why: str, late: set[int]) -> None:
        """Fail every episode open on worker ``w``, then start it again."""
        now = time.monotonic()
        if counter:
            self.stats[counter] += 1
        for episode in sorted(self._on[w]):
            request = self._inflight.pop(episode, None)
            self._forget(episode)
            if episode in self._closing:
                self._closing.discard(episode)
            elif request is None:
                self._lost[episode] = why
            else:
                error = (f"{request.kind} did not finish within env.step_timeout_s="
                         f"{self.step_timeout_s:g} s: its worker was killed" if episode in late else why)
                self._outbox.append(_failed(episode, request.kind, error, request.sent_at, now))
        self._backlog[w] = []
        self.stats["restarts"] += 1
        self._workers[w].restart()

    def _forget(self, episode: int) -> int:
        w = self._open.pop(episode)
        self._on[w].discard(episode)
        return w


def _failed(episode: int, kind: str, error: str, sent_at: float, now: Optional[float] = None) -> Reply:
    return Reply(episode, kind, [], None, True, dict.fromkeys(STEP_COUNTS, 0), error, True,
                 (now or time.monotonic()) - sent_at)


def _exit_code(worker: EnvWorker):
    try:
        return worker.process.wait(timeout=1.0)
    except Exception:  # noqa: BLE001 - still running (a broken message): killed on restart
        return None
