"""Every value the config accepts for the algorithm's choices trains: one learner step on a
tiny model runs and moves the weights (the config and the loss share one list of names)."""
import pytest
import torch

from llamarl_core.config.choices import ADVANTAGE_MODES, AGGREGATIONS, LOSS_KINDS
from llamarl_core.config.errors import ConfigError
from llamarl_core.config.load import load_config
from llamarl_core.executors.learner import Learner
from llamarl_core.executors.pipeline import learner_config
from llamarl_core.executors.train_step import train_on
from llamarl_core.models.build import build_model
from llamarl_core.wire.rollout import Rollout

SMALL = ["algorithm.group_size=2", "algorithm.prompts_per_step=2", "algorithm.lr_warmup_steps=1",
         "resources.trainer.micro_batch_size=2"]


def batch() -> Rollout:
    """2 prompts x 2 samples of [prompt 3 tokens | completion 2-4 tokens]; rewards differ in a group."""
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 200, (4, 8), generator=g)
    completion_lens = torch.tensor([2, 4, 3, 1])
    return Rollout(tokens, torch.full((4,), 3), completion_lens, torch.full((4, 7), -5.0),
                   torch.tensor([1.0, 0.0, 0.0, 1.0]), torch.tensor([0, 0, 1, 1]), 0, 0, 0)


@pytest.mark.parametrize("key,value", [("algorithm.aggregation", v) for v in AGGREGATIONS]
                         + [("algorithm.name", v) for v in LOSS_KINDS]
                         + [("algorithm.advantage", v) for v in ADVANTAGE_MODES])
def test_every_accepted_value_runs_a_learner_step_that_changes_the_weights(key, value):
    cfg = load_config("cpu_tiny", [*SMALL, f"{key}={value}"])
    model, _ = build_model(cfg.model, cfg.resources.trainer.dtype, seed=cfg.run.seed)
    before = [p.detach().clone() for p in model.parameters()]
    metrics = train_on(Learner(model, learner_config(cfg)), batch(), torch.zeros(4))
    assert all(torch.isfinite(torch.tensor(v)) for v in metrics.values())
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_the_old_aggregation_name_is_refused_naming_the_key_and_the_choices():
    with pytest.raises(ConfigError, match="algorithm.aggregation='seq_mean'.*sequence_mean"):
        load_config("cpu_tiny", ["algorithm.aggregation=seq_mean"])


def test_a_negative_number_of_eval_examples_is_refused():
    with pytest.raises(ConfigError, match="data.num_eval_examples=-1"):
        load_config("cpu_tiny", ["data.num_eval_examples=-1"])


@pytest.mark.parametrize("key", ["model.dtype=bfloat16", "resources.trainer.quantization=int8",
                                 "run.log_every_steps=5"])
def test_keys_no_code_read_are_gone_and_setting_one_is_refused_by_name(key):
    with pytest.raises(ConfigError, match=key.split("=")[0].split(".")[-1]):
        load_config("cpu_tiny", [key])
