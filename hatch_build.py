"""Build hook: compile the message catalogs (``tools/catalog.py compile``) into the package, so a
wheel and an editable install both carry the ``.mo`` Python reads and the ``.json`` JupyterLab reads;
and write ``npu_migrate_nb/_build_info.py`` with the project's Documentation URL, so that finding
links need no package metadata read at run time (``importlib.metadata`` costs ``check`` its start-up)."""

import runpy
from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

BUILD_INFO = "npu_migrate_nb/_build_info.py"


class CatalogBuildHook(BuildHookInterface):
    PLUGIN_NAME = "custom"

    def initialize(self, version, build_data):
        catalog = runpy.run_path(str(Path(self.root) / "tools" / "catalog.py"))
        catalog["compile_all"]()
        urls = {label.lower(): url for label, url in (self.metadata.core.urls or {}).items()}
        text = ('"""Written by hatch_build.py when the package is built (pyproject.toml\'s [project.urls])."""\n\n'
                f"DOCUMENTATION_URL = {urls.get('documentation')!r}\n")
        Path(self.root, BUILD_INFO).write_text(text, encoding="utf-8")
