"""`llamarl export` and `export.dtype`: a run's step_<N> into transformers, same logits.

The step is made the way the trainer makes it (trainer.save_checkpoint: `save_model_files`,
then `checkpoints.save` over DCP, one process), from our model loaded out of a tiny random
Qwen2 that transformers itself saved, after one optimizer step (so an export that copied the
source's weights instead of the step's would differ). The reference is transformers' own
`AutoModelForCausalLM.from_pretrained(OUT)`.
"""
import contextlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from hf_tiny import save_tiny, tiny_model, tiny_tokenizer
from llamarl_cli.main import main
from llamarl_core.checkpoint import checkpoints
from llamarl_core.config.load import load_config
from llamarl_core.config.schema import ModelConfig, TrainerResources
from llamarl_core.models import load_pretrained, save_model_files
from llamarl_core.models.checkpoint_check import read_header
from llamarl_core.models.export import export_checkpoint, export_dtype
from llamarl_core.runtime.run_dir import as_written

transformers = pytest.importorskip("transformers")

TEMPLATE = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}</s>{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}")
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+3?"}]
IDS = torch.randint(0, 259, (2, 24), generator=torch.Generator().manual_seed(1))


def _source(path: Path, dtype=torch.float32) -> Path:
    """A tiny random Qwen2 (q/k/v biases, tied head) saved by transformers in `dtype`."""
    transformers.utils.logging.disable_progress_bar()  # no "Writing model shards" bar on stderr
    tiny_model("qwen2.5").to(dtype).save_pretrained(path)
    tiny_tokenizer(TEMPLATE).save_pretrained(path)
    return path


def _run(tmp_path: Path, source_dtype=torch.float32) -> tuple[Path, Path]:
    """(source checkpoint, run/checkpoints/step_2) as a run started from the source writes it,
    with the run's config.yaml two levels up."""
    src = _source(tmp_path / "src", source_dtype)
    run = tmp_path / "run"
    model, tokenizer = load_pretrained(src, dtype=torch.float32)  # resources.trainer.dtype
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(IDS).logsumexp(-1).mean().backward()
    opt.step()
    step = run / "checkpoints" / "step_2"
    save_model_files(step, model.args, tokenizer, torch.float32)
    checkpoints.save(str(step), model, opt, None, 0, {"step": 2}, keep=2, run_dir=str(run))
    cfg = load_config("cpu_tiny", [f"model.checkpoint={src}"])
    (run / "config.yaml").write_text(OmegaConf.to_yaml(as_written(cfg)))
    return src, step


def _export(*words) -> int:
    return main(["export", *map(str, words)])


def _dtypes(out: Path) -> set[str]:
    return {v["dtype"] for v in read_header(out / "model.safetensors").values()}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_an_exported_step_gives_transformers_the_logits_our_model_gives_from_the_step(tmp_path, dtype):
    _, step = _run(tmp_path)
    out = tmp_path / "out"
    assert _export(step, out, f"export.dtype={dtype}") == 0
    torch_dtype = getattr(torch, dtype)
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch_dtype).eval()
    ours, _ = load_pretrained(step, dtype=torch_dtype)
    assert type(hf).__name__ == "Qwen2ForCausalLM" and hf.dtype == torch_dtype
    with torch.no_grad():
        reference, logits = hf(IDS).logits, ours(IDS)
    # bit-identical in both dtypes: same weights, and on CPU both models run the same ops in the
    # same order (the 1e-4 of test_checkpoint_hf_parity is for models built apart, not needed here)
    assert torch.equal(logits.to(reference.dtype), reference)
    assert _dtypes(out) == {"F32" if dtype == "float32" else "BF16"}
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "qwen2" and config["torch_dtype"] == dtype


@pytest.mark.parametrize("family", ["qwen3", "llama3", "mistral"])
def test_every_family_round_trips_bit_identically_in_bfloat16(tmp_path, family):
    src = save_tiny(family, tmp_path / "src")
    model, tokenizer = load_pretrained(src)
    step = tmp_path / "run" / "checkpoints" / "step_1"
    save_model_files(step, model.args, tokenizer, torch.float32)
    checkpoints.save(str(step), model, torch.optim.AdamW(model.parameters()), None, 0, {"step": 1}, keep=2,
                     run_dir=str(tmp_path / "run"))
    export_checkpoint(step, tmp_path / "out", torch.bfloat16)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out", dtype=torch.bfloat16).eval()
    ours, _ = load_pretrained(step, dtype=torch.bfloat16)
    assert json.loads((tmp_path / "out" / "config.json").read_text())["model_type"] == model.args.family
    with torch.no_grad():
        assert torch.equal(ours(IDS).to(torch.bfloat16), hf(IDS).logits)


def test_sharded_sources_and_outputs_keep_every_tensor_in_place(tmp_path):
    """Tensors stream in the order the source stores them (across its shard files) into output
    shards laid out from the same order: a mismatch would be refused, a wrong map would load wrong."""
    _, step = _run(tmp_path)
    export_checkpoint(step, tmp_path / "sharded", torch.float32, max_shard_bytes=40_000)
    files = sorted(p.name for p in (tmp_path / "sharded").glob("*.safetensors"))
    assert len(files) > 2 and (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    export_checkpoint(tmp_path / "sharded", tmp_path / "again", torch.bfloat16, max_shard_bytes=30_000)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "again", dtype=torch.bfloat16).eval()
    ours, _ = load_pretrained(step, dtype=torch.bfloat16)
    with torch.no_grad():
        assert torch.equal(ours(IDS).to(torch.bfloat16), hf(IDS).logits)


def test_the_exported_weights_are_the_steps_not_the_sources(tmp_path):
    src, step = _run(tmp_path)
    out = tmp_path / "out"
    assert _export(step, out, "export.dtype=float32") == 0
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    before = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    with torch.no_grad():
        assert not torch.equal(hf(IDS).logits, before(IDS).logits)  # the optimizer step is in


def test_the_tokenizer_chat_template_and_generation_config_come_through(tmp_path):
    src, step = _run(tmp_path)
    out = tmp_path / "out"
    assert _export(step, out, "export.dtype=bfloat16") == 0
    theirs, ours = (transformers.AutoTokenizer.from_pretrained(p) for p in (src, out))
    prompt = theirs.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert prompt == "<|system|>Be brief.</s><|user|>2+3?</s><|assistant|>"
    assert ours.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True) == prompt
    assert ours.encode(prompt) == theirs.encode(prompt)
    assert (out / "generation_config.json").read_bytes() == (src / "generation_config.json").read_bytes()


def test_auto_writes_the_dtype_of_the_checkpoint_the_run_started_from(tmp_path):
    _, step = _run(tmp_path, source_dtype=torch.bfloat16)  # trained in float32, started from bf16
    assert _export(step, tmp_path / "out") == 0  # export.dtype: the run's (auto)
    assert _dtypes(tmp_path / "out") == {"BF16"}
    assert json.loads((tmp_path / "out" / "config.json").read_text())["torch_dtype"] == "bfloat16"
    assert export_dtype("auto", None) == torch.float32  # a built-in preset


def test_a_final_export_is_rewritten_in_another_dtype(tmp_path):
    src = save_tiny("qwen2.5", tmp_path / "final", chat_template=TEMPLATE)  # an HF directory
    out = tmp_path / "out"
    assert _export(src, out, "export.dtype=bfloat16") == 0
    assert _dtypes(out) == {"BF16"}
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16).eval()
    reference = transformers.AutoModelForCausalLM.from_pretrained(src, dtype=torch.bfloat16).eval()
    with torch.no_grad():
        assert torch.equal(hf(IDS).logits, reference(IDS).logits)


def test_the_runs_final_export_is_written_in_export_dtype(tmp_path):
    """The trainer's own call at the end of a run (TrainerExecutor.export_final), on one rank."""
    from llamarl_core.executors.trainer import TrainerExecutor

    src = _source(tmp_path / "src")
    model, tokenizer = load_pretrained(src)
    trainer = object.__new__(TrainerExecutor)
    trainer.ctx = SimpleNamespace(run_dir=str(tmp_path / "run"),
                                  timeline=SimpleNamespace(span=lambda *a, **k: contextlib.nullcontext()))
    trainer.model, trainer.tokenizer, trainer.rank = model, tokenizer, 0
    trainer.resources, trainer.export_dtype = TrainerResources(dtype="float32"), "bfloat16"
    trainer.model_cfg = ModelConfig(checkpoint=str(src))
    trainer.export_final()
    final = tmp_path / "run" / "checkpoints" / "final"
    assert _dtypes(final) == {"BF16"}  # trained in float32
    assert json.loads((final / "config.json").read_text())["torch_dtype"] == "bfloat16"


# ---- bad input: one line, exit 2, nothing written ---------------------------------------
def _refused(capsys, *words, says: str) -> None:
    capsys.readouterr()  # what making the run printed
    code = _export(*words)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert says in lines[0], lines[0]


def test_a_directory_that_is_no_checkpoint_is_refused(tmp_path, capsys):
    (tmp_path / "junk").mkdir()
    _refused(capsys, tmp_path / "junk", tmp_path / "out", says="is not a checkpoint")
    assert not (tmp_path / "out").exists()


def test_an_unknown_export_dtype_is_refused_naming_the_key(tmp_path, capsys):
    _, step = _run(tmp_path)
    _refused(capsys, step, tmp_path / "out", "export.dtype=fp8", says="export.dtype='fp8'")
    with pytest.raises(Exception, match="export.dtype"):
        load_config("cpu_tiny", ["export.dtype=int4"])
    assert not (tmp_path / "out").exists()


def test_an_unfinished_step_is_refused(tmp_path, capsys):
    _, step = _run(tmp_path)
    (step / checkpoints.STABLE).unlink()
    _refused(capsys, step, tmp_path / "out", "export.dtype=float32", says="no STABLE marker")
    assert not (tmp_path / "out").exists()


def test_a_truncated_shard_is_refused_naming_it(tmp_path, capsys):
    _, step = _run(tmp_path)
    shard = next((step / "trainer").glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:1000])
    _refused(capsys, step, tmp_path / "out", "export.dtype=float32", says=f"{shard.name} is truncated")
    assert not (tmp_path / "out").exists()


def test_a_corrupt_record_found_while_writing_leaves_nothing_behind(tmp_path, capsys):
    _, step = _run(tmp_path)
    shard = next((step / "trainer").glob("*.distcp"))
    data = bytearray(shard.read_bytes())
    data[: len(data) // 2] = bytes(len(data) // 2)  # same size: only reading the records shows it
    shard.write_bytes(bytes(data))
    _refused(capsys, step, tmp_path / "out", "export.dtype=float32", says="corrupt or unreadable")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "src"]  # no OUT_DIR, no partial one


def test_a_non_empty_out_dir_is_refused_and_left_as_it_was(tmp_path, capsys):
    _, step = _run(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    _refused(capsys, step, tmp_path / "out", "export.dtype=float32", says="is not empty")
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["keep.txt"]


def test_auto_without_the_runs_config_asks_for_a_dtype(tmp_path, capsys):
    _, step = _run(tmp_path)
    (step.parent.parent / "config.yaml").unlink()
    _refused(capsys, step, tmp_path / "out", says="pass export.dtype=bfloat16|float16|float32")
    assert _export(step, tmp_path / "out", "export.dtype=float32") == 0


def test_a_source_dtype_auto_cannot_write_is_refused_before_launch(tmp_path):
    from llamarl_core.config.errors import ConfigError
    from llamarl_core.runtime.prelaunch import check_before_launch

    src = _source(tmp_path / "src")
    config = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps({**config, "dtype": "float64", "torch_dtype": "float64"}))
    with pytest.raises(ConfigError, match=r"export.dtype=auto: .*config.json: torch_dtype='float64'"):
        check_before_launch(load_config("cpu_tiny", [f"model.checkpoint={src}"]))
    check_before_launch(load_config("cpu_tiny", [f"model.checkpoint={src}", "export.dtype=bfloat16"]))
