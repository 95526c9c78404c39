"""docs/ARCHITECTURE.md's "Layers" table is the layering the test enforces, row for row (its
rollout path is walked by tests/unit/test_rollout_hops.py)."""
import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def documented_layers() -> list[set[str]]:
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|") for line in section.splitlines() if re.match(r"\|\s*\d+\s*\|", line)]
    return [set(re.findall(r"`(\w+)`", cells[2])) for cells in rows]


def enforced_layers() -> list[set[str]]:
    spec = importlib.util.spec_from_file_location("layering", ROOT / "tests" / "unit" / "test_layering.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.LAYERS


def test_the_documented_layers_are_the_enforced_ones():
    assert documented_layers() == enforced_layers()

