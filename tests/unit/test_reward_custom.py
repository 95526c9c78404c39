"""Custom rewards (`data.reward=path/to/file.py:function` or `package.module:function`): scored in
worker processes only, with errors and timeouts scoring 0 and counted, and checked before
launch in a subprocess that never imports the user's code into this process."""
import json
import os
import sys
import textwrap

import pytest

from llamarl_core.rewards import RewardPool, get_reward
from llamarl_core.rewards.custom import check_importable

REWARD_FILE = """
import os, time
open(os.path.join(os.path.dirname(__file__), "imported_by_pid"), "a").write(f"{os.getpid()}\\n")

def score(completion, example):
    if example.get("mode") == "raise":
        raise ValueError("bad sample " + example["id"])
    if example.get("mode") == "sleep":
        time.sleep(30)
    if example.get("mode") == "nan":
        return float("nan")
    return len(completion) - float(example["reference"])   # above 1 and below 0 are allowed

def lists(completions, examples):
    return [len(c) * 10 + len(examples) for c in completions]
lists.batch = True

not_a_function = 3
"""


def test_a_file_reward_scores_in_workers_with_errors_and_timeouts_scoring_zero(reward_file):
    examples = [{"id": "a", "reference": "1"}, {"id": "b", "reference": "10", "mode": "raise"},
                {"id": "c", "reference": "0", "mode": "sleep"}, {"id": "d", "reference": "2", "mode": "nan"},
                {"id": "e", "reference": "-3"}]
    with RewardPool(f"{reward_file}:score", num_workers=2, timeout_s=1.0) as pool:
        scores = pool.score(["abc", "x", "y", "zz", ""], examples)
        # 3 - 1 = 2.0 and 0 + 3 = 3.0: rewards outside [0, 1] pass through unchanged
        assert scores == [2.0, 0.0, 0.0, 0.0, 3.0]
        assert (pool.stats["errors"], pool.stats["timeouts"]) == (2, 1)
        assert "ValueError: bad sample b" in pool.first_error and "in score" in pool.first_error
        assert "timeout_s=1" in pool.first_timeout
        assert pool.score(["abcd"], [{"id": "f", "reference": "1"}]) == [3.0]  # the pool goes on
    pids = (reward_file.parent / "imported_by_pid").read_text().split()
    assert str(os.getpid()) not in pids and "llamarl_user_reward" not in sys.modules


def test_a_batch_reward_gets_lists_split_across_workers(reward_file):
    with RewardPool(f"{reward_file}:lists", num_workers=2, timeout_s=1.0) as pool:
        # 5 items over 2 workers: shares of 3 and 2, each scored as one list
        assert pool.score(["a", "bb", "ccc", "d", "ee"], [{"reference": "x"}] * 5) == [13, 23, 33, 12, 22]


def test_a_module_reward_imports_from_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "rewards.py").write_text(textwrap.dedent("""
        def exact(completion, example):
            return 1.0 if completion.strip() == example["reference"] else 0.0
    """))
    monkeypatch.chdir(tmp_path)
    assert check_importable("mypkg.rewards:exact") is None
    reward = get_reward("mypkg.rewards:exact")
    assert reward.takes_example
    assert reward(" 42 ", {"reference": "42"}) == 1.0 and reward("41", {"reference": "42"}) == 0.0
    assert "mypkg" not in sys.modules


@pytest.mark.parametrize("value,reason", [
    ("{dir}/nope.py:score", "FileNotFoundError: no file"),
    ("{dir}/my_reward.py:missing", "has no attribute 'missing'"),
    ("{dir}/my_reward.py:not_a_function", "is a int, not a function"),
    ("{dir}/broken.py:score", "SyntaxError"),
    ("no_such_package_xyz.rewards:score", "ModuleNotFoundError: No module named 'no_such_package_xyz'"),
])
def test_the_import_check_names_why_a_reward_is_unusable(reward_file, value, reason):
    (reward_file.parent / "broken.py").write_text("def score(:\n")
    assert reason in check_importable(value.format(dir=reward_file.parent))


def test_the_import_check_gives_up_on_a_module_that_hangs(tmp_path):
    (tmp_path / "hangs.py").write_text("import time\ntime.sleep(60)\ndef score(c, e):\n    return 0\n")
    assert "did not finish within 1 s" in check_importable(f"{tmp_path}/hangs.py:score", timeout_s=1.0)


def test_eval_scores_a_custom_reward_on_the_examples_and_counts_reward_at_least_1_as_correct(tmp_path, capsys):
    from llamarl_cli.main import main

    (tmp_path / "r.py").write_text(
        "def full(completion, example):\n    return 1.0 if example['target'] in completion else -1.0\n"
        "def half(completion, example):\n    return 0.5 * len(example['topic'])\n")
    data = tmp_path / "d.jsonl"
    data.write_text('{"input": "1+1", "target": "2", "topic": "add"}\n{"input": "2+2", "target": "4", "topic": "x"}\n')
    common = ["eval", "policy=reference", "data=generic", f"data.path={data}", "data.prompt_key=input",
              "data.answer_key=target", "--no-progress", f"eval.out={tmp_path / 'e'}"]
    # reference policy: the completion is the example's target text " #### 2"
    assert main([*common, f"data.reward={tmp_path / 'r.py'}:full"]) == 0
    summary = json.loads((tmp_path / "e" / "summary.json").read_text())
    assert summary["accuracy"] == 1.0 and summary["reward"].endswith("r.py:full")
    assert main([*common, f"data.reward={tmp_path / 'r.py'}:half"]) == 0
    preds = [json.loads(x) for x in (tmp_path / "e" / "predictions.jsonl").read_text().splitlines()]
    assert [p["greedy_reward"] for p in preds] == [1.5, 0.5]  # the rows' own "topic" field reached it
    assert json.loads((tmp_path / "e" / "summary.json").read_text())["accuracy"] == 0.5  # 1.5 solved, 0.5 not
    capsys.readouterr()
    assert main([*common, f"data.reward={tmp_path / 'r.py'}:nope"]) == 2
    assert "has no attribute 'nope'" in capsys.readouterr().err
