#!/usr/bin/env bash
# Assembles the texts of the KV-cache quality measurements (docs/kv-cache.md
# §10) from files already on a Debian machine with Go installed; nothing is
# downloaded and none of it was written for ftchat.
#   prose.txt  English prose: Debian's copies of the GPL-3, LGPL-2.1, GFDL-1.3,
#              Apache-2.0 and MPL-2.0 license texts (/usr/share/common-licenses)
#   code.txt   Go source: $(go env GOROOT)/src/net/http/server.go, then
#              net/http/transport.go
#   calib.txt  calibration sample (different from both): the Go language
#              specification, $(go env GOROOT)/doc/go_spec.html with tags removed
# Usage: scripts/quality_texts.sh [OUTDIR]   (default /tmp/ftchat-quality)
set -euo pipefail
out=${1:-/tmp/ftchat-quality}
mkdir -p "$out"
goroot=$(go env GOROOT)
lic=/usr/share/common-licenses

cat "$lic/GPL-3" "$lic/LGPL-2.1" "$lic/GFDL-1.3" "$lic/Apache-2.0" "$lic/MPL-2.0" >"$out/prose.txt"
cat "$goroot/src/net/http/server.go" "$goroot/src/net/http/transport.go" >"$out/code.txt"
# Strip tags and the most common entities; keep the text and code examples.
sed -e 's/<[^>]*>//g' -e 's/&lt;/</g' -e 's/&gt;/>/g' -e 's/&amp;/\&/g' -e 's/&quot;/"/g' -e 's/&nbsp;/ /g' \
	"$goroot/doc/go_spec.html" | cat -s >"$out/calib.txt"

{
	echo "go: $(go version)"
	sha256sum "$lic/GPL-3" "$lic/LGPL-2.1" "$lic/GFDL-1.3" "$lic/Apache-2.0" "$lic/MPL-2.0" \
		"$goroot/src/net/http/server.go" "$goroot/src/net/http/transport.go" "$goroot/doc/go_spec.html"
	sha256sum "$out"/prose.txt "$out"/code.txt "$out"/calib.txt
} >"$out/SOURCES"
echo "wrote $out/prose.txt $out/code.txt $out/calib.txt (sources and hashes in $out/SOURCES)"
