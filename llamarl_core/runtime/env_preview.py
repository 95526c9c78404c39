"""`preview_openings`: an environment's episode openings exactly as the model sees them (`llamarl data`).

The generator's own path, with no model: the environment's workers (envs/pool.py: the user's
class is imported only there, never in this process) `reset` each example as the generator
resets it (`episode_example`), and the chat delta (envs/chat.py) turns the messages it returns
into the opening ids the engine prefills, the tools written where the template puts them (its
own `tools=`, else the system message in `env.tool_parser`'s format). The text shown is the
template's render of those messages; its `encode` is the ids counted.

What is trained, per token: the opening is context (never trained); in an episode every token
the model sampled is trained (loss mask 1) and every token the environment appended (its
messages, the separator, the next generation prompt; envs/chat.py) is masked (0), shown as
`⟦env: ...⟧` (`MASK_LEGEND`).
"""
from __future__ import annotations

import time

from llamarl_core.data import PromptFormat
from llamarl_core.envs.parsers import add_tools_prompt
from llamarl_core.envs.runner import open_episodes
from llamarl_core.eval.episodes import episode_example

MASK_LEGEND = ("opening: context, never trained · model turns: trained (loss mask 1) · "
               "⟦env: ...⟧: the environment's tokens, masked out (loss mask 0)")


def preview_openings(env, tokenizer, fmt: PromptFormat, examples, timeout_s: float = 120.0) -> tuple[list[dict], dict]:
    """(one row per example: `messages` from its reset, `opening` (text), `opening_ids`, or
    `error` when its reset failed; facts: `tools` (their names), `tools_in`: "template" |
    "system message" | None)."""
    pool, delta = open_episodes(env, tokenizer, fmt.chat_template_kwargs)
    try:
        for i, ex in enumerate(examples):
            pool.reset(i, episode_example(ex, fmt))
        replies, deadline = {}, time.monotonic() + timeout_s
        while len(replies) < len(examples) and time.monotonic() < deadline:
            for reply in pool.poll(0.05):
                replies[reply.episode] = reply
        tools = pool.tools
    finally:
        pool.close()
    rows = []
    for i in range(len(examples)):
        reply = replies.get(i)
        if reply is None or reply.failed:
            rows.append({"error": reply.error if reply is not None else f"no reset reply in {timeout_s:g}s"})
            continue
        messages = reply.messages
        shown = add_tools_prompt(messages, *delta.tools_in_system) if delta.tools_in_system else messages
        text = tokenizer.apply_chat_template(shown, add_generation_prompt=True, **delta.kwargs)
        rows.append({"messages": messages, "opening": text, "opening_ids": delta.opening(messages)})
    where = None if not tools else ("system message" if delta.tools_in_system else "template")
    return rows, {"tools": [t.get("function", t).get("name") for t in tools], "tools_in": where}


__all__ = ["MASK_LEGEND", "preview_openings"]
