#!/usr/bin/env bash
# The real KV-cache components for tests/vllm_contract/test_kv_components.py, as cheaply as they
# can be had on a machine without a GPU. Prints two lines: the python of each environment.
#   line 1  Mooncake: a venv with mooncake-transfer-engine-non-cuda (mooncake_master and
#           mooncake.mooncake_store_service; ~185 MB, ~20 s). Needs libibverbs.so.1 (Debian
#           libibverbs1, scripts/setup-host.sh). The CUDA build's store module needs libcuda.so.1.
#   line 2  LMCache: lmcache itself (no dependencies) added to the vLLM parser environment
#           (scripts/vllm-parser-env.sh), which already has the CPU torch, openai and
#           prometheus_client its `server` argument groups import; + sortedcontainers. lmcache's
#           own dependencies pull torch with CUDA 13 wheels (a 6.4 GB venv); this adds ~95 MB.
# Idempotent: a venv holding the pinned version is reused. Environment:
#   KIMI_KV_CACHE   where the Mooncake venv lives (default: .cache/kv-components in the repository)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${KIMI_KV_CACHE:-$root/.cache/kv-components}"
MOONCAKE="mooncake-transfer-engine-non-cuda==0.3.13.post1"
LMCACHE="lmcache==0.5.1"
# nothing byte-compiled at install: on first import instead (the test run's CPU, issue 40)
pip_q() { bash "$root/scripts/pip-install.sh" "$@"; }  # uv where it can be had, else pip
has() { "$1" -c 'import importlib.metadata as m, sys; sys.exit(m.version(sys.argv[1]) != sys.argv[2])' "$2" "$3" 2>/dev/null; }

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
mc="$cache/mooncake"
if ! has "$mc/bin/python" "${MOONCAKE%%==*}" "${MOONCAKE#*==}"; then
  python3 -m venv "$mc" >&2
  pip_q "$mc/bin/python" "$MOONCAKE"
fi

vllm_py="$(bash "$root/scripts/vllm-parser-env.sh" | tail -n 1)"
if ! has "$vllm_py" "${LMCACHE%%==*}" "${LMCACHE#*==}"; then
  pip_q "$vllm_py" --no-deps "$LMCACHE" "sortedcontainers==2.4.0"
fi
echo "$mc/bin/python"
echo "$vllm_py"
