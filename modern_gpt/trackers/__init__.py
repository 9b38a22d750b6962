"""Trackers: each finished run, and an ablation's verdicts, logged to TensorBoard, MLflow or Weights & Biases.

The results folder stays the source of truth. A tracker is a sink, a view of it that people already search.
Only the driver logs (running.Ablation's on_record, and `train`), so workers need no tracker and no credentials.
Each run is logged under its key: the folder and (row, seed) (records.run_key). Its tracker ids go into its
run file. A resume or report --track logs the runs whose files lack an id. It replaces what an interrupted
attempt logged under the key. A tracker that fails is switched off with a warning, and the report gets a footnote.
docs/trackers.md says where each tracker puts what.
"""
