"""The controller's store: loopback by default, and a busy port is never fatal."""
import socket

from llamarl_core.config.schema import ControllerConfig
from llamarl_core.runtime.controller import start_store


def test_the_controller_listens_on_loopback_by_default():
    assert ControllerConfig().host == "127.0.0.1"


def test_a_busy_configured_port_falls_back_to_a_free_one():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        store = start_store("127.0.0.1", port)
        assert store.port != port
        store.set("k", "v")
        assert store.get("k") == b"v"
