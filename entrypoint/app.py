"""The composition root: environment + container args -> settings -> selection -> plan.

Commands call `build()`; it is the only place that ties the pure core to its inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

from entrypoint.plan import Plan, Process
from entrypoint.recipe import Catalog, load_catalog
from entrypoint.resolve import resolve, this_process
from entrypoint.select import Selection, select
from entrypoint.settings import Settings, read_settings


@dataclass(frozen=True)
class Launch:
    settings: Settings
    catalog: Catalog
    selection: Selection
    plan: Plan

    def this_process(self) -> Process:
        return this_process(self.plan, self.selection)


def build(environ: Mapping[str, str], user_args: tuple = (), detected_hardware: Optional[str] = None,
          catalog: Optional[Catalog] = None) -> Launch:
    settings = read_settings(environ, user_args)
    catalog = catalog or load_catalog()
    selection = select(settings, catalog, detected_hardware)
    return Launch(settings=settings, catalog=catalog, selection=selection, plan=resolve(selection, catalog))
