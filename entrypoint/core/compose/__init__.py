"""The composition: settings + recipe data -> Selection -> the typed launch Plan.

Read in this order: settings (every variable the entrypoint reads, declared once; settings_doc
renders the README's tables from it), select (every choice made and checked), resolve (the
composition rules, layer by layer: loading, kv, preload, fleet), plan (the typed processes),
placement (whether a plan can run where it is placed); caches and weights read a plan.

Pure: no node, no I/O but the recipe data. May import: entrypoint.core.vllm,
entrypoint.core.data and entrypoint.core.base.
"""
