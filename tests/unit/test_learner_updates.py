"""algorithm.updates_per_batch x mini_batches: PPO-style epochs over one batch. pi_old is the
policy before the first update and every later ratio is taken against it."""
import functools

import torch

from llamarl_core.config.load import load_config
from llamarl_core.executors.learner import Learner
from llamarl_core.executors.train_step import train_on
from llamarl_core.executors.pipeline import learner_config
from llamarl_core.models import Llama, get_preset, with_overrides
from llamarl_core.wire.rollout import Rollout


def _model():
    torch.manual_seed(0)
    return Llama(with_overrides(get_preset("tiny-2m"), dim=32, n_layers=1, n_heads=2, n_kv_heads=2,
                                ffn_dim=64, max_seq_len=32))


def _batch(rows=slice(None)):
    """4 prompts x 2 samples, off-policy behaviour log-probs, every group informative."""
    g = torch.Generator().manual_seed(0)
    lens = torch.tensor([1, 12, 3, 7, 12, 2, 5, 9])
    tokens = torch.zeros(8, 16, dtype=torch.long)
    for r in range(8):
        tokens[r, :4 + int(lens[r])] = torch.randint(3, 200, (4 + int(lens[r]),), generator=g)
    behavior = -torch.rand(8, 15, generator=g)  # log mu at the targets [8, L-1]
    b = Rollout(tokens, torch.full((8,), 4), lens, behavior, torch.tensor([1.0, 0, 0, 1, 1, 0, 1, 0]),
                torch.arange(8) // 2, 0, 0, 0)
    return b.select(torch.arange(8)[rows])


@functools.lru_cache(maxsize=None)  # composing a config costs more than the step itself
def _cfg(*overrides):
    return load_config("cpu_tiny", ["algorithm.group_size=2", "resources.trainer.micro_batch_size=3",
                                    "algorithm.lr_warmup_steps=0", *overrides])


def _learner(*overrides, freeze=True):
    cfg = _cfg(*overrides)
    model = _model()
    learner = Learner(model, learner_config(cfg))
    steps = []
    real_step = learner.optimizer.step

    def step():  # record each update's gradient and rate; `freeze` keeps the weights as they were
        steps.append(([p.grad.clone() for p in model.parameters()],
                      learner.optimizer.param_groups[0]["lr"]))
        if not freeze:
            real_step()
    learner.optimizer.step = step
    return learner, steps


def test_one_update_per_batch_computes_no_pi_old():
    learner, steps = _learner()
    calls = []
    learner._old_logprobs = lambda *a: calls.append(a)
    train_on(learner, _batch(), torch.zeros(8))
    assert calls == [] and len(steps) == 1


def test_each_mini_batch_steps_on_its_own_rows_with_the_steps_rate():
    # 2 passes x 2 mini-batches = 4 optimizer steps at one learning rate. With the weights held,
    # pi = pi_old in every update, so update j has exactly the gradient of its half of the batch
    # trained alone (the halves hold whole groups: the advantages are the same).
    learner, steps = _learner("algorithm.updates_per_batch=2", "algorithm.mini_batches=2")
    train_on(learner, _batch(), torch.zeros(8))
    assert len(steps) == 4 and len({lr for _, lr in steps}) == 1
    for j, rows in enumerate((slice(0, 4), slice(4, 8), slice(0, 4), slice(4, 8))):
        alone, want = _learner()
        train_on(alone, _batch(rows), torch.zeros(4))
        for got, expected in zip(steps[j][0], want[0][0]):
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-7)


def test_later_updates_take_their_ratios_against_the_policy_before_the_first():
    # PPO with a tiny clip range: the first update sees pi/pi_old = 1 (nothing clipped); after
    # a real optimizer step the second update's ratios have left [1 - eps, 1 + eps], which they
    # could not if pi_old were recomputed after each update.
    learner, _ = _learner("algorithm.name=ppo", "algorithm.clip_eps=0.001", "algorithm.lr=0.01",
                          "algorithm.updates_per_batch=2", freeze=False)
    per_update = []
    update = learner.optimizer_step
    learner.optimizer_step = lambda *a, **k: per_update.append(update(*a, **k)) or per_update[-1]
    metrics = train_on(learner, _batch(), torch.zeros(8))
    assert per_update[0]["ppo_clip_frac"] == 0.0 and per_update[1]["ppo_clip_frac"] > 0.5
    assert metrics["ppo_clip_frac"] == (per_update[0]["ppo_clip_frac"] + per_update[1]["ppo_clip_frac"]) / 2
    # pi/mu is reported for the batch as sampled: one histogram entry per token, not per update
    assert learner.histograms["trainer/is_ratio"].numel() == int(_batch().completion_lens.sum())
