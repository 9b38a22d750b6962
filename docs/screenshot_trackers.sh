#!/usr/bin/env bash
# docs/mlflow.png and docs/tensorboard.png: the real MLflow and TensorBoard UIs holding `make smoke`'s ablation
# (--track mlflow --track tensorboard), as each opens on it, taken with headless Chromium. Nothing is picked or
# arranged by hand: MLflow's experiment page as it first opens, TensorBoard's CUSTOM SCALARS tab (the page the
# docs send you to: TensorBoard itself opens on TIME SERIES, whose first group is the runs' curves).
# Run from the repository root: bash docs/screenshot_trackers.sh
# Needs: the venv with the mlflow and tensorboard extras (.venv), and Chromium (Debian: apt-get install -y chromium).
# Nothing reaches the network: both servers bind 127.0.0.1 and are stopped by their own process groups; Chromium
# resolves no host name and has a closed proxy for everything but the loopback.
set -euo pipefail
PY=${PY:-.venv/bin/python}
CHROMIUM=${CHROMIUM:-chromium}
MLFLOW_PNG=${MLFLOW_PNG:-docs/mlflow.png}
TENSORBOARD_PNG=${TENSORBOARD_PNG:-docs/tensorboard.png}
work=$(mktemp -d)
export MLFLOW_DISABLE_TELEMETRY=true DO_NOT_TRACK=true MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false
free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
mlflow_port=$(free_port)
tb_port=$(free_port)
mlflow_url="http://127.0.0.1:$mlflow_port"
tb_url="http://127.0.0.1:$tb_port"
servers=()
stop() {
    for pid in "${servers[@]}"; do
        kill -TERM -- "-$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap stop EXIT

wait_for() { # URL PID LOG: until the server answers, or its log if it died
    for _ in $(seq 240); do
        "$PY" -c "import urllib.request as u; u.urlopen('$1', timeout=1)" 2>/dev/null && return 0
        kill -0 "$2" 2>/dev/null || { cat "$3"; exit 1; }
        sleep 0.5
    done
    echo "no answer from $1"; exit 1
}

# the MLflow server as tests/trackers/test_tracking_server.py starts it: its own session, stopped as one process group
setsid "$PY" -m mlflow server --host 127.0.0.1 --port "$mlflow_port" --workers 1 \
    --backend-store-uri "sqlite:///$work/mlflow.db" --artifacts-destination "$work/art" >"$work/mlflow.log" 2>&1 &
servers+=($!)
wait_for "$mlflow_url/health" "${servers[-1]}" "$work/mlflow.log"

# make smoke's ablation, logged to both (MLflow's experiment is named after the results folder)
bin="$PWD/.venv/bin"
(cd "$work" && "$bin/modern-gpt" ablate --smoke --seeds 3 --out smoke-ablation --track tensorboard \
    --track mlflow --mlflow-uri "$mlflow_url" >ablate.log 2>&1) || { cat "$work/ablate.log"; exit 1; }

setsid "$bin/tensorboard" --logdir "$work/smoke-ablation/tensorboard" --host 127.0.0.1 --port "$tb_port" \
    >"$work/tensorboard.log" 2>&1 &
servers+=($!)
wait_for "$tb_url/data/runs" "${servers[-1]}" "$work/tensorboard.log"

id=$("$PY" -c "from mlflow import MlflowClient; print(MlflowClient('$mlflow_url').get_experiment_by_name('smoke-ablation').experiment_id)")

shoot() { # URL WIDTHxHEIGHT OUT: a fresh profile each time, so that nothing of an earlier visit is remembered
    rm -rf "$work/chromium"
    "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
        --disable-component-update --disable-sync --host-resolver-rules="MAP * ~NOTFOUND, EXCLUDE 127.0.0.1" \
        --proxy-server=127.0.0.1:9 --user-data-dir="$work/chromium" --hide-scrollbars --window-size="$2" \
        --virtual-time-budget=15000 --screenshot="$3" "$1" 2>/dev/null
}
shoot "$mlflow_url/#/experiments/$id/runs" 1900,1000 "$work/mlflow.png"
shoot "$tb_url/#custom_scalars" 1600,1100 "$work/tensorboard.png"

# MLflow 3 opens its assistant panel on the right: cropped off, with the empty space under the runs table;
# TensorBoard cropped below the second row of charts; 128 colours keep the PNGs small
"$PY" - "$work" "$MLFLOW_PNG" "$TENSORBOARD_PNG" <<'PYEOF'
import sys
from pathlib import Path

from PIL import Image

work = Path(sys.argv[1])
for name, out, box in (("mlflow", sys.argv[2], (0, 0, 1410, 640)), ("tensorboard", sys.argv[3], (0, 0, 1600, 1100))):
    image = Image.open(work / f"{name}.png").convert("RGB")
    image.crop(box).quantize(128).save(out, optimize=True)
    print(f"wrote {out}")
PYEOF
