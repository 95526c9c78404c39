"""data.rewards: the training reward is sum_i weight_i * r_i, each term checked before launch
(one line naming data.rewards[i]...), its per-term means in metrics.jsonl, and the held-out
accuracy still scored by the task's correctness reward (data.reward)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from llamarl_core.config.errors import ConfigError
from llamarl_core.config.load import load_config
from llamarl_core.executors.setup import reward_name, reward_terms
from llamarl_core.observe.metrics_log import MetricsLog
from llamarl_core.rewards.weighted import WeightedRewards
from llamarl_core.runtime.data_check import checked_reward

FORMAT = str(Path(__file__).parents[2] / "examples" / "format_reward.py") + ":has_answer_line"
RAISES = '''
def boom(completion, example):
    if "boom" in completion:
        raise ValueError("boom")
    return 2.0
'''


def test_the_training_reward_is_the_weighted_sum_of_the_terms():
    # gsm8k: 1 when the "#### N" answer equals the reference; has_answer_line: 1 for any "#### N" line
    completions = ["work\n#### 46", "#### 12", "no answer at all"]
    refs = ["46", "46", "46"]
    with WeightedRewards([("gsm8k", "gsm8k", 1.0), ("fmt", FORMAT, 0.2)], num_workers=1, timeout_s=30) as w:
        totals = w.score(completions, refs, [{"reference": r} for r in refs])
        # right and formatted 1 + 0.2; formatted only 0 + 0.2; neither 0
        assert totals == pytest.approx([1.2, 0.2, 0.0])
        assert w.term_sums == pytest.approx({"gsm8k": 1.0, "fmt": 2.0})
        assert w.term_counts == {"gsm8k": 3, "fmt": 3}


def test_a_term_that_raises_scores_0_for_that_term_only_and_is_counted(tmp_path):
    (tmp_path / "boom.py").write_text(RAISES)
    terms = [("gsm8k", "gsm8k", 1.0), ("boom", f"{tmp_path / 'boom.py'}:boom", -0.5)]
    with WeightedRewards(terms, num_workers=1, timeout_s=30) as w:
        totals = w.score(["#### 7", "#### 7 boom"], ["7", "7"], [{}, {}])
        # 1 + (-0.5 * 2) = 0; 1 + (-0.5 * 0: raised) = 1
        assert totals == pytest.approx([0.0, 1.0])
        assert w.stats["errors"] == 1 and "boom" in w.first_error


def test_one_reward_alone_is_the_one_term_case_with_weight_1():
    cfg = load_config(overrides=["data.name=arith"])
    assert reward_terms(cfg.data) == [("arith", "arith", 1.0)]


def test_terms_default_to_the_builtin_or_function_name_and_auto_resolves_to_the_tasks_reward():
    cfg = load_config(overrides=["data.name=arith", f"data.rewards=[{{fn: auto, weight: 1}}, "
                                                    f"{{fn: '{FORMAT}', weight: 0.2}}]"])
    assert reward_terms(cfg.data) == [("auto", "arith", 1.0), ("has_answer_line", FORMAT, 0.2)]


def test_the_held_out_accuracy_reward_is_data_reward_not_the_weighted_sum():
    # the trainer's eval scores with get_reward(reward_name(data)) (executors/trainer.py)
    cfg = load_config(overrides=["data.name=arith", f"data.rewards=[{{fn: '{FORMAT}', weight: 1}}]"])
    assert reward_name(cfg.data) == "arith"
    cfg = load_config(overrides=["data.reward=gsm8k", f"data.rewards=[{{fn: '{FORMAT}', weight: 1}}]"])
    assert reward_name(cfg.data) == "gsm8k"


@pytest.mark.parametrize("rewards, message", [
    ("[{fn: arith, weight: 1}, {fn: arith, weight: 0.2}]", "data.rewards[1].name='arith' is already data.rewards[0]'s"),
    ("[{fn: arith, weight: 1, name: x}, {fn: gsm8k, weight: 1, name: x}]", "data.rewards[1].name='x'"),
    ("[{fn: arith, weight: 1, name: 'a-b'}]", "data.rewards[0].name='a-b' must be an identifier"),
    ("[{fn: arith, weight: 1}, {fn: gsm8k, weight: inf}]", "data.rewards[1].weight=inf must be a finite number"),
    ("[{fn: arith, weight: 0}, {fn: gsm8k, weight: 0.0}]", "data.rewards: every weight is 0"),
    ("[{fn: arith, weight: 1}, {fn: 'no such', weight: 1}]", "data.rewards[1].fn='no such' is not one of"),
])
def test_a_bad_term_is_refused_naming_its_indexed_key(rewards, message):
    with pytest.raises(ConfigError) as e:
        load_config(overrides=[f"data.rewards={rewards}"])
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_term_whose_function_does_not_import_is_refused_before_launch_naming_its_key(tmp_path):
    (tmp_path / "fmt.py").write_text("def f(completion, example):\n    return 1.0\n")
    cfg = load_config(overrides=[f"data.rewards=[{{fn: arith, weight: 1}}, {{fn: '{tmp_path}/fmt.py:nope', weight: 1}}]"])
    with pytest.raises(ConfigError, match=r"^data\.rewards\[1\]\.fn=.*fmt\.py:nope: .*nope"):
        checked_reward(cfg)


def test_the_cli_exits_2_on_a_bad_term():
    out = subprocess.run([sys.executable, "-m", "llamarl_cli.main", "plan", "data.rewards=[{fn: arith, weight: nan}]"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "data.rewards[0].weight=nan" in out.stderr + out.stdout


class _Control:
    def __init__(self):
        self.by_rank = {}

    def stats(self, role, rank):
        return self.by_rank.get(rank) if role == "reward" else None


def test_term_means_are_over_the_samples_scored_since_the_previous_line():
    log = MetricsLog.__new__(MetricsLog)
    log.control, log.role_sizes, log._terms_seen = _Control(), {"reward": 2}, {}
    base = {"busy_s": 1.0, "idle_s": 1.0, "pool": {}}
    log.control.by_rank = {0: {**base, "terms": {"fmt": [3.0, 4]}}, 1: {**base, "terms": {"fmt": [1.0, 4]}}}
    assert log.role_stats()["reward/fmt_mean"] == pytest.approx(4.0 / 8)
    log.control.by_rank[0]["terms"] = {"fmt": [5.0, 8]}  # rank 0 scored 4 more: 2.0 of them
    assert log.role_stats()["reward/fmt_mean"] == pytest.approx(2.0 / 4)
    assert "reward/fmt_mean" not in log.role_stats()  # nothing scored since: no value
