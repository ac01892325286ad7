"""modelc.bundled: the bundled library read as data (the complete models, with building blocks on
request, each with its file and doc line, read independently from spec/*.yaml here), a name found in
the file that declares it, a LibraryModel usable as a path, and the errors for a bad name, an unknown
name, an empty library and a broken library file."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from modelc.bundled import LibraryModel, bundled_spec, library, resolve, spec_dir
from modelc.errors import InputError, ModelcError

SPEC = Path(__file__).resolve().parents[2] / "spec"


def _declared(section: str) -> dict[str, tuple[str, str]]:
    """{name: (file name, doc)} of every spec file's ``section``, read here with PyYAML."""
    out = {}
    for f in sorted(SPEC.glob("*.yaml")):
        data = yaml.safe_load(f.read_text()) or {}
        for name, body in (data.get(section) or {}).items():
            out[name] = (f.name, str(body.get("doc", "")))
    return out


def test_spec_dir_is_the_bundled_library():
    d = spec_dir()
    assert d.resolve() == SPEC.resolve()
    assert (d / "library.yaml").is_file()


def test_library_lists_the_complete_models_with_file_and_doc():
    lib = library()
    compositions = _declared("compose")
    assert set(lib) == set(compositions) and {"elastic", "j2_perfect"} <= set(lib)
    assert list(lib)[:2] == ["elastic", "j2_perfect"]  # library.yaml first, in its own order
    for name, m in lib.items():
        assert isinstance(m, LibraryModel) and m.name == name and m.kind == "composition"
        assert (m.path.name, m.doc) == compositions[name]
    assert lib["elastic"].doc == "Linear isotropic elasticity (E, nu)"


def test_building_blocks_on_request():
    every = library(building_blocks=True)
    models = _declared("models")
    assert set(every) == set(library()) | set(models)
    assert "elasticity" not in library()
    e = every["elasticity"]
    assert e.kind == "model" and e.path.name == "elasticity.yaml"
    assert e.doc == "Linear isotropic elasticity on the elastic strain E - Ep"


def test_bundled_spec_finds_the_declaring_file():
    assert bundled_spec("j2_perfect").path == SPEC / "library.yaml"
    found = bundled_spec("elasticity_total")  # a building block, in its own file
    assert found.path == SPEC / "elasticity.yaml" and found.kind == "model"
    # usable wherever a spec path is expected
    assert os.fspath(found) == str(SPEC / "elasticity.yaml") == str(found)
    assert Path(found).read_text() == (SPEC / "elasticity.yaml").read_text()


@pytest.mark.parametrize("name", ["", "1abc", "a-b", "elastic.yaml", "../spec/library", "x y"])
def test_not_a_model_name(name):
    with pytest.raises(InputError, match="not a model name") as info:
        bundled_spec(name)
    assert repr(name) in str(info.value)


def test_unknown_name_lists_the_library():
    with pytest.raises(InputError) as info:
        bundled_spec("j2_perfekt")
    msg = str(info.value)
    assert "no bundled model named 'j2_perfekt'" in msg
    assert all(n in msg for n in library())
    assert "elasticity_total" not in msg  # the complete models, not the building blocks


def test_empty_or_broken_library(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setattr("modelc.bundled.spec_dir", lambda: empty)
    assert library() == {}
    with pytest.raises(ModelcError, match="holds no spec files; this installation of modelc is incomplete") as info:
        bundled_spec("elastic")
    assert str(empty) in str(info.value) and not isinstance(info.value, InputError)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "library.yaml").write_text("compose:\n  a: [unclosed\n")
    monkeypatch.setattr("modelc.bundled.spec_dir", lambda: broken)
    with pytest.raises(ModelcError, match="the bundled spec does not parse as YAML") as info:
        library()
    assert str(broken / "library.yaml") in str(info.value)


def test_a_library_entry_is_what_modelc_load_takes():
    """modelc.load(modelc.library()["elastic"]) compiles that model (library.yaml holds several:
    the entry's name picks it) and gives Hooke's law."""
    import numpy as np
    import torch

    import modelc

    mod = modelc.load(modelc.library()["elastic"])
    E, nu = 1000.0, 0.25
    m = mod.Model(dtype=torch.float64, backend="torch", E=E, nu=nu)
    eps = torch.tensor([[1e-3, -2e-4, 5e-4, 1e-4, 0.0, 3e-4]], dtype=torch.float64)
    S = m({"forces/E": eps})["state/S"]
    S = getattr(S, "tensor", S).numpy()[0]
    lam, mu = E * nu / ((1 + nu) * (1 - 2 * nu)), E / (2 * (1 + nu))
    e = eps.numpy()[0]
    np.testing.assert_allclose(S, lam * e[:3].sum() * np.r_[1, 1, 1, 0, 0, 0] + 2 * mu * e, rtol=1e-12)


def test_resolve_a_bundled_name_a_library_entry_and_a_path():
    """resolve gives a bundled model's file and its own name; a spec path passes through with the
    model as given; a bundled model with another model asked for is refused, naming both (it used
    to pick that other model of the same file without a word)."""
    path, model = resolve("j2_voce_af", None)
    assert (Path(path), model) == (SPEC / "library.yaml", "j2_voce_af")
    assert resolve("j2_voce_af", "j2_voce_af") == (path, "j2_voce_af")
    assert resolve(library()["elastic"], None) == (SPEC / "library.yaml", "elastic")
    assert resolve("spec/x.yaml", "y") == ("spec/x.yaml", "y")
    for name in ("j2_voce_af", library()["j2_voce_af"]):
        with pytest.raises(InputError) as info:
            resolve(name, "j2_linear_iso")
        assert "'j2_voce_af' names a bundled model" in str(info.value)
        assert "'j2_linear_iso'" in str(info.value) and "library.yaml" in str(info.value)


def test_modelc_load_refuses_a_bundled_name_with_another_model():
    import modelc

    with pytest.raises(InputError, match="'elastic' names a bundled model"):
        modelc.load("elastic", model="j2_perfect")
