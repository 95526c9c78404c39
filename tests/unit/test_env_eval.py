"""`evaluate` over episodes: a tiny Llama that answers "7" every turn, an environment from a tmp
file that asks for `reference` turns, and the reward rule (envs/protocol.py) checked by hand."""
import time
from dataclasses import replace

import pytest
import torch

from llamarl_core.config.schema import EnvConfig
from llamarl_core.data import Example, PromptFormat
from llamarl_core.eval import evaluate
from llamarl_core.eval.episodes import EvalEpisodes
from llamarl_core.generation import GenerationEngine
from llamarl_core.models import ByteTokenizer, Llama
from tests.tiny_models import ARGS

TOK = ByteTokenizer()
SEVEN = TOK.encode("7")[0]

ENV = '''
class Turns:
    """Asks for int(reference) turns; step rewards from `mode`: "none" (all None), "sum"
    (0.25 per step, plus 0.5 on the last), "digit" (1.0 on the last when the text has a digit)."""
    mode = "none"

    def reset(self, example):
        self.left = int(example["reference"])
        return example["messages"]

    def step(self, text):
        self.left -= 1
        done = self.left == 0
        if self.mode == "none":
            reward = None
        elif self.mode == "sum":
            reward = 0.25 + (0.5 if done else 0.0)
        else:
            reward = (1.0 if any(c.isdigit() for c in text) else 0.0) if done else 0.0
        return [{"role": "user", "content": "once more"}], reward, done


class Sum(Turns):
    mode = "sum"


class Digit(Turns):
    mode = "digit"


class TwoSteps(Sum):
    def reset(self, example):
        self.left = 2
        return example["messages"]
'''


def seven_then_eos() -> Llama:
    """A Llama that writes "7" after any token but "7", and EOS after "7": each turn is "7<eos>".

    Blocks add nothing (wo, w2 zero), so the last hidden state is the RMS-normalised embedding:
    every token embeds to e0, "7" to e1; the output head maps e0 to "7" and e1 to EOS."""
    torch.manual_seed(0)
    model = Llama(replace(ARGS, max_seq_len=256)).eval().requires_grad_(False)
    with torch.no_grad():
        emb = model.tok_embeddings.weight
        emb.zero_()
        emb[:, 0] = 1.0
        emb[SEVEN] = 0.0
        emb[SEVEN, 1] = 1.0
        for layer in model.layers:
            layer.attention.wo.weight.zero_()
            layer.feed_forward.w2.weight.zero_()
        model.norm.weight.fill_(1.0)
        model.output.weight.zero_()
        model.output.weight[SEVEN, 0] = 100.0
        model.output.weight[TOK.eos_id, 1] = 100.0
    return model


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().split()[2] != b"Z"
    except FileNotFoundError:
        return False


def run(tmp_path, cls: str, references: list[str], reward_fn, **kw):
    path = tmp_path / "turns_env.py"
    path.write_text(ENV)
    examples = [Example(f"e{i}", f"question {i}", ref) for i, ref in enumerate(references)]
    env = EnvConfig(entry=f"{path}:{cls}", workers=1, max_turns=4, max_episode_tokens=200, step_timeout_s=20)
    engine = GenerationEngine(seven_then_eos(), TOK, max_batch_size=4)
    with EvalEpisodes(env, TOK, PromptFormat(), max_prompt_tokens=40) as episodes:
        pids = [w.process.pid for w in episodes.pool._workers]
        result = evaluate(engine, TOK, examples, reward_fn, max_new_tokens=4, episodes=episodes, **kw)
    deadline = time.monotonic() + 5
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pids and not any(alive(p) for p in pids)  # closed: no worker left
    return result


def test_an_environment_without_rewards_hands_the_last_turn_to_the_reward_function(tmp_path):
    seen = []

    def reward_fn(text, reference):
        seen.append(text)
        return 0.5 if text == "7" else 0.0  # the last turn, EOS not in the text
    r = run(tmp_path, "Turns", ["1", "2", "3"], reward_fn)
    p = r.predictions
    assert [x["turns"] for x in p] == [[1], [2], [3]]
    assert r.summary["turns_mean"] == pytest.approx((1 + 2 + 3) / 3)
    assert [x["greedy_reward"] for x in p] == [0.5, 0.5, 0.5]
    assert [x["greedy_env_reward"] for x in p] == [None, None, None]
    assert set(seen) == {"7"}
    assert r.summary["accuracy"] == 0.0 and r.summary["mean_reward"] == 0.5
    assert r.summary["tool_calls_mean"] == 0.0 and r.summary["tool_errors"] == 0
    assert r.summary["truncated_frac"] == 0.0
    # the whole episode as read: the prompt, "7", the environment's reply masked as ⟦env: ...⟧
    assert p[1]["greedy_episode"].count("⟦env: ") == 1 and "once more" in p[1]["greedy_episode"]
    assert p[1]["greedy_episode"].count("7") == 2
    assert [x["num_tokens"] for x in p] == [[2], [4], [6]]  # "7" and EOS per turn: the model's only


def test_step_rewards_are_summed_and_the_reward_function_is_not_asked(tmp_path):
    def reward_fn(text, reference):
        raise AssertionError("an environment's reward is final")
    r = run(tmp_path, "Sum", ["1", "2"], reward_fn, n_samples=2, temperature=1.0)
    # 1 turn: 0.25 + 0.5; 2 turns: 0.25 + 0.25 + 0.5 (the model's "7" is certain even at T=1)
    assert [x["greedy_reward"] for x in r.predictions] == [0.75, 1.0]
    assert [x["rewards"] for x in r.predictions] == [[0.75, 0.75], [1.0, 1.0]]
    assert r.summary["accuracy"] == 0.5 and r.summary["pass@1"] == 0.5
    assert r.summary["turns_mean"] == 1.5


def test_episodes_cut_by_max_turns_count_as_truncated(tmp_path):
    r = run(tmp_path, "Digit", ["1", "9"], lambda t, ref: 0.0)
    # "9" turns > env.max_turns=4: cut after 4 with the 0.0 its steps gave; "1": a digit, 1.0
    assert [x["greedy_reward"] for x in r.predictions] == [1.0, 0.0]
    assert [x["turns"] for x in r.predictions] == [[1], [4]]
    assert [x["truncated"] for x in r.predictions] == [[0], [1]]
    assert r.summary["truncated_frac"] == 0.5 and r.summary["accuracy"] == 0.5


def test_the_held_out_eval_runs_episodes_through_the_workers_it_is_given(tmp_path, monkeypatch):
    from llamarl_core.config.schema import DataConfig, GenerationConfig
    from llamarl_core.eval import heldout as heldout_mod
    from llamarl_core.eval.heldout import HeldoutConfig, heldout_episodes, heldout_eval
    (tmp_path / "turns_env.py").write_text(ENV)
    env = EnvConfig(entry=f"{tmp_path / 'turns_env.py'}:Sum", workers=1, max_episode_tokens=200)
    cfg = HeldoutConfig(GenerationConfig(max_new_tokens=4, max_prompt_tokens=40), DataConfig(), 4, 0, 1, env=env)
    examples = [Example("a", "question a", "2"), Example("b", "question b", "1")]
    with pytest.raises(ValueError, match="heldout_episodes"):
        heldout_eval(seven_then_eos(), TOK, cfg, examples, lambda t, r: 0.0)
    episodes = heldout_episodes(cfg, TOK)
    built = []
    real_engine = heldout_mod.GenerationEngine
    monkeypatch.setattr(heldout_mod, "GenerationEngine", lambda *a, **k: built.append(k) or real_engine(*a, **k))
    try:
        for _ in range(2):  # one pool, many evals
            summary, samples = heldout_eval(seven_then_eos(), TOK, cfg, examples, lambda t, r: 0.0,
                                            episodes=episodes)
            assert summary["accuracy"] == 0.5 and summary["turns_mean"] == 1.5
            assert [s["reward"] for s in samples] == [1.0] and samples[0]["turns"] == 2
            assert "⟦env: " in samples[0]["episode"]
        # its KV cache is sized for the run's rows (40 + 200 tokens), not the model's positions
        assert [k["max_seq_len"] for k in built] == [241, 241]
    finally:
        episodes.close()


def test_llamarl_eval_writes_episodes_and_their_summary(tmp_path, capsys):
    import json

    from llamarl_cli.main import main
    from llamarl_core.models import save_pretrained
    save_pretrained(seven_then_eos(), TOK, tmp_path / "ckpt")
    (tmp_path / "turns_env.py").write_text(ENV)
    out = tmp_path / "out"
    code = main(["eval", f"checkpoint={tmp_path / 'ckpt'}", "data=arith", "num_examples=2", "max_new_tokens=4",
                 f"env.entry={tmp_path / 'turns_env.py'}:TwoSteps", "env.workers=1", "env.max_episode_tokens=150",
                 "generation.max_prompt_tokens=100", f"eval.out={out}", "--no-progress"])
    printed, err = capsys.readouterr()
    assert code == 0, err
    s = json.loads((out / "summary.json").read_text())
    preds = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    # two steps each: 0.25 + (0.25 + 0.5) = 1.0, all correct
    assert s["turns_mean"] == 2.0 and s["accuracy"] == 1.0 and s["env"].endswith(":TwoSteps")
    assert [p["env_rewards"] for p in preds] == [[1.0], [1.0]] and [p["turns"] for p in preds] == [[2], [2]]
    assert all(p["greedy_episode"].count("⟦env: ") == 1 for p in preds)
    assert "episodes: turns / tool calls (mean)" in printed
