"""#44 case 8 on a real run: a local process overwrites every `pid/<role>/<rank>` key with the
pid of a sleeper it started (not the controller's descendant, and with the run's plan path on
its command line, as the old sweep matched); the run ends normally, the sleepers survive, and
no process of the run is left."""
import json
import subprocess
import sys
import time
from pathlib import Path

from llamarl_core.transport.control import connect_run

sys.path.insert(0, str(Path(__file__).parent))
from test_runtime import FAST, processes_mentioning  # noqa: E402


def test_a_stranger_writing_pid_keys_during_a_run_cannot_make_the_controller_kill(tmp_path):
    run_dir = tmp_path / "hostile"
    cmd = [sys.executable, "-m", "llamarl_cli.main", "train", f"run.dir={run_dir}", *FAST, "run.max_steps=8"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sleepers = []
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (run_dir / "metrics.jsonl").exists():
            time.sleep(0.2)
        assert (run_dir / "metrics.jsonl").exists(), "the run never got going"
        plan = json.loads((run_dir / "plan.json").read_text())
        store = connect_run(plan["controller"]["host"], plan["controller"]["port"], plan["run_id"], 10)
        for role in plan["roles"]:
            for rank in range(len(role["ranks"])):
                s = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                                      f"plan={run_dir}/plan.json", f"role={role['name']}"])
                sleepers.append(s)
                store.set(f"pid/{role['name']}/{rank}", str(s.pid))
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err[-3000:]
        time.sleep(0.5)
        assert all(s.poll() is None for s in sleepers), "the controller killed a pid it read from the store"
        assert sorted(processes_mentioning(str(run_dir))) == sorted(s.pid for s in sleepers)
    finally:
        proc.kill()
        for s in sleepers:
            s.kill()
            s.wait()
