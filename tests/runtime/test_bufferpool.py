"""modelc.runtime.bufferpool: result blocks reused only when nothing refers to them (a tensor, a
view of it, a NumPy array of it), at most ``keep`` per size, aligned, plain ``torch.empty`` below
``min_bytes``; and through a model: fresh results that reuse the memory of dropped ones give the same
bits as ``reuse_outputs=False``, never the memory of a result still held."""
from __future__ import annotations

import copy
import pickle
import threading

import pytest
import torch

from modelc.runtime.bufferpool import BufferPool

SHAPE = (1000, 300)  # 2.4 MB of float64: above min_bytes


def test_a_block_is_reused_only_when_nothing_refers_to_it():
    pool = BufferPool(keep=2)
    a = pool.empty(SHAPE, torch.float64)
    assert a.shape == SHAPE and a.dtype == torch.float64 and a.is_contiguous()
    assert a.data_ptr() % 64 == 0
    pa = a.data_ptr()
    view = a[10:20, 3]  # a view keeps the block in use
    del a
    b = pool.empty(SHAPE, torch.float64)
    assert b.data_ptr() != pa
    arr = view.numpy()  # so does a NumPy array made from it
    del view
    c = pool.empty(SHAPE, torch.float64)
    assert c.data_ptr() not in (pa, b.data_ptr())  # a third block (the pool forgets its oldest)
    del arr, b
    d = pool.empty(SHAPE, torch.float64)  # b's block is free now; a's was forgotten
    assert d.data_ptr() not in (pa, c.data_ptr()) and pool.reused == 1
    assert pool.held_bytes() == 2 * 8 * SHAPE[0] * SHAPE[1]


def test_writes_to_a_reused_block_never_reach_a_live_result():
    pool = BufferPool(keep=2)
    live = []
    for k in range(20):
        t = pool.empty(SHAPE, torch.float64)
        t.fill_(float(k))
        if k % 3 == 0:
            live.append((k, t[5:7]))  # some results are kept (as views), the others dropped
    for k, v in live:
        assert bool((v == k).all()), k


def test_dtypes_sizes_small_blocks_and_release():
    pool = BufferPool()
    small = pool.empty((10, 6), torch.float64)  # under min_bytes: plain torch.empty, not held
    assert pool.held_bytes() == 0 and small.shape == (10, 6)
    for dtype in (torch.bool, torch.int32, torch.float32, torch.float64):
        t = pool.empty((2_000_000,), dtype)
        assert t.dtype == dtype and t.shape == (2_000_000,) and t.data_ptr() % 64 == 0
    assert pool.held_bytes() == 2_000_000 * (1 + 4 + 4 + 8)  # one block of each size
    pool.release()
    assert pool.held_bytes() == 0
    with pytest.raises(ValueError, match="keep=0"):
        BufferPool(keep=0)
    with pytest.raises(ValueError, match="sizes=0"):
        BufferPool(sizes=0)


def test_ever_changing_sizes_keep_only_the_last_sizes():
    """Calls whose batch size changes every time (the failed points of each step, sub-stepped) hold
    blocks of the last ``sizes`` sizes only, and a size used again is kept over older ones."""
    pool = BufferPool(keep=2, sizes=3)
    for rows in range(1001, 1011):
        _ = pool.empty((rows, 300), torch.float64)  # dropped at once
        _ = pool.empty((1000, 300), torch.float64)  # one size used all along
    assert sorted(pool._blocks) == [1000 * 300 * 8, 1009 * 300 * 8, 1010 * 300 * 8]
    assert pool.held_bytes() == 8 * 300 * (1000 + 1009 + 1010)  # one block each: each was free again


def test_a_copied_or_pickled_pool_is_empty_with_the_same_settings():
    pool = BufferPool(keep=3, min_bytes=10, sizes=5)
    _ = pool.empty(SHAPE, torch.float64)
    for other in (copy.deepcopy(pool), pickle.loads(pickle.dumps(pool))):
        assert (other.keep, other.min_bytes, other.sizes, other.held_bytes()) == (3, 10, 5, 0)


def test_threads_never_share_a_block():
    pool = BufferPool(keep=2)
    seen, errors = [], []

    def work(k):
        for _ in range(30):
            t = pool.empty(SHAPE, torch.float64)
            t.fill_(k)
            if not bool((t == k).all()):
                errors.append(k)
            seen.append(t.data_ptr())

    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors


def _inputs(B, seed):
    g = torch.Generator().manual_seed(seed)
    d = torch.float64
    return {"forces/E": 2e-3 * torch.randn(B, 6, generator=g, dtype=d), "forces/t": torch.ones(B, dtype=d),
            "old_forces/t": torch.zeros(B, dtype=d), "old_state/internal/Ep": 1e-4 * torch.randn(B, 6, generator=g, dtype=d),
            "old_state/internal/ep": torch.zeros(B, dtype=d)}


def test_a_newton_models_status_comes_from_the_pool():
    """j2_voce_af at 70,000 points: its status (converged, iterations and residual norm: views of
    one 910 KB block) is above min_bytes, so a step loop's dropped statuses are reused like its
    outputs (under the old 1 MiB threshold they came from malloc, which faulted them in again
    whenever other large allocations had come and gone); the statuses are the same as without
    reuse, and the three views share their block without overlapping."""
    from modelc.generated import j2_voce_af

    B = 70_000
    assert B * 13 >= BufferPool().min_bytes
    m = j2_voce_af.Model(backend="c")
    plain = j2_voce_af.Model(backend="c", reuse_outputs=False)
    g = torch.Generator().manual_seed(5)
    x = {**_inputs(B, 7), "old_state/internal/X": 10 * torch.randn(B, 6, generator=g, dtype=torch.float64)}
    ptrs = {0: set(), 1: set(), 2: set()}
    prev = None
    for _ in range(6):
        r = m(x, derivatives="tangent")
        want = plain(x, derivatives="tangent")
        assert bool(r.status.converged.all()) and torch.equal(r.status.converged, want.status.converged)
        assert torch.equal(r.status.iterations, want.status.iterations)
        assert torch.equal(r.status.residual_norm, want.status.residual_norm)
        cv, it, rn = r.status.converged, r.status.iterations, r.status.residual_norm
        assert (cv.dtype, it.dtype, rn.dtype) == (torch.bool, torch.int32, torch.float64)
        assert rn.data_ptr() + 8 * B == it.data_ptr() and it.data_ptr() + 4 * B == cv.data_ptr()
        for k, t in enumerate((cv, it, rn)):
            ptrs[k].add(t.data_ptr())
        prev = r  # noqa: F841 - the old state a step holds while the next one is written
    assert all(len(p) <= 3 for p in ptrs.values()), {k: len(p) for k, p in ptrs.items()}
    # from the third call on, each of the three blocks (outputs, tangent, status) is the memory of
    # the result two calls back: 4 x 3 reuses (4 x 2 when the status came from malloc)
    assert m._pool.reused >= 12, m._pool.reused
    assert plain._pool is None


def test_a_model_reuses_dropped_results_and_gives_the_same_bits():
    """j2_linear_iso on the C backend, 20,000 points with the tangent (2.9 MB Jacobian): a step loop
    that holds the previous result gets the same numbers with and without reuse; a dropped result's
    memory serves a later call, a held one's never does."""
    from modelc.generated import j2_linear_iso

    B = 20_000
    m = j2_linear_iso.Model(backend="c")
    plain = j2_linear_iso.Model(backend="c", reuse_outputs=False)
    prev = None
    held = m(_inputs(B, 99), derivatives="tangent")
    held_copy = (held.outputs.tensor.clone(), held.jacobian.tensor.clone())
    ptrs = set()
    for k in range(6):
        x = _inputs(B, k)
        r = m(x, derivatives="tangent")
        want = plain(x, derivatives="tangent")
        assert torch.equal(r.outputs.tensor, want.outputs.tensor)
        assert torch.equal(r.jacobian.tensor, want.jacobian.tensor)
        ptrs.add(r.jacobian.tensor.data_ptr())
        prev = r  # noqa: F841 - the old state a step holds while the next one is written
    assert held.jacobian.tensor.data_ptr() not in ptrs  # held all along: never handed out again
    assert torch.equal(held.outputs.tensor, held_copy[0]) and torch.equal(held.jacobian.tensor, held_copy[1])
    assert len(ptrs) <= 3 and m._pool.reused > 0  # the loop's Jacobians share a few blocks
    assert plain._pool is None
    m.release_buffers()
    assert m._pool.held_bytes() == 0
    with pytest.raises(Exception, match="reuse_outputs must be True or False"):
        j2_linear_iso.Model(reuse_outputs="yes")


def _mapping_of(addr: int) -> tuple[int, int, list[str]] | None:
    """(start, end, VmFlags) of the mapping of this process that holds ``addr`` (/proc/self/smaps)."""
    found = None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and line[0] in "0123456789abcdef":
                lo, hi = (int(v, 16) for v in head.split("-"))
                found = (lo, hi, []) if lo <= addr < hi else None
            elif found is not None and head == "VmFlags:":
                return found[0], found[1], line.split()[1:]
    return None


def _needs_huge_pages():
    from modelc.runtime.bufferpool import huge_pages

    if not huge_pages():
        pytest.skip("this system grants no transparent huge pages on request (Linux with THP 'always' "
                    "or 'madvise' only); the blocks are torch.empty's there, tested above")


def _spy_huge_blocks(monkeypatch) -> list[int]:
    """The sizes :func:`huge_block` is asked for from now on (it still maps them)."""
    from modelc.runtime import bufferpool

    asked, real = [], bufferpool.huge_block

    def spy(nbytes):
        asked.append(nbytes)
        return real(nbytes)

    monkeypatch.setattr(bufferpool, "huge_block", spy)
    return asked


def test_a_large_block_is_aligned_to_a_huge_page_and_advised_before_use(monkeypatch):
    """A block of 4 MiB or more gets its own mapping with MADV_HUGEPAGE on its whole 2 MiB pages
    (VmFlags 'hg'; the partial last one not), 2 MiB aligned; a smaller one comes from the allocator
    (whose memory may sit in a region someone else advised, NumPy does: not asserted); the mapping goes
    when nothing refers to the block any more."""
    from modelc.runtime.bufferpool import HUGE_MIN_BYTES, kept_empty

    _needs_huge_pages()
    asked = _spy_huge_blocks(monkeypatch)
    pool = BufferPool()
    t = pool.empty((HUGE_MIN_BYTES // 8 + 1000,), torch.float64)
    addr = t.data_ptr()
    assert addr % (2 << 20) == 0 and asked == [t.numel() * 8]
    lo, hi, flags = _mapping_of(addr)  # (the advised range is a mapping of its own, or merged with
    assert "hg" in flags and lo <= addr and hi >= addr + t.numel() * 8 // (2 << 20) * (2 << 20)  # a like one)
    tail = _mapping_of(addr + t.numel() * 8 - 1)  # the partial last huge page: not advised
    assert tail is not None and "hg" not in tail[2]
    t.fill_(3.0)  # and it is memory like any other
    assert float(t.sum()) == 3.0 * t.numel()
    pool.empty((HUGE_MIN_BYTES // 8 - 1,), torch.float64)
    kept_empty((HUGE_MIN_BYTES // 8 - 1,), torch.float64)
    assert len(asked) == 1  # under 4 MiB: the allocator's
    k = kept_empty((HUGE_MIN_BYTES // 8,), torch.float64)
    assert k.data_ptr() % (2 << 20) == 0 and "hg" in _mapping_of(k.data_ptr())[2] and len(asked) == 2
    pool.release()
    del t
    m = _mapping_of(addr)
    assert m is None or "hg" not in m[2]  # unmapped with its last reference (the address may be reused)


def test_huge_pages_can_be_turned_off(monkeypatch):
    from modelc.runtime.bufferpool import HUGE_MIN_BYTES, huge_pages, kept_empty

    asked = _spy_huge_blocks(monkeypatch)
    monkeypatch.setenv("MODELC_HUGE_PAGES", "0")
    assert not huge_pages() and not BufferPool().huge
    kept_empty((HUGE_MIN_BYTES // 8,), torch.float64)
    BufferPool().empty((HUGE_MIN_BYTES // 8,), torch.float64)
    assert asked == []


def test_results_in_huge_page_blocks_are_those_of_fresh_memory():
    """j2_voce_af at 20,000 points with the tangent (5.8 MB: a huge-page block): outputs, tangent and
    status equal, bit for bit, to those of a model that does not reuse its outputs, call after call."""
    from modelc.generated import j2_voce_af

    _needs_huge_pages()
    B = 20_000
    m = j2_voce_af.Model(backend="c")
    plain = j2_voce_af.Model(backend="c", reuse_outputs=False)
    g = torch.Generator().manual_seed(11)
    held = []
    for k in range(3):
        x = {**_inputs(B, 20 + k), "old_state/internal/X": 10 * torch.randn(B, 6, generator=g, dtype=torch.float64)}
        r, want = m(x, derivatives="tangent"), plain(x, derivatives="tangent")
        assert r.jacobian.tensor.data_ptr() % (2 << 20) == 0
        assert torch.equal(r.outputs.tensor, want.outputs.tensor)
        assert torch.equal(r.jacobian.tensor, want.jacobian.tensor)
        assert torch.equal(r.status.iterations, want.status.iterations)
        held.append(r)


def test_a_mapping_the_system_refuses_falls_back_to_the_allocator(monkeypatch):
    from modelc.runtime import bufferpool

    def refuse(nbytes):
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(bufferpool, "huge_block", refuse)
    pool = BufferPool()
    pool.huge = True
    t = pool.empty((bufferpool.HUGE_MIN_BYTES // 8,), torch.float64)
    k = bufferpool.kept_empty((bufferpool.HUGE_MIN_BYTES // 8,), torch.float64)
    t.fill_(1.0), k.fill_(2.0)
    assert t.data_ptr() % 64 == 0 and float(t.sum() + k.sum()) == 3.0 * t.numel()
