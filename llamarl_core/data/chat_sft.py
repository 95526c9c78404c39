"""The warm start on the user's own chat data (`warmstart.data`): conversations read, rendered
with the run's template and tokenizer, and the tokens the loss trains on marked: every
assistant turn, its end-of-turn token included (TRL's `assistant_only_loss`).

A row is ``{"messages": [{"role": "system"|"user"|"assistant"|"tool", "content": str}, ...]}`` with
at least one assistant turn (TRL's and OpenAI's conversational format); other fields are
ignored. A JSONL file or any table `loaders.py` reads (`file_rows`); a bad row is
``DataFormatError("path:line: reason")``, or skipped and counted with ``on_error="skip"``.

Why the mask comes from rendering prefixes and not from `{% generation %}` markers: few
checkpoints' templates have them. Assistant turn i starts where the chat before it, rendered
with the generation prompt, stops agreeing with the whole chat's tokens, and ends where the
chat through it ends; token ids are compared. A template that renders earlier turns
differently once later ones follow (Qwen3 drops their reasoning) cannot give one sequence
whose spans are right: such a chat becomes one sequence per assistant turn (the chat through
that turn, that turn trained), each turn seen with the history the model will see.

A turn's span ends at its last stop token (`tokenizer.eos_ids`, the token the generator stops
on); template text after it (`\\n`) is never generated, so it is not trained. A turn without
one (the plain template) gets the EOS appended, as every RL completion ends in one.
"""
from __future__ import annotations

from dataclasses import dataclass

from llamarl_core.data.example import DataFormatError, ExampleList
from llamarl_core.data.loaders import file_rows, parse_rows
from llamarl_core.data.templates import PromptFormat, render_chat

MESSAGES_KEY = "messages"
ROLES = ("system", "user", "assistant", "tool")  # tool: a tool's answer (an agent's demonstration), never trained


@dataclass(frozen=True)
class Conversation:
    messages: tuple  # ({"role", "content"}, ...), as the row gave them
    where: str       # "file:line" (or "file:row N")


def load_conversations(path: str, on_error: str = "raise") -> ExampleList:
    """Every conversation of `path` (a list with the file's ``.report``); a file with none left
    is an error."""
    out = parse_rows(path, file_rows(path), on_error,
                     lambda row, where, _: Conversation(_messages(row), f"{path}:{where}"))
    if not out:
        skipped = f" ({out.report.num_skipped} skipped)" if out.report.num_skipped else ""
        raise DataFormatError(f"{path}: no conversations{skipped}")
    return out


def _messages(row) -> tuple:
    if not isinstance(row, dict):
        raise DataFormatError(f"expected a JSON object, got {type(row).__name__}")
    if MESSAGES_KEY not in row:
        raise DataFormatError(f"missing field {MESSAGES_KEY!r} (a list of {{\"role\", \"content\"}} turns); "
                              f"the row has keys {sorted(row)[:12]}")
    turns = row[MESSAGES_KEY]
    if not isinstance(turns, list) or not turns:
        raise DataFormatError(f"field {MESSAGES_KEY!r} must be a non-empty list of turns")
    for n, m in enumerate(turns, start=1):
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            raise DataFormatError(f"turn {n} must be {{\"role\": str, \"content\": str}}, got {m!r:.60}")
        if m["role"] not in ROLES:
            raise DataFormatError(f"turn {n} has unknown role {m['role']!r} (expected one of {', '.join(ROLES)})")
    if not any(m["role"] == "assistant" for m in turns):
        raise DataFormatError("no assistant turn: nothing to train on")
    return tuple({"role": m["role"], "content": m["content"]} for m in turns)


class _NotAPrefix(Exception):
    """The template renders the chat through a turn differently once later turns follow."""


def assistant_sequences(messages, fmt: PromptFormat, tokenizer,
                        source: str = "generic") -> list[tuple[list[int], list[int]]]:
    """The chat as one (tokens, target_mask); or, when its template renders an earlier turn
    differently once later turns follow (Qwen3 drops their reasoning), one per assistant turn:
    the chat through that turn, only that turn trained, its history as the model will see it."""
    try:
        return [assistant_tokens(messages, fmt, tokenizer, source)]
    except _NotAPrefix:
        return [assistant_tokens(messages[:i + 1], fmt, tokenizer, source, last_only=True)
                for i, m in enumerate(messages) if m["role"] == "assistant"]


def assistant_tokens(messages, fmt: PromptFormat, tokenizer, source: str = "generic",
                     last_only: bool = False) -> tuple[list[int], list[int]]:
    """(tokens, target_mask): the whole chat's token ids, and 1 where a token is trained: every
    assistant turn (`last_only`: the last one). `source`: the plain template's question format
    (`render_chat`). Raises _NotAPrefix when the chat cannot be one sequence."""
    def encode(turns, generation_prompt: bool) -> list[int]:
        return tokenizer.encode(render_chat(turns, fmt, tokenizer, generation_prompt, source))

    full = encode(messages, False)
    stops = set(tokenizer.eos_ids)
    tokens: list[int] = []
    mask: list[int] = []
    cursor = 0
    turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    for i in turns[-1:] if last_only else turns:
        through = encode(messages[:i + 1], False)
        if full[:len(through)] != through:
            raise _NotAPrefix(i)
        start = max(cursor, _common_prefix(encode(messages[:i], True), full))
        span = full[start:len(through)]
        last_stop = max((k for k, t in enumerate(span) if t in stops), default=None)
        tokens += full[cursor:start]
        mask += [0] * (start - cursor)
        if last_stop is None:  # no end-of-turn token in the template: the EOS RL completions end in
            span = span + [tokenizer.eos_id]
            cursor = len(through)
        else:
            span = span[:last_stop + 1]
            cursor = start + last_stop + 1
        tokens += span
        mask += [1] * len(span)
    tokens += full[cursor:]
    mask += [0] * (len(full) - cursor)
    return tokens, mask


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def chat_sequences(conversations: list[Conversation], fmt: PromptFormat, tokenizer, source: str = "generic"
                   ) -> tuple[list[tuple[list[int], list[int]]], list[str]]:
    """((tokens, target_mask) to train on, the row each came from): one per conversation, or
    one per assistant turn of a chat its template cannot render as one (`assistant_sequences`)."""
    seqs, wheres = [], []
    for c in conversations:
        for seq in assistant_sequences(c.messages, fmt, tokenizer, source):
            seqs.append(seq)
            wheres.append(c.where)
    return seqs, wheres
