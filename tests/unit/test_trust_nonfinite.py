"""#44 case 4, the trainer's half: never train on a non-finite number. A step whose loss or
grad norm is NaN/inf is skipped (no parameter or Adam state changes) and counted in
`trainer/nonfinite_steps` (running total); `trainer.max_nonfinite_steps` of them in a row stop
the run naming the steps, before anything is published or checkpointed. Before the fix a reward
of 1e308 overflowed its group's advantage and the optimizer wrote NaN into every weight."""
import functools
import math
from types import SimpleNamespace

import pytest
import torch

from llamarl_core.algorithms import compute_advantages
from llamarl_core.algorithms.nonfinite import NonFiniteSteps
from llamarl_core.config.load import load_config
from llamarl_core.executors.learner import Learner
from llamarl_core.executors.pipeline import learner_config
from llamarl_core.executors.train_step import TrainStep, train_on
from llamarl_core.executors.trainer import TrainerExecutor
from llamarl_core.models import Llama, ModelArgs
from llamarl_core.observe.tensorboard_log import TensorBoardLog
from llamarl_core.wire.rollout import Rollout

ARGS = ModelArgs(vocab_size=260, dim=32, n_layers=1, n_heads=2, n_kv_heads=2, ffn_dim=64,
                 max_seq_len=64, rope_theta=10000.0)
OVERFLOW = [1e308, -1e308, 1.0, 0.0]  # the first group's advantage: inf - inf = NaN
FINE = [1.0, 0.0, 1.0, 0.0]


@functools.lru_cache(maxsize=None)
def _cfg(*overrides):
    return load_config("cpu_tiny", ["algorithm.group_size=2", "algorithm.prompts_per_step=2",
                                    "algorithm.lr_warmup_steps=0", "algorithm.lr=0.01",
                                    "resources.trainer.micro_batch_size=2", "generation.max_new_tokens=20",
                                    *overrides])


def _learner(*overrides):
    torch.manual_seed(0)
    return Learner(Llama(ARGS), learner_config(_cfg(*overrides)))


def _batch(rewards, step=0):
    g = torch.Generator().manual_seed(step)
    tokens = torch.randint(3, 200, (4, 12), generator=g)
    return Rollout(tokens, torch.full((4,), 4), torch.full((4,), 8), -torch.rand(4, 11, generator=g),
                   torch.tensor(rewards, dtype=torch.float64), torch.tensor([0, 0, 1, 1]), 0, 0, step)


def _params(learner):
    return [p.detach().clone() for p in learner.model.parameters()]


def _unchanged(learner, before):
    return all(torch.equal(a, b) for a, b in zip(before, learner.model.parameters()))


def _streamed(learner, batch):
    step = TrainStep(learner, early=True)
    step.add(batch, torch.zeros(batch.num_rows))
    return step.finish(batch, torch.zeros(batch.num_rows))


def test_the_overflowing_reward_really_makes_a_non_finite_advantage():
    a = _cfg().algorithm
    assert not torch.isfinite(compute_advantages(torch.tensor(OVERFLOW), a.group_size, a.advantage)).all()


@pytest.mark.parametrize("path", ["whole", "early"])
def test_a_non_finite_step_leaves_every_parameter_and_adam_state_unchanged_and_is_counted(path):
    learner = _learner()
    before = _params(learner)
    run = (lambda b: train_on(learner, b, torch.zeros(4))) if path == "whole" else functools.partial(_streamed, learner)
    metrics = run(_batch(OVERFLOW))
    assert not math.isfinite(metrics["loss"]) or not math.isfinite(metrics["grad_norm"])
    assert _unchanged(learner, before), "a NaN update reached the weights"
    assert not learner.optimizer.state, "Adam's moments took the NaN step"
    assert all(p.grad is None for p in learner.model.parameters())
    assert metrics["nonfinite_steps"] == 1.0
    # the next finite step trains as usual; the total stays 1 (a running total, not per step)
    metrics = run(_batch(FINE, step=1))
    assert not _unchanged(learner, before) and all(torch.isfinite(p).all() for p in learner.model.parameters())
    assert metrics["nonfinite_steps"] == 1.0


def test_the_third_non_finite_step_in_a_row_stops_naming_steps_1_to_3():
    learner = _learner()
    train_on(learner, _batch(OVERFLOW), torch.zeros(4))
    train_on(learner, _batch(OVERFLOW), torch.zeros(4))
    with pytest.raises(NonFiniteSteps) as stopped:
        train_on(learner, _batch(OVERFLOW), torch.zeros(4))
    assert str(stopped.value).startswith(
        "trainer: loss or grad norm not finite for 3 steps in a row (steps 1-3; trainer.max_nonfinite_steps=3): "
        "stopped without a checkpoint")


def test_non_finite_steps_that_are_not_in_a_row_do_not_stop_the_run():
    learner = _learner()
    for rewards in (OVERFLOW, OVERFLOW, FINE, OVERFLOW, OVERFLOW):
        metrics = train_on(learner, _batch(rewards), torch.zeros(4))
    assert metrics["nonfinite_steps"] == 4.0


def test_trainer_max_nonfinite_steps_reaches_the_learner():
    learner = _learner("trainer.max_nonfinite_steps=1")
    with pytest.raises(NonFiniteSteps, match=r"for 1 steps in a row \(step 1; trainer.max_nonfinite_steps=1\)"):
        train_on(learner, _batch(OVERFLOW), torch.zeros(4))


def test_the_trainer_loop_stops_before_publishing_or_checkpointing_the_failing_step():
    # TrainerExecutor.run itself, around a real learner: every role-facing call recorded
    learner, calls = _learner(), []
    before = _params(learner)
    cfg = _cfg("run.max_steps=10", "run.checkpoint_every_steps=1", "run.eval_every_steps=0")
    def collect(step, version, on_groups=None, on_idle=None):  # whole or streamed (cpu_tiny streams)
        batch = _batch(OVERFLOW, step)
        if on_groups is not None:
            on_groups([batch], torch.zeros(4))
        return batch, torch.zeros(4), 0.0
    feed = SimpleNamespace(collect=collect, wait_for_peers=lambda step: None, start=lambda: None)
    span = lambda *a, **k: __import__("contextlib").nullcontext()  # noqa: E731
    ctx = SimpleNamespace(progress=lambda: None, timeline=SimpleNamespace(span=span))
    trainer = SimpleNamespace(
        run_cfg=cfg.run, ctx=ctx, learner=learner, feed=feed, sampler=feed, version=0, log=None,
        publisher=SimpleNamespace(publish=lambda v: calls.append(("publish", v)) or {}),
        warm_start=lambda: None, evaluate=lambda: calls.append(("evaluate",)),
        sync=lambda: calls.append(("publish", 0)), _out_of_time=lambda t: False,
        _log_examples=lambda step, batch: None, _log=lambda step, *a: calls.append(("log", step + 1)),
        save_checkpoint=lambda step: calls.append(("checkpoint", step)),
        checkpoint=lambda name: calls.append(("checkpoint", name)),
        _write_summary=lambda s: calls.append(("summary",)))
    with pytest.raises(NonFiniteSteps, match=r"steps 1-3"):
        TrainerExecutor.run(trainer)
    # steps 1 and 2 were skipped updates: their versions and checkpoints hold the start weights
    assert calls == [("evaluate",), ("publish", 0), ("publish", 1), ("log", 1), ("checkpoint", 1),
                     ("publish", 2), ("log", 2), ("checkpoint", 2)]
    assert _unchanged(learner, before)


def test_tensorboard_skips_a_histogram_with_no_finite_value_instead_of_crashing(tmp_path):
    log = TensorBoardLog(str(tmp_path))
    try:  # before the fix: ValueError "The histogram is empty, please file a bug report."
        log.write({"step": 1, "trainer/loss": float("nan")},
                  {"trainer/is_ratio": torch.tensor([float("nan"), float("inf")]),
                   "trainer/staleness": torch.tensor([0.0, 1.0, float("nan")])})
    finally:
        log.close()
