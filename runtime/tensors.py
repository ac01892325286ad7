"""Typed batched tensors with optionally named batch dimensions.

A :class:`TypedTensor` is a ``torch.Tensor`` (``.data``) plus its :class:`TensorType` plus, optionally,
a name for each batch dimension. The *base* dimensions are the trailing ones fixed by the type
(``()`` for Scalar, ``(6,)`` for SR2, ``(6, 6)`` for SSR4, ...); everything before them is *batch*.

Named batch dimensions (in the spirit of PhiFlow): when two tensors with named batch dims meet in an
operation they are aligned by name, never by position. The rules, in full:

1. A tensor's batch dims are either all named (distinct names, no whitespace/quotes/'/') or all unnamed.
2. Named with named: the result's batch names are the first operand's names followed by the names of
   the second operand that the first lacks, in the second operand's order (folded left to right for
   more operands). A name present in both must have the same size there, else an ``InputError``
   naming the dimension and both sizes. Absent dims broadcast (the operand is constant along them).
3. A tensor with no batch dims at all (unnamed, batch shape ``()``) combines with anything.
4. Unnamed with unnamed: ordinary torch broadcasting of the batch shapes.
5. Named with unnamed-but-batched: an ``InputError`` (name the unnamed one with :meth:`named`).

So ``E`` batched over ``('samples',)`` times a strain batched over ``('points',)`` is batched over
``('samples', 'points')`` and ``strain * E`` over ``('points', 'samples')``.

All batch methods (:meth:`batch_expand`, :meth:`batch_reshape`, :meth:`batch_index`, :meth:`named`,
:meth:`align_to`) return views of the same storage.
"""
from __future__ import annotations

from typing import Sequence

import torch

from modelc.runtime.errors import InputError
from modelc.runtime.types import TYPES, Scalar, SR2, SSR4, TensorType

_BAD_NAME_CHARS = set("'\"`/")


def check_batch_name(name: str) -> str:
    """Validate one batch-dimension name (non-empty, no whitespace, quotes or '/')."""
    if not isinstance(name, str) or not name or any(c.isspace() or c in _BAD_NAME_CHARS for c in name):
        raise InputError(f"bad batch dimension name {name!r}: names must be non-empty and contain no "
                         "whitespace, quotes or '/'")
    return name


def _as_type(t: TensorType | str) -> TensorType:
    if isinstance(t, TensorType):
        return t
    if isinstance(t, str) and t in TYPES:
        return TYPES[t]
    raise InputError(f"unknown tensor type {t!r}; known types: {', '.join(TYPES)}")


class TypedTensor:
    """A batched tensor of one :class:`TensorType`, with optional batch-dimension names."""

    __slots__ = ("data", "type", "batch_names")

    def __init__(self, data: torch.Tensor, type: TensorType | str, batch_names: Sequence[str] | None = None):
        ttype = _as_type(type)
        if not isinstance(data, torch.Tensor):
            raise InputError(f"{ttype} tensor: expected a torch.Tensor, got {data.__class__.__name__}")
        nb = ttype.base_dim
        if data.dim() < nb or tuple(data.shape[data.dim() - nb:]) != ttype.base_shape:
            raise InputError(f"a {ttype} tensor needs trailing (base) shape {ttype.base_shape}, "
                             f"got shape {tuple(data.shape)}")
        names = None
        if batch_names is not None:
            names = tuple(check_batch_name(n) for n in batch_names)
            if len(names) != data.dim() - nb:
                raise InputError(f"{len(names)} batch names {names} for a {ttype} tensor with "
                                 f"{data.dim() - nb} batch dims (shape {tuple(data.shape)})")
            if len(set(names)) != len(names):
                raise InputError(f"duplicate batch dimension names {names}")
        object.__setattr__(self, "data", data)
        object.__setattr__(self, "type", ttype)
        object.__setattr__(self, "batch_names", names)

    def __setattr__(self, key, value):
        raise AttributeError("TypedTensor is immutable (write into .data to change values)")

    # -- shape ---------------------------------------------------------------------------------
    @property
    def batch_dim(self) -> int:
        return self.data.dim() - self.type.base_dim

    @property
    def batch_shape(self) -> torch.Size:
        return self.data.shape[: self.batch_dim]

    @property
    def base_shape(self) -> torch.Size:
        return self.data.shape[self.batch_dim:]

    @property
    def dtype(self) -> torch.dtype:
        return self.data.dtype

    @property
    def device(self) -> torch.device:
        return self.data.device

    @property
    def named_shape(self) -> dict[str, int] | None:
        """``{name: size}`` of the batch dims, or None when they are unnamed."""
        if self.batch_names is None:
            return None
        return dict(zip(self.batch_names, self.batch_shape))

    def __repr__(self) -> str:
        b = ("(" + ", ".join(f"{n}={s}" for n, s in zip(self.batch_names, self.batch_shape)) + ")"
             if self.batch_names is not None else str(tuple(self.batch_shape)))
        return f"TypedTensor({self.type}, batch={b}, {self.dtype}, {self.device})"

    # -- views -------------------------------------------------------------------------------
    def named(self, *names: str) -> TypedTensor:
        """The same data with these batch-dimension names (``()`` for none)."""
        return TypedTensor(self.data, self.type, names)

    def unnamed(self) -> TypedTensor:
        return TypedTensor(self.data, self.type)

    def batch_expand(self, *shape: int) -> TypedTensor:
        """Expand the batch dims to ``shape`` (a view; -1 keeps a size). Names are dropped if the
        number of batch dims changes."""
        shape = _shape_arg(shape)
        data = self.data.expand((*shape, *self.type.base_shape))
        keep = self.batch_names if len(shape) == self.batch_dim else None
        return TypedTensor(data, self.type, keep)

    def batch_reshape(self, *shape: int) -> TypedTensor:
        """Reshape the batch dims (a view; raises if the layout needs a copy). Names are dropped."""
        shape = _shape_arg(shape)
        try:
            data = self.data.view((*shape, *self.type.base_shape))
        except RuntimeError as e:
            raise InputError(f"cannot reshape the batch dims {tuple(self.batch_shape)} of a {self.type} "
                             f"tensor to {tuple(shape)} without a copy ({e}); call .contiguous() first") from None
        return TypedTensor(data, self.type)

    def batch_index(self, index) -> TypedTensor:
        """Index the batch dims with ints/slices/None/Ellipsis (basic indexing: a view).

        Names survive for dims that are sliced; dims indexed by an int disappear with their name."""
        if not isinstance(index, tuple):
            index = (index,)
        for i in index:
            if not (i is None or i is Ellipsis or isinstance(i, (int, slice))):
                raise InputError(f"batch_index takes ints, slices, None and Ellipsis (views only), got "
                                 f"{type(i).__name__}")
        if Ellipsis not in index:
            index = index + (Ellipsis,)
        k = index.index(Ellipsis)
        nspec = sum(1 for i in index if i is not None and i is not Ellipsis)
        if nspec > self.batch_dim:
            raise InputError(f"too many batch indices ({nspec}) for batch shape {tuple(self.batch_shape)}")
        # everything after the Ellipsis applies to the last batch dims: put the base dims behind it
        full = index[:k] + (Ellipsis,) + index[k + 1:] + (slice(None),) * self.type.base_dim
        names = None
        if self.batch_names is not None:
            names = self._names_after(index[:k], index[k + 1:])
        return TypedTensor(self.data[full], self.type, names)

    def _names_after(self, head, tail) -> tuple[str, ...] | None:
        if any(i is None for i in head + tail):
            return None  # a new dim would need a name: drop names
        nh = len(head)
        nt = len(tail)
        keep = []
        for d, name in enumerate(self.batch_names):
            if d < nh:
                if isinstance(head[d], slice):
                    keep.append(name)
            elif d >= self.batch_dim - nt:
                if isinstance(tail[d - (self.batch_dim - nt)], slice):
                    keep.append(name)
            else:
                keep.append(name)
        return tuple(keep)

    def align_to(self, names: Sequence[str], sizes: Sequence[int] | None = None) -> TypedTensor:
        """A view batched over exactly ``names`` (a superset of this tensor's names, any order):
        dims are permuted, missing ones inserted with size 1 (or expanded to ``sizes``)."""
        names = tuple(names)
        mine = self.batch_names if self.batch_names is not None else ()
        if self.batch_names is None and self.batch_dim:
            raise InputError(f"cannot align unnamed batch dims {tuple(self.batch_shape)} to names {names}; "
                             "name them first with .named(...)")
        missing = [n for n in mine if n not in names]
        if missing:
            raise InputError(f"cannot align batch dims {mine} to {names}: {missing} would be lost")
        nb = self.type.base_dim
        perm = [mine.index(n) for n in names if n in mine]
        data = self.data.permute(*perm, *range(self.batch_dim, self.batch_dim + nb))
        data = _unsqueeze_missing(data, [n in mine for n in names])
        if sizes is not None:
            data = data.expand((*sizes, *self.type.base_shape))
        return TypedTensor(data, self.type, names)

    # -- arithmetic (batch dims aligned by name) ------------------------------------------------
    def _binary(self, other, op, result_type: TensorType | None = None, base_rhs: int | None = None):
        if isinstance(other, (int, float)):
            return TypedTensor(op(self.data, other), self.type, self.batch_names)
        if not isinstance(other, TypedTensor):
            raise InputError(f"cannot combine a {self.type} TypedTensor with {type(other).__name__}; wrap "
                             "it in TypedTensor(data, type)")
        names, (a, b) = align(self, other)
        rt = result_type or self.type
        return TypedTensor(op(a.data, b.data), rt, names)

    def _elementwise(self, other, op, sym: str):
        if isinstance(other, TypedTensor) and other.type != self.type:
            if other.type == Scalar:
                return self._binary(other, lambda a, b: op(a, b.reshape(b.shape + (1,) * self.type.base_dim)))
            if self.type == Scalar:
                return other._binary(self, lambda a, b: op(b.reshape(b.shape + (1,) * other.type.base_dim), a),
                                     other.type)._reorder(self, other)
            raise InputError(f"cannot {sym} a {self.type} and a {other.type} (types must match, or one be Scalar)")
        return self._binary(other, op)

    def _reorder(self, first: TypedTensor, second: TypedTensor) -> TypedTensor:
        # keep the left-first name order of rule 2 when the operands were swapped internally
        if self.batch_names is None:
            return self
        names, _ = align(first, second)
        return self.align_to(names)

    def __add__(self, o):
        return self._elementwise(o, torch.add, "add")

    def __radd__(self, o):
        return self.__add__(o)

    def __sub__(self, o):
        return self._elementwise(o, torch.sub, "subtract")

    def __rsub__(self, o):
        return TypedTensor(o - self.data, self.type, self.batch_names)

    def __mul__(self, o):
        return self._elementwise(o, torch.mul, "multiply")

    def __rmul__(self, o):
        return self.__mul__(o)

    def __truediv__(self, o):
        return self._elementwise(o, torch.div, "divide")

    def __neg__(self):
        return TypedTensor(-self.data, self.type, self.batch_names)

    def ddot(self, other: TypedTensor) -> TypedTensor:
        """Double contraction ``A : B`` of two SR2 (Mandel: a dot product) -> Scalar."""
        if self.type != SR2 or not isinstance(other, TypedTensor) or other.type != SR2:
            raise InputError(f"ddot needs two SR2 tensors, got {self.type} and "
                             f"{getattr(other, 'type', type(other).__name__)}")
        return self._binary(other, lambda a, b: (a * b).sum(-1), Scalar)

    def __matmul__(self, other: TypedTensor) -> TypedTensor:
        """SSR4 @ SR2 -> SR2 (``C : e``) and SSR4 @ SSR4 -> SSR4."""
        if self.type != SSR4 or not isinstance(other, TypedTensor) or other.type not in (SR2, SSR4):
            raise InputError(f"@ needs SSR4 @ SR2 or SSR4 @ SSR4, got {self.type} @ "
                             f"{getattr(other, 'type', type(other).__name__)}")
        if other.type == SR2:
            return self._binary(other, lambda a, b: (a @ b.unsqueeze(-1)).squeeze(-1), SR2)
        return self._binary(other, torch.matmul, SSR4)

    # torch functions see the raw data: torch.allclose(t, ref), torch.sin(t), ... return torch.Tensors
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return func(*_unwrap(args), **_unwrap(kwargs or {}))


def _unwrap(x):
    if isinstance(x, TypedTensor):
        return x.data
    if isinstance(x, (list, tuple)):
        return type(x)(_unwrap(i) for i in x)
    if isinstance(x, dict):
        return {k: _unwrap(v) for k, v in x.items()}
    return x


def _unsqueeze_missing(data: torch.Tensor, present: list[bool]) -> torch.Tensor:
    for d, p in enumerate(present):
        if not p:
            data = data.unsqueeze(d)
    return data


def _shape_arg(shape) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
        return tuple(shape[0])
    return tuple(shape)


def align(*tensors: TypedTensor) -> tuple[tuple[str, ...] | None, list[TypedTensor]]:
    """Align typed tensors' batch dims (rules in the module docstring).

    Returns the result's batch names (None when unnamed) and one broadcastable view per tensor
    (named case: each batched over exactly those names, size 1 where it is constant)."""
    named = [t for t in tensors if t.batch_names is not None and t.batch_dim > 0]
    if not named:
        return None, list(tensors)
    for t in tensors:
        if t.batch_names is None and t.batch_dim > 0:
            raise InputError(f"cannot combine named batch dims {named[0].named_shape} with unnamed batch dims "
                             f"of shape {tuple(t.batch_shape)}; name them with .named(...)")
    sizes: dict[str, int] = {}
    for t in tensors:
        for n, s in zip(t.batch_names or (), t.batch_shape):
            if n in sizes and sizes[n] != s:
                raise InputError(f"batch dimension {n!r} has size {sizes[n]} in one operand and {s} in another")
            sizes.setdefault(n, s)
    names = tuple(sizes)
    return names, [t.align_to(names) for t in tensors]


def broadcast_shapes(*shapes) -> torch.Size:
    """NumPy broadcasting of batch shapes (RuntimeError when they do not broadcast), as
    ``torch.broadcast_shapes`` computes it: that one imports SymPy on first use (through
    ``torch.fx``), and the runtime must not load it."""
    ndim = max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for s in shapes:
        for i, d in enumerate(tuple(s)[::-1]):
            d = int(d)
            if d < 0:
                raise RuntimeError(f"negative dimension in shape {tuple(s)}")
            j = ndim - 1 - i
            if out[j] == 1:
                out[j] = d
            elif d != 1 and d != out[j]:
                raise RuntimeError(f"shapes {[tuple(x) for x in shapes]} do not broadcast")
    return torch.Size(out)


def broadcast_batch(*tensors: TypedTensor) -> tuple[tuple[str, ...] | None, torch.Size]:
    """The common batch names and batch shape of typed tensors (rules in the module docstring)."""
    names, aligned = align(*tensors)
    try:
        shape = broadcast_shapes(*(t.batch_shape for t in aligned))
    except RuntimeError:
        raise InputError("batch shapes do not broadcast: "
                         + ", ".join(f"{t.type}{tuple(t.batch_shape)}" for t in aligned)) from None
    return names, shape
