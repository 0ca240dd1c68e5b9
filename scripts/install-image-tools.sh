#!/usr/bin/env bash
# Install what `make test-images` needs from Debian's packages, when it is missing:
#   podman, with runc (bookworm's crun 1.8 refuses a hybrid cgroup layout) and conmon;
#   debootstrap and the Debian archive keyring, for the base image.
# Rootful podman on the kernel's overlayfs and host networking need neither uidmap,
# fuse-overlayfs nor slirp4netns, so they are not installed. Idempotent; needs root.
set -euo pipefail

need=()
for tool in podman runc conmon debootstrap; do
    command -v "$tool" >/dev/null 2>&1 || need+=("$tool")
done
[[ -e /usr/share/keyrings/debian-archive-keyring.gpg ]] || need+=(debian-archive-keyring)
((${#need[@]})) || exit 0

if [[ "$(id -u)" != 0 ]]; then
    echo "install-image-tools: ${need[*]} missing, and installing them needs root" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# Wait for another apt on the machine rather than fail on its lock.
apt=(apt-get -q -y -o DPkg::Lock::Timeout=600)
echo "install-image-tools: installing ${need[*]}" >&2
if ! "${apt[@]}" install --no-install-recommends "${need[@]}" >&2; then
    "${apt[@]}" update >&2
    "${apt[@]}" install --no-install-recommends "${need[@]}" >&2
fi
