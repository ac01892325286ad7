"""How far float32 states may lie from the exact ones, derived from the formulation (for the coupled
systems' tests): the stopping test, round-off in the residuals, the inputs rounded to float32, and how a
history carries the error of one step into the next. All from the float64 reference interpreter on
NEML2's states, independent of every backend.

One step. A float32 Newton stops once every residual is within ``RTOL_FLOOR_EPS`` machine epsilons
(``2 RTOL_FLOOR_EPS U32``) of the magnitudes of its own terms (its *scale* s), and each residual is
computed with a round-off of a few ``U32`` of s (``ENTRY_ROUNDOFF``). So the unknowns may sit
``|du| <= (2 RTOL_FLOOR_EPS + ENTRY_ROUNDOFF) U32 |J^-1| s`` from the root (J = dR/du, componentwise,
to first order). The inputs rounded to float32 (``|dx| <= U32 |x|``) move every output by
``|d out / d x| |dx|``; an output computed after the solve from the unknowns (the stress from the
plastic strain) gets ``|d out / d u| |du|`` (``through``) and its own rounding ``ENTRY_ROUNDOFF U32
|out|``.

A history. The error of step n-1's state enters step n through the old-state inputs:
``e_n <= b_n + sum_y |d x_n / d old_y| e_{n-1}(y)``, with ``b_n`` the one-step bound and ``e_0 = 0``
(row 0 is exact): a linear propagation along NEML2's states, each step from the row before.
"""
from __future__ import annotations

import re

import numpy as np

from library_helpers import (ENTRY_ROUNDOFF, RTOL_FLOOR_EPS, U32, forced_inputs, program, reference,
                             reference_params)

_COMPONENT = re.compile(r"^(.*)\[(\d+)\]$")


def float32_state_bounds(model: str, steps, points, through: dict | None = None) -> dict[str, np.ndarray]:
    """Per output, the one-step bound ``(batch, components)`` (absolute) for the forced batch of
    ``forced_inputs(..., steps, points)``. ``through``: ``{output: (unknown, |d output / d unknown|)}``
    for outputs computed from an unknown after the solve (a (components, components) matrix)."""
    from modelc.interpret import interpret

    prog = program(model, True)
    ins = forced_inputs([v.name for v in prog.inputs], reference(model), steps, points)
    stops: list = []
    res, der, _ = interpret(prog, ins, reference_params(model), stops=stops)
    batch = len(steps) * len(points)
    sizes = {v.name: v.type.size for v in prog.outputs}
    bound = {n: np.zeros((batch, k)) for n, k in sizes.items()}
    for names, J, scale in stops:  # where Newton stops, and round-off in the residuals
        du = (2 * RTOL_FLOOR_EPS + ENTRY_ROUNDOFF) * U32 * np.einsum("bij,bj->bi", np.abs(np.linalg.inv(J)), scale)
        for i, n in enumerate(names):
            m = _COMPONENT.match(n)
            var, comp = (m.group(1), int(m.group(2))) if m else (n, 0)
            if var in bound:
                bound[var][:, comp] += du[:, i]
    for out, (unknown, D) in (through or {}).items():
        bound[out] += bound[unknown] @ np.abs(D).T
    for v in prog.outputs:  # the inputs rounded to float32, and the output's own rounding
        b = bound[v.name]
        for w in prog.inputs:
            D = der.get((v.name, w.name))
            if D is not None:
                x = np.abs(np.asarray(ins[w.name], dtype=np.float64)).reshape(batch, -1)
                b += U32 * np.einsum("bij,bj->bi", np.abs(np.asarray(D)).reshape(batch, b.shape[1], -1), x)
        b += ENTRY_ROUNDOFF * U32 * np.abs(np.asarray(res[v.name], dtype=np.float64)).reshape(batch, -1)
    bound["_der"] = der  # for the history propagation
    return bound


def float32_history_bounds(model: str, rows: int, points, through: dict | None = None) -> dict[str, np.ndarray]:
    """Per state output, ``(rows, points, components)``: the one-step bounds of steps 1..rows-1 carried
    along the history by the old-state derivatives (row 0 exact)."""
    steps = np.arange(1, rows)
    points = np.asarray(points)
    one = float32_state_bounds(model, steps, points, through)
    der = one.pop("_der")
    shape = (len(steps), len(points))
    names = [n for n in one if n.startswith("state/")]
    e = {n: np.zeros((rows, len(points), one[n].shape[1])) for n in names}
    for k in range(len(steps)):
        sl = slice(k * len(points), (k + 1) * len(points))
        for n in names:
            acc = one[n].reshape(*shape, -1)[k].copy()
            for y in names:
                D = der.get((n, "old_" + y))
                if D is not None:
                    acc += np.einsum("pij,pj->pi", np.abs(np.asarray(D)[sl]).reshape(len(points), acc.shape[1], -1),
                                     e[y][k])
            e[n][k + 1] = acc
    return e


def isotropic_stiffness(E: float, nu: float) -> np.ndarray:
    """The 6x6 Mandel matrix of linear isotropic elasticity (d stress / d elastic strain)."""
    lam, mu = E * nu / ((1 + nu) * (1 - 2 * nu)), E / (2 * (1 + nu))
    C = 2 * mu * np.eye(6)
    C[:3, :3] += lam
    return C
