"""Token-in-token-out episodes against real chat templates (transformers renders them): the
sampler's tokens sit unchanged in the episode, masked 1; the environment's tokens masked 0; and
where a template is append-only the episode equals the tokenizer's encoding of the whole
conversation rendered at once, up to the last assistant's end-of-turn."""
from pathlib import Path

import pytest

from llamarl_core.data import Example, PromptFormat
from llamarl_core.data.templates import render_prompt
from llamarl_core.envs.chat import ChatDelta
from llamarl_core.envs.parsers import tools_system_prompt
from llamarl_core.envs.episode import Episode
from llamarl_core.models import ByteTokenizer, load_tokenizer
from llamarl_core.models.tokenizer import plain_chat_format

pytest.importorskip("transformers")
from tok_tiny import CHATML, LLAMA3_STYLE, tiny_hf_tokenizer  # noqa: E402

SMOLLM2 = Path("/work/main/models/smollm2-135m")
QWEN_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
# Qwen2.5's template in small: a default system message, tools written into it, tool messages as
# a user turn of <tool_response> blocks, consecutive tool messages merged into one turn.
QWEN25_LIKE = (  # expressions only: transformers renders with trim_blocks, which eats a "\n" after a tag
    "{%- if messages[0].role == 'system' %}{% set sys = messages[0].content %}{% else %}"
    "{% set sys = '" + QWEN_SYSTEM + "' %}{% endif %}"
    "{{ '<|im_start|>system\\n' + sys }}{% if tools %}{{ '\\n\\n# Tools\\n<tools>' }}{% for t in tools %}"
    "{{ '\\n' + (t | tojson) }}{% endfor %}{{ '\\n</tools>' }}{% endif %}{{ '<|im_end|>\\n' }}"
    "{%- for m in messages %}{% if m.role == 'tool' %}"
    "{% if loop.index0 == 0 or messages[loop.index0 - 1].role != 'tool' %}{{ '<|im_start|>user' }}{% endif %}"
    "{{ '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' }}"
    "{% if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{ '<|im_end|>\\n' }}{% endif %}"
    "{% elif not (loop.first and m.role == 'system') %}"
    "{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add two numbers.",
                                           "parameters": {"type": "object", "properties": {
                                               "a": {"type": "number"}, "b": {"type": "number"}}}}}]
OPENING = [{"role": "system", "content": "Use the tools."}, {"role": "user", "content": "What is 2+2?"}]
# (what the model writes in a turn, what the environment answers): tool calls, two tool
# results at once, a user message, then a final turn the episode ends on.
TURNS = [('<tool_call>{"name": "add", "arguments": {"a": 2, "b": 2}}</tool_call>',
          [{"role": "tool", "content": "4"}]),
         ("Let me check twice.", [{"role": "tool", "content": "4"}, {"role": "tool", "content": "4.0"}]),
         ("The answer is 4.", [{"role": "user", "content": "Give the final answer on its own line."}]),
         ("#### 4", None)]


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    root = tmp_path_factory.mktemp("tok")
    made = {name: load_tokenizer(tiny_hf_tokenizer(root / name, template))
            for name, template in (("chatml", CHATML), ("qwen25", QWEN25_LIKE), ("llama3", LLAMA3_STYLE))}
    if SMOLLM2.is_dir():
        made["smollm2"] = load_tokenizer(SMOLLM2)
    return made


def run_episode(tok, chat: ChatDelta, opening, turns, cut=()):
    """Simulate the sampler: a turn's tokens are encode(content) + the end-of-turn ids (none
    for turns whose index is in `cut`: stopped by length). Returns the episode and, per turn,
    (position in Episode.ids, the sampled ids)."""
    episode, placed = Episode(chat.opening(opening)), []
    for k, (content, answer) in enumerate(turns):
        sampled = tok.encode(content) + ([] if k in cut else chat.eot_ids)
        placed.append((len(episode.ids), sampled))
        episode.add_model(sampled, [-0.5] * len(sampled), versions=k)
        if answer is not None:
            episode.add_env(chat.after_turn(sampled, answer))
    return episode, placed


def whole_conversation(opening, turns):
    messages = list(opening)
    for content, answer in turns:
        messages += [{"role": "assistant", "content": content}] + (answer or [])
    return messages


def check_tito(tok, chat, episode, placed, append_only: bool, template_kwargs=None):
    ids, mask = episode.ids, [None] * len(episode.prompt) + episode.model_mask
    model_positions = set()
    for start, sampled in placed:  # sampler -> trainer: the same ids at the same places, mask 1
        assert ids[start:start + len(sampled)] == sampled
        assert mask[start:start + len(sampled)] == [1] * len(sampled)
        model_positions.update(range(start, start + len(sampled)))
    env = [p for p in range(len(episode.prompt), len(ids)) if p not in model_positions]
    assert env and all(mask[p] == 0 for p in env)
    assert [x for p, x in zip(range(len(episode.prompt), len(ids)), episode.logprobs) if p in env] == [0.0] * len(env)
    if append_only:
        text = tok.apply_chat_template(whole_conversation(OPENING, TURNS), add_generation_prompt=False,
                                       **(template_kwargs or {}))
        full = tok.encode(text)
        # up to the last assistant's end-of-turn; after it only the template's separator
        assert ids == full[:len(ids)]
        assert tok.decode(full[len(ids):]).strip() == ""


@pytest.mark.parametrize("name", ["chatml", "smollm2"])
def test_chatml_episode_restores_the_newline_after_im_end_as_masked_env_tokens(tokenizers, name):
    if name not in tokenizers:
        pytest.skip(f"{SMOLLM2} absent")
    tok = tokenizers[name]
    chat = ChatDelta(tok)
    im_end = tok.encode("<|im_end|>")
    assert chat.eot_ids == im_end and len(im_end) == 1
    episode, placed = run_episode(tok, chat, OPENING, TURNS)
    check_tito(tok, chat, episode, placed, append_only=True)
    newline = tok.encode("\n")
    for start, sampled in placed[:-1]:  # the separator right after each sampled <|im_end|>, masked
        after = start + len(sampled) - len(episode.prompt)
        assert episode.completion[after:after + len(newline)] == newline
        assert episode.model_mask[after:after + len(newline)] == [0] * len(newline)


def test_qwen25_like_template_default_system_tools_and_merged_tool_messages(tokenizers):
    tok = tokenizers["qwen25"]
    chat = ChatDelta(tok, tools=TOOLS)
    opening = [OPENING[1]]  # no system message: the template's default one, tools inside it
    prompt_text = tok._tok.decode(chat.opening(opening))
    assert prompt_text.startswith(f"<|im_start|>system\n{QWEN_SYSTEM}\n\n# Tools\n<tools>\n{{")
    assert prompt_text.endswith("</tools><|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n")
    assert "<tool_call>" not in prompt_text  # the template's own tools text, not parsers.tools_system_prompt
    delta = chat.after_turn(tok.encode("x") + chat.eot_ids, TURNS[1][1])
    assert tok._tok.decode(delta) == ("\n<|im_start|>user\n<tool_response>\n4\n</tool_response>\n<tool_response>\n"
                                      "4.0\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    episode, placed = run_episode(tok, chat, opening, TURNS)
    # append-only once the separator is restored: the whole conversation rendered at once
    full = tok.encode(tok.apply_chat_template(whole_conversation(opening, TURNS), add_generation_prompt=False,
                                              tools=TOOLS))
    assert episode.ids == full[:len(episode.ids)] and tok.decode(full[len(episode.ids):]).strip() == ""
    check_tito(tok, chat, episode, placed, append_only=False)


def test_llama3_style_episode_is_append_only(tokenizers):
    tok = tokenizers["llama3"]
    chat = ChatDelta(tok)
    assert chat.eot_ids == tok.encode("<|eot_id|>")
    episode, placed = run_episode(tok, chat, OPENING, TURNS)
    check_tito(tok, chat, episode, placed, append_only=True)
    assert episode.ids[len(episode.ids) - 1] == chat.eot_ids[-1]  # ends on the model's own end-of-turn


@pytest.mark.parametrize("name", ["chatml", "llama3"])
def test_a_turn_cut_by_length_gets_the_end_of_turn_appended_as_env_tokens(tokenizers, name):
    tok = tokenizers[name]
    chat = ChatDelta(tok)
    cut = tok.encode(TURNS[0][0])[:5]
    clean = chat.after_turn(cut + chat.eot_ids, TURNS[0][1])
    assert chat.after_turn(cut, TURNS[0][1]) == chat.eot_ids + clean
    episode, placed = run_episode(tok, chat, OPENING, TURNS, cut={1})
    check_tito(tok, chat, episode, placed, append_only=True)  # the closed turn is what the template writes


def test_opening_equals_todays_single_turn_prompt_ids(tokenizers):
    for tok in tokenizers.values():
        example = Example(id="0", prompt="What is 2+2?", reference="4")
        fmt = PromptFormat("chat", system_prompt="Use the tools.")
        assert ChatDelta(tok).opening(OPENING) == tok.encode(render_prompt(example, fmt, tok))


def test_tools_prompt_goes_into_the_system_message_when_the_template_ignores_tools(tokenizers):
    tok = tokenizers["chatml"]
    chat = ChatDelta(tok, tools=TOOLS, tool_parser="hermes")
    described = tools_system_prompt(TOOLS, "hermes")
    assert tok._tok.decode(chat.opening(OPENING)).startswith(
        f"<|im_start|>system\nUse the tools.\n\n{described}<|im_end|>\n")
    assert tok._tok.decode(chat.opening(OPENING[1:])).startswith(
        f"<|im_start|>system\n{described.rstrip()}<|im_end|>\n")
    episode, placed = run_episode(tok, chat, OPENING, TURNS)
    check_tito(tok, chat, episode, placed, append_only=False)


def test_trimming_template_still_yields_its_end_of_turn(tmp_path):
    trimming = CHATML.replace("m['content']", "(m['content'] | trim)")
    tok = load_tokenizer(tiny_hf_tokenizer(tmp_path, trimming))
    chat = ChatDelta(tok)
    assert chat.eot_ids == tok.encode("<|im_end|>")
    assert tok._tok.decode(chat.after_turn(tok.encode("a \n") + chat.eot_ids, [{"role": "user", "content": " b "}])) \
        == "\n<|im_start|>user\nb<|im_end|>\n<|im_start|>assistant\n"


def test_a_template_whose_prefix_changes_with_later_messages_is_refused(tmp_path):
    unstable = "{% if messages | length > 2 %}<|im_start|>system\nlong<|im_end|>\n{% endif %}" + CHATML
    tok = load_tokenizer(tiny_hf_tokenizer(tmp_path, unstable))
    with pytest.raises(ValueError, match="before the first user message changes"):
        ChatDelta(tok)


def test_byte_tokenizer_plain_format_episode():
    tok = ByteTokenizer()
    chat = ChatDelta(tok)
    assert chat.eot_ids == []  # the plain format writes no end-of-turn: the stop id tells the end
    turns = [(" " + content, answer) for content, answer in TURNS]  # "Assistant:" then " content"
    episode, placed = Episode(chat.opening(OPENING)), []
    for content, answer in turns:
        sampled = tok.encode(content) + [tok.eos_id]
        placed.append((len(episode.ids), sampled))
        episode.add_model(sampled, [-1.0] * len(sampled))
        if answer is not None:
            assert chat.after_turn(sampled, answer) == tok.encode(
                "\n\n" + plain_chat_format(answer, add_generation_prompt=True))
            episode.add_env(chat.after_turn(sampled, answer))
    check_tito(tok, chat, episode, placed, append_only=False)
    # without the sampled stop ids, the whole conversation in the plain format
    assert [i for i in episode.ids if i != tok.eos_id] == tok.encode(
        plain_chat_format(whole_conversation(OPENING, TURNS), add_generation_prompt=False))
