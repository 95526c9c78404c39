"""`warmstart.data`: the warm start on the user's own chats, the loss on assistant tokens only.

The mask is checked against positions counted by hand on a byte-level tokenizer (one token
per character, `</s>` one token), the loss against a cross-entropy computed here row by row,
and bad files against `llamarl train`, which must exit 2 naming the file and line before any
role starts.
"""
import json

import pytest
import torch
import torch.nn.functional as F
from hf_tiny import tiny_tokenizer
from tok_tiny import CHATML, LLAMA3_STYLE, tiny_hf_tokenizer

from llamarl_cli.main import main
from llamarl_core.config.load import load_config
from llamarl_core.config.schema import WarmStartConfig
from llamarl_core.data import Example, PromptFormat, render_prompt
from llamarl_core.data.chat_sft import assistant_tokens, chat_sequences, load_conversations
from llamarl_core.models import ByteTokenizer, Llama, ModelArgs, load_tokenizer
from llamarl_core.models.tokenizer import HFTokenizer
from llamarl_core.sft.warmstart import WarmStart, warmstart_sequences, warmstart_steps

from launch_guard import Launched, no_launch, train_refused  # noqa: F401  (no_launch: a fixture)

# Zephyr-style: each turn ends in the EOS `</s>`, then a newline the model never generates.
ZEPHYR = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}"
          "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
CHAT = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"},
        {"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]
ARGS = ModelArgs(vocab_size=260, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=64,
                 max_seq_len=64, rope_theta=10000.0)
BYTES = ByteTokenizer()


def _zephyr():
    return HFTokenizer(tiny_tokenizer(ZEPHYR))  # bytes are tokens; </s> = 258 is the EOS


def test_the_assistant_mask_is_every_assistant_turn_and_its_eos_for_two_turns_with_a_system_prompt():
    tok = _zephyr()
    tokens, mask = assistant_tokens(CHAT, PromptFormat("chat", "Be brief."), tok)
    # "<|system|>\n" 11 + "Be brief." 9 + </s> + "\n"      -> tokens 0..21
    # "<|user|>\n" 9 + "hi" 2 + </s> + "\n"                -> 22..34
    # "<|assistant|>\n" 14 -> 35..48; "yo" 49, 50; </s> 51; "\n" 52
    # "<|user|>\n" 9 + "2+2?" 4 + </s> + "\n"              -> 53..67
    # "<|assistant|>\n" 14 -> 68..81; "4" 82; </s> 83; "\n" 84
    assert len(tokens) == 85
    assert [i for i, m in enumerate(mask) if m] == [49, 50, 51, 82, 83]
    assert tokens[51] == tokens[83] == tok.eos_id == 258
    assert tok.encode(tok.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, *CHAT], add_generation_prompt=False)) == tokens


def test_the_mask_equals_transformers_generation_mask_on_a_template_that_marks_assistant_turns():
    # The reference: TRL's assistant_only_loss reads transformers' `{% generation %}` mask.
    marked = ("{% for m in messages %}<|{{ m['role'] }}|>\n{% if m['role'] == 'assistant' %}"
              "{% generation %}{{ m['content'] }}</s>{% endgeneration %}{% else %}{{ m['content'] }}</s>"
              "{% endif %}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
    hf = tiny_tokenizer(marked)
    system_chat = [{"role": "system", "content": "Be brief."}, *CHAT]
    reference = hf.apply_chat_template(system_chat, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    tokens, mask = assistant_tokens(CHAT, PromptFormat("chat", "Be brief."), HFTokenizer(hf))
    assert tokens == list(reference["input_ids"]) and mask == list(reference["assistant_masks"])
    assert sum(mask) == 5  # "yo</s>", "4</s>"


@pytest.mark.parametrize("template, eos, stop", [(CHATML, "<|im_end|>", "<|im_end|>"),
                                                  (LLAMA3_STYLE, "<|end_of_text|>", "<|eot_id|>")])
def test_a_bpe_tokenizer_trains_each_answer_and_its_stop_token(tmp_path, template, eos, stop):
    # Llama-3 style: the turn ends in <|eot_id|>, a stop id from generation_config.json, not the EOS
    # (ids 2 = <|eot_id|>, 1 = <|end_of_text|>: tok_tiny.SPECIALS come first in the vocabulary)
    tok = load_tokenizer(tiny_hf_tokenizer(tmp_path, template, eos_token=eos, generation_eos=[2, 1]))
    tokens, mask = assistant_tokens(CHAT, PromptFormat("chat"), tok)
    trained = [t for t, m in zip(tokens, mask) if m]
    assert tok._tok.decode(trained) == f"yo{stop}4{stop}"


def test_the_plain_template_trains_each_answer_after_its_question_and_appends_the_eos():
    tokens, mask = assistant_tokens(CHAT[:2], PromptFormat("plain"), BYTES)
    assert tokens == BYTES.encode("Question: hi\nAnswer: yo") + [BYTES.eos_id]
    assert mask == [0] * len("Question: hi\nAnswer:") + [1] * len(" yo") + [1]


def test_a_template_that_drops_earlier_answers_trains_each_turn_on_its_own_history(tmp_path):
    # as Qwen3 drops earlier turns' reasoning: the chat through turn 2 is no prefix of the whole chat
    last_only = ("{% for m in messages %}{{ m['role'] }}: "
                 "{% if m['role'] != 'assistant' or loop.last %}{{ m['content'] }}{% endif %}</s>{% endfor %}"
                 "{% if add_generation_prompt %}assistant: {% endif %}")
    path = tmp_path / "chats.jsonl"
    path.write_text(json.dumps({"messages": CHAT}) + "\n")
    tok = HFTokenizer(tiny_tokenizer(last_only))
    seqs, wheres = chat_sequences(load_conversations(str(path)), PromptFormat("chat"), tok)
    assert wheres == [f"{path}:1", f"{path}:1"]
    texts = [(tok._tok.decode(t), tok._tok.decode([x for x, m in zip(t, mask) if m])) for t, mask in seqs]
    assert texts == [("user: hi</s>assistant: yo</s>", "yo</s>"),
                     ("user: hi</s>assistant: </s>user: 2+2?</s>assistant: 4</s>", "4</s>")]


def test_the_pre_launch_check_counts_chats_and_the_per_turn_sequences_they_became(tmp_path):
    from llamarl_core.runtime.data_check import _check_warmstart_data

    last_only = ("{% for m in messages %}{{ m['role'] }}: "
                 "{% if m['role'] != 'assistant' or loop.last %}{{ m['content'] }}{% endif %}</s>{% endfor %}"
                 "{% if add_generation_prompt %}assistant: {% endif %}")
    path = tmp_path / "chats.jsonl"
    path.write_text(json.dumps({"messages": CHAT}) + "\n" + json.dumps({"messages": CHAT[:2]}) + "\n")
    cfg = load_config("cpu_tiny", [f"warmstart.data={path}", "warmstart.steps=1", "data.template=chat",
                                   "generation.max_prompt_tokens=64"])
    [line] = _check_warmstart_data(cfg, HFTokenizer(tiny_tokenizer(last_only)))
    # chat 1 as 2 sequences ("yo</s>" 3, "4</s>" 2 trained), chat 2 as 1 ("yo</s>" 3): 8 tokens; the longest,
    # "user: hi</s>" 9 + "assistant: </s>" 12 + "user: 2+2?</s>" 11 + "assistant: 4</s>" 13 = 45 tokens;
    # the limit: 64 + cpu_tiny's generation.max_new_tokens 40
    assert line == ("warmstart.data: 2 chats checked as 3 sequences (one per assistant turn where the template "
                    "renders earlier turns differently later), up to 45 tokens (limit 104), 8 assistant tokens trained")


def _reference_loss(model, seqs) -> float:
    """Mean over every trained token of -log p(token | the tokens before it), row by row unpadded."""
    total, count = 0.0, 0
    with torch.no_grad():
        for tokens, mask in seqs:
            logp = F.log_softmax(model(torch.tensor([tokens]))[0, :-1].double(), dim=-1)  # [L-1, V]
            for j in range(1, len(tokens)):
                if mask[j]:
                    total -= float(logp[j - 1, tokens[j]])
                    count += 1
    return total / count


def test_the_warm_start_loss_is_the_cross_entropy_of_the_assistant_tokens_only():
    torch.manual_seed(0)
    model = Llama(ARGS)
    seqs = [assistant_tokens(CHAT, PromptFormat("plain", "Be brief."), BYTES),
            assistant_tokens(CHAT[:2], PromptFormat("plain"), BYTES)]  # shorter: padded in the batch
    expected = _reference_loss(model, seqs)
    everything = _reference_loss(model, [(t, [1] * len(t)) for t, _ in seqs])
    loss = WarmStart(model, WarmStartConfig(steps=1, batch_size=2), BYTES.pad_id).step(seqs)
    assert loss == pytest.approx(expected, rel=1e-5)
    assert abs(everything - expected) > 1e-3  # the mask matters: the whole text's loss differs


def test_steps_on_one_conversation_drive_its_assistant_loss_down():
    torch.manual_seed(0)
    model = Llama(ARGS)
    seqs = [assistant_tokens(CHAT, PromptFormat("plain"), BYTES)]
    before = _reference_loss(model, seqs)
    warmstart_steps(model, WarmStartConfig(steps=30, batch_size=1, lr=1e-2), 0, seqs, BYTES.pad_id,
                    log=lambda m: None)
    after = _reference_loss(model, seqs)
    assert after < 0.2 * before, (before, after)


def test_a_file_with_fewer_chats_than_trainer_ranks_gives_every_rank_a_row():
    torch.manual_seed(0)
    seqs = [assistant_tokens(CHAT, PromptFormat("plain"), BYTES)]
    w = WarmStartConfig(steps=1, batch_size=4)
    # rank 1 of 2 got an empty slice of the one-row batch: max() of an empty sequence, the run failed
    loss = warmstart_steps(Llama(ARGS), w, 0, seqs, BYTES.pad_id, rank=1, world=2, log=lambda m: None)
    torch.manual_seed(0)
    assert loss == pytest.approx(_reference_loss(Llama(ARGS), seqs), rel=1e-5)


def test_with_warmstart_data_the_warm_start_trains_on_the_chats_not_the_references(tmp_path):
    path = tmp_path / "chats.jsonl"
    path.write_text(json.dumps({"messages": CHAT, "id": "x"}) + "\n")
    cfg = load_config("cpu_tiny", [f"warmstart.data={path}", "warmstart.steps=1"])
    [(tokens, mask)], skipped = warmstart_sequences(cfg.warmstart, cfg.data, cfg.generation, None, BYTES)
    assert skipped == 0
    assert (tokens, mask) == assistant_tokens(CHAT, PromptFormat("plain"), BYTES, source="arith")
    # the first turn reads as the run's own prompts do (the arithmetic task's "Q: ...\nA:")
    prompt = BYTES.encode(render_prompt(Example("0", "hi", "yo", source="arith"), "plain"))
    assert tokens[:len(prompt)] == prompt and mask[len(prompt)] == 1 and not any(mask[:len(prompt)])


# --- refused before launch -------------------------------------------------------------------

BASE = ["warmstart.steps=2", "data.num_eval_examples=2", "generation.max_prompt_tokens=64",
        "generation.max_new_tokens=24", "algorithm.prompts_per_step=2", "algorithm.group_size=2"]


def _write(tmp_path, lines) -> str:
    path = tmp_path / "chats.jsonl"
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return str(path)


def _refused(capsys, tmp_path, *overrides) -> str:
    return train_refused(capsys, tmp_path, BASE, *overrides)


GOOD = {"messages": CHAT}


@pytest.mark.parametrize("bad, reason", [
    ("{oops", "2: not valid JSON (Expecting property name enclosed in double quotes at column 2)"),
    ({"prompt": "hi"}, "2: missing field 'messages' (a list of {\"role\", \"content\"} turns); the row has keys ['prompt']"),
    ({"messages": CHAT[:1]}, "2: no assistant turn: nothing to train on"),
    ({"messages": [{"role": "function", "content": "x"}, *CHAT]},
     "2: turn 1 has unknown role 'function' (expected one of system, user, assistant, tool)"),
], ids=["malformed", "no_messages", "no_assistant", "unknown_role"])
def test_a_bad_chat_row_is_refused_naming_the_file_and_line(no_launch, capsys, tmp_path, bad, reason):
    path = _write(tmp_path, [GOOD, bad])
    err = _refused(capsys, tmp_path, f"warmstart.data={path}")
    assert f"warmstart.data: {path}:{reason} (data.on_error=skip would skip such lines)" in err


def test_a_missing_chat_file_is_refused(no_launch, capsys, tmp_path):
    err = _refused(capsys, tmp_path, f"warmstart.data={tmp_path / 'nope.jsonl'}")
    assert f"warmstart.data: data file not found: {tmp_path / 'nope.jsonl'}" in err


def test_chats_longer_than_rl_sequences_are_refused_with_the_longest(no_launch, capsys, tmp_path):
    long = {"messages": [{"role": "user", "content": "x" * 80}, {"role": "assistant", "content": "y"}]}
    path = _write(tmp_path, [GOOD, long])
    err = _refused(capsys, tmp_path, f"warmstart.data={path}")
    # "Q: " 3 + 80 + "\nA:" 3 + " y" 2 + EOS 1 = 89 > 64 + 24 (arith data: its prompts' "Q:/A:" format)
    assert (f"warmstart.data={path}: 1 of 2 chats are longer than 88 tokens (generation.max_prompt_tokens=64 + "
            f"generation.max_new_tokens=24, RL's longest sequence); the longest has 89 ({path}:2); raise those "
            f"or shorten the chats") in err


def test_warmstart_data_without_warmstart_steps_is_refused_as_unused(no_launch, capsys, tmp_path):
    path = _write(tmp_path, [GOOD])
    err = _refused(capsys, tmp_path, f"warmstart.data={path}", "warmstart.steps=0")
    assert f"warmstart.data={path} with warmstart.steps=0: the chats would be unused" in err


def test_skipped_chat_rows_are_counted_and_the_rest_checked(no_launch, capsys, tmp_path):
    path = _write(tmp_path, [GOOD, "{oops", {"messages": CHAT[:1]}, GOOD])
    with pytest.raises(Launched):
        main(["train", f"run.dir={tmp_path / 'run'}", *BASE, f"warmstart.data={path}", "data.on_error=skip"])
    out = capsys.readouterr().out
    assert f"warmstart.data: skipped 2 bad line(s) of {path} (data.on_error=skip; line 2: not valid JSON" in out
    assert "line 3: no assistant turn: nothing to train on" in out
    # each chat (arith data: "Q:/A:"): "Q: hi\nA: yo" 11 + EOS + "\n\nQ: 2+2?\nA: 4" 14 + EOS = 27 tokens,
    # of which " yo" + EOS and " 4" + EOS (7) are trained
    assert "warmstart.data: 2 chats checked, up to 27 tokens (limit 88), 14 assistant tokens trained" in out
