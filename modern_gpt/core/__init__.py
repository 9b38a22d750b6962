"""The facts everything else reads, torch-free and pandas-free. Here are the errors, the components, and the
settings dataclasses with their flags. Also the JSON checks and the folder's files: atomic writes, the lock."""
