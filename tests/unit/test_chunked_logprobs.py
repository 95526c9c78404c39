"""Trainer log-probs chunk by chunk from the hidden states: the same values and gradients as
from the full logits, with at most 2 fp32 [B, T, V] tensors alive through forward and backward
(a dispatch mode follows every fp32 storage of that size from its op until it is freed)."""
import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from llamarl_core.config.load import load_config
from llamarl_core.executors.learner import Learner
from llamarl_core.executors.pipeline import learner_config
from llamarl_core.generation import sampling
from llamarl_core.generation.sampling import chunked_policy_logprobs, sampling_logprobs
from llamarl_core.models import Llama, ModelArgs

ARGS = ModelArgs(vocab_size=512, dim=16, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=32, max_seq_len=32,
                 rope_theta=10000.0)


class LiveFullLogits(TorchDispatchMode):
    """The most fp32 storages of at least `nbytes` alive at once, over every op run inside."""

    def __init__(self, nbytes: int):
        super().__init__()
        self.nbytes, self.live, self.peak, self.seen = nbytes, 0, 0, set()

    def _gone(self, key):
        self.live -= 1
        self.seen.discard(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.dtype == torch.float32 and t.untyped_storage().nbytes() >= self.nbytes:
                storage = t.untyped_storage()
                if id(storage) not in self.seen:
                    self.seen.add(id(storage))
                    self.live += 1
                    weakref.finalize(storage, self._gone, id(storage))
        self.peak = max(self.peak, self.live)
        return out


def _batch():
    g = torch.Generator().manual_seed(0)
    return torch.randint(3, ARGS.vocab_size, (4, 24), generator=g), torch.randn(4, 23, 16, generator=g)


@pytest.mark.parametrize("top_k,top_p,entropy", [(0, 1.0, False), (40, 0.9, True)])
def test_chunked_logprobs_equal_the_full_logits_ones_in_value_and_gradient(top_k, top_p, entropy):
    tokens, hidden = _batch()
    head = torch.nn.Linear(16, ARGS.vocab_size, bias=False)
    h1, h2 = hidden.clone().requires_grad_(), hidden.clone().requires_grad_()
    logits = head(h1)
    _, want = sampling_logprobs(logits, 0.7, top_k, top_p, tokens=tokens[:, 1:])
    want_ent = -(torch.log_softmax(logits / 0.7, -1).exp() * torch.log_softmax(logits / 0.7, -1)).sum(-1)
    (want.sum() + (want_ent.sum() if entropy else 0)).backward()
    grads = (h1.grad.clone(), head.weight.grad.clone())
    head.weight.grad = None
    got, ent, _ = chunked_policy_logprobs(h2, head, tokens[:, 1:], 0.7, top_k, top_p, entropy,
                                        chunk_bytes=4 * 512 * 5 * 4)  # 5 positions a chunk: 5 chunks
    (got.sum() + (ent.sum() if entropy else 0)).backward()
    torch.testing.assert_close(got, want)
    if entropy:
        torch.testing.assert_close(ent, want_ent)
    torch.testing.assert_close(h2.grad, grads[0])
    torch.testing.assert_close(head.weight.grad, grads[1])


def test_an_rl_micro_batch_holds_at_most_two_fp32_logit_sized_tensors(monkeypatch):
    # Fails before the fix: the model's fp32 logits, their scaled copy, the log softmax, the
    # entropy's log softmax, the top-k/top-p masks and the gradients: 7 alive at the peak here.
    monkeypatch.setattr(sampling, "LOGPROB_CHUNK_BYTES", 4 * 512 * 4 * 4)  # 4 positions a chunk
    cfg = load_config("cpu_tiny", ["algorithm.group_size=2", "algorithm.entropy_coef=0.01",
                                   "generation.top_k=50", "generation.top_p=0.95"])
    torch.manual_seed(0)
    model = Llama(ARGS)
    learner = Learner(model, learner_config(cfg))
    learner._ratios = []  # rl_step's per-step list
    tokens, _ = _batch()
    B, T, V = 4, 23, ARGS.vocab_size
    mask = torch.ones(B, T)
    with LiveFullLogits(B * T * V * 4) as live:
        loss, _ = learner.micro_loss(tokens, -torch.rand(B, T), mask, torch.tensor([1.0, -1, 0.5, -0.5]),
                                      torch.zeros(B))
        loss.backward()
    assert live.peak <= 2, live.peak
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
