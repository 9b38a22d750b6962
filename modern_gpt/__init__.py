"""modern-gpt: does each piece of the modern transformer really help on your data, at your scale?"""

__version__ = "0.1.0"
