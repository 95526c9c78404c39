"""algorithm.lr_schedule: warm-up, then constant / linear / cosine to min_lr_ratio * lr, worked
out by hand; the learner applies it and a resumed learner continues it."""
import math

import pytest
import torch

from llamarl_core.algorithms.lr_schedule import lr_at
from llamarl_core.config.errors import ConfigError
from llamarl_core.config.load import load_config
from llamarl_core.executors.learner import Learner
from llamarl_core.executors.pipeline import learner_config


def test_warm_up_is_linear_and_already_trains_at_the_first_step():
    # lr 1.0, W = 4: steps 0..3 get 1/4, 2/4, 3/4, 4/4; step 4 starts the schedule at p = 0.
    assert [lr_at(s, 1.0, 4, 10, "cosine") for s in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]


def test_linear_decays_to_the_floor_one_step_past_the_last():
    # lr 2.0, W = 2, T = 6, m = 0.25: p = (s - 2) / 4 for s = 2..5 -> 0, 1/4, 1/2, 3/4
    # lr = 2 * (0.25 + 0.75 * (1 - p)) = 2.0, 1.625, 1.25, 0.875 (the floor 0.5 would be step 6)
    assert [lr_at(s, 2.0, 2, 6, "linear", 0.25) for s in range(2, 6)] == pytest.approx([2.0, 1.625, 1.25, 0.875])


def test_cosine_is_half_way_at_the_middle_and_reaches_the_floor_at_the_end():
    # W = 0, T = 4, m = 0.1: p = s / 4; decay = (1 + cos(pi p)) / 2 = 1, (1 + 1/sqrt 2) / 2, 1/2, (1 - 1/sqrt 2) / 2
    want = [1.0, 0.1 + 0.9 * (1 + 1 / math.sqrt(2)) / 2, 0.1 + 0.9 * 0.5, 0.1 + 0.9 * (1 - 1 / math.sqrt(2)) / 2]
    assert [lr_at(s, 1.0, 0, 4, "cosine", 0.1) for s in range(4)] == pytest.approx(want)
    assert lr_at(4, 1.0, 0, 4, "cosine", 0.1) == pytest.approx(0.1)  # step T: the floor
    assert lr_at(9, 1.0, 0, 4, "linear", 0.1) == pytest.approx(0.1)  # past T (a longer resumed run): stays


def test_constant_keeps_the_rate_after_the_warm_up():
    assert [lr_at(s, 3e-6, 2, 5, "constant") for s in range(5)] == [1.5e-6, 3e-6, 3e-6, 3e-6, 3e-6]


def test_the_learner_sets_each_steps_rate_and_a_resumed_learner_continues_it():
    cfg = load_config("cpu_tiny", ["algorithm.lr=1.0", "algorithm.lr_warmup_steps=0", "run.max_steps=4",
                                   "algorithm.lr_schedule=linear"])
    learner = Learner(torch.nn.Linear(2, 2), learner_config(cfg))
    rates = []
    for _ in range(2):
        rates.append(learner.learning_rate())
        learner.steps_done += 1  # what rl_step does after setting the rate
    resumed = Learner(torch.nn.Linear(2, 2), learner_config(cfg))
    resumed.steps_done = 2  # trainer.restore: state.json's lr_steps
    assert rates + [resumed.learning_rate()] == [1.0, 0.75, 0.5]


def test_an_unknown_schedule_or_a_floor_outside_0_1_is_refused_by_name():
    with pytest.raises(ConfigError, match="algorithm.lr_schedule='step'.*cosine"):
        load_config("cpu_tiny", ["algorithm.lr_schedule=step"])
    with pytest.raises(ConfigError, match="algorithm.min_lr_ratio=1.5"):
        load_config("cpu_tiny", ["algorithm.min_lr_ratio=1.5"])
