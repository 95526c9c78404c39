"""Episodes through the generator's own code (ChunkGenerator over the engine, EnvPool workers):
the trainer's rows hold exactly the sampled tokens with their log mu, environment tokens masked;
hung and crashing environments fail their episode, counted, and the chunk still completes; a
weight swap in the middle of an episode keeps each token's own behaviour log-prob."""
import textwrap

import pytest
import torch

from llamarl_core.config.load import load_config
from llamarl_core.executors.chunks import ChunkGenerator
from llamarl_core.executors.learner import Learner, completion_targets
from llamarl_core.executors.pipeline import chunk_config, learner_config
from llamarl_core.executors.setup import encode_prompts, load_split
from llamarl_core.generation import SamplingParams
from llamarl_core.models.build import build_model
from llamarl_core.wire.rollout import Rollout

# Each turn ends at the first of these characters (a random tiny model writes one every ~7
# tokens), so episodes take several turns without a trained model.
STOPS = [*"0123456789abcdefghijklmnopqrstuvwxyz"]

ENV = textwrap.dedent('''
    import os, time

    class Env:
        """Answers twice ("again"), then ends with reward 1.0."""
        def reset(self, example):
            self.n, self.index = 0, int(example["id"].rsplit("-", 1)[1])
            return example["messages"]

        def step(self, text):
            self.n += 1
            if self.n < 3:
                return [{"role": "user", "content": "again"}], None, False
            return [], 1.0, True

    class Hangs(Env):
        """Env, but an example whose index is 1 mod 4 hangs at its first step."""
        def step(self, text):
            if self.index % 4 == 1 and self.n == 0:
                time.sleep(60)          # killed at env.step_timeout_s
            return super().step(text)

    class Crashes(Env):
        """Env, but an example whose index is 2 mod 4 crashes its worker at its first step."""
        def step(self, text):
            if self.index % 4 == 2 and self.n == 0:
                os._exit(3)
            return super().step(text)
''')


def _chunks(tmp_path, *overrides, stops=True, env="Env"):
    path = tmp_path / "env_mod.py"
    path.write_text(ENV)
    cfg = load_config("cpu_tiny", ["algorithm.group_size=2", "algorithm.prompts_per_step=4",
                                   "data.num_train_examples=8", "generation.max_new_tokens=24",
                                   "generation.max_prompt_tokens=40", "generation.temperature=1.0",
                                   f"env.entry={path}:{env}", "env.max_turns=4", "env.max_episode_tokens=160",
                                   "env.step_timeout_s=2", "env.workers=2", *overrides])
    model, tok = build_model(cfg.model, cfg.resources.trainer.dtype, seed=cfg.run.seed)
    torch.manual_seed(1)
    model.reset_parameters(std=0.05)  # near-uniform next-token distributions
    model.eval().requires_grad_(False)
    prompts = encode_prompts(cfg.data, cfg.generation, load_split(cfg.data, "train"), tok)
    chunks = ChunkGenerator(chunk_config(cfg), model, tok, prompts, replica=0, num_replicas=1)
    if stops:
        chunks.params = SamplingParams(max_new_tokens=24, temperature=1.0, stop_strings=tuple(STOPS))
    return cfg, model, chunks


def _teacher_forced(model, cfg, batch: Rollout) -> torch.Tensor:
    """log pi [N, L'-1] of every row's tokens, one full forward, as the loss computes it."""
    tokens, _, _ = completion_targets(batch)
    with torch.no_grad():
        learner = Learner(model, learner_config(cfg))
        return model(tokens, head=learner._head(tokens[:, 1:]))[0]


def test_rows_hold_the_sampled_tokens_and_mask_the_environments(tmp_path):
    cfg, model, chunks = _chunks(tmp_path)
    try:
        batch = Rollout.unpack(*chunks.generate(0, 0).pack())  # through the wire's layout
    finally:
        chunks.close()
    tokens, behavior, mask = completion_targets(batch)
    ok = batch.failed == 0
    assert int(ok.sum()) >= 4 and float(batch.turns[ok].float().mean()) > 1.5
    assert (batch.turns[ok & (batch.truncated == 0)] == 3).all()  # two "again"s, then done
    assert torch.equal(batch.rewards[ok & (batch.truncated == 0)], torch.ones(int((ok & (batch.truncated == 0)).sum())))
    # every masked-in token was sampled in exactly this context: on-policy ratios are 1
    pi = _teacher_forced(model, cfg, batch)
    counted = mask & ok[:, None]
    ratio = (pi - behavior)[counted].exp()
    torch.testing.assert_close(ratio, torch.ones_like(ratio), atol=1e-5, rtol=0)
    # environment tokens sit between turns, masked (log mu 0 there): counting them would break the ratios
    for r in torch.nonzero(ok & (batch.turns > 1)).squeeze(1).tolist():
        p, c = int(batch.prompt_lens[r]), int(batch.completion_lens[r])
        row_mask = batch.loss_mask[r, p - 1:p - 1 + c]
        env = (row_mask == 0).nonzero().squeeze(1)
        assert env.numel() > 0 and row_mask[0] == 1 and row_mask[-1] == 1
        assert torch.all(batch.behavior_logprobs[r, p - 1:p - 1 + c][env] == 0)
        text = chunks.tokenizer.decode(batch.tokens[r, p:p + c][env].tolist())
        assert text.count("again") == int(batch.turns[r]) - 1
    untrained = (pi - behavior)[(mask == 0) & (batch.loss_mask[:, :mask.shape[1]] == 0)]
    assert untrained.numel() > 0


@pytest.mark.parametrize("env,residue,counter", [("Hangs", 1, "timeouts"), ("Crashes", 2, "crashes")])
def test_hung_and_crashing_environments_fail_their_episodes_and_the_run_goes_on(tmp_path, env, residue, counter):
    cfg, model, chunks = _chunks(tmp_path, "env.workers=4", env=env)  # a killed worker takes its own episodes only
    try:
        batch = chunks.generate(0, 0)
        after = chunks.generate(1, 0)  # the pool replaced its killed worker: the next chunk runs
        stats = dict(chunks._episodes[0].stats)
    finally:
        chunks.close()
    examples = load_split(cfg.data, "train")
    index = torch.tensor([int(examples[int(i)].id.rsplit("-", 1)[1]) for i in batch.example_ids])
    bad = index % 4 == residue
    assert bad.any(), index  # the chunk holds a failing example
    failed = batch.failed.bool()
    # the failing example fails; episodes then open on its killed worker fail with it (counted the same)
    assert failed[bad].all() and not failed.all()
    assert (batch.rewards[failed] == 0).all() and (batch.loss_mask[failed] == 0).all()
    assert (batch.rewards[~failed] == 1).all() or (batch.truncated[~failed] == 1).any()
    assert stats[counter] >= 1 and stats["restarts"] >= 1
    assert after.num_rows == batch.num_rows and int(after.turns.sum()) > 0


def test_a_weight_swap_mid_episode_keeps_each_tokens_own_behaviour_logprob(tmp_path):
    cfg, model, chunks = _chunks(tmp_path)
    old = {k: v.clone() for k, v in model.state_dict().items()}
    calls = {"n": 0}

    def between_steps():  # after 12 decode steps the weights change in place: version 1
        calls["n"] += 1
        if calls["n"] == 12:
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(torch.randn_like(p) * 0.05)
        return 1 if calls["n"] >= 12 else 0
    try:
        batch = chunks.generate(0, 0, between_steps=between_steps)
    finally:
        chunks.close()
    new = {k: v.clone() for k, v in model.state_dict().items()}
    pi_new = _teacher_forced(model, cfg, batch)
    model.load_state_dict(old)
    pi_old = _teacher_forced(model, cfg, batch)
    model.load_state_dict(new)
    _, behavior, mask = completion_targets(batch)
    mask &= (batch.failed == 0)[:, None]
    spanning = 0
    for r in range(batch.num_rows):
        cols = mask[r].nonzero().squeeze(1)
        if not cols.numel():
            continue
        is_old = (pi_old[r, cols] - behavior[r, cols]).abs() < 1e-5
        is_new = (pi_new[r, cols] - behavior[r, cols]).abs() < 1e-5
        # each turn's tokens: all under the old weights, all under the new ones, or (the turn in
        # flight at the swap) old, then new weights over the old weights' KV cache: neither
        starts = [0] + [i + 1 for i in range(len(cols) - 1) if cols[i + 1] - cols[i] > 1] + [len(cols)]
        kinds = []
        for a, b in zip(starts[:-1], starts[1:]):
            o, n = is_old[a:b], is_new[a:b]
            if o.all():
                kinds.append("old")
            elif n.all():
                kinds.append("new")
            else:
                kinds.append("mixed")
        order = "".join({"old": "o", "mixed": "m", "new": "n"}[k] for k in kinds)
        assert order == "o" * order.count("o") + "m" * order.count("m") + "n" * order.count("n"), order
        assert order.count("m") <= 1
        spanning += int(("o" in order or "m" in order) and "n" in order)
        assert int(batch.policy_versions[r]) == (1 if order.startswith("n") else 0)  # the row's oldest token
    assert spanning > 0  # some episode's later turn ran under the new weights after earlier ones under the old


@pytest.mark.parametrize("max_turns", [1])
def test_one_turn_is_the_one_step_case(tmp_path, max_turns):
    cfg, model, chunks = _chunks(tmp_path, f"env.max_turns={max_turns}")
    try:
        batch = chunks.generate(0, 0)
    finally:
        chunks.close()
    ok = batch.failed == 0
    assert (batch.turns[ok] == 1).all() and (batch.truncated[ok] == 1).all()  # cut by env.max_turns
    assert batch.rewards[ok].isnan().all()  # no env reward: the reward role scores the last turn


TOOL_ENV = textwrap.dedent('''
    class Tools:
        """Two tool results, then done: the shape of a tool-calling episode, whatever the model wrote."""
        def reset(self, example):
            self.n = 0
            return example["messages"]

        def step(self, text):
            self.n += 1
            if self.n < 3:
                return [{"role": "tool", "name": "calc", "content": str(self.n * 7)}], None, False, \\
                    {"tool_calls": 1, "tool_errors": 0}
            return [], 1.0, True
''')


def test_a_chatml_template_with_its_separator_reaches_the_trainer_as_sampled(tmp_path):
    """A Hugging Face tokenizer whose ChatML template writes `\\n` after `<|im_end|>`: every turn
    the model closed with `<|im_end|>` is followed by that separator as a masked environment
    token, the tool messages are masked, and every model token is on-policy (ratio 1)."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tok_tiny import tiny_hf_tokenizer
    from llamarl_core.executors.setup import PromptSet
    from llamarl_core.models import Llama, ModelArgs, load_tokenizer
    from llamarl_core.data import Example

    tok = load_tokenizer(tiny_hf_tokenizer(tmp_path / "tok"))
    (tmp_path / "tools_env.py").write_text(TOOL_ENV)
    cfg = load_config("cpu_tiny", ["algorithm.group_size=2", "algorithm.prompts_per_step=2", "data.template=chat",
                                   "generation.max_new_tokens=12", "generation.max_prompt_tokens=40",
                                   "generation.temperature=1.0", f"env.entry={tmp_path / 'tools_env.py'}:Tools",
                                   "env.max_turns=4", "env.max_episode_tokens=120", "env.workers=1"])
    torch.manual_seed(0)
    model = Llama(ModelArgs(vocab_size=tok.vocab_size, dim=32, n_layers=1, n_heads=2, n_kv_heads=2, ffn_dim=64,
                            max_seq_len=256, rope_theta=10000.0))
    model.reset_parameters(std=0.05)
    with torch.no_grad():  # <|im_end|> likely enough that most turns end on it
        model.output.weight[tok.eos_id] = model.norm.weight * 8.0 / model.args.dim ** 0.5
    model.eval().requires_grad_(False)
    examples = [Example(f"e-{i}", f"the cat {i}", "4") for i in range(2)]
    prompts = encode_prompts(cfg.data, cfg.generation, examples, tok)
    chunks = ChunkGenerator(chunk_config(cfg), model, tok, PromptSet(examples, prompts.prompt_ids), 0, 1)
    try:
        batch = Rollout.unpack(*chunks.generate(0, 0).pack())
    finally:
        chunks.close()
    assert (batch.failed == 0).all() and float(batch.turns.float().mean()) > 1.5
    # each step before the last answered with a tool result (the env's count), at most two per episode
    done = batch.truncated == 0
    assert (batch.tool_calls[done] == 2).all() and (batch.tool_calls <= 2).all() and done.any()
    pi = _teacher_forced(model, cfg, batch)
    _, behavior, mask = completion_targets(batch)
    ratio = (pi - behavior)[mask].exp()
    torch.testing.assert_close(ratio, torch.ones_like(ratio), atol=1e-5, rtol=0)
    newline, eot = tok.encode("\n"), tok.eos_id
    separators = 0
    for r in range(batch.num_rows):
        p, c = int(batch.prompt_lens[r]), int(batch.completion_lens[r])
        ids, m = batch.tokens[r, p:p + c].tolist(), batch.loss_mask[r, p - 1:p - 1 + c].tolist()
        for i in range(c - 1):
            if ids[i] == eot and m[i] == 1:  # the model closed its turn: the template's separator follows, masked
                assert ids[i + 1:i + 1 + len(newline)] == newline and m[i + 1] == 0
                separators += 1
        assert "<|im_start|>tool\n7<|im_end|>" in tok._tok.decode(ids) or batch.turns[r] == 1
    assert separators > 0
