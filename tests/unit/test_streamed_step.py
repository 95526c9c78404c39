"""A step trained while its groups arrive (executors/streamed_step.py) is the step `rl_step`
trains on the whole batch: same parameters after it, same metrics, whatever the parts."""
import copy
import functools

import pytest
import torch

from llamarl_core.config.load import load_config
from llamarl_core.executors.learner import Learner
from llamarl_core.executors.pipeline import learner_config
from llamarl_core.models import Llama, ModelArgs
from llamarl_core.wire.rollout import Rollout

ARGS = ModelArgs(vocab_size=260, dim=32, n_layers=2, n_heads=2, n_kv_heads=1, ffn_dim=64,
                 max_seq_len=64, rope_theta=10000.0)
G = 4


@functools.lru_cache(maxsize=None)
def _cfg(*overrides):
    return load_config("cpu_tiny", [f"algorithm.group_size={G}", "algorithm.prompts_per_step=4",
                                    "algorithm.lr_warmup_steps=0", "algorithm.lr=0.01", *overrides])


def _batch(seed=0, groups=4):
    """`groups` groups of G rows, prompt 3-5 and completion 2-9 tokens, one group scored alike."""
    g = torch.Generator().manual_seed(seed)
    n = groups * G
    prompt = torch.randint(3, 6, (n,), generator=g)
    comp = torch.randint(2, 10, (n,), generator=g)
    width = int((prompt + comp).max())
    tokens = torch.randint(3, 200, (n, width), generator=g)
    for r in range(n):
        tokens[r, prompt[r] + comp[r]:] = 0
    mu = -torch.rand(n, int(comp.max()), generator=g) * 3
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0] * groups)  # every group has signal ...
    rewards[:G] = 1.0                                      # ... but group 0: all alike (zero advantage)
    versions = torch.tensor([0, 1] * (n // 2))
    return Rollout(tokens, prompt, comp, mu, rewards, torch.arange(n) // G, 0, 0, 3, versions)


def _steps(cfg, parts):
    torch.manual_seed(0)
    model = Llama(ARGS)
    whole, streamed = Learner(model, learner_config(cfg)), Learner(copy.deepcopy(model), learner_config(cfg))
    for learner in (whole, streamed):  # the clipped gradient the optimizer steps with
        learner.grads = {}
        step_fn = learner.optimizer.step

        def capture(*a, learner=learner, step_fn=step_fn, **k):
            learner.grads = {n: p.grad.clone() for n, p in learner.model.named_parameters()}
            return step_fn(*a, **k)
        learner.optimizer.step = capture
    batch = _batch()
    staleness = torch.tensor([1.0, 0.0] * (batch.num_rows // 2))
    want = whole.rl_step(batch, staleness)
    step = streamed.open_step()
    for lo, hi in parts:
        step.add(batch.rows(lo * G, hi * G), staleness[lo * G:hi * G])
    got = step.finish()
    return whole, streamed, want, got


@pytest.mark.parametrize("micro", [4, 6, 64])
@pytest.mark.parametrize("parts", [[(0, 4)], [(0, 1), (1, 2), (2, 3), (3, 4)], [(2, 4), (0, 2)]])
def test_a_streamed_step_trains_the_weights_rl_step_does(micro, parts):
    whole, streamed, want, got = _steps(_cfg(f"resources.trainer.micro_batch_size={micro}"), parts)
    assert set(whole.grads) == set(streamed.grads)
    for name, g in whole.grads.items():  # the same sum in another order: float32 rounding apart
        assert torch.allclose(streamed.grads[name], g, rtol=1e-4, atol=1e-7), name
    for p, q in zip(whole.model.parameters(), streamed.model.parameters()):  # lr 0.01: Adam's sign-like
        assert torch.allclose(p, q, atol=1e-4), "a parameter moved differently"   # first step
    order = [lo for lo, _ in parts]
    if order == sorted(order):  # same rows in the same order: the same batch metrics
        for k in ("loss", "tokens_total", "reward_mean", "staleness_mean", "trained_rows_frac",
                  "uniform_groups_frac", "completion_tokens", "grad_norm", "advantage_abs_mean"):
            assert got[k] == pytest.approx(want[k], rel=1e-5, abs=1e-6), k
    assert set(got) >= set(want) - {"tokens_per_s"}
    assert streamed.steps_done == 1 and got["lr"] == want["lr"]


def test_row_mean_aggregation_and_the_overlong_penalty_match_too():
    cfg = _cfg("resources.trainer.micro_batch_size=4", "algorithm.aggregation=sequence_mean",
               "algorithm.overlong=penalty", "algorithm.overlong_buffer_tokens=4")
    whole, streamed, want, got = _steps(cfg, [(0, 1), (1, 3), (3, 4)])
    for name, g in whole.grads.items():
        assert torch.allclose(streamed.grads[name], g, rtol=1e-4, atol=1e-7), name
    assert got["loss"] == pytest.approx(want["loss"], rel=1e-5)


def test_micro_batches_run_as_rows_arrive_not_at_the_end(monkeypatch):
    cfg = _cfg("resources.trainer.micro_batch_size=4")
    torch.manual_seed(0)
    learner = Learner(Llama(ARGS), learner_config(cfg))
    calls = []
    original = learner._micro_loss
    monkeypatch.setattr(learner, "_micro_loss", lambda *a, **k: (calls.append(len(a[0])), original(*a, **k))[1])
    batch, step = _batch(), learner.open_step()
    staleness = torch.zeros(batch.num_rows)
    step.add(batch.rows(0, G), staleness[:G])        # group 0 scored alike: skipped, nothing runs
    assert calls == []
    step.add(batch.rows(G, 2 * G), staleness[G:2 * G])
    assert calls == [4]                               # one full micro-batch ran on arrival
    step.add(batch.rows(2 * G, 4 * G), staleness[2 * G:])
    assert calls == [4, 4, 4]
    step.finish()
    with pytest.raises(RuntimeError):
        step.finish()


def test_data_parallel_ranks_and_several_updates_do_not_stream_their_steps():
    assert not Learner(Llama(ARGS), learner_config(_cfg()), data_parallel=True).streams_steps
    assert not Learner(Llama(ARGS), learner_config(_cfg("algorithm.updates_per_batch=2"))).streams_steps
    with pytest.raises(RuntimeError):
        Learner(Llama(ARGS), learner_config(_cfg("algorithm.updates_per_batch=2"))).open_step()
