#!/usr/bin/env bash
# Fails when README.md or docs/*.md cite a raw output file (docs/*.txt, .json, .tsv
# docs/*.json, docs/**/results.json) that is not in the repository: every
# published number must come from a raw file checked in beside it.
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
done < <(grep -ohE 'docs/[A-Za-z0-9_./-]+\.(txt|json|tsv)' README.md docs/*.md | sort -u)
echo "$cited raw files cited by README.md and docs/*.md"
exit $missing
