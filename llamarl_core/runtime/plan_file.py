"""plan.json as `llamarl node` and the workers read it: every field a node uses is checked, then
the file becomes a `LaunchPlan` (`LaunchPlan.from_json`, the inverse of what wrote it); nothing
is run from it.

The file is data, not a script: a node never execs the `commands` strings it holds (anyone who
can edit the run directory could plant `touch /tmp/pwned; ...` there). It rebuilds each torchrun
line from the checked fields (role names, rank counts, node indices, devices, threads) and the
validated config with `plan.commands.node_commands`, the function the planner itself uses, so
a node starts exactly what `llamarl plan` printed, or refuses with one line naming the key.
"""
from __future__ import annotations

import ipaddress
import json
import os
import re

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from llamarl_core.config.errors import ConfigError
from llamarl_core.config.schema import LlamaRLConfig
from llamarl_core.plan.nodes import host_names
from llamarl_core.plan.plan import LaunchPlan

HINT = "write it with `llamarl plan recipe=R --out DIR`"
ROLE_NAMES = ("generator", "trainer", "reward", "actor")
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")     # it names store keys and /dev/shm files
HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)\Z")
MAX_RANKS = 1 << 20


def load_plan(path: str) -> tuple[LaunchPlan, LlamaRLConfig]:
    """plan.json as written by `llamarl plan --out` (or `llamarl train`), and its config."""
    try:
        with open(path) as f:
            plan = json.load(f)
    except OSError as e:
        raise ConfigError(f"plan={path}: {e.strerror or e}; {HINT}") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"plan={path}: not JSON (line {e.lineno}, column {e.colno}: {e.msg}); {HINT}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"plan={path}: not a text file ({e.reason} at byte {e.start}); {HINT}") from None
    if not isinstance(plan, dict):
        raise ConfigError(f"plan={path}: a JSON {type(plan).__name__}, not a plan; {HINT}")
    for key in ("run_id", "controller", "config", "roles", "run_dir"):
        if key not in plan:
            raise ConfigError(f"{path} has no {key!r}: {HINT}")
    try:
        cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(LlamaRLConfig), plan["config"]))
    except (OmegaConfBaseException, ValueError) as e:  # ConfigError is a ValueError
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"{path}: its 'config' is not a valid llamarl config ({first})") from None
    check_fields(plan, cfg, path)
    try:
        return LaunchPlan.from_json(plan), cfg
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:  # a field no node checks
        raise ConfigError(f"{path}: not a plan ({type(e).__name__}: {e}); {HINT}") from None


def valid_host(host) -> bool:
    """A hostname (RFC 1123 labels) or an IPv4/IPv6 address: nothing a shell or torchrun could
    read as an option or a second word."""
    if not isinstance(host, str) or not 0 < len(host) <= 253:
        return False
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return all(HOST_LABEL.match(label) for label in host.rstrip(".").split("."))


def _int(value, key: str, path: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{path}: {key}={value!r} must be an integer in [{low}, {high}]; {HINT}")
    return value


def _int_list(value, key: str, path: str, low: int, high: int) -> list[int]:
    if not isinstance(value, list):
        raise ConfigError(f"{path}: {key}={value!r} must be a list of integers; {HINT}")
    return [_int(v, f"{key}[{i}]", path, low, high) for i, v in enumerate(value)]


def check_fields(plan: dict, cfg: LlamaRLConfig, path: str) -> None:
    """Types and ranges of every field a node builds its commands and store keys from."""
    if not isinstance(plan["run_id"], str) or not RUN_ID.match(plan["run_id"]):
        raise ConfigError(f"{path}: run_id={plan['run_id']!r} must be 1-64 letters, digits, '-' or '_'; {HINT}")
    if not isinstance(plan["run_dir"], str) or not os.path.isabs(plan["run_dir"]) or "\0" in plan["run_dir"]:
        raise ConfigError(f"{path}: run_dir={plan['run_dir']!r} must be an absolute path; {HINT}")
    if "nodes" not in plan:
        raise ConfigError(f"{path} has no 'nodes': {HINT}")
    nodes = _int(plan["nodes"], "nodes", path, 1, 1 << 16)
    if nodes != cfg.resources.nodes:
        raise ConfigError(f"{path}: nodes={nodes} but its config says resources.nodes={cfg.resources.nodes}; {HINT}")
    addr = plan["controller"]
    if not isinstance(addr, dict) or not {"host", "port"} <= set(addr):
        raise ConfigError(f"{path}: controller must hold 'host' and 'port'; {HINT}")
    if not valid_host(addr["host"]):
        raise ConfigError(f"{path}: controller.host={addr['host']!r} is not a hostname or IP address; {HINT}")
    _int(addr["port"], "controller.port", path, 1, 65535)
    for i, host in enumerate(host_names(cfg.resources.hostnames, nodes)):
        if not valid_host(host):
            raise ConfigError(f"{path}: node {i}'s host {host!r} (resources.hostnames) is not a hostname "
                              f"or IP address; {HINT}")
    _check_roles(plan["roles"], nodes, path)


def _check_roles(roles, nodes: int, path: str) -> None:
    if not isinstance(roles, list) or not roles:
        raise ConfigError(f"{path}: roles must be a non-empty list; {HINT}")
    seen = set()
    for i, r in enumerate(roles):
        key = f"roles[{i}]"
        missing = [k for k in ("name", "num_devices", "nodes", "devices", "threads")
                   if not isinstance(r, dict) or k not in r]
        if missing:
            raise ConfigError(f"{path} has no '{key}.{missing[0]}': {HINT}")
        if r["name"] not in ROLE_NAMES or r["name"] in seen:
            raise ConfigError(f"{path}: {key}.name={r['name']!r} must be one of {', '.join(ROLE_NAMES)}, "
                              f"each once; {HINT}")
        seen.add(r["name"])
        ranks = _int(r["num_devices"], f"{key}.num_devices", path, 1, MAX_RANKS)
        on = _int_list(r["nodes"], f"{key}.nodes", path, 0, nodes - 1)
        if not on or on != list(range(on[0], on[0] + len(on))) or ranks % len(on):
            raise ConfigError(f"{path}: {key}.nodes={on} must be consecutive node indices that share "
                              f"num_devices={ranks} equally; {HINT}")
        _int_list(r["devices"], f"{key}.devices", path, 0, MAX_RANKS)
        _int(r["threads"], f"{key}.threads", path, 1, 4096)
