#!/usr/bin/env bash
# Make (or reuse) the project's virtual environment and install the project with EXTRAS into it;
# the install runs again only when pyproject.toml or EXTRAS changed. Never touches the system interpreter.
#   scripts/venv.sh test,cloud|build|... -> prints the venv's python on stdout (progress on stderr)
#   $KIMI_VENV: the venv (default .venv); $PYTHON: the interpreter that makes it (default python3)
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:?usage: scripts/venv.sh EXTRAS (e.g. test,cloud or build)}"
venv="${KIMI_VENV:-.venv}"
python="${PYTHON:-python3}"
if [[ ! -x "$venv/bin/python" ]]; then
  echo "venv: $python -m venv $venv" >&2
  "$python" -m venv "$venv" >&2
  # a current pip: the venv's bundled one can be old (pip 23.2's resolver crashed on .[test,cloud])
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$venv/bin/python" -m pip install -q -U pip </dev/null >&2
fi
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
stamp="$venv/.kimi-extras-${extras//,/-}"   # one per set of extras: test.sh and demo.sh share the venv
if [[ "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
  echo "venv: install -e '.[$extras]' into $venv (scripts/pip-install.sh: uv, else pip)" >&2
  # nothing byte-compiled at install: Python compiles what is imported when it is first imported;
  # compiling all ~19,000 files at install costs a minute of CPU the test run needs (issue 40)
  bash scripts/pip-install.sh "$venv/bin/python" -e ".[$extras]" </dev/null >&2
  echo "$want" >"$stamp"
fi
echo "$(cd "$venv" && pwd)/bin/python"
