"""Mandel, full-tensor and Voigt conversions, and the identity tensors (runtime side).

This is the ONLY runtime module that knows the sqrt(2) factors. Conventions (NEML2's, see DESIGN.md):

* **SR2** (symmetric 2nd order), Mandel, shape ``(..., 6)``::

      (xx, yy, zz, s2*yz, s2*xz, s2*xy)          s2 = sqrt(2)

  so ``A:B == dot(mandel(A), mandel(B))``.
* **SSR4** (4th order with minor symmetries), Mandel 6x6, shape ``(..., 6, 6)``:
  ``M[a, b] = w_a * w_b * C[i_a, j_a, k_b, l_b]`` with ``w = (1, 1, 1, s2, s2, s2)``, so
  ``mandel(C : e) == M @ mandel(e)`` (a plain matrix-vector product).
* **WR2** (skew 2nd order), shape ``(..., 3)``: the axial components ``(w_zy, w_xz, w_yx)``, i.e.
  ``W = [[0, -w2, w1], [w2, 0, -w0], [-w1, w0, 0]]``.
* **Voigt** (what host codes such as Abaqus UMATs use): plain tensor components for stress-like
  quantities and *engineering shear* (``2*e_ij``) for strain-like ones. Two component orders:

  ==========  ==========================================  =========================
  ``order``   components                                  used by
  ==========  ==========================================  =========================
  "neml2"     (11, 22, 33, 23, 13, 12)                    same order as Mandel here
  "abaqus"    (11, 22, 33, 12, 13, 23)                    Abaqus UMAT STRESS/STRAN
  ==========  ==========================================  =========================

  For an SSR4, ``kind="stiffness"`` gives ``D`` with ``sigma_voigt = D @ strain_voigt`` (Abaqus
  DDSDDE) and ``kind="compliance"`` gives ``S`` with ``strain_voigt = S @ sigma_voigt``.

Every function is batched over any number of leading dimensions, keeps the input's dtype and
device, and accepts any floating dtype. Wrong trailing shapes or non-float inputs raise
:class:`modelc.runtime.errors.InputError`.
"""
from __future__ import annotations

import math

import torch

from modelc.runtime.errors import InputError

SQRT2 = math.sqrt(2.0)

# (i, j) of each Mandel / NEML2-order Voigt component
MANDEL_PAIRS: tuple[tuple[int, int], ...] = ((0, 0), (1, 1), (2, 2), (1, 2), (0, 2), (0, 1))
# the Mandel weight of each component: 1 on the diagonal, sqrt(2) on the shear components
_W = (1.0, 1.0, 1.0, SQRT2, SQRT2, SQRT2)
# full (i, j) -> Mandel component
_FULL_TO_MANDEL = ((0, 5, 4), (5, 1, 3), (4, 3, 2))
# Voigt component orders, as permutations of the NEML2 order
VOIGT_ORDERS: dict[str, tuple[int, ...]] = {"neml2": (0, 1, 2, 3, 4, 5), "abaqus": (0, 1, 2, 5, 4, 3)}
# per-component factor Voigt = factor * Mandel
_VOIGT_FACTOR = {"stress": (1.0, 1.0, 1.0, 1 / SQRT2, 1 / SQRT2, 1 / SQRT2),
                 "strain": (1.0, 1.0, 1.0, SQRT2, SQRT2, SQRT2)}
# per-row/col factor: Voigt matrix = Mandel matrix * f_a * f_b
_VOIGT4_FACTOR = {"stiffness": _VOIGT_FACTOR["stress"], "compliance": _VOIGT_FACTOR["strain"]}


def _check(x: torch.Tensor, base: tuple[int, ...], what: str, fn: str) -> None:
    if not isinstance(x, torch.Tensor):
        raise InputError(f"{fn}: expected a torch.Tensor ({what}), got {type(x).__name__}")
    if not x.is_floating_point():
        raise InputError(f"{fn}: expected a floating-point tensor ({what}), got dtype {x.dtype}")
    n = len(base)
    if x.dim() < n or tuple(x.shape[x.dim() - n:]) != base:
        raise InputError(f"{fn}: expected {what} of shape (..., {', '.join(map(str, base))}), "
                         f"got shape {tuple(x.shape)}")


def _const(values, like: torch.Tensor) -> torch.Tensor:
    return torch.tensor(values, dtype=like.dtype, device=like.device)


def _idx(values, like: torch.Tensor) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.long, device=like.device)


# ------------------------------------------------------------------------------------------------
# SR2 <-> full 3x3
# ------------------------------------------------------------------------------------------------
def sr2_to_full(x: torch.Tensor) -> torch.Tensor:
    """Mandel ``(..., 6)`` -> symmetric full ``(..., 3, 3)``."""
    _check(x, (6,), "an SR2 in Mandel notation", "sr2_to_full")
    w = _const([[1.0 / _W[_FULL_TO_MANDEL[i][j]] for j in range(3)] for i in range(3)], x)
    return x[..., _idx(_FULL_TO_MANDEL, x)] * w


def full_to_sr2(a: torch.Tensor) -> torch.Tensor:
    """Full ``(..., 3, 3)`` -> Mandel ``(..., 6)`` of its symmetric part ``(A + A^T) / 2``."""
    _check(a, (3, 3), "a full 2nd-order tensor", "full_to_sr2")
    i = _idx([p[0] for p in MANDEL_PAIRS], a)
    j = _idx([p[1] for p in MANDEL_PAIRS], a)
    return 0.5 * (a[..., i, j] + a[..., j, i]) * _const(_W, a)


# ------------------------------------------------------------------------------------------------
# SSR4 <-> full 3x3x3x3
# ------------------------------------------------------------------------------------------------
def ssr4_to_full(m: torch.Tensor) -> torch.Tensor:
    """Mandel ``(..., 6, 6)`` -> full ``(..., 3, 3, 3, 3)`` (with both minor symmetries)."""
    _check(m, (6, 6), "an SSR4 in Mandel notation", "ssr4_to_full")
    fm = torch.tensor(_FULL_TO_MANDEL, dtype=torch.long, device=m.device)
    a = fm.view(3, 3, 1, 1)
    b = fm.view(1, 1, 3, 3)
    w = _const(_W, m)
    return m[..., a, b] / (w[a] * w[b])


def full_to_ssr4(c: torch.Tensor) -> torch.Tensor:
    """Full ``(..., 3, 3, 3, 3)`` -> Mandel ``(..., 6, 6)`` of its minor-symmetric part."""
    _check(c, (3, 3, 3, 3), "a full 4th-order tensor", "full_to_ssr4")
    i = _idx([p[0] for p in MANDEL_PAIRS], c).view(6, 1)
    j = _idx([p[1] for p in MANDEL_PAIRS], c).view(6, 1)
    k = i.view(1, 6)
    l_ = j.view(1, 6)
    sym = 0.25 * (c[..., i, j, k, l_] + c[..., j, i, k, l_] + c[..., i, j, l_, k] + c[..., j, i, l_, k])
    w = _const(_W, c)
    return sym * w.view(6, 1) * w.view(1, 6)


# ------------------------------------------------------------------------------------------------
# WR2 <-> skew 3x3
# ------------------------------------------------------------------------------------------------
def wr2_to_full(w: torch.Tensor) -> torch.Tensor:
    """Axial ``(..., 3)`` = (w_zy, w_xz, w_yx) -> skew full ``(..., 3, 3)``."""
    _check(w, (3,), "a WR2 (axial vector)", "wr2_to_full")
    z = torch.zeros_like(w[..., 0])
    w0, w1, w2 = w[..., 0], w[..., 1], w[..., 2]
    rows = [torch.stack([z, -w2, w1], -1), torch.stack([w2, z, -w0], -1), torch.stack([-w1, w0, z], -1)]
    return torch.stack(rows, -2)


def full_to_wr2(a: torch.Tensor) -> torch.Tensor:
    """Full ``(..., 3, 3)`` -> axial ``(..., 3)`` of its skew part ``(A - A^T) / 2``."""
    _check(a, (3, 3), "a full 2nd-order tensor", "full_to_wr2")
    return 0.5 * torch.stack([a[..., 2, 1] - a[..., 1, 2], a[..., 0, 2] - a[..., 2, 0],
                              a[..., 1, 0] - a[..., 0, 1]], -1)


# ------------------------------------------------------------------------------------------------
# Voigt (engineering shear)
# ------------------------------------------------------------------------------------------------
def _order(order: str, fn: str) -> tuple[int, ...]:
    try:
        return VOIGT_ORDERS[order]
    except KeyError:
        raise InputError(f"{fn}: unknown Voigt order {order!r}; known: {', '.join(VOIGT_ORDERS)}") from None


def _factor(table: dict, kind: str, fn: str) -> tuple[float, ...]:
    try:
        return table[kind]
    except KeyError:
        raise InputError(f"{fn}: unknown kind {kind!r}; known: {', '.join(table)}") from None


def sr2_to_voigt(x: torch.Tensor, kind: str = "stress", order: str = "neml2") -> torch.Tensor:
    """Mandel ``(..., 6)`` -> Voigt ``(..., 6)``.

    ``kind="stress"``: plain shear components; ``kind="strain"``: engineering shear ``2*e_ij``.
    ``order``: "neml2" (11,22,33,23,13,12) or "abaqus" (11,22,33,12,13,23).
    """
    _check(x, (6,), "an SR2 in Mandel notation", "sr2_to_voigt")
    f = _factor(_VOIGT_FACTOR, kind, "sr2_to_voigt")
    p = _order(order, "sr2_to_voigt")
    return (x * _const(f, x))[..., _idx(p, x)]


def voigt_to_sr2(v: torch.Tensor, kind: str = "stress", order: str = "neml2") -> torch.Tensor:
    """Voigt ``(..., 6)`` -> Mandel ``(..., 6)``; inverse of :func:`sr2_to_voigt`."""
    _check(v, (6,), "a Voigt 6-vector", "voigt_to_sr2")
    f = _factor(_VOIGT_FACTOR, kind, "voigt_to_sr2")
    p = _order(order, "voigt_to_sr2")
    inv = [p.index(a) for a in range(6)]
    return v[..., _idx(inv, v)] / _const(f, v)


def ssr4_to_voigt(m: torch.Tensor, kind: str = "stiffness", order: str = "neml2") -> torch.Tensor:
    """Mandel ``(..., 6, 6)`` -> Voigt ``(..., 6, 6)``.

    ``kind="stiffness"``: ``sigma_voigt = D @ strain_voigt`` (engineering shear strain);
    ``kind="compliance"``: ``strain_voigt = S @ sigma_voigt``.
    """
    _check(m, (6, 6), "an SSR4 in Mandel notation", "ssr4_to_voigt")
    f = _const(_factor(_VOIGT4_FACTOR, kind, "ssr4_to_voigt"), m)
    p = _idx(_order(order, "ssr4_to_voigt"), m)
    out = m * f.view(6, 1) * f.view(1, 6)
    return out[..., p.view(6, 1), p.view(1, 6)]


def voigt_to_ssr4(d: torch.Tensor, kind: str = "stiffness", order: str = "neml2") -> torch.Tensor:
    """Voigt ``(..., 6, 6)`` -> Mandel ``(..., 6, 6)``; inverse of :func:`ssr4_to_voigt`."""
    _check(d, (6, 6), "a Voigt 6x6 matrix", "voigt_to_ssr4")
    f = _const(_factor(_VOIGT4_FACTOR, kind, "voigt_to_ssr4"), d)
    p = _order(order, "voigt_to_ssr4")
    inv = _idx([p.index(a) for a in range(6)], d)
    return d[..., inv.view(6, 1), inv.view(1, 6)] / (f.view(6, 1) * f.view(1, 6))


# ------------------------------------------------------------------------------------------------
# identity tensors (Mandel)
# ------------------------------------------------------------------------------------------------
def _kw(dtype: torch.dtype | None, device) -> dict:
    return {"dtype": torch.float64 if dtype is None else dtype, "device": device}


def identity_sr2(dtype: torch.dtype | None = None, device=None) -> torch.Tensor:
    """The 2nd-order identity ``I`` as an SR2: ``(1, 1, 1, 0, 0, 0)``."""
    return torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0], **_kw(dtype, device))


def identity_sym(dtype: torch.dtype | None = None, device=None) -> torch.Tensor:
    """The symmetric 4th-order identity ``(d_ik d_jl + d_il d_jk) / 2`` in Mandel: the 6x6 identity."""
    return torch.eye(6, **_kw(dtype, device))


def identity_vol(dtype: torch.dtype | None = None, device=None) -> torch.Tensor:
    """The volumetric projector ``I (x) I / 3`` in Mandel: ``P_vol : e = tr(e) / 3 * I``."""
    i = identity_sr2(dtype, device)
    return torch.outer(i, i) / 3.0


def identity_dev(dtype: torch.dtype | None = None, device=None) -> torch.Tensor:
    """The deviatoric projector ``I_sym - I_vol`` in Mandel: ``P_dev : e = dev(e)``."""
    return identity_sym(dtype, device) - identity_vol(dtype, device)
