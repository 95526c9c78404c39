"""Length-sorted micro-batches cut to their own longest row give the gradient of the whole
batch in one piece: less padding, same step."""
import torch

from llamarl_core.config.load import load_config
from llamarl_core.executors.learner import Learner
from llamarl_core.models import Llama, get_preset, with_overrides
from llamarl_core.wire.rollout import Rollout


def _batch(n=8, prompt=4, max_completion=12):
    g = torch.Generator().manual_seed(0)
    completion_lens = torch.tensor([1, 12, 3, 7, 12, 2, 5, 9])[:n]
    tokens = torch.zeros(n, prompt + max_completion, dtype=torch.long)
    for r in range(n):
        tokens[r, :prompt + int(completion_lens[r])] = torch.randint(3, 200, (prompt + int(completion_lens[r]),), generator=g)
    behavior = -torch.rand(n, max_completion, generator=g)  # off-policy: ratios differ from 1
    return Rollout(tokens, torch.full((n,), prompt), completion_lens, behavior,
                   torch.tensor([1.0, 0, 0, 1, 1, 0, 1, 0])[:n], torch.arange(n) // 2, 0, 0, 0)


def _grads(length_sorted: bool, micro: int) -> list[torch.Tensor]:
    cfg = load_config("cpu_tiny", ["algorithm.group_size=2", f"resources.trainer.micro_batch_size={micro}"])
    torch.manual_seed(0)
    model = Llama(with_overrides(get_preset("tiny-2m"), dim=32, n_layers=1, n_heads=2, n_kv_heads=2,
                                 ffn_dim=64, max_seq_len=32))
    learner = Learner(model, cfg)
    learner.length_sorted = length_sorted
    captured = []
    learner.optimizer.step = lambda: captured.append([p.grad.clone() for p in model.parameters()])
    learner.rl_step(_batch(), torch.zeros(8))
    return captured[0]


def test_sorted_micro_batches_give_the_whole_batch_gradient():
    whole = _grads(length_sorted=False, micro=8)
    for got, want in zip(_grads(length_sorted=True, micro=3), whole):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-7)
