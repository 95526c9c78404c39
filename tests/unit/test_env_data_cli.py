"""`llamarl data` with an environment: each episode's opening as the model sees it (reset run in
the environment's worker, the tools where the template puts them), and `--episodes RUN_DIR`
printing the episodes `trained_samples.jsonl` recorded with their environment spans."""
import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from llamarl_cli.main import main
from llamarl_core.models import ByteTokenizer
from llamarl_core.observe.metrics_log import TrainedSamplesLog

ROOT = Path(__file__).resolve().parents[2]
ROWS = [{"question": "What is 2+3?", "answer": "#### 5"}, {"question": "What is 4+4?", "answer": "#### 8"}]

PID_ENV = '''
import os


class WhereAmI:
    def reset(self, example):
        return [{"role": "user", "content": f"pid {os.getpid()}: " + example["prompt"]}]

    def step(self, text):
        return [], None, True
'''


def run(capsys, *argv):
    code = main(["data", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def gsm8k(tmp_path) -> Path:
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return data


def test_the_opening_is_what_reset_returned_rendered_in_another_process(tmp_path, capsys):
    (tmp_path / "where.py").write_text(PID_ENV)
    data = gsm8k(tmp_path)
    code, out, err = run(capsys, "data.name=gsm8k", f"data.path={data}", f"data.eval_path={data}",
                         f"env.entry={tmp_path / 'where.py'}:WhereAmI", "n=2", "--json")
    assert code == 0, err
    *rows, last = [json.loads(line) for line in out.splitlines()]
    # byte tokenizer, no template: the plain chat format, ids = the text's bytes
    pids = [int(r["messages"][0]["content"].split()[1].rstrip(":")) for r in rows]
    assert os.getpid() not in pids  # the user's class ran in the workers, not here
    pid = pids[1]
    assert rows[1]["opening"] == f"User: pid {pid}: What is 4+4?\n\nAssistant:"
    assert rows[1]["opening_ids"] == list(rows[1]["opening"].encode())
    s = last["summary"]
    assert s["env_tools"] == [] and s["env_tools_in"] is None and "loss mask 0" in s["mask_legend"]
    assert s["opening_tokens_max"] == max(len(r["opening_ids"]) for r in rows)


def test_tools_a_template_ignores_are_in_the_system_message_of_the_opening(tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    from tok_tiny import tiny_hf_tokenizer

    from llamarl_core.envs.parsers import tools_system_prompt
    sys.path.insert(0, str(ROOT / "recipes" / "envs"))
    try:
        from calc_tools import calc
    finally:
        sys.path.pop(0)
    ckpt = tiny_hf_tokenizer(tmp_path / "tok")  # ChatML, which ignores tools=
    data = gsm8k(tmp_path)
    code, out, err = run(capsys, f"model.checkpoint={ckpt}", "data.name=gsm8k", f"data.path={data}",
                         f"data.eval_path={data}", f"env.tools={ROOT / 'recipes/envs/calc_tools.py'}:calc",
                         "generation.max_prompt_tokens=2000", "n=1", "--json")
    assert code == 0, err
    row, last = [json.loads(line) for line in out.splitlines()]
    schema = transformers.utils.get_json_schema(calc)
    messages = [{"role": "system", "content": tools_system_prompt([schema], "hermes").rstrip("\n")},
                *row["messages"]]
    reference = transformers.AutoTokenizer.from_pretrained(str(ckpt))
    assert row["opening"] == reference.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert row["opening_ids"] == reference.apply_chat_template(messages, add_generation_prompt=True,
                                                               return_dict=False)
    assert last["summary"]["env_tools"] == ["calc"] and last["summary"]["env_tools_in"] == "system message"


def test_trained_samples_record_episodes_that_llamarl_data_prints(tmp_path, capsys):
    tok = ByteTokenizer()
    # prompt "Q:" | model "7" | env "?" | model "8": loss mask column t is token t+1's
    ids = list(b"Q:7?8")
    mask = torch.tensor([[0.0, 1.0, 0.0, 1.0]])  # tokens 1..4: ':' (prompt), '7', '?', '8'
    batch = SimpleNamespace(num_rows=1, tokens=torch.tensor([ids]), prompt_lens=torch.tensor([2]),
                            completion_lens=torch.tensor([3]), example_ids=torch.tensor([4]),
                            rewards=torch.tensor([1.0]), turns=torch.tensor([2]), loss_mask=mask)
    log = TrainedSamplesLog(str(tmp_path), 1, tok, episodes=True)
    log.write(3, 2, batch)
    log.close()
    row = json.loads((tmp_path / "trained_samples.jsonl").read_text())
    assert row["episode"] == "Q:7⟦env: ?⟧8" and row["completion"] == "7?8" and row["turns"] == 2
    code, out, err = run(capsys, "--episodes", str(tmp_path), "n=1")
    assert code == 0, err
    assert "Q:7⟦env: ?⟧8" in out and "2 turn(s)" in out and "example 4" in out
    code, out, err = run(capsys, "--episodes", str(tmp_path / "nowhere"))
    assert code == 2 and "trained_samples_per_step" in err
