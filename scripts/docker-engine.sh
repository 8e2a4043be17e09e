#!/usr/bin/env bash
# Start or stop a local Docker engine (dockerd without bridge or iptables; see docs/images.md).
#   scripts/docker-engine.sh start   -> reuses a running engine; otherwise starts dockerd and
#                                       writes its pid to $KS_DOCKERD_PIDFILE (only then)
#   scripts/docker-engine.sh stop    -> stops the engine only if this script started it
set -euo pipefail
PIDFILE="${KS_DOCKERD_PIDFILE:-/tmp/kimi-dockerd.pid}"
LOG="${KS_DOCKERD_LOG:-/tmp/kimi-dockerd.log}"

case "${1:-}" in
  start)
    if docker info >/dev/null 2>&1; then
      echo "docker-engine: reusing the running engine"
      exit 0
    fi
    command -v dockerd >/dev/null || { echo "docker-engine: dockerd not installed (apt-get install docker.io)" >&2; exit 1; }
    setsid dockerd --bridge=none --iptables=false --ip6tables=false >"$LOG" 2>&1 &
    echo $! >"$PIDFILE"
    if ! timeout 60 sh -c 'until docker info >/dev/null 2>&1; do sleep 1; done'; then
      echo "docker-engine: dockerd did not come up; log:" >&2; tail -20 "$LOG" >&2; exit 1
    fi
    echo "docker-engine: started dockerd (pid $(cat "$PIDFILE"))"
    ;;
  stop)
    if [[ -f "$PIDFILE" ]]; then
      pid="$(cat "$PIDFILE")"
      kill "$pid" 2>/dev/null || true
      timeout 30 sh -c "while kill -0 $pid 2>/dev/null; do sleep 1; done" || kill -9 "$pid" 2>/dev/null || true
      rm -f "$PIDFILE"
      echo "docker-engine: stopped dockerd (pid $pid)"
    fi
    ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
