"""The limits of the spec language, in one place (docs/limits.md lists them with what happens at each).

Every limit turns input that would otherwise hang modelc, exhaust its memory or overflow Python's
stack into a :class:`SpecError` at the offending file, line and text. The values are far above what
the model library needs (its deepest expression nests 9 levels, its largest has 64 nodes).

- :func:`read_spec_file`: only regular files (no pipes, devices, folders) of at most
  :data:`MAX_SPEC_BYTES`, valid UTF-8 (the error points at the first bad byte's line and column);
- :func:`check_value`: a built expression nests at most :data:`MAX_EXPR_DEPTH` levels, has at
  most :data:`MAX_EXPR_NODES` nodes as a tree and :data:`MAX_EXPR_DISTINCT` distinct subexpressions
  (after defines and helpers are expanded into it), and holds no
  undefined or non-finite constant (``x/0``, ``0/0``, ``0**-1``, ``log(0)``, ``sqrt(-1)``,
  ``1e309``, ``exp(1000)``).
"""
from __future__ import annotations

import math
import os
import stat

import sympy as sp

from modelc.errors import SpecError
from modelc.ir import Loc
from modelc.symdag import distinct, distinct_nodes

MAX_SPEC_BYTES = 4 * 1024 * 1024   # one spec or include file
MAX_INCLUDE_DEPTH = 32             # a chain of includes (a includes b includes c ...)
MAX_YAML_DEPTH = 64                # nested YAML mappings and lists
MAX_AST_DEPTH = 100                # nested nodes in one expression's text (operators, calls, parentheses)
MAX_EXPR_DEPTH = 50                # nesting of a built expression, defines and helpers expanded
MAX_EXPR_NODES = 1_000_000         # nodes of one built expression component (as a tree: SymPy's own
                                   # constructors walk it: exp() its argument, ~0.5 s per million nodes)
MAX_EXPR_DISTINCT = 50_000         # distinct subexpressions of one built value (a DAG, what the passes
                                   # walk: a sum of 2500 terms tanh(..)*exp(..) has 20,000, 45 s to compile)
MAX_HELPER_DEPTH = 32              # helper calls nested in helper calls
MAX_HELPER_CALLS = 10_000          # distinct helper expansions in one model (repeated calls are memoised)
FLOAT_MAX = 1.7976931348623157e308  # the largest float64: constants beyond it are refused
INT_MAX = 2**31 - 1                 # integer options (iteration counts) are C ints in the kernels


def read_spec_file(path: str, loc: Loc | None) -> str:
    """The text of a spec file: a regular file of at most :data:`MAX_SPEC_BYTES`, in UTF-8.

    The file is opened without blocking (a named pipe never hangs) and checked to be a regular file
    on the open descriptor before a byte is read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        raise SpecError(f"cannot read spec file {path!r}: {getattr(exc, 'strerror', None) or exc}", loc) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a folder" if stat.S_ISDIR(st.st_mode) else "a named pipe" if stat.S_ISFIFO(st.st_mode) \
                else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a regular file"
            raise SpecError(f"cannot read spec file {path!r}: it is {kind} (a spec is a regular file)", loc)
        if st.st_size > MAX_SPEC_BYTES:
            raise SpecError(f"spec file {path!r} is {st.st_size} bytes, more than the limit of "
                            f"{MAX_SPEC_BYTES} bytes", loc)
        chunks, total = [], 0
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError as exc:
                raise SpecError(f"cannot read spec file {path!r}: {exc.strerror or exc}", loc) from None
            if not chunk:
                break
            total += len(chunk)
            if total > MAX_SPEC_BYTES:  # a file that grows while it is read
                raise SpecError(f"spec file {path!r} is more than the limit of {MAX_SPEC_BYTES} bytes", loc)
            chunks.append(chunk)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        start = data.rfind(b"\n", 0, exc.start) + 1
        col = len(data[start:exc.start].decode("utf-8", errors="replace")) + 1
        text = data[start:data.find(b"\n", exc.start) if b"\n" in data[exc.start:] else len(data)]
        raise SpecError(f"spec file {path!r} is not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset "
                        f"{exc.start})", Loc(path, line, col, text.decode("utf-8", errors="replace")),
                        span=(col - 1, col), hint="save the file as UTF-8") from None


# --------------------------------------------------------------------------------------------------
# built expressions
# --------------------------------------------------------------------------------------------------
_UNDEFINED = {sp.zoo: "a division by zero (or another undefined operation, e.g. log(0))",
              sp.nan: "an undefined value (0/0, or oo - oo)",
              sp.oo: "an infinite constant", sp.S.NegativeInfinity: "an infinite constant",
              sp.I: "a complex (non-real) constant, e.g. sqrt(-1)"}


def measure(expr: sp.Basic, memo: dict) -> tuple[int, int]:
    """(depth, tree size) of ``expr``; ``memo`` (by id) makes it linear in the distinct sub-trees.

    Iterative (no Python recursion): it must work on exactly the expressions too deep to recurse on."""
    stack = [(expr, False)]
    while stack:
        e, done = stack.pop()
        if id(e) in memo:
            continue
        if done or not e.args:
            sub = [memo[id(a)] for a in e.args]
            memo[id(e)] = (1 + max((s[0] for s in sub), default=0), 1 + sum(s[1] for s in sub), e)
            continue
        stack.append((e, True))
        stack.extend((a, False) for a in e.args if id(a) not in memo)
    depth, size, _ = memo[id(expr)]
    return depth, size


def undefined(expr: sp.Basic) -> str | None:
    """Why ``expr`` holds an undefined or non-finite constant, or None."""
    for e in distinct((expr,)):
        if e.is_Atom:
            if e in _UNDEFINED:
                return _UNDEFINED[e]
            if e.is_Number and e.is_finite and abs(float(e)) > FLOAT_MAX:
                return f"the constant {_short(e)}, beyond the largest float64 ({FLOAT_MAX:.4g})"
            continue
        if not isinstance(e, (sp.Function, sp.Pow)) or not e.is_number:
            continue
        try:
            v = e.evalf(20)
            re_, im = v.as_real_imag()
            if not (re_.is_Number and im.is_Number):
                continue  # a function without a numeric rule: the backends evaluate it
            re_, im = float(re_), float(im)
        except (TypeError, ValueError, OverflowError, AttributeError):
            continue
        if im != 0:
            return f"{_short(e)}, which is a complex number"
        if not (math.isfinite(re_) and abs(re_) <= FLOAT_MAX):
            return f"{_short(e)}, which overflows a float64"
    return None


def _short(e) -> str:
    text = str(e)
    return text if len(text) <= 60 else text[:57] + "..."


def check_value(comps, raise_at) -> None:
    """Refuse a built value (its components) that is too deep, too large, or holds an undefined
    constant: ``raise_at(message, hint)`` raises the located error."""
    memo: dict = {}
    exprs = [c for c in comps if isinstance(c, sp.Basic)]
    for c in exprs:
        depth, size = measure(c, memo)
        if depth > MAX_EXPR_DEPTH:
            raise_at(f"this expression nests {depth} levels deep once its defines and helpers are expanded "
                     f"(the limit is {MAX_EXPR_DEPTH})", "split it into define entries that each stay "
                     "shallow, or simplify it")
        if size > MAX_EXPR_NODES:
            raise_at(f"this expression has {size} nodes once its defines and helpers are expanded, counting "
                     f"each use of a define or helper again (the limit is {MAX_EXPR_NODES})",
                     "a define or helper used repeatedly inside itself multiplies the size at each level; "
                     "simplify the chain")
    distinct = distinct_nodes(exprs, MAX_EXPR_DISTINCT)
    if distinct > MAX_EXPR_DISTINCT:
        raise_at(f"this expression has more than {MAX_EXPR_DISTINCT} distinct subexpressions once its "
                 "defines and helpers are expanded", "split the model into models composed together, "
                 "or simplify it")
    for c in comps:
        why = undefined(c) if isinstance(c, sp.Basic) else None
        if why is not None:
            raise_at(f"this expression holds {why}", "")
