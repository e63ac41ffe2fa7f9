/** The NPU Distribute side panel: the checklist, the findings, Apply / Go to, and simulated runs. */
import { CodeMirrorEditor } from '@jupyterlab/codemirror';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { Widget } from '@lumino/widgets';

import * as api from './api';
import { cellSources, writeCells } from './apply';
import {
  checkWords,
  debounce,
  failedCellLine,
  findingLink,
  findingLinkTitle,
  findingPlace,
  IAnalysis,
  IFinding,
  ITrans,
  lineMarks,
  oneCardLine,
  planApply,
  STEPS,
  statusWords,
  stepName
} from './logic';
import { showMarks } from './marks';

export const PANEL_ID = 'npu-migrate-nb-panel';
const REFRESH_AFTER_EDIT_MS = 800;
const POLL_MS = 1000;

function element<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attributes: { [name: string]: string } = {},
  ...children: Array<Node | string>
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    node.setAttribute(name, value);
  }
  for (const child of children) {
    node.append(child);
  }
  return node;
}

function sourceText(source: string | string[]): string {
  return Array.isArray(source) ? source.join('') : source;
}

export class NpuPanel extends Widget {
  private notebook: NotebookPanel | null = null;
  private analysis: IAnalysis | null = null;
  private analyzedSources: string[] = [];
  private job: string | null = null;
  private readonly openRanks = new Set<string>(['0']);
  private readonly status = element('div', { class: 'npu-status-line' });
  private readonly steps = element('table', { class: 'npu-steps' });
  private readonly findings = element('div', { class: 'npu-findings' });
  private readonly simulation = element('div', { class: 'npu-simulation' });
  private readonly ranksInput = element('input', { type: 'number', min: '1', max: '16', value: '2', class: 'npu-ranks' });
  private readonly simulateButton: HTMLButtonElement;
  private readonly stopButton: HTMLButtonElement;
  private readonly scheduleAnalysis = debounce(() => void this.analyze(), REFRESH_AFTER_EDIT_MS);

  constructor(
    tracker: INotebookTracker,
    private readonly trans: ITrans
  ) {
    super();
    this.id = PANEL_ID;
    this.addClass('npu-panel');
    this.title.caption = trans.__('NPU Distribute');
    const analyzeButton = this.button(trans.__('Analyze notebook'), () => void this.analyze(), 'npu-analyze', true);
    const applyAll = this.button(trans.__('Apply all fixes'), () => void this.apply(), 'npu-apply-all', true);
    this.simulateButton = this.button(this.simulateLabel(2), () => void this.simulate(), 'npu-simulate', true);
    this.stopButton = this.button(trans.__('Stop'), () => void this.stop(), 'npu-stop');
    this.stopButton.disabled = true;
    this.ranksInput.addEventListener('input', () => {
      this.simulateButton.textContent = this.simulateLabel(this.ranks());
    });
    this.node.append(
      element('h2', {}, trans.__('NPU Distribute')),
      this.status,
      element('div', { class: 'npu-buttons' }, analyzeButton, applyAll),
      this.steps,
      this.findings,
      element('h3', {}, trans.__('Simulated ranks')),
      element(
        'div',
        { class: 'npu-buttons' },
        this.simulateButton,
        element('label', {}, trans.__('ranks') + ' ', this.ranksInput),
        this.stopButton
      ),
      this.simulation
    );
    tracker.currentChanged.connect(() => this.follow(tracker.currentWidget));
    this.follow(tracker.currentWidget);
  }

  private button(label: string, onClick: () => void, className: string, primary = false): HTMLButtonElement {
    const style = primary ? 'jp-mod-styled jp-mod-accept' : 'jp-mod-styled';
    const button = element('button', { class: `jp-Button ${style} npu-button ${className}`, type: 'button' }, label);
    button.addEventListener('click', onClick);
    return button;
  }

  private simulateLabel(ranks: number): string {
    return this.trans._n('Simulate on %1 rank', 'Simulate on %1 ranks', ranks);
  }

  private ranks(): number {
    const value = parseInt(this.ranksInput.value, 10);
    return Number.isFinite(value) && value >= 1 ? Math.min(value, 16) : 2;
  }

  // ------------------------------------------------------------------------------ following

  private follow(panel: NotebookPanel | null): void {
    if (this.notebook === panel) {
      return;
    }
    this.notebook?.content.model?.contentChanged.disconnect(this.onEdit, this);
    this.notebook = panel;
    this.analysis = null;
    this.render();
    if (!panel) {
      return;
    }
    panel.context.ready.then(() => {
      if (this.notebook !== panel) {
        return;
      }
      panel.content.model?.contentChanged.connect(this.onEdit, this);
      void this.analyze();
    });
  }

  private onEdit(): void {
    this.scheduleAnalysis();
  }

  // ------------------------------------------------------------------------------- analysis

  async analyze(): Promise<void> {
    const panel = this.notebook;
    if (!panel || !panel.content.model) {
      return;
    }
    const sources = cellSources(panel);
    this.status.textContent = this.trans.__('analyzing...');
    try {
      const analysis = await api.analyze(panel.content.model.toJSON(), panel.context.path);
      if (this.notebook !== panel) {
        return;
      }
      this.analysis = analysis;
      this.analyzedSources = sources;
      const adapter = analysis.adapter ?? this.trans.__('none');
      this.status.textContent = this.trans.__('%1: framework %2, adapter %3', panel.context.path, analysis.framework, adapter);
    } catch (error) {
      this.status.textContent = this.trans.__('analysis failed: %1', (error as Error).message);
    }
    this.render();
  }

  private async apply(finding?: IFinding): Promise<void> {
    const panel = this.notebook;
    if (!panel || !panel.content.model || !this.analysis) {
      return;
    }
    const analyzed = this.analyzedSources;
    try {
      const result = await api.fix(panel.content.model.toJSON(), finding ? [finding.code] : undefined);
      const fixed = result.notebook.cells.map(cell => sourceText(cell.source));
      const plan = planApply(cellSources(panel), analyzed, fixed);
      if (plan.stale.length) {
        this.status.textContent = this.trans.__('the notebook changed since it was analyzed: analyzed again, apply again');
        await this.analyze();
        return;
      }
      writeCells(panel, plan.writes);
      const fixes = this.trans._n('%1 fix', '%1 fixes', result.applied.length);
      const cells = this.trans._n('%1 cell', '%1 cells', plan.writes.length);
      this.status.textContent = this.trans.__('applied %1 in %2', fixes, cells);
    } catch (error) {
      this.status.textContent = this.trans.__('apply failed: %1', (error as Error).message);
      return;
    }
    await this.analyze();
  }

  private goTo(finding: IFinding): void {
    const panel = this.notebook;
    if (!panel) {
      return;
    }
    const index = finding.cell;
    if (index === null) {
      return;
    }
    const notebook = panel.content;
    notebook.activeCellIndex = index;
    void notebook.scrollToItem(index).then(() => {
      const cell = notebook.widgets[index];
      if (!cell || !cell.editor) {
        return;
      }
      notebook.mode = 'edit';
      cell.editor.setCursorPosition({ line: finding.line - 1, column: Math.max(0, finding.column - 1) });
      cell.editor.focus();
    });
  }

  // -------------------------------------------------------------------------------- drawing

  private render(): void {
    const analysis = this.analysis;
    this.steps.replaceChildren();
    this.findings.replaceChildren();
    if (!this.notebook) {
      this.status.textContent = this.trans.__('open a notebook to analyze it');
    }
    if (!analysis) {
      return;
    }
    for (const step of STEPS) {
      const status = analysis.steps[step];
      this.steps.append(
        element(
          'tr',
          { 'data-step': step },
          element('td', {}, stepName(step, this.trans)),
          element(
            'td',
            {},
            element('span', { class: `npu-step npu-step-${status}` }, statusWords(status, this.trans)),
            ...(analysis.reasons?.[step] ? [element('div', { class: 'npu-step-reason' }, analysis.reasons[step])] : [])
          )
        )
      );
    }
    for (const error of analysis.errors) {
      this.findings.append(
        element('div', { class: 'npu-finding npu-error' }, this.trans.__('cell %1 line %2: %3', error.cell, error.line, error.message))
      );
    }
    for (const finding of analysis.findings) {
      this.findings.append(this.findingRow(finding));
    }
    if (!analysis.findings.length && !analysis.errors.length) {
      this.findings.append(element('div', { class: 'npu-none' }, this.trans.__('nothing missing or wrong')));
    }
    this.markEditors(analysis);
  }

  private findingRow(finding: IFinding): HTMLElement {
    const said = this.trans.__('%1: %2', findingPlace(finding, this.trans), finding.message);
    const row = element(
      'div',
      { class: `npu-finding npu-${finding.severity}`, 'data-code': finding.code },
      element('div', {}, element('b', {}, this.severityWord(finding.severity)),
        ` ${said} `, this.codeName(finding))
    );
    if (finding.fix) {
      row.append(element('pre', { class: 'npu-fix' }, finding.fix));
    }
    if (finding.path) {
      // A module of the notebook's project: the notebook's model cannot write it.
      row.append(element('div', { class: 'npu-module-note' }, this.trans.__('fix it with: npu-migrate-nb fix NOTEBOOK --in-place (rewrites %1)', finding.path)));
      return row;
    }
    const actions = element('div', { class: 'npu-buttons' }, this.button(this.trans.__('Go to'), () => this.goTo(finding), 'npu-goto'));
    if (finding.fix) {
      actions.append(this.button(this.trans.__('Apply'), () => void this.apply(finding), 'npu-apply', true));
    }
    row.append(actions);
    return row;
  }

  /** `[code]`, linked to the code's page in the documentation when the server gave one. */
  private codeName(finding: IFinding): HTMLElement {
    const name = element('code', {}, `[${finding.code}]`);
    const url = findingLink(finding);
    if (!url) {
      return name;
    }
    return element(
      'a',
      { class: 'npu-code-link', href: url, target: '_blank', rel: 'noopener', title: findingLinkTitle(finding, this.trans) },
      name
    );
  }

  private severityWord(severity: string): string {
    switch (severity) {
      case 'error':
        return this.trans.__('error');
      case 'warning':
        return this.trans.__('warning');
      default:
        return this.trans.__('info');
    }
  }

  private markEditors(analysis: IAnalysis): void {
    const panel = this.notebook;
    if (!panel) {
      return;
    }
    const marks = lineMarks(analysis);
    panel.content.widgets.forEach((cell, index) => {
      if (cell.editor instanceof CodeMirrorEditor) {
        showMarks(cell.editor, marks.get(index) ?? []);
      }
    });
  }

  // ----------------------------------------------------------------------------- simulation

  private async simulate(): Promise<void> {
    const panel = this.notebook;
    if (!panel || !panel.content.model || this.job) {
      return;
    }
    this.simulation.replaceChildren(element('div', {}, this.trans.__('starting the simulated ranks...')));
    try {
      const { id } = await api.startSimulation(panel.content.model.toJSON(), panel.context.path, this.ranks());
      this.job = id;
      this.stopButton.disabled = false;
      this.simulateButton.disabled = true;
      await this.poll(id);
    } catch (error) {
      this.simulation.replaceChildren(element('div', { class: 'npu-error' }, this.trans.__('simulation failed: %1', (error as Error).message)));
    }
  }

  private async poll(id: string): Promise<void> {
    while (this.job === id) {
      const job = await api.simulation(id);
      this.drawJob(job);
      if (job.state === 'done' || job.state === 'failed' || job.state === 'stopped') {
        break;
      }
      await new Promise(resolve => setTimeout(resolve, POLL_MS));
    }
    if (this.job === id) {
      this.job = null;
    }
    this.stopButton.disabled = true;
    this.simulateButton.disabled = false;
  }

  private async stop(): Promise<void> {
    const id = this.job;
    if (!id) {
      return;
    }
    await api.stopSimulation(id);
    const job = await api.simulation(id);
    this.job = null;
    this.drawJob(job);
  }

  private drawJob(job: api.IJob): void {
    const progress = element('progress', { max: String(Math.max(job.cells_total, 1)), value: String(job.cells_done) });
    const parts: HTMLElement[] = [
      element('div', { class: 'npu-job-state', 'data-state': job.state }, this.trans._n(
          '%2: %3/%4 cells on %1 rank',
          '%2: %3/%4 cells on %1 ranks',
          job.ranks,
          this.stateWord(job.state),
          job.cells_done,
          job.cells_total
        )),
      progress
    ];
    for (const rank of Object.keys(job.output).sort((a, b) => Number(a) - Number(b))) {
      const details = element('details', { class: 'npu-rank' }, element('summary', {}, this.trans.__('rank %1', rank)), element('pre', {}, job.output[rank]));
      details.open = this.openRanks.has(rank); // redrawn every poll: keep what the user opened
      details.addEventListener('toggle', () => {
        if (details.open) {
          this.openRanks.add(rank);
        } else {
          this.openRanks.delete(rank);
        }
      });
      parts.push(details);
    }
    for (const message of job.messages) {
      parts.push(element('div', { class: 'npu-message' }, message));
    }
    parts.push(...this.failedCell(job));
    if (job.result) {
      // Above the checks: the table's evidence wraps tall in a narrow panel, and what proof mode cut
      // short qualifies every verdict below it.
      parts.push(...this.shortened(job.result.proof));
      const table = element('table', { class: 'npu-checks' });
      for (const [name, check] of Object.entries(job.result.check_details)) {
        table.append(
          element(
            'tr',
            { 'data-check': name },
            element('td', { class: 'npu-check-name' }, this.checkName(name)),
            element('td', {}, element('span', { class: `npu-check npu-check-${check.status}` }, checkWords(check.status, this.trans))),
            element('td', { class: 'npu-check-detail' }, check.detail)
          )
        );
      }
      parts.push(table);
    }
    this.simulation.replaceChildren(...parts);
  }

  /** What proof mode shortened, call by call (the server's words, in the lab's language). */
  private shortened(proof: NonNullable<api.IJob['result']>['proof']): HTMLElement[] {
    if (!proof || proof.shortened.length === 0) {
      return [];
    }
    const list = element('div', { class: 'npu-proof' }, element('div', {}, this.trans.__('proof mode (--full trains as written):')));
    for (const record of proof.shortened) {
      list.append(element('div', { class: 'npu-proof-call', 'data-cell': String(record.cell) }, record.text));
    }
    return [list];
  }

  /** The cell that failed on the ranks and, under it, whether it fails on one card too. */
  private failedCell(job: api.IJob): HTMLElement[] {
    const oneCard = job.one_card ?? job.result?.one_card ?? null;
    const failed = failedCellLine(job.result?.cells ?? [], this.trans);
    const cell = failed?.cell ?? oneCard?.cell;
    if (cell === undefined) {
      return [];
    }
    const parts = [element('div', { class: 'npu-failed-cell', 'data-cell': String(cell) }, failed?.text ?? this.trans.__('cell %1 failed', cell))];
    if (oneCard) {
      const { words, more } = oneCardLine(oneCard, this.trans);
      const line = element('div', { class: 'npu-one-card', 'data-status': oneCard.status, title: oneCard.detail }, words);
      if (more) {
        line.append(element('div', { class: 'npu-one-card-more' }, more));
      }
      parts.push(line);
    }
    return parts;
  }

  private stateWord(state: api.IJob['state']): string {
    switch (state) {
      case 'starting':
        return this.trans.__('starting');
      case 'running':
        return this.trans.__('running');
      case 'done':
        return this.trans.__('done');
      case 'failed':
        return this.trans.__('failed');
      default:
        return this.trans.__('stopped');
    }
  }

  /** A run-time check's name: the three steps in the user's words, others as the server says them. */
  private checkName(name: string): string {
    if (name === 'single_card_math') {
      return this.trans.__('single-card math');
    }
    return STEPS.includes(name) ? stepName(name, this.trans) : name;
  }
}
