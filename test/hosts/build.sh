#!/usr/bin/env bash
# build.sh CACHE ARCH OUT: build the host matrix's initramfs for ARCH (amd64 or arm64) into OUT (a
# directory): OUT/initrd.cpio (busybox, bash, python3, the static codellm, the sandbox test binary, the
# guest's init), OUT/vmlinuz and OUT/overlay-<kernel>.ko for each kernel of ARCH in CACHE (fetch.sh).
# Run from the repository root; everything it writes is under OUT.
set -euo pipefail
cache=${1:?usage: build.sh CACHE ARCH OUT}; arch=${2:?}; out=${3:?}
root="$out/root"
rm -rf "$root" && mkdir -p "$root/usr/bin" "$root/usr/lib" "$root/usr/local/bin" "$root/tests/sandbox" "$root/lib/modules"
for p in busybox-static bash-static python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libffi8 libfaketime libc6 zlib1g libexpat1; do
  dpkg-deb -x "$cache/debs/$arch-$p.deb" "$root"
done
# One usr-merged tree, as Debian lays it out (the sandbox binds /usr and the /bin, /lib links).
for d in bin sbin lib lib64; do
  if [ -d "$root/$d" ] && [ ! -L "$root/$d" ]; then
    mkdir -p "$root/usr/$d" && cp -a "$root/$d/." "$root/usr/$d/" && rm -rf "${root:?}/$d"
  fi
  mkdir -p "$root/usr/$d" && ln -sfn "usr/$d" "$root/$d"
done
rm -rf "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/locale" "$root/usr/share/lintian"
ln -sf bash-static "$root/usr/bin/bash"
ln -sf python3.11 "$root/usr/bin/python3"
# busybox's applets as links; the host's busybox lists them (the same Debian version as the guest's).
for a in $(busybox --list-full); do
  n=$(basename "$a")
  [ -e "$root/usr/bin/$n" ] || [ -L "$root/usr/bin/$n" ] || ln -s busybox "$root/usr/bin/$n"
done
mkdir -p "$root/etc" "$root/proc" "$root/sys" "$root/dev" "$root/tmp" "$root/run" "$root/var/tmp" "$root/root" "$root/home/codellm"
printf 'root:x:0:0:root:/root:/bin/sh\ncodellm:x:1000:1000:codellm:/home/codellm:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\ncodellm:x:1000:\nnogroup:x:65534:\n' >"$root/etc/group"
printf '127.0.0.1 localhost\n' >"$root/etc/hosts"
chown 1000:1000 "$root/home/codellm"
chmod 1777 "$root/tmp" "$root/var/tmp"
# The code under test, static, for the guest's architecture.
export CGO_ENABLED=0 GOARCH="$arch" GOFLAGS=-trimpath
go build -ldflags '-s -w' -o "$root/usr/local/bin/codellm" ./cmd/codellm
go test -c -ldflags '-s -w' -o "$root/tests/sandbox/sandbox.test" ./internal/sandbox
go test -c -ldflags '-s -w' -o "$root/tests/cgroup.test" ./internal/sandbox/cgroup
go test -c -ldflags '-s -w' -o "$root/tests/rawchild.test" ./internal/sandbox/rawchild
go build -ldflags '-s -w' -o "$root/tests/bench" ./bench
cp -a internal/sandbox/testdata "$root/tests/sandbox/"
# The README's curl example, exactly as printed: the body after -d '...'.
awk '/^curl -s http:\/\/127.0.0.1:8080\/v1\/chat\/completions/ {on=1} on && /-d .\{/ {p=1; sub(/.*-d '\''/, "")} p {if (/^\}'\''$/) {print "}"; exit} print}' README.md >"$root/tests/readme-body.json"
grep -q '"messages"' "$root/tests/readme-body.json" || { echo "build.sh: README's curl example not found" >&2; exit 1; }
install -m 0755 test/hosts/init "$root/init"
for deb in "$cache"/debs/kernel-*-"$arch".deb; do
  k=$(basename "$deb" .deb); k=${k#kernel-}; k=${k%-"$arch"}
  x="$out/kernel-$k"; rm -rf "$x"; mkdir -p "$x"
  dpkg-deb -x "$deb" "$x"
  cp "$x"/boot/vmlinuz-* "$out/vmlinuz-$k"
  ko=$(find "$x" -name 'overlay.ko*' | head -1)
  rel=$(basename "$(dirname "$(find "$x" -name modules.order | head -1)")")
  mkdir -p "$root/lib/modules/$rel"
  case $ko in # busybox's insmod loads uncompressed modules only
    *.xz) xz -dc "$ko" >"$root/lib/modules/$rel/overlay.ko" ;;
    *.zst) zstd -qdc "$ko" >"$root/lib/modules/$rel/overlay.ko" ;;
    *) cp "$ko" "$root/lib/modules/$rel/overlay.ko" ;;
  esac
  rm -rf "$x"
done
(cd "$root" && find . | cpio -o -H newc --quiet) >"$out/initrd.cpio"
ls -la "$out"
