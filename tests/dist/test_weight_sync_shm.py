"""Shared-memory buffers for weight sync: creation, mapping, errors, crash leftovers."""

import os
import secrets

import pytest
import torch

from llamarl_core.transport import shm

pytestmark = pytest.mark.skipif(not os.access(shm.SHM_DIR, os.W_OK), reason="/dev/shm is not writable here")


def test_a_second_mapping_sees_the_owners_writes_and_survives_the_unlink():
    (path,) = shm.slot_paths(f"t-map-{secrets.token_hex(3)}", 0, 0, 1)
    owner = shm.create(path, 128)
    reader = shm.open_existing(path, 128)
    shm.unlink([path])  # as the sender does once every reader has mapped
    assert not os.path.exists(path)
    owner[:4] = torch.tensor([1, 2, 3, 4], dtype=torch.uint8)
    assert reader[:4].tolist() == [1, 2, 3, 4] and int(reader[4:].sum()) == 0  # created zeroed


def test_mapping_a_missing_or_wrongly_sized_buffer_says_why():
    (path,) = shm.slot_paths(f"t-err-{secrets.token_hex(3)}", 0, 0, 1)
    with pytest.raises(FileNotFoundError, match="same host"):
        shm.open_existing(path, 64)
    shm.create(path, 64)
    try:
        with pytest.raises(ValueError, match="has 64 bytes, expected 128"):
            shm.open_existing(path, 128)
        with pytest.raises(FileExistsError):
            shm.create(path, 64)
    finally:
        shm.unlink([path])


def test_sweep_removes_a_crashed_runs_leftovers_and_nothing_else():
    run, other = f"t-sweep-{secrets.token_hex(3)}", f"t-keep-{secrets.token_hex(3)}"
    left = shm.slot_paths(run, 0, 0, 2)
    kept = shm.slot_paths(other, 0, 0, 1)
    for p in left + kept:
        shm.create(p, 64)
    try:
        assert shm.sweep(run) == sorted(left)
        assert not any(os.path.exists(p) for p in left) and os.path.exists(kept[0])
    finally:
        shm.unlink(left + kept)
