#!/usr/bin/env bash
# base.sh TAG [SUITE [MIRROR]]
#
# Builds a minimal Debian root filesystem with debootstrap and imports it into podman (CONTAINER_CLI=docker
# for docker) as TAG: the base of the Dockerfile's stages where no image registry is reachable. It needs
# root, debootstrap and the Debian mirror (the same one apt-get uses). Then, offline from any registry:
#
#   deploy/container/base.sh localhost/codellm-base:trixie
#   podman build --pull=never --build-arg BASE_IMAGE=localhost/codellm-base:trixie \
#     --build-arg GO_IMAGE=localhost/codellm-base:trixie \
#     -v "$(go env GOROOT)":/usr/local/go:ro -v "$(go env GOMODCACHE)":/go/pkg/mod \
#     --build-arg GOPROXY=off -t localhost/codellm:local .
#
# (the Go toolchain and the module cache come from the host: `go mod download` first).
set -euo pipefail
tag=${1:?usage: base.sh TAG [SUITE [MIRROR]]}
suite=${2:-trixie}
mirror=${3:-http://deb.debian.org/debian}
cli=${CONTAINER_CLI:-podman}
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include=ca-certificates "$suite" "$root" "$mirror" >/dev/null
# As the registry's -slim images: no package lists, documentation or caches.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/usr/share/doc/* "$root"/usr/share/man/*
tar -C "$root" --numeric-owner -c . | "$cli" import --change 'CMD ["bash"]' - "$tag" >/dev/null
echo "$tag"
