"""Calls of a compiled model that autograd differentiates, on every backend, with modelc's own
derivatives.

A call whose inputs or parameters require grad (with grad mode on) goes through :class:`_Evaluate`,
a ``torch.autograd.Function``. Its forward runs the model once — Newton included, under
``torch.no_grad`` — asking the generated code for the outputs *and* the Jacobian
``J = d outputs / d (the inputs and parameters that require grad)``; the backward is the
vector-Jacobian product ``g_x = g_y^T J``, summed over the batch dims a value was broadcast along.
For an implicit model ``J`` is the implicit-function theorem's ``du/dx = -(dR/du)^-1 dR/dx`` (and
``du/dp = -(dR/du)^-1 dR/dp`` for parameters: the ``total`` variant of the generated module), never a
derivative through the Newton iterations — so on ``backend="torch"`` too, the iterations are not
recorded by autograd.

First derivatives only: the Jacobian a call returns (``derivatives=``) and the gradients computed
with ``create_graph=True`` carry a node whose backward raises an :class:`InputError` saying so.
``out=`` is refused (a differentiable call returns fresh tensors).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from modelc.runtime.errors import InputError


def requires_grad(model, inputs, overrides: Mapping[str, Any]) -> bool:
    """Whether any input or parameter value of this call requires grad."""
    from modelc.runtime.labeled import LabeledVector

    if isinstance(inputs, LabeledVector):
        if inputs.tensor.requires_grad:
            return True
    elif isinstance(inputs, Mapping):
        if any(isinstance(v, torch.Tensor) and v.requires_grad for v in inputs.values()):
            return True
    holder = model._modules["params"]  # its buffers and nn.Parameters are the model's values (model._values)
    for d in (holder._parameters, holder._buffers):
        if any(v is not None and v.requires_grad and k not in overrides for k, v in d.items()):
            return True
    return any(isinstance(v, torch.Tensor) and v.requires_grad for v in overrides.values())


def call(model, inputs, derivatives, old_forces, overrides: Mapping[str, Any], out) -> Any:
    """``model(inputs, derivatives, **overrides)`` with outputs (and status) whose grad_fn
    back-propagates to every input and parameter that requires grad."""
    from modelc.runtime.labeled import LabeledVector

    if out is not None:
        raise InputError(f"model {model.NAME}: out= cannot take the result of a differentiable call (inputs or "
                         "parameters require grad): drop out=, or call under torch.no_grad()")
    if isinstance(inputs, LabeledVector):  # per-variable views, differentiable w.r.t. the vector
        missing = [n for n in model.input_axis.variable_names if n not in inputs.axis]
        if missing:
            raise InputError(f"model {model.NAME}: the input vector lacks {', '.join(missing)}")
        inputs = {n: inputs[n] for n in model.input_axis.variable_names}
    leaves = _leaves(model, inputs, overrides)
    if not leaves:  # a value that requires grad was overridden by one that does not
        return model._call(inputs, derivatives, old_forces, overrides)
    plan = _Plan(model, inputs, derivatives, old_forces, overrides, [name for name, _ in leaves])
    outs = _Evaluate.apply(plan, *[t for _, t in leaves])
    return plan.result(outs)


def _leaves(model, inputs, overrides) -> list[tuple[str, torch.Tensor]]:
    """``(name, tensor)`` of the inputs (input-axis order) and parameters (declaration order) that
    require grad."""
    out = []
    if isinstance(inputs, Mapping):
        for n in model.input_axis.variable_names:
            v = inputs.get(n)
            if isinstance(v, torch.Tensor) and v.requires_grad:
                out.append((n, v))
    values = {**model._values, **overrides}
    for p in model.PARAMETERS:
        v = values.get(p.name)
        if isinstance(v, torch.Tensor) and v.requires_grad:
            if p.name in model.input_axis:
                raise InputError(f"model {model.NAME}: parameter {p.name} has the name of an input, so its "
                                 "derivatives cannot be told apart: rename one of them in the spec")
            out.append((p.name, v))
    return out


class _Plan:
    """One differentiable call: what to compute, and (after :meth:`run`) its results."""

    def __init__(self, model, inputs, derivatives, old_forces, overrides, wrt: list[str]):
        self.model, self.inputs, self.old_forces, self.overrides = model, inputs, old_forces, overrides
        self.wrt = wrt
        self.user = model._derivative_request(derivatives)  # (variant, axes) the caller asked for, or None
        self.raw = None

    def run(self):
        """Outputs ``(*bs, ny)`` and the caller's Jacobian (or None); keeps ``J`` over
        every output by :attr:`wrt` (and the caller's columns) for the backward."""
        model = self.model
        cols = list(self.wrt)
        if self.user is not None:
            cols += [n for n in self.user[1][1].variable_names if n not in cols]
        # a whole variant (the generated code computes all its columns anyway): no narrowing copy
        full = "total" if any(c not in model.input_axis for c in cols) else True
        res = model._call(self.inputs, full, self.old_forces, self.overrides)
        self.raw = res
        jac = res.jacobian
        bs = res.outputs.batch_shape
        self.batch_shape = bs
        B = math.prod(bs)
        self.J = jac.tensor.reshape(B, *jac.tensor.shape[-2:])
        self.spans = [jac.col_axis.span(n) for n in self.wrt]
        user = None
        if self.user is not None:
            from modelc.runtime.labeled import sub_matrix

            axes = self.user[1]
            user = jac if (jac.row_axis, jac.col_axis) == tuple(axes) else sub_matrix(jac, *axes)
        self.user_axes = None if user is None else (user.row_axis, user.col_axis)
        return res.outputs.tensor, (None if user is None else user.tensor)

    def result(self, outs):
        from modelc.runtime.labeled import LabeledMatrix, LabeledVector
        from modelc.runtime.model import Result

        Y, UJ = outs[0], (outs[1] if len(outs) > 1 else None)
        jac = None if self.user_axes is None else LabeledMatrix(UJ, *self.user_axes)
        result = Result(LabeledVector(Y, self.model.output_axis), jac, self.raw.status)
        result.producer = self.raw.producer
        return result


class _Evaluate(torch.autograd.Function):
    """Outputs (and the caller's Jacobian) of one model call as a function of the leaves that
    require grad; backward: ``g^T J`` per leaf."""

    @staticmethod
    def forward(ctx, plan: _Plan, *leaves):
        ctx.set_materialize_grads(False)
        Y, UJ = plan.run()
        ctx.plan = plan
        ctx.shapes = [t.shape for t in leaves]
        # J through save_for_backward (not a ctx attribute): torch.utils.checkpoint can then drop it
        # and recompute it (run_history's checkpointed gradients bound memory this way)
        ctx.save_for_backward(plan.J, *leaves)
        plan.J = None
        if UJ is None:
            return (Y,)
        return Y, UJ

    @staticmethod
    def backward(ctx, gY, gUJ=None):
        plan = ctx.plan
        if gUJ is not None:
            raise _second_order(plan.model, "the Jacobian a call returned (derivatives=...)")
        if gY is None:
            return (None,) * (1 + len(ctx.shapes))
        J, *leaves = ctx.saved_tensors
        B = J.shape[0]
        # (an elementwise product and a sum: bmm of tiny matrices is slower on the CPU)
        gY = gY.reshape(B, -1, 1).to(J.dtype)
        # g^T J per point; a zero cotangent contributes nothing, also where J is NaN (a failed
        # point, whose outputs the caller masked: 0 * NaN would make every shared parameter's
        # gradient NaN)
        g = torch.where(gY == 0, 0.0, gY * J).sum(dim=1)  # (B, columns)
        bs = tuple(plan.batch_shape)
        grads = []
        for (a, b), shape, name in zip(plan.spans, ctx.shapes, plan.wrt):
            base = _base_shape(plan.model, name)
            gi = g[:, a:b].reshape(*bs, *base)
            if tuple(gi.shape) != tuple(shape):
                gi = gi.sum_to_size(shape)
            if torch.is_grad_enabled():  # create_graph=True: no second derivatives through J
                gi = _FirstOrderOnly.apply(gi, plan.model.NAME, *leaves)
            grads.append(gi)
        return (None, *grads)


def _base_shape(model, name: str) -> tuple[int, ...]:
    from modelc.runtime.types import TYPES

    if name in model.input_axis:
        return tuple(model.input_axis.type_of(name).base_shape)
    return tuple(TYPES[model.parameter_info[name].type].base_shape)


def _second_order(model, what: str) -> InputError:
    return InputError(f"model {model.NAME}: {what} cannot be differentiated: modelc computes first derivatives "
                      "only (double backward is not supported); .detach() it to use it as a constant")


class _FirstOrderOnly(torch.autograd.Function):
    """Identity in ``g`` whose backward refuses: marks a gradient that a second backward would need
    the model's second derivatives for (it depends on the leaves through ``J``, so they are inputs)."""

    @staticmethod
    def forward(ctx, g, name: str, *leaves):
        ctx.name = name
        return g.clone()

    @staticmethod
    def backward(ctx, *grads):
        raise InputError(f"model {ctx.name}: a gradient of a modelc model call cannot be differentiated again: "
                         "modelc computes first derivatives only (double backward is not supported)")
