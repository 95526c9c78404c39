"""Tiny Hugging Face tokenizers built in-process (no download): a byte-level BPE trained on a
few sentences, wrapped in transformers' `PreTrainedTokenizerFast` and saved the way
transformers saves it, the chat template in `chat_template.jinja` (transformers 5.x) or in
`tokenizer_config.json` (4.x and most checkpoints on the Hub)."""
from __future__ import annotations

import json
from pathlib import Path

CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
LLAMA3_STYLE = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
                "{{ m['content'] }}<|eot_id|>{% endfor %}"
                "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>",
            "<|end_header_id|>", "<|im_start|>", "<|im_end|>"]
CORPUS = ["the cat sat on the mat", "a dog ate the hat", "What is 2+2? The answer is 4.",
          "Give the final answer on its own line as '#### <number>'."] * 10


def tiny_hf_tokenizer(directory: Path, template: str | None = CHATML, template_in: str = "jinja",
                      eos_token: str = "<|im_end|>", bos_token: str | None = "<|begin_of_text|>",
                      generation_eos=None) -> Path:
    """Save a tokenizer to `directory` with `template` in `chat_template.jinja`
    (`template_in="jinja"`) or `tokenizer_config.json` (`"config"`); `generation_eos` (an int
    or a list) goes to `generation_config.json`'s `eos_token_id`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos_token, eos_token=eos_token,
                                   chat_template=template)
    directory.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(directory), save_jinja_files=template_in == "jinja")
    config = json.loads((directory / "tokenizer_config.json").read_text())
    assert bool(config.get("chat_template")) == (template is not None and template_in == "config")
    assert (directory / "chat_template.jinja").is_file() == (template is not None and template_in == "jinja")
    if generation_eos is not None:
        (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": generation_eos}))
    return directory
