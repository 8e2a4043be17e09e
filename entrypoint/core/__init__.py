"""The core: settings, recipe data, selection, composition and the plan, with what they read
bounded (core/base/limits.py, core/base/files.py, core/base/bounded.py). It reads the recipe data directory
(core/data/datadir.py), the KIMI_CONFIG file and the environment it is given; it imports nothing
outside this package.

Its rooms, each importing only those after it: compose (settings + data -> selection ->
the plan) -> vllm (vLLM's grammar per release) -> data (the recipe data and its schemas) -> base
(bounds, bounded reading, errors). Each room's __init__ says what it holds."""
