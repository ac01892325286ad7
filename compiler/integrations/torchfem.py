"""A torch-fem material backed by a compiled modelc model (``pip install 'modelc[fem]'``).

``ModelcMaterial`` is a ``torchfem.materials.MechanicsMaterial`` for 3D small-strain solids: hand it
to ``torchfem.Solid`` wherever torch-fem takes a material. Per call of ``step`` (one integration
point of every element) it

- forms the total mechanical strain ``E = E_old + sym(H_inc) - de0`` (``de0``: torch-fem's external
  strain increment, thermal or eigenstrain), in Mandel notation;
- advances the time by :attr:`ModelcMaterial.dt` (rate-dependent models; torch-fem has no time);
- calls the model (``old_state/*`` from the flat state) for the stress and d stress / d strain;
- returns the stress as a full 3x3 tensor, the new flat state, and the consistent tangent as the
  full 3x3x3x3 tensor (both minor symmetries).

The flat state torch-fem stores per integration point is ``[E (6, Mandel), t (1), the model's
state variables in STATE order]`` (:attr:`ModelcMaterial.state_layout`), and for a model whose spec
declares initial values (``initial:``, e.g. GTN's porosity phi0) one more slot, ``modelc/initialized``:
torch-fem starts every state at zero, so while that slot is 0 the step starts those variables from
their declared values (from the parameters, per element where they are given per element) and
then sets it to 1. Conversions between
Mandel and full tensors are precomputed matrices derived from :mod:`modelc.runtime.mandel` (one
matmul each). Parameters: numbers, or one value per element (a tensor of shape ``(n_elem,)``). A
point whose Newton solve does not converge raises torch-fem's ``ConvergenceError``, so that
``Solid.solve`` cuts the load increment back (never a NaN stress in the global system).

Tangent symmetry: torch-fem solves a system of 10,000 degrees of freedom or more with conjugate
gradients when the material says its tangent is symmetric, else with BiCGSTAB. A compiled model's
tangent need not be (non-associated flow, GTN), and modelc cannot prove that it is, so a material
says so only when constructed with ``symmetric_tangent=True``; then every step checks it and refuses
a tangent that is not symmetric beyond rounding (``SYMMETRY_TOL``), instead of handing CG a matrix
it cannot solve.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import torch

from modelc.errors import InputError

try:
    from torchfem.materials import MechanicsMaterial
    from torchfem.sparse import ConvergenceError
except ImportError as exc:  # pragma: no cover - the fem extra is not installed
    raise ImportError("modelc.integrations.torchfem needs torch-fem: pip install 'modelc[fem]'") from exc

__all__ = ["ModelcMaterial", "Conversions"]

STRESS, STRAIN = "state/S", "forces/E"
#: ``symmetric_tangent=True``: the largest |C - C^T| a step accepts, relative to the point's largest
#: |C|, in machine epsilons of the model's dtype (2.2e-11 in float64, 1.2e-2 in float32). A symmetric
#: formulation's tangent differs from its transpose by rounding only: a few eps times the conditioning
#: of its linear solve, which next to the elastic/plastic switch of a coupled system reaches 1e4-1e5
#: (tests/models/library_helpers.py, float32 bounds). Measured on the library's models through loading
#: and reversal: at most 5.4e-14 in float64 and 3.3e-5 in float32 (j2_voce_af_coupled), 1e-16 and 1e-7
#: on the radial returns. Non-symmetric formulations lie above it in float64 (GTN 3e-4, non-associated
#: Drucker-Prager 0.3); in float32 only the strongly non-symmetric ones (Drucker-Prager) do.
SYMMETRY_TOL = 1e5
#: the flat state's last slot for a model with declared initial values: 0 before a point's first step
INITIALIZED = "modelc/initialized"
_DRIVEN = {STRAIN, "old_forces/E", "forces/t", "old_forces/t"}


@dataclass(frozen=True)
class Conversions:
    """Mandel <-> full matrices (built once, from :mod:`modelc.runtime.mandel` on unit tensors):

    - ``strain`` ``(9, 6)``: Mandel of the symmetric part of a flattened 3x3 tensor, ``H.reshape(9) @ strain``;
    - ``stress`` ``(6, 9)``: the flattened full tensor of a Mandel vector, ``S @ stress``;
    - ``tangent`` ``(36, 81)``: the full 4th-order tensor of a 6x6 Mandel matrix, ``C.reshape(36) @ tangent``.
    """

    strain: torch.Tensor
    stress: torch.Tensor
    tangent: torch.Tensor

    @classmethod
    def build(cls, dtype: torch.dtype, device: Any = "cpu") -> "Conversions":
        from modelc.runtime import mandel

        kw = dict(dtype=dtype, device=device)
        units9 = torch.eye(9, **kw).reshape(9, 3, 3)
        strain = mandel.full_to_sr2(units9)                       # (9, 6)
        stress = mandel.sr2_to_full(torch.eye(6, **kw)).reshape(6, 9)
        tangent = mandel.ssr4_to_full(torch.eye(36, **kw).reshape(36, 6, 6)).reshape(36, 81)
        return cls(strain, stress, tangent)


def _module(spec_or_module: Any, model: str | None) -> ModuleType:
    import modelc

    if isinstance(spec_or_module, ModuleType):
        if not hasattr(spec_or_module, "Model"):
            raise InputError(f"{spec_or_module.__name__} is not a generated modelc module (no Model class)")
        return spec_or_module
    return modelc.load(spec_or_module, model)


class ModelcMaterial(MechanicsMaterial):
    """A torch-fem material from a spec file, a bundled model's name or a generated module.

    ``dtype``: the model's (default: torch's default dtype, which torch-fem uses); ``backend``: as for
    ``Model`` ("auto": C on the CPU). ``dt``: the time increment of every call (set it before a
    solve; with torch-fem's automatic cutbacks a sub-step also advances by ``dt``). ``rho``: mass
    density. ``symmetric_tangent``: say that the model's tangent is symmetric (torch-fem then solves
    large systems with CG; each step checks it, see the module docstring). ``parameters``: the
    model's parameters, numbers or one value per element."""

    def __init__(self, spec_or_module: Any, model: str | None = None, *, dtype: torch.dtype | None = None,
                 backend: str = "auto", dt: float = 1.0, rho: float | torch.Tensor = 1.0,
                 symmetric_tangent: bool = False, **parameters):
        super().__init__()
        if not isinstance(symmetric_tangent, bool):
            raise InputError(f"symmetric_tangent must be True or False, not {symmetric_tangent!r}")
        self.symmetric_tangent = symmetric_tangent  # read by torch-fem when it picks its linear solver
        self.module = _module(spec_or_module, model)
        dtype = dtype or torch.get_default_dtype()
        self.model = self.module.Model(dtype=dtype, backend=backend)
        unknown = [k for k in parameters if k not in self.model.parameter_info]
        if unknown:
            raise InputError(f"model {self.model.NAME}: unknown parameter(s) {', '.join(unknown)}; its "
                             f"parameters are {', '.join(self.model.parameter_info)}")
        ins = self.model.input_axis.variable_names
        outs = self.model.output_axis.variable_names
        bad = [n for n in ins if n not in _DRIVEN and not (n.startswith("old_state/") and n[4:] in outs)]
        if STRAIN not in ins or STRESS not in outs or bad:
            raise InputError(f"model {self.model.NAME} cannot be a torch-fem material: it needs the input "
                             f"{STRAIN} and the output {STRESS}, and torch-fem cannot provide "
                             f"{', '.join(bad) or 'nothing else'} (it provides {', '.join(sorted(_DRIVEN))} "
                             "and old_state/* of the model's own state)")
        self.parameters = {k: torch.as_tensor(v, dtype=dtype) for k, v in parameters.items()}
        self.dt = float(dt)
        self.rho = torch.as_tensor(rho)
        self.is_vectorized = any(v.dim() > 0 for v in self.parameters.values())
        self.initial = tuple(v.name for v in self.model.INITIAL)  # state/x with a declared initial value
        self.state_layout = self._layout(ins)
        self._model_state = tuple(e for e in self.state_layout[2:] if e[0] != INITIALIZED)
        self.n_state = sum(size for _, _, size in self.state_layout)
        self._conv = Conversions.build(dtype)
        self._request = [(STRESS, STRAIN)]

    def _layout(self, inputs) -> tuple[tuple[str, int, int], ...]:
        """``(name, offset, size)`` in the flat state: the strain, the time, the model's state."""
        layout, off = [("E", 0, 6), ("t", 6, 1)], 7
        for name in inputs:
            if name.startswith("old_state/"):
                size = self.model.input_axis.type_of(name).size
                layout.append((name[4:], off, size))
                off += size
        if self.initial:
            layout.append((INITIALIZED, off, 1))
        return tuple(layout)

    def _check_symmetric(self, C: torch.Tensor) -> None:
        size = C.abs().amax(dim=(1, 2))
        asym = (C - C.transpose(1, 2)).abs().amax(dim=(1, 2))
        tol = SYMMETRY_TOL * torch.finfo(C.dtype).eps
        bad = asym > tol * size
        if bool(bad.any()):
            i = int(torch.argmax(torch.where(bad, asym / size, 0)))
            raise InputError(f"model {self.model.NAME}: the material was constructed with symmetric_tangent=True, "
                             f"but its tangent is not symmetric (max |C - C^T| = {float(asym[i]):.3g}, "
                             f"{float(asym[i] / size[i]):.3g} of max |C| at point {i}; at most {tol:.3g} allowed): "
                             "torch-fem's CG needs a symmetric matrix; construct the material with "
                             "symmetric_tangent=False (the default)")

    def step(self, H_inc, F, stress, state, de0, cl, iter):
        """One increment at one integration point of every element (see the module docstring)."""
        batch = H_inc.shape[:-2]
        B = math.prod(batch)
        dtype = self.model.dtype
        c = self._conv
        H = H_inc.to(dtype).reshape(B, 9)
        d0 = torch.as_tensor(de0, dtype=dtype).expand(*batch, 3, 3).reshape(B, 9)
        st = state.to(dtype).reshape(B, self.n_state)
        E_old, t_old = st[:, 0:6], st[:, 6]
        E_new = E_old + (H - d0) @ c.strain
        t_new = t_old + self.dt
        inputs = {STRAIN: E_new, "forces/t": t_new, "old_forces/E": E_old, "old_forces/t": t_old}
        fresh, init = None, {}
        if self.initial:  # torch-fem's zeros before a point's first step: the declared values instead
            fresh = st[:, self.state_layout[-1][1]] == 0
            if bool(fresh.any()):
                init = self.model.initial_values((B,), **self.parameters)
        for name, off, size in self._model_state:
            old = st[:, off:off + size].reshape(B, *self.model.input_axis.type_of("old_" + name).base_shape)
            if name in init:
                old = torch.where(fresh.reshape(B, *[1] * (old.dim() - 1)), init[name].to(old), old)
            inputs["old_" + name] = old
        inputs = {k: v for k, v in inputs.items() if k in self.model.input_axis}
        res = self.model(inputs, derivatives=self._request, **self.parameters)
        if res.status is not None and not res.status.all_converged:
            raise ConvergenceError(f"modelc material {self.model.NAME}: {res.status.summary()}")
        S = res[STRESS].reshape(B, 6)
        C = res.jacobian[STRESS, STRAIN].reshape(B, 36)
        if self.symmetric_tangent:
            self._check_symmetric(C.reshape(B, 6, 6))
        new = [E_new, t_new.reshape(B, 1)]
        new += [res[name].reshape(B, size) for name, _, size in self._model_state]
        if self.initial:
            new.append(torch.ones(B, 1, dtype=dtype, device=E_new.device))
        state_new = torch.cat(new, dim=1).reshape(*batch, self.n_state)
        return (S @ c.stress).reshape(*batch, 3, 3), state_new, (C @ c.tangent).reshape(*batch, 3, 3, 3, 3)
