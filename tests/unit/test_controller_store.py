"""The controller's store: loopback by default, and a busy port is never fatal."""
import socket

from llamarl_core.config.schema import ControllerConfig
from llamarl_core.runtime.controller import start_store


def listening_addresses(port: int) -> set[str]:
    """Local IPv4 addresses with a socket listening on `port` (from /proc/net/tcp)."""
    found = set()
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        addr, hexport = local.split(":")
        if int(hexport, 16) == port and state == "0A":  # 0A = LISTEN
            found.add(socket.inet_ntoa(bytes.fromhex(addr)[::-1]))
    return found


def test_the_controllers_store_listens_on_loopback_only_by_default():
    c = ControllerConfig()
    store = start_store(c.host, c.port)
    assert listening_addresses(store.port) == {"127.0.0.1"}


def test_a_busy_configured_port_falls_back_to_a_free_one():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        store = start_store("127.0.0.1", port)
        assert store.port != port
        store.set("k", "v")
        assert store.get("k") == b"v"
