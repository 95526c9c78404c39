"""One environment worker process: a user's environments run here, never in a role's process.

The process is started and joined like a reward worker (rewards/worker.py): a fresh
interpreter (``python -m llamarl_core.envs.worker_entry``) on one end of a socket pair, in a
session of its own, dying with its parent (PDEATHSIG and a watchdog) and a child subreaper,
so that whatever a user's environment forks stays in its tree and is killed with it
(rewards/proc_tree.py). Its stdout/stderr go through the reward worker's output cap.

Unlike a reward worker it holds state: each episode's environment object lives here from
``reset`` to ``close``, and requests of different episodes run concurrently on a bounded
thread pool, so one episode's tool that sleeps does not hold up another's step. One sender
lock serialises writes to the connection.

No pickle crosses the boundary: the child runs user code, so every message, both ways, is
JSON in ``send_bytes``/``recv_bytes``, with a size cap. The child answers a reply over the
cap with a failed reply instead; a message over the cap that reaches the parent anyway marks
the worker broken (the pool kills it).

Protocol (one JSON object per message). Child -> parent, once: ``{"ready": true, "tools":
[schemas]}`` or ``{"ready": false, "error": why}`` (the entry or tools did not load). Parent
-> child: ``{"op": "reset", "episode": n, "example": {...}}``, ``{"op": "step", "episode": n,
"text": s}``, ``{"op": "close", "episode": n}`` (no reply). Child -> parent per request:
``{"episode", "kind", "messages", "reward", "done", "counts", "error", "failed"}``.
"""
from __future__ import annotations

import json
import os
import signal
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection

from llamarl_core.envs.protocol import STEP_COUNTS, check_messages, check_step
from llamarl_core.rewards.custom import load_function
from llamarl_core.rewards.child import ChildHandle, spawn
from llamarl_core.rewards.proc_tree import become_subreaper, exited_children, kill_descendants
from llamarl_core.rewards.worker import _die_with_parent

MAX_MESSAGE_BYTES = 8 * 1024**2   # one JSON message either way; a reply over it fails its episode
MAX_ERROR_CHARS = 2000            # an error: its last line first, then the traceback's tail
EPISODE_THREADS = 32              # requests of different episodes that run at once in one worker


def encode(obj) -> bytes:
    return json.dumps(obj, default=str).encode()  # an example field JSON lacks (a date) as text


def describe_error(exc: BaseException) -> str:
    """One line naming the error, then the tail of its traceback (what a log needs)."""
    line = f"{type(exc).__name__}: {exc}".splitlines()[0][:300] if str(exc) else type(exc).__name__
    return (line + "\n" + traceback.format_exc()[-MAX_ERROR_CHARS:]).strip()


def _cut(messages: list[dict], max_chars: int) -> list[dict]:
    return [{**m, "content": m["content"][:max_chars]} if isinstance(m.get("content"), str) else m
            for m in messages]


def _close(env) -> None:
    try:
        env.close()
    except Exception:  # noqa: BLE001 - an environment that fails to close ends anyway
        pass


def _build_factory(spec: dict):
    """(a callable making one environment per episode, the tools' JSON schemas)."""
    schemas, tools = [], None
    if spec.get("tools"):
        from llamarl_core.envs.tools import load_tools, tool_schemas

        tools = load_tools(spec["tools"])
        schemas = tool_schemas(tools)
    if spec.get("entry"):
        from llamarl_core.envs.openenv_adapter import wrap_if_openenv

        cls = load_function(spec["entry"])
        return (lambda: wrap_if_openenv(cls())), schemas  # an OpenEnv environment speaks our protocol
    if tools is None:
        raise ValueError("an environment worker needs env.entry or env.tools")
    from llamarl_core.envs.tool_env import ToolEnv

    return (lambda: ToolEnv(tools, spec["tool_parser"], spec["max_message_chars"])), schemas


class _Child:
    """The child's state: the episodes' environments and the one sender of replies."""

    def __init__(self, conn: Connection, factory, max_chars: int) -> None:
        self.conn, self.factory, self.max_chars = conn, factory, max_chars
        self.envs: dict[int, object] = {}
        self.send_lock = threading.Lock()  # the one sender; held while a reply is written
        self.count_lock = threading.Lock()  # apart: the reader never waits on a blocked send
        self.pid = os.getpid()
        self.running = 0  # requests being answered; orphans are reaped only at 0

    def send(self, obj) -> None:
        with self.send_lock:
            self.conn.send_bytes(encode(obj))

    def answer(self, request: dict) -> None:
        episode, kind = request["episode"], request["op"]
        reply = {"episode": episode, "kind": kind, "messages": [], "reward": None, "done": False,
                 "counts": dict.fromkeys(STEP_COUNTS, 0), "error": None, "failed": False}
        try:
            if kind == "reset":
                env = self.factory()
                messages = check_messages(env.reset(request["example"]), "reset")
                self.envs[episode] = env
            else:
                messages, reward, done, counts = check_step(self.envs[episode].step(request["text"]))
                reply.update(reward=reward, done=done, counts=counts)
            reply["messages"] = _cut(messages, self.max_chars)
            data = encode(reply)
            if len(data) > MAX_MESSAGE_BYTES:
                raise ValueError(f"{kind} returned {len(data)} bytes of messages, over the "
                                 f"{MAX_MESSAGE_BYTES}-byte cap of one reply")
        except BaseException as exc:  # noqa: BLE001 - the user's env failed: its episode ends
            self.envs.pop(episode, None)
            reply.update(messages=[], reward=None, done=True, failed=True, error=describe_error(exc))
            data = encode(reply)
        if os.getpid() != self.pid:  # a child the env os.fork()ed returned here: not the worker
            os._exit(0)
        with self.send_lock:
            self.conn.send_bytes(data)
        with self.count_lock:
            self.running -= 1

    def serve(self) -> None:
        with ThreadPoolExecutor(EPISODE_THREADS, thread_name_prefix="episode") as threads:
            while True:
                try:
                    request = json.loads(self.conn.recv_bytes(MAX_MESSAGE_BYTES))
                except (EOFError, OSError):
                    break
                if request["op"] == "close":
                    env = self.envs.pop(request["episode"], None)
                    if callable(getattr(env, "close", None)):  # OpenEnv's; one's own may have one
                        threads.submit(_close, env)
                    continue
                with self.count_lock:
                    if self.running == 0:  # no user code running: reaping steals no exit code
                        for _ in exited_children():
                            pass
                    self.running += 1
                threads.submit(self.answer, request)
        kill_descendants(self.pid)  # the parent is gone: take the env's processes along
        os._exit(0)


def worker_main(conn: Connection, spec: dict, parent_is_main_thread: bool) -> None:
    """Entry point of the child process: load the entry/tools, say ready, serve until EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent owns Ctrl-C and shutdown
    _die_with_parent(parent_is_main_thread)
    become_subreaper()
    try:
        factory, schemas = _build_factory(spec)
    except BaseException as exc:  # noqa: BLE001 - one clear error in the parent
        conn.send_bytes(encode({"ready": False, "error": describe_error(exc)}))
        return
    child = _Child(conn, factory, int(spec["max_message_chars"]))
    child.send({"ready": True, "tools": schemas})
    child.serve()


class EnvWorker(ChildHandle):
    """Parent-side handle of one worker: start it, send and receive JSON, kill its tree."""

    def __init__(self, spec: dict, index: int) -> None:
        self.spec, self.index = spec, index
        self.start()

    def start(self) -> None:
        self.process, self.conn = spawn("llamarl_core.envs.worker_entry", [json.dumps(self.spec)],
                                        f"env worker {self.index}")
        self.started_at, self.ready = time.monotonic(), False

    def send(self, obj) -> None:
        self.conn.send_bytes(encode(obj))

    def recv(self) -> dict:
        """The next message; EOFError/OSError/ValueError when the worker is gone or broken."""
        message = json.loads(self.conn.recv_bytes(MAX_MESSAGE_BYTES))
        if not isinstance(message, dict):
            raise ValueError(f"env worker {self.index} sent a {type(message).__name__}")
        return message

    def exit_code(self):
        return self.process.poll() if self.process is not None else None

