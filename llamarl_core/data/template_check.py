"""A checkpoint's chat template rendered before launch in a child process, under a time limit.

A chat template is Jinja code shipped with the checkpoint: one with a huge loop hung
`llamarl train` before launch, and one that raised printed a 45-line traceback. A thread
cannot stop a Jinja loop, so the child (`python -m llamarl_core.data.template_check DIR`)
loads the tokenizer, then renders each prompt under SIGALRM (`RENDER_LIMIT_S` per prompt);
the parent also kills it after a generous wall limit. Either way the result is one line naming
the template's file. Only rows travel to the child (JSON on stdin), and only the text
`OK`/`TIMEOUT`/`ERROR <reason>` comes back.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

RENDER_LIMIT_S = 5          # per prompt: real templates render in well under a millisecond
LOAD_LIMIT_S = 120          # the child's start and tokenizer load, on a slow shared machine
TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json", "tokenizer_config.json")


def template_file(directory) -> Path:
    """The file the checkpoint's chat template is read from (transformers' order)."""
    for name in TEMPLATE_FILES:
        if (Path(directory) / name).is_file():
            return Path(directory) / name
    return Path(directory) / "tokenizer_config.json"


def check_template(directory, fmt, examples) -> str | None:
    """None when every example renders under the limit, else one line naming the file."""
    rows = [{"id": e.id, "prompt": e.prompt, "reference": e.reference, "source": e.source,
             "messages": list(e.messages) if e.messages else None, "where": e.where} for e in examples]
    payload = json.dumps({"format": [fmt.template, fmt.system_prompt, fmt.instruction,
                                     dict(fmt.chat_template_kwargs)], "rows": rows})
    file = template_file(directory)
    wall_s = LOAD_LIMIT_S + RENDER_LIMIT_S * min(len(rows), 10) + 0.01 * len(rows)
    try:
        done = subprocess.run([sys.executable, "-m", "llamarl_core.data.template_check", str(directory)],
                              input=payload, capture_output=True, text=True, timeout=wall_s,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
    except subprocess.TimeoutExpired:  # subprocess.run kills the child (it starts none of its own)
        return f"{file}: the chat template did not finish rendering {len(rows)} prompt(s) within {wall_s:.0f} s"
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    last = lines[-1] if lines else ""
    if done.returncode == 0 and last == "OK":
        return None
    if last.startswith("TIMEOUT "):
        return (f"{file}: the chat template did not render one prompt within {RENDER_LIMIT_S} s "
                f"({last[len('TIMEOUT '):]}; a loop in the template?)")
    if last.startswith("ERROR "):
        return f"{file}: the chat template failed: {last[len('ERROR '):]}"
    err = [line for line in done.stderr.splitlines() if line.strip()]
    return f"{file}: rendering the chat template failed (exit {done.returncode}: {err[-1] if err else 'no output'})"


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def _child(directory: str) -> int:
    from llamarl_core.data import Example, PromptFormat, render_prompt
    from llamarl_core.models.tokenizer import load_tokenizer

    payload = json.loads(sys.stdin.read())
    fmt = PromptFormat(*payload["format"])
    tokenizer = load_tokenizer(directory)
    signal.signal(signal.SIGALRM, _alarm)
    for row in payload["rows"]:
        messages = tuple(row["messages"]) if row["messages"] else None
        example = Example(row["id"], row["prompt"], row["reference"], None, row["source"],
                          messages=messages, where=row["where"])
        signal.setitimer(signal.ITIMER_REAL, RENDER_LIMIT_S)
        try:
            render_prompt(example, fmt, tokenizer)
        except _Timeout:
            print(f"TIMEOUT at {row['where'] or row['id']}", flush=True)
            return 3
        except Exception as err:  # the template's own error, in one line
            text = " ".join(str(err).split())[:300]
            print(f"ERROR {type(err).__name__}: {text} (at {row['where'] or row['id']})", flush=True)
            return 4
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    print("OK", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1]))
