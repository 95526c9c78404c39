"""Your own reward: ``data.reward=package.module:function`` or ``path/to/file.py:function``.

    def score(completion: str, example: dict) -> float        # example: the row as loaded,
        ...                                                    # plus id, prompt, reference
    score.batch = True  (optional) → score(completions: list[str], examples: list[dict]) -> list[float]

Security rule: a user's reward code is imported only in reward worker processes
(``worker.py``, started by the reward role, or by a trainer for its held-out eval) and, before
launch, in one short-lived checking subprocess (``check_importable``) that is killed at its
timeout. Never in the controller, the CLI or a role's own process: importing a module runs it.

Paths: a ``.py`` path is relative to the directory llamarl runs in; its folder goes first on
``sys.path`` so the file may import its neighbours. A module name is imported with the
working directory on ``sys.path`` (as ``python -m`` does).
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys

CHECK_TIMEOUT_S = 60.0  # importing a user's module (which may import torch) before launch
OK_MARK = "llamarl: reward imports"


def is_custom(name: str) -> bool:
    return ":" in name


def load_module(target: str, module_name: str = "llamarl_user_reward"):
    """Import ``target`` (``path/to/file.py`` or ``package.module``) and return the module; a
    file is registered in ``sys.modules`` as ``module_name``. Call only in a worker process."""
    if target.endswith(".py"):
        path = os.path.abspath(target)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no file {path}")
        spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, os.path.dirname(path))
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    return importlib.import_module(target)


def load_function(value: str):
    """Import ``value``'s module and return its function. Call only in a worker process."""
    target, _, attr = value.rpartition(":")
    module = load_module(target)
    if not hasattr(module, attr):
        raise AttributeError(f"{target} has no attribute {attr!r}")
    fn = getattr(module, attr)
    if not callable(fn):
        raise TypeError(f"{target}:{attr} is a {type(fn).__name__}, not a function")
    return fn


def check_importable(value: str, timeout_s: float = CHECK_TIMEOUT_S) -> str | None:
    """None when ``value`` imports and names a callable, else why not (one line). The import
    runs in a child process (``python -m llamarl_core.rewards.custom_check``), killed after
    ``timeout_s``, so nothing of the user's module runs in this process."""
    try:
        done = subprocess.run([sys.executable, "-m", "llamarl_core.rewards.custom_check", value],
                              capture_output=True, text=True, timeout=timeout_s,
                              stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    except subprocess.TimeoutExpired:
        return f"importing it did not finish within {timeout_s:.0f} s"
    if done.returncode == 0 and OK_MARK in done.stdout:
        return None
    lines = [line for line in (done.stderr or done.stdout).splitlines() if line.strip()]
    return lines[-1] if lines else f"the check exited with code {done.returncode}"
