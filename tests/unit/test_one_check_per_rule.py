"""Issue #46: each rule written once. The plan (exit 2, names the key) and the runtime guards
call the same function, so they cannot drift apart."""
import pytest
import torch

from llamarl_core.config.errors import ConfigError
from llamarl_core.config.load import load_config
from llamarl_core.config.schema import GenerationConfig
from llamarl_core.executors import chunks
from llamarl_core.generation import sampling
from llamarl_core.models.args import get_preset
from llamarl_core.models.tp_slices import check_tp
from llamarl_core.plan import validate
from llamarl_core.plan.plan import make_plan


def plan_for(recipe, *overrides):
    return make_plan(load_config(recipe, list(overrides)), require_data=False)


def test_plan_and_sharding_refuse_a_tp_size_with_the_same_words():
    with pytest.raises(ConfigError) as planned:
        plan_for("70b_gsm8k", "resources.generator.tp=3")
    with pytest.raises(ValueError) as sharded:
        check_tp(get_preset("llama3-70b"), 3, "resources.generator.tp")
    assert str(planned.value) == str(sharded.value) == \
        "resources.generator.tp=3 does not divide the model's 64 attention heads"


def test_chunk_generation_checks_lengths_with_the_plans_rule():
    assert chunks.check_lengths_fit is validate.check_lengths_fit
    g = GenerationConfig(max_prompt_tokens=16, max_new_tokens=500)
    validate.check_lengths_fit(g, 516, "m", "s")  # 16 + 500 = 516 fits exactly
    # 16 + 500 = 516 > 512: at most 512 - 16 = 496 new tokens
    with pytest.raises(ConfigError, match=r"= 516 tokens, but m has 512 positions \(s\): lower "
                                          r"generation.max_new_tokens to at most 496"):
        validate.check_lengths_fit(g, 512, "m", "s")


def test_scoring_at_zero_temperature_is_refused_by_the_one_log_prob_function():
    with pytest.raises(ValueError, match=r"temperature must be > 0 for a sampling distribution, got 0.0"):
        sampling.sampling_logprobs(torch.zeros(1, 3), 0.0, tokens=torch.zeros(1, dtype=torch.long))


def test_eval_config_and_generate_predictions_refuse_greedy_repeats_with_one_rule():
    from llamarl_core.config.schema import EvalConfig
    from llamarl_core.eval.evaluate import generate_predictions
    with pytest.raises(ConfigError, match=r"^eval.n_samples=4 with eval.temperature=0 gives 4 identical "
                                          r"greedy samples; set temperature > 0$"):
        EvalConfig(n_samples=4, temperature=0.0)
    # the library call names its arguments, with the same words
    with pytest.raises(ValueError, match=r"^n_samples=4 with temperature=0 gives 4 identical"):
        generate_predictions(None, None, [], n_samples=4, temperature=0.0)
    with pytest.raises(ValueError, match=r"^temperature=nan must be a finite number >= 0$"):
        generate_predictions(None, None, [], n_samples=1, temperature=float("nan"))
