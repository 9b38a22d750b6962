"""What a user sees of a result: the terminal's tables (render.py), the page to share (page.py) and the live
display (progress.py). Above the library (ablation/, verdict/, trackers/), below api.py and the command line."""
