"""Hand-written PyTorch baselines of the five library models (one backward-Euler step, batched).

These are what a competent PyTorch user would write by hand for NEML2's formulation (see
shared/reference/neml2/README.md): a radial return (closed form for linear hardening, a small batched
scalar Newton otherwise) and the consistent tangent d stress / d strain (Mandel x Mandel, 6x6).
They serve as (a) the "hand-written eager" and "torch.compile" competitors of the benchmark and (b) an
oracle, independent of the compiler, for its tests.

Formulation (NEML2's, small strain, backward Euler, Mandel vectors, n = dev(xi)/|dev(xi)|):
    sigma = lambda tr(E - Ep) I + 2 mu (E - Ep),   xi = sigma - X
    f = |dev xi| - sqrt(2/3) (sigma_y + k(ep))          (= sqrt(2/3)(sigma_vm - sigma_y - k))
    Ep' = gamma_rate n,  ep' = sqrt(2/3) gamma_rate,  X' = (2/3 C n - g X) gamma_rate
    rate independent: f <= 0, gamma_rate >= 0, f gamma_rate = 0;  Perzyna: gamma_rate = (<f>/eta)^n
With x = dt * gamma_rate (the plastic multiplier increment) every plastic model reduces to a scalar
equation phi(x) = 0 for x, from which the update is explicit.

How each tangent is computed:
    elastic, j2_perfect, j2_linear_iso, perzyna_iso: analytic (closed form, derivation inline);
    j2_voce_af: analytic too, through the implicit-function theorem on the scalar equation
    (dx/dE = -phi_E / phi_x at the converged x; no derivative is taken through the iterations) and
    the chain rule through the turning flow direction n(x, E) (a few batched 6x6 products).

API: ``make_step(model, params, tangent=True)`` returns ``step(E, dt, *old_state) -> tuple`` of
tensors ``(S, *new_state, gamma_rate?, tangent?)`` named by ``output_names(model, tangent)``; the
callable is pure tensor code (parameters are closed-over Python floats) so ``torch.compile(step)`` works.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

MODELS: tuple[str, ...] = ("elastic", "j2_perfect", "j2_linear_iso", "j2_voce_af", "perzyna_iso")

EP, EPS, X, GAMMA = "state/internal/Ep", "state/internal/ep", "state/internal/X", "state/internal/gamma_rate"
STRESS, STRAIN, TANGENT = "state/S", "forces/E", "d(state/S)/d(forces/E)"

#: old-state inputs of each model's step, in argument order (history variables only)
STATE: dict[str, tuple[str, ...]] = {
    "elastic": (),
    "j2_perfect": (EP,),
    "j2_linear_iso": (EP, EPS),
    "j2_voce_af": (EP, X, EPS),
    "perzyna_iso": (EP, EPS),
}

#: parameters of each model (NEML2's names) and the reference values
PARAMS: dict[str, tuple[str, ...]] = {
    "elastic": ("E", "nu"),
    "j2_perfect": ("E", "nu", "sigma_y"),
    "j2_linear_iso": ("E", "nu", "sigma_y", "K"),
    "j2_voce_af": ("E", "nu", "sigma_y", "R", "d", "C", "g"),
    "perzyna_iso": ("E", "nu", "sigma_y", "K", "eta", "n"),
}
DEFAULTS: dict[str, float] = {
    "E": 200000.0, "nu": 0.3, "sigma_y": 100.0, "K": 2000.0, "R": 50.0, "d": 20.0,
    "C": 10000.0, "g": 100.0, "eta": 200.0, "n": 5.0,
}

#: base shape of every variable
SHAPES: dict[str, tuple[int, ...]] = {STRAIN: (6,), STRESS: (6,), EP: (6,), X: (6,), EPS: (), GAMMA: ()}

SQ23 = math.sqrt(2.0 / 3.0)
NEWTON_MAX_IT = 30


def output_names(model: str, tangent: bool = True) -> tuple[str, ...]:
    """Names of the tensors ``make_step(model)`` returns, in order."""
    _check(model)
    names = (STRESS, *STATE[model])
    if model != "elastic":
        names += (GAMMA,)
    return names + ((TANGENT,) if tangent else ())


def params_for(model: str, **overrides: float) -> dict[str, float]:
    """The model's parameters: reference defaults with ``overrides`` applied."""
    _check(model)
    unknown = set(overrides) - set(PARAMS[model])
    if unknown:
        raise ValueError(f"model {model!r} has no parameter(s) {sorted(unknown)}; it has {PARAMS[model]}")
    return {k: float(overrides.get(k, DEFAULTS[k])) for k in PARAMS[model]}


def make_step(model: str, params: dict[str, float] | None = None, *, tangent: bool = True,
              fixed_iterations: int | None = None) -> Callable:
    """One backward-Euler step of ``model``: ``step(E, dt, *old_state) -> tuple`` (see module doc).

    ``E`` (B, 6) is the new total strain, ``dt`` (B,) the time step, ``old_state`` as ``STATE[model]``.
    ``fixed_iterations``: run exactly this many Newton iterations with no convergence test (no
    data-dependent Python branch, so torch.compile captures one graph); default: iterate until every
    point has converged (at most NEWTON_MAX_IT).
    """
    p = params_for(model, **(params or {}))
    return _BUILDERS[model](p, tangent, fixed_iterations)


def step_dict(model: str, E: torch.Tensor, dt: torch.Tensor, old: dict[str, torch.Tensor],
              params: dict[str, float] | None = None, *, tangent: bool = True) -> dict[str, torch.Tensor]:
    """Convenience: ``make_step`` with named inputs and outputs."""
    out = make_step(model, params, tangent=tangent)(E, dt, *(old[n] for n in STATE[model]))
    return dict(zip(output_names(model, tangent), out))


def zero_state(model: str, batch: int, dtype: torch.dtype = torch.float64, device: str | torch.device = "cpu"):
    """Zero old state (tuple in ``STATE[model]`` order)."""
    return tuple(torch.zeros((batch, *SHAPES[n]), dtype=dtype, device=device) for n in STATE[model])


def run_history(model: str, strain: torch.Tensor, time: torch.Tensor, params: dict[str, float] | None = None,
                tangent_steps: tuple[int, ...] = ()) -> dict[str, torch.Tensor]:
    """Drive ``model`` through a strain history (T, B, 6) / times (T, B), starting from zero state.

    Returns each output over the history (row 0 = initial zeros) and the tangents at ``tangent_steps``.
    """
    T, B = strain.shape[:2]
    opts = dict(dtype=strain.dtype, device=strain.device)
    step_nt = make_step(model, params, tangent=False)
    step_t = make_step(model, params, tangent=True)
    names = output_names(model, tangent=False)
    hist = {n: torch.zeros((T, B, *SHAPES[n]), **opts) for n in names}
    tangents = []
    state = zero_state(model, B, **opts)
    for i in range(1, T):
        want = i in tangent_steps
        out = (step_t if want else step_nt)(strain[i], time[i] - time[i - 1], *state)
        if want:
            tangents.append(out[-1])
            out = out[:-1]
        for n, v in zip(names, out):
            hist[n][i] = v
        state = tuple(hist[n][i] for n in STATE[model])
    if tangent_steps:
        hist[TANGENT] = torch.stack(tangents)
    return hist


# --------------------------------------------------------------------------------------- helpers

def _check(model: str) -> None:
    if model not in MODELS:
        raise ValueError(f"unknown model {model!r}; the baselines are {MODELS}")


def _lame(p: dict[str, float]) -> tuple[float, float]:
    E, nu = p["E"], p["nu"]
    return E * nu / ((1 + nu) * (1 - 2 * nu)), E / (2 * (1 + nu))


def _trace(v: torch.Tensor) -> torch.Tensor:
    return v[..., 0] + v[..., 1] + v[..., 2]


def _ident(v: torch.Tensor) -> torch.Tensor:
    """Mandel identity I = (1, 1, 1, 0, 0, 0) with v's dtype/device."""
    return torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0], dtype=v.dtype, device=v.device)


def _dev(v: torch.Tensor) -> torch.Tensor:
    return v - (_trace(v) / 3).unsqueeze(-1) * _ident(v)


def _norm(v: torch.Tensor) -> torch.Tensor:
    # clamped so that n = v/|v| stays finite at v = 0 (only ever multiplied by x = 0 there)
    return torch.sqrt(torch.clamp_min((v * v).sum(-1), torch.finfo(v.dtype).tiny))


def _elastic_stress(ee: torch.Tensor, lam: float, mu: float) -> torch.Tensor:
    return lam * _trace(ee).unsqueeze(-1) * _ident(ee) + 2 * mu * ee


def _elastic_tangent(like: torch.Tensor, lam: float, mu: float) -> torch.Tensor:
    """C = lambda I(x)I + 2 mu I6, materialised per point (B, 6, 6)."""
    i = _ident(like)
    C = lam * torch.outer(i, i) + 2 * mu * torch.eye(6, dtype=like.dtype, device=like.device)
    return C.expand(like.shape[0], 6, 6).contiguous()


def _idev(like: torch.Tensor) -> torch.Tensor:
    i = _ident(like)
    return torch.eye(6, dtype=like.dtype, device=like.device) - torch.outer(i, i) / 3


def _radial_tangent(like, n, a, b, lam: float, mu: float) -> torch.Tensor:
    """D = C - a n(x)n - b (Idev - n(x)n) = (C - b Idev) + (b - a) n(x)n, in two passes over (B, 6, 6)."""
    i = _ident(like)
    C = lam * torch.outer(i, i) + 2 * mu * torch.eye(6, dtype=like.dtype, device=like.device)
    base = C - b[:, None, None] * _idev(like)
    return torch.baddbmm(base, ((b - a)[:, None] * n).unsqueeze(-1), n.unsqueeze(-2))


def _tol(scale: torch.Tensor) -> torch.Tensor:
    """Newton tolerance on phi (MPa): a few hundred ulps of the trial stress magnitude."""
    return 256 * torch.finfo(scale.dtype).eps * scale


# ----------------------------------------------------------------------------------------- models

def _iterations(fixed: int | None) -> tuple[int, bool]:
    """(number of iterations, whether to test convergence before each)."""
    return (NEWTON_MAX_IT, True) if fixed is None else (fixed, False)


def _build_elastic(p: dict[str, float], tangent: bool, fixed: int | None = None) -> Callable:
    lam, mu = _lame(p)

    def step(E: torch.Tensor, dt: torch.Tensor):
        S = _elastic_stress(E, lam, mu)
        return (S, _elastic_tangent(E, lam, mu)) if tangent else (S,)

    return step


def _build_j2_linear(p: dict[str, float], tangent: bool, fixed: int | None, with_ep: bool) -> Callable:
    """Radial return, k = K ep (K = 0: perfect plasticity), closed form.

    phi(x) = f_tr - (2 mu + 2/3 K) x, so x = <f_tr> / (2 mu + 2/3 K), n = s_tr/|s_tr| fixed.
    Tangent: S = S_tr - 2 mu x n with dx/dE = 2 mu n / c and dn/dE = 2 mu (Idev - n n)/|s_tr|:
        D = C - (2 mu)^2 / c n(x)n - (2 mu)^2 x / |s_tr| (Idev - n(x)n),   c = 2 mu + 2/3 K.
    """
    lam, mu = _lame(p)
    sy, K = p["sigma_y"], p.get("K", 0.0)
    c = 2 * mu + 2.0 / 3.0 * K

    def step(E: torch.Tensor, dt: torch.Tensor, Ep: torch.Tensor, *ep_old: torch.Tensor):
        ep = ep_old[0] if with_ep else None
        S_tr = _elastic_stress(E - Ep, lam, mu)
        s_tr = _dev(S_tr)
        nrm = _norm(s_tr)
        k = sy + K * ep if with_ep else torch.full_like(nrm, sy)
        f_tr = nrm - SQ23 * k
        plastic = f_tr > 0
        x = torch.where(plastic, f_tr / c, torch.zeros_like(f_tr))
        n = s_tr / nrm.unsqueeze(-1)
        xn = x.unsqueeze(-1) * n
        out = [S_tr - 2 * mu * xn, Ep + xn]
        if with_ep:
            out.append(ep + SQ23 * x)
        out.append(x / dt)
        if tangent:
            a = torch.where(plastic, (2 * mu) ** 2 / c, torch.zeros_like(x))
            b = (2 * mu) ** 2 * x / nrm
            out.append(_radial_tangent(E, n, a, b, lam, mu))
        return tuple(out)

    return step


def _build_j2_voce_af(p: dict[str, float], tangent: bool, fixed: int | None = None) -> Callable:
    """Voce isotropic + Armstrong-Frederick kinematic hardening; scalar Newton on x = dt gamma_rate.

    Backward Euler gives X = (X_old + 2/3 C x n)/(1 + g x) and s = s_tr - 2 mu x n, so with
    a(x) = (1 + g x) s_tr - X_old the flow direction is n = a/|a| and
        |xi|(x) = |a|/(1 + g x) - (2 mu + 2/3 C/(1 + g x)) x,
        phi(x)  = |xi|(x) - sqrt(2/3) (sigma_y + R (1 - exp(-d (ep_old + sqrt(2/3) x)))) = 0.
    """
    lam, mu = _lame(p)
    sy, R, d, C, g = p["sigma_y"], p["R"], p["d"], p["C"], p["g"]
    iters, check = _iterations(fixed)

    def phi_and_slope(x, s_tr, X_old, ep_old):
        q = 1 + g * x
        a = q.unsqueeze(-1) * s_tr - X_old
        na = _norm(a)
        ep = ep_old + SQ23 * x
        e = torch.exp(-d * ep)
        phi = na / q - (2 * mu + (2.0 / 3.0) * C / q) * x - SQ23 * (sy + R * (1 - e))
        dna = g * (a * s_tr).sum(-1) / na
        dphi = dna / q - g * na / q**2 - 2 * mu - (2.0 / 3.0) * C / q**2 - (2.0 / 3.0) * R * d * e
        return phi, dphi

    def step(E: torch.Tensor, dt: torch.Tensor, Ep: torch.Tensor, X_old: torch.Tensor, ep_old: torch.Tensor):
        S_tr = _elastic_stress(E - Ep, lam, mu)
        s_tr = _dev(S_tr)
        x = torch.zeros_like(ep_old)
        phi, dphi = phi_and_slope(x, s_tr, X_old, ep_old)
        plastic = phi > 0
        tol = _tol(_norm(s_tr) + sy)
        for _ in range(iters):
            if check and not bool(((phi.abs() > tol) & plastic).any()):
                break
            x = torch.where(plastic, torch.clamp_min(x - phi / dphi, 0.0), x)
            phi, dphi = phi_and_slope(x, s_tr, X_old, ep_old)
        q = 1 + g * x
        a = q.unsqueeze(-1) * s_tr - X_old
        na = _norm(a)
        n = a / na.unsqueeze(-1)
        xn = x.unsqueeze(-1) * n
        X = (X_old + (2.0 / 3.0) * C * xn) / q.unsqueeze(-1)
        out = (S_tr - 2 * mu * xn, Ep + xn, X, ep_old + SQ23 * x, x / dt)
        if not tangent:
            return out
        # d s_tr/dE = 2 mu Idev; phi_E = 2 mu Idev n, so dx/dE = -2 mu Idev n / phi' (0 if elastic);
        # da/dE = 2 mu q Idev + g s_tr (x) dx/dE; dn/dE = (I - n n)/|a| da/dE;
        # D = C (I - n (x) dx/dE - x dn/dE).
        Idev, I6 = _idev(E), torch.eye(6, dtype=E.dtype, device=E.device)
        dxdE = torch.where(plastic, -2 * mu / dphi, torch.zeros_like(dphi)).unsqueeze(-1) * (n @ Idev)
        da = (2 * mu * q)[:, None, None] * Idev + g * s_tr.unsqueeze(-1) * dxdE.unsqueeze(-2)
        P = (I6 - n.unsqueeze(-1) * n.unsqueeze(-2)) / na[:, None, None]
        dEe = I6 - n.unsqueeze(-1) * dxdE.unsqueeze(-2) - x[:, None, None] * (P @ da)
        return (*out, _elastic_tangent(E, lam, mu) @ dEe)

    return step


def _build_perzyna(p: dict[str, float], tangent: bool, fixed: int | None = None) -> Callable:
    """Perzyna with linear hardening: gamma_rate = (<f>/eta)^n at the new state, radial return.

    f(x) = f_tr - c x with c = 2 mu + 2/3 K. In y = gamma_rate^(1/n) (so x = dt y^n):
        psi(y) = f_tr - c dt y^n - eta y = 0,
    concave and decreasing for y >= 0; Newton from y0 = (a^-2 + b^-2)^(-1/2), a = f_tr/eta and
    b = (f_tr/(c dt))^(1/n) (both above the root; the library's guess, see spec/library.yaml)
    converges: the first step lands at or above the root, then monotonically down. Tangent: dy/dE = 2 mu n / (c dt n y^(n-1) + eta), dx/dE = dt n y^(n-1) dy/dE:
        D = C - (2 mu)^2 h n(x)n - (2 mu)^2 x/|s_tr| (Idev - n(x)n),  h = dt n y^(n-1) / (c dt n y^(n-1) + eta).
    """
    lam, mu = _lame(p)
    sy, K, eta, m = p["sigma_y"], p["K"], p["eta"], p["n"]
    c = 2 * mu + 2.0 / 3.0 * K
    iters, check = _iterations(fixed)

    def step(E: torch.Tensor, dt: torch.Tensor, Ep: torch.Tensor, ep_old: torch.Tensor):
        S_tr = _elastic_stress(E - Ep, lam, mu)
        s_tr = _dev(S_tr)
        nrm = _norm(s_tr)
        f_tr = nrm - SQ23 * (sy + K * ep_old)
        plastic = f_tr > 0
        fp = torch.clamp_min(f_tr, 0.0)
        y = 1.0 / torch.sqrt((eta / fp) ** 2 + (fp / (c * dt)) ** (-2.0 / m))
        tol = _tol(nrm + sy)
        for _ in range(iters):
            psi = fp - c * dt * y**m - eta * y
            if check and not bool(((psi.abs() > tol) & plastic).any()):
                break
            dpsi = -c * dt * m * y ** (m - 1) - eta
            y = torch.where(plastic, torch.clamp_min(y - psi / dpsi, 0.0), y)
        gamma = y**m
        x = dt * gamma
        n = s_tr / nrm.unsqueeze(-1)
        xn = x.unsqueeze(-1) * n
        out = (S_tr - 2 * mu * xn, Ep + xn, ep_old + SQ23 * x, gamma)
        if not tangent:
            return out
        w = dt * m * y ** (m - 1)
        h = torch.where(plastic, w / (c * w + eta), torch.zeros_like(w))
        return (*out, _radial_tangent(E, n, (2 * mu) ** 2 * h, (2 * mu) ** 2 * x / nrm, lam, mu))

    return step


_BUILDERS: dict[str, Callable[[dict[str, float], bool, int | None], Callable]] = {
    "elastic": _build_elastic,
    "j2_perfect": lambda p, t, f: _build_j2_linear(p, t, f, with_ep=False),
    "j2_linear_iso": lambda p, t, f: _build_j2_linear(p, t, f, with_ep=True),
    "j2_voce_af": _build_j2_voce_af,
    "perzyna_iso": _build_perzyna,
}
