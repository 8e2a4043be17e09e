#!/usr/bin/env bash
# The main job on a fresh machine: build one target's image (default: images/targets.yaml's
# default_target) from stand-in bases (Docker Hub is not reachable here), smoke-test it and show
# the launch it would make.   Usage: scripts/demo.sh [TARGET]   (as root; starts/stops dockerd)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-host.sh
export KS_DOCKERD_PIDFILE=/tmp/kimi-demo-dockerd.pid
rm -f "$KS_DOCKERD_PIDFILE"
trap 'scripts/docker-engine.sh stop || true' EXIT
scripts/docker-engine.sh start
py="$(scripts/venv.sh build)"   # the project's own venv (.venv), never the system interpreter
target="${1:-$("$py" -c 'from buildsys import targets; print(targets.load().default_target)')}"
arch="$("$py" -c 'import sys; from buildsys import targets; print(targets.load().targets[sys.argv[1]].arch)' "$target")"
read -r -a overrides <<<"$("$py" build.py standins --arch "$arch")"
"$py" build.py build "$target" --smoke --registry kimi.local "${overrides[@]}"
image="kimi.local/$("$py" -c 'from buildsys import targets; print(targets.load().image)'):$target"
echo "== the launch $image makes (kimi-serve print):"
docker run --rm --network none "$image" print
# A real engine where the machine allows it (vLLM's CPU build from PyPI, ~4 GB free), else say why.
free_kb="$(awk '/MemAvailable/ {print $2}' /proc/meminfo)"
if [[ "${KIMI_DEMO_REAL:-1}" == 1 && "$free_kb" -ge 4000000 ]]; then
  echo "== a real engine on this machine: KIMI_HARDWARE=cpu, the tiny Kimi-architecture model (scripts/try-cpu.sh)"
  if bash scripts/try-cpu.sh; then engine="ran"; else engine="did not run here (see above)"; fi
else
  engine="skipped (KIMI_DEMO_REAL=0 or under 4 GB free: bash scripts/try-cpu.sh runs one on a machine with room)"
fi
scripts/demo-summary.sh "$target" "$image" "$engine"
