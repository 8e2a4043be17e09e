"""vLLM's command line, per release: what the recipe data says vLLM accepts.

- vllm_cli: `vllm serve`'s grammar read from recipes/vllm/<version>.json (written by
  `build.py vllm-spec`), and the argv operations built on it (parse, dedupe, effective values,
  secrets);
- args: argument lists as (token, source) pairs: tagging, display grouping, placeholders;
- mask: secrets never reach a log or a printed launch (the grammar says which options are secret).

May import: entrypoint.core.data and entrypoint.core.base (never compose).
"""
