"""The composition: settings + recipe data + the node's facts -> Selection -> the typed launch Plan.

Read in this order: settings (every variable the entrypoint reads, declared once; settings_doc
renders the README's tables from it), launch (compose_launch: the one pure function from settings
and the node's facts, NodeFacts, to the launch), select (every choice made and checked), resolve
(the composition rules, layer by layer: loading, kv, preload, fleet), plan (the typed processes and
the one Pool type), placement (whether a plan can run where it is placed); caches and weights read
a plan.

Pure: no node, no I/O but the recipe data. May import: entrypoint.core.vllm,
entrypoint.core.data and entrypoint.core.base.
"""
