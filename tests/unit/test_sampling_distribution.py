"""μ is the distribution actually sampled from (repetition penalty, temperature, min-p, top-k,
top-p), and the trainer's π is the same function of its own logits: on-policy ratios are
exactly 1."""
import math

import pytest
import torch

from llamarl_core.config.errors import ConfigError
from llamarl_core.config.load import load_config
from llamarl_core.executors.chunks import ChunkGenerator
from llamarl_core.executors.learner import Learner, completion_targets
from llamarl_core.executors.pipeline import chunk_config, learner_config
from llamarl_core.executors.setup import encode_prompts, load_split
from llamarl_core.generation.params import SamplingParams
from llamarl_core.generation.sampling import sample_next, sampling_logprobs
from llamarl_core.models.build import build_model


def test_sampled_tokens_never_leave_the_kept_set_and_report_its_log_prob():
    logits = torch.tensor([[0.4, 0.3, 0.2, 0.1]]).log().expand(4000, 4)
    params = SamplingParams(max_new_tokens=1, temperature=1.0, top_k=3, top_p=0.6)
    tokens, logp = sample_next(logits, params, torch.Generator().manual_seed(0))
    assert set(tokens.tolist()) == {0, 1}
    share = float((tokens == 0).double().mean())
    assert abs(share - 4 / 7) < 0.03  # 4000 draws: sd ~ 0.008
    expected = torch.where(tokens == 0, torch.tensor(4 / 7).log(), torch.tensor(3 / 7).log())
    torch.testing.assert_close(logp, expected)


def test_a_target_outside_the_kept_set_scores_finite_with_a_finite_gradient():
    logits = torch.tensor([[[0.4, 0.3, 0.2, 0.1]]]).log().requires_grad_(True)
    _, logp = sampling_logprobs(logits, 1.0, top_k=2, tokens=torch.tensor([[3]]))
    assert math.isclose(float(logp.detach()), math.log(0.1 / 0.7), rel_tol=1e-5)
    logp.sum().backward()
    assert torch.isfinite(logits.grad).all()


SETTINGS = {"top_k,top_p": ["generation.top_p=0.9", "generation.top_k=20"],
            "min_p": ["generation.min_p=0.3"],
            "repetition_penalty": ["generation.repetition_penalty=1.5"],
            "all four": ["generation.top_p=0.95", "generation.top_k=30", "generation.min_p=0.2",
                         "generation.repetition_penalty=1.3"]}


@pytest.mark.parametrize("overrides", SETTINGS.values(), ids=SETTINGS.keys())
def test_on_policy_ratios_are_one_under_every_sampling_option(overrides):
    cfg = load_config("cpu_tiny", ["generation.temperature=0.7", *overrides, "algorithm.max_offpolicy_steps=0",
                                   "algorithm.prompts_per_step=4", "data.num_train_examples=16"])
    model, tok = build_model(cfg.model, cfg.resources.trainer.dtype, seed=cfg.run.seed)
    torch.manual_seed(1)
    model.reset_parameters(std=0.05)  # truncation bites; logits small enough
    # that the engine's KV-cached logits match the full forward to ~1e-6
    prompts = encode_prompts(cfg.data, cfg.generation, load_split(cfg.data, "train"), tok)
    batch = ChunkGenerator(chunk_config(cfg), model, tok, prompts, replica=0, num_replicas=1).generate(0, 0)
    tokens, behavior, mask = completion_targets(batch)
    with torch.no_grad():
        learner = Learner(model, learner_config(cfg))  # log π as the loss gets it (micro_loss)
        start = learner.first_target(batch.prompt_lens)  # the head from the first completion position
        pi = model(tokens, head=learner._head(tokens[:, 1:], start=start, inputs=tokens))[0]
        untruncated = torch.log_softmax(model(tokens)[:, :-1] / 0.7, -1).gather(
            -1, tokens[:, 1:, None]).squeeze(-1)
    counted = mask.bool()
    assert int(counted.sum()) > 100
    ratio = (pi - behavior)[counted].exp()
    torch.testing.assert_close(ratio, torch.ones_like(ratio), atol=1e-5, rtol=0)
    # the check has teeth: ignoring the option would put ratios well away from 1
    off = (untruncated - behavior)[counted].exp()
    assert float((off - 1).abs().max()) > 0.1


def test_greedy_rl_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match="generation.temperature=0.0 must be > 0"):
        load_config("cpu_tiny", ["generation.temperature=0"])
