"""The transient driver, differentiable: a history as torch tensors whose graph reaches the
parameters and the initial state; with stress control, through the strain solved for too
(:class:`_Control`).

:func:`simulate` walks the steps exactly as :func:`modelc.runtime.driver.run_history` does (the same
step inputs: ``forces/E = strain[n]``, ``old_state/x = state/x`` of step n-1, failed points fed the
neutral state), but keeps torch tensors. Each step is one differentiable model call
(:mod:`modelc.runtime.autograd`), so back-propagation runs the adjoint recursion through the steps

    lambda_{n-1} = (d state_n / d old_state)^T lambda_n + (d loss / d state_{n-1}),
    d loss / d p += (d state_n / d p)^T lambda_n,

with every step's exact derivatives (the implicit-function theorem at the converged point), never
through Newton iterations. Memory: each step keeps its Jacobian for the backward (steps x points x
outputs x (inputs + parameters) numbers); ``checkpoint=k`` keeps only every k-th state and
recomputes the steps of one chunk at a time during the backward (``torch.utils.checkpoint``), so
memory grows with k instead of with the number of steps, for one more forward pass.

Forward sensitivities (``sensitivities=``): d output / d parameter at every step, carried forward
with the same per-step derivatives (``dY_n/dp = J_n,old_state dY_{n-1}/dp + J_n,p``), without a
graph: what ``modelc run --sensitivities`` writes.

What is described above is the per-step path. When every point converges (and for the parameter
layouts it serves), :mod:`modelc.runtime.history_adjoint` runs the same history as one autograd
node instead: the same numbers, the recursion written out (and ``checkpoint=`` keeping no
Jacobian at all); this module's steps run whenever it hands a run back.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import torch

from modelc.runtime import history_adjoint
from modelc.runtime.errors import InputError
from modelc.runtime.control import ControlOptions
from modelc.runtime.driver import (STRAIN, STRESS, _check_wiring, mixed_step, declared_initial, history_forces,
                                   tangent_block, variable_shapes)
from modelc.runtime.histories import as_history
from modelc.runtime.tensors import TypedTensor, broadcast_batch

__all__ = ["simulate"]


def simulate(model, history, *, params: Mapping[str, Any] | None = None,
             initial_state: Mapping[str, torch.Tensor] | None = None, checkpoint: int | None = None,
             sensitivities: Sequence[str] = ()) -> dict[str, torch.Tensor]:
    """Drive ``model`` through ``history`` (as for ``run_history``) and return torch tensors:
    every output by name ``(steps, *batch, *base)`` (row 0 the initial state), ``converged``
    ``(steps, *batch)``, and with ``sensitivities`` ``d(<output>)/d(<parameter>)`` ``(steps, *batch,
    *base)`` for each output and listed (scalar) parameter.

    ``params``: call overrides (numbers or tensors, scalar, per point, or TypedTensors over named
    dims such as ``samples``: the result is then batched over them too); the model's own values and
    trainable parameters are used otherwise. Anything that requires grad — a parameter, a value of
    ``initial_state`` (output name -> ``(batch, *base)``) — gets gradients from a backward through
    the whole history. ``checkpoint``: steps per recomputed chunk (bounded memory)."""
    hist = as_history(history)
    ins, outs = variable_shapes(model, "input"), variable_shapes(model, "output")
    _check_wiring(ins, outs, hist.temperature is not None)
    params = dict(params or {})
    model._check_param_names(params)
    if checkpoint is not None and (not isinstance(checkpoint, int) or checkpoint < 1):
        raise InputError(f"checkpoint must be a whole number of steps >= 1, got {checkpoint!r}")
    dt, dev = model.dtype, model.device
    strain = torch.as_tensor(hist.strain, dtype=dt, device=dev)
    time = torch.as_tensor(hist.time, dtype=dt, device=dev)
    temperature = None if hist.temperature is None else torch.as_tensor(hist.temperature, dtype=dt, device=dev)
    batch = hist.batch
    state = {n: torch.zeros((batch, *s), dtype=dt, device=dev) for n, s in outs.items()}
    state.update(_declared(model, batch, params, initial_state or {}))
    for n, v in (initial_state or {}).items():
        if n not in state:
            raise InputError(f"initial_state names {n!r}, not an output of model {model.NAME} "
                             f"({', '.join(outs)})")
        v = torch.as_tensor(v, dtype=dt, device=dev) if not isinstance(v, torch.Tensor) else v
        if tuple(v.shape) != tuple(state[n].shape):
            raise InputError(f"initial_state[{n!r}] has shape {tuple(v.shape)}, expected {tuple(state[n].shape)}")
        state[n] = v
    sens = _Sensitivities(model, sensitivities, outs, hist.mixed) if sensitivities else None
    if sens is not None and any(type(v).__name__ == "TypedTensor" for v in params.values()):
        raise InputError("sensitivities= takes parameters per point or shared, not over named dims")
    if not hist.mixed and history_adjoint.applies(sensitivities):  # the whole history as one node
        done = history_adjoint.run(model, ins, outs, strain, time, state, params, recompute=checkpoint is not None,
                                   sensitivities=tuple(sens.names) if sens is not None else (),
                                   temperature=temperature)
        if done is not None:
            return done
    control = _Control(hist, dt, dev) if hist.mixed else None
    if control is not None:  # the strain solved for is carried like the state (its graph too)
        state["strain"] = strain[0]
    step = _Stepper(model, ins, outs, strain, time, params, sens, temperature, control)
    alive = torch.ones(batch, dtype=torch.bool, device=dev)
    rows = {n: [v] for n, v in state.items()}
    conv = [alive]
    k = checkpoint or hist.steps
    for a in range(1, hist.steps, k):
        b = min(a + k, hist.steps)
        names = list(state)
        if checkpoint is not None and torch.is_grad_enabled():
            from torch.utils.checkpoint import checkpoint as ckpt

            flat = ckpt(step.chunk, a, b, alive, *[state[n] for n in names], use_reentrant=False)
        else:
            flat = step.chunk(a, b, alive, *[state[n] for n in names])
        per = dict(zip(names, flat[:len(names)]))  # each (b - a, batch, ...)
        oks = flat[len(names)]
        for n in names:
            rows[n] += list(per[n].unbind(0))
            state[n] = per[n][-1]
        conv += list(oks.unbind(0))
        alive = oks[-1]
    result = {n: torch.stack(_like_last(v)) for n, v in rows.items()}
    result["converged"] = torch.stack(_like_last(conv))
    if sens is not None:
        result.update(sens.arrays())
    return result


class _Control:
    """A history's stress control in simulate. Each stress-controlled step: the driver's control
    Newton finds the strain E* without a graph (``driver.mixed_step``, the same numbers as
    ``run_history``); then one Newton correction built on the graph, E = E* + (d - d.detach()) with
    d = -A^-1 (S(E*, old state, p) - target) on the controlled components (A the tangent there, at
    E*, held fixed), has E*'s value and the implicit-function theorem's derivative
    dE/dx = -A^-1 dS/dx for x the old state and the parameters, so the step's outputs, computed at E,
    carry the total derivative through the solved strain. The strain is carried from step to step
    as a state (the stepper's ``strain``), so a checkpointed chunk recomputes from it."""

    def __init__(self, hist, dtype, device):
        self.targets = torch.as_tensor(hist.stress, dtype=dtype, device=device)  # (steps, batch, 6)
        self.controls = torch.as_tensor(hist.control, device=device)  # (steps, batch, 6) bool
        self.scale = self.targets.abs().amax(dim=(0, 2))  # (batch,): the driver's target scale

    def strain(self, model, n: int, inputs: dict, alive: torch.Tensor, params: Mapping[str, Any],
               prescribed: torch.Tensor, previous: torch.Tensor, names: tuple | None = None):
        """``(E_n, met, ctrl)``: step n's strain (``prescribed`` where strain-controlled; solved, with
        the graph, where stress-controlled, starting from ``previous``), whether each point met its
        targets (True where nothing is controlled) and the controlled components, all over the
        step's batch. With parameters over named dims (``names``: the batch names of ``alive`` and
        ``previous``, whose batch is ``points`` or the step's) the inputs are TypedTensors: the
        control Newton runs on them flattened over the step's batch (points x samples ...), each
        (point, sample) solving its own strain, and E comes back a TypedTensor over those names."""
        flat = _Flat(inputs, params) if names is not None else None
        lift = flat.lift if flat is not None else (lambda t, _names: t)
        ctrl = lift(self.controls[n], ("points",)) & lift(alive, names).unsqueeze(-1)
        prescribed, previous = lift(prescribed, ("points",)), lift(previous, names)
        if not bool(ctrl.any()):
            return prescribed, torch.ones_like(ctrl[..., 0]), ctrl
        target, scale = lift(self.targets[n], ("points",)), lift(self.scale, ("points",))
        shape = ctrl.shape[:-1]
        with torch.no_grad():
            plain = {k: v.detach() for k, v in (flat.inputs if flat else inputs).items()}
            fixed = flat.params if flat else {k: v.detach() if isinstance(v, torch.Tensor) else v
                                              for k, v in params.items()}
            rows = torch.stack([previous.detach(), prescribed]).reshape(2, -1, 6)  # the driver's rows n - 1, n
            old = {STRAIN: rows[0]} if "old_forces/E" not in inputs else None
            c = ctrl.reshape(-1, 6)
            live = torch.ones(c.shape[0], dtype=torch.bool, device=c.device)  # (c is masked by alive already)
            step = mixed_step(model, plain, rows, target.reshape(-1, 6), c, 1, live, fixed, old, c.shape[0],
                              ControlOptions(), scale.reshape(-1))
            K = tangent_block(step.result, STRESS, STRAIN).to(step.strain.dtype).reshape(*shape, 6, 6)
        E_star = step.strain.reshape(*shape, 6)
        met = (step.converged | ~c.any(dim=-1)).reshape(shape)
        wrap = flat.wrap if flat else (lambda t: t)
        if not torch.is_grad_enabled():  # (forward sensitivities: no graph to build)
            return wrap(E_star), met, ctrl
        r = model({**inputs, STRAIN: wrap(E_star)}, False, **params)
        S = flat.unwrap(r) if flat else r[STRESS]
        both = ctrl.unsqueeze(-1) & ctrl.unsqueeze(-2)
        A = torch.where(both, K, torch.eye(6, dtype=K.dtype, device=K.device))
        d = -torch.linalg.solve(A, torch.where(ctrl, S - target, torch.zeros_like(S)).unsqueeze(-1))
        d = d.squeeze(-1)
        return wrap(E_star + (d - d.detach())), met, ctrl


class _Flat:
    """A step's TypedTensor inputs and parameters over named dims, flattened over the step's batch
    (the broadcast of their names, e.g. points x samples) for the control Newton, which works on a
    plain batch of points; and plain tensors lifted to that batch from the names they carry."""

    def __init__(self, inputs: Mapping[str, Any], params: Mapping[str, Any]):
        named = [v for v in (*inputs.values(), *params.values()) if isinstance(v, TypedTensor)]
        self.names, self.size = broadcast_batch(*named)
        self.inputs = {k: self._flat(v) for k, v in inputs.items()}
        self.params = {}
        for k, v in params.items():
            if isinstance(v, TypedTensor):
                self.params[k] = self._flat(v).reshape(-1)
            elif isinstance(v, torch.Tensor) and v.numel() > 1:
                raise InputError(f"parameter {k!r}: with parameters over named dims and stress control, give "
                                 f"the others as one value or as TypedTensors")
            else:
                self.params[k] = v.detach() if isinstance(v, torch.Tensor) else v

    def _flat(self, v) -> torch.Tensor:
        t = v.align_to(self.names, self.size).data
        return t.reshape(-1, *t.shape[len(self.size):])

    def lift(self, t: torch.Tensor, names) -> torch.Tensor:
        """A plain tensor whose leading dims are ``names`` (``("points",)`` or the step's), over the
        step's batch."""
        base = t.shape[len(names):]
        typ = "SR2" if tuple(base) == (6,) else "Scalar"
        return TypedTensor(t, typ, tuple(names)).align_to(self.names, self.size).data

    def wrap(self, E: torch.Tensor):
        return TypedTensor(E, "SR2", self.names)

    def unwrap(self, r) -> torch.Tensor:
        S = r[STRESS]
        names = tuple(r.batch_names)
        return S if names == tuple(self.names) else TypedTensor(S, "SR2", names).align_to(self.names).data





def _declared(model, batch: int, params: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """Row 0's declared initial values (the spec's ``initial:``, from the call's parameters, so a
    parameter that requires grad, such as gtn's phi0, gets the gradient through them), as
    ``run_history`` starts from them; the states ``given`` (``initial_state``) are left to it."""
    names = [v.name for v in getattr(model, "INITIAL", ()) if v.name not in given]
    if not names:
        return {}
    named = sorted(k for k, v in params.items() if isinstance(v, TypedTensor))
    if named:
        raise InputError(f"model {model.NAME} declares initial values of {', '.join(names)} (the spec's "
                         f"'initial:'), which simulate cannot compute from parameters over named dims "
                         f"({', '.join(named)}): give them in initial_state")
    values = declared_initial(model, batch, params)
    return {n: values[n] for n in names}


def _like_last(rows: list[torch.Tensor]) -> list[torch.Tensor]:
    """Row 0 (batch ``points``) broadcast to the later rows' batch (``points`` + named dims the
    parameters brought in, after it)."""
    if len(rows) < 2 or rows[0].shape == rows[1].shape:
        return rows
    first, target = rows[0], rows[1].shape
    extra = len(target) - first.dim()
    return [first.reshape(first.shape[0], *([1] * extra), *first.shape[1:]).expand(target)] + rows[1:]


class _Stepper:
    """The steps of one chunk (a function of the state, so that ``torch.utils.checkpoint`` can
    recompute it). With parameters over named dims (TypedTensors) the state is named too: the
    history's batch is ``points``, the state's names are those of the last result."""

    def __init__(self, model, ins, outs, strain, time, params, sens, temperature=None, control=None):
        self.model, self.ins, self.outs, self.control = model, ins, outs, control
        self.strain, self.time, self.params, self.sens = strain, time, params, sens
        self.temperature = temperature
        self.named = any(isinstance(v, TypedTensor) for v in params.values())
        self.state_names: tuple[str, ...] | None = ("points",) if self.named else None

    def _inputs(self, n: int, state, alive):
        vals = history_forces(self.strain, self.time, self.temperature, n)
        out = {}
        for name in self.ins:
            if name in vals:
                v, names = vals[name], ("points",)
            else:  # old state; a failed point gets the neutral (zero) state, its NaNs never enter Newton
                v = state["state/" + name[len("old_state/"):]]
                v = torch.where(alive.reshape(alive.shape + (1,) * (v.dim() - alive.dim())), v, torch.zeros_like(v))
                names = self.state_names
            out[name] = TypedTensor(v, self.model.input_axis.type_of(name), batch_names=names) if self.named else v
        return out

    def chunk(self, a: int, b: int, alive: torch.Tensor, *states):
        """Steps a .. b-1 from ``states``: stacked outputs per name, then the converged flags."""
        outs = list(self.outs)
        names = outs + (["strain"] if self.control is not None else [])
        state = dict(zip(names, states))
        rows = {n: [] for n in names}
        oks = []
        for n in range(a, b):
            want = self.sens.request() if self.sens is not None else False
            inputs = self._inputs(n, state, alive)
            met = None
            if self.control is not None:  # the strain of the step: solved where stress-controlled
                previous = torch.where(alive.unsqueeze(-1), state["strain"], torch.zeros_like(state["strain"]))
                where = None  # (named dims: previous and alive are over the points, or the last step's batch)
                if self.named:
                    where = ("points",) if previous.dim() == 2 else self.state_names
                if "old_forces/E" in inputs:  # (a failed point's NaNs never enter, as for the state)
                    inputs["old_forces/E"] = TypedTensor(previous, "SR2", where) if self.named else previous
                inputs[STRAIN], met, ctrl = self.control.strain(self.model, n, inputs, alive, self.params,
                                                                self.strain[n], previous, where)
            r = self.model(inputs, want, **self.params)
            if self.named:
                self.state_names = r.batch_names
            bs = r.outputs.batch_shape  # points, then any named dims the parameters brought in
            ok = alive.reshape(*alive.shape, *([1] * (len(bs) - alive.dim()))).expand(bs)
            if r.status is not None:
                ok = ok & r.status.converged
            if met is not None:
                ok = ok & met
            for name in outs:
                v = r[name]
                ok = ok & torch.isfinite(v.detach()).reshape(*ok.shape, -1).all(dim=-1)
            for name in outs:
                v = r[name]
                v = torch.where(ok.reshape(ok.shape + (1,) * (v.dim() - ok.dim())), v, torch.full_like(v, math.nan))
                state[name] = v
                rows[name].append(v)
            if self.control is not None:  # a failed point has no solved strain (as in run_history)
                E = inputs[STRAIN].data if self.named else inputs[STRAIN]
                E = torch.where(ctrl & ~ok.unsqueeze(-1), math.nan, E)
                state["strain"] = E
                rows["strain"].append(E)
            if self.sens is not None:
                self.sens.step(r.jacobian, ok, None if self.control is None else ctrl)
            alive = ok
            oks.append(ok)
        return (*[torch.stack(rows[n]) for n in names], torch.stack(oks))


class _Sensitivities:
    """d outputs / d parameters carried forward through the steps (no graph). With stress control
    (``control=True``) the strain solved for is carried too: at a controlled step
    dE/dp = -A^-1 (dS/dp at fixed E, through the old state and the old strain as well) on the
    controlled components, A the tangent there, and every output gets J_E dE/dp."""

    def __init__(self, model, names: Sequence[str], outs, control: bool = False):
        model._check_param_names(dict.fromkeys(names))
        nonscalar = [n for n in names if model.parameter_info[n].type != "Scalar"]
        if nonscalar:
            raise InputError(f"sensitivities: only scalar parameters, not {', '.join(nonscalar)}")
        self.model, self.names, self.outs, self.control = model, list(names), outs, control
        self.olds = {o: "old_" + o for o in outs if "old_" + o in model.input_axis}
        self.strains = [c for c in (STRAIN, "old_forces/E") if control and c in model.input_axis]
        self.D = None  # (B, ny, np): d outputs / d parameters of the last step
        self.dE = None  # (B, 6, np): d strain / d parameters of the last step (stress control)
        self.rows: list[torch.Tensor] = []
        self.strain_rows: list[torch.Tensor] = []

    def request(self):
        cols = self.strains + list(self.olds.values()) + self.names
        return [(o, c) for o in self.outs for c in cols]

    def step(self, jac, ok, ctrl: torch.Tensor | None = None):
        """Step n's sensitivities from its Jacobian; ``ctrl`` (B, 6): the components whose strain was
        solved for at this step (stress control), None or all False for none."""
        m = self.model
        with torch.no_grad():
            J = jac.tensor.detach()
            ok = ok.reshape(-1)
            B = ok.shape[0]
            J = J.reshape(B, J.shape[-2], J.shape[-1])
            ny, npar = m.output_axis.size, len(self.names)
            if self.D is None:
                self.D = torch.zeros(B, ny, npar, dtype=J.dtype, device=J.device)
                self.rows.append(self.D)
                if self.control:
                    self.dE = torch.zeros(B, 6, npar, dtype=J.dtype, device=J.device)
                    self.strain_rows.append(self.dE)
            D = torch.stack([J[:, :, jac.col_axis.span(k)[0]] for k in self.names], dim=-1)  # by name: the
            # columns come in the model's order, not the request's
            for o, old in self.olds.items():  # chain rule through the old state
                a, b = jac.col_axis.span(old)
                ya, yb = m.output_axis.span(o)
                D += torch.bmm(J[:, :, a:b], self.D[:, ya:yb, :])
            if self.control:
                if "old_forces/E" in self.strains:  # ... and through the strain of the step before
                    a, b = jac.col_axis.span("old_forces/E")
                    D += torch.bmm(J[:, :, a:b], self.dE)
                dE = torch.zeros_like(self.dE)
                if ctrl is not None and bool(ctrl.any()):
                    a, b = jac.col_axis.span(STRAIN)
                    sa, sb = m.output_axis.span(STRESS)
                    JE = J[:, :, a:b]
                    both = ctrl.unsqueeze(-1) & ctrl.unsqueeze(-2)
                    A = torch.where(both, JE[:, sa:sb, :], torch.eye(6, dtype=J.dtype, device=J.device))
                    rhs = torch.where(ctrl.unsqueeze(-1), D[:, sa:sb, :], torch.zeros_like(D[:, sa:sb, :]))
                    dE = -torch.linalg.solve(A, rhs)
                    D += torch.bmm(JE, dE)
                dE[~ok] = math.nan
                self.dE = dE
                self.strain_rows.append(dE)
            D[~ok] = math.nan
            self.D = D
            self.rows.append(D)

    def arrays(self) -> dict[str, torch.Tensor]:
        S = torch.stack(self.rows)  # (steps, B, ny, np)
        out = {}
        for o in self.outs:
            a, b = self.model.output_axis.span(o)
            base = self.outs[o]
            for k, p in enumerate(self.names):
                out[f"d({o})/d({p})"] = S[:, :, a:b, k].reshape(S.shape[0], S.shape[1], *base)
        if self.strain_rows:
            E = torch.stack(self.strain_rows)  # (steps, B, 6, np)
            for k, p in enumerate(self.names):
                out[f"d(strain)/d({p})"] = E[..., k]
        return out
