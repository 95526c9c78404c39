"""algorithm.overlong: DAPO's overlong filtering and soft punishment, by hand."""
import functools

import pytest
import torch

from llamarl_core.algorithms.overlong import overlong_penalty, training_rewards, truncated_rows
from llamarl_core.config.errors import ConfigError
from llamarl_core.config.load import load_config
from llamarl_core.executors.learner import Learner
from llamarl_core.executors.train_step import train_on
from llamarl_core.executors.pipeline import learner_config
from llamarl_core.models import Llama, get_preset, with_overrides
from llamarl_core.wire.rollout import Rollout

EOS = 2


def test_soft_penalty_is_zero_before_the_buffer_and_ramps_to_minus_one_at_the_limit():
    # L = 10, B = 4: free up to 6 tokens; 7 -> -1/4, 8 -> -2/4, 9 -> -3/4, 10 -> -1
    lens = torch.tensor([1, 6, 7, 8, 9, 10])
    assert overlong_penalty(lens, 10, 4).tolist() == [0.0, 0.0, -0.25, -0.5, -0.75, -1.0]
    # the penalty is added to the verifier's reward only in penalty mode
    rewards = torch.tensor([1.0, 1, 1, 0, 1, 1])
    assert training_rewards(rewards, lens, "penalty", 10, 4).tolist() == [1.0, 1.0, 0.75, -0.5, 0.25, 0.0]
    assert training_rewards(rewards, lens, "filter", 10, 4) is rewards


def test_a_completion_is_truncated_when_it_hit_the_limit_without_an_eos():
    # prompt of 2 tokens; completions: 3 tokens at a limit of 3 ending in EOS (finished), 3 without
    # (cut), 2 without (stopped early by a stop string: not cut)
    tokens = torch.tensor([[5, 6, 7, 8, EOS, 0], [5, 6, 7, 8, 9, 0], [5, 6, 7, 8, 0, 0]])
    cut = truncated_rows(tokens, torch.tensor([2, 2, 2]), torch.tensor([3, 3, 2]), 3, (EOS,))
    assert cut.tolist() == [False, True, False]


def _model():
    torch.manual_seed(0)
    return Llama(with_overrides(get_preset("tiny-2m"), dim=32, n_layers=1, n_heads=2, n_kv_heads=2,
                                ffn_dim=64, max_seq_len=32))


def _batch():
    """2 groups of 2; row 1 is cut at the limit of 4 tokens, the others end in EOS."""
    tokens = torch.tensor([[9, 9, 5, EOS, 0, 0], [9, 9, 5, 6, 7, 8], [9, 8, 5, 6, EOS, 0], [9, 8, EOS, 0, 0, 0]])
    return Rollout(tokens, torch.full((4,), 2), torch.tensor([2, 4, 3, 1]), torch.full((4, 5), -1.0),
                   torch.tensor([1.0, 0.0, 1.0, 0.0]), torch.tensor([0, 0, 1, 1]), 0, 0, 0)


@functools.lru_cache(maxsize=None)
def _cfg(overlong: str):
    return load_config("cpu_tiny", ["algorithm.group_size=2", "generation.max_new_tokens=4",
                                    f"algorithm.overlong={overlong}",
                                    *(["algorithm.overlong_buffer_tokens=2"] if overlong == "penalty" else [])])


def _grads(overlong: str, batch: Rollout):
    cfg = _cfg(overlong)
    model = _model()
    learner = Learner(model, learner_config(cfg), eos_ids=(EOS,))
    captured = []
    learner.optimizer.step = lambda: captured.append([p.grad.clone() for p in model.parameters()])
    metrics = train_on(learner, batch, torch.zeros(batch.num_rows))
    return captured[0], metrics


def test_filter_trains_as_if_the_truncated_row_had_no_tokens():
    # Same advantages (the group keeps its reward), row 1's tokens out of the loss: the gradient
    # equals that of the batch where row 1 has advantage 0 and no completion token counted.
    got, metrics = _grads("filter", _batch())
    cut = _batch()
    cut.rewards = torch.tensor([1.0, 0.0, 1.0, 0.0])
    cut.completion_lens = torch.tensor([2, 0, 3, 1])  # row 1 counts no token; row 0 keeps A = +0.5
    cut.loss_mask[1] = 0.0                             # (its loss mask: no model token either)
    want, _ = _grads("keep", cut)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    assert metrics["overlong_filtered_frac"] == 0.25


def test_penalty_shapes_the_advantages():
    # L = 4, B = 2: lengths 2, 4, 3, 1 -> penalties 0, -1, -0.5, 0; rewards 1, 0, 1, 0 -> 1, -1, 0.5, 0
    # = the batch whose verifier gave those rewards, with overlong=keep.
    got, metrics = _grads("penalty", _batch())
    shaped = _batch()
    shaped.rewards = torch.tensor([1.0, -1.0, 0.5, 0.0])
    want, _ = _grads("keep", shaped)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    assert metrics["overlong_penalty_mean"] == pytest.approx(-1.5 / 4)


def test_penalty_needs_a_buffer_and_a_buffer_needs_penalty():
    with pytest.raises(ConfigError, match="overlong_buffer_tokens >= 1"):
        load_config("cpu_tiny", ["algorithm.overlong=penalty"])
    with pytest.raises(ConfigError, match="overlong_buffer_tokens=4 is read only with algorithm.overlong=penalty"):
        load_config("cpu_tiny", ["algorithm.overlong_buffer_tokens=4"])
    with pytest.raises(ConfigError, match="algorithm.overlong='cut'"):
        load_config("cpu_tiny", ["algorithm.overlong=cut"])
