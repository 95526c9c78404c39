"""A checkpoint scores in `llamarl eval` exactly what training logged for it.

The "training run" is built here in-process: a tiny byte-level Llama gets 25 supervised
steps on the 8 held-out arithmetic problems (enough to solve some, not all: a score that
could not hide a mismatch behind 0 or 1), training's held-out evaluation runs on it, the
weights are saved with `save_pretrained`, and `llamarl eval` scores the saved checkpoint.
"""
import json

import pytest
import torch
import torch.nn.functional as F

from llamarl_cli.main import main
from llamarl_core.config.load import load_config
from llamarl_core.data import arith_examples, render_target
from llamarl_core.eval import encode_prompt, evaluate
from llamarl_core.generation import GenerationEngine
from llamarl_core.models import ByteTokenizer, Llama, get_preset, save_pretrained, with_overrides
from llamarl_core.rewards import get_reward

OVERRIDES = ["data.name=arith", "data.num_eval_examples=8", "generation.max_new_tokens=40",
             "run.seed=0"]
SFT_STEPS = 25


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(model, tokenizer, held-out examples, checkpoint dir) after a short SFT run."""
    torch.manual_seed(0)
    tok = ByteTokenizer()
    examples = arith_examples("test", 8, seed=0)  # what training holds out for run.seed=0
    args = with_overrides(get_preset("tiny-2m"), dim=64, n_layers=2, n_heads=2, n_kv_heads=2,
                          ffn_dim=128, max_seq_len=64)
    model = Llama(args)
    rows = [(encode_prompt(ex, "plain", tok), tok.encode(render_target(ex)) + [tok.eos_id])
            for ex in examples]
    length = max(len(p) + len(t) for p, t in rows)
    ids = torch.full((len(rows), length), tok.pad_id)                  # [B, T]
    targets = torch.full((len(rows), length), -100)                    # [B, T], loss on the target only
    for i, (p, t) in enumerate(rows):
        ids[i, :len(p) + len(t)] = torch.tensor(p + t)
        targets[i, len(p) - 1:len(p) + len(t) - 1] = torch.tensor(t)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(SFT_STEPS):
        logits = model(ids)                                            # [B, T, V]
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        opt.step()
    path = tmp_path_factory.mktemp("train") / "checkpoint"
    save_pretrained(model, tok, path)
    return model, tok, examples, path


def llamarl_eval(capsys, checkpoint, out_dir) -> tuple[dict, list[dict]]:
    code = main(["eval", f"checkpoint={checkpoint}", "data=arith", *OVERRIDES,
                 f"eval.out={out_dir}", "--no-progress"])
    assert code == 0, capsys.readouterr().err
    summary = json.loads((out_dir / "summary.json").read_text())
    preds = [json.loads(line) for line in (out_dir / "predictions.jsonl").read_text().splitlines()]
    return summary, preds


def test_llamarl_eval_reproduces_the_accuracy_the_training_loop_computed(capsys, tmp_path, trained):
    model, tok, examples, checkpoint = trained
    cfg = load_config("cpu_tiny", OVERRIDES)
    # Training's periodic held-out evaluation: greedy, the generator's engine, the training reward.
    logged = evaluate(GenerationEngine(model, tok, max_batch_size=64), tok, examples,
                      get_reward("arith"), template=cfg.data.template, n_samples=1,
                      temperature=0.0, max_new_tokens=cfg.generation.max_new_tokens,
                      seed=cfg.run.seed)
    assert 0.0 < logged.summary["accuracy"] < 1.0  # a partly trained model: a telling number

    summary, preds = llamarl_eval(capsys, checkpoint, tmp_path)
    assert summary["accuracy"] == logged.summary["accuracy"]
    assert summary["pass@1"] == logged.summary["pass@1"]
    assert [p["id"] for p in preds] == [ex.id for ex in examples]
    assert [p["greedy_completion"] for p in preds] == [
        p["greedy_completion"] for p in logged.predictions]


def test_the_trainers_heldout_summary_matches_llamarl_eval(capsys, tmp_path, trained):
    from llamarl_core.eval import heldout  # the training runtime's eval
    from llamarl_core.executors.pipeline import heldout_config
    model, tok, examples, checkpoint = trained
    cfg = load_config("cpu_tiny", OVERRIDES)
    logged = heldout.heldout_summary(model, tok, heldout_config(cfg), examples, get_reward("arith"))
    summary, _ = llamarl_eval(capsys, checkpoint, tmp_path)
    assert summary["accuracy"] == logged["accuracy"]
