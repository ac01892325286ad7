"""The memory floor's kernels (benchmarks/floor.py): every output entry written, every input entry
read (their sum is what is written), on one thread and on several, for odd lengths and offsets that
exercise the streaming stores' unaligned head and tail; a second call of a size writes the same
(kept) tensors whole again."""
from __future__ import annotations

import pytest
import torch

from benchmarks.floor import floor_steps


@pytest.mark.parametrize("threads", [1, 2])
def test_floor_reads_every_input_and_writes_every_output(threads):
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        g = torch.Generator().manual_seed(7)
        x = torch.randint(-50, 50, (1003, 6), generator=g).to(torch.float64)
        t = torch.randint(-50, 50, (1003,), generator=g).to(torch.float64)
        want = (torch.empty(1003, 6, 6, dtype=torch.float64), torch.empty(1003, dtype=torch.float64))
        expected = float(x.sum() + t.sum())  # integers: the sum is exact in any order
        for name, step in floor_steps(want).items():
            outs = step(x, t, tangent=True)
            assert [tuple(o.shape) for o in outs] == [(1003, 6, 6), (1003,)], name
            for o in outs:
                assert bool((o == expected).all()), name
            again = step(x + 1, t, tangent=True)  # the same tensors (kept), rewritten whole
            assert [a.data_ptr() for a in again] == [o.data_ptr() for o in outs], name
            assert all(bool((o == expected + x.numel()).all()) for o in again), name
    finally:
        torch.set_num_threads(before)
