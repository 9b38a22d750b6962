"""The modern-gpt command: flags, printing and the live display, over the library."""
