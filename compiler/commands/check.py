"""`modelc check` (not implemented yet)."""
from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    pass


def main(args: argparse.Namespace) -> int:
    raise SystemExit("modelc check: not implemented yet")
