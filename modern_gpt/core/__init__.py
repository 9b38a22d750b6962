"""The facts everything else reads, torch-free and pandas-free: errors, the components, the settings dataclasses
and their flags, the JSON checks and the folder's files (atomic writes, the lock)."""
