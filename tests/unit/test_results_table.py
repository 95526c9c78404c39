"""docs/RESULTS.md's table and the README's headline are what benchmarks/results/*.json say
(scripts/results_table.py)."""
import importlib.util
import json
import re
import shlex
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


def load_script():
    spec = importlib.util.spec_from_file_location("results_table", ROOT / "scripts" / "results_table.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["results_table"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


rt = load_script()


@pytest.fixture
def copy(tmp_path):
    """A README, a docs/RESULTS.md and a results directory the test may change, and the
    arguments that point the script at them."""
    results = tmp_path / "results"
    results.mkdir()
    for p in RESULTS.glob("*.json"):
        shutil.copy(p, results / p.name)
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    shutil.copy(ROOT / "docs" / "RESULTS.md", tmp_path / "RESULTS.md")
    args = ["--readme", str(tmp_path / "README.md"), "--doc", str(tmp_path / "RESULTS.md"), "--results", str(results)]
    return tmp_path / "README.md", tmp_path / "RESULTS.md", results, args


def test_the_results_table_and_the_readme_headline_are_what_the_jsons_say(capsys):
    assert rt.main(["--check"]) == 0, capsys.readouterr().out[-3000:]


def test_a_changed_json_value_fails_check_with_a_diff_and_a_rewrite_fixes_it(copy, capsys):
    readme, table_doc, results, args = copy
    doc = json.loads((results / "default_run_cpu.json").read_text())
    doc["accuracy_after"] = 0.777
    (results / "default_run_cpu.json").write_text(json.dumps(doc))
    assert rt.main(["--check", *args]) == 1
    out = capsys.readouterr().out
    assert "-| Default job (`llamarl train`" in out and "+| Default job" in out and "0.777" in out
    assert rt.main(args) == 0 and f"{doc['accuracy_before']:.3f} → 0.777" in table_doc.read_text()
    assert rt.main(["--check", *args]) == 0


def test_a_changed_headline_value_fails_check_on_the_readme_and_a_rewrite_fixes_both_files(copy, capsys):
    readme, table_doc, results, args = copy
    doc = json.loads((results / "real_model_cpu.json").read_text())
    assert doc["accuracy_before"] == 0.1875  # 15 of 80 held-out problems
    doc["accuracy_after"] = 0.4375  # 35 of 80: +25.0 points
    (results / "real_model_cpu.json").write_text(json.dumps(doc))
    assert rt.main(["--check", *args]) == 1
    captured = capsys.readouterr()
    assert str(readme) in captured.err and str(table_doc) in captured.err
    assert "+| A real model vs its start | SmolLM2-135M-Instruct, held-out accuracy 0.188 → 0.438 (+25.0 points)" \
        in captured.out
    assert rt.main(args) == 0
    assert "0.188 → 0.438 (+25.0 points)" in readme.read_text() and "0.188 → 0.438" in table_doc.read_text()
    assert rt.main(["--check", *args]) == 0


def test_the_headline_has_one_line_per_headline_in_order_each_linking_its_jsons():
    lines = [line for line in rt.headline(RESULTS).splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [line.split(" | ")[0][2:] for line in lines] == list(rt.HEADLINES) and len(lines) == 7
    links = [re.findall(r"\]\(benchmarks/results/([\w.]+)\)", line) for line in lines]
    assert links == [["real_model_cpu.json"], ["agent_calc_cpu.json"], ["lora_vs_full_cpu.json"], ["streaming_cpu.json"],
                     ["sync_vs_async_cpu.json"], ["simulator_405b_math.json"], ["generation_real_cpu.json"]]
    assert all((RESULTS / name).exists() for names in links for name in names)


def test_a_headline_with_no_row_flagged_stops_the_script(monkeypatch):
    monkeypatch.setattr(rt, "HEADLINES", rt.HEADLINES + ("Nothing measures this",))
    with pytest.raises(SystemExit, match="no row is flagged headline='Nothing measures this'"):
        rt.headline(RESULTS)


def test_an_absent_json_still_shows_its_row_as_not_measured(copy):
    readme, table_doc, results, args = copy
    (results / "trainer_cpu.json").unlink()
    text = rt.table(results)
    row = next(line for line in text.splitlines() if line.startswith("| RL trainer step"))
    assert "**not measured**" in row and "`trainer_cpu.json` (absent)" in row
    if not (results / "gpu_check.json").exists():
        assert "**not run — no GPU lent**" in text
    assert rt.main(["--check", *args]) == 1


def test_a_key_missing_from_a_present_json_is_shown_and_fails(copy, capsys):
    readme, table_doc, results, args = copy
    doc = json.loads((results / "generation_cpu.json").read_text())
    del doc["long_tail"]["ratio"]
    (results / "generation_cpu.json").write_text(json.dumps(doc))
    assert "**no key `long_tail.ratio` in the JSON**" in rt.table(results)
    assert rt.main(args) == 1
    assert "no key 'long_tail.ratio'" in capsys.readouterr().err


def test_a_value_of_another_shape_is_shown_and_fails(copy, capsys):
    readme, table_doc, results, args = copy
    doc = json.loads((results / "streaming_cpu.json").read_text())
    doc["streaming_vs_chunked"] = {"ratio": 1.7}
    (results / "streaming_cpu.json").write_text(json.dumps(doc))
    assert "**cannot show the JSON's value: TypeError**" in rt.table(results)
    assert "**cannot show the JSON's value: TypeError**" in rt.headline(results)  # a headline row too
    assert rt.main(args) == 1


def test_every_row_of_a_present_json_finds_its_keys():
    problems = []
    rt.table(RESULTS, problems.append)
    assert problems == []


def test_key_paths():
    doc = {"a": {"b": [{"k": 1, "j": "x", "v": 10}, {"k": 2, "j": "y", "v": 20}]}}
    assert rt.get(doc, "a.b[1].v") == 20
    assert rt.get(doc, "a.b[k=2].v") == 20 and rt.get(doc, "a.b[k=2,j=y].v") == 20
    assert rt.get(doc, "a.b[*].v") == [10, 20]
    for bad in ("a.c", "a.b[k=3].v", "a.b[5].v", "a.b[k=2,j=x].v"):
        with pytest.raises(rt.MissingKey):
            rt.get(doc, bad)


def test_every_benchmark_json_records_its_command_and_commit():
    missing = [p.name for p in sorted(RESULTS.glob("*.json"))
               if not json.loads(p.read_text()).get("command") or not json.loads(p.read_text()).get("commit")]
    assert missing == [], "add 'command' and 'commit' (see llamarl_core/bench/provenance.py)"


def test_the_one_machine_record_fills_the_tables_load_column(monkeypatch):
    import os

    from llamarl_core.bench import provenance

    loads = iter([(1.4, 1.0, 0.5), (3.5, 2.0, 1.0)])
    monkeypatch.setattr(os, "getloadavg", lambda: next(loads))
    doc = {"machine": provenance.ended(provenance.machine(threads=2))}
    assert doc["machine"]["loadavg_at_start"] == [1.4, 1.0, 0.5]
    assert doc["machine"]["loadavg_at_end"] == [3.5, 2.0, 1.0]
    assert doc["machine"]["threads"] == 2 and doc["machine"]["cpu_count"] == os.cpu_count()
    assert rt.machine_load(doc, ()) == "1.4"   # the start's 1-minute load, as every bench records it
    assert "loadavg_at_start" not in provenance.machine(load=False)


def test_the_known_gaps_quote_the_tables_numbers():
    block = (ROOT / "docs" / "RESULTS.md").read_text().split(rt.BEGIN, 1)[1].split(rt.END, 1)[0]
    gaps = (ROOT / "docs" / "KNOWN_GAPS.md").read_text()
    quoted = re.findall(r"\d+\.\d+(?:×| s\b)", gaps)
    assert quoted and [q for q in quoted if q not in block] == []


def bench_command_problem(command: str, parse_options: bool = True) -> str | None:
    """Why `command` (a row's reproduce command) is not `llamarl bench NAME ...` with a known
    NAME whose parser takes the rest, or None if it is (or is no bench command at all)."""
    from llamarl_cli import bench_cmd
    from llamarl_cli.common import UsageError, parse

    if any(old in command for old in ("scripts/bench_", "scripts/compare_streaming_runs", "llamarl_core.bench.")):
        return "cites a bench script, not `llamarl bench NAME`"
    for name in re.findall(r"llamarl bench (\S+)", command):  # inside prose too, e.g. "with llamarl bench ..."
        if name not in bench_cmd.BENCHES:
            return f"unknown bench {name!r}"
    if not command.startswith("llamarl bench ") or not parse_options:
        return None
    name, *words = shlex.split(command)[2:]
    try:
        if bench_cmd.BENCHES[name][0] is None:
            parse(bench_cmd.parser(name), words)
        else:
            bench_cmd.parser(name).parse_args(words)
    except (UsageError, SystemExit) as e:
        return f"its options do not parse: {e}"
    return None


def test_every_rows_command_is_llamarl_bench_with_a_known_name_whose_options_parse(capsys):
    commands = {row.claim: rt.at(json.loads((RESULTS / row.json).read_text()), row.command_key)
                for row in rt.ROWS if (RESULTS / row.json).exists()}
    bench = [c for c in commands.values() if c and c.startswith("llamarl bench ")]
    assert len(bench) >= 20  # most rows are reproduced by a bench; the others by `llamarl train`
    assert {c.split()[2] for c in bench} == {"sync-vs-async", "quality", "weight-sync", "generation",
                                             "generation-real", "launch", "slots", "streaming", "trainer",
                                             "env-busy", "agent", "lora-apply", "lora-trainer", "lora"}
    assert {claim: p for claim, c in commands.items() if c and (p := bench_command_problem(c))} == {}
    capsys.readouterr()  # argparse's error lines, had any command failed


def test_every_command_recorded_in_a_result_json_is_one_that_runs():
    """Rows or not, nested runs too: every `*command*` string and `summarized_by` (names only:
    it quotes its runs' commands unquoted)."""
    def strings(node, key=""):
        if isinstance(node, dict):
            for k, v in node.items():
                yield from strings(v, k)
        elif isinstance(node, list):
            for v in node:
                yield from strings(v, key)
        elif isinstance(node, str) and ("command" in key or key == "summarized_by"):
            yield key, node
    problems = {}
    for path in sorted(RESULTS.glob("*.json")):
        for key, text in strings(json.loads(path.read_text())):
            problem = bench_command_problem(text, parse_options=key != "summarized_by")
            if problem:
                problems[f"{path.name}: {text[:60]}"] = problem
    assert problems == {}


@pytest.mark.parametrize("command, problem", [
    ("python scripts/bench_streaming.py --out x.json", "cites a bench script"),
    ("llamarl bench --sync-vs-async --steps 10", "unknown bench '--sync-vs-async'"),
    ("llamarl bench streaming --no-such-flag 3", "do not parse"),
    ("llamarl bench sync-vs-async --layout 1:1", "do not parse"),
    ("llamarl train recipe=smollm2_cpu (with llamarl bench real-model watch RUN beside it)", None),
    ("llamarl train (with llamarl bench watch RUN beside it)", "unknown bench 'watch'"),
])
def test_a_bench_command_that_would_not_run_is_reported(command, problem, capsys):
    found = bench_command_problem(command)
    assert (found is None) if problem is None else (problem in found)
