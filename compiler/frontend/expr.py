"""Expressions of the spec language: Python syntax parsed by :mod:`ast`, never evaluated.

``parse(source)`` parses a string in ``eval`` mode and checks it against a whitelist of node types
(anything else — attribute access, lambdas, comprehensions, strings, keyword arguments, ... — is a
:class:`SpecError` with a caret). :class:`Builder` then walks the tree and builds typed SymPy tensor
values (:class:`~modelc.frontend.tensor.TValue`), resolving names in a :class:`Scope` and calls in
:data:`BUILTINS` or the spec's helper functions. Nothing from the spec is ever executed.
"""
from __future__ import annotations

import ast
import difflib
import math
from dataclasses import dataclass, field
from typing import Callable

import sympy as sp

from modelc.errors import SpecError
from modelc.frontend import limits
from modelc.frontend import tensor as T
from modelc.frontend.tensor import Indexed, OpError, TValue
from modelc.functions import BY_SPELLING, ifnonneg, ifpos, max_
from modelc.ir import Loc, Variable
from modelc.symdag import Diff, FreeSymbols


# --------------------------------------------------------------------------------------------------
# source text and errors
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Source:
    """An expression's text and where it starts in the spec file."""

    text: str
    loc: Loc

    def error(self, message: str, node: ast.AST | None = None, hint: str = "") -> SpecError:
        lines = self.text.split("\n")
        if node is None or not hasattr(node, "col_offset"):
            return SpecError(message, Loc(self.loc.file, self.loc.line, self.loc.col, lines[0]), hint=hint)
        lineno = node.lineno
        line = lines[lineno - 1]
        raw = line.encode()
        start = len(raw[:node.col_offset].decode(errors="replace"))
        if node.end_lineno == lineno:
            end = len(raw[:node.end_col_offset].decode(errors="replace"))
        else:
            end = len(line)
        if lineno == 1:
            loc = Loc(self.loc.file, self.loc.line, self.loc.col, line)
        else:  # a multi-line expression: point at its own line
            loc = Loc(self.loc.file, self.loc.line + lineno - 1, 1, line)
        return SpecError(message, loc, span=(start, end), hint=hint)


def did_you_mean(name: str, candidates) -> str:
    """A hint naming the closest candidate (same letters in another case first), or ''."""
    same = [c for c in sorted(candidates) if c.lower() == name.lower() and c != name]
    close = same or difflib.get_close_matches(name, sorted(candidates), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else ""


_ALLOWED = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Call, ast.Name, ast.Constant, ast.Subscript,
            ast.Tuple, ast.Compare, ast.IfExp, ast.Load, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow,
            ast.USub, ast.UAdd, ast.Gt, ast.GtE, ast.Lt, ast.LtE)
_WHAT = {ast.Attribute: "attribute access", ast.Lambda: "a lambda", ast.ListComp: "a comprehension",
         ast.SetComp: "a comprehension", ast.DictComp: "a comprehension", ast.GeneratorExp: "a generator",
         ast.List: "a list", ast.Dict: "a dict", ast.Set: "a set", ast.BoolOp: "'and'/'or'",
         ast.NamedExpr: "':='", ast.Starred: "'*' unpacking", ast.JoinedStr: "a string",
         ast.Await: "await", ast.Yield: "yield", ast.Slice: "a slice"}
_OP_HINT = {ast.BitXor: "use ** for powers", ast.MatMult: "use ddot(A, B) or dot(A, B)",
            ast.Mod: "", ast.FloorDiv: "use / for division", ast.Not: "", ast.Invert: ""}


def parse(src: Source) -> ast.expr:
    """Parse and whitelist-check; returns the expression body."""
    text = src.text.strip("\n")
    if not text.strip():
        raise src.error("empty expression")
    multiline = "\n" in text  # parenthesised so that the expression may span lines
    shift = 1 if multiline else 0
    try:
        tree = ast.parse("(\n" + text + "\n)" if multiline else text, mode="eval")
        if multiline:
            ast.increment_lineno(tree, -1)
    except (RecursionError, MemoryError):
        raise src.error("expression too deeply nested") from None
    except ValueError as exc:  # e.g. an integer literal of more than 4300 digits
        raise src.error(f"invalid expression ({exc})") from None
    except SyntaxError as exc:
        node = None
        if exc.lineno is not None and exc.offset is not None and 1 <= exc.lineno - shift <= text.count("\n") + 1:
            ln = exc.lineno - shift
            node = ast.Name("x", lineno=ln, col_offset=max(exc.offset - 1, 0),
                            end_lineno=ln, end_col_offset=max(exc.offset, 1))
        hint = "a double contraction is written ddot(A, B)" if ":" in text.replace(":=", "") else ""
        msg = "a number of more than 4300 digits" if "integer string conversion" in exc.msg else exc.msg
        raise src.error(f"invalid expression syntax ({msg})", node, hint) from None
    _check_depth(src, tree)
    tables = {id(a) for node in ast.walk(tree) if isinstance(node, ast.Call) and
              isinstance(node.func, ast.Name) and node.func.id == "interp"
              for a in node.args[1:3] if isinstance(a, ast.List)}  # interp's knots and values
    for node in ast.walk(tree):  # dunder names first: the most suspicious thing gets reported
        if isinstance(node, ast.Name) and node.id.startswith("__"):
            raise src.error(f"name {node.id!r} is not allowed in expressions", node)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and (isinstance(node.value, bool) or
                                               not isinstance(node.value, (int, float))):
            raise src.error(f"{type(node.value).__name__} constants are not allowed in expressions "
                            f"(only numbers)", node)
        if isinstance(node, ast.Constant) and not _finite_literal(node.value):
            raise src.error(f"this number is beyond the largest float64 ({limits.FLOAT_MAX:.6g})", node)
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name):
                raise src.error("only named functions can be called", node.func)
            if node.keywords:
                raise src.error("keyword arguments are not allowed", node.keywords[0].value,
                                f"pass the arguments of {node.func.id}() by position")
        if isinstance(node, (ast.BinOp, ast.UnaryOp)) and not isinstance(node.op, _ALLOWED):
            hint = _OP_HINT.get(type(node.op), "")
            raise src.error(f"operator {type(node.op).__name__} is not allowed in expressions", node, hint)
        if isinstance(node, ast.Compare) and len(node.ops) != 1:
            raise src.error("chained comparisons are not allowed; nest where() instead", node)
        if isinstance(node, ast.List) and id(node) in tables:
            continue
        if not isinstance(node, _ALLOWED):
            what = _WHAT.get(type(node))
            if isinstance(node, ast.List):
                raise src.error("a list is not allowed in expressions", node,
                                "a list is only interp's knots or values: interp(x, [x0, x1], [y0, y1])")
            if isinstance(node, ast.cmpop):
                raise src.error(f"comparison {type(node).__name__} is not allowed; use >, >=, < or <=")
            raise src.error(f"{what or type(node).__name__} is not allowed in expressions",
                            node if hasattr(node, "col_offset") else None)
    return tree.body


def _check_depth(src: Source, tree: ast.AST) -> None:
    """Refuse an expression nesting more than ``limits.MAX_AST_DEPTH`` nodes (iteratively: the check
    itself must not recurse), pointing at the first node past the limit."""
    stack = [(tree, 1)]
    while stack:
        node, d = stack.pop()
        if d > limits.MAX_AST_DEPTH:
            where = node if hasattr(node, "col_offset") else None
            raise src.error(f"expression nested more than {limits.MAX_AST_DEPTH} levels deep", where,
                            "split it into define entries")
        stack.extend((c, d + 1) for c in ast.iter_child_nodes(node))


def _finite_literal(v) -> bool:
    if isinstance(v, float):
        return v == v and abs(v) <= limits.FLOAT_MAX
    if isinstance(v, int):
        return v.bit_length() <= 1024
    return True


# --------------------------------------------------------------------------------------------------
# names
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Binding:
    """What a name means in an expression: a variable (input/unknown), parameter, or defined value."""

    kind: str  # "input", "unknown", "output", "parameter", "define", "argument", "constant"
    value: TValue
    var: Variable | None = None
    src: "Source | None" = None  # a define's expression (diff(f, define) builds the later ones again)


@dataclass(frozen=True, slots=True)
class Helper:
    """A helper function defined in the spec: ``name(params): body``."""

    name: str
    params: tuple[str, ...]
    body: ast.expr
    source: Source


@dataclass
class Scope:
    """The names visible in a model's expressions.

    ``old`` maps a variable to its previous-step value (and records that the model needs it as an
    input); it is supplied by the model loader.
    """

    names: dict = field(default_factory=dict)       # str -> Binding
    helpers: dict = field(default_factory=dict)     # str -> Helper
    old: Callable[[Binding], TValue] | None = None
    expanded: dict = field(default_factory=dict)    # (helper, argument values) -> TValue (memo)


CONSTANTS: dict[str, tuple[Callable[[], TValue], str]] = {
    "I2": (T.I2, "the 2nd-order identity (SR2)"),
    "IR2": (T.IR2, "the 2nd-order identity as a full tensor (R2)"),
    "I4sym": (T.I4sym, "the symmetric 4th-order identity (SSR4): I4sym : a = a for a symmetric a"),
    "I4vol": (T.I4vol, "the volumetric projector I2 x I2 / 3 (SSR4): I4vol : a = vol(a)"),
    "I4dev": (T.I4dev, "the deviatoric projector I4sym - I4vol (SSR4): I4dev : a = dev(a)"),
    "pi": (lambda: TValue.scalar(sp.pi), "the number pi"),
}


@dataclass(frozen=True, slots=True)
class Builtin:
    name: str
    nargs: int
    op: Callable[..., TValue]
    doc: str


def _b(name, nargs, op, doc):
    return Builtin(name, nargs, op, doc)


def _from_rule(spelling: str) -> Builtin:
    r = BY_SPELLING[spelling]
    return Builtin(spelling, r.nargs, T.scalar_fn(r.cls, spelling), f"{r.cls.__doc__} At the kink: {r.kink_doc}.")


BUILTINS: dict[str, Builtin] = {b.name: b for b in (
    _b("exp", 1, T.scalar_fn(sp.exp, "exp"), "exponential (Scalar)"),
    _b("log", 1, T.scalar_fn(sp.log, "log"), "natural logarithm (Scalar)"),
    _b("sqrt", 1, T.scalar_fn(sp.sqrt, "sqrt"), "square root (Scalar); see safe_sqrt for a kink-safe one"),
    *(_from_rule(s) for s in ("abs", "sign", "heaviside", "macaulay", "min", "max", "safe_sqrt", "safe_div")),
    *(_from_rule(s) for s in ("sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "log1p", "expm1", "atan2")),
    _b("tr", 1, T.tr, "trace of an SR2 or R2 (Scalar)"),
    _b("vol", 1, T.vol, "volumetric part tr(a)/3 I of an SR2 or R2"),
    _b("dev", 1, T.dev, "deviatoric part a - vol(a) of an SR2 or R2"),
    _b("norm", 1, T.norm, "sqrt(a : a) of a Scalar, Vec, SR2 or R2, with the safe square root "
                          "(0 with zero derivative at a = 0)"),
    _b("ddot", 2, T.ddot, "double contraction: SR2:SR2, R2:R2 (Scalar), SSR4:SR2, SR2:SSR4 (SR2), "
                          "SSR4:SSR4 (SSR4)"),
    _b("dot", 2, T.dot, "single contraction a_..k b_k..: Vec.Vec (Scalar), R2.Vec (Vec), SR2/R2.SR2/R2 (R2)"),
    _b("outer", 2, T.outer, "outer product: SR2 x SR2 (SSR4), Vec x Vec (R2)"),
    _b("transpose", 1, T.transpose, "transpose of an R2, major transpose of an SSR4 (SR2 unchanged)"),
    _b("sym", 1, T.sym, "symmetric part of an R2 (SR2)"),
    _b("skew", 1, T.skew, "skew part of an R2 (WR2)"),
    _b("inv", 1, T.inv, "inverse of a Scalar, SR2 or R2"),
    _b("det", 1, T.det, "determinant of an SR2 or R2 (Scalar)"),
)}

#: Special forms: their arguments are not all plain values (conditions, variables).
SPECIAL = {
    "where": "where(cond, a, b): a where cond holds else b, component-wise; cond is one comparison "
             "x > y, x >= y, x < y or x <= y of Scalars",
    "diff": "diff(f, x): derivative of the Scalar f w.r.t. x (any type; for SR2 the Mandel "
            "gradient, i.e. the partial derivatives w.r.t. the 6 Mandel components); x is a variable, a "
            "parameter or a named define (then f is differentiated w.r.t. x as an argument of its own, "
            "the variables x is made of held fixed)",
    "interp": "interp(x, [x0, x1, ...], [y0, y1, ...]): the piecewise-linear interpolation of the "
              "Scalar x through the points (x_i, y_i), constant y0 below x0 and y_n above x_n (as "
              "numpy.interp); the knots x_i are numbers, strictly increasing (checked when the spec "
              "loads), the values y_i any Scalar expressions (parameters, to calibrate a table). "
              "Derivative w.r.t. x: the slope of the segment [x_i, x_i+1) that holds x (the right-hand "
              "slope at a knot), 0 below x0 and from x_n on; w.r.t. y_i: the hat function of knot i",
    "old": "old(x): the value of variable x at the previous step (state/a -> old_state/a, "
           "forces/a -> old_forces/a, else old_ prefix), of an input, output or unknown; added to the model's "
           "inputs",
}

RESERVED = set(BUILTINS) | set(SPECIAL) | set(CONSTANTS)


# --------------------------------------------------------------------------------------------------
# the builder
# --------------------------------------------------------------------------------------------------
class Builder:
    """Builds typed values from whitelisted ASTs, in a scope."""

    def __init__(self, scope: Scope, source: Source, args: dict | None = None, calls: tuple[str, ...] = (),
                 check: bool = False):
        self.scope, self.src, self.args, self.calls = scope, source, args or {}, calls
        self.check = check  # check every node's value (to locate an undefined constant)

    def build(self, node: ast.expr) -> TValue:
        return self._value(self._node(node), node)

    # -- helpers -------------------------------------------------------------------------------
    def _value(self, v, node) -> TValue:
        if isinstance(v, Indexed):
            try:
                return T.from_indexed(v)
            except OpError as exc:
                raise self.src.error(exc.message, node, exc.hint) from None
        return v

    def _op(self, fn, args, node, arg_nodes):
        try:
            return fn(*args)
        except OpError as exc:
            where = arg_nodes[exc.arg] if exc.arg is not None and exc.arg < len(arg_nodes) else node
            raise self.src.error(exc.message, where, exc.hint) from None

    def _lookup(self, name: str, node) -> Binding:
        if name in self.args:
            return self.args[name]
        if name in self.scope.names:
            return self.scope.names[name]
        if name in CONSTANTS:
            return Binding("constant", CONSTANTS[name][0]())
        if name in BUILTINS or name in SPECIAL or name in self.scope.helpers:
            raise self.src.error(f"{name!r} is a function; call it as {name}(...)", node)
        known = set(self.args) | set(self.scope.names) | set(CONSTANTS)
        raise self.src.error(f"undefined name {name!r}", node, did_you_mean(name, known) or
                             "declare it as an input, parameter or define entry")

    # -- nodes ---------------------------------------------------------------------------------
    def _node(self, node):
        meth = getattr(self, "_" + type(node).__name__, None)
        if meth is None:
            raise self.src.error(f"{type(node).__name__} is not allowed here", node)
        out = meth(node)
        if self.check and isinstance(out, TValue):
            limits.check_value(out.comps, lambda m, h: self._raise(m, node, h))
        return out

    def _raise(self, message, node, hint):
        raise self.src.error(message, node, hint)

    def _Constant(self, node):
        v = node.value  # a float: the float64 itself (its 17-digit repr read back at 56 bits and
        # rounded again to 53 by a printer lands an ulp off for 1 literal in 1500)
        return TValue.scalar(sp.Integer(v) if isinstance(v, int) else sp.Float(v, precision=53))

    def _Name(self, node):
        b = self._lookup(node.id, node)
        if b.kind == "output":
            raise self._output_error(node)
        return b.value

    def _output_error(self, node) -> SpecError:
        return self.src.error(f"{node.id!r} is an output of this model: its equation defines it, so it has "
                              f"no value to read here", node,
                              f"old({node.id}) is its value at the previous step; to reuse its expression, "
                              f"name it under 'define:'")

    def _UnaryOp(self, node):
        v = self._node(node.operand)
        if isinstance(node.op, ast.UAdd):
            return v
        if isinstance(v, Indexed):
            return T.index_scale(v, sp.S.NegativeOne)
        return T.neg(v)

    def _BinOp(self, node):
        a, b = self._node(node.left), self._node(node.right)
        nodes = (node.left, node.right)
        op = node.op
        if isinstance(op, (ast.Add, ast.Sub)):
            sym = "+" if isinstance(op, ast.Add) else "-"
            if isinstance(a, Indexed) and isinstance(b, Indexed):
                return self._op(lambda x, y: T.index_add(x, y, sym), (a, b), node, nodes)
            return self._op(lambda x, y: T.add(x, y, sym),
                            (self._value(a, node.left), self._value(b, node.right)), node, nodes)
        if isinstance(op, ast.Mult):
            if isinstance(a, Indexed) and isinstance(b, Indexed):
                return self._op(T.index_mul, (a, b), node, nodes)
            if isinstance(a, Indexed) and b.is_scalar:
                return T.index_scale(a, b.expr)
            if isinstance(b, Indexed) and a.is_scalar:
                return T.index_scale(b, a.expr)
            if isinstance(a, Indexed) or isinstance(b, Indexed):
                bad = node.right if isinstance(a, Indexed) else node.left
                raise self.src.error("cannot multiply an index expression by a tensor without indices", bad,
                                     "index both operands, e.g. C[i,j,k,l]*e[k,l]")
            return self._op(T.mul, (a, b), node, nodes)
        if isinstance(op, ast.Div):
            if isinstance(a, Indexed):
                b = self._value(b, node.right)
                if not b.is_scalar:
                    raise self.src.error(f"cannot divide by a {b.type.name}: the divisor must be a Scalar",
                                         node.right)
                return T.index_scale(a, 1 / b.expr)
            return self._op(T.div, (a, self._value(b, node.right)), node, nodes)
        if isinstance(op, ast.Pow):
            return self._op(T.power, (self._value(a, node.left), self._value(b, node.right)), node, nodes)
        raise self.src.error(f"operator {type(op).__name__} is not allowed", node, _OP_HINT.get(type(op), ""))

    def _Subscript(self, node):
        base = self._value(self._node(node.value), node.value)
        sl = node.slice
        elts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        for e in elts:
            if not isinstance(e, ast.Name):
                raise self.src.error("an index must be a letter (Einstein notation), e.g. eps[i,j]", e)
        names = tuple(e.id for e in elts)
        try:
            return T.index(base, names)
        except OpError as exc:
            raise self.src.error(exc.message, node.value if exc.arg == 0 else sl, exc.hint) from None

    def _Tuple(self, node):
        raise self.src.error("a tuple is not a value", node)

    def _Compare(self, node):
        raise self.src.error("a comparison is only allowed as the condition of where(cond, a, b)", node)

    def _IfExp(self, node):
        return self._select(node.test, node.body, node.orelse, node)

    def _select(self, cond, a_node, b_node, node):
        if not isinstance(cond, ast.Compare):
            raise self.src.error("a condition must be one comparison x > y, x >= y, x < y or x <= y", cond)
        lhs, rhs = self.build(cond.left), self.build(cond.comparators[0])
        for v, n in ((lhs, cond.left), (rhs, cond.comparators[0])):
            if not v.is_scalar:
                raise self.src.error(f"a comparison needs Scalars, got {v.type.name}", n)
        op = cond.ops[0]
        d = lhs.expr - rhs.expr if isinstance(op, (ast.Gt, ast.GtE)) else rhs.expr - lhs.expr
        fn = ifpos if isinstance(op, (ast.Gt, ast.Lt)) else ifnonneg
        a, b = self.build(a_node), self.build(b_node)
        if a.type is not b.type:
            raise self.src.error(f"both branches must have the same type: {a.type.name} and {b.type.name}",
                                 b_node)
        return TValue(a.type, tuple(fn(d, x, y) for x, y in zip(a.comps, b.comps)))

    def _Call(self, node):
        name = node.func.id
        args = node.args
        if name == "where":
            self._arity(node, 3)
            return self._select(args[0], args[1], args[2], node)
        if name == "diff":
            self._arity(node, 2)
            if isinstance(args[1], ast.Name):
                b = self._lookup(args[1].id, args[1])
                if b.kind == "define" or (b.kind == "argument" and b.var is None):
                    return self._diff_expression(args[0], args[1], b)
            f = self.build(args[0])
            if not f.is_scalar:
                raise self.src.error(f"diff(f, x) needs a Scalar f, got {f.type.name}", args[0])
            x = self._variable(args[1], "diff")
            free = FreeSymbols()  # sympy.diff's results, shared subexpressions walked once
            return TValue(x.value.type, tuple(Diff(s, free)(f.expr) for s in x.value.comps))
        if name == "old":
            self._arity(node, 1)
            b = self._variable(args[0], "old")
            if b.var is None or self.scope.old is None:
                raise self.src.error("old(x) takes a variable of the model (an input, output or unknown)",
                                     args[0])
            return self._op(self.scope.old, (b,), node, args)
        if name == "interp":
            self._arity(node, 3)
            return self._interp(args[0], args[1], args[2])
        if name in self.scope.helpers and name not in self.args:
            return self._helper(self.scope.helpers[name], node)
        if name in BUILTINS:
            b = BUILTINS[name]
            self._arity(node, b.nargs)
            vals = [self.build(a) for a in args]
            return self._op(b.op, vals, node, args)
        known = set(BUILTINS) | set(SPECIAL) | set(self.scope.helpers)
        raise self.src.error(f"unknown function {name!r}", node.func,
                             did_you_mean(name, known) or "define it under 'define:' as name(args): expr")

    def _interp(self, x_node, knots_node, values_node) -> TValue:
        """interp(x, knots, values) as nested selections on x >= x_i (comparisons of x with the knots
        as written, so every x falls in exactly one segment: the derivative at a knot is one segment's
        slope, never two summed or none), the top one outermost; in segment i the value is
        y_i + s_i max(x - x_i, 0), the distance inside a function so that a numeric slope is not
        distributed into a cancelling constant (y_i exactly at x_i). A NaN x gives NaN."""
        x = self.build(x_node)
        if not x.is_scalar:
            raise self.src.error(f"interp(x, knots, values) needs a Scalar x, got {x.type.name}", x_node)
        for n, what in ((knots_node, "knots"), (values_node, "values")):
            if not isinstance(n, ast.List):
                raise self.src.error(f"interp's {what} must be a list [a, b, ...]", n,
                                     "interp(x, [x0, x1, ...], [y0, y1, ...])")
        if len(knots_node.elts) < 2:
            raise self.src.error(f"interp needs at least 2 knots, got {len(knots_node.elts)}", knots_node)
        if len(values_node.elts) != len(knots_node.elts):
            raise self.src.error(f"interp has {len(values_node.elts)} values for {len(knots_node.elts)} knots",
                                 values_node, "one value per knot")
        knots = []
        for e in knots_node.elts:
            k = self.build(e)
            if not (k.is_scalar and k.expr.is_number):
                raise self.src.error("an interp knot must be a number", e,
                                     "knots are fixed when the spec loads, so that their order is checked; "
                                     "the values may be parameters")
            k = k.expr if k.expr.is_Integer else sp.Float(float(k.expr))  # as the printers write it
            if knots and not k > knots[-1]:
                raise self.src.error(f"interp's knots must increase strictly: {float(k):g} follows "
                                     f"{float(knots[-1]):g}", e)
            if knots and not math.isfinite(float(k - knots[-1])):
                raise self.src.error(f"interp's knots {float(knots[-1]):g} and {float(k):g} are further apart "
                                     f"than the largest float64", e)
            knots.append(k)
        ys = []
        for e in values_node.elts:
            y = self.build(e)
            if not y.is_scalar:
                raise self.src.error(f"an interp value must be a Scalar, got {y.type.name}", e)
            ys.append(y.expr)
        # below x0: y0; a NaN x (computed inside the model: sqrt(T - 300) at T < 300) fails every
        # comparison and lands here, so the last branch gives x itself, NaN, not a plausible y0
        out = ifnonneg(knots[0] - x.expr, ys[0], x.expr)
        for i in range(len(knots) - 1):
            slope = (ys[i + 1] - ys[i]) / (knots[i + 1] - knots[i])
            out = ifnonneg(x.expr - knots[i], ys[i] + slope * max_(x.expr - knots[i], sp.S.Zero), out)
        return TValue.scalar(ifnonneg(x.expr - knots[-1], ys[-1], out))

    def _diff_expression(self, f_node, x_node, b: Binding) -> TValue:
        """diff(f, x) for a define (or a helper argument) ``x = x(v)`` of the variables v: f is built
        again with x bound to placeholder symbols p (and the defines after x rebuilt on p, so that
        f's dependence on x through them counts), differentiated w.r.t. p, and p replaced by x(v).
        This is the partial derivative of f(x, v) w.r.t. its argument x at fixed v: with
        g(v) = f(x(v), v), the chain rule reads dg/dv = diff(f, x) dx/dv + (the direct part)."""
        name = x_node.id
        ph = TValue(b.value.type, tuple(sp.Symbol(f"diff%{name}" + (f"[{i}]" if len(b.value.comps) > 1 else ""),
                                                  real=True) for i in range(len(b.value.comps))))
        if b.kind == "argument":
            builder = Builder(self.scope, self.src, {**self.args, name: Binding("argument", ph)}, self.calls,
                              self.check)
        else:
            names = dict(self.scope.names)
            scope = Scope(names, self.scope.helpers, self.scope.old)  # its own memo: names differ
            keys = list(names)
            names[name] = Binding("define", ph)
            for k in keys[keys.index(name) + 1:]:
                later = names[k]
                if later.kind == "define" and later.src is not None:
                    names[k] = Binding("define", Builder(scope, later.src).build(parse(later.src)), None,
                                       later.src)
            builder = Builder(scope, self.src, self.args, self.calls, self.check)
        f = builder.build(f_node)
        if not f.is_scalar:
            raise self.src.error(f"diff(f, x) needs a Scalar f, got {f.type.name}", f_node)
        back = dict(zip(ph.comps, b.value.comps))
        free = FreeSymbols()
        return TValue(b.value.type, tuple(Diff(p, free)(f.expr).xreplace(back) for p in ph.comps))

    def _arity(self, node, n):
        if len(node.args) != n:
            name = node.func.id
            hint = f"usage: {SPECIAL[name].split(':')[0]}" if name in SPECIAL else ""
            raise self.src.error(f"{name}() takes {n} argument{'s' * (n != 1)}, got {len(node.args)}",
                                 node, hint)

    def _variable(self, node, what) -> Binding:
        if not isinstance(node, ast.Name):
            raise self.src.error(f"{what}()'s argument must be the name of a variable", node)
        b = self._lookup(node.id, node)
        if what == "old":
            if b.kind not in ("input", "unknown", "output"):
                raise self.src.error(f"old() takes a variable (an input, output or unknown), {node.id!r} "
                                     f"is a{'n' * (b.kind[0] in 'aeiou')} {b.kind}", node)
            return b
        if b.kind == "output":
            raise self._output_error(node)
        comps = b.value.comps
        if not all(isinstance(c, sp.Symbol) for c in comps) or len(set(comps)) != len(comps):
            raise self.src.error(f"diff(f, x) differentiates w.r.t. a variable or a named define; {node.id!r} "
                                 f"is not one", node, "use an input, unknown, parameter or define entry as x")
        return b

    def _helper(self, h: Helper, node):
        if len(node.args) != len(h.params):
            raise self.src.error(f"{h.name}() takes {len(h.params)} argument{'s' * (len(h.params) != 1)} "
                                 f"({', '.join(h.params)}), got {len(node.args)}", node)
        if h.name in self.calls:
            chain = " -> ".join(self.calls[self.calls.index(h.name):] + (h.name,))
            raise self.src.error(f"helper {h.name}() calls itself ({chain}): recursion is not supported", node)
        if len(self.calls) >= limits.MAX_HELPER_DEPTH:
            raise self.src.error(f"helper calls nested more than {limits.MAX_HELPER_DEPTH} deep "
                                 f"({' -> '.join(self.calls[:3])} -> ... -> {h.name})", node)
        bound = {}
        for p, a in zip(h.params, node.args):
            if isinstance(a, ast.Name) and (a.id in self.args or a.id in self.scope.names):
                b = self._lookup(a.id, a)
                if b.kind == "output":
                    raise self._output_error(a)
                bound[p] = Binding("argument", b.value, b.var)
            else:
                bound[p] = Binding("argument", self.build(a))
        # one expansion per distinct call: a chain of helpers calling the previous one twice is linear
        key = (h.name, tuple((p, b.value.type.name, b.value.comps, b.var.name if b.var else None)
                             for p, b in bound.items()))
        done = self.scope.expanded.get(key)
        if done is None:
            if len(self.scope.expanded) >= limits.MAX_HELPER_CALLS:
                raise self.src.error(f"more than {limits.MAX_HELPER_CALLS} distinct helper expansions in one "
                                     f"model (at this call of {h.name}())", node,
                                     "helpers that call other helpers several times with different "
                                     "arguments multiply the work; simplify the chain")
            done = self.scope.expanded[key] = Builder(self.scope, h.source, bound, self.calls + (h.name,),
                                                      self.check).build(h.body)
            # each expansion checked at once (one walk of its DAG): a chain of helpers using the
            # previous one several times grows geometrically, and SymPy's exp() walks its argument
            # as a tree; checked only at the end, h24 of tanh(h)*h + exp(h/9) ran past 5 minutes
            # (3**24 tree nodes at ~0.5 us each: hours)
            limits.check_value(done.comps, lambda m, hint: self._raise(m, node, hint))
        return done


def build_expr(text: str, loc: Loc, scope: Scope) -> TValue:
    """Parse and build one expression in ``scope``."""
    src = Source(text, loc)
    tree = parse(src)
    try:
        value = Builder(scope, src).build(tree)
        limits.check_value(value.comps, lambda m, h: _locate(scope, src, tree, m, h))
    except RecursionError:
        raise src.error("expression too deeply nested") from None
    return value


def _locate(scope: Scope, src: Source, tree: ast.expr, message: str, hint: str) -> None:
    """Raise ``message`` at the innermost node of ``tree`` whose value is refused: the expression is
    built again, checking every node (only on this error path)."""
    Builder(Scope(scope.names, scope.helpers, scope.old), src, check=True).build(tree)
    raise src.error(message, None, hint)


def markdown() -> str:
    """The built-in functions, special forms and constants as Markdown tables (for docs/spec.md)."""
    rows = ["| function | args | meaning |", "|---|---|---|"]
    rows += [f"| `{b.name}` | {b.nargs} | {b.doc.replace('|', '&#124;')} |" for b in BUILTINS.values()]
    rows += ["", "| special form | meaning |", "|---|---|"]
    rows += [f"| `{k}` | {v} |" for k, v in SPECIAL.items()]
    rows += ["", "| constant | meaning |", "|---|---|"]
    rows += [f"| `{k}` | {doc} |" for k, (_, doc) in CONSTANTS.items()]
    return "\n".join(rows) + "\n"
