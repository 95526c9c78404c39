"""Reading a recipe's YAML safely: aliases refused before any loader runs, errors as one line."""
from __future__ import annotations

from pathlib import Path

import yaml

from llamarl_core.config.errors import ConfigError


def refuse_aliases(path: Path, seen: set | None = None) -> None:
    """Refuse YAML anchors and aliases in the recipe and the files its defaults list pulls in.

    OmegaConf copies every alias when it builds a node, so a 'billion laughs' file (ten
    aliases of ten aliases...) would hang every verb; recipes never need them. Scanning tokens
    is linear in the file's size and expands nothing, so this runs before any loader does.
    """
    seen = set() if seen is None else seen
    if path in seen or not path.is_file():
        return
    seen.add(path)
    try:
        with open(path, encoding="utf-8") as f:
            for token in yaml.scan(f):
                if isinstance(token, (yaml.AliasToken, yaml.AnchorToken)):
                    mark = token.start_mark
                    raise ConfigError(
                        f"recipe {path}, line {mark.line + 1}, column {mark.column + 1}: YAML "
                        f"{'alias' if isinstance(token, yaml.AliasToken) else 'anchor'} "
                        f"'{token.value}' refused (anchors and aliases are not allowed in "
                        "recipes; write the values out)")
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except yaml.YAMLError as e:
        raise ConfigError(yaml_message(e, path)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read recipe {path}: {e}") from None
    defaults = doc.get("defaults") if isinstance(doc, dict) else None
    for entry in defaults if isinstance(defaults, list) else []:
        names = [entry] if isinstance(entry, str) else (
            [f"{k}/{v}" for k, v in entry.items()] if isinstance(entry, dict) else [])
        for name in names:
            refuse_aliases(path.parent / f"{str(name).lstrip('/')}.yaml", seen)


def yaml_message(e: yaml.YAMLError, path: Path) -> str:
    """'recipe FILE, line L, column C: problem' (YAML marks count from 0)."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    if mark is None:
        return f"cannot parse recipe {path}: {problem}"
    where = mark.name if mark.name and not mark.name.startswith("<") else str(path)
    context, start = getattr(e, "context", None), getattr(e, "context_mark", None)
    if context and start is not None and start is not mark:
        context += f" that starts at line {start.line + 1}, column {start.column + 1}"
    return (f"cannot parse recipe {where}, line {mark.line + 1}, column {mark.column + 1}: {problem}"
            + (f" ({context})" if context else ""))
