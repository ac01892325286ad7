"""The call path of a compiled model: inputs read where they lie, result buffers allocated or taken
from ``out=`` (an earlier result of the same model), checked before anything is written.

A call hands each backend one ``(B, size)`` tensor per input variable (:func:`input_views`): a view of
the caller's tensor whenever its layout allows (components contiguous and the batch dims collapsible
into one stride; an input broadcast over the batch has stride 0), else a copy. The C backend reads
them in place, so does the Triton kernel (one pointer and row stride per variable); the PyTorch
function takes them packed into one ``X`` (:func:`pack`).

Buffers (:class:`Buffers`): ``Y (B, ny)``, ``J (B, rows, cols)`` or None, and for implicit models the
status ``converged`` (bool, written as 0/1 bytes), ``iterations`` (int32) and ``residual_norm`` (the
model's dtype), all ``(B,)``: what the C entry points write, and what :class:`~modelc.runtime.model.Result`
wraps without copying.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Number
from collections.abc import Mapping
from typing import Any

import torch

from modelc.runtime.errors import InputError
from modelc.runtime.tensors import broadcast_shapes


@dataclass(frozen=True)
class Buffers:
    Y: torch.Tensor
    J: torch.Tensor | None
    status: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None


def allocate(model, B: int, jshape: tuple[int, int] | None) -> Buffers:
    """Uninitialised buffers for ``B`` points: on the CPU from the model's :class:`BufferPool`
    (blocks of earlier results that nothing refers to any more, see :mod:`modelc.runtime.bufferpool`),
    else fresh."""
    pool = model._pool if model.device.type == "cpu" else None
    if pool is None:
        def empty(shape, dtype):
            return torch.empty(shape, dtype=dtype, device=model.device)
    else:
        empty = pool.empty
    Y = empty((B, model.output_axis.size), model.dtype)
    J = empty((B, *jshape), model.dtype) if jshape else None
    status = None
    if model.IMPLICIT:
        nbytes = B * (model.dtype.itemsize + 4 + 1)
        if pool is not None and nbytes >= pool.min_bytes:
            status = status_views(pool.empty((nbytes,), torch.uint8), B, model.dtype)
        else:  # (three empty tensors cost less than three views when the caches are cold)
            status = (empty((B,), torch.bool), empty((B,), torch.int32), empty((B,), model.dtype))
    return Buffers(Y, J, status)


def status_views(raw: torch.Tensor, B: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(converged, iterations, residual norm)`` of ``B`` points as views of one uint8 block
    ``raw``: the norms first (aligned as the block is), then the int32 counts, then the bools. For a
    status the pool keeps, one claim instead of three, so a step loop's pool holds three sizes a
    call (outputs, Jacobian, status), not five, and the sizes a sub-stepped call adds fit beside them."""
    n_r, n_i = B * dtype.itemsize, B * 4
    return raw[n_r + n_i:].view(torch.bool), raw[n_r:n_r + n_i].view(torch.int32), raw[:n_r].view(dtype)


def input_views(model, inputs) -> tuple[list[torch.Tensor], torch.Size]:
    """One ``(B, size)`` tensor per input variable in input-axis order, and the batch shape."""
    from modelc.runtime.labeled import LabeledVector

    axis = model.input_axis
    names = axis.variable_names
    if isinstance(inputs, LabeledVector):
        if inputs.axis == axis:
            model._check_tensor("inputs", inputs.tensor)
            bs = inputs.batch_shape
            X = inputs.tensor.reshape(math.prod(bs), axis.size)
            return split(model, X), bs
        missing = [n for n in names if n not in inputs.axis]
        if missing:
            raise InputError(f"model {model.NAME}: the input vector lacks {', '.join(missing)}")
        inputs = {n: inputs[n] for n in names}
    if not isinstance(inputs, Mapping):
        raise InputError(f"model {model.NAME}: inputs must be a LabeledVector or a dict of tensors by "
                         f"name, got {type(inputs).__name__}")
    if len(inputs) != len(names) or any(k not in inputs for k in names):
        unknown = [k for k in inputs if k not in names]
        missing = [k for k in names if k not in inputs]
        parts = ([f"missing input(s) {', '.join(missing)}"] if missing else []) + \
            ([f"unknown input(s) {', '.join(map(str, unknown))}"] if unknown else [])
        raise InputError(f"model {model.NAME}: {'; '.join(parts)}; its inputs are {', '.join(names)}")
    values, shapes = [], []
    dtype, device = model.dtype, model.device
    # (the loops read as few tensor attributes as they can: each costs ~0.1 us, ``.device.type`` 0.3)
    for k, bd, base, n, t in _input_types(model, axis):
        v = inputs[k]
        if not isinstance(v, torch.Tensor):
            if not isinstance(v, Number):
                raise InputError(f"model {model.NAME}: input {k} must be a tensor, got {type(v).__name__}")
            v = torch.tensor(float(v), dtype=dtype, device=device)
        if v.dtype is not dtype or v.device != device:
            model._check_tensor(f"input {k}", v)  # raises unless the devices are one ("cuda", "cuda:0")
        shape = v.shape
        nb = len(shape) - bd
        if nb < 0 or shape[nb:] != base:
            raise InputError(f"model {model.NAME}: input {k} is a {t.name}: its shape must end in "
                             f"{base}, got {tuple(shape)}")
        values.append((v, base, n))
        shapes.append(shape[:nb])
    bs = shapes[0]
    if not all(s == bs for s in shapes):
        try:
            bs = broadcast_shapes(*shapes)
        except RuntimeError:
            raise InputError(f"model {model.NAME}: input batch shapes do not broadcast: " + ", ".join(
                f"{k} {tuple(s)}" for k, s in zip(names, shapes))) from None
    B = math.prod(bs)
    views = []
    for (v, base, n), s in zip(values, shapes):
        if s != bs:
            v = v.expand(*bs, *base)
        shape = v.shape
        if len(shape) != 2 or shape[0] != B or shape[1] != n:
            v = v.reshape(B, n)  # a view when the batch dims collapse (a broadcast: stride 0)
        if n > 1 and v.stride()[1] != 1:
            v = v.contiguous()
        views.append(v)
    return views, torch.Size(bs)


@dataclass(frozen=True)
class Plan:
    """How the C kernel reads one kind of inputs: what :func:`input_views` and the call's checks
    found the first time a call had them (:func:`plan`), so that a later call with inputs of the same
    kind (:func:`signature`) only reads each tensor's address (``CompiledModel.__call__``).
    ``offsets``: per input, in axis order, the bytes from the tensor's data to what the kernel reads;
    ``strides``: its row stride in elements (0: one row for every point); ``moved``: elements the
    inputs move (``cbuild.pack_tail`` adds the parameters', outputs' and Jacobian's); ``recipes``:
    per input, how :func:`input_views` made its ``(B, size)`` view (None: the tensor itself; else the
    shape it was expanded to, or None, then the reshape), for the Triton launch, which takes views;
    ``constant``: the variant's Jacobian depends on the parameters only (``CONSTANT_JACOBIAN``:
    computed for one point and broadcast when the parameters are shared, as the regular call does)."""
    variant: str | None
    axes: tuple | None  # the Jacobian's (rows, columns); None: no derivatives
    bs: torch.Size
    jshape: tuple[int, int] | None
    names: tuple[str, ...]
    offsets: tuple[int, ...]
    strides: tuple[int, ...]
    moved: int
    recipes: tuple
    constant: bool

    def words(self, inputs) -> list[int]:
        """The inputs' argument words (pointers, then row strides; see ``cbuild.pack_args``)."""
        ptrs = [inputs[k].data_ptr() + o for k, o in zip(self.names, self.offsets)]
        return ptrs + list(self.strides) if ptrs else [0, 0]

    def views(self, inputs) -> list[torch.Tensor]:
        """The inputs' ``(B, size)`` views, made as :func:`input_views` made them (no checks)."""
        out = []
        for k, r in zip(self.names, self.recipes):
            v = inputs[k]
            if r is not None:
                if r[0] is not None:
                    v = v.expand(r[0])
                v = v.reshape(r[1])
            out.append(v)
        return out


def signature(model, inputs: dict) -> tuple | None:
    """The kind of a call's inputs, a key for its :class:`Plan`: their shapes and strides in axis
    order. None unless every input is a plain tensor of the model's dtype on its device (not a
    number, a subclass or a named batch) that does not require grad while grad is enabled: such a
    call takes the checked path."""
    types = _input_types(model, model.input_axis)
    if len(inputs) != len(types):
        return None
    dtype, grad, device = model.dtype, torch.is_grad_enabled(), model.device
    cpu = device.type == "cpu"
    if not cpu and device.index is None:  # "cuda": the current device (as same_device reads it)
        device = torch.device(device.type, torch.cuda.current_device())
    sig = []
    for k, *_ in types:
        v = inputs.get(k)
        if type(v) is not torch.Tensor or v.dtype is not dtype or (grad and v.requires_grad) or \
                not (v.is_cpu if cpu else v.device == device):
            return None
        sig.append((v.shape, v.stride()))
    return tuple(sig)


def plan(model, inputs: dict, request) -> Plan | None:
    """The :class:`Plan` of a call with ``inputs`` (which a regular call has just checked) and the
    derivative ``request`` (``CompiledModel._derivative_request``), or None when such a call must
    take the regular path: the PyTorch backend, a model whose C calls check the inputs for NaN and
    infinity on the host (a C kernel that does not mark them itself, other than an affine model's,
    which propagates them), a block of a variant's Jacobian, or an input that is read from a copy
    (components not contiguous) rather than where it lies."""
    if model.backend not in ("c", "triton") or (model.backend == "c" and (
            model.IMPLICIT or not model.CONSTANT_JACOBIAN) and not model.C_MARKS_NONFINITE):
        return None
    variant = request[0] if request else None
    axes = None if request is None else request[1]
    if variant is not None and model._variant_axes(variant) != axes:
        return None
    views, bs = input_views(model, inputs)
    names = model.input_axis.variable_names
    B = math.prod(bs)
    offsets, strides, recipes, moved = [], [], [], 0
    for (name, _, base, n, _), view in zip(_input_types(model, model.input_axis), views):
        given = inputs[name]
        if view.untyped_storage().data_ptr() != given.untyped_storage().data_ptr():
            return None
        offsets.append(view.data_ptr() - given.data_ptr())
        rows, size = view.shape
        one = rows == 1 or view.stride()[0] == 0
        strides.append(0 if one else view.stride()[0])
        moved += size if one else rows * size
        if view is given:
            recipes.append(None)
        else:
            expanded = given.shape[:given.dim() - len(base)] != bs
            recipes.append(((*bs, *base) if expanded else None, (B, n)))
    return Plan(variant, axes, torch.Size(bs), model._jacobian_shape(variant), tuple(names), tuple(offsets),
                tuple(strides), moved, tuple(recipes), variant in model.CONSTANT_JACOBIAN)


def _input_types(model, axis) -> tuple:
    """``((name, base dims, base shape, size, TensorType), ...)`` of the model's input axis, in axis
    order (memoised on the model)."""
    hit = model.__dict__.get("_input_types")
    if hit is None or hit[0] is not axis:
        types = ((n, axis.type_of(n)) for n in axis.variable_names)
        hit = model.__dict__["_input_types"] = (axis, tuple((n, t.base_dim, tuple(t.base_shape), t.size, t)
                                                             for n, t in types))
    return hit[1]


def split(model, X: torch.Tensor) -> list[torch.Tensor]:
    """The per-variable column views of a packed ``X (B, nx)``."""
    axis = model.input_axis
    return [X[:, slice(*axis.span(n))] for n in axis.variable_names]


def pack(model, views: list[torch.Tensor], B: int) -> torch.Tensor:
    """``X (B, nx)`` from per-variable tensors (a view when they are the columns of one tensor)."""
    if len(views) == 1:
        return views[0] if views[0].stride(-1) == 1 else views[0].contiguous()
    X = torch.empty(B, model.input_axis.size, dtype=model.dtype, device=model.device)
    a = 0
    for v in views:
        X[:, a:a + v.shape[1]] = v
        a += v.shape[1]
    return X


def same_device(a: torch.device, b: torch.device) -> bool:
    """Whether tensors on ``a`` and ``b`` are on one device: "cuda" (no index, as a model built with
    device="cuda" holds it) is the current CUDA device, which is where such a tensor lands."""
    if a.type != b.type:
        return False
    if a.type != "cuda" or a.index == b.index:
        return True
    current = torch.cuda.current_device()
    return (current if a.index is None else a.index) == (current if b.index is None else b.index)


def out_buffers(model, out: Any, bs: torch.Size, axes) -> Buffers:
    """The buffers of ``out`` (an earlier result of this model) for a call over batch shape ``bs``
    returning a Jacobian over ``axes`` (rows, columns) or none (None); an :class:`InputError` naming
    what does not match, before anything is written."""
    from modelc.runtime.model import Result

    who = f"model {model.NAME}: out="
    if not isinstance(out, Result):
        raise InputError(f"{who} must be the result of an earlier call of this model, got {type(out).__name__}")
    if out.producer != (model.NAME, model.SPEC_HASH):
        raise InputError(f"{who} is a result of model {out.producer[0] if out.producer else '(unknown)'}, "
                         f"not of {model.NAME}")

    device = model.device

    def check(what: str, t: torch.Tensor, shape, dtype) -> None:
        if t.dtype is not dtype:
            raise InputError(f"{who} holds {what} of dtype {t.dtype}; this call writes {dtype}")
        if t.device != device and not same_device(t.device, device):
            raise InputError(f"{who} holds {what} on {t.device}; this call runs on {device}")
        if t.shape != tuple(shape):
            raise InputError(f"{who} holds {what} of shape {tuple(t.shape)}; this call needs {tuple(shape)} "
                             f"(batch shape {tuple(bs)})")

    B = math.prod(bs)
    Y = out.outputs.tensor
    check("outputs", Y, (*bs, model.output_axis.size), model.dtype)
    jac = out._jacobian
    if (jac is None) != (axes is None):
        raise InputError(f"{who} was computed {'without' if jac is None else 'with'} derivatives; this call "
                         f"asks for {'some' if axes is not None else 'none'}: pass a result of the same kind of call")
    J = None
    if axes is not None:
        if (jac.row_axis, jac.col_axis) != tuple(axes):
            raise InputError(f"{who} holds a Jacobian over other rows or columns than this call computes")
        check("the Jacobian", jac.tensor, (*bs, axes[0].size, axes[1].size), model.dtype)
        J = jac.tensor if jac.tensor.dim() == 3 else jac.tensor.reshape(B, axes[0].size, axes[1].size)
    status = None
    if model.IMPLICIT:
        st = out.status
        if st is None:
            raise InputError(f"{who} has no status; results of {model.NAME} always have one")
        check("the converged flags", st.converged, bs, torch.bool)
        check("the iteration counts", st.iterations, bs, torch.int32)
        check("the residual norms", st.residual_norm, bs, model.dtype)
        status = tuple(t if t.dim() == 1 else t.reshape(B) for t in (st.converged, st.iterations, st.residual_norm))
    parts = [("outputs", Y, False), ("Jacobian", None if jac is None else jac.tensor, True)]
    if model.IMPLICIT:
        parts += [("status", t, False) for t in (out.status.converged, out.status.iterations,
                                                  out.status.residual_norm)]
    for name, t, may_broadcast in parts:
        if t is not None and not (t.is_contiguous() or (may_broadcast and _broadcast(t, len(bs)))):
            raise InputError(f"{who} its {name} are not a buffer this call can write in place (not contiguous)")
    return Buffers(Y if Y.dim() == 2 else Y.reshape(B, -1), J, status)  # (a 1-d batch: no view to make)


def _broadcast(t: torch.Tensor, nb: int) -> bool:
    """The stride-0 broadcast of one point's block (a constant Jacobian) over ``nb`` batch dims."""
    return all(s == 0 for s in t.stride()[:nb]) and t[(0,) * nb].is_contiguous()
