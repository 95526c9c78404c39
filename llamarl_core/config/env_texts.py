"""`${oc.env:VAR}` fields: the run uses the resolved value, files keep the text.

A token in the environment must never land on disk: plan.json and config.yaml keep the
interpolation as written, and each worker rebuilding the config from plan.json with OmegaConf
resolves it from its own (inherited) environment.
"""
from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

WRITTEN_AS = "_llamarl_env_texts"


def remember(obj, texts: dict, resolved: DictConfig) -> None:
    """Keep on the bound config {dotted key: (text, value resolved now)}: a field the run
    changes later (run.resume=auto → a path) is written as changed, not as its text."""
    obj.__dict__[WRITTEN_AS] = {k: (text, OmegaConf.select(resolved, k)) for k, text in texts.items()}


def env_texts(cfg) -> dict:
    """{dotted key: (`${oc.env:...}` text, resolved value)} for the fields load_config resolved
    from the environment."""
    return dict(getattr(cfg, "__dict__", {}).get(WRITTEN_AS, {}))


def env_interpolations(node, prefix: str = "") -> dict:
    """{dotted key: text} of every string holding `${oc.env:...}` in an unresolved container."""
    if isinstance(node, dict):
        found = {}
        for k, v in node.items():
            found.update(env_interpolations(v, f"{prefix}{k}."))
        return found
    if isinstance(node, list):
        found = {}
        for i, v in enumerate(node):
            found.update(env_interpolations(v, f"{prefix}{i}."))
        return found
    if isinstance(node, str) and "${oc.env:" in node:
        return {prefix[:-1]: node}
    return {}
