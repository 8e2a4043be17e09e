#!/usr/bin/env bash
# The demo's ending (scripts/demo.sh): what it ran, in one block, and the next three things to try.
#   scripts/demo-summary.sh TARGET IMAGE ENGINE   (ENGINE: "ran", or why the real engine did not)
set -euo pipefail
target="${1:?usage: scripts/demo-summary.sh TARGET IMAGE ENGINE}" image="${2:?image}" engine="${3:?engine}"
kimi="${KIMI_VENV:-.venv}/bin/kimi-serve"   # the project's venv the demo made (scripts/venv.sh build)
cat <<TEXT
== what ran:
   scripts/setup-host.sh; scripts/docker-engine.sh start
      host packages and a Docker engine (stopped again on exit)
   build.py build $target --smoke --registry kimi.local
      the $image image, from stand-in bases, smoke-tested
   docker run --rm --network none $image print
      the launch that image makes (above)
   scripts/try-cpu.sh
      a real vLLM engine on this machine (KIMI_HARDWARE=cpu): $engine
== next, three things to try:
   1. KIMI_HARDWARE=h200 $kimi print
      the launch on a real hardware target (kimi-serve list: every recipe, hardware and strategy)
   2. KIMI_HARDWARE=h200 $kimi plan --format k8s --output k8s/
      the same deployment as Kubernetes manifests (compose and the clouds too: docs/deploy.md)
   3. $kimi verify --url http://127.0.0.1:8000
      on a node serving the image (README.md's docker run): check it as its clients use it (docs/verify.md)
TEXT
