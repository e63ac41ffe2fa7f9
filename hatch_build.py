"""Build hook: compile the message catalogs (``tools/catalog.py compile``) into the package, so a
wheel and an editable install both carry the ``.mo`` Python reads and the ``.json`` JupyterLab reads."""

import runpy
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class CatalogBuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version, build_data):
        catalog = runpy.run_path(str(Path(self.root) / "tools" / "catalog.py"))
        catalog["compile_all"]()
