#!/bin/sh
# Issue 36's throughput target: python through one hub with real workers against a direct `codellm serve`
# at the same concurrency (target: the hub ≥ 0.9× direct). C clients send `print(1)` for D to
#   1. codellm serve (POST /api/v2/execute), --max-concurrent C;
#   2. codellm hub (embedded store) with W workers of C/W lease slots each (POST /v1/exec).
# It prints both rates and their ratio. Run as root on a host where the sandbox works, from the
# repository root, with the binaries built first:
#   CGO_ENABLED=0 go build -o codellm ./cmd/codellm && go build -o hubload ./bench/hubload
#   C=16 W=4 D=30s sh bench/hubload/throughput.sh
set -eu
BIN=${CODELLM:-./codellm}
LOAD=${HUBLOAD:-./hubload}
C=${C:-16}
W=${W:-4}
D=${D:-30s}
SLOTS=$((C / W))
dir=$(mktemp -d)
# The background processes by PID: dash's `jobs -p` in the trap's command substitution lists none, so the
# trap's wait would sit on a hub and workers nobody stopped.
pids=""
trap 'kill $pids 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"' EXIT INT TERM

up() { # wait for URL to answer
	i=0
	until curl -fsS "$1" >/dev/null 2>&1; do
		i=$((i + 1))
		[ "$i" -gt 200 ] && { echo "throughput: $1 never came up" >&2; exit 1; }
		sleep 0.1
	done
}

"$BIN" serve --listen 127.0.0.1:18080 --max-concurrent "$C" >"$dir/serve.log" 2>&1 &
serve=$!
pids="$serve"
up http://127.0.0.1:18080/healthz
"$LOAD" --rate http://127.0.0.1:18080 --rate-api piston -c "$C" -d "$D" --json "$dir/direct.json"
kill "$serve"
wait "$serve" 2>/dev/null || true

hub=http://127.0.0.1:18090
export CODELLM_HUB_ADMIN_TOKEN=throughput-admin
export CODELLM_HUB_RATE_LIMITS=off # one API key sends the whole load
"$BIN" hub serve --listen 127.0.0.1:18090 --api-key throughput-key --store "$dir/hub/bridge.db" >"$dir/hub.log" 2>&1 &
pids="$pids $!"
up "$hub/healthz"
i=1
while [ "$i" -le "$W" ]; do
	code=$("$BIN" hub pair "tp-$i" --url "$hub/v1")
	HOME="$dir/home-$i" "$BIN" worker pair "$hub/v1" "$code" --worker-id "tp-$i" --identity "$dir/tp-$i.json" >/dev/null
	HOME="$dir/home-$i" "$BIN" worker run --worker-id "tp-$i" --identity "$dir/tp-$i.json" \
		--workspace-lease-slots "$SLOTS" --max-concurrent "$SLOTS" >"$dir/worker-$i.log" 2>&1 &
	pids="$pids $!"
	i=$((i + 1))
done
i=1
while [ "$i" -le "$W" ]; do
	n=0
	until "$BIN" hub status "tp-$i" --url "$hub/v1" 2>/dev/null | grep -q '"ready":true'; do
		n=$((n + 1))
		[ "$n" -gt 300 ] && { echo "throughput: worker tp-$i never registered" >&2; cat "$dir/worker-$i.log" >&2; exit 1; }
		sleep 0.1
	done
	i=$((i + 1))
done
"$LOAD" --rate "$hub" --rate-api exec --rate-key throughput-key -c "$C" -d "$D" --json "$dir/hub.json"

direct=$(sed 's/.*"perSecond":\([0-9.e+-]*\).*/\1/' "$dir/direct.json")
through=$(sed 's/.*"perSecond":\([0-9.e+-]*\).*/\1/' "$dir/hub.json")
awk -v d="$direct" -v h="$through" -v c="$C" -v w="$W" 'BEGIN { printf "python c=%d: direct %.1f/s, through the hub with %d workers %.1f/s: %.2fx (target >= 0.9x)\n", c, d, w, h, h / d }'
