#!/bin/sh
# Issue 37's many-core run: bench's scaling row (and the trace row) of codellm against go-judge, with the
# static binaries pack.sh put in .devbin/, on a host with no Go and no network; native first, besteffort
# only where native cannot start. Writes JSON, Markdown and logs to $OUT (default ./out16). run.sh calls
# it; alone, as root from the repository root: sh .devbin/scaling.sh (about 4 minutes on 16 cores)
set -u
OUT=${OUT:-./out16}
mkdir -p "$OUT"
D=$(cd "$(dirname "$0")" && pwd)
BIN=$(mktemp -d /tmp/codellm16.XXXXXX)
chmod 755 "$BIN"
for b in codellm codellm-trace bench go-judge; do
	gzip -dc "$D/$b.gz" >"$BIN/$b" && chmod 755 "$BIN/$b" || { echo "cannot unpack $b" >&2; exit 1; }
done
cd "$BIN" || exit 1 # bench's temporary directories and go-judge's working directory, away from the tree
{
	echo "== $(date -u +%FT%TZ)"; uname -a; nproc; free -m | head -2
	echo "== cgroup"; cat /proc/self/cgroup; stat -fc %T /sys/fs/cgroup; cat /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null
	echo "== mounts: $(wc -l </proc/self/mountinfo)"
	for f in python3 bash unshare; do command -v $f || echo "no $f"; done
	echo "== doctor native"; "$BIN/codellm" doctor 2>&1
	echo "== doctor besteffort"; "$BIN/codellm" doctor --sandbox besteffort 2>&1 | head -3
} >"$OUT/host.txt" 2>&1

# The kernel's own rate for the same namespaces: 16 loops of unshare for 10 s (the issue's 2 972/s).
if command -v unshare >/dev/null; then
	for i in $(seq 16); do
		(n=0; end=$(($(date +%s) + 10)); while [ "$(date +%s)" -lt $end ]; do unshare -Urmpfniu true && n=$((n + 1)); done; echo $n) &
	done >"$BIN/unshare.n"
	wait
	echo "unshare -Urmpfniu true, 16 loops, 10 s: $(awk '{s+=$1} END {printf "%.0f/s", s/10}' "$BIN/unshare.n")" >>"$OUT/host.txt"
fi

run() { # mode rows
	mode=$1 rows=$2
	timeout 170 "$BIN/bench" --quick --scaling-d "${SCALING_D:-4s}" --rows "$rows" --sandbox "$mode" --codellm "$BIN/codellm" --codellm-trace "$BIN/codellm-trace" \
		--go-judge "$BIN/go-judge" --json "$OUT/$mode.json" --markdown "$OUT/$mode.md" >"$OUT/$mode.log" 2>&1
	echo "$mode: exit $?" >>"$OUT/host.txt"
}
# native first; where it cannot run (cgroup v2 not yet delegated) the server refuses to start and the
# log says why; besteffort then measures the same code without what the host lacks.
run native scaling,trace; grep -q "native: exit 0" "$OUT/host.txt" || run besteffort scaling
tail -n 3 "$OUT"/*.log >>"$OUT/host.txt" 2>&1
rm -rf "$BIN"
