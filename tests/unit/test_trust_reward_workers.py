"""#44 cases 6 and 7 and the output cap: a user's reward cannot hurt the run. Whatever a reward
forks or spawns (a double-forked sleeper that calls setsid, an os.fork child) is gone once
score() returns; a reward that hangs costs one timeout per sample, in parallel across workers,
scores 0 and is counted; a reward that prints without end fills at most 1 MiB of the log.
Before: a detached-child reward left 568 orphans, an os.fork one 552, and a hanging one never
let the run end."""
import os
import time

import pytest

from llamarl_core.rewards import RewardPool
from llamarl_core.rewards.output_cap import MAX_OUTPUT_BYTES

REWARD_FILE = """
import os, sys, time

def _note(example):
    with open(os.path.join(example["dir"], "pids"), "a") as f:
        f.write(f"{os.getpid()}\\n")

def _detached_sleeper(example):
    if os.fork() == 0:            # child: leave the worker's session, fork the sleeper, exit
        os.setsid()
        noted, note = os.pipe()
        if os.fork() == 0:
            _note(example)
            os.write(note, b"x")
            os.execvp("sleep", ["sleep", "4321.5"])
        os.read(noted, 1)         # the sleeper's pid is on file before anyone may kill it
        os._exit(0)
    os.wait()                     # the sleeper is now an orphan

def score(completion, example):
    if completion == "double_fork":
        _detached_sleeper(example)
    elif completion == "fork_sleep":
        noted, note = os.pipe()
        if os.fork() == 0:
            _note(example)
            os.write(note, b"x")
            time.sleep(4321)      # a copy of the worker, asleep in the reward
            os._exit(0)
        os.read(noted, 1)
    elif completion == "fork_return":
        os.fork()                 # both copies return; only the worker may answer
    elif completion == "hang":
        _detached_sleeper(example)
        time.sleep(10**6)
    elif completion == "print":
        chunk = "x" * 1023 + "\\n"
        for k in range(25_000):   # 25 MB through Python, 25 MB straight to the file descriptor
            sys.stdout.write(chunk)
            os.write(1, chunk.encode())
    return 1.0
"""


@pytest.fixture
def reward(tmp_path):
    path = tmp_path / "hostile_reward.py"
    path.write_text(REWARD_FILE)
    return f"{path}:score"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _spawned(tmp_path, count: int, within_s: float = 5.0) -> list[int]:
    path, deadline = tmp_path / "pids", time.monotonic() + within_s
    while time.monotonic() < deadline:
        pids = [int(p) for p in path.read_text().split()] if path.exists() else []
        if len(pids) >= count:
            return pids
        time.sleep(0.02)
    raise AssertionError(f"expected {count} spawned pids in {path}")


def _gone(pids: list[int], within_s: float = 3.0) -> bool:
    deadline = time.monotonic() + within_s
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not any(_alive(p) for p in pids)


@pytest.mark.parametrize("mode", ["double_fork", "fork_sleep"])
def test_what_a_reward_forks_is_gone_when_score_returns(reward, tmp_path, mode):
    with RewardPool(reward, num_workers=2, timeout_s=10.0) as pool:
        assert pool.score([mode] * 3, [{"dir": str(tmp_path)}] * 3) == [1.0] * 3
        pids = _spawned(tmp_path, 3)
        assert _gone(pids), [p for p in pids if _alive(p)]
        assert pool.stats["errors"] == pool.stats["timeouts"] == 0
        assert pool.score(["ok"], [{"dir": str(tmp_path)}]) == [1.0]  # the workers go on


def test_an_os_fork_child_that_returns_never_answers_for_the_worker(reward, tmp_path):
    with RewardPool(reward, num_workers=1, timeout_s=10.0) as pool:
        for _ in range(3):
            assert pool.score(["fork_return", "ok"], [{"dir": str(tmp_path)}] * 2) == [1.0, 1.0]
        assert pool.stats["worker_crashes"] == pool.stats["errors"] == 0


def test_a_hanging_reward_costs_one_timeout_per_sample_in_parallel_and_leaves_nothing(reward, tmp_path):
    timeout_s, workers, samples = 1.0, 2, 4
    settled = []  # the reward rank's liveness signal: a hang on every sample is still progress
    with RewardPool(reward, num_workers=workers, timeout_s=timeout_s,
                    on_progress=lambda: settled.append(1)) as pool:
        pool.score(["ok"], [{"dir": str(tmp_path)}])  # both workers started: start-up not timed
        start = time.monotonic()
        scores = pool.score(["hang"] * samples, [{"dir": str(tmp_path)}] * samples)
        elapsed_s = time.monotonic() - start
        assert scores == [0.0] * samples and pool.stats["timeouts"] == samples
        assert len(settled) >= 1 + samples
        # 4 samples on 2 workers: 2 rounds of one timeout each (+ a restarted worker's start-up,
        # which is not timed, on a loaded 2-core machine); in series it would be 4+ s and more
        assert 2 * timeout_s <= elapsed_s < 2 * timeout_s + 8.0
        assert _gone(_spawned(tmp_path, samples))
        assert pool.score(["ok"], [{"dir": str(tmp_path)}]) == [1.0]


HELPER_FILE = """
import os, subprocess
helper = subprocess.Popen(["sleep", "4321.25"], start_new_session=True)  # a server it loads with
with open(os.path.join(os.path.dirname(__file__), "pids"), "a") as f:
    f.write(f"{helper.pid}\\n")

def score(completion, example):
    return 1.0
"""


def test_what_a_reward_starts_while_loading_lives_until_close_then_dies_with_its_worker(tmp_path):
    (tmp_path / "helper_reward.py").write_text(HELPER_FILE)
    pool = RewardPool(f"{tmp_path / 'helper_reward.py'}:score", num_workers=1, timeout_s=10.0)
    worker_pid = pool._workers[0].process.pid
    assert pool.score(["a", "b"], [{}] * 2) == [1.0, 1.0]
    [helper_pid] = _spawned(tmp_path, 1)
    assert _alive(helper_pid)  # the sweep after score() spares what the reward loaded with
    pool.close()
    assert _gone([worker_pid, helper_pid])


def test_a_reward_printing_50_mb_writes_at_most_the_cap_to_the_log(reward, tmp_path, capsys):
    with RewardPool(reward, num_workers=1, timeout_s=60.0) as pool:
        assert pool.score(["print"], [{"dir": str(tmp_path)}]) == [1.0]
        out, deadline = "", time.monotonic() + 30.0
        while "the rest dropped" not in out and time.monotonic() < deadline:
            time.sleep(0.1)
            out += capsys.readouterr().out
    time.sleep(0.5)
    out += capsys.readouterr().out
    assert "reward worker 0: output over 1 MiB, the rest dropped" in out
    assert MAX_OUTPUT_BYTES <= len(out.encode()) <= MAX_OUTPUT_BYTES + 200
    assert os.getpid()  # the parent is fine
