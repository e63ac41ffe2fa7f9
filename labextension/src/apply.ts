/**
 * Writing cells through the notebook's shared model, and the comm target the kernel's
 * ``%%npu_distribute`` widget report uses to apply a fix to its own cell.
 */
import { NotebookPanel } from '@jupyterlab/notebook';
import { Kernel, KernelMessage } from '@jupyterlab/services';

import { answerReplace, english, IReplaceRequest, ITrans, IWrite } from './logic';

export const COMM_TARGET = 'npu_migrate_nb';
export const VERSION = '0.1.0';

/** The text of every cell, in order. */
export function cellSources(panel: NotebookPanel): string[] {
  const cells = panel.content.model?.sharedModel.cells ?? [];
  return cells.map(cell => cell.getSource());
}

/**
 * Replace the text of the cells in ``writes``. Each cell's change is one transaction of the shared
 * model, so Undo in that cell restores its text.
 */
export function writeCells(panel: NotebookPanel, writes: IWrite[]): void {
  const shared = panel.content.model?.sharedModel;
  if (!shared) {
    return;
  }
  for (const write of writes) {
    const cell = shared.cells[write.index];
    if (cell) {
      cell.transact(() => cell.setSource(write.text));
    }
  }
}

/** The comm target, registered on the kernel of every notebook panel (and again when it changes). */
export function serveKernelRequests(panel: NotebookPanel, trans: ITrans = english): void {
  const register = (kernel: Kernel.IKernelConnection | null | undefined) => {
    if (!kernel) {
      return;
    }
    kernel.registerCommTarget(COMM_TARGET, (comm, open) => onOpen(panel, comm, open, trans));
  };
  register(panel.sessionContext.session?.kernel);
  panel.sessionContext.kernelChanged.connect((_, change) => register(change.newValue));
}

function onOpen(panel: NotebookPanel, comm: Kernel.IComm, open: KernelMessage.ICommOpenMsg, trans: ITrans): void {
  const data = open.content.data as { action?: string };
  if (data.action === 'hello') {
    comm.send({ action: 'hello', version: VERSION });
  }
  comm.onMsg = message => {
    const request = message.content.data as unknown as IReplaceRequest;
    if (request.action !== 'replace-cell') {
      return;
    }
    comm.send(replaceCell(panel, request, trans) as any);
  };
}

function replaceCell(panel: NotebookPanel, request: IReplaceRequest, trans: ITrans) {
  const cells = panel.content.model?.sharedModel.cells ?? [];
  const cell = cells.find(candidate => candidate.getId() === request.cell_id);
  const { write, reply } = answerReplace(request, cell?.getSource(), trans);
  if (write && cell) {
    cell.transact(() => cell.setSource(request.source));
  }
  return reply;
}
