"""Nothing a resume reads, and nothing read from the store, can run code.

A pickle payload that creates a file is planted in every file of a checkpoint that a resume
reads (state.json, the DCP metadata and shard, the RNG state) and under the CUDA IPC slot key:
each is refused with an error naming the file, and the payload's file never appears. (Before:
the RNG file was `torch.load(weights_only=False)`, DCP's metadata `pickle.load`, and the IPC
handles `pickle.loads` of a store value: the payload ran.)
"""
import builtins
import json
import pickle
import random

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.multiprocessing.reductions import rebuild_cuda_tensor

from llamarl_core.checkpoint import checkpoints
from llamarl_core.models import Llama, ModelArgs
from llamarl_core.transport import cuda_ipc

ARGS = ModelArgs(vocab_size=260, dim=32, n_layers=1, n_heads=4, n_kv_heads=2, ffn_dim=48, max_seq_len=64)


class Payload:
    """Unpickling this creates `path` (what a real attack would replace with anything)."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return builtins.open, (self.path, "w")


def trained():
    torch.manual_seed(0)
    model = Llama(ARGS)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.zeros(1, 4, dtype=torch.long)).sum().backward()
    opt.step()
    return model, opt


@pytest.fixture
def saved(tmp_path):
    model, opt = trained()
    path = tmp_path / "run" / "checkpoints" / "step_1"
    random.seed(3)
    torch.manual_seed(4)
    checkpoints.save(str(path), model, opt, None, 0, {"step": 1, "next_chunk": {}, "dropped": {}}, 2,
                     str(tmp_path / "run"))
    return model, path


def test_a_checkpoint_restores_weights_optimizer_and_both_rngs_exactly(saved):
    model, path = saved
    after_save = (torch.rand(4), random.random())
    fresh, opt = trained()
    with torch.no_grad():
        for p in fresh.parameters():
            p.zero_()
    assert checkpoints.verify(str(path))["step"] == 1
    checkpoints.load(str(path), fresh, opt, None, 0)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), fresh.parameters()))
    assert opt.state_dict()["param_groups"][0]["lr"] == 1e-3
    assert torch.equal(torch.rand(4), after_save[0]) and random.random() == after_save[1]
    assert sorted(p.name for p in (path / "rng").iterdir()) == ["rank_0.json"]


def files_a_resume_reads(path):
    return sorted(p for p in path.rglob("*") if p.is_file() and p.name != checkpoints.STABLE)


def test_a_pickle_planted_in_any_checkpoint_file_is_refused_and_never_runs(saved, tmp_path):
    _, path = saved
    files = files_a_resume_reads(path)
    assert {f.name for f in files} >= {"state.json", ".metadata", "__0_0.distcp", "rank_0.json"}
    for file in files:
        original = file.read_bytes()
        marker = tmp_path / f"ran_{file.name}"
        file.write_bytes(pickle.dumps(Payload(marker)))
        with pytest.raises(checkpoints.UnsafeCheckpoint, match=str(file.parent)):
            checkpoints.verify(str(path))  # the controller, before any role starts
        model, opt = trained()
        with pytest.raises(Exception):
            checkpoints.load(str(path), model, opt, None, 0)  # the trainer, were it reached
        assert not marker.exists(), f"the payload in {file.name} ran"
        file.write_bytes(original)
    checkpoints.verify(str(path))  # restored: loads again


def test_the_resume_and_the_step_weights_reader_read_the_metadata_through_one_allow_list(saved):
    from llamarl_core.models import dcp_metadata, step_checkpoint

    _, path = saved
    file = path / "trainer" / ".metadata"
    real, plain = dcp_metadata.read_metadata(file), dcp_metadata.read_metadata(file, stand_ins=True)
    assert type(real).__module__ == "torch.distributed.checkpoint.metadata"  # what DCP's planner checks
    assert isinstance(plain, dcp_metadata.Record)  # fields only: models never import torch.distributed
    shapes = {k: tuple(md.size) for k, md in real.state_dict_metadata.items() if hasattr(md, "chunks")}
    assert step_checkpoint.step_shapes(path) == {k[len("model."):]: v for k, v in shapes.items() if k.startswith("model.")}
    assert checkpoints.safe_dcp.read_metadata is dcp_metadata.read_metadata
    assert checkpoints.UnsafeCheckpoint is dcp_metadata.UnsafeCheckpoint


def test_a_payload_saved_as_a_dcp_value_is_refused_by_weights_only(tmp_path):
    model, opt = trained()
    msd, osd = get_state_dict(model, opt)
    marker = tmp_path / "ran"
    osd["param_groups"][0]["lr"] = Payload(marker)  # DCP stores non-tensors with torch.save
    path = tmp_path / "step_1"
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=str(path / "trainer"))
    with pytest.raises(checkpoints.UnsafeCheckpoint, match="weights_only"):
        checkpoints.safe_dcp.verify(str(path / "trainer"))
    (path / "state.json").write_text(json.dumps({"step": 1}))
    (path / checkpoints.STABLE).write_text("1\n")
    with pytest.raises(Exception, match="weights_only"):
        checkpoints.load(str(path), *trained(), None, 0)
    assert not marker.exists()


# ---- CUDA IPC handles through the store: JSON fields, validated ------------------------
NBYTES = 1 << 20


def fake_handle(nbytes=NBYTES, offset=0):
    """The tuple shape torch.multiprocessing.reductions.reduce_tensor gives a CUDA uint8 buffer."""
    return (rebuild_cuda_tensor, (torch.Tensor, torch.Size([nbytes]), (1,), offset, torch.storage.TypedStorage,
                                  torch.uint8, 0, b"\x01" * 64, nbytes + offset, 0, False,
                                  b"/torch_4242_1234_0", 96, b"\x02" * 64, True))


def test_ipc_handles_round_trip_as_json_to_the_exact_rebuild_arguments(monkeypatch):
    handles = [fake_handle(), fake_handle(offset=512)]
    text = cuda_ipc.to_json(handles)
    json.loads(text)  # plain JSON, no pickle
    fields = cuda_ipc.from_json(text.encode(), NBYTES)  # the store hands back bytes
    assert [cuda_ipc.rebuild_args(f) for f in fields] == [h[1] for h in handles]
    calls = []
    monkeypatch.setattr(cuda_ipc, "rebuild_cuda_tensor", lambda *a: calls.append(a) or torch.zeros(NBYTES, dtype=torch.uint8))
    assert len(cuda_ipc.open_shared(fields)) == 2 and calls == [h[1] for h in handles]


def test_a_pickle_under_the_slot_key_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "ran"
    with pytest.raises(ValueError, match="not the JSON"):
        cuda_ipc.from_json(pickle.dumps(Payload(marker)), NBYTES)
    assert not marker.exists()


@pytest.mark.parametrize("change, words", [
    (lambda d: d.update(numel=NBYTES // 2), "plan needs"),
    (lambda d: d.update(offset=NBYTES), "plan needs"),
    (lambda d: d.update(device=-1), "device"),
    (lambda d: d.update(ref_counter_offset=True), "ref_counter_offset"),
    (lambda d: d.update(handle=123), "handle"),
    (lambda d: d.update(event_sync_required="yes"), "event_sync_required"),
    (lambda d: d.update(rebuild="os.system"), "expected the keys"),
])
def test_ipc_handle_fields_are_validated(change, words):
    item = json.loads(cuda_ipc.to_json([fake_handle()]))[0]
    change(item)
    with pytest.raises(ValueError, match=words):
        cuda_ipc.from_json(json.dumps([item]), NBYTES)


def test_only_uint8_buffers_are_published():
    rebuild, args = fake_handle()
    with pytest.raises(ValueError, match="uint8"):
        cuda_ipc.to_json([(rebuild, args[:5] + (torch.float32,) + args[6:])])
