"""Typed symbolic tensor values and the tensor algebra of the spec language.

A :class:`TValue` is a :class:`TensorType` plus its flat storage components (SymPy expressions, in
Mandel order for SR2/SSR4). Every operation checks its operand types and raises :class:`OpError`
(which argument is wrong, and what was expected); the expression builder turns that into a
:class:`~modelc.errors.SpecError` with a caret under the argument.

Mandel identities used (the weights live in :mod:`modelc.mandel`): ``a : b`` of two SR2 is the dot
product of their 6 components; ``C : a`` of an SSR4 and an SR2 is the 6x6 matrix-vector product; the
outer product of two SR2 is ``a_m b_n``; tensors without these identities go through full components.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import sympy as sp

from modelc import mandel
from modelc.functions import powr, safe_sqrt
from modelc.runtime.types import R2, SR2, SSR4, Scalar, TensorType, Vec, WR2
from modelc.symdag import Identity


MAX_EXPONENT = 1024  # a numeric exponent beyond this is refused (9**9**9 would not finish)


class OpError(Exception):
    """A type error in an operation: ``arg`` is the index of the offending argument (or None)."""

    def __init__(self, message: str, arg: int | None = None, hint: str = ""):
        super().__init__(message)
        self.message, self.arg, self.hint = message, arg, hint


@dataclass(frozen=True, slots=True)
class TValue:
    type: TensorType
    comps: tuple

    @staticmethod
    def scalar(e) -> "TValue":
        return TValue(Scalar, (sp.sympify(e),))

    @property
    def is_scalar(self) -> bool:
        return self.type is Scalar

    @property
    def expr(self) -> sp.Expr:
        return self.comps[0]

    def map(self, f) -> "TValue":
        return TValue(self.type, tuple(f(c) for c in self.comps))

    def __str__(self) -> str:
        return f"{self.type.name}{tuple(sp.sstr(c) for c in self.comps)}"


def _require(v: TValue, types: tuple[TensorType, ...], arg: int, what: str) -> None:
    if v.type not in types:
        names = " or ".join(t.name for t in types)
        raise OpError(f"{what} expects {names}, got {v.type.name}", arg)


def _sq(m: int, n: int, comps) -> list[list]:
    return [[comps[n * i + j] for j in range(n)] for i in range(m)]


# --------------------------------------------------------------------------------------------------
# arithmetic
# --------------------------------------------------------------------------------------------------
def add(a: TValue, b: TValue, op: str = "+") -> TValue:
    if a.type is not b.type:
        bad = 0 if a.is_scalar and not b.is_scalar else 1  # point at the scalar, else the right operand
        hint = ("a scalar is not added to a tensor implicitly; did you mean to multiply by I2?"
                if a.is_scalar != b.is_scalar else "")
        raise OpError(f"cannot apply '{op}' to {a.type.name} and {b.type.name}: "
                      f"both operands must have the same type", bad, hint)
    sign = 1 if op == "+" else -1
    return TValue(a.type, tuple(x + sign * y for x, y in zip(a.comps, b.comps)))


def neg(a: TValue) -> TValue:
    return a.map(lambda c: -c)


def mul(a: TValue, b: TValue) -> TValue:
    if a.is_scalar:
        return b.map(lambda c: a.expr * c)
    if b.is_scalar:
        return a.map(lambda c: c * b.expr)
    raise OpError(f"cannot multiply {a.type.name} by {b.type.name} with '*'", 1,
                  "'*' needs a Scalar operand; use ddot(A, B) for a double contraction, dot(A, B) for "
                  "a single contraction, outer(A, B) for an outer product, or index notation "
                  "A[i,j]*B[j,k]")


def div(a: TValue, b: TValue) -> TValue:
    if not b.is_scalar:
        raise OpError(f"cannot divide by a {b.type.name}: the divisor must be a Scalar", 1,
                      "use inv(A) for the inverse of a tensor")
    return a.map(lambda c: c / b.expr)


def power(a: TValue, b: TValue) -> TValue:
    _require(a, (Scalar,), 0, "'**'")
    _require(b, (Scalar,), 1, "'**'")
    if b.expr.is_Number and abs(b.expr) > MAX_EXPONENT:
        raise OpError(f"exponent {b.expr} is too large (at most {MAX_EXPONENT} in magnitude)", 1)
    if a.expr.is_Number and b.expr.is_Number and a.expr != 0 and _pow_bits(a.expr, b.expr) > 1100:
        raise OpError(f"{a.expr}**{b.expr} is beyond the largest float64", None)
    if a.expr.is_Number and a.expr < 0 and b.expr.is_Number and not b.expr.is_Integer:
        raise OpError(f"({a.expr})**{b.expr}: a negative number to a non-integer power is not a real number",
                      None)
    if b.expr.is_Integer:  # kept as a power: the printers expand integer powers
        return TValue.scalar(sp.Pow(a.expr, b.expr))
    return TValue.scalar(powr(a.expr, b.expr))  # NaN-free derivative at a = 0 (see functions.powr)


def _pow_bits(a: sp.Expr, b: sp.Expr) -> float:
    """About log2 |a**b| for numbers a != 0 and b, without computing the power."""
    try:
        log_a = math.log2(abs(float(a)))
    except OverflowError:  # |a| beyond a float64
        log_a = float(sp.log(abs(a), 2).evalf(10))
    except ValueError:  # |a| underflows to 0
        log_a = -1100.0
    return float(b) * log_a


def scalar_fn(f, name: str):
    """Lift a SymPy scalar function to a Scalar-only operation."""
    def op(*args: TValue) -> TValue:
        for i, a in enumerate(args):
            _require(a, (Scalar,), i, f"{name}()")
        return TValue.scalar(f(*(a.expr for a in args)))
    return op


# --------------------------------------------------------------------------------------------------
# tensor operations
# --------------------------------------------------------------------------------------------------
def I2() -> TValue:
    return TValue(SR2, (1, 1, 1, 0, 0, 0))


def IR2() -> TValue:
    return TValue(R2, tuple(sp.Integer(int(i == j)) for i in range(3) for j in range(3)))


def I4sym() -> TValue:
    return TValue(SSR4, tuple(sp.Integer(int(m == n)) for m in range(6) for n in range(6)))


def I4vol() -> TValue:
    return TValue(SSR4, tuple(sp.Rational(1, 3) if m < 3 and n < 3 else sp.S.Zero
                              for m in range(6) for n in range(6)))


def I4dev() -> TValue:
    return add(I4sym(), I4vol(), "-")


def tr(a: TValue) -> TValue:
    _require(a, (SR2, R2), 0, "tr()")
    c = a.comps
    return TValue.scalar(c[0] + c[1] + c[2] if a.type is SR2 else c[0] + c[4] + c[8])


def vol(a: TValue) -> TValue:
    _require(a, (SR2, R2), 0, "vol()")
    t = tr(a).expr / 3
    return mul(TValue.scalar(t), I2() if a.type is SR2 else IR2())


def dev(a: TValue) -> TValue:
    _require(a, (SR2, R2), 0, "dev()")
    return add(a, vol(a), "-")


def ddot(a: TValue, b: TValue) -> TValue:
    pair = (a.type.name, b.type.name)
    if pair in (("SR2", "SR2"), ("R2", "R2"), ("Vec", "Vec"), ("WR2", "WR2")):
        w = 2 if a.type is WR2 else 1  # W:W = 2 w.w for the axial storage
        return TValue.scalar(w * sum(x * y for x, y in zip(a.comps, b.comps)))
    if pair == ("SSR4", "SR2"):
        m = _sq(6, 6, a.comps)
        return TValue(SR2, tuple(sum(m[i][j] * b.comps[j] for j in range(6)) for i in range(6)))
    if pair == ("SR2", "SSR4"):
        m = _sq(6, 6, b.comps)
        return TValue(SR2, tuple(sum(a.comps[i] * m[i][j] for i in range(6)) for j in range(6)))
    if pair == ("SSR4", "SSR4"):
        x, y = _sq(6, 6, a.comps), _sq(6, 6, b.comps)
        return TValue(SSR4, tuple(sum(x[i][k] * y[k][j] for k in range(6))
                                  for i in range(6) for j in range(6)))
    raise OpError(f"ddot() of {a.type.name} and {b.type.name} is not defined; expected SR2:SR2, R2:R2, "
                  f"SSR4:SR2, SR2:SSR4 or SSR4:SSR4", 1)


def dot(a: TValue, b: TValue) -> TValue:
    """Single contraction (last index of a with the first of b) through full components."""
    for i, v in enumerate((a, b)):
        _require(v, (Vec, SR2, R2, WR2), i, "dot()")
    fa, fb = mandel.to_full(a.type, a.comps), mandel.to_full(b.type, b.comps)
    oa, ob = mandel.ORDER[a.type.name], mandel.ORDER[b.type.name]
    out = {}
    for ia in itertools.product(range(3), repeat=oa - 1):
        for ib in itertools.product(range(3), repeat=ob - 1):
            out[ia + ib] = sum(fa[ia + (k,)] * fb[(k,) + ib] for k in range(3))
    rtype = {0: Scalar, 1: Vec, 2: R2}[oa + ob - 2]
    return TValue(rtype, mandel.from_full(rtype, out))


def outer(a: TValue, b: TValue) -> TValue:
    if a.type is SR2 and b.type is SR2:
        return TValue(SSR4, tuple(x * y for x in a.comps for y in b.comps))
    if a.type is Vec and b.type is Vec:
        return TValue(R2, tuple(x * y for x in a.comps for y in b.comps))
    raise OpError(f"outer() of {a.type.name} and {b.type.name} is not defined; expected SR2 x SR2 "
                  f"(gives SSR4) or Vec x Vec (gives R2)", 1)


def transpose(a: TValue) -> TValue:
    _require(a, (SR2, R2, SSR4, WR2), 0, "transpose()")
    if a.type is R2:
        return TValue(R2, tuple(a.comps[3 * j + i] for i in range(3) for j in range(3)))
    if a.type is SSR4:
        return TValue(SSR4, tuple(a.comps[6 * n + m] for m in range(6) for n in range(6)))
    if a.type is WR2:
        return neg(a)
    return a


def sym(a: TValue) -> TValue:
    _require(a, (SR2, R2), 0, "sym()")
    return a if a.type is SR2 else TValue(SR2, mandel.from_full(SR2, mandel.to_full(R2, a.comps)))


def skew(a: TValue) -> TValue:
    _require(a, (R2,), 0, "skew()")
    return TValue(WR2, mandel.from_full(WR2, mandel.to_full(R2, a.comps)))


def _cofactors(a: TValue) -> tuple[dict, sp.Expr]:
    """The cofactors ``c[(i, j)]`` of a 3x3 tensor and its determinant, written out as products of
    its components (never expanded: SymPy's ``Matrix.det`` multiplies out polynomial entries, which
    took minutes and millions of operations for a nested tensor expression)."""
    f = mandel.to_full(a.type, a.comps)
    c = {}
    for i in range(3):
        i1, i2 = (i + 1) % 3, (i + 2) % 3
        for j in range(3):
            j1, j2 = (j + 1) % 3, (j + 2) % 3
            c[(i, j)] = f[(i1, j1)] * f[(i2, j2)] - f[(i1, j2)] * f[(i2, j1)]
    return c, f[(0, 0)] * c[(0, 0)] + f[(0, 1)] * c[(0, 1)] + f[(0, 2)] * c[(0, 2)]


def det(a: TValue) -> TValue:
    _require(a, (SR2, R2), 0, "det()")
    return TValue.scalar(_cofactors(a)[1])


def inv(a: TValue) -> TValue:
    _require(a, (Scalar, SR2, R2), 0, "inv()")
    if a.is_scalar:
        return TValue.scalar(1 / a.expr)
    c, d = _cofactors(a)
    full = {(i, j): c[(j, i)] / d for i in range(3) for j in range(3)}  # the adjugate over det
    return TValue(a.type, mandel.from_full(a.type, full))


def norm(a: TValue) -> TValue:
    """sqrt(a : a) with the safe square root (0 and zero derivative at a = 0, never NaN)."""
    _require(a, (Scalar, Vec, SR2, R2), 0, "norm()")
    if a.is_scalar:
        return TValue.scalar(safe_sqrt(a.expr ** 2))
    return TValue.scalar(safe_sqrt(ddot(a, a).expr))


# --------------------------------------------------------------------------------------------------
# Einstein index notation
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Indexed:
    """A tensor with named free indices; ``data`` maps index values (in ``indices`` order) to
    expressions over full (not Mandel) components."""

    indices: tuple[str, ...]
    data: dict
    summed: frozenset = frozenset()   # indices already contracted (they may not appear again)

    def __str__(self) -> str:
        return f"Indexed[{','.join(self.indices)}]"


def _canonical(idx: tuple[str, ...], data: dict, summed: frozenset = frozenset()) -> Indexed:
    """Sum over indices repeated within one term; order free indices alphabetically."""
    free = tuple(sorted(set(i for i in idx if idx.count(i) == 1)))
    summed = summed | {i for i in idx if idx.count(i) == 2}
    out = {}
    for vals in itertools.product(range(3), repeat=len(idx)):
        env = {}
        ok = True
        for name, v in zip(idx, vals):
            if env.setdefault(name, v) != v:
                ok = False
                break
        if ok:
            key = tuple(env[n] for n in free)
            out[key] = out.get(key, sp.S.Zero) + data[vals]
    return Indexed(free, out, summed)


def index(a: TValue, names: tuple[str, ...]) -> Indexed:
    order = mandel.ORDER[a.type.name]
    if order == 0:
        raise OpError("a Scalar cannot be indexed", 0)
    if len(names) != order:
        raise OpError(f"{a.type.name} has {order} ind{'ex' if order == 1 else 'ices'}, "
                      f"got {len(names)}", 1)
    for n in set(names):
        if names.count(n) > 2:
            raise OpError(f"index {n!r} appears {names.count(n)} times; an index appears at most twice "
                          f"(once to be free, twice to be summed)", 1)
    return _canonical(names, mandel.to_full(a.type, a.comps))


def index_mul(a: Indexed, b: Indexed) -> Indexed:
    again = sorted((set(a.indices) | a.summed) & b.summed | (set(b.indices) | b.summed) & a.summed)
    if again:
        raise OpError(f"index {again[0]!r} appears more than twice in a product (an index appears at most "
                      f"twice: once to be free, twice to be summed)", None)
    idx = a.indices + b.indices
    data = {}
    for va in itertools.product(range(3), repeat=len(a.indices)):
        for vb in itertools.product(range(3), repeat=len(b.indices)):
            data[va + vb] = a.data[va] * b.data[vb]
    return _canonical(idx, data, a.summed | b.summed)


def index_scale(a: Indexed, s: sp.Expr) -> Indexed:
    return Indexed(a.indices, {k: v * s for k, v in a.data.items()}, a.summed)


def index_add(a: Indexed, b: Indexed, op: str = "+") -> Indexed:
    if set(a.indices) != set(b.indices):
        raise OpError(f"cannot apply '{op}' to terms with free indices [{','.join(a.indices)}] and "
                      f"[{','.join(b.indices)}]: both terms must have the same free indices", 1)
    sign = 1 if op == "+" else -1
    return Indexed(a.indices, {k: a.data[k] + sign * b.data[k] for k in a.data})  # terms: fresh sums




def from_indexed(a: Indexed) -> TValue:
    """The typed value of an index expression, from its free indices (alphabetical order)."""
    n = len(a.indices)
    if n == 0:
        return TValue.scalar(a.data[()])
    if n == 1:
        return TValue(Vec, mandel.from_full(Vec, a.data))
    same = Identity().same  # symbolically, without multiplying out (symdag.Identity)
    if n == 2:
        symmetric = all(same(a.data[(i, j)], a.data[(j, i)]) for i, j in ((0, 1), (0, 2), (1, 2)))
        t = SR2 if symmetric else R2
        return TValue(t, mandel.from_full(t, a.data))
    if n == 4:
        minor = all(same(a.data[(i, j, k, l)], a.data[(j, i, k, l)])
                    and same(a.data[(i, j, k, l)], a.data[(i, j, l, k)])
                    for i, j, k, l in itertools.product(range(3), repeat=4) if i < j or k < l)
        if minor:
            return TValue(SSR4, mandel.from_full(SSR4, a.data))
        raise OpError("a 4th-order result without minor symmetries has no type in modelc "
                      "(only SSR4 is supported)", None)
    raise OpError(f"an index expression with {n} free indices [{','.join(a.indices)}] has no type "
                  f"(expected 0, 1, 2 or 4 free indices)", None)
