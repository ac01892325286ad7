"""modelc.integrations.torchfem against torch-fem 0.14's own J2 plasticity (IsotropicPlasticity3D with
linear hardening sigma_f(q) = sigma_y + K q, the same model as j2_linear_iso) on a small hexahedral
mesh under loading, unloading and reverse loading: the same force-displacement curve to 1e-10, the
same global Newton iterations, quadratic convergence; plus the conversions, the eigenstrain path
(a free thermal expansion is stress-free) and per-element parameters."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

torchfem = pytest.importorskip("torchfem", reason="torch-fem is a test dependency (pip install -e '.[test]')")
from torchfem import Solid  # noqa: E402
from torchfem.materials import IsotropicPlasticity3D  # noqa: E402
from torchfem.mesh import cube_hexa  # noqa: E402
from torchfem.report import SolveReport  # noqa: E402

from modelc.errors import InputError  # noqa: E402
from modelc.integrations.torchfem import Conversions, ModelcMaterial  # noqa: E402
from modelc.runtime import mandel  # noqa: E402

E, NU, K, SY = 200000.0, 0.3, 2000.0, 100.0
_ITERATION = SolveReport.iteration  # torch-fem's own, wrapped per solve below


@pytest.fixture(autouse=True)
def float64():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def _bar(material):
    """A 2 x 1 x 1 bar of 3 x 2 x 2 hexahedra, clamped at x = 0, its end pulled along x and sheared
    along y (an inhomogeneous stress state)."""
    nodes, elements = cube_hexa(4, 3, 3, Lx=2.0)
    bar = Solid(nodes, elements, material)
    left, right = nodes[:, 0] < 1e-9, nodes[:, 0] > 2.0 - 1e-9
    bar.constraints[left, :] = True
    bar.constraints[right, :] = True
    bar.displacements[right, 0] = 3e-3
    bar.displacements[right, 1] = 1.5e-3
    return bar, right


def _solve(material, monkeypatch, increments):
    record = []

    def iteration(self, i, res):
        record.append((i, float(res)))
        return _ITERATION(self, i, res)

    monkeypatch.setattr(SolveReport, "iteration", iteration)
    bar, right = _bar(material)
    u, f, sigma, F, state = bar.solve(increments=increments, return_intermediate=True, rtol=1e-10, atol=1e-7,
                                      max_iter=20)
    force = f[:, right, :].sum(dim=1)  # reaction at the pulled end, per increment
    return force, sigma, state, record


def _newton_runs(record):
    runs = []
    for i, res in record:
        if i == 0:
            runs.append([])
        runs[-1].append(res)
    return runs


def test_same_curve_and_iterations_as_torchfem_plasticity(monkeypatch):
    increments = torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0, 0.5, 0.0, -0.5, -1.0])
    ref_mat = IsotropicPlasticity3D(E, NU, lambda q: SY + K * q, lambda q: K * torch.ones_like(q),
                                    tolerance=1e-10, max_iter=20)
    f_ref, s_ref, st_ref, rec_ref = _solve(ref_mat, monkeypatch, increments)
    mine = ModelcMaterial("j2_linear_iso", E=E, nu=NU, K=K, sigma_y=SY)
    f_mc, s_mc, st_mc, rec_mc = _solve(mine, monkeypatch, increments)
    scale = f_ref.abs().max()
    assert scale > 0
    torch.testing.assert_close(f_mc, f_ref, rtol=1e-10, atol=1e-10 * scale)
    torch.testing.assert_close(s_mc, s_ref, rtol=1e-10, atol=1e-10 * s_ref.abs().max())
    ep = st_mc[..., 13]  # the flat state's equivalent plastic strain (state_layout)
    assert mine.state_layout[3] == ("state/internal/ep", 13, 1)
    torch.testing.assert_close(ep, st_ref[..., 0], rtol=1e-9, atol=1e-14)
    assert float(ep.max()) > 0  # it did yield ...
    runs_ref, runs_mc = _newton_runs(rec_ref), _newton_runs(rec_mc)
    assert [len(r) for r in runs_mc] == [len(r) for r in runs_ref]  # ... with the same global iterations
    # quadratic convergence: once in the basin, each residual is ~ the square of the previous one
    # (runs of max_iter = 20 are the unloading increments where torch-fem's Newton stalls and cuts the
    # step back, with its own material exactly as with this one)
    plastic_runs = [r for r in runs_mc if 4 <= len(r) < 20]
    assert plastic_runs, "no increment needed Newton iterations beyond the first corrections"
    for r in plastic_runs:
        rel = [x / r[0] for x in r]
        k = next(i for i in range(1, len(rel)) if rel[i] < 1e-3)
        if k + 1 < len(rel) and rel[k + 1] > 1e-14:
            assert rel[k + 1] <= 10 * rel[k] ** 2, rel


def test_conversions_match_the_runtime():
    c = Conversions.build(torch.float64)
    rng = torch.Generator().manual_seed(0)
    H = torch.randn(5, 3, 3, generator=rng)
    torch.testing.assert_close(H.reshape(5, 9) @ c.strain, mandel.full_to_sr2(H))
    S = torch.randn(5, 6, generator=rng)
    torch.testing.assert_close((S @ c.stress).reshape(5, 3, 3), mandel.sr2_to_full(S))
    C = torch.randn(5, 6, 6, generator=rng)
    full = (C.reshape(5, 36) @ c.tangent).reshape(5, 3, 3, 3, 3)
    torch.testing.assert_close(full, mandel.ssr4_to_full(C))
    torch.testing.assert_close(full, full.transpose(1, 2))  # minor symmetries
    torch.testing.assert_close(full, full.transpose(3, 4))


def test_step_eigenstrain_time_and_per_element_parameters():
    """A thermal strain increment equal to the total strain increment is stress-free; the flat state
    carries the mechanical strain and the time; sigma_y per element changes only its own element."""
    mat = ModelcMaterial("perzyna_iso", dt=0.5, sigma_y=torch.tensor([100.0, 50.0]))
    n = 2
    H = torch.zeros(n, 3, 3)
    H[:, 0, 0] = 2e-3
    state = torch.zeros(n, mat.n_state)
    zero = torch.zeros(n, 3, 3)
    s, st, C = mat.step(H, torch.eye(3).expand(n, 3, 3), zero, state, H.clone(), torch.ones(n, 1), 0)
    torch.testing.assert_close(s, zero, atol=1e-12, rtol=0)
    torch.testing.assert_close(st[:, 6], torch.full((n,), 0.5))  # the time advanced by dt
    s, st, C = mat.step(H, torch.eye(3).expand(n, 3, 3), zero, state, zero, torch.ones(n, 1), 0)
    assert float(s[1, 0, 0]) < float(s[0, 0, 0])  # the weaker element flows more
    # the state's strain is the Mandel total mechanical strain; the tangent is the model's
    torch.testing.assert_close(st[:, :6], mandel.full_to_sr2(H))
    want = mat.model({"forces/E": st[:, :6], "forces/t": st[:, 6], "old_forces/t": torch.zeros(n),
                      "old_state/internal/Ep": torch.zeros(n, 6), "old_state/internal/ep": torch.zeros(n)},
                     derivatives=[("state/S", "forces/E")], sigma_y=torch.tensor([100.0, 50.0]))
    torch.testing.assert_close(C, mandel.ssr4_to_full(want.jacobian["state/S", "forces/E"]))
    torch.testing.assert_close(s, mandel.sr2_to_full(want["state/S"]))


def test_errors():
    with pytest.raises(InputError, match="unknown parameter"):
        ModelcMaterial("j2_linear_iso", sigma_Y=1.0)
    mat = ModelcMaterial("perzyna_iso_coupled", n=10.0, eta=1.0)  # its Newton fails here
    H = torch.zeros(1, 3, 3)
    H[0, 0, 0] = 1e-2
    with pytest.raises(torchfem.sparse.ConvergenceError, match="did not converge|FAILED"):
        mat.step(H, torch.eye(3)[None], torch.zeros(1, 3, 3), torch.zeros(1, mat.n_state),
                 torch.zeros(1, 3, 3), torch.ones(1, 1), 0)
    assert math.isfinite(mat.dt)


DRUCKER_PRAGER = Path(__file__).resolve().parents[3] / "docs" / "zoo" / "drucker_prager.yaml"


def _sheared_cube(material, n=2):
    """A unit cube of n^3 hexahedra, its bottom clamped, its top sheared along x far past yield."""
    nodes, elements = cube_hexa(n + 1, n + 1, n + 1)
    cube = Solid(nodes, elements, material)
    bottom, top = nodes[:, 2] < 1e-9, nodes[:, 2] > 1.0 - 1e-9
    cube.constraints[bottom, :] = True
    cube.constraints[top, :] = True
    cube.displacements[top, 0] = 1e-2
    return cube


def test_tangent_symmetry_is_declared_and_checked():
    """torch-fem picks CG for large systems when the material says its tangent is symmetric. A modelc
    material says so only when asked (default False: BiCGSTAB), and then refuses a tangent that is not
    symmetric: Drucker-Prager with non-associated flow solves with the default and is refused with
    symmetric_tangent=True (its tangent is not symmetric on the cone, by 0.3 of its size), while
    j2_linear_iso (symmetric to rounding) runs either way and gives the same result."""
    from torchfem.sparse import resolve_method

    dp = ModelcMaterial(str(DRUCKER_PRAGER), "drucker_prager")
    assert dp.symmetric_tangent is False and _sheared_cube(dp).symmetric_tangent is False
    assert resolve_method(20000, None, _sheared_cube(dp).symmetric_tangent) == "bicgstab"
    assert resolve_method(20000, None, _sheared_cube(ModelcMaterial("j2_linear_iso", symmetric_tangent=True))
                          .symmetric_tangent) == "cg"
    inc = torch.linspace(0.0, 1.0, 4)
    u, f, sigma, F, state = _sheared_cube(dp).solve(increments=inc, return_intermediate=True)
    assert float(state[-1, ..., 6 + 6 + 1].max()) > 1e-3  # ep (after E, t and Ep): it yielded
    with pytest.raises(InputError, match=r"symmetric_tangent=True, but its tangent is not symmetric .*"
                                         r"construct the material with symmetric_tangent=False"):
        _sheared_cube(ModelcMaterial(str(DRUCKER_PRAGER), "drucker_prager", symmetric_tangent=True)).solve(
            increments=inc)
    results = [_sheared_cube(ModelcMaterial("j2_linear_iso", symmetric_tangent=s)).solve(increments=inc)[1]
               for s in (False, True)]
    torch.testing.assert_close(results[0], results[1], rtol=0, atol=0)
    with pytest.raises(InputError, match="symmetric_tangent must be True or False"):
        ModelcMaterial("j2_linear_iso", symmetric_tangent=1)


def test_full_tangent_is_d_stress_d_strain_for_a_non_symmetric_model():
    """torch-fem reads the tangent as C[i, j, k, l] = d sigma_ij / d eps_kl. With Drucker-Prager's
    non-symmetric tangent (non-associated flow) the step's C is checked against central differences
    of the step's own stress by each component of the displacement-gradient increment (a transposed
    major symmetry would fail; minor symmetry makes d/d H_kl the same as d/d eps_kl)."""
    mat = ModelcMaterial(str(DRUCKER_PRAGER), "drucker_prager")
    n, h = 3, 1e-9
    H = torch.zeros(n, 3, 3)
    H[:, 0, 1] = torch.tensor([3e-3, -4e-3, 5e-3])  # simple shear past yield, a little compression
    H[:, 1, 2] = 1e-3
    H[:, [0, 1, 2], [0, 1, 2]] = -2e-4
    args = (torch.eye(3).expand(n, 3, 3), torch.zeros(n, 3, 3), torch.zeros(n, mat.n_state), torch.zeros(n, 3, 3),
            torch.ones(n, 1), 0)
    s, st, C = mat.step(H, *args)
    assert float(st[:, 6 + 6 + 1].min()) > 1e-4  # plastic
    fd = torch.zeros(n, 3, 3, 3, 3)
    for k in range(3):
        for m in range(3):
            d = torch.zeros(3, 3)
            d[k, m] = h
            fd[..., k, m] = (mat.step(H + d, *args)[0] - mat.step(H - d, *args)[0]) / (2 * h)
    sym = 0.5 * (fd + fd.transpose(-1, -2))  # what the symmetric strain sees
    size = float(C.abs().max())
    torch.testing.assert_close(C, sym, rtol=0, atol=1e-6 * size)
    major = (C - C.permute(0, 3, 4, 1, 2)).abs().max()
    assert float(major) > 1e-2 * size  # not symmetric: the orientation is tested


def test_declared_initial_state_under_torch_fem():
    """torch-fem starts every state at zero; gtn's porosity must start at phi0 (the spec's `initial:`).
    Two hexahedra under a homogeneous displacement gradient (every node prescribed), phi0 given per
    element: every integration point's stress and porosity match run_history, which starts from the
    declared values, at every increment; the flat state's last slot marks the points initialized."""
    from modelc.runtime.driver import run_history

    phi0 = torch.tensor([0.005, 0.04])
    mat = ModelcMaterial("gtn", phi0=phi0)
    assert mat.state_layout[-1] == ("modelc/initialized", mat.n_state - 1, 1)
    nodes, elements = cube_hexa(3, 2, 2, Lx=2.0)
    cube = Solid(nodes, elements, mat)
    G = torch.tensor([[6e-3, 1e-3, 0.0], [0.0, -1e-3, 2e-3], [0.0, 0.0, -1e-3]])
    cube.constraints[:, :] = True
    cube.displacements = nodes @ G.T
    inc = torch.linspace(0.0, 1.0, 9)
    u, f, sigma, F, state = cube.solve(increments=inc, return_intermediate=True,
                                       aggregate_integration_points=False)  # (steps, points, elements, ...)
    strain = mandel.full_to_sr2(0.5 * (G + G.T))[None, None] * inc[:, None, None, None]  # (steps, 1, 1, 6)
    strain = strain.expand(-1, 2, -1, -1).reshape(len(inc), 2, 6).numpy()
    want = run_history(mat.model, {"time": inc[:, None].repeat(1, 2).numpy(), "strain": strain},
                       params={"phi0": phi0.numpy()}, progress=False)
    phi_slot = [o for n, o, _ in mat.state_layout if n == "state/internal/phi"][0]
    for k in range(1, len(inc)):
        for e in range(2):
            torch.testing.assert_close(sigma[k, :, e], mandel.sr2_to_full(torch.as_tensor(want["stress"][k, e]))
                                       .expand(sigma.shape[1], 3, 3), rtol=1e-9, atol=1e-7)
            torch.testing.assert_close(state[k, :, e, phi_slot],
                                       torch.full((sigma.shape[1],), float(want["state/internal/phi"][k, e])),
                                       rtol=1e-9, atol=0)
    assert bool((state[-1, ..., -1] == 1).all())
    assert float(want["state/internal/phi"][-1, 1]) > 0.04  # the voids grew from phi0
