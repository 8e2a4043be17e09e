#!/usr/bin/env bash
# The fast lane: what a change is checked by in minutes, before the whole suite (scripts/test.sh).
# In order, stopping at the first that fails:
#   1. ruff check (pyproject.toml [tool.ruff]);
#   2. mypy (pyproject.toml [tool.mypy]: entrypoint/, buildsys/, build.py);
#   3. lint-imports (the layers and contracts of pyproject.toml [tool.importlinter]);
#   4. pytest on every test not marked slow, on two workers (pytest-xdist): no image is built, no
#      vLLM server starts, no tool venv is installed (a test that needs the Docker engine skips
#      without one).
# It makes (or reuses) the same venv as scripts/test.sh, installs nothing on the host and starts
# nothing. Measured on 2 cores: README.md, "Tests".
# Usage: bash scripts/fast.sh [PYTEST_ARGS...]
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1
started_at=$(date +%s)
log() { echo "[fast.sh +$(($(date +%s) - started_at))s] $*"; }

py="$(scripts/venv.sh test,cloud,vllm-contract)"
bin="$(dirname "$py")"
export PATH="$bin:$PATH"

log "ruff check"
"$bin/ruff" check --no-cache .
log "mypy"
"$bin/mypy"
log "lint-imports"
"$bin/lint-imports" >/dev/null || { "$bin/lint-imports"; exit 1; }
workers="${PYTEST_WORKERS:-2}"
parallel=(-n "$workers" --dist loadgroup)
[[ "$workers" == 0 ]] && parallel=()
log "pytest -m 'not slow' ${parallel[*]} $*"
set +e
"$py" -m pytest tests -q -m "not slow" -p no:cacheprovider --durations=10 "${parallel[@]}" "$@" </dev/null
status=$?
set -e
log "pytest exited $status"
exit "$status"
