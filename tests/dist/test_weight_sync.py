"""Weight sync over real gloo processes: every generator ends up with the trainer's bytes.

Reference: the sender's own state. Each rank returns a sha256 per tensor per version;
the parent compares them, so a torn or stale bucket shows up as a hash mismatch.

All scenarios run in one 3-process gloo world (``_results`` below: starting processes
is the expensive part); two-rank scenarios use a sub-group of ranks 0 and 1, which
every rank creates, in the same order, as the runtime does.
"""

import hashlib
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from llamarl_core.transport.weight_sync import WeightSyncReceiver, WeightSyncSender

SHAPES = {
    "tok_embeddings.weight": (torch.Size([64, 16]), torch.float32),  # 4096 B
    "layers.0.attention.wq.weight": (torch.Size([16, 16]), torch.float32),  # 1024 B
    "layers.0.attention_norm.weight": (torch.Size([16]), torch.float32),  # 64 B
    "layers.0.feed_forward.w1.weight": (torch.Size([32, 16]), torch.float32),  # 2048 B
    "output.weight": (torch.Size([64, 16]), torch.float32),  # 4096 B
}
SMALL_BUCKET_MB = 4500 / 2**20  # 4500 B: forces several buckets (checked below)


def _state(version: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(version)
    return {n: torch.randn(shape, generator=g) for n, (shape, _) in SHAPES.items()}


def _hashes(tensors: dict[str, torch.Tensor]) -> dict[str, str]:
    return {n: hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest() for n, t in tensors.items()}


VERSIONS = [1, 2, 5, 6]
SYNC_CASES = {"collective": 0, "shm": 2}  # transport -> src rank (shm: not group rank 0)


def _sync_body(rank, world_size, store, transport, src_rank, versions, slow_rank):
    group = dist.new_group(list(range(world_size)))
    kw = dict(transport=transport, group=group, src_rank=src_rank, store=store, run_id=f"t-sync-{transport}",
              bucket_mb=SMALL_BUCKET_MB)
    if rank == src_rank:
        sender = WeightSyncSender(SHAPES, **kw)
        leftovers = sorted(p.name for p in Path("/dev/shm").glob(f"llamarl-ws-t-sync-{transport}-*"))
        out = []
        for v in versions:
            state = _state(v)
            stats = sender.send(state, v)
            out.append((v, _hashes(state), stats.num_buckets, stats.bytes))
        with pytest.raises(ValueError, match="must increase"):
            sender.send(_state(0), versions[-1])
        sender.close()
        return {"role": "sender", "syncs": out, "shm_leftovers": leftovers}
    receiver = WeightSyncReceiver(SHAPES, **kw)
    model = {n: torch.zeros(shape) for n, (shape, _) in SHAPES.items()}
    ptrs = {n: t.data_ptr() for n, t in model.items()}
    out = []
    for _ in versions:
        if rank == slow_rank:
            time.sleep(0.2)  # lagging reader: the shm sender must not overwrite what it still reads
        stats = receiver.receive(model, timeout_s=30)
        out.append((stats.version, _hashes(model), stats.num_buckets, stats.bytes))
    receiver.close()
    return {"role": "receiver", "syncs": out, "in_place": ptrs == {n: t.data_ptr() for n, t in model.items()}}


@pytest.mark.parametrize("transport", sorted(SYNC_CASES))
def test_every_generator_holds_the_trainers_exact_weights_after_each_version_in_order(results, transport):
    src_rank, versions = SYNC_CASES[transport], VERSIONS
    results = [r[f"sync_{transport}"] for r in results]
    sender = results[src_rank]
    assert sender["shm_leftovers"] == []  # names unlinked right after every reader mapped them
    # Buckets of <= 4500 B in name order: layers.0.attention.wq (1024) + attention_norm (64) +
    # feed_forward.w1 (2048) = 3200 B | output (4096) | tok_embeddings (4096) -> 3 buckets.
    # Bytes: 4096 + 1024 + 64 + 2048 + 4096 = 11328.
    assert [s[2:] for s in sender["syncs"]] == [(3, 11328)] * len(versions)
    for rank, res in enumerate(results):
        if rank == src_rank:
            continue
        assert res["in_place"]
        assert [s[0] for s in res["syncs"]] == versions
        assert [s[1] for s in res["syncs"]] == [s[1] for s in sender["syncs"]]


def _check_received(wire: str, params, state) -> None:
    for name, sent in state.items():
        got = params[name].detach()
        if not sent.is_floating_point():
            assert torch.equal(got, sent), name  # integers travel untouched
        elif wire == "bf16":
            # bf16 keeps 8 significant bits (7 stored): spacing 2**-7 relative, so rounding to nearest errs <= 2**-8.
            assert torch.equal(got, sent.to(torch.bfloat16).float()), name
            assert torch.all((got - sent).abs() <= sent.abs() * 2**-8), name
        elif sent.dim() >= 2:  # int8: per-row step absmax / 127, error <= half a step (+ fp32 slack)
            half_step = sent.abs().amax(dim=1, keepdim=True) / 254
            assert torch.all((got - sent).abs() <= half_step * (1 + 1e-6)), name
        else:
            assert torch.equal(got, sent), name  # vectors are not quantized


def _wire_dtype_body(rank, world_size, store):
    group = dist.new_group([0, 1])
    if rank not in (0, 1):
        return None
    shapes = {**SHAPES, "step": (torch.Size([2]), torch.int64)}
    out = {}
    for wire, wire_dtype in (("bf16", torch.bfloat16), ("int8", torch.int8)):
        for transport in ("collective", "shm"):
            kw = dict(transport=transport, group=group, src_rank=0, store=store, run_id="t-wire",
                      bucket_mb=SMALL_BUCKET_MB, wire_dtype=wire_dtype)
            state = {**_state(3), "step": torch.tensor([7, 2**40 + 1])}
            if rank == 0:
                sender = WeightSyncSender(shapes, **kw)
                out[(wire, transport)] = sender.send(state, 3).bytes
                sender.close()
                continue
            receiver = WeightSyncReceiver(shapes, **kw)
            # nn.Parameters (requires_grad) as a generator's nn.Module holds them: updated in place.
            params = {n: torch.nn.Parameter(torch.zeros(shape)) for n, (shape, _) in SHAPES.items()}
            params["step"] = torch.zeros(2, dtype=torch.int64)
            out[(wire, transport)] = receiver.receive(params, timeout_s=30).bytes
            _check_received(wire, params, state)
    return out


def test_bf16_wire_dtype_rounds_floats_to_bf16_and_halves_the_bytes(results):
    # Rank 1 asserted the bf16 rounding itself; here: float bytes halve, 11328 / 2 = 5664,
    # plus int64 "step" 2 * 8 = 16 -> 5680 on the wire, as both sides report.
    for rank in (0, 1):
        assert results[rank]["wire"][("bf16", "collective")] == results[rank]["wire"][("bf16", "shm")] == 5680


def test_int8_wire_quantizes_matrices_per_row_within_half_a_step(results):
    # Rank 1 asserted the error bound; bytes: each matrix R x C sends R*C int8 + R float32 scales:
    # tok_embeddings 1024 + 256, wq 256 + 64, w1 512 + 128, output 1024 + 256; the norm vector
    # stays float32 (64); int64 step 16. Total 1280 + 320 + 640 + 1280 + 64 + 16 = 3600.
    for rank in (0, 1):
        assert results[rank]["wire"][("int8", "collective")] == results[rank]["wire"][("int8", "shm")] == 3600


def _mismatch_body(rank, world_size, store):
    group = dist.new_group([0, 1])
    if rank not in (0, 1):
        return None
    shapes = dict(SHAPES)
    if rank == 1:
        shapes["layers.0.attention.wq.weight"] = (torch.Size([16, 8]), torch.float32)
    errors = {}
    for transport in ("collective", "shm"):
        cls = WeightSyncSender if rank == 0 else WeightSyncReceiver
        try:
            cls(shapes, transport=transport, group=group, src_rank=0, store=store, run_id="t-mis", bucket_mb=256.0)
        except ValueError as e:
            errors[transport] = str(e)
    # A receiver built right but handed wrongly shaped params fails locally, before any traffic.
    kw = dict(transport="collective", group=group, src_rank=0, store=store, run_id="t-mis", bucket_mb=256.0)
    if rank == 0:
        WeightSyncSender(SHAPES, **kw).send(_state(1), 1)
    else:
        receiver = WeightSyncReceiver(SHAPES, **kw)
        params = {n: torch.zeros(shape) for n, (shape, _) in SHAPES.items()}
        bad = {**params, "output.weight": torch.zeros(64, 8)}
        with pytest.raises(ValueError, match=r"tensor 'output.weight' .* shape \(64, 8\)"):
            receiver.receive(bad)
        assert receiver.receive(params, timeout_s=30).version == 1
    return errors


def test_mismatched_shapes_fail_on_both_sides_naming_the_tensor(results):
    for errors in (results[0]["mismatch"], results[1]["mismatch"]):
        assert set(errors) == {"collective", "shm"}
        for msg in errors.values():
            assert "'layers.0.attention.wq.weight'" in msg and "(16, 8)" in msg and "(16, 16)" in msg


def _setup_error_body(rank, world_size, store):
    from llamarl_core.transport import shm

    group = dist.new_group([0, 1])
    if rank not in (0, 1):
        return None
    cls = WeightSyncSender if rank == 0 else WeightSyncReceiver
    real_create = shm.create

    def full_shm(path, nbytes):
        raise OSError(28, "No space left on device")

    shm.create = full_shm  # only the trainer creates buffers
    try:
        cls(SHAPES, transport="shm", group=group, src_rank=0, store=store, run_id="t-full", bucket_mb=256.0)
    except OSError as e:
        return str(e)
    finally:
        shm.create = real_create
    return "no error"


def test_a_trainer_that_cannot_create_shm_buffers_fails_every_rank_with_its_reason(results):
    for msg in (results[0]["setup_error"], results[1]["setup_error"]):
        assert msg.startswith("weight sync setup failed on the trainer") and "No space left on device" in msg


def _timeout_body(rank, world_size, store):
    messages = {}
    for transport in ("shm", "collective"):  # collective last: a timed-out collective spoils its group
        group = dist.new_group([0, 1])
        kw = dict(transport=transport, group=group, src_rank=0, store=store, run_id="t-timeout", bucket_mb=256.0)
        if rank not in (0, 1):
            continue
        if rank == 0:
            sender = WeightSyncSender(SHAPES, **kw)
            store.wait([f"timeout-done/{transport}"])  # send nothing until the receiver gave up
            sender.close()
            continue
        receiver = WeightSyncReceiver(SHAPES, **kw)
        params = {n: torch.zeros(shape) for n, (shape, _) in SHAPES.items()}
        with pytest.raises(TimeoutError) as info:
            receiver.receive(params, timeout_s=0.5)
        messages[transport] = str(info.value)
        store.set(f"timeout-done/{transport}", b"1")
    return messages


def test_a_generator_waiting_past_its_timeout_gets_a_timeout_error_naming_version_and_transport(results):
    messages = results[1]["timeout"]
    assert set(messages) == {"shm", "collective"}
    for transport, msg in messages.items():
        assert f"transport '{transport}'" in msg
        assert "waiting for the first weight version" in msg


def _all_scenarios(rank, world_size, store):
    out = {f"sync_{t}": _sync_body(rank, world_size, store, t, src, VERSIONS, (src + 1) % world_size)
           for t, src in SYNC_CASES.items()}  # (src + 1) % 3 reads slowly
    out["wire"] = _wire_dtype_body(rank, world_size, store)
    out["mismatch"] = _mismatch_body(rank, world_size, store)
    out["setup_error"] = _setup_error_body(rank, world_size, store)
    out["timeout"] = _timeout_body(rank, world_size, store)  # last: it spoils a sub-group
    return out


@pytest.fixture(scope="module")
def results(run_workers):
    return run_workers(_all_scenarios, 3, timeout_s=90)
