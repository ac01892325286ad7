"""Adapters that plug compiled models into other codes (each imports its host library lazily):
:mod:`modelc.integrations.torchfem` (torch-fem, the ``fem`` extra)."""
