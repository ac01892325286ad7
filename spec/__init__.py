"""The bundled model library: YAML specs (package data). See README.md in this folder."""
