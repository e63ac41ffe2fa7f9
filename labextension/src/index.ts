/** npu-migrate-nb: the NPU Distribute side panel, its notebook toolbar button and palette entry,
 * and the comm target the kernel's %%npu_distribute widget report applies fixes through. */
import { ILabShell, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette, ToolbarButton } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { ITranslator, nullTranslator } from '@jupyterlab/translation';
import { LabIcon } from '@jupyterlab/ui-components';

import { setLanguage } from './api';
import { serveKernelRequests } from './apply';
import { NpuPanel } from './panel';

const OPEN_COMMAND = 'npu-migrate-nb:open-panel';

const ICON_SVG =
  '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 16 16">' +
  '<g class="jp-icon3" fill="#616161"><rect x="1" y="1" width="6" height="6" rx="1"/>' +
  '<rect x="9" y="1" width="6" height="6" rx="1"/><rect x="1" y="9" width="6" height="6" rx="1"/>' +
  '<rect x="9" y="9" width="6" height="6" rx="1"/></g></svg>';

export const npuIcon = new LabIcon({ name: 'npu-migrate-nb:npu', svgstr: ICON_SVG });

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'npu-migrate-nb:plugin',
  description: 'Find, apply and simulate the three distributed steps of Ascend NPU training.',
  autoStart: true,
  requires: [INotebookTracker, ILabShell],
  optional: [ICommandPalette, ITranslator],
  activate: (
    app: JupyterFrontEnd,
    tracker: INotebookTracker,
    shell: ILabShell,
    palette: ICommandPalette | null,
    translator: ITranslator | null
  ) => {
    // Settings → Language: our words from our catalog (shipped in the Python package through the
    // jupyterlab.locale entry point), the server's in the same language.
    const trans = (translator ?? nullTranslator).load('npu_migrate_nb');
    setLanguage((translator ?? nullTranslator).languageCode);
    const panel = new NpuPanel(tracker, trans);
    panel.title.icon = npuIcon;
    shell.add(panel, 'right', { rank: 600 });

    app.commands.addCommand(OPEN_COMMAND, {
      label: trans.__('NPU Distribute: open the panel'),
      caption: trans.__('Analyze this notebook for variable broadcast, gradient aggregation and dataset sharding'),
      icon: npuIcon,
      execute: () => {
        shell.activateById(panel.id);
        void panel.analyze();
      }
    });
    palette?.addItem({ command: OPEN_COMMAND, category: trans.__('NPU Distribute') });

    const addToNotebook = (notebook: NotebookPanel) => {
      const button = new ToolbarButton({
        icon: npuIcon,
        tooltip: trans.__('NPU Distribute: analyze this notebook'),
        onClick: () => void app.commands.execute(OPEN_COMMAND)
      });
      notebook.toolbar.insertItem(10, 'npuDistribute', button);
      serveKernelRequests(notebook, trans);
    };
    tracker.forEach(addToNotebook);
    tracker.widgetAdded.connect((_, notebook) => addToNotebook(notebook));
  }
};

export default plugin;
