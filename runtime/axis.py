"""LabeledAxis: an immutable, validated description of a flat labeled axis (NEML2's idea).

An axis is an ordered list of *items*; an item is a *variable* (a label and a :class:`TensorType`)
or a *sub-axis* (a label and a nested :class:`LabeledAxis`). Items are stored one after another, so
every item, sub-axes included, occupies a contiguous span ``[start, stop)`` of the flat axis.
Qualified names join labels with ``/``: ``old_state/internal/ep``.

Rules checked on construction (errors are :class:`modelc.runtime.errors.InputError` naming the label):

* a label is a non-empty string without whitespace (newlines included), quotes (``' " `````) or ``/``;
* labels are unique on one level (``sub/a`` and ``a`` may coexist);
* a name cannot be both a variable and a sub-axis.

Building from qualified names (what generated code does) groups variables of one sub-axis together:
sub-axes and variables appear in the order of their *first* mention on each level, e.g.
``[("forces/E", SR2), ("state/S", SR2), ("forces/t", Scalar)]`` lays out ``forces/E, forces/t,
state/S``. Offsets must therefore always be read from the axis, never assumed from list order.
"""
from __future__ import annotations

import difflib
from typing import Iterable, NamedTuple, Union

from modelc.runtime.errors import InputError
from modelc.runtime.types import TYPES, TensorType

_BAD_LABEL_CHARS = set("'\"`/")

Item = Union[TensorType, "LabeledAxis"]


class Entry(NamedTuple):
    """Where an item (variable or sub-axis) lives on its root axis."""

    start: int
    stop: int
    item: Item  # a TensorType for a variable, a LabeledAxis for a sub-axis

    @property
    def size(self) -> int:
        return self.stop - self.start

    @property
    def is_variable(self) -> bool:
        return isinstance(self.item, TensorType)


def check_label(label: object, where: str = "") -> str:
    """Validate one label (one level of a name); ``where`` adds context to the error."""
    if not isinstance(label, str) or not label or any(c.isspace() or c in _BAD_LABEL_CHARS for c in label):
        raise InputError(f"bad label {label!r}{where}: a label must be non-empty and cannot contain "
                         "whitespace, quotes, '/' or newlines")
    return label


def _as_item(label: str, item: object) -> Item:
    if isinstance(item, (TensorType, LabeledAxis)):
        return item
    if isinstance(item, str) and item in TYPES:
        return TYPES[item]
    raise InputError(f"item {label!r}: expected a tensor type ({', '.join(TYPES)}) or a LabeledAxis, "
                     f"got {item!r}")


class LabeledAxis:
    """An immutable labeled axis. Build with ``LabeledAxis([(label, type_or_axis), ...])`` or
    :meth:`from_variables` (qualified names; sub-axes created automatically)."""

    __slots__ = ("_items", "_index", "_size", "_hash", "_variables", "_names")

    def __init__(self, items: Iterable[tuple[str, TensorType | str | LabeledAxis]] = ()):
        checked: list[tuple[str, Item]] = []
        seen: set[str] = set()
        for pair in items:
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise InputError(f"LabeledAxis items are (label, type or LabeledAxis) pairs, got {pair!r}")
            label, item = pair
            check_label(label)
            if label in seen:
                raise InputError(f"duplicate label {label!r} on one level of a LabeledAxis")
            seen.add(label)
            checked.append((label, _as_item(label, item)))
        index: dict[str, Entry] = {}
        offset = 0
        for label, item in checked:
            size = item.size
            index[label] = Entry(offset, offset + size, item)
            if isinstance(item, LabeledAxis):
                for sub, e in item._index.items():
                    index[f"{label}/{sub}"] = Entry(offset + e.start, offset + e.stop, e.item)
            offset += size
        object.__setattr__(self, "_items", tuple(checked))
        object.__setattr__(self, "_index", index)
        object.__setattr__(self, "_size", offset)
        object.__setattr__(self, "_hash", hash(tuple(checked)))
        object.__setattr__(self, "_variables", tuple((n, e.item) for n, e in index.items() if e.is_variable))
        object.__setattr__(self, "_names", tuple(n for n, _ in self._variables))

    def __setattr__(self, key, value):
        raise AttributeError("LabeledAxis is immutable; build a new one")

    # immutable: a copy is the axis itself; pickled as its items (copy and pickle would otherwise
    # restore the slots through __setattr__, which refuses)
    def __copy__(self) -> LabeledAxis:
        return self

    def __deepcopy__(self, memo) -> LabeledAxis:
        return self

    def __reduce__(self):
        return (LabeledAxis, (self._items,))

    @classmethod
    def from_variables(cls, variables: Iterable) -> LabeledAxis:
        """Build from ``(qualified_name, type)`` pairs (or objects with ``.name`` and ``.type``),
        creating sub-axes from the ``/`` in the names. See the module docstring for the order."""
        tree: dict = {}
        for v in variables:
            name, ttype = (v if isinstance(v, tuple) else (getattr(v, "name", None), getattr(v, "type", None)))
            if not isinstance(name, str):
                raise InputError(f"expected (qualified name, type) pairs, got {v!r}")
            parts = name.split("/")
            for p in parts:
                check_label(p, f" in variable name {name!r}")
            node = tree
            for depth, p in enumerate(parts[:-1]):
                sub = node.setdefault(p, {})
                if not isinstance(sub, dict):
                    raise InputError(f"{'/'.join(parts[:depth + 1])!r} is a variable, so {name!r} cannot "
                                     "be declared under it")
                node = sub
            leaf = parts[-1]
            if leaf in node:
                what = "a sub-axis" if isinstance(node[leaf], dict) else "declared twice"
                raise InputError(f"variable {name!r} is {what}" +
                                 (f" ({name!r} already has variables under it)" if what == "a sub-axis" else ""))
            node[leaf] = _as_item(name, ttype)
        return cls._from_tree(tree)

    @classmethod
    def _from_tree(cls, tree: dict) -> LabeledAxis:
        return cls([(k, cls._from_tree(v) if isinstance(v, dict) else v) for k, v in tree.items()])

    # -- queries -------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        """The storage size of the whole axis."""
        return self._size

    @property
    def items(self) -> tuple[tuple[str, Item], ...]:
        """The top-level ``(label, type or sub-axis)`` pairs, in storage order."""
        return self._items

    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(label for label, _ in self._items)

    @property
    def variables(self) -> tuple[tuple[str, TensorType], ...]:
        """All variables, recursively, as ``(qualified_name, type)`` in storage order."""
        return self._variables

    @property
    def variable_names(self) -> tuple[str, ...]:
        return self._names

    @property
    def subaxis_names(self) -> tuple[str, ...]:
        """All sub-axes, recursively, by qualified name, in storage (pre-)order."""
        return tuple(n for n, e in self._index.items() if not e.is_variable)

    def entry(self, name: str) -> Entry:
        """The :class:`Entry` (start, stop, item) of a variable or sub-axis; ``""`` is the axis itself."""
        if name == "":
            return Entry(0, self._size, self)
        try:
            return self._index[name]
        except (KeyError, TypeError):
            pass
        same_case = [n for n in self._index if n.lower() == str(name).lower()]
        close = list(dict.fromkeys(same_case + difflib.get_close_matches(str(name), list(self._index), n=3)))[:3]
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else \
            f"; the axis has {', '.join(map(repr, self._index)) or 'no items'}"
        raise InputError(f"no variable or sub-axis {name!r} on this axis{hint}")

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def is_variable(self, name: str) -> bool:
        return self.entry(name).is_variable

    def is_subaxis(self, name: str) -> bool:
        return not self.entry(name).is_variable

    def offset(self, name: str) -> int:
        return self.entry(name).start

    def storage_size(self, name: str) -> int:
        return self.entry(name).size

    def span(self, name: str) -> tuple[int, int]:
        """``(start, stop)`` of an item on this axis."""
        e = self.entry(name)
        return e.start, e.stop

    def type_of(self, name: str) -> TensorType:
        e = self.entry(name)
        if not e.is_variable:
            raise InputError(f"{name!r} is a sub-axis, not a variable")
        return e.item

    def subaxis(self, name: str) -> LabeledAxis:
        e = self.entry(name)
        if e.is_variable:
            raise InputError(f"{name!r} is a variable of type {e.item}, not a sub-axis")
        return e.item

    def layout(self) -> tuple[tuple[str, int, int, str], ...]:
        """Every item (pre-order): ``(qualified_name, start, stop, type name or 'axis')``."""
        return tuple((n, e.start, e.stop, str(e.item) if e.is_variable else "axis")
                     for n, e in self._index.items())

    # -- value semantics -----------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        return isinstance(other, LabeledAxis) and self._items == other._items

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        inner = ", ".join(f"({k!r}, {v if isinstance(v, TensorType) else repr(v)})" for k, v in self._items)
        return f"LabeledAxis([{inner}])"

    def __str__(self) -> str:
        rows = [("start", "stop", "size", "name", "type")]
        for n, e in self._index.items():
            depth = n.count("/")
            label = "  " * depth + n.rsplit("/", 1)[-1] + ("/" if not e.is_variable else "")
            kind = str(e.item) if e.is_variable else f"axis ({len(e.item.items)} item{'s' if len(e.item.items) != 1 else ''})"
            rows.append((str(e.start), str(e.stop), str(e.size), label, kind))
        w = [max(len(r[i]) for r in rows) for i in range(5)]
        lines = [f"LabeledAxis of size {self._size}"]
        for r in rows:
            lines.append("  " + "  ".join([r[0].rjust(w[0]), r[1].rjust(w[1]), r[2].rjust(w[2]),
                                            r[3].ljust(w[3]), r[4]]).rstrip())
        return "\n".join(lines)
