"""Jinja2 skeletons of generated modules (package data; rendered by modelc.backends.module)."""
