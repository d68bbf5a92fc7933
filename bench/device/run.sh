#!/bin/sh
# run.sh: one run on a many-core, cgroup v2 device without Go or a network, of what pack.sh left in .devbin/:
#   1. test/hosts/device.sh's checks (doctor as root and as a delegated user, the README's example through
#      serve, the threat subset on both helpers, package cgroup's tests, bench's spawn row) — issue 34;
#   2. bench's scaling row against go-judge, native (besteffort only if native cannot start) — issue 37;
#   3. python through one hub with 4 workers against a direct serve at c=16 — issue 36.
# Each phase is bounded so that the whole run ends within about 10 minutes; results go to $OUT as at most
# eight files (the device tool's limit): timeline.txt, hosts-summary.txt, hosts.tgz, scaling.tgz, hub.txt.
# From the repository root, as root: OUT=dir sh .devbin/run.sh
set -u
R=$(pwd); O=${OUT:-./out-device}; mkdir -p "$O"; t0=$(date +%s)
el() { echo "[$(($(date +%s) - t0))s] $*" >>"$O/timeline.txt"; }
el start; nproc >>"$O/timeline.txt"
for c in curl python3 unshare; do command -v $c >>"$O/timeline.txt" || echo "no $c" >>"$O/timeline.txt"; done
mkdir -p /tmp/hc && tar -C /tmp/hc -xzf .devbin/hosts-check.tgz
(cd /tmp/hc/hosts-check && timeout 250 ./device.sh run >results-summary.txt 2>&1; echo "exit $?" >>results-summary.txt)
cp /tmp/hc/hosts-check/results-summary.txt "$O/hosts-summary.txt"
tar -C /tmp/hc/hosts-check -czf "$O/hosts.tgz" results results-summary.txt
el hosts-done
mkdir -p /tmp/s16 && OUT=/tmp/s16 SCALING_D=3s timeout 230 sh .devbin/scaling.sh
tar -C /tmp/s16 -czf "$O/scaling.tgz" .
el scaling-done
mkdir -p /tmp/hub && cd /tmp/hub && gzip -dc "$R/.devbin/codellm.gz" >codellm && gzip -dc "$R/.devbin/hubload.gz" >hubload && chmod 755 codellm hubload
C=16 W=4 D=20s CODELLM_HUB_RATE_LIMITS=off timeout 100 sh "$R/.devbin/throughput.sh" >"$O/hub.txt" 2>&1
echo "exit $?" >>"$O/hub.txt"
el hub-done
