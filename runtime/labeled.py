"""Labeled tensors: a torch tensor whose trailing (base) dims are each described by a LabeledAxis.

``LabeledTensor(tensor, *axes)`` has ``len(axes)`` base dims (sized by the axes) and any number of
leading batch dims. :class:`LabeledVector` has one labeled base dim, :class:`LabeledMatrix` two
(rows, columns: e.g. d outputs / d inputs).

Everything that selects a part returns a *view* sharing storage with the original (writes through
it land in the original): ``x["state/S"]`` / :meth:`LabeledTensor.get` (typed view, reshaped to the
variable's base shape), :meth:`raw` (flat), :meth:`slice` (to a sub-axis), :meth:`LabeledMatrix.block`,
and the batch methods. :meth:`set` writes in place. User errors raise
:class:`modelc.runtime.errors.InputError` naming the variable.
"""
from __future__ import annotations

from numbers import Number
from typing import Mapping, Sequence

import torch

from modelc.runtime.errors import InputError, InternalError
from modelc.runtime.axis import LabeledAxis
from modelc.runtime.tensors import TypedTensor, align, broadcast_shapes, check_batch_name

__all__ = ["LabeledAxis", "LabeledTensor", "LabeledVector", "LabeledMatrix"]


def _check_names(names, batch_dim: int) -> tuple[str, ...] | None:
    if names is None:
        return None
    names = tuple(check_batch_name(n) for n in names)
    if len(names) != batch_dim or len(set(names)) != len(names):
        raise InputError(f"batch names {names} do not name the {batch_dim} batch dims (one distinct name each)")
    return names


def _rebuild(cls, tensor: torch.Tensor, axes, names) -> "LabeledTensor":
    """A labeled tensor from its parts (unpickling and copies: :meth:`LabeledTensor.__reduce__`)."""
    return LabeledTensor.__new__(cls)._init(tensor, axes, names)


#: (axes, names) -> the index ``tensor[index]`` that is :meth:`LabeledTensor.get`'s view, or ``()``
#: where a variable's base shape is not flat (a 4th-order tensor: ``get`` reshapes) or a name is a
#: sub-axis (``get`` says so); bounded, as a user may build axes in a loop
_INDEX: dict[tuple, tuple] = {}
_INDEX_MAX = 4096


def _index_of(axes: tuple[LabeledAxis, ...], names: tuple[str, ...]) -> tuple:
    """``(Ellipsis, k or slice(start, stop), ...)`` selecting one variable per labeled dim: an
    integer for a scalar (its dim dropped, as ``get``'s reshape drops it), a slice for a vector of
    components (SR2, vectors); ``()`` for any other item."""
    index: list = [Ellipsis]
    for axis, name in zip(axes, names):
        e = axis.entry(name)  # (an unknown name raises here, with the axis's suggestions)
        if not e.is_variable:
            return ()
        base = e.item.base_shape
        if not base:
            index.append(e.start)
        elif len(base) == 1:
            index.append(slice(e.start, e.stop))
        else:
            return ()
    return tuple(index)


def _shape(shape) -> tuple[int, ...]:
    if isinstance(shape, int):
        return (shape,)
    return tuple(shape)


class LabeledTensor:
    """A batched tensor with one :class:`LabeledAxis` per base dim (see the module docstring)."""

    __slots__ = ("tensor", "axes", "batch_names")

    def __init__(self, tensor: torch.Tensor, *axes: LabeledAxis, batch_names: Sequence[str] | None = None):
        if not isinstance(tensor, torch.Tensor):
            raise InputError(f"a labeled tensor wraps a torch.Tensor, got {tensor.__class__.__name__}")
        if not axes or not all(isinstance(a, LabeledAxis) for a in axes):
            raise InputError("a labeled tensor needs one or more LabeledAxis objects")
        if not tensor.is_floating_point():
            raise InputError(f"labeled tensors hold floating-point data, got dtype {tensor.dtype}")
        d = len(axes)
        sizes = tuple(a.size for a in axes)
        if tensor.dim() < d or tuple(tensor.shape[tensor.dim() - d:]) != sizes:
            raise InputError(f"tensor of shape {tuple(tensor.shape)} does not end in the axis sizes {sizes}")
        object.__setattr__(self, "tensor", tensor)
        object.__setattr__(self, "axes", tuple(axes))
        object.__setattr__(self, "batch_names", _check_names(batch_names, tensor.dim() - d))

    def __setattr__(self, key, value):
        raise AttributeError(f"{type(self).__name__} attributes are fixed; use set() to write values")

    def __reduce__(self):  # copy, deepcopy (the tensor copied) and pickle, past the fixed attributes
        return (_rebuild, (type(self), self.tensor, self.axes, self.batch_names))

    @classmethod
    def trusted(cls, tensor: torch.Tensor, axes: Sequence[LabeledAxis]) -> LabeledTensor:
        """A labeled view the runtime made itself (a floating tensor ending in the axes' sizes, no
        batch names): built without the checks a caller's tensor gets (a call builds two)."""
        self = cls.__new__(cls)
        object.__setattr__(self, "tensor", tensor)
        object.__setattr__(self, "axes", tuple(axes))
        object.__setattr__(self, "batch_names", None)
        return self

    def _new(self, tensor: torch.Tensor, axes: Sequence[LabeledAxis], names=None) -> LabeledTensor:
        cls = {1: LabeledVector, 2: LabeledMatrix}.get(len(axes), LabeledTensor)
        return LabeledTensor.__new__(cls)._init(tensor, axes, names)

    def _init(self, tensor, axes, names):
        LabeledTensor.__init__(self, tensor, *axes, batch_names=names)
        return self

    # -- shape, dtype, device ------------------------------------------------------------------
    @property
    def base_dim(self) -> int:
        return len(self.axes)

    @property
    def batch_dim(self) -> int:
        return self.tensor.dim() - len(self.axes)

    @property
    def batch_shape(self) -> torch.Size:
        return self.tensor.shape[: self.batch_dim]

    @property
    def base_shape(self) -> torch.Size:
        return self.tensor.shape[self.batch_dim:]

    @property
    def dtype(self) -> torch.dtype:
        return self.tensor.dtype

    @property
    def device(self) -> torch.device:
        return self.tensor.device

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(batch_shape={tuple(self.batch_shape)}, base_shape={tuple(self.base_shape)}, "
                f"{self.dtype}, {self.device})")

    # -- views ---------------------------------------------------------------------------------
    def _names(self, names) -> tuple[str, ...]:
        if isinstance(names, str):
            names = (names,)
        names = tuple(names)
        if len(names) != self.base_dim:
            raise InputError(f"{type(self).__name__} with {self.base_dim} labeled dims needs {self.base_dim} "
                             f"names, got {names!r}")
        return names

    def raw(self, *names: str) -> torch.Tensor:
        """The flat view of one item (variable or sub-axis) per labeled dim: ``(batch..., size...)``."""
        t = self.tensor
        for d, (axis, name) in enumerate(zip(self.axes, self._names(names))):
            start, stop = axis.span(name)
            t = t.narrow(self.batch_dim + d, start, stop - start)
        return t

    def get(self, *names: str) -> torch.Tensor:
        """The typed view of one variable per labeled dim, reshaped to ``batch + base shapes``
        (e.g. ``(batch..., 6)`` for an SR2, ``(batch..., 6, 6)`` for a d SR2 / d SR2 block)."""
        try:
            index = _INDEX.get((self.axes, names))
        except TypeError:  # an unhashable name: the checks below say what is wrong with it
            index = ()
        if index is None:
            index = _index_of(self.axes, self._names(names))
            if len(_INDEX) >= _INDEX_MAX:
                _INDEX.clear()
            _INDEX[(self.axes, names)] = index
        if index:  # one basic index: a view, as below, at a third of the cost (a result's reads)
            return self.tensor[index]
        names = self._names(names)
        base: list[int] = []
        for axis, name in zip(self.axes, names):
            base.extend(axis.type_of(name).base_shape)
        try:
            return self.raw(*names).view((*self.batch_shape, *base))
        except RuntimeError as e:  # splitting/squeezing base dims never needs a copy
            raise InternalError(f"labeled view of {names} needed a copy: {e}") from None

    def __getitem__(self, key) -> torch.Tensor:
        return self.get(*self._names(key))

    def set(self, *args) -> None:
        """``set(name..., value)``: write ``value`` (tensor, TypedTensor or number) into the view of
        one item per labeled dim, in place. The value's dtype and device must match; its shape must
        broadcast to the view's shape."""
        if len(args) != self.base_dim + 1:
            raise InputError(f"set takes {self.base_dim} name(s) and a value, got {len(args)} arguments")
        names, value = self._names(args[:-1]), args[-1]
        what = "/".join(names) if self.base_dim == 1 else str(names)
        allvars = all(a.is_variable(n) for a, n in zip(self.axes, names))
        target = self.get(*names) if allvars else self.raw(*names)
        if isinstance(value, TypedTensor):
            value = self._unwrap_named(value, what)
        if isinstance(value, Number) and not isinstance(value, bool):
            target.fill_(value)
            return
        if not isinstance(value, torch.Tensor):
            raise InputError(f"{what}: expected a tensor or a number, got {value.__class__.__name__}")
        _check_like(value, self.tensor, what)
        try:
            ok = broadcast_shapes(value.shape, target.shape) == target.shape
        except RuntimeError:
            ok = False
        if not ok:
            raise InputError(f"{what}: value of shape {tuple(value.shape)} does not broadcast to "
                             f"{tuple(target.shape)} (batch {tuple(self.batch_shape)} + base)")
        target.copy_(value)

    def __setitem__(self, key, value) -> None:
        self.set(*self._names(key), value)

    def _unwrap_named(self, value: TypedTensor, what: str) -> torch.Tensor:
        if value.batch_names is None or value.batch_dim == 0:
            return value.data
        if self.batch_names is None:
            raise InputError(f"{what}: value has named batch dims {value.batch_names} but this "
                             f"{type(self).__name__}'s batch dims are unnamed")
        return value.align_to(self.batch_names).data

    def slice(self, name: str, dim: int = 0) -> LabeledTensor:
        """View of the sub-axis ``name`` along labeled dim ``dim`` (same class, that axis replaced)."""
        if not 0 <= dim < self.base_dim:
            raise InputError(f"labeled dim {dim} out of range for {self.base_dim} labeled dims")
        axis = self.axes[dim].subaxis(name)
        start, stop = self.axes[dim].span(name)
        t = self.tensor.narrow(self.batch_dim + dim, start, stop - start)
        axes = self.axes[:dim] + (axis,) + self.axes[dim + 1:]
        return self._new(t, axes, self.batch_names)

    def typed(self, *names: str) -> TypedTensor:
        """:meth:`get` wrapped as a :class:`TypedTensor` (vectors only; keeps the batch names)."""
        if self.base_dim != 1:
            raise InputError("typed() is for labeled vectors; use get() on a matrix")
        name = self._names(names)[0]
        return TypedTensor(self.get(name), self.axes[0].type_of(name), self.batch_names)

    # -- batch ---------------------------------------------------------------------------------
    def batch_expand(self, *shape: int) -> LabeledTensor:
        """Expand the batch dims (a view; -1 keeps a size)."""
        shape = _shape(shape[0]) if len(shape) == 1 and not isinstance(shape[0], int) else shape
        keep = self.batch_names if len(shape) == self.batch_dim else None
        return self._new(self.tensor.expand((*shape, *self.base_shape)), self.axes, keep)

    def batch_reshape(self, *shape: int) -> LabeledTensor:
        """Reshape the batch dims (a view; an error if the layout would need a copy)."""
        shape = _shape(shape[0]) if len(shape) == 1 and not isinstance(shape[0], int) else shape
        try:
            t = self.tensor.view((*shape, *self.base_shape))
        except RuntimeError as e:
            raise InputError(f"cannot reshape batch {tuple(self.batch_shape)} to {tuple(shape)} without a copy "
                             f"({e}); call .contiguous() first") from None
        return self._new(t, self.axes)

    def batch_index(self, index) -> LabeledTensor:
        """Index the batch dims with ints/slices/None/Ellipsis (a view; names are dropped)."""
        if not isinstance(index, tuple):
            index = (index,)
        for i in index:
            if not (i is None or i is Ellipsis or isinstance(i, (int, slice))):
                raise InputError(f"batch_index takes ints, slices, None and Ellipsis, got {type(i).__name__}")
        if Ellipsis not in index:
            index = index + (Ellipsis,)
        return self._new(self.tensor[index + (slice(None),) * self.base_dim], self.axes)

    def named(self, *names: str) -> LabeledTensor:
        """The same storage with names for the batch dims."""
        return self._new(self.tensor, self.axes, names)

    def contiguous(self) -> LabeledTensor:
        return self._new(self.tensor.contiguous(), self.axes, self.batch_names)

    def clone(self) -> LabeledTensor:
        return self._new(self.tensor.clone(), self.axes, self.batch_names)

    def to(self, *args, **kwargs) -> LabeledTensor:
        """``torch.Tensor.to`` on the data (dtype/device conversion; a copy when they change)."""
        return self._new(self.tensor.to(*args, **kwargs), self.axes, self.batch_names)


class LabeledVector(LabeledTensor):
    """One labeled base dim: ``x["state/S"]``, ``x.set("state/S", v)``, ``x.slice("state")``."""

    __slots__ = ()

    def __init__(self, tensor: torch.Tensor, axis: LabeledAxis, batch_names: Sequence[str] | None = None):
        super().__init__(tensor, axis, batch_names=batch_names)

    @property
    def axis(self) -> LabeledAxis:
        return self.axes[0]

    @classmethod
    def zeros(cls, axis: LabeledAxis, batch_shape=(), *, dtype: torch.dtype = torch.float64, device=None,
              batch_names: Sequence[str] | None = None) -> LabeledVector:
        return cls(torch.zeros(*_shape(batch_shape), axis.size, dtype=dtype, device=device), axis, batch_names)

    @classmethod
    def empty(cls, axis: LabeledAxis, batch_shape=(), *, dtype: torch.dtype = torch.float64, device=None,
              batch_names: Sequence[str] | None = None) -> LabeledVector:
        return cls(torch.empty(*_shape(batch_shape), axis.size, dtype=dtype, device=device), axis, batch_names)

    @classmethod
    def from_dict(cls, axis: LabeledAxis, values: Mapping[str, object], *, dtype: torch.dtype | None = None,
                  device=None, batch_shape=None, fill_missing: bool = False) -> LabeledVector:
        """Assemble a new vector from ``{variable name: tensor | TypedTensor | number}``.

        Tensors carry batch dims in front of the variable's base shape; the batch shape is the
        broadcast of all of them (aligned by name if TypedTensors with named batch dims are given)
        unless ``batch_shape`` is given. dtype/device come from the first tensor (or the arguments)
        and every tensor must match. Missing variables are an error unless ``fill_missing``
        (zeros)."""
        unknown = [k for k in values if not (k in axis and axis.is_variable(k))]
        if unknown:
            raise InputError(f"unknown variable(s) {unknown}; the axis has {list(axis.variable_names)}")
        missing = [n for n in axis.variable_names if n not in values]
        if missing and not fill_missing:
            raise InputError(f"missing value(s) for {missing}")
        typed = {}
        for k, v in values.items():
            t = axis.type_of(k)
            if isinstance(v, TypedTensor):
                if v.type != t:
                    raise InputError(f"{k}: expected a {t} value, got a {v.type} TypedTensor")
                typed[k] = v
            elif isinstance(v, torch.Tensor):
                try:
                    typed[k] = TypedTensor(v, t)
                except InputError as e:
                    raise InputError(f"{k}: {e}") from None
            elif not (isinstance(v, Number) and not isinstance(v, bool)):
                raise InputError(f"{k}: expected a tensor or a number, got {v.__class__.__name__}")
        ref = next(iter(typed.values()), None)
        dtype = dtype if dtype is not None else (ref.dtype if ref is not None else torch.float64)
        device = torch.device(device) if device is not None else (ref.device if ref is not None else torch.device("cpu"))
        like = torch.empty(0, dtype=dtype, device=device)
        for k, v in typed.items():
            _check_like(v.data, like, k)
        names, aligned = align(*typed.values()) if typed else (None, [])
        if batch_shape is None:
            try:
                batch_shape = broadcast_shapes(*(a.batch_shape for a in aligned))
            except RuntimeError:
                raise InputError("batch shapes do not broadcast: " + ", ".join(
                    f"{k}{tuple(v.batch_shape)}" for k, v in typed.items())) from None
        out = cls.zeros(axis, batch_shape, dtype=dtype, device=device, batch_names=names)
        for (k, _), a in zip(typed.items(), aligned):
            out.set(k, a.data)
        for k, v in values.items():
            if k not in typed:
                out.set(k, v)
        return out

    def to_dict(self) -> dict[str, torch.Tensor]:
        """``{variable name: typed view}`` for every variable."""
        return {n: self.get(n) for n in self.axis.variable_names}


class LabeledMatrix(LabeledTensor):
    """Two labeled base dims (rows, cols): ``J["state/S", "forces/E"]``, ``J.block("state", "forces")``."""

    __slots__ = ()

    def __init__(self, tensor: torch.Tensor, row_axis: LabeledAxis, col_axis: LabeledAxis,
                 batch_names: Sequence[str] | None = None):
        super().__init__(tensor, row_axis, col_axis, batch_names=batch_names)

    @property
    def row_axis(self) -> LabeledAxis:
        return self.axes[0]

    @property
    def col_axis(self) -> LabeledAxis:
        return self.axes[1]

    @classmethod
    def zeros(cls, row_axis: LabeledAxis, col_axis: LabeledAxis, batch_shape=(), *,
              dtype: torch.dtype = torch.float64, device=None, batch_names=None) -> LabeledMatrix:
        t = torch.zeros(*_shape(batch_shape), row_axis.size, col_axis.size, dtype=dtype, device=device)
        return cls(t, row_axis, col_axis, batch_names)

    @classmethod
    def empty(cls, row_axis: LabeledAxis, col_axis: LabeledAxis, batch_shape=(), *,
              dtype: torch.dtype = torch.float64, device=None, batch_names=None) -> LabeledMatrix:
        t = torch.empty(*_shape(batch_shape), row_axis.size, col_axis.size, dtype=dtype, device=device)
        return cls(t, row_axis, col_axis, batch_names)

    @classmethod
    def from_dict(cls, row_axis: LabeledAxis, col_axis: LabeledAxis,
                  blocks: Mapping[tuple[str, str], torch.Tensor], batch_shape=None, *,
                  dtype: torch.dtype | None = None, device=None) -> LabeledMatrix:
        """Assemble ``{(row variable, col variable): block}``; absent blocks are zero. A block has
        shape ``batch + row base shape + col base shape``."""
        for key in blocks:
            if not (isinstance(key, tuple) and len(key) == 2):
                raise InputError(f"matrix blocks are keyed by (row, col) names, got {key!r}")
        shapes = []
        ref = None
        for (r, c), v in blocks.items():
            if not isinstance(v, torch.Tensor):
                raise InputError(f"block ({r}, {c}): expected a tensor, got {v.__class__.__name__}")
            nb = row_axis.type_of(r).base_dim + col_axis.type_of(c).base_dim
            shapes.append(v.shape[: v.dim() - nb])
            ref = v if ref is None else ref
        dtype = dtype if dtype is not None else (ref.dtype if ref is not None else torch.float64)
        device = device if device is not None else (ref.device if ref is not None else None)
        if batch_shape is None:
            try:
                batch_shape = broadcast_shapes(*shapes)
            except RuntimeError:
                raise InputError(f"block batch shapes do not broadcast: {[tuple(s) for s in shapes]}") from None
        out = cls.zeros(row_axis, col_axis, batch_shape, dtype=dtype, device=device)
        for (r, c), v in blocks.items():
            out.set(r, c, v)
        return out

    def block(self, row: str, col: str) -> LabeledMatrix:
        """View of the (row sub-axis, col sub-axis) block; ``""`` is a whole axis."""
        return self.slice(row, 0).slice(col, 1)

    def to_dict(self) -> dict[tuple[str, str], torch.Tensor]:
        """``{(row variable, col variable): typed view}`` for every block."""
        return {(r, c): self.get(r, c) for r in self.row_axis.variable_names for c in self.col_axis.variable_names}


def _check_like(value: torch.Tensor, like: torch.Tensor, what: str) -> None:
    if value.dtype != like.dtype:
        raise InputError(f"{what}: dtype {value.dtype} does not match {like.dtype}")
    if value.device != like.device:
        raise InputError(f"{what}: device {value.device} does not match {like.device}")


def sub_matrix(jac: LabeledMatrix, rows: LabeledAxis, cols: LabeledAxis) -> LabeledMatrix:
    """The rows ``rows`` and columns ``cols`` of ``jac`` (variables of its axes), as a new matrix."""
    return LabeledMatrix.from_dict(rows, cols, {(r, c): jac[r, c] for r in rows.variable_names
                                                for c in cols.variable_names})
