#!/usr/bin/env bash
# Start or stop an open (no auth) Docker registry on 127.0.0.1 (docker-registry package).
#   scripts/registry.sh start [PORT]   -> reuses one answering on the port; otherwise starts one
#   scripts/registry.sh stop           -> stops the registry only if this script started it
set -euo pipefail
PORT="${2:-${KIMI_REGISTRY_PORT:-5000}}"
DIR="${KIMI_REGISTRY_DIR:-/tmp/kimi-registry}"
PIDFILE="$DIR/registry.pid"
case "${1:-}" in
  start)
    if curl -fsS "http://127.0.0.1:$PORT/v2/" >/dev/null 2>&1; then
      echo "registry: reusing the one on 127.0.0.1:$PORT"; exit 0
    fi
    mkdir -p "$DIR/data"
    cat >"$DIR/config.yml" <<YML
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $DIR/data
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$PORT
YML
    setsid docker-registry serve "$DIR/config.yml" >"$DIR/registry.log" 2>&1 &
    echo $! >"$PIDFILE"
    timeout 30 sh -c "until curl -fsS http://127.0.0.1:$PORT/v2/ >/dev/null 2>&1; do sleep 0.5; done" \
      || { echo "registry: did not come up" >&2; cat "$DIR/registry.log" >&2; exit 1; }
    echo "registry: started on 127.0.0.1:$PORT (pid $(cat "$PIDFILE"))"
    ;;
  stop)
    if [[ -f "$PIDFILE" ]]; then kill "$(cat "$PIDFILE")" 2>/dev/null || true; rm -f "$PIDFILE"; echo "registry: stopped"; fi
    ;;
  *) echo "usage: $0 start|stop [PORT]" >&2; exit 2 ;;
esac
