"""EnvPool: user environments in killable worker processes (llamarl_core/envs/pool.py).

Each test writes its environment classes into a .py file under tmp_path and names them by
path, as a user does with env.entry. Timings are loose bounds around sleeps the envs make.
"""
from __future__ import annotations

import textwrap
import time

import pytest

from llamarl_core.envs.pool import EnvPool, EnvSpec

ENVS = '''
import os, subprocess, time

class Count:                       # three steps, reward = step number
    def reset(self, example):
        self.n = 0
        return [{"role": "user", "content": "count " + example["prompt"]}]
    def step(self, text):
        self.n += 1
        return [{"role": "user", "content": f"{self.n}:{text}"}], self.n, self.n >= 3

class Sleepy:                      # "sleep S" sleeps S seconds, then echoes
    def reset(self, example):
        return []
    def step(self, text):
        if text.startswith("sleep "):
            time.sleep(float(text.split()[1]))
        return [{"role": "user", "content": text}], None, False

class Exits(Sleepy):
    def step(self, text):
        os._exit(3)

class Malformed(Sleepy):
    def step(self, text):
        return "oops"

class ResetRaises:
    def reset(self, example):
        raise ValueError("no such task")

class Long(Sleepy):
    def step(self, text):
        return [{"role": "tool", "content": "x" * 50}], 0.5, True

class Spawns(Sleepy):              # a grandchild in a session of its own
    def reset(self, example):
        p = subprocess.Popen(["sleep", "60"], start_new_session=True)
        return [{"role": "user", "content": str(p.pid)}]
'''


@pytest.fixture
def envs(tmp_path):
    path = tmp_path / "envs.py"
    path.write_text(textwrap.dedent(ENVS))
    return lambda name: EnvSpec(f"{path}:{name}", None)


def collect(pool: EnvPool, n: int, timeout_s: float = 10.0) -> list:
    """The next ``n`` replies, each stamped with when poll returned it."""
    out, deadline = [], time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < deadline:
        out += [(r, time.monotonic()) for r in pool.poll(0.05)]
    assert len(out) == n, f"{len(out)} of {n} replies within {timeout_s} s"
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] != b"Z"  # a zombie has exited
    except OSError:
        return False


def test_a_three_step_episode_replies_what_the_env_returned(envs):
    with EnvPool(envs("Count")) as pool:
        assert pool.tools == []
        pool.reset(7, {"prompt": "up"})
        assert pool.pending == 1
        (reset, _), = collect(pool, 1)
        assert (reset.episode, reset.kind, reset.messages) == (7, "reset", [{"role": "user", "content": "count up"}])
        assert (reset.reward, reset.done, reset.failed, reset.error) == (None, False, False, None)
        got = []
        for text in ("a", "b", "c"):
            pool.step(7, text)
            (r, _), = collect(pool, 1)
            got.append((r.kind, r.messages[0]["content"], r.reward, r.done, r.failed))
        assert got == [("step", "1:a", 1.0, False, False), ("step", "2:b", 2.0, False, False),
                       ("step", "3:c", 3.0, True, False)]
        assert pool.pending == 0
        assert pool.stats == {"episodes": 1, "steps": 3, "timeouts": 0, "crashes": 0, "errors": 0, "restarts": 0}


def test_a_second_request_for_an_episode_before_its_reply_is_refused(envs):
    with EnvPool(envs("Count"), workers=1) as pool:
        pool.reset(0, {"prompt": ""})
        with pytest.raises(RuntimeError, match="unanswered"):
            pool.step(0, "too soon")
        with pytest.raises(KeyError):
            pool.step(1, "never reset")


def test_a_sleeping_step_does_not_hold_up_another_episode_on_the_same_worker(envs):
    with EnvPool(envs("Sleepy"), workers=1) as pool:
        pool.reset(1, {}), pool.reset(2, {})
        collect(pool, 2)
        start = time.monotonic()
        pool.step(1, "sleep 0.5")
        order = []
        for k in range(3):  # episode 2 steps three times while episode 1 sleeps
            pool.step(2, f"fast {k}")
            (r, at), = collect(pool, 1)
            order.append((r.episode, r.messages[0]["content"]))
            assert r.seconds < 0.3
        (slow, at), = collect(pool, 1)
        order.append((slow.episode, slow.messages[0]["content"]))
        assert order == [(2, "fast 0"), (2, "fast 1"), (2, "fast 2"), (1, "sleep 0.5")]
        assert 0.5 <= slow.seconds < 2.0 and at - start >= 0.5


def test_a_hanging_step_fails_every_episode_on_its_worker_and_the_pool_goes_on(envs):
    with EnvPool(envs("Sleepy"), workers=1, step_timeout_s=1.0) as pool:
        for e in (1, 2, 3):
            pool.reset(e, {})
        collect(pool, 3)
        pool.step(1, "sleep 60")
        time.sleep(0.3)
        pool.step(2, "sleep 60")  # due 0.3 s later: still pending when episode 1 times out
        replies = {r.episode: (r, at) for r, at in collect(pool, 2, timeout_s=5.0)}
        hung, _ = replies[1]
        assert hung.failed and hung.done and "step_timeout_s=1" in hung.error
        assert 1.0 <= hung.seconds < 2.5
        other, _ = replies[2]
        assert other.failed and "was killed" in other.error and "step_timeout_s" not in other.error
        pool.step(3, "idle when it happened")  # open without a request: fails on its next step
        (idle, _), = collect(pool, 1)
        assert idle.failed and "was killed" in idle.error
        assert pool.stats["timeouts"] == 1 and pool.stats["restarts"] == 1 and pool.stats["crashes"] == 0
        pool.reset(4, {})
        assert [r.messages for r, _ in collect(pool, 1)] == [[]]
        pool.step(4, "after")
        assert [r.messages[0]["content"] for r, _ in collect(pool, 1)] == ["after"]


def test_an_env_that_exits_its_process_is_a_crash_and_the_worker_restarts(envs):
    with EnvPool(envs("Exits"), workers=1) as pool:
        pool.reset(1, {})
        collect(pool, 1)
        pool.step(1, "bye")
        (r, _), = collect(pool, 1)
        assert r.failed and "died" in r.error and "exit code 3" in r.error
        assert pool.stats["crashes"] == 1 and pool.stats["restarts"] == 1
        pool.reset(2, {})
        (r, _), = collect(pool, 1)
        assert (r.episode, r.kind, r.failed) == (2, "reset", False)


def test_a_malformed_step_fails_its_episode_with_the_contract_broken(envs):
    with EnvPool(envs("Malformed"), workers=1) as pool:
        pool.reset(1, {}), pool.reset(2, {})
        collect(pool, 2)
        pool.step(1, "hi")
        (r, _), = collect(pool, 1)
        assert r.failed and r.error.startswith("ValueError: step must return (messages, reward, done)")
        assert "'oops'" in r.error
        assert pool.stats["errors"] == 1 and pool.stats["restarts"] == 0
        with pytest.raises(KeyError):  # a failed episode is forgotten
            pool.step(1, "again")
        pool.step(2, "hi")  # the worker still serves its other episode
        (r, _), = collect(pool, 1)
        assert (r.episode, r.failed) == (2, True)


def test_a_reset_that_raises_fails_its_episode(envs):
    with EnvPool(envs("ResetRaises"), workers=1) as pool:
        pool.reset(1, {})
        (r, _), = collect(pool, 1)
        assert (r.kind, r.failed, r.messages) == ("reset", True, [])
        assert r.error.splitlines()[0] == "ValueError: no such task" and "Traceback" in r.error
        assert pool.stats["errors"] == 1


def test_messages_are_cut_to_max_message_chars(envs):
    spec = EnvSpec(envs("Long").entry, None, max_message_chars=10)
    with EnvPool(spec, workers=1) as pool:
        pool.reset(1, {})
        collect(pool, 1)
        pool.step(1, "x")
        (r, _), = collect(pool, 1)
        assert r.messages == [{"role": "tool", "content": "x" * 10}] and r.reward == 0.5


def test_an_entry_that_does_not_load_is_one_clear_error(envs):
    with EnvPool(envs("NoSuchClass"), workers=1) as pool:
        with pytest.raises(RuntimeError, match="has no attribute 'NoSuchClass'"):
            pool.tools


def test_close_leaves_no_worker_and_no_process_an_env_started(envs):
    pool = EnvPool(envs("Spawns"), workers=2)
    pool.reset(1, {})
    (r, _), = collect(pool, 1)
    grandchild = int(r.messages[0]["content"])
    workers = [w.process.pid for w in pool._workers]
    assert all(alive(pid) for pid in workers + [grandchild])
    start = time.monotonic()
    pool.close()
    assert time.monotonic() - start < 3.0
    deadline = time.monotonic() + 2.0
    while any(alive(pid) for pid in workers + [grandchild]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in workers + [grandchild])
