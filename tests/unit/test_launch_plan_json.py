"""Issue #46: one plan shape. plan.json is `LaunchPlan.to_json()` and reads back into a
`LaunchPlan` (`from_json`) byte for byte, so every reader (node, worker, controller) uses the
same attributes and the file's format is what users and tests already read."""
import json

from llamarl_cli.main import main
from llamarl_core.config.load import load_config
from llamarl_core.plan.plan import LaunchPlan, make_plan
from llamarl_core.runtime.plan_file import load_plan


def test_a_written_plan_json_reads_back_into_the_same_bytes_and_attributes(tmp_path):
    run_dir = tmp_path / "run"
    assert main(["plan", "recipe=cpu_2node", "--out", str(run_dir), "--run-id", "feed1234"]) == 0
    text = (run_dir / "plan.json").read_text()
    plan, cfg = load_plan(str(run_dir / "plan.json"))
    assert json.dumps(plan.to_json(), indent=2) == text
    raw = json.loads(text)
    assert (plan.run_id, plan.run_dir, plan.nodes) == ("feed1234", str(run_dir), 2) == (
        raw["run_id"], raw["run_dir"], raw["nodes"])
    assert (plan.controller.host, plan.controller.port) == (raw["controller"]["host"], raw["controller"]["port"])
    assert plan.config == raw["config"] and cfg.resources.nodes == 2
    assert [(r.name, r.first_rank, r.num_devices, r.nodes) for r in plan.roles] == [
        (r["name"], r["ranks"][0], r["num_devices"], r["nodes"]) for r in raw["roles"]]


def test_a_gpu_plan_with_predictions_and_recipe_values_survives_the_round_trip():
    plan = make_plan(load_config("8b_gsm8k", []), require_data=False)
    plan.set_by_recipe = {"advice": "", "keys": ["a.b"]}
    assert plan.predicted and plan.run_id is None  # a printed plan: no run fields in its JSON
    doc = plan.to_json()
    assert "run_id" not in doc and "controller" not in doc
    again = LaunchPlan.from_json(json.loads(json.dumps(doc)))
    assert json.dumps(again.to_json()) == json.dumps(doc)
    assert again.role("trainer").memory == plan.role("trainer").memory.__class__(
        **{k: round(v, 3) for k, v in vars(plan.role("trainer").memory).items()})
