"""Trackers: each finished run, and an ablation's verdicts, logged to TensorBoard, MLflow or Weights & Biases.

The results folder stays the source of truth; a tracker is a view of it that people already search. Only the
driver logs (running.Ablation's on_record, the one writer of the folder, and `train`), so workers need no
tracker and no credentials, and --jobs, --executor ray and --resume log the same runs once. A tracker is
imported only when asked for: --help and every command without --track stay tracker-free.

Where each tracker puts an ablation (once the table is written, the answer where each opens):
    tensorboard  <results folder>/tensorboard/<row>-<variant>/seed<seed>/ per run (HPARAMS: its variant and its
                 row's verdict); summary/ holds the verdict table (the Text tab's first entry), each row's
                 numbers as scalars, CUSTOM SCALARS' margin charts of each row's Δ and CI, and the figures
    mlflow       one experiment per results folder (named after it), one MLflow run per (row, seed); a run per
                 table row (tags.kind row), named by its verdict, with its Δ, CI, p, p_adj and mde as metrics
                 and its seeds' runs nested under it; a run named "summary" (tags.kind summary) with
                 summary.csv, the figures and the table (verdicts.json); and the answer as the description
    wandb        one W&B group per results folder, offline by default; each seed's run gets its row's verdict,
                 the summary run the verdict table as a wandb.Table: see WandbBackend

A tracker is a sink: nothing is read back from it. Each run is logged under its key, made of the folder and
(row, seed) (records.run_key), and its tracker ids go into its run file ("tracked": {"mlflow": "<run id>"}); a
resume or report --track logs the runs whose files lack a tracker's id, and logging a key again replaces what an
earlier, interrupted attempt logged under it, so a kill between logging and writing the run file leaves no
duplicate. What a tracker lost after the fact (its folder deleted) is logged again by removing the ids from the
run files, or by a new results folder.
A tracker that fails (its server died) is a warning, is switched off for the rest of the ablation, and becomes
a footnote of the report (notes()); no run is lost or stopped.
"""
