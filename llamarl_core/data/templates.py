"""How a model sees an example (``render_prompt``) and what it should write (``render_target``).

The completion is whatever the model writes after the rendered prompt, and the verifier
reads the completion. ``render_target`` is the supervised warm-start target, built from
the same solution format the verifier reads (``... #### N`` or ``\\boxed{}``; a generic
row's answer field as written), so SFT and reward agree by construction:
``get_reward(src)(render_target(ex), ex.reference)`` is 1.0 for every example that has a
solution.

A ``PromptFormat`` is ``data.template``, ``data.system_prompt`` and ``data.instruction``
with the instruction's default resolved (``prompt_format``; the defaults are one table,
``config/schema.py: DEFAULT_INSTRUCTIONS``). The question is ``example.prompt``, then the
instruction on a new line when there is one. Templates (docs/DATA.md):
- ``plain``: arith -> ``Q: 23+45\\nA:`` (bytes are tokens: keep it short);
             others -> ``Question: ...\\nAnswer:``; a system prompt is a first paragraph
             (``<system prompt>\\n\\nQuestion: ...``).
- ``chat``:  ``tokenizer.apply_chat_template(messages)`` with the generation prompt, where
             messages are the system prompt as a ``system`` message (when set) and the
             question as the ``user`` message; ``data.chat_template_kwargs`` are passed on as
             template variables (Qwen3's ``enable_thinking``).
- ``auto``:  ``chat`` when the tokenizer has a chat template (a Hugging Face checkpoint's
             own), else ``plain`` (the byte tokenizer of the built-in tiny models).

``render_chat`` renders a whole conversation (the warm start's own chat data,
``warmstart.data``) under the same rules: ``chat`` is the tokenizer's template, ``plain`` is
each user turn as a prompt (``Question: ...\\nAnswer:``, arith's ``Q: ...\\nA:``) and each
assistant turn as a completion after it (`` <answer>``); the system prompt as above.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Union

from llamarl_core.config.choices import PROMPT_TEMPLATES
from llamarl_core.data.example import Example

TEMPLATES = PROMPT_TEMPLATES


@dataclass(frozen=True)
class PromptFormat:
    template: str = "plain"               # auto | plain | chat
    system_prompt: Optional[str] = None   # None or "": no system prompt
    instruction: str = ""                 # resolved: "" = none
    chat_template_kwargs: Mapping[str, Any] = field(default_factory=dict)  # data.chat_template_kwargs

    def __post_init__(self):
        if self.template not in TEMPLATES:
            raise ValueError(f"prompt template must be one of {TEMPLATES}, got {self.template!r}")


def prompt_format(data, data_name: Optional[str] = None) -> PromptFormat:
    """The prompt settings of a `DataConfig` for the data set `data_name` (default
    `data.name`; `llamarl eval` passes `eval.data`)."""
    return PromptFormat(data.template, data.system_prompt, data.instruction_for(data_name),
                        dict(data.chat_template_kwargs))


def resolve_template(template: str, tokenizer) -> str:
    """`auto` → `chat` if the tokenizer has a chat template, else `plain`."""
    if template != "auto":
        return template
    return "chat" if getattr(tokenizer, "chat_template", None) else "plain"


def render_prompt(example: Example, template: Union[PromptFormat, str] = "plain", tokenizer=None) -> str:
    """The text the generator is conditioned on. `template`: a PromptFormat, or a template
    name (no system prompt, no instruction)."""
    fmt = template if isinstance(template, PromptFormat) else PromptFormat(template)
    question = example.prompt + (f"\n{fmt.instruction}" if fmt.instruction else "")
    kind = resolve_template(fmt.template, tokenizer)
    if kind == "plain":
        text = _plain_prompt(question, example.source)
        return f"{fmt.system_prompt}\n\n{text}" if fmt.system_prompt else text
    return _apply_chat_template(tokenizer, prompt_messages(example, fmt), True, fmt.chat_template_kwargs)


def prompt_messages(example: Example, fmt: PromptFormat) -> list[dict]:
    """The chat a prompt is rendered from (the `chat` template; an episode's opening, the
    `messages` its environment's `reset` receives): the row's own chat with the instruction on
    its last user turn (data.messages_key), else the question and instruction as the user turn;
    `data.system_prompt` first unless the chat has a system turn."""
    if example.messages:
        return _row_chat(example.messages, fmt)
    question = example.prompt + (f"\n{fmt.instruction}" if fmt.instruction else "")
    return _with_system_prompt([{"role": "user", "content": question}], fmt.system_prompt)


def _plain_prompt(question: str, source: str) -> str:
    return f"Q: {question}\nA:" if source == "arith" else f"Question: {question}\nAnswer:"


def render_chat(turns, fmt: PromptFormat, tokenizer, add_generation_prompt: bool, source: str = "generic") -> str:
    """A conversation as given (no instruction: the chat says what it asks), `data.system_prompt`
    first unless it has a system turn. `add_generation_prompt`: end in the assistant's header
    (chat), as a prompt does. `source`: the plain template's question format (as the prompts')."""
    messages = _with_system_prompt(turns, fmt.system_prompt)
    if resolve_template(fmt.template, tokenizer) == "chat":
        return _apply_chat_template(tokenizer, messages, add_generation_prompt, fmt.chat_template_kwargs)
    text = ""
    for m in messages:  # plain: after a user turn the text is a prompt; "Answer:" is its generation prompt
        if m["role"] == "system":
            text += f"{m['content']}\n\n"
        elif m["role"] == "user":
            separator = "\n\n" if text and not text.endswith("\n\n") else ""
            text += separator + _plain_prompt(m["content"], source)
        else:
            text += f" {m['content']}"
    return text


def _apply_chat_template(tokenizer, messages: list[dict], add_generation_prompt: bool,
                         template_kwargs: Mapping[str, Any]) -> str:
    """`template_kwargs`: data.chat_template_kwargs, template variables (Qwen3's enable_thinking)."""
    if tokenizer is None or not hasattr(tokenizer, "apply_chat_template"):
        raise ValueError("template 'chat' needs a tokenizer with apply_chat_template(messages) -> str")
    kwargs = dict(template_kwargs)
    if not add_generation_prompt:  # a prompt: the default, so a one-argument apply_chat_template serves it
        kwargs["add_generation_prompt"] = False
    rendered = tokenizer.apply_chat_template(messages, **kwargs)
    if not isinstance(rendered, str):
        raise TypeError(f"tokenizer.apply_chat_template must return str, got {type(rendered).__name__}")
    return rendered


def _row_chat(turns, fmt: PromptFormat) -> list[dict]:
    """A row's chat as given, the instruction on its last user turn."""
    turns = [dict(m) for m in turns]
    if fmt.instruction:
        last = max(i for i, m in enumerate(turns) if m["role"] == "user")
        turns[last]["content"] += f"\n{fmt.instruction}"
    return _with_system_prompt(turns, fmt.system_prompt)


def _with_system_prompt(turns, system_prompt: Optional[str]) -> list[dict]:
    """`data.system_prompt` as a first system turn, unless the chat has its own."""
    turns = [dict(m) for m in turns]
    if not system_prompt or any(m["role"] == "system" for m in turns):
        return turns
    return [{"role": "system", "content": system_prompt}] + turns


def render_target(example: Example) -> str:
    """Supervised target appended to the prompt: a space, then the worked solution.

    Without a solution, the bare final answer: a generic row's answer exactly as the row
    gives it (its reward is the user's, which reads the answer field, not a format we
    chose; teaching ``#### N`` there made a last-line reward score the reference 0.5), a
    math row's in ``\\boxed{}``, a GSM8K-style row's after ``####``.
    """
    if example.solution is not None:
        return " " + example.solution
    if example.source == "generic":
        return " " + example.reference
    if example.source == "math":
        return f" \\boxed{{{example.reference}}}"
    return f" #### {example.reference}"
