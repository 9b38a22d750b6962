"""Experiment trackers (TensorBoard, MLflow, W&B): each run and the verdicts logged where researchers already look."""
