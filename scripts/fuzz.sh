#!/usr/bin/env bash
# Runs every Fuzz target of every module for FUZZTIME each (default 10000x:
# a count of inputs; locally try FUZZTIME=1m). Inputs that fail are written
# by go test to the package's testdata/fuzz/FuzzName/ and fail this script;
# the seed corpora checked in there run in every plain `go test` too.
#
# CI uses a count, not a duration: with a duration, Go's fuzz coordinator
# (go1.26) can report its own -fuzztime deadline as a failure of the target
# ("context deadline exceeded", no input written) when a worker is still
# running an input at the deadline, more often on a loaded machine: Go issue
# 75804, fixed in go1.27. A count never sets that deadline.
set -euo pipefail
cd "$(dirname "$0")/.."
t=${FUZZTIME:-10000x}
n=0
for dir in $(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do
	for target in $(grep -h '^func Fuzz' "$dir"/*_test.go | sed 's/^func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do
		echo "fuzz $dir $target ($t)"
		# go.work joins the modules: run from the package's directory.
		(cd "$dir" && go test -run '^$' -fuzz "^${target}\$" -fuzztime "$t" . > /tmp/fuzz-$$.log 2>&1) || { cat /tmp/fuzz-$$.log; rm -f /tmp/fuzz-$$.log; exit 1; }
		n=$((n + 1))
	done
done
rm -f /tmp/fuzz-$$.log
echo "$n fuzz targets ran for $t each without a failure"
