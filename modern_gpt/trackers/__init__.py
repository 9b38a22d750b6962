"""Trackers: each finished run, and an ablation's verdicts, logged to TensorBoard, MLflow or Weights & Biases.

The results folder stays the source of truth; a tracker is a sink, a view of it that people already search.
Only the driver logs (running.Ablation's on_record, and `train`), so workers need no tracker and no credentials.
Each run is logged under its key, made of the folder and (row, seed) (records.run_key), and its tracker ids go
into its run file: a resume or report --track logs the runs whose files lack an id, replacing what an earlier,
interrupted attempt logged under the key. A tracker that fails is a warning, switched off for the rest of the
ablation, and a footnote of the report. docs/trackers.md says where each tracker puts what.
"""
