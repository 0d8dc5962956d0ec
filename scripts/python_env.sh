#!/usr/bin/env bash
# The Python environment of the Python tests: creates a virtual environment
# at $FLASHC_VENV (default $ROOT/.venv) when it is absent, then installs
# tests/python/requirements.txt into it from PyPI (torch, numpy, pytest,
# scikit-build-core). Re-running it on an existing environment only
# installs what is missing. Prints the environment's python on the last
# line.
#
# Environment: FLASHC_VENV (where), PYTHON (the interpreter that creates
# it, default python3; Debian needs the python3-venv package).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${FLASHC_VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-python3}"

if [ ! -x "$VENV/bin/python" ]; then
    echo "python_env: creating $VENV with $("$PYTHON" --version 2>&1)" >&2
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --disable-pip-version-check --progress-bar off \
    -r "$ROOT/tests/python/requirements.txt" >&2
echo "$VENV/bin/python"
