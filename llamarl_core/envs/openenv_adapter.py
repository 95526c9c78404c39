"""An OpenEnv environment (Meta's `openenv-core`) run in-process as a llamarl environment.

OpenEnv's server-side `Environment` (openenv.core.env_server.interfaces) speaks typed pydantic
objects: `reset() -> Observation`, `step(Action) -> Observation`, with `obs.reward` and `obs.done`
on every observation. Ours speaks chat messages (envs/protocol.py). The adapter translates, with
no server, no HTTP and no Docker: the environment object lives in the environment worker that
made it, like any other per-episode object.

The rules, one place each:
- **Action from text** (`action_field`): the Action class is the one named in `action_cls`
  (class attribute), else the annotation of `step`'s first parameter, else the first type argument
  of `Environment[Act, Obs, State]`. Its text field is its only `str` field (`metadata` aside),
  else the field named `message`, `text` or `action`; an Action with neither is refused with a
  ValueError naming the class and its fields. The assistant's whole turn goes into that field.
- **Observation as text** (`observation_text`): its fields other than `done`, `reward`, `metadata`;
  a single `str` field is the text itself, anything else is those fields as compact JSON.
- **Opening**: `reset()` is called without arguments (OpenEnv's `seed`/`episode_id` are optional and
  its template environment takes none); the reset observation's text is appended to the last
  `user` message of `example["messages"]` after a blank line (a new `user` message when the
  opening does not end with one; nothing when the text is empty).
- **Step**: the observation's text comes back as one `user` message, `obs.reward` as the step's
  reward (None stays None, so `data.reward` scores an episode that never returned one; True/False
  become 1.0/0.0), `obs.done` as done.

`wrap_if_openenv(obj)` is what the environment worker calls on each per-episode object: OpenEnv
environments come back adapted, anything else unchanged. It tests against openenv's class only
when the user's file has already imported openenv, so llamarl never imports it (or the gradio and
fastapi it pulls in) on its own.
"""
from __future__ import annotations

import inspect
import json
import sys
import typing
from typing import Optional

TEXT_FIELD_NAMES = ("message", "text", "action")  # an Action's text field when it has several str fields
_OBS_BOOKKEEPING = {"done", "reward", "metadata"}  # Observation base fields; not shown to the model
_ENV_MODULE = "openenv.core.env_server.interfaces"


def _is_str_field(annotation) -> bool:
    """`str` or `Optional[str]`."""
    if annotation is str:
        return True
    args = typing.get_args(annotation)
    return bool(args) and str in args and all(a in (str, type(None)) for a in args)


def action_class(env) -> type:
    """The Action class `env.step` takes (see the module docstring for the order), else TypeError."""
    explicit = getattr(env, "action_cls", None)
    if isinstance(explicit, type):
        return explicit
    params = list(inspect.signature(env.step).parameters.values())
    if params:
        try:
            hint = typing.get_type_hints(type(env).step).get(params[0].name)
        except Exception:  # an annotation that names something unimportable: try the next rule
            hint = None
        if isinstance(hint, type) and hasattr(hint, "model_fields"):
            return hint
    for base in getattr(type(env), "__orig_bases__", ()):
        args = typing.get_args(base)
        if args and isinstance(args[0], type) and hasattr(args[0], "model_fields"):
            return args[0]
    raise TypeError(f"{type(env).__name__}: cannot tell which Action class its step() takes; annotate "
                    f"step(self, action: MyAction) or set the class attribute action_cls = MyAction")


def action_field(action_cls: type) -> str:
    """The name of the field of `action_cls` that receives the assistant's text, else ValueError."""
    fields = {k: f for k, f in action_cls.model_fields.items() if k != "metadata"}
    str_fields = [k for k, f in fields.items() if _is_str_field(f.annotation)]
    if len(str_fields) == 1:
        return str_fields[0]
    for name in TEXT_FIELD_NAMES:
        if name in fields:
            return name
    raise ValueError(f"OpenEnv action {action_cls.__name__} has no field for the model's text: it needs a "
                     f"single str field or one named {'/'.join(TEXT_FIELD_NAMES)}; its fields are "
                     f"{sorted(fields) or 'none'}")


def observation_text(obs) -> str:
    """What the model reads of an observation (see the module docstring)."""
    shown = {k: v for k, v in obs.model_dump(mode="json").items() if k not in _OBS_BOOKKEEPING}
    if len(shown) == 1:
        (value,) = shown.values()
        if isinstance(value, str):
            return value
    return json.dumps(shown, separators=(",", ":"), sort_keys=True) if shown else ""


def _reward(value) -> Optional[float]:
    return None if value is None else float(value)


class OpenEnvAdapter:
    """One OpenEnv environment object as a llamarl environment (reset(example), step(text))."""

    def __init__(self, env):
        self.env = env
        self.action_cls = action_class(env)
        self.text_field = action_field(self.action_cls)  # refused here, before the first episode runs

    def reset(self, example: dict) -> list[dict]:
        messages = [dict(m) for m in example.get("messages") or []]
        text = observation_text(self.env.reset())
        if text and messages and messages[-1].get("role") == "user":
            messages[-1]["content"] = f"{messages[-1].get('content', '')}\n\n{text}"
        elif text:
            messages.append({"role": "user", "content": text})
        return messages

    def step(self, assistant_text: str) -> tuple[list[dict], Optional[float], bool]:
        obs = self.env.step(self.action_cls(**{self.text_field: assistant_text}))
        return [{"role": "user", "content": observation_text(obs)}], _reward(obs.reward), bool(obs.done)

    def close(self) -> None:
        """OpenEnv's own clean-up hook (its base class's `close()` does nothing)."""
        close = getattr(self.env, "close", None)
        if callable(close):
            close()


def is_openenv(obj) -> bool:
    """Whether `obj` is an instance of openenv's Environment (False when openenv was never imported)."""
    module = sys.modules.get(_ENV_MODULE)
    base = getattr(module, "Environment", None)
    return isinstance(base, type) and isinstance(obj, base)


def wrap_if_openenv(obj):
    """`obj` adapted when it is an OpenEnv environment, else `obj` itself (already a llamarl environment)."""
    return OpenEnvAdapter(obj) if is_openenv(obj) else obj
