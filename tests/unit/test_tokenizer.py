"""The byte tokenizer, and Hugging Face tokenizers read through transformers' AutoTokenizer:
prompts, stop ids and the export of the tokenizer files, against transformers itself."""
import json

import pytest
import torch

from llamarl_core.config.schema import DataConfig
from llamarl_core.data import Example, PromptFormat, prompt_format
from llamarl_core.eval import encode_prompt
from llamarl_core.models import BYTE_VOCAB_SIZE, ByteTokenizer, HFTokenizer, load_tokenizer

pytest.importorskip("transformers")
from tok_tiny import CHATML, LLAMA3_STYLE, tiny_hf_tokenizer  # noqa: E402


def test_byte_tokenizer_round_trips_utf8_and_skips_specials():
    tok = ByteTokenizer()
    ids = tok.encode("héllo", add_bos=True)
    # BOS, then 'h', the two UTF-8 bytes of 'é' (0xC3 0xA9), 'l', 'l', 'o'
    assert ids == [257, 104, 0xC3, 0xA9, 108, 108, 111]
    assert tok.decode(ids + [tok.eos_id, tok.pad_id]) == "héllo"
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.vocab_size) == (256, 257, 258, BYTE_VOCAB_SIZE)


def test_byte_tokenizer_is_saved_and_loaded_back_with_its_template(tmp_path):
    ByteTokenizer(chat_template="{% for m in messages %}<{{ m['content'] }}>{% endfor %}").save(tmp_path)
    tok = load_tokenizer(tmp_path)
    assert isinstance(tok, ByteTokenizer)
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}]) == "<hi>"


def test_plain_chat_fallback_without_template():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    assert ByteTokenizer().apply_chat_template(messages) == "System: Be brief.\n\nUser: 2+2?\n\nAssistant:"


@pytest.mark.parametrize("template_in,template,eos", [("config", LLAMA3_STYLE, "<|eot_id|>"),
                                                      ("jinja", CHATML, "<|im_end|>")])
def test_prompt_ids_equal_transformers_apply_chat_template(tmp_path, template_in, template, eos):
    """The old reader ignored chat_template.jinja (prompt became 'User: ...'); the config case
    renders bos_token, which the template must receive from the tokenizer's specials."""
    from transformers import AutoTokenizer

    tiny_hf_tokenizer(tmp_path, template, template_in, eos_token=eos)
    tok = load_tokenizer(tmp_path)
    assert isinstance(tok, HFTokenizer) and tok.chat_template == template
    data = DataConfig(name="gsm8k", template="auto", system_prompt="Be brief.")
    example = Example("1", "What is 2+2?", "4", "2+2=4\n#### 4", "gsm8k")
    ids = encode_prompt(example, prompt_format(data), tok)
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "What is 2+2?\nGive the final answer on its own line as '#### <number>'."}]
    reference = AutoTokenizer.from_pretrained(str(tmp_path))
    assert ids == reference.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
    assert tok.decode(ids).endswith("'#### <number>'.\nassistant\n" if template_in == "jinja" else
                                    "'#### <number>'.assistant\n\n")


def test_template_auto_is_plain_without_a_chat_template(tmp_path):
    tiny_hf_tokenizer(tmp_path, template=None)
    tok = load_tokenizer(tmp_path)
    example = Example("1", "What is 2+2?", "4", None, "gsm8k")
    fmt = prompt_format(DataConfig(name="gsm8k", instruction="Box it."))
    assert tok.decode(encode_prompt(example, fmt, tok)) == "Question: What is 2+2?\nBox it.\nAnswer:"


@pytest.mark.parametrize("generation_eos,expected", [(None, {"<|im_end|>"}),
                                                     (5, {"<|im_end|>", 5}),
                                                     ([2, "<|im_end|>", 6], {2, "<|im_end|>", 6})])
def test_stop_ids_are_the_eos_plus_every_generation_config_eos(tmp_path, generation_eos, expected):
    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(str(tiny_hf_tokenizer(tmp_path / "ref")))
    eos = reference.convert_tokens_to_ids("<|im_end|>")
    resolve = lambda v: eos if v == "<|im_end|>" else v  # noqa: E731
    gen = None if generation_eos is None else (
        [resolve(v) for v in generation_eos] if isinstance(generation_eos, list) else generation_eos)
    tok = load_tokenizer(tiny_hf_tokenizer(tmp_path / "tok", generation_eos=gen))
    assert tok.eos_id == eos and set(tok.eos_ids) == {resolve(v) for v in expected}
    assert len(tok.eos_ids) == len(set(tok.eos_ids))


def test_export_writes_the_tokenizer_files_as_they_came_in(tmp_path):
    from transformers import AutoTokenizer

    from llamarl_core.models import Llama, load_pretrained, save_pretrained, with_overrides, get_preset

    src = tiny_hf_tokenizer(tmp_path / "src", CHATML, "jinja", generation_eos=[3, 6])
    # what a user's checkpoint might carry beside the tokenizer: a hand-edited generation config
    (src / "generation_config.json").write_text('{"eos_token_id": [3, 6],  "temperature": 0.6}\n')
    tok = load_tokenizer(src)
    args = with_overrides(get_preset("tiny-2m"), vocab_size=tok.vocab_size, dim=32, n_layers=1,
                          n_heads=2, n_kv_heads=2, ffn_dim=64)
    save_pretrained(Llama(args), tok, tmp_path / "out")
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        assert (tmp_path / "out" / name).read_bytes() == (src / name).read_bytes(), name
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (config["eos_token_id"], config["vocab_size"]) == (tok.eos_id, tok.vocab_size)
    _, again = load_pretrained(tmp_path / "out")
    messages = [{"role": "user", "content": "the cat"}]
    ours = again.encode(again.apply_chat_template(messages))
    assert ours == AutoTokenizer.from_pretrained(str(src)).apply_chat_template(
        messages, add_generation_prompt=True, return_dict=False)
    assert set(again.eos_ids) == {tok.eos_id, 3, 6}
    assert torch.equal(torch.tensor(again.encode("the mat")), torch.tensor(tok.encode("the mat")))


def test_prompt_format_applies_system_prompt_and_instruction_to_the_plain_template():
    example = Example("1", "23+45", "68", None, "arith")
    fmt = PromptFormat("plain", system_prompt="You add numbers.", instruction="Think in columns.")
    from llamarl_core.data import render_prompt
    assert render_prompt(example, fmt) == "You add numbers.\n\nQ: 23+45\nThink in columns.\nA:"


def test_directory_without_tokenizer_files_raises_naming_both_options(tmp_path):
    with pytest.raises(FileNotFoundError, match="byte_tokenizer.json or tokenizer.json"):
        load_tokenizer(tmp_path)
