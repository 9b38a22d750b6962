"""An ablation: its plan and Spec, the results folder, the executors that train its runs, and its figures."""
