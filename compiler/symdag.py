"""SymPy walks that visit each *distinct* subexpression once: exact, faster equivalents of
``expr.free_symbols`` (:class:`FreeSymbols`), ``expr.xreplace`` (:func:`xreplace`),
``sympy.diff(expr, symbol)`` (:class:`Diff`), ``sympy.cse(..., order="canonical")`` (:func:`cse`)
and ``sympy.sstr`` (:class:`StrPrinterMemo`), for the expressions the passes build.

Why: the compiler's expressions are DAGs (a trial stress, a flow direction, a hardening term read by
every component), but SymPy walks them as trees. ``free_symbols`` recomputes every shared subtree,
and ``sympy.diff`` is worse: each recursive step goes through ``Derivative.__new__``, which walks the
whole subexpression for its free symbols (twice) and then once more for a ``replace`` of unevaluated
derivatives: quadratic in the depth of the expression, and repeated for every component and every
symbol differentiated against. These memoize per distinct subexpression, so the work is linear in
the DAG's size (j2_voce_af: differentiate 1.6 -> 0.17 s, cse 1.8 -> 0.5 s).

They are *exact*: the same expressions as SymPy's, node for node (the generated code depends on the
structure, and ``generated/`` is checked byte for byte). :class:`Diff` applies SymPy's own rules
(``Add._eval_derivative``, ``Mul._eval_derivative_n_times``, ``Pow._eval_derivative``,
``Function._eval_derivative``, as in SymPy 1.12-1.15) with the recursive ``arg.diff(s)`` replaced by
the memoized one, and calls ``sympy.diff`` itself for any node it has no rule for (Piecewise, Abs,
...). A memo is keyed on expression equality, as SymPy's own caches are. tests/compiler/test_symdag.py
compares each with SymPy (``srepr``) on fresh random DAGs and on the largest library model.
"""
from __future__ import annotations

import math
from functools import cache
from typing import Iterable

import sympy as sp
from sympy.core.function import ArgumentIndexError
from sympy.core.sorting import _nodes as _sympy_nodes
from sympy.core.sorting import default_sort_key
from sympy.matrices.expressions.matexpr import MatrixElement
from sympy.ntheory.multinomial import multinomial_coefficients_iterator
from sympy.polys.rootoftools import RootOf
from sympy.printing.str import StrPrinter
from sympy.simplify.cse_main import Unevaluated, opt_cse
from sympy.utilities.iterables import iterable

_BASIC_FREE = sp.Basic.__dict__["free_symbols"]
_BASIC_XREPLACE = sp.Basic.__dict__["_xreplace"]
_FUNCTION_DERIVATIVE = sp.Function.__dict__["_eval_derivative"]
_FUNCTION_FDIFF = sp.Function.__dict__["fdiff"]


def _defined_in(cls: type, attr: str):
    for k in cls.__mro__:
        if attr in k.__dict__:
            return k.__dict__[attr]
    return None


@cache
def _union_of_args(cls: type) -> bool:
    """Whether ``cls.free_symbols`` is Basic's: the union of its arguments' free symbols."""
    return _defined_in(cls, "free_symbols") is _BASIC_FREE


@cache
def _plain_xreplace(cls: type) -> bool:
    """Whether ``cls._xreplace`` is Basic's."""
    return _defined_in(cls, "_xreplace") is _BASIC_XREPLACE


class FreeSymbols:
    """``expr.free_symbols`` memoized over subexpressions (one instance per pass: the memo holds the
    expressions it has seen)."""

    def __init__(self) -> None:
        self._memo: dict[sp.Basic, frozenset] = {}

    def __call__(self, expr) -> frozenset:
        memo = self._memo
        hit = memo.get(expr)
        if hit is not None:
            return hit
        if not isinstance(expr, sp.Basic):
            return frozenset(sp.sympify(expr).free_symbols)
        # iterative post-order walk (expressions can nest deeper than Python's recursion limit)
        stack = [(expr, False)]
        while stack:
            e, ready = stack.pop()
            if e in memo:
                continue
            if not _union_of_args(type(e)):
                memo[e] = frozenset(e.free_symbols)
            elif not e.args:
                memo[e] = frozenset()
            elif ready:
                args = e.args
                out = memo[args[0]]
                for a in args[1:]:
                    fa = memo[a]
                    if not fa <= out:
                        out = out | fa
                memo[e] = out
            else:
                stack.append((e, True))
                stack.extend((a, False) for a in e.args if a not in memo)
        return memo[expr]

    def union(self, exprs: Iterable) -> set:
        out: set = set()
        for e in exprs:
            out |= self(e)
        return out


def free_symbols(exprs: Iterable) -> set:
    """The union of the free symbols of ``exprs`` (shared subexpressions walked once)."""
    return FreeSymbols().union(exprs)


def xreplace(expr, rule: dict, whole=None):
    """``expr.xreplace(rule)``: the same expression, each distinct subexpression rebuilt once.

    ``whole``: a predicate on the replaced keys. A product one of whose factors is such a key
    replaced by a product is rebuilt unevaluated (``Mul(..., evaluate=False)``), so the replacement
    stays one factor instead of being flattened into the product (see modelc.passes.cse)."""
    if not rule or not isinstance(expr, sp.Basic):
        return expr.xreplace(rule) if isinstance(expr, sp.Basic) else expr
    memo: dict = {}

    def nest(e, args) -> bool:
        return (whole is not None and isinstance(e, sp.Mul)
                and any(a in rule and whole(a) and isinstance(x, sp.Mul) for a, x in zip(e.args, args)))

    def walk(e):  # Basic._xreplace, memoized
        hit = memo.get(e)
        if hit is not None:
            return hit
        if e in rule:
            out = (rule[e], True)
        else:
            args = []
            changed = False
            for a in e.args:
                if isinstance(a, sp.Basic) and _plain_xreplace(type(a)):
                    a, c = walk(a)
                    changed |= c
                elif getattr(a, "_xreplace", None) is not None:
                    a, c = a._xreplace(rule)
                    changed |= c
                args.append(a)
            if not changed:
                out = (e, False)
            else:
                out = (sp.Mul(*args, evaluate=False) if nest(e, args) else e.func(*args), True)
        memo[e] = out
        return out

    if not _plain_xreplace(type(expr)):
        return expr.xreplace(rule)
    return walk(expr)[0]


class Diff:
    """``sympy.diff(expr, s)`` for one Symbol ``s``, memoized over the subexpressions of every
    expression it is called on (one instance per symbol; reuse it for all the expressions
    differentiated against ``s``). ``free`` may be shared between instances."""

    def __init__(self, s: sp.Symbol, free: FreeSymbols | None = None) -> None:
        if not isinstance(s, sp.Symbol):
            raise TypeError(f"Diff: differentiate with respect to a Symbol, not {s!r}")
        self.s = s
        self.free = free if free is not None else FreeSymbols()
        self._memo: dict[sp.Basic, sp.Expr] = {}

    def __call__(self, expr) -> sp.Expr:
        expr = sp.sympify(expr)
        hit = self._memo.get(expr)
        if hit is None:
            hit = self._memo[expr] = self._eval(expr)
        return hit

    def _eval(self, e: sp.Basic) -> sp.Expr:
        s = self.s
        # Derivative.__new__: a symbol the expression does not contain gives zero at once
        if s not in self.free(e):
            return sp.S.Zero
        cls = type(e)
        if e.is_Symbol and e == s:  # AtomicExpr._eval_derivative
            return sp.S.One
        if cls is sp.Add:  # Add._eval_derivative
            return e.func(*[self(a) for a in e.args])
        if cls is sp.Mul:  # Mul._eval_derivative_n_times(s, 1): Leibniz's rule
            terms = []
            for kvals, c in multinomial_coefficients_iterator(len(e.args), sp.S.One):
                p = sp.Mul(*[self(a) if k else a for k, a in zip(kvals, e.args)])
                terms.append(c * p)
            return sp.Add(*terms)
        if cls is sp.Pow:  # Pow._eval_derivative
            dbase = self(e.base)
            dexp = self(e.exp)
            return e * (dexp * sp.log(e.base) + dbase * e.exp / e.base)
        if (isinstance(e, sp.Function) and _defined_in(cls, "_eval_derivative") is _FUNCTION_DERIVATIVE
                and _defined_in(cls, "fdiff") is not _FUNCTION_FDIFF):
            return self._function(e)
        return sp.diff(e, s)  # no rule here: SymPy's own

    def _function(self, e: sp.Function) -> sp.Expr:
        """Function._eval_derivative: the chain rule over the arguments, by the class's ``fdiff``."""
        terms = []
        for i, a in enumerate(e.args, 1):
            da = self(a)
            if da.is_zero:
                continue
            try:
                df = e.fdiff(i)
            except ArgumentIndexError:
                df = sp.Function.fdiff(e, i)
            terms.append(df * da)
        return sp.Add(*terms)


class _NodeCount:
    """``sympy.core.sorting._nodes`` (the first key of ``sympy.ordered``), memoized."""

    def __init__(self) -> None:
        self._memo: dict[sp.Basic, float] = {}

    def __call__(self, e) -> float:
        if not isinstance(e, sp.Basic) or isinstance(e, sp.Derivative):
            return _sympy_nodes(e)
        if not e.args:
            return 0.5 if e.is_Float else 1
        hit = self._memo.get(e)
        if hit is None:
            hit = self._memo[e] = (0.5 if e.is_Float else 1) + sum(map(self, e.args))
        return hit


def cse(exprs: list, symbols) -> tuple[list, list]:
    """``sympy.cse(exprs, symbols=symbols, order="canonical")``: the same replacements and reduced
    expressions. SymPy's ``tree_cse`` orders the arguments of every Add and Mul it rebuilds with
    ``sympy.ordered``, whose first key counts the nodes of each argument's tree, again at every
    level; here the count is memoized (:class:`_NodeCount`) and ``ordered``'s two keys are applied
    as one sort key. The rest is SymPy's ``tree_cse`` (BSD licence), for ``order="canonical"``
    and no ``ignore``."""
    exprs = list(exprs)
    opt_subs = opt_cse(exprs, "canonical")
    return _tree_cse(exprs, iter(symbols), opt_subs)


def _tree_cse(exprs, symbols, opt_subs):
    to_eliminate = set()
    seen_subexp = set()
    excluded_symbols = set()

    def _find_repeated(expr):
        if not isinstance(expr, (sp.Basic, Unevaluated)):
            return
        if isinstance(expr, RootOf):
            return
        if isinstance(expr, sp.Basic) and (
                expr.is_Atom or expr.is_Order or isinstance(expr, (sp.MatrixSymbol, MatrixElement))):
            if expr.is_Symbol:
                excluded_symbols.add(expr.name)
            return
        if iterable(expr):
            args = expr
        else:
            if expr in seen_subexp:
                to_eliminate.add(expr)
                return
            seen_subexp.add(expr)
            if expr in opt_subs:
                expr = opt_subs[expr]
            args = expr.args
        list(map(_find_repeated, args))

    for e in exprs:
        if isinstance(e, sp.Basic):
            _find_repeated(e)

    # remove symbols from the generator that conflict with names in the expressions
    symbols = (_ for _ in symbols if _.name not in excluded_symbols)
    replacements = []
    subs = {}
    nodes = _NodeCount()

    def ordered(args):  # sympy.ordered(args) with its default keys (_nodes, then default_sort_key)
        return sorted(args, key=lambda a: (nodes(a), default_sort_key(a))) if len(args) > 1 else list(args)

    def _rebuild(expr):
        if not isinstance(expr, (sp.Basic, Unevaluated)):
            return expr
        if not expr.args:
            return expr
        if iterable(expr):
            new_args = [_rebuild(arg) for arg in expr.args]
            return expr.func(*new_args)
        if expr in subs:
            return subs[expr]
        orig_expr = expr
        if expr in opt_subs:
            expr = opt_subs[expr]
        # parse Muls' and Adds' arguments in order, so the replacements do not depend on hashes
        if isinstance(expr, (sp.Mul, sp.MatMul)):
            c, nc = expr.args_cnc()
            if c == [1]:
                args = nc
            else:
                args = ordered(c) + nc
        elif isinstance(expr, (sp.Add, sp.MatAdd)):
            args = ordered(expr.args)
        else:
            args = expr.args
        new_args = list(map(_rebuild, args))
        if isinstance(expr, Unevaluated) or new_args != args:
            new_expr = expr.func(*new_args)
        else:
            new_expr = expr
        if orig_expr in to_eliminate:
            sym = next(symbols)
            if isinstance(orig_expr, sp.MatrixExpr):
                sym = sp.MatrixSymbol(sym.name, orig_expr.rows, orig_expr.cols)
            subs[orig_expr] = sym
            replacements.append((sym, new_expr))
            return sym
        return new_expr

    reduced_exprs = [_rebuild(e) if isinstance(e, sp.Basic) else e for e in exprs]
    return replacements, reduced_exprs


class StrPrinterMemo(StrPrinter):
    """``sympy.sstr`` (default settings) for many expressions that share subexpressions: a
    subexpression printed inside another is printed once and its text reused. Only nested prints
    are reused: the one setting that depends on the nesting (a Float's trailing zeros, stripped
    below the top level) is then the same for every use. Keyed on the object (``id``, the object
    kept alive by the memo), so two equal but distinct objects are printed separately."""

    def __init__(self) -> None:
        super().__init__()
        self._memo: dict[int, tuple[sp.Basic, str]] = {}

    def __call__(self, expr) -> str:
        return self.doprint(expr)

    def _print(self, expr, **kwargs) -> str:
        if kwargs or self._print_level < 1 or not isinstance(expr, sp.Basic) or not expr.args:
            return super()._print(expr, **kwargs)
        hit = self._memo.get(id(expr))
        if hit is None:
            hit = self._memo[id(expr)] = (expr, super()._print(expr))
        return hit[1]


# --------------------------------------------------------------------------------------------------
# identity testing without expansion
# --------------------------------------------------------------------------------------------------
_P = (1 << 61) - 1  # a Mersenne prime: the field the identity test evaluates in


class _Undefined(Exception):
    """A denominator vanished at the chosen point (mod P): the point is unusable."""


class _ModPoint:
    """Every expression's value modulo P at one random point, memoized per distinct subexpression.

    Sums, products and integer powers are evaluated; everything else (a function, a non-integer
    power, pi) is an uninterpreted function of its head and its arguments' values: one random value
    per distinct (head, argument values), so equal arguments give equal values whatever their form."""

    def __init__(self, rng) -> None:
        self.rng, self.memo, self.atoms = rng, {}, {}

    def __call__(self, e) -> int:
        v = self.memo.get(e)
        if v is None:
            v = self.memo[e] = self._eval(e)
        return v

    def _inverse(self, v: int) -> int:
        if v % _P == 0:
            raise _Undefined
        return pow(v, -1, _P)

    def _eval(self, e) -> int:
        if e.is_Rational:
            return e.p % _P * self._inverse(e.q) % _P
        if e.is_Float:  # its exact binary value, as SymPy's own arithmetic on it takes it
            return self._eval(sp.Rational(e))
        if e.is_Add:
            return sum(self(a) for a in e.args) % _P
        if e.is_Mul:
            v = 1
            for a in e.args:
                v = v * self(a) % _P
            return v
        if e.is_Pow and e.exp.is_Integer:
            b = self(e.base)
            return pow(b if e.exp >= 0 else self._inverse(b), abs(int(e.exp)), _P)
        key = (e.func, tuple(self(a) for a in e.args)) if e.args else e
        v = self.atoms.get(key)
        if v is None:
            v = self.atoms[key] = self.rng.randrange(1, _P)
        return v


class Identity:
    """Whether two expressions are the same function, without multiplying anything out.

    ``sympy.expand(a - b) == 0`` decides it for polynomials but multiplies out products of sums,
    which for the product of three tensors of rational entries ran for longer than ten minutes.
    Here ``a`` and ``b`` are evaluated modulo a 61-bit prime at two random points (the same for
    every comparison of one ``Identity``: memoized, so a whole tensor's comparisons cost one walk
    of its DAG), with sums, products and integer powers exact and every other subexpression an
    uninterpreted function of its arguments. Two different rational functions of degree d agree
    at a random point with probability at most d / 2**61 (Schwartz-Zippel): a True is wrong with
    probability below 1e-30 for any expression a spec can hold. A float constant counts with its
    exact binary value: forms whose constants SymPy rounded differently (0.1*0.1 folded into
    0.01) differ, as they do for ``expand``. What the atoms hide is not used
    (``exp(u)**2`` is ``exp(2 u)``, ``sqrt(x)**2`` is ``x``): such pairs count as the same only
    when their difference multiplies out small (``_EXPAND_TERMS``), else as different, which callers
    read as "keep both". The points are drawn from a fixed seed: the answer, and so the compiled
    code, is reproducible."""

    def __init__(self, points: int = 2, seed: int = 20261128) -> None:
        import random

        rng = random.Random(seed)
        self._points = [_ModPoint(rng) for _ in range(points)]

    def same(self, a, b) -> bool:
        if a == b:
            return True
        a, b = sp.sympify(a), sp.sympify(b)
        try:
            if all(p(a) == p(b) for p in self._points):
                return True
        except _Undefined:  # a denominator vanished mod P: undecided here
            pass
        # what the atoms hide (exp(u)**2 is exp(2 u)): a pair that multiplies out small is expanded
        d = a - b
        return expanded_terms(d, 10 * _EXPAND_TERMS) <= _EXPAND_TERMS and sp.expand(d) == 0


_EXPAND_TERMS = 400  # the most terms Identity.same lets a difference multiply out into


def distinct(exprs: Iterable):
    """Every distinct subexpression of ``exprs`` once (equal subtrees are one, as the memoized walks
    here see them), parents before their arguments."""
    seen: set = set()
    stack = [sp.sympify(e) for e in exprs]
    while stack:
        e = stack.pop()
        if e in seen:
            continue
        seen.add(e)
        yield e
        stack.extend(e.args)


def distinct_nodes(exprs: Iterable, cap: int) -> int:
    """The number of distinct subexpressions of ``exprs`` (a shared subtree counts once), or
    ``cap + 1`` as soon as there are more than ``cap``: the size of the DAG, which bounds what the
    memoized walks here cost. ``sympy.count_ops`` counts the tree instead, walking every shared
    subtree again (minutes on a trace whose DAG has a few thousand nodes)."""
    n = 0
    for _ in distinct(exprs):
        n += 1
        if n > cap:
            break
    return n


def expanded_terms(e, cap: int = 10**6) -> int:
    """An upper bound on the number of terms ``sympy.expand(e)`` can produce (counting into the
    arguments of functions; every term taken as distinct, so far above what expand keeps where
    terms cancel), or ``cap`` if it is larger: whether expanding ``e`` is surely cheap, which
    ``count_ops`` does not say (``(a + b + c)**40`` is 3 operations and 861 terms)."""
    return _expanded_terms(sp.sympify(e), {}, cap)


def _expanded_terms(e, memo: dict, cap: int) -> int:
    n = memo.get(e)
    if n is not None:
        return n
    if e.is_Add:
        n = sum(_expanded_terms(a, memo, cap) for a in e.args)
    elif e.is_Mul:
        n = 1
        for a in e.args:
            n = min(n * _expanded_terms(a, memo, cap), cap)
    elif e.is_Pow and e.exp.is_Integer and e.exp > 1:
        b, k = _expanded_terms(e.base, memo, cap), int(e.exp)  # monomials of degree k in b terms
        n = cap if b >= cap else min(math.comb(b + k - 1, k), cap)
    else:
        n = max([1] + [_expanded_terms(a, memo, cap) for a in e.args])
    memo[e] = n = min(n, cap)
    return n


def rebuilt_like(e, args):
    """``e`` with new ``args``, built the way ``e`` was: a product that was evaluated is evaluated
    again (rebuilt unevaluated, it hid its factors from ``cse``: j2_linear_iso's tangent took 1922
    multiplications instead of 714); anything else, a product kept whole included, unevaluated
    (:func:`rebuilt`)."""
    if args == e.args:
        return e
    if e.is_Mul and e.func(*e.args) == e:
        return e.func(*args)
    return rebuilt(e, args)


def rebuilt(e, args):
    """``e`` with new ``args``; a sum, product or power unevaluated, so its terms keep their order and
    grouping (the arithmetic of the expression as written, and a product kept whole by
    :func:`modelc.passes.cse._inline_products` stays one factor)."""
    return e.func(*args, evaluate=False) if isinstance(e, (sp.Add, sp.Mul, sp.Pow)) else e.func(*args)
