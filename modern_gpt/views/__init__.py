"""What a user sees of a result: render.py's terminal tables, page.py's page to share, progress.py's live
display. Above the library (ablation/, verdict/, trackers/), below api.py and the command line."""
