"""`python -m modern_gpt` is the `modern-gpt` command."""

from .cli import main

main()
