#!/usr/bin/env bash
# Fails when README.md, docs/*.md or the code (Go files, scripts) cite a raw
# output file under docs/raw/ that is not in the repository, or when a file
# in docs/raw/ is missing from its index (docs/raw/INDEX.md): every
# published number must come from a raw file checked in beside it, and
# every raw file must say what it measures.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=0
cited=0
while IFS= read -r ref; do
	cited=$((cited + 1))
	if [ ! -e "$ref" ]; then
		echo "cited but missing: $ref"
		missing=1
	fi
done < <(git grep -ohE 'docs/[A-Za-z0-9_./-]+\.(txt|json|tsv|json\.xz)' -- README.md 'docs/*.md' '*.go' '*.py' '*.sh' ':!docs/raw' | sed 's/\.$//' | sort -u)
echo "$cited raw files cited by README.md, docs/*.md and the code"
while IFS= read -r f; do
	name=${f#docs/raw/}
	if ! grep -qF "| \`$name\` |" docs/raw/INDEX.md; then
		echo "not in docs/raw/INDEX.md: $f"
		missing=1
	fi
done < <(git ls-files docs/raw | grep -v '^docs/raw/INDEX.md$')
exit $missing
