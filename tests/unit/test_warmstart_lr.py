"""The supervised warm start's learning rate comes from the RL schedule (algorithms/lr_schedule.py)
and is, step for step, the one the warm start had when it kept its own formula (cpu_tiny's warm
start was tuned on it)."""
import math

import pytest
import torch

from llamarl_core.algorithms.lr_schedule import warmstart_lr_at
from llamarl_core.config.schema import WarmStartConfig
from llamarl_core.sft.warmstart import WarmStart


def old_warmstart_lr(t: int, steps: int, base_lr: float) -> float:
    """WarmStart._lr before it used lr_schedule.py, verbatim: linear warm-up over the first 10%
    of steps, then cosine decay to 10%."""
    warmup = max(1, steps // 10)
    if t < warmup:
        return base_lr * (t + 1) / warmup
    progress = (t - warmup) / max(1, steps - warmup)
    return base_lr * (0.1 + 0.45 * (1 + math.cos(math.pi * min(1.0, progress))))


@pytest.mark.parametrize("steps", [1, 2, 9, 10, 11, 130, 400])
@pytest.mark.parametrize("base_lr", [1e-4, 3e-5, 1.0])
def test_the_warm_start_rate_equals_the_old_formula_at_every_step(steps, base_lr):
    assert [warmstart_lr_at(t, base_lr, steps) for t in range(steps)] == [
        old_warmstart_lr(t, steps, base_lr) for t in range(steps)]


def test_the_warm_start_rate_by_hand():
    # steps 130: warm-up W = 13 steps of 1/13 .. 13/13; then p = (t - 13) / 117, lr = 0.1 + 0.9 (1 + cos pi p) / 2
    rates = [warmstart_lr_at(t, 1.0, 130) for t in range(130)]
    assert rates[:13] == pytest.approx([(t + 1) / 13 for t in range(13)])
    assert rates[13] == 1.0                                   # p = 0
    assert rates[13 + 117 // 3] == pytest.approx(0.1 + 0.9 * 0.75)  # p = 1/3: cos = 1/2
    assert rates[-1] == pytest.approx(0.1 + 0.9 * (1 + math.cos(math.pi * 116 / 117)) / 2)
    # steps 1 and 10: W = 1, the first step trains at the full rate
    assert warmstart_lr_at(0, 2.0, 1) == 2.0
    assert [warmstart_lr_at(t, 1.0, 10) for t in (0, 1, 5)] == pytest.approx(
        [1.0, 1.0, 0.1 + 0.9 * (1 + math.cos(math.pi * 4 / 9)) / 2])


class TinyLM(torch.nn.Module):
    """Embedding and output head: what WarmStart.step needs of a model (`model(tokens, head=)`)."""

    def __init__(self, vocab: int = 8):
        super().__init__()
        self.embed, self.output = torch.nn.Embedding(vocab, 4), torch.nn.Linear(4, vocab, bias=False)

    def forward(self, tokens, head):
        return head(self.embed(tokens), self.output)


def test_each_warm_start_step_trains_at_the_old_formulas_rate(monkeypatch):
    torch.manual_seed(0)
    ws = WarmStart(TinyLM(), WarmStartConfig(steps=10, lr=1e-3, batch_size=1), pad_id=0)
    used = []
    original = ws.optimizer.step
    monkeypatch.setattr(ws.optimizer, "step", lambda *a, **k: used.append(
        ws.optimizer.param_groups[0]["lr"]) or original(*a, **k))
    for _ in range(10):
        ws.step([([1, 2, 3, 4], [0, 1, 1, 1])])
    assert used == [old_warmstart_lr(t, 10, 1e-3) for t in range(10)]
