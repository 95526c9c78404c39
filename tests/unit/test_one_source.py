"""Every closed set of values is written once (config/choices.py) and every default once (the
schema): each registry the code keeps is held to its choices list, and each keyword default
that mirrors a config key to the schema's value.

Before: the reward registry had `math_symbolic`, which `data.reward` refused; the DDMA plan
cut 64 MiB pieces by default where a run cuts 128 MiB (`controller.weight_bucket_mb` / 2); the
engine, the built-in task, `aipo_loss` and the reward pool each wrote the schema's defaults
again as literals.
"""
import inspect

import pytest

from llamarl_core.algorithms import aipo_loss, compute_advantages
from llamarl_core.config import choices
from llamarl_core.config.errors import ConfigError
from llamarl_core.config.schema import (AlgorithmConfig, ControllerConfig, DataConfig, DEFAULT_INSTRUCTIONS,
                                        GenerationConfig, GeneratorResources, RewardResources)
from llamarl_core.data import TEMPLATES, NoVerifier, arith_examples, default_reward, resolve_dataset
from llamarl_core.data import arith as arith_module
from llamarl_core.generation import GenerationEngine
from llamarl_core.rewards import RewardPool, get_reward
from llamarl_core.rewards.specs import reward_names
from llamarl_core.transport import ddma
from llamarl_core.transport.ddma_plan import build_plan, piece_bytes


def test_the_reward_registry_holds_exactly_the_built_in_rewards_and_the_schema_takes_each():
    assert reward_names() == sorted(choices.BUILTIN_REWARDS)
    for name in choices.BUILTIN_REWARDS:  # accepted (reasoning_gym's scorer only with its data set)
        DataConfig(reward=name, **({"name": name, "task": "basic_arithmetic"} if name == "reasoning_gym" else {}))
    with pytest.raises(ConfigError, match="math_symbolic"):  # the message lists every one
        DataConfig(reward="nope")


def test_each_data_set_name_is_one_the_loaders_know_and_its_default_reward_is_built_in():
    for name in choices.DATA_NAMES:
        if name == "arith":
            assert resolve_dataset(name, None, "train", num_examples=2)
            continue
        with pytest.raises(ValueError) as e:
            resolve_dataset(name, None, "train")
        assert "unknown data set" not in str(e.value)  # known: it only asks for a file
        if name == "generic":
            with pytest.raises(NoVerifier):
                default_reward(name)
        else:
            assert default_reward(name) in choices.BUILTIN_REWARDS
    with pytest.raises(ValueError, match="'arith', 'gsm8k', 'math500', 'generic'"):
        resolve_dataset("nope", None, "train")
    assert set(DEFAULT_INSTRUCTIONS) <= set(choices.DATA_NAMES)


def test_templates_solution_styles_splits_and_transports_are_the_choices_lists():
    assert TEMPLATES == choices.PROMPT_TEMPLATES
    assert arith_module.SOLUTION_STYLES == choices.SOLUTION_STYLES
    for style in choices.SOLUTION_STYLES:
        assert arith_examples("train", 1, 0, solution_style=style)
    with pytest.raises(ValueError, match="must be one of columns, digit_sums, short"):
        arith_examples("train", 1, 0, solution_style="long")
    assert ddma.TRANSPORTS == choices.DDMA_TRANSPORTS
    assert choices.WEIGHT_TRANSPORTS == ("auto", *ddma.TRANSPORTS)


def _default(fn, name):
    return inspect.signature(fn).parameters[name].default


def test_keyword_defaults_that_mirror_a_config_key_are_the_schemas():
    algo, gen, res, reward, data = AlgorithmConfig(), GenerationConfig(), GeneratorResources(), RewardResources(), DataConfig()
    assert (_default(aipo_loss, "aggregation"), _default(aipo_loss, "kind"), _default(aipo_loss, "clip_eps"),
            _default(aipo_loss, "kl_coef"), _default(aipo_loss, "entropy_coef")) == (
        algo.aggregation, algo.name, algo.clip_eps, algo.kl_coef, algo.entropy_coef)
    assert _default(compute_advantages, "mode") == algo.advantage
    assert (_default(GenerationEngine, "max_batch_size"), _default(GenerationEngine, "quantization"),
            _default(GenerationEngine, "batching")) == (res.max_batch_size, res.quantization, gen.batching)
    assert (_default(arith_examples, "digits"), _default(arith_examples, "num_operands"),
            _default(arith_examples, "solution_style")) == (data.digits, data.num_operands, data.solution_style)
    assert (_default(RewardPool, "num_workers"), _default(RewardPool, "timeout_s"),
            _default(get_reward, "timeout_s")) == (reward.workers, reward.timeout_s, reward.timeout_s)
    assert _default(build_plan, "num_slots") == res.weight_slots


def test_the_ddma_plan_cuts_the_pieces_a_run_cuts_by_default():
    import torch

    # one [rows, 1024] float32 tensor 3x the run's piece size: a default plan cuts it in 3 bands
    per_piece = piece_bytes(ControllerConfig().weight_bucket_mb)
    assert per_piece == 128 << 20  # weight_bucket_mb=256: two pieces of half in flight
    rows = 3 * per_piece // (1024 * 4)
    plan = build_plan({"w": ((rows, 1024), torch.float32)}, trainer_ranks=1, generator_ranks=1)
    assert len(plan.pieces) == 3
