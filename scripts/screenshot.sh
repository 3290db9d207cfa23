#!/usr/bin/env bash
# Renders a cpuwork bench report (index.html) to PNG with headless Chromium,
# as a person would see it in a 1400 px wide browser window.
#
#   scripts/screenshot.sh REPORT_DIR OUT.png [HEIGHT_PX]
#
# Needs Debian's chromium package (apt-get install chromium). Runs offline:
# the report loads nothing remote.
set -euo pipefail
dir=${1:?report directory}
out=${2:?output png}
height=${3:-2400}
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
	echo "screenshot: chromium not found (apt-get install chromium)" >&2
	exit 2
fi
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
"$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
	--disable-background-networking --disable-component-update --disable-sync \
	--user-data-dir="$profile" --hide-scrollbars --window-size="1400,$height" \
	--screenshot="$(realpath -m "$out")" "file://$(realpath "$dir")/index.html" >/dev/null 2>&1
test -s "$out"
echo "screenshot: $out"
