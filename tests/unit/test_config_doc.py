"""docs/CONFIG.md is generated from the schema (scripts/config_doc.py) and covers every key; the
TRL/veRL tables name only keys and values the schema accepts."""
from __future__ import annotations

import dataclasses
import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf

from llamarl_core.config.doc import UndocumentedField, render, sections
from llamarl_core.config.doc_mappings import SOURCES
from llamarl_core.config.schema import LlamaRLConfig

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "CONFIG.md"


def config_doc_script():
    spec = importlib.util.spec_from_file_location("config_doc", ROOT / "scripts" / "config_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def leaf_keys(node: DictConfig, prefix: str = "") -> set[str]:
    """Every leaf key of the structured schema, walked by OmegaConf (not by the generator)."""
    out = set()
    for key in node.keys():
        if dataclasses.is_dataclass(OmegaConf.get_type(node, key)):  # a section; a dict-valued key is a leaf
            out |= leaf_keys(node[key], f"{prefix}{key}.")
        else:
            out.add(f"{prefix}{key}")
    return out


SCHEMA_KEYS = leaf_keys(OmegaConf.structured(LlamaRLConfig))


def load_module(tmp_path: Path, source: str):
    path = tmp_path / "tiny_schema.py"
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location("tiny_schema", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["tiny_schema"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_page_is_what_the_generator_writes():
    assert config_doc_script().main(["--check"]) == 0, "run: python scripts/config_doc.py"


def test_every_schema_key_is_a_row_of_the_page():
    rows = {line.split("`")[1] for line in PAGE.read_text().splitlines() if line.startswith("| `")}
    assert len(SCHEMA_KEYS) > 100
    assert sorted(SCHEMA_KEYS - rows) == []


def test_a_schema_key_missing_from_the_page_fails_the_check(tmp_path):
    (tmp_path / "docs").mkdir()
    text = PAGE.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `algorithm.kl_coef` |"))
    (tmp_path / "docs" / "CONFIG.md").write_text(text.replace(row + "\n", ""))
    assert config_doc_script().main(["--check"], root=tmp_path) == 1


def test_every_key_of_ours_in_the_mapping_tables_is_in_the_schema():
    words = [(source.column, m.theirs, word) for source in SOURCES for m in source.rows for word in m.ours]
    assert len(words) > 80
    missing = sorted(f"{word} (for {col} {theirs})" for col, theirs, word in words
                     if word.split("=", 1)[0] not in SCHEMA_KEYS)
    assert missing == [], f"mapped to keys the schema lacks: {missing}"


def test_every_value_of_ours_in_the_mapping_tables_is_accepted_by_the_schema():
    for source in SOURCES:
        for m in source.rows:
            for word in (w for w in m.ours if "=" in w):
                # __post_init__ runs in to_object: a value the schema refuses raises here
                OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(LlamaRLConfig),
                                                    OmegaConf.from_dotlist([word])))


def test_the_choices_a_key_accepts_are_on_its_row():
    rows = [line for line in PAGE.read_text().splitlines() if line.startswith("| `algorithm.aggregation` |")]
    assert rows == ["| `algorithm.aggregation` | str: `token_mean`, `sequence_mean` | `token_mean` "
                    "| token_mean \\| sequence_mean |"]


def test_a_tiny_schema_renders_types_defaults_choices_and_continued_comments(tmp_path):
    tiny = load_module(tmp_path, '''
        from dataclasses import dataclass, field
        from typing import List, Optional
        MODES = ("a", "b")
        def _check_choice(key, value, choices): pass

        @dataclass
        class Inner:
            mode: str = "a"              # how it runs
            limit_s: Optional[float] = None  # wall time; None = none
            names: List[str] = field(default_factory=list)  # first line,
                                                            # second line,
                                         # third line, not aligned
            # a heading comment, not the field above's
            flag: bool = True            # on or off
            # a comment above a field
            # with no trailing one
            above: int = 3

            def __post_init__(self):
                _check_choice("inner.mode", self.mode, MODES)

        @dataclass
        class Root:
            """The root section."""
            seed: int = 0                # the seed
            inner: Inner = field(default_factory=Inner)
        ''')
    body = render(tiny.Root, sources=()).split("## Top level", 1)[1]
    assert body == textwrap.dedent("""

        The root section.

        | key | type | default | meaning |
        |---|---|---|---|
        | `seed` | int | `0` | the seed |

        ## `inner`

        | key | type | default | meaning |
        |---|---|---|---|
        | `inner.mode` | str: `a`, `b` | `a` | how it runs |
        | `inner.limit_s` | float or null | `null` | wall time; None = none |
        | `inner.names` | list of str | `[]` | first line, second line, third line, not aligned |
        | `inner.flag` | bool | `true` | on or off |
        | `inner.above` | int | `3` | a comment above a field with no trailing one |
        """)


def test_a_field_without_a_comment_stops_generation_naming_file_line_and_field(tmp_path):
    tiny = load_module(tmp_path, '''
        from dataclasses import dataclass

        @dataclass
        class Tiny:
            documented: int = 1          # has a meaning
            bare: float = 2.0
        ''')
    with pytest.raises(UndocumentedField) as e:
        sections(tiny.Tiny)
    assert str(e.value).startswith(f"{tmp_path / 'tiny_schema.py'}:7: Tiny.bare has no comment")


def test_the_script_exits_2_with_one_line_on_an_undocumented_field(tmp_path, monkeypatch, capsys):
    script = config_doc_script()
    tiny = load_module(tmp_path, '''
        from dataclasses import dataclass

        @dataclass
        class Tiny:
            bare: int = 1
        ''')
    monkeypatch.setattr(script, "LlamaRLConfig", tiny.Tiny)
    assert script.main([], root=tmp_path) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Tiny.bare has no comment" in err
    assert not (tmp_path / "docs" / "CONFIG.md").exists()
