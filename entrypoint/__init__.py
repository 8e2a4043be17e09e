"""kimi-serve: turn KIMI_* settings and recipe data into the exact vLLM launch for Kimi-K2.5."""

__version__ = "0.1.0"
