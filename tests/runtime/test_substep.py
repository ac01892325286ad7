"""Adaptive sub-stepping (runtime/substep.py), called directly on a hand-written model: ``substep``
retries the failed points in 2, 4, ... ``max_substeps`` sub-steps (forces interpolated, state
chained, other inputs unchanged), sums the iterations, reports the sub-steps used and carries the
Jacobian (inputs, and parameters for ``"total"``) through the sub-steps; ``substep_tangent`` does it
for a tangent-variant call; a force without its old value is an ``InputError`` naming it.
tests/runtime/test_model_substep.py covers the same through compiled models (Newton, backends).

The model: u = u_old (1 + c k (x - x_old)), whose "Newton" fails when the step h = c k (x - x_old)
is larger than 0.25 in magnitude. n equal sub-steps give the closed form u_old (1 + h/n)^n, with
du/dx = -du/dx_old = u_old c k (1 + h/n)^(n-1), du/du_old = (1 + h/n)^n,
du/dk = u_old c (x - x_old) (1 + h/n)^(n-1) and du/dc = u_old k (x - x_old) (1 + h/n)^(n-1)."""
from __future__ import annotations

import math

import pytest
import torch

from modelc.runtime.axis import LabeledAxis
from modelc.runtime.errors import InputError
from modelc.runtime.substep import substep, substep_tangent
from modelc.runtime.types import Scalar

F64 = torch.float64
HMAX = 0.25
ITS = 3.0  # iterations the model reports per evaluation


def _axis(*names):
    return LabeledAxis.from_variables([(n, Scalar) for n in names])


class Growth:
    """u = u_old (1 + c k (x - x_old)), failing when |c k (x - x_old)| > HMAX."""

    NAME = "growth"
    INPUTS = ("forces/x", "old_forces/x", "old_state/u", "aux/k")
    STATE = (("state/u", "old_state/u"),)

    def __init__(self, max_substeps=8, tangent=None):
        self.max_substeps = max_substeps
        self.input_axis, self.output_axis = _axis(*self.INPUTS), _axis("state/u")
        self.total_axes = (self.output_axis, _axis(*self.INPUTS, "c"))
        self.TANGENT = tangent
        self.tangent_axes = None if tangent is None else (_axis(*tangent[0]), _axis(*tangent[1]))
        self.calls = []  # (X, derivatives) of every evaluation

    def col(self, X, name):
        return X[:, self.input_axis.offset(name)]

    def evaluate(self, X, P, derivatives, *, shared=True, overrides=None):
        """The raw entry substep calls: ``X (B, nx)``, ``P (1|B, 1)`` -> ``(Y, J or None, ST)``."""
        self.calls.append((X.clone(), derivatives))
        c = P[:, 0].expand(X.shape[0])
        ou, k = self.col(X, "old_state/u"), self.col(X, "aux/k")
        dx = self.col(X, "forces/x") - self.col(X, "old_forces/x")
        h = c * k * dx
        ok = h.abs() <= HMAX
        Y = (ou * (1 + h))[:, None].clone()
        Y[~ok] = float("nan")
        ST = torch.stack([ok.to(F64), torch.full_like(h, ITS), h.abs()], dim=1)
        if not derivatives:
            return Y, None, ST
        cols = self.total_axes[1] if derivatives == "total" else self.input_axis
        J = torch.zeros(X.shape[0], 1, cols.size, dtype=F64)
        d = {"forces/x": ou * c * k, "old_forces/x": -ou * c * k, "old_state/u": 1 + h,
             "aux/k": ou * c * dx, "c": ou * k * dx}
        for name in cols.variable_names:
            J[:, 0, cols.offset(name)] = d[name]
        J[~ok] = float("nan")
        return Y, J, ST


def _points(c=(1.0, 1.0, 1.0, 1.0, 1.0)):
    """Steps h = 0.2, -0.4, 0.9, 1.5, 3.0: 1, 2, 4, 8 sub-steps, and beyond 8."""
    ax = Growth().input_axis
    cols = {"forces/x": [1.2, 0.6, 2.9, 1.0, 4.0], "old_forces/x": [1.0, 1.0, 2.0, 0.5, 1.0],
            "old_state/u": [2.0, 1.5, -1.0, 0.7, 1.0], "aux/k": [1.0, 1.0, 1.0, 3.0, 1.0]}
    X = torch.zeros(5, ax.size, dtype=F64)
    for name, v in cols.items():
        X[:, ax.offset(name)] = torch.tensor(v, dtype=F64)
    return X, torch.tensor(c, dtype=F64)[:, None]


WANT_N = [1, 2, 4, 8]


def _closed_form(X, c, n):
    """(u, {d u / d name}) after n sub-steps, for every point."""
    col = lambda name: X[:, Growth().input_axis.offset(name)]  # noqa: E731
    ou, dx, k = col("old_state/u"), col("forces/x") - col("old_forces/x"), col("aux/k")
    g = 1 + c * k * dx / n
    u = ou * g**n
    g1 = g ** (n - 1)
    return u, {"forces/x": ou * c * k * g1, "old_forces/x": -ou * c * k * g1, "old_state/u": g**n,
               "aux/k": ou * c * dx * g1, "c": ou * k * dx * g1}


def test_failed_points_reach_the_closed_form_of_n_substeps():
    m = Growth()
    X, P = _points()
    Y, J, ST = m.evaluate(X, P[:1], None)                   # the first attempt: points 1-4 fail
    assert ST[:, 0].tolist() == [1, 0, 0, 0, 0]
    Y, J, ST, n = substep(m, X, P[:1], Y, J, ST, None, True, {})
    assert J is None and n.dtype == torch.int32
    assert n.tolist() == [1, 2, 4, 8, 8]                    # the last one gave up after 8 (its most)
    assert ST[:, 0].tolist() == [1, 1, 1, 1, 0]
    assert ST[:4, 1].tolist() == [ITS * k for k in WANT_N]  # iterations summed over the sub-steps
    h = torch.tensor([0.2, 0.4, 0.9, 1.5], dtype=F64)
    torch.testing.assert_close(ST[:4, 2], h / torch.tensor(WANT_N, dtype=F64), rtol=1e-14, atol=0)  # last sub-step's
    for i, k in enumerate(WANT_N):
        u, _ = _closed_form(X, 1.0, k)
        assert math.isclose(float(Y[i, 0]), float(u[i]), rel_tol=1e-14), (i, k)
    assert math.isnan(float(Y[4, 0]))                       # still failed: the caller's value stays
    assert float(Y[1, 0]) == pytest.approx(1.5 * 0.8**2)     # by hand: 1.5 (1 - 0.4/2)^2


def test_jacobian_follows_the_chain_rule_through_the_substeps():
    m = Growth()
    X, P = _points(c=(1.0, 0.5, 0.5, 1.0, 1.0))             # per-point: h = 0.2, -0.2, 0.45, 1.5, 3.0
    Y, J, ST = m.evaluate(X, P, "jacobian", shared=False)
    Y, J, ST, n = substep(m, X, P, Y, J, ST, "jacobian", False, {})
    assert n.tolist() == [1, 1, 2, 8, 8] and J.shape == (5, 1, 4)
    for i in range(4):
        _, d = _closed_form(X, P[:, 0], int(n[i]))
        for name in Growth.INPUTS:
            got = float(J[i, 0, m.input_axis.offset(name)])
            assert math.isclose(got, float(d[name][i]), rel_tol=1e-13, abs_tol=1e-15), (i, name)
    assert torch.isnan(J[4]).all()


def test_total_jacobian_carries_the_parameter_columns():
    m = Growth()
    X, P = _points()
    P = torch.full((1, 1), 0.5, dtype=F64)                  # shared: h = 0.1, -0.2, 0.45, 0.75, 1.5
    Y, J, ST = m.evaluate(X, P, "total")
    Y, J, ST, n = substep(m, X, P, Y, J, ST, "total", True, {})
    assert n.tolist() == [1, 1, 2, 4, 8] and J.shape == (5, 1, 5)
    cols = m.total_axes[1]
    for i in range(5):
        _, d = _closed_form(X, 0.5, int(n[i]))
        for name in cols.variable_names:
            assert math.isclose(float(J[i, 0, cols.offset(name)]), float(d[name][i]), rel_tol=1e-13), (i, name)


def test_substeps_interpolate_forces_chain_state_and_keep_other_inputs():
    m = Growth()
    X, P = _points()
    X, P = X[2:3], P[:1]                                     # h = 0.9: fails with 2, succeeds with 4
    Y, J, ST = m.evaluate(X, P, None)
    X0 = X.clone()
    m.calls.clear()
    Y, _, ST, n = substep(m, X, P, Y, None, ST, None, True, {})
    assert n.tolist() == [4] and len(m.calls) == 2 + 4
    assert torch.equal(X, X0)                                # the caller's inputs are not changed
    ax = m.input_axis
    x, ox, ou, k = 2.9, 2.0, -1.0, 1.0
    prev = ou
    for j, (Xj, _) in enumerate(m.calls[2:], start=1):       # the 4 sub-steps
        get = lambda name: float(Xj[0, ax.offset(name)])      # noqa: E731
        assert get("forces/x") == pytest.approx(ox + j / 4 * (x - ox), rel=1e-15)
        assert get("old_forces/x") == pytest.approx(ox + (j - 1) / 4 * (x - ox), rel=1e-15)
        assert get("old_state/u") == pytest.approx(prev, rel=1e-15)  # the previous sub-step's state/u
        assert get("aux/k") == k
        prev = prev * (1 + (x - ox) / 4)
    assert float(Y[0, 0]) == pytest.approx(prev, rel=1e-14)


def test_gives_up_at_max_substeps():
    m = Growth(max_substeps=4)
    X, P = _points()
    X = X[3:4]                                               # h = 1.5 needs 8
    Y, J, ST = m.evaluate(X, P[:1], None)
    m.calls.clear()
    Y, _, ST, n = substep(m, X, P[:1], Y, None, ST, None, True, {})
    assert len(m.calls) == 2 + 4                             # n = 2 and 4 tried, 8 not
    # not converged, NaN, and the sub-steps reported are the most it was cut into (it said 1, "none")
    assert n.tolist() == [4] and ST[0, 0] == 0 and math.isnan(float(Y[0, 0]))
    m1 = Growth(max_substeps=1)                              # no sub-stepping at all
    Y, J, ST = m1.evaluate(X, P[:1], None)
    m1.calls.clear()
    assert substep(m1, X, P[:1], Y, None, ST, None, True, {})[3].tolist() == [1] and m1.calls == []


class RateGrowth(Growth):
    """u = u_old (1 + c x (t - t_old)): forces/x has no old_forces/x input."""

    NAME = "rate_growth"
    INPUTS = ("forces/t", "old_forces/t", "forces/x", "old_state/u")

    def evaluate(self, X, P, derivatives, *, shared=True, overrides=None):
        self.calls.append((X.clone(), derivatives))
        c = P[:, 0].expand(X.shape[0])
        ou, x = self.col(X, "old_state/u"), self.col(X, "forces/x")
        dt = self.col(X, "forces/t") - self.col(X, "old_forces/t")
        h = c * x * dt
        ok = h.abs() <= HMAX
        Y = (ou * (1 + h))[:, None].clone()
        ST = torch.stack([ok.to(F64), torch.full_like(h, ITS), h.abs()], dim=1)
        if not derivatives:
            return Y, None, ST
        cols = self.total_axes[1] if derivatives == "total" else self.input_axis
        d = {"forces/t": ou * c * x, "old_forces/t": -ou * c * x, "forces/x": ou * c * dt,
             "old_state/u": 1 + h, "c": ou * x * dt}
        J = torch.zeros(X.shape[0], 1, cols.size, dtype=F64)
        for name in cols.variable_names:
            J[:, 0, cols.offset(name)] = d[name]
        return Y, J, ST


def _rate_oracle(t, ot, x, x0, ou, c, n):
    """n sub-steps by hand: t and x move linearly (x from its caller-given old value x0)."""
    u = ou
    for j in range(1, n + 1):
        xj = x0 + j / n * (x - x0)
        u *= 1 + c * xj * (t - ot) / n
    return u


def _rate_points():
    m = RateGrowth()
    rows = [(1.0, 0.0, 0.1, 1.0), (1.0, 0.0, 0.6, 2.0), (2.0, 1.0, 0.8, -1.0)]  # (t, t_old, x, u_old)
    X = torch.zeros(3, m.input_axis.size, dtype=F64)
    for i, vals in enumerate(rows):
        for name, v in zip(("forces/t", "old_forces/t", "forces/x", "old_state/u"), vals):
            X[i, m.input_axis.offset(name)] = v
    return m, X, rows


def test_a_force_without_its_old_value_is_an_input_error_naming_it():
    m, X, _ = _rate_points()
    P = torch.ones(1, 1, dtype=F64)
    Y, J, ST = m.evaluate(X, P, None)
    with pytest.raises(InputError) as info:
        substep(m, X, P, Y, J, ST, None, True, {})
    assert str(info.value) == ("model rate_growth: sub-stepping needs the previous value of forces/x: "
                               "pass old_forces={'forces/x': ...}")
    with pytest.raises(InputError, match="previous value of forces/x"):
        substep(m, X, P, Y, J, ST, None, True, {}, old_forces={"forces/t": 0.0})   # another name


@pytest.mark.parametrize("x0", [0.0, [0.3, -0.2, 0.5]])
def test_old_force_values_from_the_caller(x0):
    m, X, rows = _rate_points()
    P = torch.ones(1, 1, dtype=F64)
    Y, J, ST = m.evaluate(X, P, "jacobian")
    Y, J, ST, n = substep(m, X, P, Y, J, ST, "jacobian", True, {},
                          old_forces={"forces/x": torch.tensor(x0, dtype=F64)})
    olds = [x0] * 3 if isinstance(x0, float) else x0
    assert ST[:, 0].tolist() == [1, 1, 1] and n.tolist() == [1, 4, 4]  # h = 0.1; then 0.6, 0.8 need 4
    for i, ((t, ot, x, ou), xo) in enumerate(zip(rows, olds)):
        k = int(n[i])
        if k == 1:
            continue
        assert math.isclose(float(Y[i, 0]), _rate_oracle(t, ot, x, xo, ou, 1.0, k), rel_tol=1e-14)
        e = 1e-6                                                  # d u / d x, the old value held fixed
        fd = (_rate_oracle(t, ot, x + e, xo, ou, 1.0, k) - _rate_oracle(t, ot, x - e, xo, ou, 1.0, k)) / (2 * e)
        assert math.isclose(float(J[i, 0, m.input_axis.offset("forces/x")]), fd, rel_tol=1e-7)


def test_substep_tangent_rewrites_the_failed_points_tangent_rows_only():
    m = Growth(tangent=(("state/u",), ("forces/x", "old_state/u")))
    X, P = _points()
    Y0, J0, ST0 = m.evaluate(X, P[:1], "jacobian")            # stand-in for the tangent call's buffers
    Jt = torch.stack([J0[:, :, m.input_axis.offset("forces/x")], J0[:, :, m.input_axis.offset("old_state/u")]], -1)
    before = (Y0.clone(), Jt.clone(), ST0.clone())
    m.calls.clear()
    Y, J, ST, n = substep_tangent(m, X, P[:1], Y0, Jt, ST0, True, {}, None)
    assert {d for _, d in m.calls} == {"jacobian"}            # the full Jacobian, no parameter columns
    # only the failed points re-run: 4 at n = 2, the 3 that still fail at n = 4, 2 at n = 8
    assert [c[0].shape[0] for c in m.calls] == [4] * 2 + [3] * 4 + [2] * 8
    assert torch.equal(Y0.nan_to_num(7), before[0].nan_to_num(7)) and torch.equal(ST0, before[2])
    assert torch.equal(Jt.nan_to_num(7), before[1].nan_to_num(7))   # the caller's buffers untouched
    assert n.tolist() == [1, 2, 4, 8, 8] and J.shape == (5, 1, 2)
    assert torch.equal(J[0], Jt[0]) and Y[0] == Y0[0]           # a converged point as it was
    for i in (1, 2, 3):
        u, d = _closed_form(X, 1.0, int(n[i]))
        assert math.isclose(float(Y[i, 0]), float(u[i]), rel_tol=1e-14)
        assert math.isclose(float(J[i, 0, 0]), float(d["forces/x"][i]), rel_tol=1e-13)
        assert math.isclose(float(J[i, 0, 1]), float(d["old_state/u"][i]), rel_tol=1e-13)
    assert ST[4, 0] == 0 and torch.isnan(J[4]).all()


def test_substep_tangent_with_a_parameter_uses_the_total_variant_and_caller_olds():
    m = RateGrowth()
    m.TANGENT = (("state/u",), ("forces/x", "c"))
    m.tangent_axes = (_axis("state/u"), _axis("forces/x", "c"))
    _, X, rows = _rate_points()
    P = torch.ones(1, 1, dtype=F64)
    Y0, J0, ST0 = m.evaluate(X, P, "total")
    cols = m.total_axes[1]
    Jt = J0[:, :, [cols.offset("forces/x"), cols.offset("c")]]
    olds = [0.3, -0.2, 0.5]                                   # one per point: they follow the failed points
    m.calls.clear()
    Y, J, ST, n = substep_tangent(m, X, P, Y0, Jt, ST0, True, {}, {"forces/x": torch.tensor(olds, dtype=F64)})
    assert {d for _, d in m.calls} == {"total"}
    assert n.tolist() == [1, 4, 4] and ST[:, 0].tolist() == [1, 1, 1]
    for i in (1, 2):
        t, ot, x, ou = rows[i]
        k = int(n[i])
        assert k > 1 and math.isclose(float(Y[i, 0]), _rate_oracle(t, ot, x, olds[i], ou, 1.0, k), rel_tol=1e-14)
        e = 1e-6
        fc = lambda c: _rate_oracle(t, ot, x, olds[i], ou, c, k)  # noqa: E731
        assert math.isclose(float(J[i, 0, 1]), (fc(1 + e) - fc(1 - e)) / (2 * e), rel_tol=1e-7)
