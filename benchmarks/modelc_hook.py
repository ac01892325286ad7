"""modelc in the benchmark: the library models, through their public call, as the baselines call them.

Contract (the same as benchmarks/baselines.py, so results compare directly):
``modelc_step(model_name, backend, dtype, device)`` returns ``step(E, dt, *old_state, tangent=bool)``
where ``E`` is (B, 6) Mandel strain, ``dt`` (B,), ``old_state`` the tensors named by
``baselines.STATE[model_name]`` (e.g. ``state/internal/Ep`` (B, 6), ``state/internal/ep`` (B,)), all of
``dtype`` on ``device``; it returns a tuple in the order of ``baselines.output_names(model_name, tangent)``:
stress, new internal state, gamma_rate (plastic models), and the (B, 6, 6) tangent when asked.
``model_name`` is one of ``baselines.MODELS`` (map it to the library spec); parameters are
``baselines.params_for(model_name)``. A backend that cannot run here is skipped with a note.

The tangent is asked for as ``derivatives=[("state/S", "forces/E")]``, the block the baselines and
NEML2 (``-d stress:strain``) compute: the library declares it as each model's ``tangent``, so the
tangent variant (which computes and writes only that 6x6 block) runs.
"""

from __future__ import annotations

from typing import Callable

from pathlib import Path

import torch

from benchmarks.baselines import STATE, params_for


class ModelcUnavailable(RuntimeError):
    """modelc (or this backend of it) cannot be benchmarked here; the message says why."""


_LIBRARY = Path(__file__).resolve().parents[1] / "spec" / "library.yaml"
TANGENT = [("state/S", "forces/E")]  # the consistent tangent, what a finite-element code asks for


def modelc_backends(device: torch.device) -> list[str]:
    """modelc backends to benchmark on ``device``: every backend that runs there."""
    if torch.device(device).type == "cuda":
        return ["triton", "torch"]
    return ["c", "torch"]  # "c" is skipped with a note where no C compiler builds it


def _base(model_name: str) -> str:
    """The baselines' name of a library model: a ``<name>_coupled`` twin (NEML2's coupled
    backward-Euler system, same parameters, inputs and outputs) is measured against ``<name>``."""
    return model_name.removesuffix("_coupled")


def _model(model_name: str, backend: str, dtype: torch.dtype, device: torch.device, baked: bool = False,
           specialize: bool = True):
    import modelc

    params = params_for(_base(model_name))
    module = modelc.load(_LIBRARY, model=model_name)
    try:
        return module.Model(dtype=dtype, device=device, backend=backend, **({"bake": True} if baked else {}),
                            **({} if specialize else {"specialize": False}), **params)
    except Exception as exc:  # a backend that cannot run here (no GPU, no compiler, ...)
        raise ModelcUnavailable(f"modelc backend {backend!r}: {exc}") from exc


def named_inputs(m, model_name: str, args) -> dict:
    """A modelc model's named inputs from a baseline-convention step's arguments ``(E, dt,
    *old_state)``: time ``dt`` after an old time of 0, the old state by name, every other input zero
    (same dtype and device)."""
    E = args[0]
    inputs = {"forces/E": E}
    names = set(m.input_axis.variable_names)
    if "forces/t" in names:
        inputs["forces/t"], inputs["old_forces/t"] = args[1], torch.zeros_like(args[1])
    for name, value in zip(STATE[_base(model_name)], args[2:]):
        inputs["old_" + name] = value
    for name in names - set(inputs):  # inputs the baseline convention does not carry: zero
        t = m.input_axis.type_of(name)
        inputs[name] = torch.zeros(E.shape[0], *t.base_shape, dtype=E.dtype, device=E.device)
    return inputs


def modelc_step(model_name: str, backend: str, dtype: torch.dtype, device: torch.device,
                derivatives=None, bound: bool = False, baked: bool = False, specialize: bool = True) -> Callable:
    """A compiled modelc model wrapped in the baseline calling convention (see module doc).

    It goes through the public call (named inputs in, typed views out), so the timing includes what a
    user pays: assembling the flat input, the launch, and the labeled views of the result.
    ``derivatives``: what a ``tangent=True`` call asks for (default ``TANGENT``; ``True`` for the full
    Jacobian, of which the stress/strain block is returned). ``bound``: the route of a host that
    evaluates the same arrays every step (``model.bind``, one bound call per set of input tensors,
    made on first use of those tensors). ``baked``: every parameter baked into the C library
    (``Model(..., bake=True)``: a material whose constants are known when the kernel is built).
    ``specialize=False``: the C library's general powers even for an integer exponent parameter
    (``Model(..., specialize=False)``; the default bakes it, docs/backends.md).
    """
    m = _model(model_name, backend, dtype, device, baked, specialize)
    names = STATE[_base(model_name)]
    plastic = _base(model_name) != "elastic"
    input_names = set(m.input_axis.variable_names)
    forces = [v for v in input_names if v.startswith("old_forces/") and v != "old_forces/t"]
    calls: dict[tuple, Callable] = {}

    zeros: dict[tuple, torch.Tensor] = {}

    def zero_like(t):
        # the baseline convention's constant inputs (old time 0, old forces 0, ...), which a host
        # keeps from step to step: made once per shape, not per call (a kernel launch each on a GPU)
        key = (tuple(t.shape), t.dtype, t.device)
        if key not in zeros:
            zeros[key] = torch.zeros_like(t)
        return zeros[key]

    def named(E, dt, old_state):
        t = dt
        inputs = {"forces/E": E}
        if "forces/t" in input_names:
            inputs["forces/t"] = t
            inputs["old_forces/t"] = zero_like(t)
        for f in forces:
            inputs[f] = zero_like(E)
        for name, value in zip(names, old_state):
            inputs["old_" + name] = value
        if plastic and "old_state/internal/gamma_rate" in input_names:
            inputs["old_state/internal/gamma_rate"] = zero_like(dt)
        return inputs

    def step(E, dt, *old_state, tangent: bool = False):
        kind = (TANGENT if derivatives is None else derivatives) if tangent else False
        if bound:
            key = (tangent, E.data_ptr(), dt.data_ptr(), *(v.data_ptr() for v in old_state))
            if key not in calls:
                calls[key] = m.bind(named(E, dt, old_state), kind)
            out = calls[key]()
        else:
            out = m(named(E, dt, old_state), derivatives=kind)
        res = [out["state/S"], *(out[n] for n in names)]
        if plastic:
            res.append(out["state/internal/gamma_rate"])
        if tangent:
            res.append(out.jacobian["state/S", "forces/E"])
        return tuple(res)

    step.model = m
    step.calls = calls
    return step


def kernel_resources(step: Callable) -> list[dict]:
    """Registers and spills per thread of the Triton kernels a modelc step has launched on a GPU (as
    Triton loaded them: ``n_regs``, ``n_spills``), one entry per compiled specialisation (the
    variant is the kernel's ``V`` constexpr); [] elsewhere."""
    m = getattr(step, "model", None)
    kernel = getattr(m, "kernel", None)
    bits = {bit: name for name, bit in getattr(m, "VARIANTS", {}).items()}
    names = list(getattr(kernel, "arg_names", ()))
    vpos = names.index("V") if "V" in names else -1  # constexprs are keyed by (position,) in Triton 3
    out = []
    for caches in getattr(kernel, "device_caches", {}).values():
        try:
            compiled = list(caches[0].items())
        except (TypeError, IndexError, AttributeError):  # another Triton's layout: report nothing
            continue
        for key, ck in compiled:
            regs, spills = getattr(ck, "n_regs", None), getattr(ck, "n_spills", None)
            if regs is None:
                continue
            consts = getattr(getattr(ck, "src", None), "constants", None) or {}
            v = consts.get("V", consts.get((vpos,))) if isinstance(consts, dict) else None
            out.append({"variant": bits.get(v, str(key)[:80]), "n_regs": int(regs), "n_spills": int(spills or 0),
                        "name": getattr(getattr(ck, "metadata", None), "name", "kernel")})
    return out


def modelc_compile(model_name: str, out_dir: str) -> dict[str, float]:
    """Compile the library spec of ``model_name`` into ``out_dir`` and import it (no cache)."""
    import time

    from modelc import driver
    from modelc.backends.module import module_file_name, write_modules
    from modelc.cache import import_file

    t0 = time.perf_counter()
    spec = driver.load_spec(_LIBRARY)
    src = driver.compile_model(spec, model_name).source
    fname = module_file_name(model_name)
    write_modules({fname: src}, out_dir)
    t1 = time.perf_counter()
    import_file(Path(out_dir) / fname, f"modelc_bench_{model_name}")
    t2 = time.perf_counter()
    return {"compile_s": t1 - t0, "import_s": t2 - t1}
