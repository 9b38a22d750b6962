#!/usr/bin/env bash
# docs/mlflow.png: the MLflow UI of a real local `mlflow server` holding `make smoke`'s ablation, taken with
# headless Chromium. Run from the repository root: bash docs/screenshot_mlflow.sh
# Needs: the venv with the mlflow extra (.venv), and Chromium (Debian: apt-get install -y chromium).
set -euo pipefail
PY=${PY:-.venv/bin/python}
CHROMIUM=${CHROMIUM:-chromium}
OUT=${OUT:-docs/mlflow.png}
work=$(mktemp -d)
port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
url="http://127.0.0.1:$port"

# the server as tests/test_tracking_server.py starts it: its own session, stopped as one process group
MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false setsid "$PY" -m mlflow server --host 127.0.0.1 --port "$port" --workers 1 \
    --backend-store-uri "sqlite:///$work/mlflow.db" --artifacts-destination "$work/art" >"$work/server.log" 2>&1 &
server=$!
trap 'kill -TERM -- -$server 2>/dev/null || true; wait $server 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 240); do
    "$PY" -c "import urllib.request as u; u.urlopen('$url/health', timeout=1)" 2>/dev/null && break
    kill -0 "$server" 2>/dev/null || { cat "$work/server.log"; exit 1; }
    sleep 0.5
done

# make smoke's ablation, logged to the server (the experiment is named after the results folder)
.venv/bin/modern-gpt ablate --smoke --seeds 3 --out "$work/smoke-ablation" --track mlflow --mlflow-uri "$url" >/dev/null

# The runs table with the verdict columns shown: MLflow's shared-view state (an experiment tag the UI reads
# from ?viewStateShareKey=) chooses the columns, the sort and the filter, so nothing has to be clicked.
id=$("$PY" - "$url" <<'EOF'
import json, sys
from mlflow import MlflowClient

client = MlflowClient(sys.argv[1])
experiment = client.get_experiment_by_name("smoke-ablation")
tags = ["variant", "seed", "verdict", "delta_val", "p_holm", "mde"]
state = {
    "selectedColumns": [f"tags.`{t}`" for t in tags] + ["metrics.`val_loss`"],
    "orderByKey": "tags.`row`",
    "orderByAsc": True,
    "searchFilter": "tags.variant LIKE '%'",  # the seeds' runs; the summary run has no variant
}
client.set_experiment_tag(experiment.experiment_id, "mlflow.sharedViewState.readme", json.dumps(state))
print(experiment.experiment_id)
EOF
)

"$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --user-data-dir="$work/chromium" --window-size=1900,1000 \
    --virtual-time-budget=15000 --screenshot="$work/full.png" \
    "$url/#/experiments/$id/runs?viewStateShareKey=readme" 2>/dev/null

# MLflow 3 opens its assistant panel on the right: cropped off; 128 colours keep the PNG small
"$PY" - "$work/full.png" "$OUT" <<'EOF'
import sys
from PIL import Image

image = Image.open(sys.argv[1]).convert("RGB")
image.crop((0, 0, image.width - 490, image.height)).quantize(128).save(sys.argv[2], optimize=True)
EOF
echo "wrote $OUT"
