"""Result buffers a model reuses on the CPU once no tensor refers to them any more.

A call that returns fresh outputs needs fresh memory for them, and on the CPU large blocks come
from the system (glibc maps every block above its mmap threshold, 32 MiB at most, anew): each page
is faulted in and zeroed on first write, every call. At 1e6 points that is most of a call
(j2_linear_iso with the tangent, 496 MB of outputs: 228 ms fresh against 34 ms into kept
buffers on the development machine). CUDA tensors do not pay it (PyTorch's caching allocator
keeps freed blocks); this is the same idea for a model's own result buffers on the CPU.

:class:`BufferPool` hands out tensors whose memory is a NumPy array the pool keeps. The tensor
holds a reference to that array (``torch.from_numpy``), so the array's reference count says
whether any tensor, view or NumPy array made from a result still uses the block: only a block
nothing refers to is handed out again. A result stays valid for as long as the caller holds any
part of it, exactly as with ``torch.empty``.

What it keeps: per block size, at most ``keep`` blocks (default 2: the previous step's result,
still held as the old state, and the one being written); a third block of that size is allocated
when both are in use, and the pool then forgets the oldest (the caller's references keep it alive
while used). Of sizes it keeps the ``sizes`` (default 8) used last, so calls of ever-changing batch
sizes (sub-stepping the failed points of each step, say) cannot pile blocks up: an idle model holds
at most ``keep`` blocks of each of its last ``sizes`` sizes. Blocks under ``min_bytes`` (64 KiB) are
left to the allocator. That threshold was 1 MiB until 2026-11-29, on the belief that malloc reuses
smaller blocks without page faults; it does not when other large allocations come and go between
calls (a host's own work, or the benchmark's other routes): glibc gives the freed memory back
and the next call faults it in again. A Newton model's status at 1e5 points (a bool, an int32 and a
float64 array: 100, 400 and 800 KB) faulted 163-261 pages a call that way (j2_voce_af and perzyna_iso
with the tangent, interleaved with the PyTorch route), none since. ``release()`` drops every block
the pool holds; ``Model(..., reuse_outputs=False)`` turns the pool off.

Huge pages (since 2026-11-29): on Linux, blocks of :data:`HUGE_MIN_BYTES` (4 MiB) and more are
mapped by the pool itself (private anonymous memory, 2 MiB aligned) with ``MADV_HUGEPAGE`` advised
on their whole 2 MiB pages, where the kernel's transparent huge pages are ``madvise`` or
``always`` (``/sys/kernel/mm/transparent_hugepage/enabled``). A kernel streaming its outputs then
writes 2 MiB pages of contiguous physical memory instead of 4 KiB pages from wherever the
allocator's free memory lies: on the development machine (an AMD EPYC VM) a plain 1e5-point
tangent call ran 1.16-1.35x faster into such blocks, and the spread between one set of 4 KiB
buffers and another (up to 25%) was gone (docs/performance.md, "The kind of pages"). A partial
last 2 MiB stays in small pages (no memory beyond the block's own is backed);
``$MODELC_HUGE_PAGES=0`` turns it off.
"""
from __future__ import annotations

import mmap
import os
import sys
import threading
from pathlib import Path

import numpy as np
import torch

__all__ = ["BufferPool", "MIN_BYTES", "HUGE_MIN_BYTES", "huge_pages", "huge_block", "kept_empty"]

#: blocks below this size are plain ``torch.empty`` (a pool claim costs about what malloc does)
MIN_BYTES = 1 << 16
#: blocks from this size on are mapped with huge pages advised (where :func:`huge_pages`)
HUGE_MIN_BYTES = 4 << 20
_ALIGN = 64  # a cache line: what torch's CPU allocator gives, and what streaming stores want
_HUGE = 2 << 20  # an x86-64 (and arm64 with 4 KiB pages) transparent huge page
_THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def huge_pages() -> bool:
    """Whether large blocks are mapped with huge pages advised: Linux (``mmap.MADV_HUGEPAGE``) with
    transparent huge pages ``always`` or ``madvise``, unless ``$MODELC_HUGE_PAGES`` is ``0``."""
    if os.environ.get("MODELC_HUGE_PAGES", "1").strip() == "0" or not hasattr(mmap, "MADV_HUGEPAGE"):
        return False
    try:
        mode = _THP.read_text()
    except OSError:
        return False
    return "[always]" in mode or "[madvise]" in mode


def huge_block(nbytes: int) -> np.ndarray:
    """``nbytes`` of fresh memory (a uint8 array), 2 MiB aligned, with ``MADV_HUGEPAGE`` advised on
    its whole 2 MiB pages before anything touches them. The array keeps its mapping alive (unmapped
    when nothing refers to the array or a tensor made from it)."""
    mm = mmap.mmap(-1, nbytes + _HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    whole = np.frombuffer(mm, dtype=np.uint8)
    skip = (-whole.ctypes.data) % _HUGE
    advised = nbytes // _HUGE * _HUGE
    if advised:
        try:
            mm.madvise(mmap.MADV_HUGEPAGE, skip, advised)
        except OSError:  # refused (a kernel without THP behind a file that says otherwise): small pages
            pass
    return whole[skip:skip + nbytes]


def _fresh_block(nbytes: int, huge: bool) -> np.ndarray:
    """``nbytes`` of new memory as a uint8 array: a :func:`huge_block` when ``huge`` and the block
    is :data:`HUGE_MIN_BYTES` or more (unless the system refuses the mapping), else from torch's
    allocator, as ``torch.empty``'s would be, 64-byte aligned."""
    if huge and nbytes >= HUGE_MIN_BYTES:
        try:
            return huge_block(nbytes)
        except OSError:  # no mapping granted (address space, limits): the allocator says why
            pass
    raw = torch.empty(nbytes + _ALIGN, dtype=torch.uint8).numpy()
    skip = (-raw.ctypes.data) % _ALIGN
    return raw[skip:skip + nbytes]  # a view: keeps `raw` (and its tensor) alive


def _nbytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    nbytes = dtype.itemsize
    for s in shape:
        nbytes *= int(s)
    return nbytes


def kept_empty(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised CPU tensor in memory as the pool would give it (huge pages advised from
    :data:`HUGE_MIN_BYTES` where :func:`huge_pages`): for buffers a caller keeps and writes every
    call (the history driver's outputs; the benchmark's memory floor and hand-written updates, so
    that they stream into the same kind of memory as modelc's results)."""
    nbytes = _nbytes(shape, dtype)
    if nbytes < HUGE_MIN_BYTES or not huge_pages():
        return torch.empty(shape, dtype=dtype)  # (a plain tensor, as before huge pages)
    return torch.from_numpy(_fresh_block(nbytes, True)).view(dtype).view(shape)


class BufferPool:
    """Blocks of memory for result tensors, reused once unreferenced (see the module doc)."""

    def __init__(self, keep: int = 2, min_bytes: int = MIN_BYTES, sizes: int = 8):
        if keep < 1 or sizes < 1:
            raise ValueError(f"keep={keep}, sizes={sizes}: a pool keeps at least one block of one size")
        self.keep, self.min_bytes, self.sizes = keep, min_bytes, sizes
        self._blocks: dict[int, list[np.ndarray]] = {}  # by size, least recently used size first
        self._lock = threading.Lock()
        self.huge = huge_pages()  # large blocks mapped with huge pages advised (module doc)
        self.reused = 0  # how many blocks were handed out again (for tests and diagnostics)

    def empty(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """An uninitialised CPU tensor of ``shape`` and ``dtype`` (contiguous, 64-byte aligned)."""
        nbytes = _nbytes(shape, dtype)
        if nbytes < self.min_bytes:
            return torch.empty(shape, dtype=dtype)
        with self._lock:
            block = self._claim(nbytes)
            t = torch.from_numpy(block)  # holds a reference to block until its storage dies
        return t.view(dtype).view(shape)

    def _claim(self, nbytes: int) -> np.ndarray:
        blocks = self._blocks.pop(nbytes, [])
        self._blocks[nbytes] = blocks  # the most recently used size last
        while len(self._blocks) > self.sizes:  # forget the least recently used size
            del self._blocks[next(iter(self._blocks))]
        # the count of a block no tensor uses, measured the same way on a probe held the same way
        # (the interpreter's own references differ between Python versions)
        probe = [np.empty(0, dtype=np.uint8)]
        free = sys.getrefcount(probe[0])
        for i in range(len(blocks)):
            if sys.getrefcount(blocks[i]) <= free:
                b = blocks.pop(i)
                blocks.append(b)  # most recently used last
                self.reused += 1
                return b
        block = _fresh_block(nbytes, self.huge)  # (the NumPy array is what the counts read)
        blocks.append(block)
        if len(blocks) > self.keep:
            blocks.pop(0)  # forget the oldest (its users keep it alive while they need it)
        return block

    def __reduce__(self):  # a copied or pickled model gets an empty pool of the same settings
        return (BufferPool, (self.keep, self.min_bytes, self.sizes))

    def held_bytes(self) -> int:
        """Bytes of the blocks the pool holds (in use by results or free)."""
        with self._lock:
            return sum(b.nbytes for bs in self._blocks.values() for b in bs)

    def release(self) -> None:
        """Forget every block: free ones go back to the system now, used ones when their results die."""
        with self._lock:
            self._blocks.clear()
