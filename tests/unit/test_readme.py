"""The README fits on a screen, names only files, verbs and recipes that exist, quotes no
hand-written result or test count, and still holds the commands `.ci/run` says it runs."""
import glob
import re
from pathlib import Path

from llamarl_cli.main import VERBS

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
HEAD_BEGIN, HEAD_END = "<!-- headline:begin -->", "<!-- headline:end -->"  # scripts/results_table.py's block


REPO_PATH = r"(?<![\w/.-])((?:docs|benchmarks/results|examples|recipes|scripts|tests|llamarl_core|cli|\.ci)/" \
            r"[\w./*-]*[\w*]|CHANGELOG\.md)"


def repo_paths(text: str) -> set[str]:
    """Every repo file or folder the text names: markdown link targets, and any word that starts with a
    top-level folder of this repo (in backticks, in a code block or in prose)."""
    links = {t for t in re.findall(r"\]\(([^)#\s]+)", text) if not re.match(r"[a-z]+:", t)}
    return links | set(re.findall(REPO_PATH, text))


def outside_the_generated_block(text: str) -> str:
    return text.split(HEAD_BEGIN)[0] + text.split(HEAD_END)[1]


def code_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def test_the_readme_fits_in_150_lines():
    assert len(README.splitlines()) <= 150


def test_every_repo_path_the_readme_names_exists_except_those_still_being_built():
    paths = repo_paths(README)
    assert {"docs/RESULTS.md", "docs/KNOWN_GAPS.md", "CHANGELOG.md", ".ci/run",
            "benchmarks/results/real_model_cpu.json"} <= paths  # the scan finds links, prose and backticks
    missing = sorted(p for p in paths if not glob.glob(str(ROOT / p)))
    assert missing == []


def test_repo_paths_finds_links_backticks_code_and_prose_but_not_urls_or_run_dirs():
    text = ("see [x](docs/A.md) and [y](https://example.org/docs/B.md), `recipes/*.yaml`, docs/C.md.\n"
            "llamarl train data.path=examples/t/data.jsonl run.dir=runs/docs/x `models/smollm2-135m`")
    assert repo_paths(text) == {"docs/A.md", "recipes/*.yaml", "docs/C.md", "examples/t/data.jsonl"}


def test_every_verb_and_recipe_the_readme_names_exists():
    code = "\n".join(code_blocks(README) + re.findall(r"`([^`\n]+)`", README))  # prose may say "llamarl runs …"
    verbs = set(re.findall(r"(?:^|&& |\n)llamarl (\w+)", code))
    assert {"train", "plan", "report", "eval"} <= verbs
    assert sorted(verbs - set(VERBS)) == []
    section = README.split("\n## Recipes\n")[1].split("\n## ")[0]
    named = set(re.findall(r"recipe=(\w+)(?![\w/.])", README))  # a name, not recipe=examples/…/recipe.yaml
    recipes = named | set(re.findall(r"`(\w+)`", section))
    assert {"cpu_tiny", "405b_math"} <= recipes
    assert sorted(r for r in recipes if not (ROOT / "recipes" / f"{r}.yaml").exists()) == []


def test_the_readme_quotes_no_test_counts_and_no_result_outside_the_generated_headline():
    prose = outside_the_generated_block(README)
    assert re.findall(r"\d+ (?:passed|skipped|failed)", README) == []
    assert re.findall(r"\d(?:\.\d+)?\s?(?:×|%|points?\b|min\b|s\b)", prose) == []


def test_the_headline_block_is_in_the_readme_once_with_one_line_per_headline():
    block = README.split(HEAD_BEGIN)[1].split(HEAD_END)[0]
    assert README.count(HEAD_BEGIN) == README.count(HEAD_END) == 1
    assert len([line for line in block.splitlines() if line.startswith("| ") and "](benchmarks/results/" in line]) \
        == 7  # scripts/results_table.py's HEADLINES


def test_the_commands_ci_runs_are_the_readmes_set_up_commands():
    """.ci/run quotes README set-up commands 1 and 2 (pip's -q aside); each must still be in its block."""
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    blocks = code_blocks(README)
    quoted = {}
    for i, line in enumerate(ci):
        m = re.match(r"# README, set-up command (\d)", line)
        if m:
            command = next(c for c in ci[i + 1:] if c.strip() and not c.startswith(("#", "set ")))
            quoted[int(m.group(1))] = command.replace(" -q", "").strip()
    assert set(quoted) == {1, 2}
    for n, command in quoted.items():
        assert command in blocks[n - 1], (n, command, blocks[n - 1])


def test_the_pages_the_readme_moved_into_name_only_repo_files_that_exist():
    """docs/KNOWN_GAPS.md, docs/HISTORY.md, docs/RESULTS.md and CHANGELOG.md name repo files in prose
    (from the repo root); the GPU check's JSON is the one named before anything writes it."""
    outputs = {"benchmarks/results/gpu_check.json"}
    pages = ["docs/KNOWN_GAPS.md", "docs/HISTORY.md", "docs/RESULTS.md", "CHANGELOG.md"]
    missing = {page: sorted(p for p in repo_paths((ROOT / page).read_text()) - outputs
                            if not glob.glob(str(ROOT / p))) for page in pages}
    assert missing == {page: [] for page in pages}
