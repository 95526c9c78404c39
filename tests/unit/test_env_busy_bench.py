"""`llamarl bench env-busy` at a tiny size: its JSON has the command, the machine, every repeat
of both variants, medians and ratios; busy shares lie in [0, 1]; the slow tool's sleeps show in
the environment's own timing; the episodes really take their tool turns."""
from __future__ import annotations

import json

import pytest

from llamarl_cli.main import main

TINY = ["--rows", "8", "--group-size", "4", "--slots", "4", "--tool-turns", "2", "--sleep-s", "0.1",
        "--turn-tokens", "48", "--repeats", "2", "--workers", "1"]


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    work = tmp_path_factory.mktemp("env_busy")
    assert main(["bench", "env-busy", *TINY, "--work-dir", str(work)]) == 0
    return json.loads((work / "env_busy.json").read_text()), work


def test_the_json_records_the_command_config_and_machine(result):
    doc, work = result
    assert doc["command"] == "llamarl bench env-busy " + " ".join(TINY) + f" --work-dir {work}"
    assert doc["commit"] and doc["machine"]["threads"] == 1 and "loadavg_at_end" in doc["machine"]
    assert doc["config"]["rows"] == 8 and doc["config"]["sleep_s"] == 0.1
    assert len(doc["config"]["stop_token_ids"]) == 16  # planted on the tiny preset
    assert (work / "busy_env.py").exists()  # the environment, loaded by path like a user's


def test_every_repeat_of_both_variants_is_kept_with_busy_shares_in_0_1(result):
    doc, _ = result
    assert set(doc["runs"]) == {"tool_free", "slow_tool"}
    for runs in doc["runs"].values():
        assert len(runs) == 2
        for r in runs:
            assert 0.0 <= r["busy_share"] <= 1.0 and 0.0 <= r["waited_s"] <= r["seconds"]
            assert r["busy_share"] == pytest.approx(1 - r["waited_s"] / r["seconds"])
            assert r["episodes"] == 8 and r["episodes_per_s"] == pytest.approx(8 / r["seconds"])
            assert 0 < r["mean_in_flight"] <= 8
    for v, med in doc["medians"].items():
        assert 0.0 <= med["busy_share"] <= 1.0
        assert med["busy_share"] == pytest.approx(sum(r["busy_share"] for r in doc["runs"][v]) / 2)  # median of 2
    assert doc["busy_ratio"] == pytest.approx(doc["medians"]["slow_tool"]["busy_share"]
                                              / doc["medians"]["tool_free"]["busy_share"])
    assert doc["goal"] == 0.9 and doc["met"] == (doc["busy_ratio"] >= 0.9)


def test_episodes_take_their_tool_turns_and_the_slow_tool_sleeps(result):
    doc, _ = result
    for v, runs in doc["runs"].items():
        for r in runs:
            # each episode: 2 tool turns, then a final one; a turn cut at 48 tokens ends it early,
            # losing at most its 2 calls
            assert r["tool_calls"] <= 8 * 2 and r["turns_mean"] <= 3
            assert r["tool_calls"] >= 8 * 2 - 2 * r["truncated"]
    slow = [r["env_ms_mean"] for r in doc["runs"]["slow_tool"]]
    free = [r["env_ms_mean"] for r in doc["runs"]["tool_free"]]
    # an episode whose two tool calls both ran waited 200 ms on them; most episodes do
    assert min(slow) > 100 and max(free) < 100


def test_rows_per_step_is_model_tokens_over_engine_steps_within_the_slots(result):
    doc, _ = result
    for runs in doc["runs"].values():
        for r in runs:
            assert r["engine_steps"] > 0 and r["rows_per_step"] == pytest.approx(r["model_tokens"] / r["engine_steps"])
            assert 0 < r["rows_per_step"] <= 4
