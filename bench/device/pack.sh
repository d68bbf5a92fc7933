#!/bin/sh
# pack.sh: build everything the many-core device run needs into .devbin/ (git-ignored) at the repository
# root: static codellm (and its codellm_trace build), the bench harness, the hub load generator,
# go-judge at bench's pinned version, and test/hosts/device.sh's kit (bin/hosts-check). The device has no Go
# and no network; run.sh there uses only what this leaves. Run from the repository root: sh bench/device/pack.sh
set -eu
out=.devbin
rm -rf "$out" && mkdir -p "$out"
b() { CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" "$@"; }
b -o "$out/codellm" ./cmd/codellm
b -tags codellm_trace -o "$out/codellm-trace" ./cmd/codellm
b -o "$out/bench" ./bench
b -o "$out/hubload" ./bench/hubload
v=$(sed -n 's/^[[:space:]]*goJudgeVersion = "\(.*\)"$/\1/p' bench/gojudge.go)
[ -n "$v" ] || { echo "pack.sh: no goJudgeVersion in bench/gojudge.go" >&2; exit 1; }
root=$PWD
(cd "$(mktemp -d)" && go mod init devbin >/dev/null 2>&1 && go get "github.com/criyle/go-judge/cmd/go-judge@$v" >/dev/null 2>&1 &&
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$root/$out/go-judge" github.com/criyle/go-judge/cmd/go-judge)
gzip -9 "$out/codellm" "$out/codellm-trace" "$out/bench" "$out/hubload" "$out/go-judge"
bash test/hosts/device.sh pack >/dev/null
tar -C bin -czf "$out/hosts-check.tgz" hosts-check
cp bench/device/run.sh bench/device/scaling.sh bench/hubload/throughput.sh "$out/"
du -sh "$out"
