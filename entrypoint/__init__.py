"""kimi-serve: turn KIMI_* settings and recipe data into the exact vLLM launch for a Kimi model (recipes/models/)."""

__version__ = "0.1.0"
