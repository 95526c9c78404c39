"""Byte and tokenizer.json tokenizers, their persistence and chat templates."""
import json

import pytest

from llamarl_core.models import BYTE_VOCAB_SIZE, ByteTokenizer, HFTokenizer, load_tokenizer

tokenizers = pytest.importorskip("tokenizers")

LLAMA3_STYLE_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
    "{{ m['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")


def test_byte_tokenizer_round_trips_utf8_and_skips_specials():
    tok = ByteTokenizer()
    ids = tok.encode("héllo", add_bos=True)
    # BOS, then 'h', the two UTF-8 bytes of 'é' (0xC3 0xA9), 'l', 'l', 'o'
    assert ids == [257, 104, 0xC3, 0xA9, 108, 108, 111]
    assert tok.decode(ids + [tok.eos_id, tok.pad_id]) == "héllo"
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.vocab_size) == (256, 257, 258, BYTE_VOCAB_SIZE)


def test_byte_tokenizer_is_saved_and_loaded_back(tmp_path):
    ByteTokenizer(chat_template="{% for m in messages %}<{{ m['content'] }}>{% endfor %}").save(tmp_path)
    tok = load_tokenizer(tmp_path)
    assert isinstance(tok, ByteTokenizer)
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}]) == "<hi>"


def test_plain_chat_fallback_without_template():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    assert ByteTokenizer().apply_chat_template(messages) == "System: Be brief.\n\nUser: 2+2?\n\nAssistant:"


def _tiny_hf_tokenizer_dir(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    specials = ["<unk>", "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"]
    trainer = trainers.BpeTrainer(vocab_size=120, special_tokens=specials)
    tok.train_from_iterator(["the cat sat on the mat", "a dog ate the hat"] * 20, trainer=trainer)
    tok.save(str(tmp_path / "tokenizer.json"))
    config = {"bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|eot_id|>"},
              "chat_template": LLAMA3_STYLE_TEMPLATE}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    return tok


def test_tokenizer_json_encodes_like_the_tokenizers_library(tmp_path):
    reference = _tiny_hf_tokenizer_dir(tmp_path)
    tok = load_tokenizer(tmp_path)
    assert isinstance(tok, HFTokenizer)
    ids = tok.encode("the cat sat", add_bos=True)
    assert ids == [reference.token_to_id("<|begin_of_text|>")] + reference.encode("the cat sat").ids
    assert tok.eos_id == reference.token_to_id("<|eot_id|>")
    assert tok.pad_id == tok.eos_id  # no pad token: padded slots are masked, EOS id is reused
    assert tok.decode(ids + [tok.eos_id]) == "the cat sat"
    assert tok.vocab_size == reference.get_vocab_size()


def test_tokenizer_json_chat_template_is_rendered_with_generation_prompt(tmp_path):
    _tiny_hf_tokenizer_dir(tmp_path)
    text = load_tokenizer(tmp_path).apply_chat_template([{"role": "user", "content": "hi"}])
    assert text == ("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
                    "<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_hf_tokenizer_save_and_generation_config_eos_list(tmp_path):
    _tiny_hf_tokenizer_dir(tmp_path)
    tok = load_tokenizer(tmp_path)
    out = tmp_path / "saved"
    out.mkdir()
    tok.save(out)
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": [1, 2]}))
    again = load_tokenizer(out)
    assert again.encode("the mat") == tok.encode("the mat")
    assert set(again.eos_ids) == {1, 2, tok.eos_id}
    resaved = tmp_path / "resaved"
    resaved.mkdir()
    again.save(resaved)
    assert set(load_tokenizer(resaved).eos_ids) == {1, 2, tok.eos_id}


def test_directory_without_tokenizer_files_raises_naming_both_options(tmp_path):
    with pytest.raises(FileNotFoundError, match="byte_tokenizer.json or tokenizer.json"):
        load_tokenizer(tmp_path)
