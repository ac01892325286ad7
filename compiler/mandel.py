"""Symbolic Mandel conversions: the compiler's twin of :mod:`modelc.runtime.mandel`.

This is the ONLY place in the compiler with sqrt(2) factors. Storage conventions (DESIGN.md, NEML2):

- SR2 (6): ``(xx, yy, zz, s2*yz, s2*xz, s2*xy)`` with ``s2 = sqrt(2)``;
- SSR4 (6x6): ``C[m][n] = w_m w_n C_ijkl`` with ``(i, j) = PAIRS[m]``, ``(k, l) = PAIRS[n]`` and
  ``w = (1, 1, 1, s2, s2, s2)``; so ``C : e`` is the 6x6 matrix product and ``a : b`` the dot product;
- R2 (9): row-major 3x3; Vec (3); WR2 (3): axial vector ``(w_zy, w_xz, w_yx)`` of a skew tensor
  ``W`` (``W[2][1] = w0, W[0][2] = w1, W[1][0] = w2``, ``W^T = -W``).

``to_full`` expands flat storage to a full-index array (a dict from index tuples to expressions);
``from_full`` converts back (symmetric parts taken for SR2/SSR4, skew part for WR2).
"""
from __future__ import annotations

import itertools

import sympy as sp

from modelc.runtime.types import R2, SR2, SSR4, Scalar, TensorType, Vec, WR2

SQRT2 = sp.sqrt(2)
#: Mandel position -> index pair, in NEML2's order.
PAIRS: tuple[tuple[int, int], ...] = ((0, 0), (1, 1), (2, 2), (1, 2), (0, 2), (0, 1))
#: Mandel weights: 1 on the diagonal, sqrt(2) for the shear components.
WEIGHTS: tuple[sp.Expr, ...] = (sp.S.One, sp.S.One, sp.S.One, SQRT2, SQRT2, SQRT2)
#: Full index pair -> Mandel position (both (i, j) and (j, i)).
POSITION: dict[tuple[int, int], int] = {**{p: m for m, p in enumerate(PAIRS)},
                                        **{(p[1], p[0]): m for m, p in enumerate(PAIRS)}}
#: WR2 axial components: position m holds W[AXIAL[m]] (and W[reversed] = -it).
AXIAL: tuple[tuple[int, int], ...] = ((2, 1), (0, 2), (1, 0))

#: Tensor order (number of full indices) of each type.
ORDER: dict[str, int] = {"Scalar": 0, "Vec": 1, "SR2": 2, "R2": 2, "WR2": 2, "SSR4": 4}

Full = dict  # tuple[int, ...] -> sp.Expr


def sr2_to_full(c) -> Full:
    return {(i, j): c[POSITION[(i, j)]] / WEIGHTS[POSITION[(i, j)]]
            for i in range(3) for j in range(3)}


def full_to_sr2(a: Full) -> tuple[sp.Expr, ...]:
    return tuple(WEIGHTS[m] * (a[(i, j)] + a[(j, i)]) / 2 if i != j else a[(i, i)]
                 for m, (i, j) in enumerate(PAIRS))


def ssr4_to_full(c) -> Full:
    out = {}
    for i, j, k, l in itertools.product(range(3), repeat=4):
        m, n = POSITION[(i, j)], POSITION[(k, l)]
        out[(i, j, k, l)] = c[6 * m + n] / (WEIGHTS[m] * WEIGHTS[n])
    return out


def full_to_ssr4(a: Full) -> tuple[sp.Expr, ...]:
    out = []
    for m, (i, j) in enumerate(PAIRS):
        for n, (k, l) in enumerate(PAIRS):
            avg = (a[(i, j, k, l)] + a[(j, i, k, l)] + a[(i, j, l, k)] + a[(j, i, l, k)]) / 4
            out.append(WEIGHTS[m] * WEIGHTS[n] * avg)
    return tuple(out)


def wr2_to_full(w) -> Full:
    out = {(i, j): sp.S.Zero for i in range(3) for j in range(3)}
    for m, (i, j) in enumerate(AXIAL):
        out[(i, j)] = w[m]
        out[(j, i)] = -w[m]
    return out


def full_to_wr2(a: Full) -> tuple[sp.Expr, ...]:
    return tuple((a[(i, j)] - a[(j, i)]) / 2 for i, j in AXIAL)


def to_full(ttype: TensorType, comps) -> Full:
    """Flat storage components of ``ttype`` -> full-index components."""
    if ttype is SR2:
        return sr2_to_full(comps)
    if ttype is SSR4:
        return ssr4_to_full(comps)
    if ttype is WR2:
        return wr2_to_full(comps)
    if ttype is R2:
        return {(i, j): comps[3 * i + j] for i in range(3) for j in range(3)}
    if ttype is Vec:
        return {(i,): comps[i] for i in range(3)}
    if ttype is Scalar:
        return {(): comps[0]}
    raise KeyError(ttype.name)


def from_full(ttype: TensorType, a: Full) -> tuple[sp.Expr, ...]:
    """Full-index components -> flat storage components of ``ttype``."""
    if ttype is SR2:
        return full_to_sr2(a)
    if ttype is SSR4:
        return full_to_ssr4(a)
    if ttype is WR2:
        return full_to_wr2(a)
    if ttype is R2:
        return tuple(a[(i, j)] for i in range(3) for j in range(3))
    if ttype is Vec:
        return tuple(a[(i,)] for i in range(3))
    if ttype is Scalar:
        return (a[()],)
    raise KeyError(ttype.name)
