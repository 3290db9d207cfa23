#!/usr/bin/env bash
# The doctor on real programs nobody here wrote, idle or at light load,
# each serving only net/http/pprof: Caddy (its admin endpoint) and Open
# Policy Agent (opa run --server --pprof), built from the Go module proxy;
# alone and started inside a 1.5-CPU cgroup (cpuwork run, root). Prints
# each diagnosis and its exit status, and the probes' median answer time
# (the slow-to-answer rule's input). Usage: scripts/doctor-third-party.sh
set -uo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT
GOBIN=$tmp go install github.com/caddyserver/caddy/v2/cmd/caddy@v2.11.9 || exit 1
GOBIN=$tmp go install github.com/open-policy-agent/opa@v1.22.3 || exit 1
go build -o "$tmp/cpuwork" ./cmd/cpuwork || exit 1
printf '{\n\tadmin 127.0.0.1:2019\n}\nhttp://127.0.0.1:18080 {\n\trespond "hello"\n}\n' > "$tmp/Caddyfile"

# diagnose NAME PIDPATTERN DEBUGURL APPURL: light load (a request every
# 100 ms) on APPURL while the doctor watches the process.
diagnose() {
	local name=$1 pattern=$2 debug=$3 app=$4 pid
	for _ in $(seq 50); do pid=$(pgrep -n -f "$pattern") && curl -sf -o /dev/null "$debug/debug/pprof/" && break; sleep 0.2; done
	(for _ in $(seq 80); do curl -s -o /dev/null "$app"; sleep 0.1; done) &
	local load=$!
	echo "== $name (pid $pid): cpuwork doctor --pid $pid --url $debug"
	"$tmp/cpuwork" doctor --pid "$pid" --url "$debug" --json > "$tmp/out.json"
	echo "exit $?"
	python3 - "$tmp/out.json" <<'PY'
import json, sys, statistics
r = json.load(open(sys.argv[1]))
f = r["findings"][0]
p = r["window"].get("probes") or {}
lat = p.get("latency_ns") or []
med = statistics.median(lat) / 1e6 if lat else float("nan")
print(f"first finding: {f['id']} ({f['severity']}); not read: {r['unread']}; not served: {r['not_served']}")
print(f"probes: {p.get('answered')} of {p.get('sent')} answered, median {med:.2f} ms")
PY
	wait $load
}

for where in alone quota1.5; do
	run=()
	if [ $where = quota1.5 ]; then run=("$tmp/cpuwork" run --cpus 1.5 --); fi
	"${run[@]}" "$tmp/caddy" run --config "$tmp/Caddyfile" --adapter caddyfile > "$tmp/caddy.log" 2>&1 &
	server=$!
	diagnose "caddy v2.11.9, $where" "^$tmp/caddy run" http://127.0.0.1:2019 http://127.0.0.1:18080/
	kill $server; wait $server 2>/dev/null
	"${run[@]}" "$tmp/opa" run --server --addr 127.0.0.1:18181 --pprof > "$tmp/opa.log" 2>&1 &
	server=$!
	diagnose "opa v1.22.3, $where" "^$tmp/opa run" http://127.0.0.1:18181 http://127.0.0.1:18181/health
	kill $server; wait $server 2>/dev/null
done
