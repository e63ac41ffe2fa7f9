/**
 * What the panel decides, without JupyterLab: which cells an apply may write, which lines to mark,
 * how a comm request from the kernel is answered. Unit-tested with jest (logic.spec.ts).
 */

/**
 * What the panel says goes through JupyterLab's translator (``translator.load('npu_migrate_nb')``:
 * ``__`` with ``%1``-style arguments; ``_n`` for plurals, where, as in JupyterLab, ``%1`` is the count
 * and the arguments start at ``%2``); ``english`` is what it says without one.
 */
export interface ITrans {
  __(msgid: string, ...args: unknown[]): string;
  _n(msgid: string, msgidPlural: string, n: number, ...args: unknown[]): string;
}

function fill(text: string, args: unknown[]): string {
  return text.replace(/%(\d+)/g, (whole, index) => (Number(index) <= args.length ? String(args[Number(index) - 1]) : whole));
}

export const english: ITrans = {
  __: (msgid, ...args) => fill(msgid, args),
  _n: (msgid, msgidPlural, n, ...args) => fill(n === 1 ? msgid : msgidPlural, [n, ...args])
};

export type StepStatus = 'missing' | 'present' | 'not-applicable' | 'unknown';

export interface IFinding {
  code: string;
  step: string | null;
  severity: 'error' | 'warning' | 'info';
  cell: number | null; // null for a finding in one of the notebook's own modules (see path)
  line: number;
  column: number;
  end_line: number;
  end_column: number;
  message: string;
  fix: string | null;
  path?: string | null; // set when the finding is in a module the notebook imports
  url?: string; // the page of its code in the documentation (`<DOCS_URL>codes/<code>/`)
}

export interface ICellError {
  cell: number;
  line: number;
  column: number;
  message: string;
}

export interface IAnalysis {
  path: string;
  language: string;
  framework: string;
  adapter: string | null;
  steps: { [step: string]: StepStatus };
  reasons?: { [step: string]: string }; // why a step is not applicable or unknown
  findings: IFinding[];
  errors: ICellError[];
}

export const STEPS = ['broadcast', 'allreduce', 'shard'];

/** A step's name as the vendor's guides say it: in English with the Chinese beside it, in Chinese alone. */
export function stepName(step: string, trans: ITrans = english): string {
  switch (step) {
    case 'broadcast':
      return trans.__('variable broadcast (变量广播)');
    case 'allreduce':
      return trans.__('gradient aggregation (梯度聚合)');
    default:
      return trans.__('dataset sharding (数据集分片)');
  }
}

/** The words users know: missing, present, not applicable, unknown. */
export function statusWords(status: StepStatus | undefined, trans: ITrans = english): string {
  switch (status) {
    case 'missing':
      return trans.__('missing');
    case 'present':
      return trans.__('present');
    case 'not-applicable':
      return trans.__('not applicable');
    default:
      return trans.__('unknown');
  }
}

/** A run-time check's result: pass, fail, not observed, not applicable. */
export function checkWords(status: string, trans: ITrans = english): string {
  switch (status) {
    case 'pass':
      return trans.__('pass');
    case 'fail':
      return trans.__('fail');
    case 'not-observed':
      return trans.__('not observed');
    case 'not-applicable':
      return trans.__('not applicable');
    default:
      return status;
  }
}

/** Where a finding is: `cell 3 line 12`, or `model.py line 12` in one of the notebook's own modules. */
export function findingPlace(finding: IFinding, trans: ITrans = english): string {
  return finding.path
    ? trans.__('%1 line %2', finding.path, finding.line)
    : trans.__('cell %1 line %2', finding.cell, finding.line);
}

/**
 * The documentation page of a finding's code, when the server gave one the panel may open: an
 * `http:`, `https:` or `file:` address (never a `javascript:` one); null otherwise.
 */
export function findingLink(finding: IFinding): string | null {
  const url = finding.url;
  if (!url) {
    return null;
  }
  return /^(https?|file):\/\//i.test(url.trim()) ? url.trim() : null;
}

/** The title of a code's link: what it opens. */
export function findingLinkTitle(finding: IFinding, trans: ITrans = english): string {
  return trans.__('what %1 means, in the documentation', finding.code);
}

export interface IWrite {
  index: number;
  text: string;
}

export interface IApplyPlan {
  writes: IWrite[];
  /** Cells whose text changed since the analysis: nothing is written, the notebook is re-analyzed. */
  stale: number[];
}

/**
 * The cells to write: every cell the fix changed, provided that no cell changed since it was
 * analyzed (a fix computed on old text must not overwrite new text).
 */
export function planApply(current: string[], analyzed: string[], fixed: string[]): IApplyPlan {
  const changed: number[] = [];
  for (let index = 0; index < fixed.length; index++) {
    if (fixed[index] !== analyzed[index]) {
      changed.push(index);
    }
  }
  if (current.length !== analyzed.length) {
    return { writes: [], stale: analyzed.map((_, index) => index) }; // cells added or removed
  }
  const stale = changed.filter(index => current[index] !== analyzed[index]);
  if (stale.length) {
    return { writes: [], stale };
  }
  return { writes: changed.map(index => ({ index, text: fixed[index] })), stale: [] };
}

export interface ILineMark {
  line: number; // 1-based
  severity: string;
  message: string;
}

/** Per cell, the lines to mark, with the message shown on hover (several findings on a line are joined). */
export function lineMarks(analysis: IAnalysis): Map<number, ILineMark[]> {
  const byCell = new Map<number, Map<number, ILineMark>>();
  const add = (cell: number, line: number, severity: string, message: string) => {
    const lines = byCell.get(cell) ?? new Map<number, ILineMark>();
    byCell.set(cell, lines);
    const existing = lines.get(line);
    if (existing) {
      existing.message += '\n' + message;
      if (rank(severity) < rank(existing.severity)) {
        existing.severity = severity;
      }
    } else {
      lines.set(line, { line, severity, message });
    }
  };
  for (const error of analysis.errors) {
    add(error.cell, error.line, 'error', error.message);
  }
  for (const finding of analysis.findings) {
    if (finding.path || finding.cell === null) {
      continue; // in one of the notebook's own modules, not in a cell
    }
    const last = Math.max(finding.line, finding.end_line || finding.line);
    for (let line = finding.line; line <= last; line++) {
      add(finding.cell, line, finding.severity, `${finding.message} [${finding.code}]`);
    }
  }
  const result = new Map<number, ILineMark[]>();
  byCell.forEach((lines, cell) => {
    result.set(
      cell,
      Array.from(lines.values()).sort((a, b) => a.line - b.line)
    );
  });
  return result;
}

function rank(severity: string): number {
  return ['error', 'warning', 'info'].indexOf(severity);
}

/** A ``replace-cell`` request from the kernel (see npu_migrate_nb/frontend.py). */
export interface IReplaceRequest {
  action: 'replace-cell';
  request: string;
  cell_id: string;
  expected: string;
  source: string;
}

export interface IReplaceReply {
  action: 'replaced';
  request: string;
  ok: boolean;
  reason?: string;
}

/**
 * How to answer a replace-cell request, given the text of the cell with that id now (undefined when
 * no cell of the notebook has it). ``write`` is true when the cell may be replaced.
 */
export function answerReplace(
  request: IReplaceRequest,
  currentText: string | undefined,
  trans: ITrans = english
): { write: boolean; reply: IReplaceReply } {
  const reply = (ok: boolean, reason?: string): IReplaceReply =>
    reason === undefined
      ? { action: 'replaced', request: request.request, ok }
      : { action: 'replaced', request: request.request, ok, reason };
  if (currentText === undefined) {
    return { write: false, reply: reply(false, trans.__('the cell is no longer in the notebook')) };
  }
  if (trimEnd(currentText) !== trimEnd(request.expected)) {
    return {
      write: false,
      reply: reply(false, trans.__('the cell changed since it was analyzed: run it again'))
    };
  }
  return { write: true, reply: reply(true) };
}

function trimEnd(text: string): string {
  return text.replace(/\n+$/, '');
}

/** After a cell failed on the ranks: does it fail on one card too? (npu_migrate_nb/sim/one_card.py) */
export interface IOneCard {
  cell: number;
  status: 'running' | 'fails' | 'runs' | 'unknown';
  detail: string;
}

/** The panel's words for the one-card rerun, in one place (the server says the same words in its detail). */
export function oneCardWords(trans: ITrans = english): { [status in IOneCard['status']]: string } {
  return {
    running: trans.__('rerunning the cells up to it on one card, to see whether it fails there too...'),
    fails: trans.__('fails on one card too: not a distribution problem'),
    runs: trans.__('runs on one card: the distributed run breaks it'),
    unknown: trans.__('not known whether it fails on one card')
  };
}

/** The one-card line: the words of its status, and what the rerun saw (from the server's detail). */
export function oneCardLine(oneCard: IOneCard, trans: ITrans = english): { words: string; more: string } {
  const allWords = oneCardWords(trans);
  const words = allWords[oneCard.status] ?? allWords.unknown;
  const detail = (oneCard.detail ?? '').trim();
  if (oneCard.status === 'running') {
    return { words, more: '' };
  }
  if (detail.startsWith(words)) {
    const rest = detail.slice(words.length).trim(); // "(cell 3: ValueError: ...)"
    return { words, more: rest.startsWith('(') && rest.endsWith(')') ? rest.slice(1, -1) : rest };
  }
  const notKnown = trans.__('not known:');
  return { words, more: detail.startsWith(notKnown) ? detail.slice(notKnown.length).trim() : detail };
}

export interface ICellResult {
  cell: number;
  status: 'ok' | 'error' | 'timeout' | 'skipped';
  message?: string;
  ranks?: Array<{ rank: number; error?: string | null }>;
}

/** The cell that failed on the ranks, in one line: `cell 3 failed on rank 1: ValueError: ...`. */
export function failedCellLine(cells: ICellResult[], trans: ITrans = english): { cell: number; text: string } | null {
  const failed = cells.find(cell => cell.status === 'error' || cell.status === 'timeout');
  if (!failed) {
    return null;
  }
  const last = (text: string) => text.split('\n').map(line => line.trim()).filter(line => line).pop() ?? '';
  if (failed.message) {
    return { cell: failed.cell, text: trans.__('cell %1 failed: %2', failed.cell, last(failed.message)) };
  }
  const erred = (failed.ranks ?? []).filter(rank => rank.error);
  const ranks = erred.map(rank => rank.rank).join(',');
  if (!erred.length) {
    return { cell: failed.cell, text: trans.__('cell %1 failed: %2', failed.cell, failed.status) };
  }
  const error = last(erred[0].error as string);
  const text = trans._n('cell %2 failed on rank %3: %4', 'cell %2 failed on ranks %3: %4', erred.length, failed.cell, ranks, error);
  return { cell: failed.cell, text };
}

/** Call ``fn`` once ``wait`` ms have passed without another call. */
export function debounce<A extends unknown[]>(fn: (...args: A) => void, wait: number): (...args: A) => void {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return (...args: A) => {
    if (timer !== undefined) {
      clearTimeout(timer);
    }
    timer = setTimeout(() => {
      timer = undefined;
      fn(...args);
    }, wait);
  };
}
