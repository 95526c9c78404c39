"""The control plane: small values in the controller's TCPStore.

Two runs never mix: the controller's store holds one raw key, `llamarl/run_id`, and every
other key lives under `run/<run_id>/` (a PrefixStore). A process whose plan.json names another
run id is refused by `connect_run` before it reads or writes anything.

Keys (all under the run's prefix; values are small — TCPStore drops values over 8 MB):

    run/state                 "running" | "done" | "aborted"
    run/abort_reason          why the run stopped early (names role and rank)
    weights/published         policy version the trainer has published (absent before v0)
    weights/held/<grank>      version a generator rank holds
    extra/<replica>           chunks of a generator replica steps took beyond one each (dynamic
                              sampling; executors/admission.py reads it) (int)
    data/next_chunk/<replica> the chunk a generator replica starts at (resume: first untrained)
    hb/<role>/<rank>          when the rank's main loop last made progress, unix seconds
    pid/<role>/<rank>         the worker's pid, for diagnostics only: the controller uses it only
                              if that process descends from it, and never signals it otherwise
    status/<role>/<rank>      JSON: what the rank is doing now, for the live view
    error/<role>/<rank>       the exception that ended a rank
    exit/<role>/<rank>        the exit code a rank reported just before leaving
    stats/<role>/<rank>       JSON counters of a generator or reward rank (busy/idle, tokens)
    metrics/latest            JSON of the trainer's last metrics line
    node/<K>/hb, node/<K>/exit  `llamarl node K`'s own beat (unix seconds) and its "stopped" mark
    lost/<role>/<rank>        set by the rank's node when it saw the rank's process die
    tp/<replica>@<epoch>/step/<n>  JSON: step n of a tensor-parallel generator replica (of the
                              generator role's membership epoch), announced by its TP rank 0
                              and followed by the others ({"do": "sync" | ...})
    membership/<role>, membership/epoch  restarts of a role group; their sum (the run's epoch)
    data/expect/<replica>/<j> the next chunk of a replica that trainer rank j will consume
    trainer/duplicate_dropped_groups  copies of prompt groups already trained or buffered that
                              reached a trainer rank (a restarted generator starts again at the
                              first chunk not consumed), dropped (int)
    xfer/<epoch>/..., links/... DDMA endpoints per generator epoch; rollout links (links.py)
"""
from __future__ import annotations

import json
import socket
import time
from datetime import timedelta

import torch.distributed as dist


RUN_ID_KEY = "llamarl/run_id"


class ControllerUnreachable(RuntimeError):
    pass


class RunMismatch(RuntimeError):
    pass


def connect(host: str, port: int, timeout_s: float) -> dist.TCPStore:
    return dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=timeout_s))


def bind_store(host: str, port: int, timeout_s: float = 60.0) -> dist.TCPStore:
    """A store server listening on `host` only (TCPStore alone would listen on every address)."""
    family, kind, proto, _, addr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(1024)
        store = dist.TCPStore(host, sock.getsockname()[1], is_master=True, wait_for_workers=False,
                              timeout=timedelta(seconds=timeout_s), master_listen_fd=sock.fileno())
    except BaseException:
        sock.close()
        raise
    sock.detach()  # the store owns the listening fd now; the socket object must not close it
    return store


def wait_listening(host: str, port: int, timeout_s: float) -> None:
    """Return once host:port accepts connections; raise ControllerUnreachable at the deadline.
    (TCPStore's own client retries past its timeout: up to twice it, plus a back-off.)"""
    deadline = time.monotonic() + timeout_s
    last = None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ControllerUnreachable(f"cannot reach the controller's store at {host}:{port} within "
                                        f"controller.startup_timeout_s={timeout_s:g} ({last})")
        try:
            with socket.create_connection((host, port), timeout=min(left, 2.0)):
                return
        except OSError as e:
            last = e.strerror or type(e).__name__
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


def free_port(host: str) -> int:
    """A port free on `host` now (a plan fixes it before its controller starts)."""
    family, kind, proto, _, addr = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0]
    with socket.socket(family, kind, proto) as sock:
        sock.bind(addr)
        return sock.getsockname()[1]


def run_prefix(run_id: str) -> str:
    return f"run/{run_id}"


def serve_run(store: dist.Store, run_id: str) -> dist.Store:
    """The controller's side: announce the run id, hand back the run's own key space."""
    store.set(RUN_ID_KEY, run_id)
    return dist.PrefixStore(run_prefix(run_id), store)


def connect_run(host: str, port: int, run_id: str, timeout_s: float) -> dist.Store:
    """A worker's or node's side: reach the controller within `timeout_s`, then check the run id."""
    t0 = time.monotonic()
    wait_listening(host, port, timeout_s)
    try:
        store = connect(host, port, max(1.0, timeout_s - (time.monotonic() - t0)))
        served = store.get(RUN_ID_KEY).decode()
    except (RuntimeError, OSError) as e:  # DistNetworkError / DistStoreError subclass RuntimeError
        raise ControllerUnreachable(
            f"cannot reach the controller's store at {host}:{port} within controller.startup_timeout_s="
            f"{timeout_s:g} ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from None
    if served != run_id:
        raise RunMismatch(f"the controller at {host}:{port} serves run {served}, but this plan.json is "
                          f"for run {run_id}: refusing to join another run (start this node with that "
                          f"run's plan.json)")
    return dist.PrefixStore(run_prefix(run_id), store)


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

    def add_extra(self, replica: int, n: int = 1) -> int:
        return int(self.store.add(f"extra/{replica}", n))

    def extra(self, replica: int) -> int:
        return self.get_int(f"extra/{replica}")

    def set_next_chunk(self, replica: int, chunk: int) -> None:
        self.store.set(f"data/next_chunk/{replica}", str(chunk))

    def next_chunk(self, replica: int) -> int:
        return int(self.get_str(f"data/next_chunk/{replica}", "0"))

    def set_expected(self, replica: int, trainer_rank: int, chunk: int) -> None:
        """The next chunk of `replica` trainer rank `trainer_rank` will consume (restarts start there)."""
        self.store.set(f"data/expect/{replica}/{trainer_rank}", str(chunk))

    def expected(self, replica: int, trainer_rank: int) -> int | None:
        raw = self.get_str(f"data/expect/{replica}/{trainer_rank}")
        return int(raw) if raw else None

    def add_duplicate_groups(self, n: int) -> int:
        """Copies of prompt groups a trainer rank had trained or buffered already (dropped)."""
        return int(self.store.add("trainer/duplicate_dropped_groups", n))

    def duplicate_groups(self) -> int:
        return self.get_int("trainer/duplicate_dropped_groups")

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

    # ---- tensor-parallel generator replicas ---------------------------------------------
    def announce_replica_step(self, replica: int | str, n: int, step: dict) -> None:
        self.set_json(f"tp/{replica}/step/{n}", step)

    def replica_step(self, replica: int | str, n: int) -> dict | None:
        """Step n of the replica, or None while its TP rank 0 has not announced it."""
        return self.get_json(f"tp/{replica}/step/{n}")
