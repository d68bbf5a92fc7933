#!/usr/bin/env bash
# rootfs.sh OUT.tar CODELLM_BINARY [PROGRAM...]
#
# Assembles the root filesystem of codellm's container runtime image from THIS host, for machines that
# reach no image registry: a static codellm binary, curl (the docker supervisors reach the runner with
# `docker exec … curl`, bridge-protocol §11.4), bash, coreutils' basics, and each PROGRAM (e.g. python3)
# with the shared libraries ldd reports and, for python3, its standard library. Import it with
#
#   docker import  --change 'ENTRYPOINT ["/usr/local/bin/codellm"]' --change 'CMD ["serve"]' \
#                  --change 'USER 10001:10001' --change 'WORKDIR /var/lib/codellm' \
#                  --change 'ENV CODELLM_LISTEN=127.0.0.1:2000' --change 'ENV CODELLM_WORK_DIR=/var/lib/codellm/work' \
#                  OUT.tar codellm-runtime:local
#   (podman import takes the same arguments)
#
# codellm's own sandbox maps every block to an unprivileged uid inside. With a registry, the Dockerfile's `container-runtime` target builds the equivalent image.
set -euo pipefail
out=${1:?usage: rootfs.sh OUT.tar CODELLM_BINARY [PROGRAM...]}
bin=${2:?usage: rootfs.sh OUT.tar CODELLM_BINARY [PROGRAM...]}
shift 2
export PATH=/usr/local/bin:/usr/bin:/bin # the system's programs, not a user's shims
root=$(mktemp -d)
chmod 0755 "$root"
trap 'rm -rf "$root"' EXIT

copy() { # copy a host file, dereferenced, to its directory's canonical path in the root
  local src=$1 dir
  [ -e "$src" ] || return 0
  dir=$(readlink -f "$(dirname "$src")")
  mkdir -p "$root$dir"
  cp -L --preserve=mode "$src" "$root$dir/$(basename "$src")"
}
with_libs() {
  local p
  p=$(type -P "$1") || { echo "rootfs.sh: $1 is not installed" >&2; exit 1; }
  p=$(readlink -f "$p")
  copy "$p"
  [ -e "$root/usr/bin/$1" ] || ln -s "$p" "$root/usr/bin/$1"
  libs_of "$p"
}

# The merged-/usr links of the host first, so copies under /usr are reachable by their usual paths.
for d in lib lib64 bin sbin; do [ -L "/$d" ] && ln -s "$(readlink "/$d")" "$root/$d"; done
mkdir -p "$root"/{usr/local/bin,usr/bin,usr/lib,etc,tmp,proc,dev,sys,var/lib/codellm/work,root}
chmod 1777 "$root/tmp"
cp "$bin" "$root/usr/local/bin/codellm"
chmod 0755 "$root/usr/local/bin/codellm"
libs_of() { { ldd "$1" 2>/dev/null || true; } | awk '/=> \//{print $3} /^\t\/.*ld-linux/{print $1}' | while read -r lib; do copy "$lib"; done; }
libs_of "$bin" # nothing for a static (CGO_ENABLED=0) build
for p in bash sh curl cat ls env true rm mkdir; do with_libs "$p"; done
for p in "$@"; do
  with_libs "$p"
  case "$p" in
    python3*) v=$(readlink -f "$(type -P "$p")"); v=${v##*/}; [ -d "/usr/lib/$v" ] && cp -a "/usr/lib/$v" "$root/usr/lib/" && rm -rf "$root/usr/lib/$v"/{dist-packages,site-packages,test,__pycache__} ;;
  esac
done
copy /etc/ssl/certs/ca-certificates.crt
# codellm runs as uid 10001: a root without capabilities (--cap-drop ALL) could not hand workdirs to
# the sandbox's mapped uid, an unprivileged user maps itself.
printf 'root:x:0:0:root:/root:/bin/sh\ncodellm:x:10001:10001:codellm:/var/lib/codellm:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\ncodellm:x:10001:\n' >"$root/etc/group"
chown -R 10001:10001 "$root/var/lib/codellm"
chmod 0700 "$root/var/lib/codellm/work"
printf '127.0.0.1 localhost\n' >"$root/etc/hosts"
tar -C "$root" -cf "$out" .
