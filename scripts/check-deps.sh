#!/usr/bin/env bash
# docs/guide.md's lists of the library module's requirements (between the
# deps:direct and deps:indirect markers) name exactly the modules its
# go.mod requires, direct and indirect: a guide that says "requires only"
# must not fall behind go.mod.
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0
for kind in direct indirect; do
	if [ "$kind" = direct ]; then
		want=$(GOWORK=off go mod edit -json | python3 -c 'import json,sys; print("\n".join(sorted(r["Path"] for r in json.load(sys.stdin)["Require"] if not r.get("Indirect"))))')
	else
		want=$(GOWORK=off go mod edit -json | python3 -c 'import json,sys; print("\n".join(sorted(r["Path"] for r in json.load(sys.stdin)["Require"] if r.get("Indirect"))))')
	fi
	got=$(sed -n "/<!-- deps:$kind -->/,/<!-- \/deps:$kind -->/p" docs/guide.md | grep -o '`[a-z0-9.-]*\.[a-z]*/[^`]*`' | tr -d '`' | sort -u)
	if [ "$want" != "$got" ]; then
		echo "docs/guide.md's $kind requirements differ from go.mod's:"
		diff <(echo "$want") <(echo "$got") || true
		fail=1
	fi
done
[ "$fail" = 0 ] && echo "docs/guide.md lists go.mod's requirements"
exit "$fail"
