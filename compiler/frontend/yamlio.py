"""Safe YAML loading that keeps where every value came from.

``load_yaml(path)`` composes the document with PyYAML's *safe* loader (no Python tags, no code) and
returns a tree of :class:`YMap` / :class:`YList` / :class:`YScalar`, each with a :class:`Loc`
(1-based line and column) and, for scalars, the source text, so that every later error can point at
the offending value. Duplicate keys are errors (plain YAML silently keeps the last one).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Union

import yaml

from modelc.errors import SpecError
from modelc.frontend.limits import MAX_YAML_DEPTH
from modelc.ir import Loc


@dataclass(frozen=True, slots=True)
class YScalar:
    value: object          # str, int, float, bool or None (YAML's safe scalars)
    loc: Loc               # where the value's text starts (after a quote, for quoted scalars)
    style: str | None = None

    def __str__(self) -> str:
        return str(self.value)


@dataclass(frozen=True, slots=True)
class YList:
    items: tuple["YNode", ...]
    loc: Loc


@dataclass(frozen=True, slots=True)
class YMap:
    """An ordered mapping; ``keys[k]`` is the key's own scalar node (for errors about the key)."""

    items: dict                # str -> YNode (insertion ordered)
    keys: dict                 # str -> YScalar
    loc: Loc

    def get(self, key: str, default=None):
        return self.items.get(key, default)


YNode = Union[YScalar, YList, YMap]


def _loc(file: str, lines: list[str], mark, style: str | None = None, end=None) -> Loc:
    """1-based location; ``text`` is the node's source text from its start (to its end, or to the
    end of the line when it spans lines), so that a caret under ``text`` underlines the node."""
    line, col = mark.line, mark.column
    full = lines[line] if line < len(lines) else ""
    stop = end.column if end is not None and end.line == line else len(full)
    if style in ('"', "'"):
        col, stop = col + 1, stop - 1 if end is not None and end.line == line else stop
    return Loc(file, line + 1, col + 1, full[col:stop])


def _convert(node, file: str, lines: list[str], constructor) -> YNode:
    if isinstance(node, yaml.ScalarNode):
        value = constructor.construct_object(node, deep=True)
        style = node.style
        loc = _loc(file, lines, node.start_mark, style, node.end_mark)
        if style in ("|", ">"):  # block scalar: its text starts on the next line
            nxt = node.start_mark.line + 1
            text = lines[nxt] if nxt < len(lines) else ""
            loc = Loc(file, nxt + 1, len(text) - len(text.lstrip()) + 1, text)
        if isinstance(value, (bytes, bytearray)) or not isinstance(value, (str, int, float, bool, type(None))):
            raise SpecError(f"unsupported YAML value of type {type(value).__name__}", loc)
        return YScalar(value, loc, style)
    if isinstance(node, yaml.SequenceNode):
        return YList(tuple(_convert(n, file, lines, constructor) for n in node.value),
                     _loc(file, lines, node.start_mark))
    if isinstance(node, yaml.MappingNode):
        items, keys = {}, {}
        for knode, vnode in node.value:
            key = _convert(knode, file, lines, constructor)
            if not isinstance(key, YScalar) or not isinstance(key.value, str):
                hint = ""
                if isinstance(key, YScalar) and isinstance(key.value, bool):  # on, off, yes, no, true, false
                    hint = f"YAML reads this key as {key.value}: quote it (\"{key.loc.text.split(':')[0].strip()}\":)"
                raise SpecError("mapping keys must be plain names", key.loc, hint=hint)
            if key.value in items:
                first = keys[key.value].loc
                raise SpecError(f"duplicate key {key.value!r} (first given at line {first.line})", key.loc)
            items[key.value] = _convert(vnode, file, lines, constructor)
            keys[key.value] = key
        return YMap(items, keys, _loc(file, lines, node.start_mark))
    raise SpecError("unsupported YAML node (anchors, aliases and tags are not part of the spec language)",
                    _loc(file, lines, node.start_mark))


class _TooDeep(Exception):
    pass


class _Loader(yaml.SafeLoader):
    """The safe loader, plus YAML 1.2's floats without a dot (``1e5``, which YAML 1.1 reads as a
    string), and a bound on nesting (PyYAML's composer recurses once per level)."""

    depth = 0

    def compose_node(self, parent, index):
        self.depth += 1
        try:
            event = self.peek_event()
            if self.depth > MAX_YAML_DEPTH:
                raise _TooDeep(event.start_mark)
            if getattr(event, "anchor", None) is not None:  # an anchor, aliased or not: refused
                raise _Anchor(event.start_mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+$"), list("-+0123456789"))
# and with a dot but an unsigned exponent (2.1e5: YAML 1.1 wants 2.1e+5, and read it as a string)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*)?\.[0-9_]*[eE][0-9]+$"), list("-+0123456789."))


def load_yaml_text(text: str, file: str) -> YNode | None:
    """Compose ``text`` (the content of ``file``) safely into a located tree."""
    lines = text.splitlines()
    try:
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
        finally:
            loader.dispose()
    except _Anchor as exc:
        raise SpecError("YAML anchors and aliases (&name, *name) are not supported in a spec",
                        _loc(file, lines, exc.args[0])) from None
    except _TooDeep as exc:
        raise SpecError(f"YAML nested more than {MAX_YAML_DEPTH} levels deep", _loc(file, lines, exc.args[0]),
                        hint="a spec needs a few levels (models: name: section: entry)") from None
    except RecursionError:  # deeper than the parser itself can go (flow collections: [[[[...]]]])
        raise SpecError(f"YAML nested more than {MAX_YAML_DEPTH} levels deep", _deepest(text, file, lines),
                        hint="a spec needs a few levels (models: name: section: entry)") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        loc = _loc(file, lines, mark) if mark is not None else Loc(file, 1, 1)
        line = lines[mark.line] if mark is not None and mark.line < len(lines) else ""
        hint = ("an interval with an open end is text: quote it, e.g. bounds: \"[0, 0.5)\""
                if re.search(r"bounds\s*:\s*[\[(]", line) else "")
        raise SpecError(f"invalid YAML: {exc.problem or exc.context}", loc, hint=hint) from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow: no mark, a position
        pos = min(max(int(exc.position), 0), len(text))
        line = text.count("\n", 0, pos)
        col = pos - (text.rfind("\n", 0, pos) + 1)
        char = f"#x{exc.character:04x}" if isinstance(exc.character, int) else repr(exc.character)
        raise SpecError(f"invalid YAML: unacceptable character {char}: {exc.reason}",
                        Loc(file, line + 1, col + 1, lines[line] if line < len(lines) else "")) from None
    except yaml.YAMLError as exc:
        raise SpecError(f"invalid YAML: {exc}", Loc(file, 1, 1)) from None
    if node is None:
        return None
    constructor = _Loader("")
    try:
        for n in _walk(node, set()):
            if n.tag not in _TAGS:
                raise SpecError(f"YAML tag {n.tag!r} is not allowed in a spec (plain strings, numbers, "
                                f"booleans, null, lists and mappings only)", _loc(file, lines, n.start_mark))
    except _Alias as exc:
        raise SpecError("YAML anchors and aliases (&name, *name) are not supported in a spec",
                        _loc(file, lines, exc.args[0].start_mark)) from None
    return _convert(node, file, lines, constructor)


def _deepest(text: str, file: str, lines: list[str]) -> Loc:
    """Where flow brackets first nest past the limit (or the start of the file)."""
    depth, line, col = 0, 0, 0
    for ch in text:
        if ch in "[{":
            depth += 1
            if depth > MAX_YAML_DEPTH:
                return Loc(file, line + 1, col + 1, lines[line] if line < len(lines) else "")
        elif ch in "]}":
            depth = max(depth - 1, 0)
        if ch == "\n":
            line, col = line + 1, 0
        else:
            col += 1
    return Loc(file, 1, 1, lines[0] if lines else "")


_TAGS = {"tag:yaml.org,2002:" + t for t in ("str", "int", "float", "bool", "null", "map", "seq")}


class _Alias(Exception):
    pass


class _Anchor(Exception):
    """An anchor (``&name``) met while composing (its mark)."""


def _walk(node, seen: set[int]):
    """Every node once; a node met twice is an alias (refused: aliases can blow up exponentially)."""
    if id(node) in seen:
        raise _Alias(node)
    seen.add(id(node))
    yield node
    if isinstance(node, yaml.SequenceNode):
        for n in node.value:
            yield from _walk(n, seen)
    elif isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            yield from _walk(k, seen)
            yield from _walk(v, seen)
