"""The composition root: the one layer that ties the pure core (entrypoint.core) to its inputs
(the environment, cluster wiring, detection) and to the node, the renderers and verify.

- `launch`: a launch composed from the environment (settings -> selection once -> plan), the
  checks every launch passes; every command starts from it.
- `endpoints`: where a client reaches a launch's servers (verify, bench, fleet, healthcheck).
- one module per command for that command's logic: `serve` (the container's start), `doctor`,
  `verify`, `fleet`, `bench`, `deploy` (`plan --format` renderings), `download`, `healthcheck`.

A command imports the module of its own logic; nothing is re-exported here, so importing one
command's module loads no other's.
"""
