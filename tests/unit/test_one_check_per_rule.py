"""Issue #46: each rule written once. The plan (exit 2, names the key) and the runtime guards
call the same function, so they cannot drift apart."""
import ast
from pathlib import Path

import pytest
import torch

from llamarl_core.config.errors import ConfigError
from llamarl_core.config.load import load_config
from llamarl_core.config.schema import AlgorithmConfig, GenerationConfig
from llamarl_core.config.streaming import is_sync
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


ROOT = Path(__file__).resolve().parents[2]
# k compared with 0 or 1 in a way that tells sync from async (`k < 0` is a range check, not one)
MODE_TESTS = {(ast.Eq, 0), (ast.NotEq, 0), (ast.Gt, 0), (ast.LtE, 0), (ast.GtE, 1), (ast.Lt, 1)}
FLIP = {ast.Gt: ast.Lt, ast.Lt: ast.Gt, ast.GtE: ast.LtE, ast.LtE: ast.GtE}  # 0 < k is k > 0


def _is_k(node) -> bool:
    return getattr(node, "attr", getattr(node, "id", None)) == "max_offpolicy_steps"


def sync_decisions(path: Path) -> list[int]:
    """Lines that tell sync from async by k itself: k compared with 0 or 1, or `not k`."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not) and _is_k(node.operand):
            lines.append(node.lineno)
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            k, value, op = node.left, node.comparators[0], type(node.ops[0])
            if isinstance(k, ast.Constant):
                k, value, op = value, k, FLIP.get(op, op)
            if _is_k(k) and isinstance(value, ast.Constant) and (op, value.value) in MODE_TESTS:
                lines.append(node.lineno)
    return sorted(lines)


def test_the_scan_finds_each_way_of_writing_the_sync_decision(tmp_path):
    (tmp_path / "m.py").write_text(
        "a = cfg.algorithm.max_offpolicy_steps == 0\n"
        "b = inp.max_offpolicy_steps >= 1\n"
        "c = 0 < alg.max_offpolicy_steps\n"
        "d = not max_offpolicy_steps\n"
        "e = inp.max_offpolicy_steps < 0\n"     # a range check
        "f = max(1, alg.max_offpolicy_steps)\n")
    assert sync_decisions(tmp_path / "m.py") == [1, 2, 3, 4]


def test_one_function_decides_sync_and_no_other_module_compares_k_with_0_or_1():
    # k = 0: the synchronous colocated actor; any k >= 1: async generator and trainer
    assert [is_sync(AlgorithmConfig(max_offpolicy_steps=k)) for k in (0, 1, 4)] == [True, False, False]
    sources = [p for d in ("llamarl_core", "cli", "scripts") for p in sorted((ROOT / d).rglob("*.py"))]
    hits = [f"{p.relative_to(ROOT)}:{line}" for p in sources for line in sync_decisions(p)]
    assert [h.split(":")[0] for h in hits] == ["llamarl_core/config/streaming.py"], hits
