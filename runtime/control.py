"""Mixed stress/strain control for the driver: solve for the stress-controlled strain components.

At a step with a ``control`` mask ``c`` (True = stress-controlled), the strain ``E`` is known on the
strain-controlled components and unknown on the others, where instead the stress must meet its
target ``S*``. Newton on the model's consistent tangent ``K = d S / d E`` (the one a finite-element
code uses, so the iteration is quadratic wherever the model's tangent is exact)::

    r   = (S(E) - S*) on the controlled components        (0 elsewhere)
    K_cc dE_c = -r_c                                      (K_cc: controlled rows and columns)
    E_c <- E_c + dE_c

Every point solves its own system in one batched ``torch.linalg.solve``: the rows and columns of
strain-controlled components are replaced by the identity (with a zero right-hand side), so one
matrix shape serves any mask. A point stops when ``max|r_c| <= rtol * scale + atol`` with ``scale``
the largest stress magnitude of the point (result or target) or of the residual the step starts
from (a free thermal expansion's, whose targets are all zero), or when its update no longer changes
``E`` beyond rounding; it fails (converged = False) when the model fails at it, a value is not
finite, or ``max_iter`` iterations do not reach the tolerance.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

from modelc.runtime.errors import InputError

__all__ = ["ControlOptions", "solve_mixed"]


@dataclass(frozen=True)
class ControlOptions:
    """Tolerances of the mixed-control Newton (stress units for ``atol``)."""

    rtol: float = 1e-10  # raised to 64 eps of the dtype (float32: ~7.6e-6)
    atol: float = 0.0
    max_iter: int = 25

    def __post_init__(self):
        if not (self.rtol >= 0 and self.atol >= 0 and self.rtol + self.atol > 0):
            raise InputError(f"control tolerances must be >= 0 and not both 0, got rtol={self.rtol}, "
                             f"atol={self.atol}")
        if int(self.max_iter) != self.max_iter or self.max_iter < 1:
            raise InputError(f"control max_iter must be a positive integer, got {self.max_iter!r}")


@dataclass(frozen=True)
class MixedStep:
    """The outcome of one step: the last call's result (at ``strain``), the solved strain, whether
    each point met its targets, and the control iterations per point."""

    result: Any
    strain: torch.Tensor      # (batch, 6)
    converged: torch.Tensor   # (batch,) bool: the targets are met (the model's own status aside)
    iterations: torch.Tensor  # (batch,) int64


def solve_mixed(evaluate: Callable[[torch.Tensor], tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]],
                strain: torch.Tensor, target: torch.Tensor, control: torch.Tensor,
                options: ControlOptions = ControlOptions(), scale: torch.Tensor | None = None) -> MixedStep:
    """Newton with a backtracking line search for the controlled components of one step.

    ``evaluate(E)`` runs the model at strain ``E (batch, 6)`` and returns ``(result, S (batch, 6),
    K (batch, 6, 6), ok (batch,) bool)`` with ``ok`` False where the model failed. ``strain``: the
    starting point (prescribed values on the strain-controlled components, a guess elsewhere);
    ``target``: the stress targets; ``control`` ``(batch, 6)`` bool; ``scale`` ``(batch,)``: the
    stress magnitude the targets are judged against besides their own and the stress's (the driver
    passes each point's largest prescribed stress over the whole history). Without it a zero target
    (a cycle crossing zero stress) could only be met to ``rtol`` of zero: unreachable in float32,
    where the stress of a strain of 1e-13 is already ~1e-8 of round-off.

    Why the line search: a full Newton step taken with the plastic tangent when a point unloads
    overshoots into the elastic range and beyond (even into reverse yielding), and plain Newton can
    cycle between the two branches. A step is accepted when it lowers ``max|r_c|`` (Armijo,
    ``1e-4``); otherwise it is halved, up to ``MAX_HALVINGS`` times, point by point."""
    E = strain.clone()
    eps = torch.finfo(E.dtype).eps
    rtol = max(options.rtol, 64 * eps)
    eye = torch.eye(6, dtype=E.dtype, device=E.device)
    both = control.unsqueeze(-1) & control.unsqueeze(-2)
    batch = E.shape[0]
    zero = torch.zeros_like(E)

    def residual(S, K, ok):
        r = torch.where(control, S - target, zero)
        rmax = r.abs().amax(dim=-1)
        good = ok & torch.isfinite(rmax) & torch.isfinite(K.reshape(batch, -1)).all(dim=-1)
        return r, torch.where(good, rmax, torch.full_like(rmax, math.inf)), good

    scale_t = torch.where(control, target, zero).abs().amax(dim=-1)
    if scale is not None:
        scale_t = torch.maximum(scale_t, scale.to(scale_t))

    result, S, K, ok = evaluate(E)
    r, rmax, good = residual(S, K, ok)
    # ... and against the residual the step starts from (the usual relative test of Newton,
    # |r| <= rtol |r0|): a free thermal expansion has every target zero and a stress that is a
    # difference of the strain's and the thermal strain's terms, so without it the test would ask
    # for rtol of zero (round-off kept float64 points iterating to max_iter)
    scale_t = torch.maximum(scale_t, torch.where(good, rmax, torch.zeros_like(rmax)))
    done = ~good  # a point the model fails at, at the start, has failed
    met = torch.zeros(batch, dtype=torch.bool, device=E.device)
    its = torch.zeros(batch, dtype=torch.int64, device=E.device)
    for it in range(options.max_iter + 1):
        now_met = good & (rmax <= rtol * torch.maximum(S.abs().amax(dim=-1), scale_t) + options.atol)
        met = met | (~done & now_met)
        done = done | now_met | ~good
        if bool(done.all()) or it == options.max_iter:
            break
        A = torch.where(done.reshape(batch, 1, 1), eye, torch.where(both, K, eye))
        b = torch.where(control & ~done.unsqueeze(-1), -r, zero)
        dE, info = torch.linalg.solve_ex(A, b.unsqueeze(-1))
        dE = torch.where((info != 0).unsqueeze(-1), zero, dE.squeeze(-1))
        done = done | (info != 0)  # a singular tangent (e.g. perfect plasticity at its limit load)
        # a point whose update is below rounding has reached the best E the dtype can hold
        stalled = ~done & ((dE.abs() <= 4 * eps * E.abs().clamp_min(eps)) | ~control).all(dim=-1)
        met, done = met | stalled, done | stalled
        dE = torch.where(done.unsqueeze(-1), zero, dE)
        alpha = torch.ones(batch, dtype=E.dtype, device=E.device)
        for halving in range(MAX_HALVINGS + 1):
            Et = E + alpha.unsqueeze(-1) * dE
            result, S, K, ok = evaluate(Et)
            r_t, rmax_t, good_t = residual(S, K, ok)
            accept = done | (good_t & (rmax_t <= (1 - 1e-4 * alpha) * rmax))
            if bool(accept.all()) or halving == MAX_HALVINGS:
                break
            alpha = torch.where(accept, alpha, alpha / 2)
        E, r, rmax, good = Et, r_t, rmax_t, good_t
        its = its + (~done).to(torch.int64)
    return MixedStep(result, E, met, its)


#: halvings of a Newton step that does not lower the residual (2^-12: a step of the plastic tangent
#: shrunk to one the elastic range can take)
MAX_HALVINGS = 12
