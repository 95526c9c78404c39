"""A fixture for bad-input tests: building a controller means the run would have started its
roles, so the refusal under test did not come before launch. `train_refused`: the shared check
that `llamarl train` refused in one line before making its run directory."""
import pytest

from llamarl_cli.main import main


class Launched(Exception):
    pass


@pytest.fixture
def no_launch(monkeypatch):
    def refuse(*args, **kwargs):
        raise Launched("a controller was built: the run would have started its roles")
    monkeypatch.setattr("llamarl_cli.train_cmd.Controller", refuse)
    monkeypatch.setattr("llamarl_core.runtime.node.NodeController", refuse)


def train_refused(capsys, tmp_path, base, *overrides) -> str:
    """`llamarl train base… overrides…` exits 2 with one stderr line, no traceback and no run
    directory; returns stderr."""
    run_dir = tmp_path / "run"
    code = main(["train", f"run.dir={run_dir}", *base, *overrides])
    out, err = capsys.readouterr()
    assert code == 2, out + err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not run_dir.exists(), "the run directory was created"
    return err
