"""A fixture for bad-input tests: building a controller means the run would have started its
roles, so the refusal under test did not come before launch. `refused`: the shared check that a
verb refused in one line (exit 2, no traceback); `train_refused`: that `llamarl train` did so
before making its run directory."""
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


def refused(capsys, *argv, words=()) -> str:
    """`llamarl argv…` exits 2 with one stderr line that holds every one of `words` and no
    traceback; returns that line."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 2, out + err
    lines = err.strip().splitlines()
    assert "Traceback" not in err and len(lines) == 1, err
    for w in words:
        assert w in lines[0], lines[0]
    return lines[0]


def train_refused(capsys, tmp_path, base, *overrides) -> str:
    """`llamarl train base… overrides…` is `refused` and made no run directory."""
    run_dir = tmp_path / "run"
    line = refused(capsys, "train", f"run.dir={run_dir}", *base, *overrides)
    assert not run_dir.exists(), "the run directory was created"
    return line
