#!/usr/bin/env bash
# Set up (if needed), then compile a bundled model and drive it through a bundled history.
set -euo pipefail
cd "$(dirname "$0")"
./setup.sh
. .venv/bin/activate
exec modelc demo "$@"
