"""Real optimizer steps of the tiny model with kl_in=reward (k1, against a perturbed reference),
ppo + tis and aipo + mis: the reward moves by exactly -kl_coef * sum k1, the loss has no KL
term, and every run's loss is finite and moves the weights."""
import copy
import functools

import pytest
import torch

from llamarl_core.algorithms.overlong import training_rewards
from llamarl_core.config.load import load_config
from llamarl_core.executors.learner import Learner
from llamarl_core.executors.pipeline import learner_config
from llamarl_core.executors.train_step import TrainStep, train_on
from test_learner_updates import _batch, _model

KL_REWARD = ("algorithm.kl_coef=0.1", "algorithm.kl_in=reward", "algorithm.kl_estimator=k1")


@functools.lru_cache(maxsize=None)
def _cfg(*overrides):
    return load_config("cpu_tiny", ["algorithm.group_size=2", "resources.trainer.micro_batch_size=3",
                                    "algorithm.lr_warmup_steps=0", *overrides])


def _learner(*overrides):
    model = _model()
    ref = copy.deepcopy(model)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn_like(p))  # a reference the policy is not: KL != 0
    return Learner(model, learner_config(_cfg(*overrides)), ref_model=ref)


def test_kl_in_reward_subtracts_kl_coef_times_the_k1_sum_from_each_reward():
    learner, batch = _learner(*KL_REWARD), _batch()
    penalty, _, _ = learner.kl_in_reward(batch)
    # the trusted side: both models' log-probs of the sampled tokens, k1 summed by hand
    tokens, mask = batch.tokens, batch.loss_mask > 0
    with torch.no_grad():
        pol, _, _ = learner.model(tokens, head=learner._head(tokens[:, 1:], sampling=False))
        ref, _, _ = learner.ref_model(tokens, head=learner._head(tokens[:, 1:], sampling=False))
    expected = 0.1 * ((pol - ref) * mask).sum(dim=1)  # [8]
    assert torch.allclose(penalty, expected, atol=1e-5) and expected.abs().min() > 1e-3
    rewards, *_ = learner.prepare(batch, penalty)
    base = training_rewards(batch.rewards, batch.completion_lens, "keep", 0, 0)
    assert torch.allclose(rewards, base - expected, atol=1e-5)


def test_kl_in_reward_puts_no_kl_term_in_the_loss():
    batch = _batch()
    tokens, behavior, mask = batch.tokens, batch.behavior_logprobs, batch.loss_mask
    adv = torch.linspace(-1, 1, 8)
    with_reward = _learner(*KL_REWARD)
    without = _learner()
    with_reward._ratios, without._ratios = [], []
    loss_r, metrics = with_reward.micro_loss(tokens, behavior, mask, adv, torch.zeros(8))
    loss_0, _ = without.micro_loss(tokens, behavior, mask, adv, torch.zeros(8))
    assert "kl" not in metrics and torch.equal(loss_r, loss_0)


@pytest.mark.parametrize("overrides", [
    KL_REWARD,
    (*KL_REWARD, "algorithm.updates_per_batch=2"),  # pi_old: the kl pass's log-probs, reused
    ("algorithm.name=ppo", "algorithm.mismatch=tis"),
    ("algorithm.name=aipo", "algorithm.mismatch=mis"),
])
def test_two_real_steps_train_with_a_finite_loss(overrides):
    learner = _learner(*overrides)
    before = [p.detach().clone() for p in learner.model.parameters()]
    for _ in range(2):
        metrics = train_on(learner, _batch(), torch.zeros(8))
        assert torch.isfinite(torch.tensor(metrics["loss"])), metrics
    assert any(not torch.equal(a, b) for a, b in zip(before, learner.model.parameters()))
    if "algorithm.kl_in=reward" in overrides:
        assert metrics["kl"] != 0 and metrics["kl_reward_penalty_mean"] != 0
    if "algorithm.mismatch=tis" in overrides or "algorithm.mismatch=mis" in overrides:
        assert 0 < metrics["mismatch_weight_mean"]


def test_kl_in_reward_streams_group_by_group_like_the_whole_batch():
    whole = train_on(_learner(*KL_REWARD), _batch(), torch.zeros(8))
    learner = _learner(*KL_REWARD)
    step = TrainStep(learner, early=True)
    for g in range(4):  # the groups as they arrive, micro-batches started on them
        step.add(_batch(slice(2 * g, 2 * g + 2)), torch.zeros(2))
        step.run_ready()
    streamed = step.finish(_batch(), torch.zeros(8))
    for key in ("kl", "kl_reward_penalty_mean", "loss", "grad_norm"):
        assert streamed[key] == pytest.approx(whole[key], rel=1e-4, abs=1e-6), key
