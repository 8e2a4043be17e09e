"""The recipe data (recipes/*.yaml, recipes/vllm/*.json) and its schemas.

- datadir: where the data lives (a leaf: no import of the project);
- recipe: the one loader; it validates every data file with the schema modules (pydantic
  models, each rejecting unknown keys: recipe_schema, platform_schema, kv_schema,
  loading_schema, preload_schema, fleet_schema, bench_schema) and hands out read-only
  records (record);
- catalog_cache: the validated catalog kept as plain JSON beside the data;
- versions: the one reading of a release number and of an image digest;
- platforms, bench: the questions asked of the cloud platforms' and of bench's data.

Nothing here decides a launch. May import: entrypoint.core.base, and nothing above it
(never vllm or compose).
"""
