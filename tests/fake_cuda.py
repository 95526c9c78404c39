"""`FakeCuda`: run CPU-only torch as if some tensors lived on a CUDA device, and refuse mixing.

    with FakeCuda() as cuda:
        model = cuda.put(model)                 # its parameters and buffers now report cuda:0
        train_on(learner, batch_on_host, ...)   # raises FakeDeviceMismatch where the code mixes
        cuda.syncs                              # host reads of device values so far

Why not `FakeTensorMode(device="cuda")`: fake tensors carry no values, so code that reads a
value back (`float(loss)`, `.tolist()` of sampled tokens, `nonzero`) cannot run under it, and
the learner, the sampler and the scheduler all do. Here every tensor is a real CPU tensor;
those "on the device" carry a tag, and a `TorchFunctionMode` (thread-local: background threads
see plain CPU tensors) applies the device rules to every torch call:

  * `.device` reports cuda:0 and `.is_cuda` True for a tagged tensor; factories and `.to` with
    a cuda device make tagged tensors; the outputs of any op with a tagged input are tagged;
  * an op whose tensor arguments mix tagged and untagged ones (0-dim host tensors excepted,
    as CUDA allows CPU scalars) raises `FakeDeviceMismatch` naming the op; so does indexing a
    host tensor with device indices (CUDA's own rule). `copy_` and `.to` may cross devices;
  * host reads of device values are counted in `syncs` (`.item()`, `float()`/`int()`/`bool()`,
    `.tolist()`, `.numpy()`, blocking copies to the host, ops whose output shape depends on
    values such as `nonzero` or boolean-mask indexing, `Event/Stream.synchronize`,
    `torch.cuda.synchronize`); a `non_blocking=True` copy to the host is not a sync, and
    reading its destination before an event or stream was synchronized raises.
`torch.Generator(device="cuda")`, pinned memory and `torch.cuda.Event`/`Stream`/`stream`/
`current_stream`/`synchronize` are stood in for while the mode is active.
"""
from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

TAG = "_fake_cuda"
PENDING = "_fake_cuda_pending"
CUDA = torch.device("cuda", 0)
CPU = torch.device("cpu")


class FakeDeviceMismatch(RuntimeError):
    pass


class HostReadBeforeSync(RuntimeError):
    pass


def on_device(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and getattr(t, TAG, False)


def _tag(t: torch.Tensor, value: bool = True) -> torch.Tensor:
    setattr(t, TAG, value)
    return t


def _is_cuda(device) -> bool:
    if device is None:
        return False
    if isinstance(device, int):
        return True
    return torch.device(device).type == "cuda"


_SYNC_READS = {torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.numpy, torch.Tensor.__float__,
               torch.Tensor.__int__, torch.Tensor.__bool__, torch.Tensor.__index__,
               torch.Tensor.__format__, torch.Tensor.__repr__}
_VALUE_SHAPED = {torch.nonzero, torch.Tensor.nonzero, torch.masked_select, torch.Tensor.masked_select,
                 torch.unique, torch.Tensor.unique, torch.argwhere, torch.Tensor.argwhere}
_CROSSING = {torch.Tensor.copy_, torch.Tensor.to, torch.Tensor.cpu, torch.Tensor.cuda}
_PROPS = {torch.Tensor.device.__get__: "device", torch.Tensor.is_cuda.__get__: "is_cuda"}


class _Event:
    def __init__(self, mode: "FakeCuda", *args, **kwargs):
        self.mode, self.recorded = mode, -1

    def record(self, stream=None):
        self.recorded = self.mode._copies

    def synchronize(self):
        self.mode._count_sync()
        self.mode._released = max(self.mode._released, self.recorded)

    def query(self) -> bool:
        return True

    def wait(self, stream=None):
        pass


class _Stream:
    def __init__(self, mode: "FakeCuda", *args, **kwargs):
        self.mode = mode

    def synchronize(self):
        self.mode._count_sync()
        self.mode._released = self.mode._copies

    def wait_stream(self, other):
        pass

    def wait_event(self, event):
        pass

    def record_event(self, event=None):
        event = event or _Event(self.mode)
        event.record()
        return event


_REAL_GENERATOR = torch.Generator


class _Generator(_REAL_GENERATOR):
    """`torch.Generator(device="cuda")` stands in as a CPU generator (a type, for annotations)."""

    def __new__(cls, device="cpu"):
        return _REAL_GENERATOR()


class FakeCuda(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.syncs = 0
        self.sync_ops: list[str] = []
        self._copies = 0     # non-blocking copies to the host so far (each numbered)
        self._released = 0   # copies up to this number are safe to read
        self._patches = contextlib.ExitStack()

    # ---- public -------------------------------------------------------------------------
    def put(self, obj):
        """Tag a tensor, or a module's parameters and buffers, as living on the device."""
        if isinstance(obj, torch.nn.Module):
            for t in list(obj.parameters()) + list(obj.buffers()):
                _tag(t)
            return obj
        return _tag(obj.clone())

    def reset(self) -> None:
        self.syncs, self.sync_ops = 0, []

    # ---- mode ---------------------------------------------------------------------------
    def __enter__(self):
        mode = self
        self._patches.enter_context(_patched(torch, "Generator", _Generator))
        for name, value in (("Event", lambda *a, **k: _Event(mode, *a, **k)),
                            ("Stream", lambda *a, **k: _Stream(mode, *a, **k)),
                            ("current_stream", lambda *a, **k: _Stream(mode)),
                            ("default_stream", lambda *a, **k: _Stream(mode)),
                            ("stream", lambda s=None: contextlib.nullcontext(s)),
                            ("synchronize", lambda *a, **k: _Stream(mode).synchronize()),
                            ("is_available", lambda: True)):
            self._patches.enter_context(_patched(torch.cuda, name, value))
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self._patches.close()

    def _count_sync(self, what: str = "synchronize") -> None:
        self.syncs += 1
        self.sync_ops.append(what)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in _PROPS:
            t = args[0]
            if _PROPS[func] == "device":
                return CUDA if on_device(t) else func(*args, **kwargs)
            return True if on_device(t) else func(*args, **kwargs)
        if func is torch.Tensor.data.__set__:
            func(*args, **kwargs)
            _tag(args[0], on_device(args[1]))
            return None
        if func in (torch.Tensor.to, torch.Tensor.cuda, torch.Tensor.cpu):
            return self._to(func, args, kwargs)
        if func in (torch.Tensor.pin_memory,):
            return args[0].clone()
        flat, _ = tree_flatten((args, kwargs))
        tensors = [a for a in flat if isinstance(a, torch.Tensor)]
        for t in (tensors[1:2] if func is torch.Tensor.copy_ else tensors):  # a copy_ may refill its dst
            if getattr(t, PENDING, 0) > self._released:
                raise HostReadBeforeSync(f"{_name(func)} reads a host buffer that a non_blocking copy "
                                         f"from the device is still filling (no event synchronized)")
        device_in = [t for t in tensors if on_device(t)]
        host_in = [t for t in tensors if not on_device(t) and t.dim() > 0]
        wants_cuda = _is_cuda(kwargs.get("device"))
        if wants_cuda or "pin_memory" in kwargs:
            kwargs.pop("pin_memory", None)
            if "device" in kwargs:
                kwargs["device"] = CPU
        if func is torch.Tensor.copy_:
            return self._copy(args, kwargs)
        if func in (torch.Tensor.__getitem__, torch.Tensor.__setitem__):
            _check_indexing(func, args)
        elif device_in and host_in and func not in _CROSSING:
            raise FakeDeviceMismatch(
                f"{_name(func)}: tensors on cuda:0 {[tuple(t.shape) for t in device_in]} and on cpu "
                f"{[tuple(t.shape) for t in host_in]} in one op")
        if func is torch.Tensor.__setitem__ and not on_device(args[0]) and on_device(args[2]):
            self._count_sync("__setitem__(cpu)")  # a blocking copy from the device into host memory
        elif device_in and func in _SYNC_READS:
            self._count_sync(_name(func))
        elif device_in and (func in _VALUE_SHAPED or (func is torch.Tensor.__getitem__ and _bool_index(args))):
            self._count_sync(_name(func))
        out = func(*args, **kwargs)
        if device_in or wants_cuda:
            for o in tree_flatten(out)[0]:
                if isinstance(o, torch.Tensor):
                    _tag(o)
        return out

    def _to(self, func, args, kwargs):
        t = args[0]
        if func is torch.Tensor.cuda:
            device, rest, non_blocking = CUDA, {}, kwargs.get("non_blocking", False)
        elif func is torch.Tensor.cpu:
            device, rest, non_blocking = CPU, {}, False
        else:
            device, dtype, non_blocking, memory_format = torch._C._nn._parse_to(*args[1:], **kwargs)
            rest = {k: v for k, v in (("dtype", dtype), ("memory_format", memory_format)) if v is not None}
        out = t.to(**rest) if rest else t
        if device is None:
            return _tag(out) if on_device(t) else out
        if _is_cuda(device):
            if on_device(t):
                return out
            return _tag(out.clone() if out is t else out)
        if on_device(t):  # to the host
            out = out.clone() if out is t else out
            _tag(out, False)
            if non_blocking:
                self._copies += 1
                setattr(out, PENDING, self._copies)
            else:
                self._count_sync(f"{_name(func)}(cpu)")
        return out

    def _copy(self, args, kwargs):
        dst, src = args[0], args[1]
        if on_device(src) and not on_device(dst):
            if kwargs.get("non_blocking") or (len(args) > 2 and args[2]):
                self._copies += 1
                setattr(dst, PENDING, self._copies)
            else:
                self._count_sync("copy_(cpu)")
        return torch.Tensor.copy_(*args, **kwargs)


def _check_indexing(func, args) -> None:
    """CUDA's rules: a host tensor takes no device indices; a device tensor takes host indices,
    but a tensor-indexed write into it needs its values on the device (or a host scalar)."""
    self, index = args[0], args[1]
    items = [i for i in tree_flatten(index)[0] if isinstance(i, torch.Tensor)]
    if not on_device(self):
        if any(on_device(i) for i in items):
            raise FakeDeviceMismatch(f"{_name(func)}: indexing a cpu tensor {tuple(self.shape)} with "
                                     f"indices on cuda:0")
        return
    value = args[2] if func is torch.Tensor.__setitem__ else None
    if (items and isinstance(value, torch.Tensor) and not on_device(value) and value.dim() > 0):
        raise FakeDeviceMismatch(f"{_name(func)}: writing cpu values {tuple(value.shape)} into a cuda:0 "
                                 f"tensor {tuple(self.shape)} at tensor indices")


def _bool_index(args) -> bool:
    idx = args[1] if len(args) > 1 else None
    items = idx if isinstance(idx, tuple) else (idx,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)


def _name(func) -> str:
    return getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))


@contextlib.contextmanager
def _patched(owner, name: str, value):
    missing = object()
    old = getattr(owner, name, missing)
    setattr(owner, name, value)
    try:
        yield
    finally:
        if old is missing:
            delattr(owner, name)
        else:
            setattr(owner, name, old)
