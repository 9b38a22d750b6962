#!/usr/bin/env bash
# docs/share.png: the top of the page `modern-gpt report DIR --html FILE` writes for `make smoke`'s ablation, as
# headless Chromium renders it offline. Run from the repository root: bash docs/screenshot_share.sh
# Needs: the venv (.venv) and Chromium (Debian: apt-get install -y chromium).
set -euo pipefail
PY=${PY:-.venv/bin/python}
CHROMIUM=${CHROMIUM:-chromium}
OUT=${OUT:-docs/share.png}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# make smoke's ablation (its figures drawn) and its page, in the scratch folder: the page shows the command
bin="$PWD/.venv/bin"
(cd "$work" && "$bin/modern-gpt" ablate --smoke --seeds 3 --out smoke-ablation >ablate.log 2>&1) || {
    cat "$work/ablate.log"
    exit 1
}
(cd "$work" && "$bin/modern-gpt" report smoke-ablation --html smoke.html >/dev/null 2>&1)

# offline: every host resolves nowhere, and the proxy is a closed port (the page needs neither)
"$CHROMIUM" --headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --host-resolver-rules="MAP * ~NOTFOUND" --proxy-server=127.0.0.1:9 \
    --user-data-dir="$work/chromium" --hide-scrollbars --window-size=1250,1700 --screenshot="$work/full.png" \
    "file://$work/smoke.html" 2>/dev/null

# 128 colours keep the PNG small
"$PY" - "$work/full.png" "$OUT" <<'PYEOF'
import sys
from PIL import Image

Image.open(sys.argv[1]).convert("RGB").quantize(128).save(sys.argv[2], optimize=True)
PYEOF
echo "wrote $OUT"
