#!/usr/bin/env bash
# Every "worse" verdict in a raw run that README.md or docs/results.md
# cites appears in results.md's section "Every worse in a cited run":
# a line there naming the run's file, its scenario and the comparison's
# label. A loss in a cited run is never left out of the summaries.
# With --list it prints the worse verdicts instead of checking them.
set -euo pipefail
cd "$(dirname "$0")/.."
# One line per bullet of the section (a bullet's wrapped lines joined).
section=$(sed -n '/^## Every worse in a cited run/,/^## /p' docs/results.md |
	awk '/^- / { if (b != "") print b; b = $0; next } /^  / { b = b " " substr($0, 3); next } { if (b != "") print b; b = "" } END { if (b != "") print b }')
status=0
for f in $(grep -oh 'docs/raw/[A-Za-z0-9._-]*\.txt' README.md docs/results.md | sort -u); do
	[ -f "$f" ] || continue
	name=${f#docs/raw/}
	while IFS=$'\t' read -r scenario label; do
		if [ "${1:-}" = --list ]; then
			printf '%s\t%s\t%s\n' "$name" "$scenario" "$label"
			continue
		fi
		if ! grep -F -- "$name" <<<"$section" | grep -F -- "$scenario" | grep -qF -- "$label"; then
			echo "docs/results.md does not list a worse verdict of $name ($scenario): $label"
			status=1
		fi
	done < <(awk '/^== [a-z0-9-]+ ==$/ { s = $2 } /: worse — / { l = $0; sub(/^ *- /, "", l); sub(/: worse — .*/, "", l); print s "\t" l }' "$f")
done
if [ "${1:-}" != --list ] && [ $status = 0 ]; then
	echo "every worse verdict in a cited run is listed in docs/results.md"
fi
exit $status
