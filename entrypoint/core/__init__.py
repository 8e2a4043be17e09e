"""The core: settings, recipe data, selection, composition and the plan, with what they read
bounded (core/limits.py, core/files.py, core/bounded.py). It reads the recipe data directory
(core/datadir.py), the KIMI_CONFIG file and the environment it is given; it imports nothing
outside this package."""
