#!/usr/bin/env bash
# fetch.sh DIR: download (once) what the host matrix boots into DIR: Debian's cloud kernels (bookworm 6.1
# amd64 and arm64, trixie 6.12 amd64) and the arm64 userland the arm64 guest needs (busybox-static,
# python3-minimal and its libraries). apt-get download runs against a private apt state under DIR, so the
# host's sources and architectures are left as they are; nothing here is committed.
set -euo pipefail
dir=${1:?usage: fetch.sh DIR}
mkdir -p "$dir/apt/lists/partial" "$dir/apt/archives/partial" "$dir/debs"
# The Debian mirror this machine's apt already uses (its first main-archive URI), unless given.
host_mirror() {
  { grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}'
    grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | sed 's/\[[^]]*\] //' | awk '{print $2}'
  } | grep -v -e security -e '^$' | head -1
  true # a missing sources file is no error
}
mirror=${CODELLM_HOSTS_MIRROR:-$(host_mirror)}
[ -n "$mirror" ] || { echo "fetch.sh: no Debian mirror in /etc/apt; set CODELLM_HOSTS_MIRROR" >&2; exit 1; }
cat >"$dir/apt/sources.list" <<SRC
deb [arch=amd64,arm64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror bookworm main
deb [arch=amd64,arm64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror bookworm-updates main
deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie main
SRC
: >"$dir/apt/status"
apt=(apt-get -q -o "Dir::Etc::SourceList=$dir/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State::Lists=$dir/apt/lists" -o "Dir::State::Status=$dir/apt/status"
  -o "Dir::Cache::Archives=$dir/apt/archives" -o "Dir::Cache=$dir/apt" -o APT::Architecture=amd64
  -o APT::Architectures::=amd64 -o APT::Architectures::=arm64 -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
stamp="$dir/apt/updated"
# Refresh the private lists at most once a day: kernels' ABI names move with point releases.
if [ ! -e "$stamp" ] || [ -n "$(find "$stamp" -mmin +1440)" ]; then
  "${apt[@]}" update >/dev/null
  touch "$stamp"
fi
# newest version of a package in a suite (apt-cache madison: "pkg | version | mirror suite/main arch")
newest() { "${apt[@]/apt-get/apt-cache}" madison "$1" | awk -F'|' -v s="$2" '$3 ~ s"/" {gsub(/ /,"",$2); print $2; exit}'; }
dep() { "${apt[@]/apt-get/apt-cache}" depends "$1" | awk '/Depends: linux-image-/ {sub(/:.*/, "", $2); print $2; exit}'; }
get() { # get PKG[:ARCH]=VERSION NAME: download into debs/NAME.deb unless there
  [ -s "$dir/debs/$2.deb" ] && return 0
  (cd "$dir/apt/archives/partial" && rm -f ./*.deb && "${apt[@]}" download "$1" >/dev/null && mv ./*.deb "$dir/debs/$2.deb")
}
k61=$(dep "linux-image-cloud-amd64=$(newest linux-image-cloud-amd64 bookworm)")
k612=$(dep "linux-image-cloud-amd64=$(newest linux-image-cloud-amd64 trixie)")
a61=$(dep "linux-image-cloud-arm64:arm64=$(newest linux-image-cloud-arm64 bookworm)")
get "$k61=$(newest "$k61" bookworm)" kernel-6.1-amd64
get "$k612=$(newest "$k612" trixie)" kernel-6.12-amd64
get "$a61:arm64=$(newest "$a61" bookworm)" kernel-6.1-arm64
for arch in amd64 arm64; do
  for p in busybox-static bash-static python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libffi8 libfaketime libc6 zlib1g libexpat1; do
    get "$p:$arch=$(newest "$p" bookworm)" "$arch-$p"
  done
done
ls "$dir/debs"
