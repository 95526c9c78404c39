"""Checkpoint round trips against transformers' own LlamaForCausalLM (the trusted reference)."""
import json

import pytest
import torch

from llamarl_core.models import ByteTokenizer, Llama, ModelArgs, load_pretrained, save_pretrained

transformers = pytest.importorskip("transformers")

LLAMA31_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 16}


def _hf_model(tie: bool, rope_scaling=None) -> "transformers.LlamaForCausalLM":
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=260, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        rms_norm_eps=1e-5, tie_word_embeddings=tie, rope_theta=500000.0, rope_scaling=rope_scaling)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # random norms so a wrong norm mapping cannot hide behind ones
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
    return model


@pytest.mark.parametrize("tie,rope_scaling", [(False, None), (True, LLAMA31_SCALING)])
def test_transformers_checkpoint_loads_with_matching_logits(tmp_path, tie, rope_scaling):
    hf = _hf_model(tie, rope_scaling)
    hf.save_pretrained(tmp_path)
    ByteTokenizer().save(tmp_path)
    model, tokenizer = load_pretrained(tmp_path, dtype=torch.float32)
    assert isinstance(tokenizer, ByteTokenizer)
    assert model.args.tie_embeddings == tie
    assert (model.args.rope_scaling is not None) == (rope_scaling is not None)
    ids = torch.randint(0, 260, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours = model(ids)
        ref = hf(ids).logits
    assert ours.shape == (2, 40, 260)
    torch.testing.assert_close(ours, ref, atol=1e-4, rtol=0)


def test_our_checkpoint_loads_in_transformers_with_matching_logits(tmp_path):
    args = ModelArgs(vocab_size=260, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96,
                     max_seq_len=64, rope_scaling={k: v for k, v in LLAMA31_SCALING.items()
                                                   if k != "rope_type"})
    torch.manual_seed(0)
    model = Llama(args).eval()
    save_pretrained(model, ByteTokenizer(), tmp_path)
    hf = transformers.LlamaForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    ids = torch.randint(0, 260, (2, 30), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(model(ids), hf(ids).logits, atol=1e-4, rtol=0)


def test_llama31_config_dialect_with_rope_scaling_is_read(tmp_path):
    hf = _hf_model(False)
    hf.save_pretrained(tmp_path)
    ByteTokenizer().save(tmp_path)
    # Rewrite config.json the way Meta's Llama-3.1 checkpoints ship it (transformers 4.x).
    config = json.loads((tmp_path / "config.json").read_text())
    config.pop("rope_parameters", None)
    config["rope_theta"] = 500000.0
    config["rope_scaling"] = dict(LLAMA31_SCALING)
    (tmp_path / "config.json").write_text(json.dumps(config))
    model, _ = load_pretrained(tmp_path)
    assert model.args.rope_theta == 500000.0
    assert model.args.rope_scaling["factor"] == 8.0
    assert model.args.rope_scaling["original_max_position_embeddings"] == 16
