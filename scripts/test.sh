#!/usr/bin/env bash
# Run the whole test suite on this machine, from a plain clone (the README's test command;
# .ci/run calls it too). It:
#   1. installs what the tests need on the host (scripts/setup-host.sh: docker.io, qemu arm64
#      emulation, debootstrap, docker-registry, docker-compose), as root or through sudo;
#   2. makes its own virtual environment (scripts/venv.sh: $KIMI_VENV, default .venv) and
#      installs the project with its test, cloud and vllm-contract extras there (again only
#      when pyproject.toml changed);
#   3. starts a Docker engine unless one is running (and stops it at the end only if it started
#      it); the tests start their own registry on 127.0.0.1 and stop it;
#   4. runs `python -m pytest tests` on every core, four workers at least (pytest-xdist), with any arguments given (the 20
#      slowest steps listed at the end: the real vLLM servers' modules among them), and exits
#      with pytest's status.
# Usage: bash scripts/test.sh [PYTEST_ARGS...]      e.g. bash scripts/test.sh -m "not slow and not docker"
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 DEBIAN_FRONTEND=noninteractive
started_at=$(date +%s)
log() { echo "[test.sh +$(($(date +%s) - started_at))s] $*"; }

if [[ "$(id -u)" == 0 ]]; then
  scripts/setup-host.sh
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  sudo -n --preserve-env=DEBIAN_FRONTEND scripts/setup-host.sh
else
  log "not root and no sudo: skipping host setup (docker.io, qemu-user-static, debootstrap, docker-registry);" \
      "tests that need a missing one skip (or fail under CI=true)"
fi

py="$(scripts/venv.sh test,cloud,vllm-contract)"   # tests/cloud and tests/vllm_contract need theirs
bin="$(dirname "$py")"

export KS_DOCKERD_PIDFILE="/tmp/kimi-test-dockerd.$$.pid"   # this run's own: it stops only what it started
rm -f "$KS_DOCKERD_PIDFILE"
trap 'scripts/docker-engine.sh stop || true' EXIT
if [[ "$(id -u)" == 0 ]] || docker info >/dev/null 2>&1; then
  scripts/docker-engine.sh start
else
  log "no Docker engine and not root: docker tests skip (or fail under CI=true)"
fi

# Every core (pytest-xdist), and four workers at least: the tests that share the Docker engine, a
# tool's venv or the live shapes' ports are in three xdist groups (lanes: tests/conftest.py LANES,
# markers docker/vllm/serial/slow), each run in turn on one worker; the rest spread. Each lane holds
# its worker for most of the run, much of it waiting on servers and builds, so a fourth worker runs
# the rest beside them instead of after them.
# PYTEST_WORKERS=N sets the number (0 runs in this process); an explicit -n/-p no:xdist among the
# arguments wins.
workers="${PYTEST_WORKERS:-auto}"
if [[ "$workers" == auto ]]; then
  cores="$(nproc 2>/dev/null || echo 2)"
  workers=$(( cores < 4 ? 4 : cores ))
fi
parallel=(-n "$workers" --dist loadgroup)
if [[ "${PYTEST_WORKERS:-auto}" == 0 || " $* " == *" -n"* || " $* " == *"no:xdist"* ]]; then
  parallel=()
fi
log "$py -m pytest tests -q ${parallel[*]} $*"
set +e
PATH="$bin:$PATH" "$py" -m pytest tests -q -rfEs -p no:cacheprovider --durations=20 "${parallel[@]}" "$@" </dev/null
status=$?
set -e
log "pytest exited $status"
exit "$status"
