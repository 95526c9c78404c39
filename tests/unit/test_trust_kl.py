"""#44 case 1: the KL to the reference under top-k/top-p. Both sides are the untruncated
softmax of logits / T (docs/ALGORITHMS.md); pi/mu keeps the truncated sampling distribution.
Before the fix the policy side was truncated and the reference's was not, so the KL of a
policy equal to its reference was far from 0 (5.54 at step 1 with generation.top_k=50)."""
import copy
import math

import torch

from llamarl_core.config.load import load_config
from llamarl_core.executors.learner import Learner
from llamarl_core.executors.pipeline import learner_config
from llamarl_core.generation.sampling import sampling_logprobs
from llamarl_core.models import Llama, ModelArgs

ARGS = ModelArgs(vocab_size=64, dim=16, n_layers=1, n_heads=2, n_kv_heads=1, ffn_dim=32, max_seq_len=32,
                 rope_theta=10000.0)
TRUNCATION = ["generation.top_k=5", "generation.top_p=0.9", "generation.temperature=0.7"]


def _learner(model, ref, kl_coef=0.1):
    cfg = load_config("cpu_tiny", ["algorithm.group_size=2", f"algorithm.kl_coef={kl_coef}", *TRUNCATION])
    learner = Learner(model, learner_config(cfg), ref_model=ref)
    learner._ratios = []  # rl_step's per-step list
    return learner


class FixedLogits(torch.nn.Module):
    """A "model" whose head sees chosen logits: hidden = the logits, output = the identity."""

    def __init__(self, logits):  # [B, L, V]
        super().__init__()
        self.h = torch.nn.Parameter(torch.tensor(logits))
        self.output = torch.nn.Linear(self.h.shape[-1], self.h.shape[-1], bias=False)
        with torch.no_grad():
            self.output.weight.copy_(torch.eye(self.h.shape[-1]))

    def forward(self, tokens, head):
        return head(self.h, self.output)


def test_kl_is_zero_under_top_k_and_top_p_when_the_policy_equals_its_reference():
    torch.manual_seed(0)
    model = Llama(ARGS)
    learner = _learner(model, copy.deepcopy(model))
    tokens = torch.randint(3, ARGS.vocab_size, (4, 12), generator=torch.Generator().manual_seed(1))
    B, T = 4, 11
    _, metrics = learner.micro_loss(tokens, -torch.rand(B, T), torch.ones(B, T), torch.tensor([1.0, -1, 0.5, -0.5]),
                                    torch.zeros(B))
    assert abs(metrics["kl"]) < 1e-6, metrics["kl"]


def _softmax_logprob(logits, t, temperature):
    z = [x / temperature for x in logits]
    return z[t] - math.log(sum(math.exp(x) for x in z))


def test_kl_under_truncation_is_k3_of_the_untruncated_softmaxes_worked_by_hand():
    # one target position, vocabulary of 4: token 1 follows token 0
    policy, reference, target, temperature, kl_coef = [2.0, 1.0, 0.5, -1.0], [1.0, 1.5, 0.0, -0.5], 1, 0.7, 0.1
    model = FixedLogits([[policy, [0.0] * 4]])
    learner = _learner(model, FixedLogits([[reference, [0.0] * 4]]), kl_coef)
    tokens = torch.tensor([[0, target]])
    # log pi = log softmax(policy / T)[1], untruncated; the reference's likewise
    log_pi = _softmax_logprob(policy, target, temperature)
    log_ref = _softmax_logprob(reference, target, temperature)
    k3 = math.exp(log_ref - log_pi) - (log_ref - log_pi) - 1.0
    # mu: what the generator recorded, under its truncated distribution (top-k 5 of 4 keeps all;
    # top-p 0.9 drops token 3), so pi/mu = 1 on the sampled distribution
    _, behavior = sampling_logprobs(torch.tensor([[policy]]), temperature, 5, 0.9, tokens=torch.tensor([[target]]))
    assert abs(float(behavior) - log_pi) > 1e-3  # the truncation does change this token's log-prob
    loss, metrics = learner.micro_loss(tokens, behavior, torch.ones(1, 1), torch.zeros(1), torch.zeros(1))
    assert abs(metrics["kl"] - k3) < 1e-6, (metrics["kl"], k3)
    assert abs(float(loss.detach()) - kl_coef * k3) < 1e-6  # advantage 0: the loss is the KL term alone
    assert abs(float(learner._ratios[0]) - 1.0) < 1e-6  # pi/mu still on the truncated distribution
