"""Length-sorted micro-batches cut to their own longest row give the gradient of the whole
batch in one piece: less padding, same step."""
import torch

from llamarl_core.config.load import load_config
from llamarl_core.executors.learner import Learner
from llamarl_core.executors.train_step import train_on
from llamarl_core.executors.pipeline import learner_config
from llamarl_core.models import Llama, get_preset, with_overrides
from llamarl_core.wire.rollout import Rollout


def _batch(n=8, prompt_lens=(4,) * 8, max_completion=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    prompt_lens = torch.tensor(prompt_lens)[:n]
    completion_lens = torch.tensor([1, 12, 3, 7, 12, 2, 5, 9])[:n]
    tokens = torch.zeros(n, int(prompt_lens.max()) + max_completion, dtype=torch.long)
    for r in range(n):
        used = int(prompt_lens[r] + completion_lens[r])
        tokens[r, :used] = torch.randint(3, 200, (used,), generator=g)
    behavior = -torch.rand(n, tokens.shape[1] - 1, generator=g)  # at the targets; off-policy: ratios differ from 1
    return Rollout(tokens, prompt_lens, completion_lens, behavior,
                   torch.tensor([1.0, 0, 0, 1, 1, 0, 1, 0])[:n], torch.arange(n) // 2, 0, 0, 0)


def _learner(micro: int, overrides=(), **learner_kw) -> tuple[Llama, Learner]:
    """A one-block model (seed 0) and its learner, groups of 2."""
    cfg = load_config("cpu_tiny", ["algorithm.group_size=2", f"resources.trainer.micro_batch_size={micro}", *overrides])
    torch.manual_seed(0)
    model = Llama(with_overrides(get_preset("tiny-2m"), dim=32, n_layers=1, n_heads=2, n_kv_heads=2,
                                 ffn_dim=64, max_seq_len=32))
    return model, Learner(model, learner_config(cfg), **learner_kw)


def _grads(length_sorted: bool, micro: int) -> list[torch.Tensor]:
    model, learner = _learner(micro)
    learner.length_sorted = length_sorted
    captured = []
    learner.optimizer.step = lambda: captured.append([p.grad.clone() for p in model.parameters()])
    train_on(learner, _batch(), torch.zeros(8))
    return captured[0]


def test_sorted_micro_batches_give_the_whole_batch_gradient():
    whole = _grads(length_sorted=False, micro=8)
    for got, want in zip(_grads(length_sorted=True, micro=3), whole):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-7)


def _step(skip: bool, rewards: torch.Tensor, micro: int = 3, **learner_kw):
    model, learner = _learner(micro, **learner_kw)
    if skip is not None:
        learner.skip_zero_advantage = skip
    captured = []
    learner.optimizer.step = lambda: captured.append([p.grad for p in model.parameters()])
    batch = _batch()
    batch.rewards = rewards
    metrics = train_on(learner, batch, torch.zeros(8))
    return captured[0], metrics, learner


def test_rows_with_zero_advantage_are_skipped_and_the_gradient_is_unchanged():
    # groups of 2: (1, 1) and (0, 0) scored alike, so rows 0, 1, 4, 5 have advantage exactly 0
    rewards = torch.tensor([1.0, 1, 0, 1, 0, 0, 1, 0])
    want, full, _ = _step(False, rewards, micro=8)
    got, skipped, learner = _step(True, rewards)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-7)
    assert skipped["trained_rows_frac"] == 0.5 and full["trained_rows_frac"] == 1.0
    assert learner.histograms["trainer/is_ratio"].numel() == int(_batch().completion_lens[[2, 3, 6, 7]].sum())
    assert skipped["is_ratio_mean"] > 0 and abs(skipped["loss"]) > 0  # means over trained rows only


def test_a_batch_where_every_group_scored_alike_trains_nothing():
    grads, metrics, _ = _step(True, torch.tensor([1.0, 1, 0, 0, 1, 1, 0, 0]))
    assert metrics["trained_rows_frac"] == 0.0 and metrics["grad_norm"] == 0.0
    assert metrics["is_ratio_max"] == 1.0 and metrics["loss"] == 0.0 and metrics["staleness_max"] == 0.0
    # no backward ran; the gradients are zeros, so Adam's momentum and weight decay still step
    assert all(g is not None and float(g.abs().sum()) == 0.0 for g in grads)


def test_data_parallel_ranks_and_kl_or_entropy_terms_keep_every_row():
    assert Learner(torch.nn.Linear(2, 2), learner_config(load_config("cpu_tiny", [])), data_parallel=True).skip_zero_advantage is False
    assert Learner(torch.nn.Linear(2, 2), learner_config(load_config("cpu_tiny", ["algorithm.entropy_coef=0.01"]))).skip_zero_advantage is False
    assert Learner(torch.nn.Linear(2, 2), learner_config(load_config("cpu_tiny", []))).skip_zero_advantage is True


def _step_grads(head_from_completion: bool, overrides=()) -> tuple[list[torch.Tensor], dict]:
    model, learner = _learner(3, overrides)
    learner.head_from_completion = head_from_completion
    captured = []
    step = learner.optimizer.step
    learner.optimizer.step = lambda: (captured.append([p.grad.clone() for p in model.parameters()]), step())
    # prompts of 3-7 tokens: micro-batches start their completions at different places
    metrics = train_on(learner, _batch(prompt_lens=(4, 6, 3, 5, 4, 7, 3, 6), seed=1), torch.zeros(8))
    return captured, metrics


def test_the_head_from_the_first_completion_position_gives_the_same_step():
    # Off by one position either way, the log-probs of other tokens would enter the loss and
    # the gradients would differ. Two updates per batch also check pi_old (its own forward).
    for overrides in ((), ("algorithm.updates_per_batch=2", "algorithm.entropy_coef=0.01")):
        want, want_metrics = _step_grads(False, overrides)
        got, got_metrics = _step_grads(True, overrides)
        assert len(got) == len(want) == (2 if overrides else 1)
        for g_step, w_step in zip(got, want):
            for g, w in zip(g_step, w_step):
                torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-7)
        for k in ("loss", "is_ratio_mean", "is_ratio_max"):
            assert abs(got_metrics[k] - want_metrics[k]) < 1e-5, k
