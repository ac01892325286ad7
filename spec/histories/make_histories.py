"""Regenerate the bundled strain histories in this folder (deterministic; run from anywhere).

    python spec/histories/make_histories.py

Each entry of ``modelc.runtime.histories.BUNDLED_HISTORIES`` becomes ``<name>.npz`` here, holding
``time``, ``strain``, ``amplitude``, ``total_time`` and ``labels``. tests/runtime/test_histories.py
checks that the committed files equal what this script writes.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from modelc.runtime.histories import BUNDLED_HISTORIES, uniaxial_strain_history


def main() -> None:
    here = Path(__file__).resolve().parent
    for name, kwargs in BUNDLED_HISTORIES.items():
        arrays = uniaxial_strain_history(**kwargs)
        np.savez_compressed(here / f"{name}.npz", **arrays)
        print(f"wrote {here / (name + '.npz')}")


if __name__ == "__main__":
    main()
