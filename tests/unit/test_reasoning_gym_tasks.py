"""The reasoning-gym task library: rows from a seed, a held-out set sharing no question with
train, the task's own scorer as the reward through the real worker processes, the plan's
checks, and `llamarl data tasks`."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("reasoning_gym")

from llamarl_cli.main import main  # noqa: E402
from llamarl_core.config.errors import ConfigError  # noqa: E402
from llamarl_core.config.load import load_config  # noqa: E402
from llamarl_core.data.reasoning_gym_tasks import HELD_OUT_SEED_OFFSET  # noqa: E402
from llamarl_core.data.splits import load_split  # noqa: E402
from llamarl_core.rewards.pool import RewardPool  # noqa: E402

TASKS = ("basic_arithmetic", "leg_counting")  # fast generators, one exact-answer scorer each


def _data(task: str, *extra: str):
    return load_config("cpu_tiny", ["data.name=reasoning_gym", f"data.task={task}",
                                    "data.num_train_examples=300", "data.num_eval_examples=40", *extra]).data


@pytest.mark.parametrize("task", TASKS)
def test_rows_are_the_same_for_the_same_seed_and_differ_for_another(task):
    first, again = load_split(_data(task), "train"), load_split(_data(task), "train")
    other = load_split(_data(task, "data.seed=1"), "train")
    assert len(first) == 300
    assert [e.prompt for e in first] == [e.prompt for e in again]
    assert [e.reference for e in first] == [e.reference for e in again]
    assert [e.prompt for e in first] != [e.prompt for e in other]
    assert first[0].solution == f"<answer>{first[0].reference}</answer>"  # what a warm start learns


@pytest.mark.parametrize("task", TASKS)
def test_held_out_rows_share_no_question_with_train_and_come_from_a_far_seed(task):
    import reasoning_gym

    d = _data(task)
    train, held_out = load_split(d, "train"), load_split(d, "test")
    assert 0 < len(held_out) <= 40
    assert not {e.prompt for e in train} & {e.prompt for e in held_out}
    far = reasoning_gym.create_dataset(task, size=40, seed=HELD_OUT_SEED_OFFSET)  # data.seed=0
    assert held_out[0].prompt in {r["question"] for r in far}


def test_held_out_questions_also_in_train_are_removed():
    # 1-digit a + b: at most 100 questions; 300 train rows hold nearly all, so few are left
    d = _data("basic_arithmetic", "+data.task_config={min_terms: 2, max_terms: 2, min_digits: 1, "
              "max_digits: 1, operators: ['+'], allow_parentheses: false, allow_negation: false}")
    train, held_out = load_split(d, "train"), load_split(d, "test")
    assert len(held_out) < 40
    assert not {e.prompt for e in train} & {e.prompt for e in held_out}


@pytest.mark.parametrize("task", TASKS)
def test_the_reward_scores_the_tagged_reference_one_and_a_wrong_answer_zero_in_a_worker(task):
    examples = load_split(_data(task), "train")[:3]
    rows = [json.loads(json.dumps(e.as_dict())) for e in examples]  # as JSON would carry them
    completions = [f"thinking... <answer>{e.reference}</answer>" for e in examples]
    completions += [f"<answer>{e.reference}9</answer>x" for e in examples[:1]]  # wrong (partial at most)
    completions += [f"the answer is {examples[0].reference}"]  # right, but no tags: not read
    with RewardPool("reasoning_gym", num_workers=1, timeout_s=30.0) as pool:
        scores = pool.score(completions, rows + rows[:1] * 2)
    assert scores[:3] == [1.0, 1.0, 1.0]
    assert scores[3] < 1.0 and scores[4] == 0.0
    assert pool.stats["errors"] == 0


def test_data_reward_auto_picks_the_tasks_scorer():
    from llamarl_core.executors.setup import reward_name

    assert reward_name(_data("leg_counting")) == "reasoning_gym"
    assert "<answer></answer>" in _data("leg_counting").instruction_for()


@pytest.mark.parametrize("words, named", [
    (["data.name=reasoning_gym"], "data.task"),
    (["data.task=leg_counting"], "data.task=leg_counting"),
    (["data.reward=reasoning_gym"], "data.reward=reasoning_gym"),
])
def test_a_task_without_its_data_set_or_a_data_set_without_its_task_is_refused(words, named):
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        load_config("cpu_tiny", words)


def test_plan_accepts_a_known_task_and_refuses_an_unknown_one_naming_the_listing_command(capsys):
    assert main(["plan", "data.name=reasoning_gym", "data.task=leg_counting"]) == 0
    capsys.readouterr()
    assert main(["plan", "data.name=reasoning_gym", "data.task=no_such_task"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "data.task='no_such_task'" in err[0] and "llamarl data tasks" in err[0]


def test_a_stop_string_that_would_cut_the_closing_answer_tag_is_refused(capsys):
    assert main(["plan", "data.name=reasoning_gym", "data.task=leg_counting",
                 "generation.stop_strings=['</answer>']"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "generation.stop_strings" in err[0] and "data.name=reasoning_gym" in err[0]


def test_data_tasks_lists_one_line_per_task_and_exits_0(capsys):
    from reasoning_gym.factory import DATASETS

    assert main(["data", "tasks"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == sorted(DATASETS)
    assert any(line.startswith("chain_sum ") and "arithmetic" in line for line in lines)
