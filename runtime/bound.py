"""A call bound to its tensors: :meth:`CompiledModel.bind` for hosts that evaluate the same batch
every step (a finite-element code owns its arrays and overwrites them in place).

``bound = model.bind(inputs, derivatives="tangent")`` makes one ordinary call (every check of
``model(...)``) and keeps its result; ``bound()`` evaluates again on the same input tensors, whatever
they hold now, writing into that result's storage, and returns it. On the C backend it goes straight
to the kernel with the argument block packed at bind time (the regular call's Python work, ~50-70 us
per call at 1e3 points, is skipped), and on the Triton backend straight to the kernel launch with the
views, parameters and buffers found at bind time; on the PyTorch backend, and whenever the fast path
cannot prove it reads what the regular call would read, ``bound()`` is the regular call with ``out=``. Either way
the numbers are those of ``model(inputs, derivatives, out=bound.result)``.

The fast path re-reads the parameter row and the Newton options at every call (a changed value
re-packs the arguments), leaves sub-stepping to the regular call (a point that did not converge
with ``on_failure="substep"``), and is used only when every input is read in place (a view of the
caller's tensor, which ``bound()`` then sees change) and no input or parameter requires grad (checked
again at every call). A call where something requires grad goes through autograd and returns a new
result (autograd needs tensors of its own), not ``bound.result``.
"""
from __future__ import annotations

import math
from numbers import Number
from typing import Any, Mapping

import torch

from modelc.runtime import autograd, callpath
from modelc.runtime import solver as _solver
from modelc.runtime.cbuild import pack_args


class BoundCall:
    """``bound()`` re-evaluates ``model`` on the tensors given to :meth:`CompiledModel.bind` (module
    doc). ``result``: the :class:`~modelc.runtime.model.Result` every call writes into; ``fast``:
    whether calls go straight to the C or Triton kernel."""

    def __init__(self, model, inputs, derivatives, solver: Mapping[str, Any] | None, params: Mapping[str, Any]):
        self.model = model
        self.inputs = dict(inputs) if isinstance(inputs, Mapping) else inputs
        self.derivatives, self.solver, self.params = derivatives, solver, dict(params)
        self._options = _solver.check(solver, f"model {model.NAME}: solver=")
        self.result = model(self.inputs, derivatives, solver=solver, **self.params)
        self._plan = self._fast_plan()
        self._args = self._key = None

    @property
    def fast(self) -> bool:
        return self._plan is not None

    def _fast_plan(self):
        """(variant, views, batch shape, buffers), or None when the regular call must run."""
        m = self.model
        if not isinstance(self.inputs, Mapping) or not (
                (m.backend == "c" and m.C_MARKS_NONFINITE) or m.backend == "triton"):
            return None  # (the Triton kernels of this runtime mark non-finite inputs themselves)
        if self.result.batch_names or autograd.requires_grad(m, self.inputs, self.params):
            return None
        request = m._derivative_request(self.derivatives)
        variant = request[0] if request else None
        views, bs = callpath.input_views(m, self.inputs)
        for name, view in zip(m.input_axis.variable_names, views):
            given = self.inputs[name]
            if not isinstance(given, Number) and view.untyped_storage().data_ptr() != given.untyped_storage().data_ptr():
                return None  # a copy: in-place changes of the caller's tensor would not be seen
        if variant is not None and (m._variant_axes(variant) != request[1] or variant in m.CONSTANT_JACOBIAN):
            return None  # a block of the variant's Jacobian, or a broadcast one: the regular call
        buf = callpath.out_buffers(m, self.result, bs, None if request is None else request[1])
        return variant or "value", views, bs, buf

    def __call__(self):
        if self._plan is None:
            return self._regular()
        m = self.model
        variant, views, bs, buf = self._plan
        P, shared = m._param_tensor(self.params, bs)
        if torch.is_grad_enabled() and (P.requires_grad or any(v.requires_grad for v in views)):
            return self._regular()  # something requires grad since bind: the call through autograd
        opts = _solver.triple({**m._solver, **self._options})  # as the call computes it
        if m.backend == "triton":
            if math.prod(bs):
                m._launch_into(views, P, buf.Y, buf.J, buf.status, variant, shared, self.params, opts)
            return self._after()
        key = (P.data_ptr(), tuple(P.shape), opts)
        if key != self._key:  # new parameter values or Newton options: re-pack the arguments
            self._P = P.contiguous()
            self._args = pack_args(views, self._P, buf.Y, buf.J, buf.status, opts)
            self._lib = m._c_library(self._P)  # baked parameters: the library of these values
            self._key = key
        self._lib.run(variant, math.prod(bs), self._args, torch.get_num_threads())
        return self._after()

    def _after(self):
        st = self.result.status
        if st is not None and self.model.on_failure == "substep" and not bool(st.converged.all()):
            return self._regular()
        return self.result

    def _regular(self):
        m = self.model
        if torch.is_grad_enabled() and autograd.requires_grad(m, self.inputs, self.params):
            # autograd needs tensors of its own (out= refuses a differentiable call): a new result
            return m(self.inputs, self.derivatives, solver=self.solver, **self.params)
        return m(self.inputs, self.derivatives, out=self.result, solver=self.solver, **self.params)

    def __repr__(self) -> str:
        return f"BoundCall({self.model.NAME}, derivatives={self.derivatives!r}, fast={self.fast})"
