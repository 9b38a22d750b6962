"""The GPT, told as 2019 against today (gpt.py). Its KV cache and sampling, and plugin components."""
