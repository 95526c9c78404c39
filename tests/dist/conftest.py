"""Shared helper for tests/dist: run a function on N gloo processes.

    def _body(rank, world_size, store, n):    # module level, in a test file
        ...                                   # default gloo group is initialised
        return something_picklable

    def test_something(run_workers):          # the fixture is this module's run_workers
        results = run_workers(_body, 3, 7, timeout_s=60)   # -> [result of rank 0, 1, 2]

(A fixture rather than ``from conftest import``: several test folders may own a
``conftest`` module, and the import would pick whichever came first.) Starting
processes costs seconds on a busy 2-core machine (each imports torch), so a test
module may run all its scenarios in one ``run_workers`` call from a module-scoped
fixture and let each test assert on its own part of the result.

Why subprocesses and not ``multiprocessing.spawn``: a pytest test module (and
this conftest) has no importable dotted name, so a child cannot unpickle a
reference to ``_body``. Each child runs *this file* as a script, loads the test
file by path and calls the function by qualified name. ``args`` must therefore be
plain picklable data (no classes defined in test files).

Ports: the parent holds a ``TCPStore`` server on port 0 (the OS picks a free
port); children connect as clients. The gloo group uses a ``PrefixStore`` so a
test can use the raw ``store`` for its own keys. If any rank fails, the others
are given a short grace period, then killed, and the test fails with every
failing rank's traceback. Each child runs with one thread (2-core machine).
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import pytest

GRACE_AFTER_FAILURE_S = 5.0


@pytest.fixture(scope="session", name="run_workers")
def _run_workers_fixture():
    """The ``run_workers`` function below, for test files (any fixture scope may use it)."""
    return run_workers


@pytest.fixture(scope="session")
def async_run(tmp_path_factory) -> Path:
    """One plain async `llamarl train` run that several test files read (test_runtime,
    test_run_outputs): k = 1, two DDP trainer ranks, a held-out eval every 2 steps with 3
    samples each, TensorBoard on; 4 steps. A run costs ~15 s of start-up on 2 cores."""
    from test_runtime import train

    run_dir = tmp_path_factory.mktemp("async") / "async_run"
    out = train(run_dir, "algorithm.max_offpolicy_steps=1", "resources.trainer.num_devices=2",
                "resources.trainer.strategy=ddp", "resources.cpu_cores=4", "run.eval_every_steps=2",
                "logging.samples_per_eval=3")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return run_dir


def run_workers(fn, world_size: int, *args, timeout_s: float = 60.0) -> list:
    """Run ``fn(rank, world_size, store, *args)`` on ``world_size`` gloo ranks; return per-rank results."""
    import torch.distributed as dist

    if "<locals>" in fn.__qualname__:
        raise ValueError(f"run_workers needs a module-level function, got {fn.__qualname__}")
    server = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    with tempfile.TemporaryDirectory(prefix="llamarl-dist-") as tmp:
        job = {"file": fn.__code__.co_filename, "qualname": fn.__qualname__, "args": args,
               "port": server.port, "world_size": world_size}
        Path(tmp, "job.pkl").write_bytes(pickle.dumps(job))
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        procs = []
        for rank in range(world_size):
            with open(Path(tmp, f"log_{rank}.txt"), "wb") as log_file:
                procs.append(subprocess.Popen([sys.executable, __file__, tmp, str(rank)], env=env,
                                              stdout=log_file, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + timeout_s
        first_failure: float | None = None
        try:
            while any(p.poll() is None for p in procs):
                now = time.monotonic()
                if first_failure is None and any(p.returncode not in (None, 0) for p in procs):
                    first_failure = now
                if now > deadline or (first_failure is not None and now > first_failure + GRACE_AFTER_FAILURE_S):
                    break
                time.sleep(0.05)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        failures = []
        for rank, p in enumerate(procs):
            err = Path(tmp, f"error_{rank}.txt")
            if err.exists():
                failures.append(f"--- rank {rank} raised:\n{err.read_text()}")
            elif p.returncode != 0:
                log = Path(tmp, f"log_{rank}.txt").read_text(errors="replace")[-4000:]
                why = "timed out or was killed" if p.returncode < 0 else f"exited with code {p.returncode}"
                failures.append(f"--- rank {rank} {why} (limit {timeout_s} s); output tail:\n{log}")
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)
        return [pickle.loads(Path(tmp, f"result_{rank}.pkl").read_bytes()) for rank in range(world_size)]


def _load_function(file: str, qualname: str):
    spec = importlib.util.spec_from_file_location(f"_dist_worker_{Path(file).stem}", file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    obj = module
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _worker_main(tmp: str, rank: int) -> int:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    job = pickle.loads(Path(tmp, "job.pkl").read_bytes())
    try:
        sys.path[:0] = [str(Path(__file__).parent), str(Path(__file__).parents[1])]  # + tests/ (hf_tiny)
        fn = _load_function(job["file"], job["qualname"])
        store = dist.TCPStore("127.0.0.1", job["port"], is_master=False, wait_for_workers=False)
        dist.init_process_group("gloo", store=dist.PrefixStore("pg", store), rank=rank,
                                world_size=job["world_size"])
        result = fn(rank, job["world_size"], store, *job["args"])
        Path(tmp, f"result_{rank}.pkl").write_bytes(pickle.dumps(result))
    except BaseException:
        Path(tmp, f"error_{rank}.txt").write_text(traceback.format_exc())
        os._exit(1)  # no group teardown: peers may be blocked in a collective with us
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1], int(sys.argv[2])))
