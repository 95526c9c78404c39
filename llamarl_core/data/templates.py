"""How a model sees an example (``render_prompt``) and what it should write (``render_target``).

The completion is whatever the model writes after the rendered prompt, and the verifier
reads the completion. ``render_target`` is the supervised warm-start target, built from
the same solution format the verifier reads (``... #### N`` or ``\\boxed{}``), so SFT
and reward agree by construction: ``get_reward(src)(render_target(ex), ex.reference)``
is 1.0 for every example that has a solution.

Templates:
- ``plain``: arith -> ``Q: 23+45\\nA:`` (bytes are tokens: keep it short);
             others -> ``Question: ...\\nAnswer:``.
- ``chat``:  ``tokenizer.apply_chat_template([{"role": "user", "content": ...}])``, with a
             one-line instruction naming the answer format for gsm8k and math.
"""
from __future__ import annotations

from llamarl_core.data.example import Example

TEMPLATES = ("plain", "chat")
_CHAT_INSTRUCTIONS = {
    "gsm8k": "\nGive the final answer on its own line as '#### <number>'.",
    "math": "\nPut the final answer in \\boxed{}.",
}


def render_prompt(example: Example, template: str = "plain", tokenizer=None) -> str:
    """The text the generator is conditioned on."""
    if template == "plain":
        if example.source == "arith":
            return f"Q: {example.prompt}\nA:"
        return f"Question: {example.prompt}\nAnswer:"
    if template == "chat":
        if tokenizer is None or not hasattr(tokenizer, "apply_chat_template"):
            raise ValueError(
                "template 'chat' needs a tokenizer with apply_chat_template(messages) -> str"
            )
        content = example.prompt + _CHAT_INSTRUCTIONS.get(example.source, "")
        messages = ([dict(m) for m in example.messages] if example.messages  # data.messages_key
                    else [{"role": "user", "content": content}])
        rendered = tokenizer.apply_chat_template(messages)
        if not isinstance(rendered, str):
            raise TypeError(
                f"tokenizer.apply_chat_template must return str, got {type(rendered).__name__}"
            )
        return rendered
    raise ValueError(f"prompt template must be one of {TEMPLATES}, got {template!r}")


def render_target(example: Example) -> str:
    """Supervised target appended to the prompt: a space, then the worked solution.

    Without a solution, the bare final answer in the verifier's format.
    """
    if example.solution is not None:
        return " " + example.solution
    if example.source == "math":
        return f" \\boxed{{{example.reference}}}"
    return f" #### {example.reference}"
