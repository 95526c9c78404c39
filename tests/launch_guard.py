"""A fixture for bad-input tests: building a controller means the run would have started its
roles, so the refusal under test did not come before launch."""
import pytest


class Launched(Exception):
    pass


@pytest.fixture
def no_launch(monkeypatch):
    def refuse(*args, **kwargs):
        raise Launched("a controller was built: the run would have started its roles")
    monkeypatch.setattr("llamarl_cli.train_cmd.Controller", refuse)
    monkeypatch.setattr("llamarl_core.runtime.node.NodeController", refuse)
