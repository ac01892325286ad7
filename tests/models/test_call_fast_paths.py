"""The call path's shortcuts change no number: a single-input model reads its input in place (no
copy into X), and a shared parameter row of plain numbers is built once and rebuilt on
set_parameters; a tensor parameter is re-read on every call (it may be changed in place)."""
from __future__ import annotations

import torch

from library_helpers import compiled_module


def test_single_input_is_read_in_place_and_gives_the_same_numbers():
    m = compiled_module("elastic").Model(backend="torch")
    E = 1e-3 * torch.randn(5, 7, 6, dtype=torch.float64)
    X, bs = m._inputs_tensor({"forces/E": E})
    assert X.data_ptr() == E.data_ptr() and bs == (5, 7)
    strided = E.transpose(0, 1)  # not contiguous: still correct (a copy where needed)
    got = m({"forces/E": strided})["state/S"]
    want = m({"forces/E": strided.contiguous()})["state/S"]
    assert torch.equal(got, want) and got.shape == (7, 5, 6)


def test_parameter_row_follows_set_parameters_and_in_place_tensors():
    m = compiled_module("elastic").Model(backend="torch")
    E = 1e-3 * torch.randn(4, 6, dtype=torch.float64)
    s1 = m({"forces/E": E})["state/S"]
    m.set_parameters(E=2 * 200000.0)  # the library default is 2e5 MPa
    s2 = m({"forces/E": E})["state/S"]
    torch.testing.assert_close(s2, 2 * s1 * (m.parameters["E"].default[0] / 200000.0), rtol=1e-14, atol=0)
    youngs = torch.tensor(200000.0, dtype=torch.float64)
    m.set_parameters(E=youngs)
    s3 = m({"forces/E": E})["state/S"]
    youngs.mul_(3.0)  # changed in place: the next call sees it
    s4 = m({"forces/E": E})["state/S"]
    torch.testing.assert_close(s4, 3 * s3, rtol=1e-14, atol=0)
    assert torch.equal(m({"forces/E": E}, E=200000.0)["state/S"], s3)  # a call override wins
