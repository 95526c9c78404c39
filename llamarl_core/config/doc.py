"""docs/CONFIG.md from the schema: every key with its type, default, accepted values and meaning.

The meaning is the schema's own comment on the field, read with `tokenize`, so each rule is
written once, in config/schema.py: the trailing `# ...` on its line, continued on the
comment-only lines below indented past the field (or, with no trailing one, the comment lines
right above it at its indentation). A field without one stops generation, naming file, line
and key. Accepted values come from the `_check_choice("key", self.field, CHOICES)` calls in the
class's `__post_init__`: the tuples of config/choices.py that the schema checks against. The
TRL and veRL tables are hand-written data in config/doc_mappings.py; `scripts/config_doc.py`
writes the page.
"""
from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import sys
import textwrap
import tokenize
import typing
from dataclasses import dataclass
from pathlib import Path

from llamarl_core.config.doc_mappings import SOURCES, Mapping


class UndocumentedField(ValueError):
    """A schema field with no comment saying what it means."""


@dataclass(frozen=True)
class KeyDoc:
    key: str                              # dotted, as an override writes it: resources.generator.tp
    type: str
    default: str
    meaning: str
    choices: tuple = ()                   # the closed set the schema checks, if any


@dataclass(frozen=True)
class Section:
    name: str                             # dotted prefix; "" = the top level
    about: str                            # the class docstring's first line, if it has one
    keys: tuple[KeyDoc, ...]


def _source(cls) -> tuple[str, int, str]:
    """(dedented class source, line number of its first line, file)."""
    lines, first = inspect.getsourcelines(cls)
    return textwrap.dedent("".join(lines)), first, inspect.getsourcefile(cls)


def field_comments(cls, required: set[str]) -> dict[str, str]:
    """{field name: its comment}; raises UndocumentedField for a `required` field without one."""
    src, first, path = _source(cls)
    comments: dict[int, tuple[int, str, bool]] = {}  # row -> (column, text, alone on its line)
    for tok in tokenize.generate_tokens(io.StringIO(src).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = (tok.start[1], tok.string.lstrip("#").strip(),
                                      tok.line.strip().startswith("#"))
    body = ast.parse(src).body[0].body
    out = {}
    for node in body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        name = node.target.id
        trailing = [comments[r] for r in range(node.lineno, node.end_lineno + 1)
                    if r in comments and not comments[r][2]]
        if trailing:
            text = trailing[0][1]
            row = node.end_lineno + 1
            while row in comments and comments[row][2] and comments[row][0] > node.col_offset:
                text += " " + comments[row][1]
                row += 1
        else:  # comment-only lines right above the field, at its indentation
            above, row = [], node.lineno - 1
            while row in comments and comments[row][2] and comments[row][0] == node.col_offset:
                above.insert(0, comments[row][1])
                row -= 1
            text = " ".join(above)
        if text:
            out[name] = text
        elif name in required:
            raise UndocumentedField(f"{path}:{first + node.lineno - 1}: {cls.__name__}.{name} has no "
                                    f"comment; add a trailing `# ...` saying what it means "
                                    f"(docs/CONFIG.md is generated from it)")
    return out


def field_choices(cls) -> dict[str, tuple]:
    """{field name: the tuple its `__post_init__` checks it against with `_check_choice`}."""
    src, _, _ = _source(cls)
    names = vars(sys.modules[cls.__module__])
    out = {}
    for node in ast.walk(ast.parse(src)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "_check_choice"
                and len(node.args) == 3 and isinstance(node.args[1], ast.Attribute)
                and isinstance(node.args[2], ast.Name)):
            out[node.args[1].attr] = tuple(names[node.args[2].id])
    return out


def type_name(t) -> str:
    args = typing.get_args(t)
    if typing.get_origin(t) is typing.Union and type(None) in args:
        inner = [a for a in args if a is not type(None)]
        return " or ".join(type_name(a) for a in inner) + " or null"
    if typing.get_origin(t) in (list, tuple):
        return f"list of {type_name(args[0])}" if args else "list"
    if typing.get_origin(t) is dict:
        return "mapping"
    return getattr(t, "__name__", str(t))


def yaml_text(value) -> str:
    """A default as a recipe or an override would write it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return format(value, "g")
    if isinstance(value, str):
        return value if value else '""'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {yaml_text(v)}" for k, v in value.items()) + "}"
    return str(value)


def _default(f: dataclasses.Field):
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


def sections(root, prefix: str = "") -> list[Section]:
    """Every dataclass under `root`, depth first: its leaf keys, then its nested sections."""
    hints = typing.get_type_hints(root)
    leaves = [f for f in dataclasses.fields(root) if not dataclasses.is_dataclass(hints[f.name])]
    comments, choices = field_comments(root, {f.name for f in leaves}), field_choices(root)
    keys, nested = [], []
    for f in dataclasses.fields(root):
        t, key = hints[f.name], f"{prefix}{f.name}"
        if dataclasses.is_dataclass(t):
            nested += sections(t, key + ".")
            continue
        keys.append(KeyDoc(key, type_name(t), yaml_text(_default(f)), comments[f.name],
                           choices.get(f.name, ())))
    doc = inspect.getdoc(root) if root.__doc__ and not root.__doc__.startswith(root.__name__ + "(") else ""
    own = Section(prefix.rstrip("."), (doc or "").split("\n\n")[0].replace("\n", " "), tuple(keys))
    return ([own] if keys else []) + nested


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _key_row(k: KeyDoc) -> str:
    kind = k.type + (": " + ", ".join(f"`{c}`" for c in k.choices) if k.choices else "")
    return f"| `{k.key}` | {kind} | `{k.default}` | {_cell(k.meaning)} |"


def _ours(m: Mapping) -> str:
    return "<br>".join(f"`{k}`" for k in m.ours) if m.ours else f"**{m.none}**"


def _theirs(m: Mapping) -> str:
    """`a / b (where)` -> the names as code, the remark as text."""
    names, sep, remark = m.theirs.partition(" (")
    return " / ".join(f"`{n}`" for n in names.split(" / ")) + (f" ({remark}" if sep else "")


HEADER = """# Configuration keys

<!-- generated by scripts/config_doc.py from llamarl_core/config/schema.py and
llamarl_core/config/doc_mappings.py: edit those, then run it; the tests run it with --check -->

Every key `llamarl train|eval|plan` accepts, as a `key=value` override or in a recipe
(`recipes/*.yaml`, which only overrides these defaults). The meaning is the schema's comment;
`llamarl plan --cfg job` prints a run's resolved values. Coming from TRL or veRL? The
[mapping tables](#from-trl-grpoconfig) at the end give our name for what you already use.
"""


def render(root, sources=SOURCES) -> str:
    out = [HEADER.rstrip("\n")]
    for s in sections(root):
        out += [f"\n## {f'`{s.name}`' if s.name else 'Top level'}\n"]
        if s.about:
            out += [s.about + "\n"]
        out += ["| key | type | default | meaning |", "|---|---|---|---|"] + [_key_row(k) for k in s.keys]
    for source in sources:
        out += [f"\n## {source.title}\n", source.intro + "\n",
                f"| {source.column} | ours | notes |", "|---|---|---|"]
        out += [f"| {_theirs(m)} | {_ours(m)} | {_cell(m.note)} |" for m in source.rows]
    return "\n".join(out) + "\n"


def page_path(repo_root: Path) -> Path:
    return repo_root / "docs" / "CONFIG.md"
