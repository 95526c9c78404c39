"""Token-in-token-out: the tokens an episode appends around the model's own, from the chat template.

An episode's sequence is built by appending, never by re-rendering: the model's sampled tokens go
in exactly as sampled (decoding and re-encoding them can change the ids: BPE merges differ, a
`<tool_call>` typed as text is not the special token), then the environment's reply is rendered
by the chat template *as a delta* and appended as environment tokens (masked out of the loss).

Chat templates are not append-only at the turn boundary: the model stops at its end-of-turn
token, but the template writes a separator after it (ChatML/Qwen: `<|im_end|>\\n`). Dropping the
`\\n` (veRL before its PR #6921, at every assistant→tool boundary) trains the model on sequences
its own template never produces. So the delta is derived from the tokenizer, not hard-coded per
family, by diffing two renders of a dummy conversation whose assistant content is a marker:

    A = render([user U, assistant M], add_generation_prompt=False)
          -> ...U<|im_end|>\\n<|im_start|>assistant\\nM<|im_end|>\\n
    B = render([user U, assistant M] + messages, add_generation_prompt=True)
          -> ...U<|im_end|>\\n<|im_start|>assistant\\nM<|im_end|>\\n<|im_start|>tool\\n...<|im_start|>assistant\\n

Everything B writes after M is the delta: the end-of-turn text, the separator, the messages, the
next generation prompt. The end-of-turn text is what A and B both write right after M, trailing
whitespace cut (the separator belongs to the environment, whose next message it introduces);
when the sampled tokens already end with its ids it is not appended again. Both renders must
agree up to U (a default system message the template injects, Qwen2.5's, or the tools it writes
there, appear in both); between U and M they may differ (Qwen3 writes an empty think block into
a final assistant turn only), which is never used. The delta is rendered after a dummy turn, not
the real history: a template whose rendering of later messages depends on earlier ones beyond
that is outside what an append-only sequence can follow anyway.
"""
from __future__ import annotations

import os
from typing import Optional

from llamarl_core.envs.parsers import add_tools_prompt

_USER = "[[llamarl:user]]"        # dummy contents: text no template rewrites (nothing to trim)
_MARKER = "[[llamarl:assistant]]"


class ChatDelta:
    """The opening prompt and the per-turn deltas of one chat template (a `HFTokenizer`, or a
    `ByteTokenizer` with a template or its plain `User: ...\\n\\nAssistant:` format).

    `template_kwargs`: template variables (data.chat_template_kwargs, e.g. Qwen3's
    enable_thinking), passed to every render. `tools`: JSON schemas passed as `tools=`; when the
    template ignores them (rendering with and without them is identical, e.g. SmolLM2's), the
    system message describes them instead in `tool_parser`'s format (parsers.add_tools_prompt)."""

    def __init__(self, tokenizer, template_kwargs: Optional[dict] = None, tools: Optional[list[dict]] = None,
                 tool_parser: str = "hermes"):
        self.tokenizer = tokenizer
        self.kwargs = dict(template_kwargs or {})
        self.tools_in_system: Optional[tuple[list[dict], str]] = None  # (schemas, parser) when the template ignores tools
        if tools:
            probe = [{"role": "user", "content": _USER}]
            if self._render(probe, True) != self._render(probe, True, tools=tools):
                self.kwargs["tools"] = tools
            else:
                self.tools_in_system = (tools, tool_parser)
        head = self._head()
        rendered = self._render(head, False)
        self._check(rendered, "a final assistant turn")
        self._prefix = rendered[:rendered.index(_USER)]
        final = rendered[rendered.index(_MARKER) + len(_MARKER):]
        probe = self._after_marker([{"role": "user", "content": "y"}])
        self.eot_text = os.path.commonprefix([final, probe]).rstrip()
        # The end-of-turn token id(s) the template writes after an assistant message; empty when
        # it writes none (the plain format: the caller's stop ids tell a clean end then).
        self.eot_ids: list[int] = tokenizer.encode(self.eot_text) if self.eot_text else []

    def opening(self, messages: list[dict]) -> list[int]:
        """The episode's prompt ids: `encode(render(messages, generation prompt))`, as a
        single-turn prompt is encoded (data/templates.py), with the tools in it when given."""
        return self.tokenizer.encode(self._render(self._with_tools_prompt(messages), True))

    def after_turn(self, sampled: list[int], messages: list[dict]) -> list[int]:
        """The environment tokens to append after the turn whose tokens were `sampled`: the
        template's end-of-turn (unless `sampled` ends with `eot_ids`), its separator,
        `messages`, then the next generation prompt.

        A turn that ends without the end-of-turn ids (cut by length, or stopped on another stop
        id) gets the end-of-turn text appended as environment tokens: the sequence stays one
        the template produces (what the next turn is conditioned on is a closed turn), and the
        tokens the model did not sample are masked, never trained on."""
        delta = self._after_marker(messages)
        if not delta.startswith(self.eot_text):
            raise ValueError(f"chat template: after an assistant turn followed by messages it writes "
                             f"{delta[:80]!r}, not the end-of-turn {self.eot_text!r} it writes after a "
                             f"final assistant turn; cannot append the environment's messages as a delta")
        ended = bool(self.eot_ids) and list(sampled[-len(self.eot_ids):]) == self.eot_ids
        return self.tokenizer.encode(delta[len(self.eot_text):] if ended else delta)

    def _with_tools_prompt(self, messages: list[dict]) -> list[dict]:
        if self.tools_in_system is None:
            return [dict(m) for m in messages]
        return add_tools_prompt(messages, *self.tools_in_system)

    def _head(self) -> list[dict]:
        """The dummy conversation: a user turn, an assistant turn whose content is the marker."""
        return self._with_tools_prompt([{"role": "user", "content": _USER}]) + [
            {"role": "assistant", "content": _MARKER}]

    def _after_marker(self, messages: list[dict]) -> str:
        """What the template writes after the dummy assistant turn's content, `messages` and
        the generation prompt following it."""
        text = self._render(self._head() + list(messages), True)
        self._check(text, "an assistant turn followed by messages")
        if text[:text.index(_USER)] != self._prefix:
            raise ValueError("chat template: the text before the first user message changes when messages "
                             "follow the assistant turn (a system message or tools written only sometimes); "
                             "the opening prompt would not be a prefix of the episode")
        return text[text.index(_MARKER) + len(_MARKER):]

    @staticmethod
    def _check(rendered: str, what: str) -> None:
        if rendered.count(_USER) != 1 or rendered.count(_MARKER) != 1:
            raise ValueError(f"chat template: rendering {what} does not write each message's content once "
                             f"as given; token-in-token-out needs the content verbatim")

    def _render(self, messages: list[dict], add_generation_prompt: bool, **extra) -> str:
        rendered = self.tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt,
                                                      **{**self.kwargs, **extra})
        if not isinstance(rendered, str):
            raise TypeError(f"tokenizer.apply_chat_template must return str, got {type(rendered).__name__}")
        return rendered


__all__ = ["ChatDelta"]
