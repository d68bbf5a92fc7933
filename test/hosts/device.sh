#!/usr/bin/env bash
# device.sh pack | run: the host matrix's checks on a real machine without Go or a network (the lead's
# cgroup v2 host). `pack`, in the repository with Go, builds the static binaries into bin/hosts-check/
# (git-ignored) beside a copy of this script; copy that directory over and, as root there, run
# `./device.sh run`: it prints each check's result and keeps the outputs in results/.
set -u
here=$(cd "$(dirname "$0")" && pwd)

pack() {
	set -e
	out=bin/hosts-check
	rm -rf "$out" && mkdir -p "$out/sandbox"
	export CGO_ENABLED=0 GOFLAGS=-trimpath
	go build -ldflags '-s -w' -o "$out/codellm" ./cmd/codellm
	go test -c -ldflags '-s -w' -o "$out/sandbox/sandbox.test" ./internal/sandbox
	go test -c -ldflags '-s -w' -o "$out/cgroup.test" ./internal/sandbox/cgroup
	go build -ldflags '-s -w' -o "$out/bench" ./bench
	cp -a internal/sandbox/testdata "$out/sandbox/"
	cp test/hosts/device.sh "$out/"
	sed -n "s/^threats='\(.*\)'$/\1/p" test/hosts/init >"$out/threats"
	awk '/^curl -s http:\/\/127.0.0.1:8080\/v1\/chat\/completions/ {on=1} on && /-d .\{/ {p=1; sub(/.*-d '\''/, "")} p {if (/^\}'\''$/) {print "}"; exit} print}' README.md >"$out/readme-body.json"
	du -sh "$out"
}

# in_cgroup NAME CMD...: run CMD in a fresh cgroup below /sys/fs/cgroup/codellm-check (root's, with
# memory, pids and cpu delegated to it), as systemd would start a Delegate=yes service.
in_cgroup() {
	local g=/sys/fs/cgroup/codellm-check/$1
	shift
	mkdir -p "$g"
	sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$g" "$@"
}

result() { # result NAME RC
	printf '%-12s %s (exit %d, output in results/%s.out)\n' "$1" "$([ "$2" = 0 ] && echo PASS || echo FAIL)" "$2" "$1"
}

post() { # the README's curl example against 127.0.0.1:8080
	if command -v curl >/dev/null; then
		curl -sS -w '\nHTTP %{http_code}\n' http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' -d @"$here/readme-body.json"
	else
		python3 -c 'import sys, urllib.request as u; print(u.urlopen(u.Request("http://127.0.0.1:8080/v1/chat/completions", data=open(sys.argv[1], "rb").read(), headers={"Content-Type": "application/json"})).read().decode()); print("HTTP 200")' "$here/readme-body.json"
	fi
}

run() {
	[ "$(id -u)" = 0 ] || { echo "device.sh run: run as root" >&2; exit 2; }
	grep -q cgroup2 /proc/filesystems && [ -e /sys/fs/cgroup/cgroup.controllers ] || echo "note: /sys/fs/cgroup is not cgroup v2"
	out=$here/results
	rm -rf "$out" && mkdir -p "$out" /sys/fs/cgroup/codellm-check
	echo "+memory +pids +cpu" >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null
	echo "+memory +pids +cpu" >/sys/fs/cgroup/codellm-check/cgroup.subtree_control
	uname -a >"$out/host.out"; nproc >>"$out/host.out"
	in_cgroup doctor "$here/codellm" doctor >"$out/doctor.out" 2>&1
	result doctor $?
	# As an unprivileged user in a cgroup handed to it (Delegate=yes with DynamicUser), where setpriv exists.
	if command -v setpriv >/dev/null; then
		mkdir -p /sys/fs/cgroup/codellm-check/doctor-user && chown -R 65534:65534 /sys/fs/cgroup/codellm-check/doctor-user
		in_cgroup doctor-user setpriv --reuid=65534 --regid=65534 --clear-groups "$here/codellm" doctor >"$out/doctor-user.out" 2>&1
		result doctor-user $?
	fi
	(cd /tmp && in_cgroup serve "$here/codellm" serve --listen 127.0.0.1:8080) >"$out/serve.log" 2>&1 &
	local pid=$! i=0
	until post >/dev/null 2>&1 || [ $i -gt 100 ]; do sleep 0.1; i=$((i + 1)); done
	post >"$out/serve.out" 2>&1
	grep -q '"name":"write_note"' "$out/serve.out"
	result serve $?
	kill -TERM $pid; wait $pid
	local t
	t=$(cat "$here/threats")
	for h in 0 1; do
		(cd "$here/sandbox" && in_cgroup "sandbox-$h" env CODELLM_REQUIRE_SANDBOX=1 CODELLM_TEST_GO_HELPER=$h ./sandbox.test -test.count=1 -test.timeout=300s -test.run "$t" -test.v) >"$out/sandbox-gohelper$h.out" 2>&1
		result "sandbox-gohelper$h" $?
	done
	(cd /tmp && in_cgroup cgroup "$here/cgroup.test" -test.count=1 -test.v) >"$out/cgroup.out" 2>&1
	result cgroup $?
	(cd /tmp && in_cgroup bench "$here/bench" -rows spawn -json "$out/bench.json") >"$out/bench.out" 2>&1
	result bench $?
	grep -o '"codellm": *{[^}]*}' "$out/bench.json" 2>/dev/null | tr -d '\n' | sed 's/^/codellm spawn: /'
	echo
}

case ${1:-} in
pack) pack ;;
run) run ;;
*) echo "usage: device.sh pack|run" >&2; exit 2 ;;
esac
