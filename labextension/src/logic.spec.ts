import {
  answerReplace,
  checkWords,
  debounce,
  english,
  failedCellLine,
  findingLink,
  findingLinkTitle,
  findingPlace,
  IAnalysis,
  ITrans,
  lineMarks,
  oneCardLine,
  oneCardWords,
  planApply,
  statusWords,
  stepName
} from './logic';

const ONE_CARD_WORDS = oneCardWords();

/** A translator as JupyterLab's: a catalog of msgid -> translation, ``%1`` filled after (the count first in plurals). */
function translator(catalog: { [msgid: string]: string }): ITrans {
  const fill = (text: string, args: unknown[]) => text.replace(/%(\d+)/g, (_, i) => String(args[Number(i) - 1]));
  return {
    __: (msgid, ...args) => fill(catalog[msgid] ?? msgid, args),
    _n: (msgid, plural, n, ...args) => fill(catalog[msgid] ?? (n === 1 ? msgid : plural), [n, ...args])
  };
}

const analysis = (over: Partial<IAnalysis>): IAnalysis => ({
  path: 'nb.ipynb',
  language: 'python',
  framework: 'keras',
  adapter: 'npu_device',
  steps: { broadcast: 'missing', allreduce: 'present', shard: 'not-applicable' },
  findings: [],
  errors: [],
  ...over
});

const finding = (cell: number, line: number, endLine: number, severity: 'error' | 'warning' | 'info', code: string) => ({
  code,
  step: null,
  severity,
  cell,
  line,
  column: 1,
  end_line: endLine,
  end_column: 5,
  message: `${code} here`,
  fix: null
});

describe('planApply', () => {
  it('writes every cell the fix changed when nothing changed since the analysis', () => {
    const analyzed = ['a', 'b', 'c'];
    expect(planApply(['a', 'b', 'c'], analyzed, ['a', 'B', 'C'])).toEqual({
      writes: [
        { index: 1, text: 'B' },
        { index: 2, text: 'C' }
      ],
      stale: []
    });
  });

  it('writes nothing when a cell it would change was edited meanwhile', () => {
    expect(planApply(['a', 'b edited', 'c'], ['a', 'b', 'c'], ['a', 'B', 'c'])).toEqual({ writes: [], stale: [1] });
  });

  it('ignores edits in cells the fix does not touch', () => {
    expect(planApply(['a edited', 'b'], ['a', 'b'], ['a', 'B']).writes).toEqual([{ index: 1, text: 'B' }]);
  });

  it('treats added or removed cells as a stale analysis', () => {
    const plan = planApply(['a', 'b', 'new'], ['a', 'b'], ['A', 'b']);
    expect(plan.writes).toEqual([]);
    expect(plan.stale).toEqual([0, 1]);
  });
});

describe('lineMarks', () => {
  it('marks every line of a finding, per cell, joining messages and keeping the worst severity', () => {
    const marks = lineMarks(
      analysis({
        findings: [finding(2, 3, 4, 'warning', 'double-step-division'), finding(2, 4, 4, 'error', 'missing-broadcast')],
        errors: [{ cell: 5, line: 1, column: 9, message: 'syntax error' }]
      })
    );
    expect(marks.get(2)).toEqual([
      { line: 3, severity: 'warning', message: 'double-step-division here [double-step-division]' },
      { line: 4, severity: 'error', message: 'double-step-division here [double-step-division]\nmissing-broadcast here [missing-broadcast]' }
    ]);
    expect(marks.get(5)).toEqual([{ line: 1, severity: 'error', message: 'syntax error' }]);
    expect(marks.has(0)).toBe(false);
  });

  it('marks no cell for a finding in one of the notebook\'s own modules, and names its file', () => {
    const inModule = { ...finding(0, 3, 3, 'error', 'missing-allreduce'), cell: null, path: 'model.py' };
    const marks = lineMarks(analysis({ findings: [inModule, finding(1, 2, 2, 'error', 'missing-shard')] }));
    expect([...marks.keys()]).toEqual([1]);
    expect(findingPlace(inModule)).toBe('model.py line 3');
    expect(findingPlace(finding(1, 2, 2, 'error', 'missing-shard'))).toBe('cell 1 line 2');
  });
});

describe('findingLink', () => {
  const base = finding(1, 2, 2, 'error', 'missing-shard');

  it("links a finding to its code's page when the server gave one", () => {
    const url = 'https://npu-migrate-nb.readthedocs.io/en/latest/codes/missing-shard/';
    expect(findingLink({ ...base, url })).toBe(url);
    expect(findingLink({ ...base, url: 'file:///home/me/site/codes/missing-shard/' })).toBe('file:///home/me/site/codes/missing-shard/');
    expect(findingLinkTitle(base)).toBe('what missing-shard means, in the documentation');
    expect(findingLinkTitle(base, translator({ 'what %1 means, in the documentation': '文档中 %1 的含义' }))).toBe(
      '文档中 missing-shard 的含义'
    );
  });

  it('gives no link without a url (an older server) or with one the panel must not open', () => {
    expect(findingLink(base)).toBeNull();
    expect(findingLink({ ...base, url: '' })).toBeNull();
    expect(findingLink({ ...base, url: 'javascript:alert(1)' })).toBeNull();
  });
});

describe('answerReplace', () => {
  const request = { action: 'replace-cell' as const, request: '7', cell_id: 'abc', expected: 'x = 1\n', source: 'x = 2\n' };

  it('replaces a cell that still reads what was analyzed (a trailing newline aside)', () => {
    expect(answerReplace(request, 'x = 1')).toEqual({ write: true, reply: { action: 'replaced', request: '7', ok: true } });
  });

  it('refuses a cell that changed, and a cell that is gone, saying why', () => {
    const changed = answerReplace(request, 'x = 10');
    expect(changed.write).toBe(false);
    expect(changed.reply.reason).toMatch(/changed since it was analyzed/);
    expect(answerReplace(request, undefined).reply).toEqual({
      action: 'replaced',
      request: '7',
      ok: false,
      reason: 'the cell is no longer in the notebook'
    });
  });
});

describe('statusWords and debounce', () => {
  it('says the statuses in the words users know', () => {
    expect(['missing', 'present', 'not-applicable', 'unknown'].map(s => statusWords(s as any))).toEqual([
      'missing',
      'present',
      'not applicable',
      'unknown'
    ]);
  });

  it('says every word through the translator it is given', () => {
    const zh = translator({
      missing: '缺失',
      'not applicable': '不适用',
      'not observed': '未观测到',
      'variable broadcast (变量广播)': '变量广播',
      'cell %1 line %2': '单元格 %1 第 %2 行',
      'cell %2 failed on rank %3: %4': '单元格 %2 在 rank %3 上失败：%4'
    });
    expect(statusWords('missing', zh)).toBe('缺失');
    expect(statusWords('not-applicable', zh)).toBe('不适用');
    expect(checkWords('not-observed', zh)).toBe('未观测到');
    expect(stepName('broadcast', zh)).toBe('变量广播');
    expect(stepName('broadcast', english)).toBe('variable broadcast (变量广播)');
    expect(findingPlace(finding(1, 2, 2, 'error', 'missing-shard'), zh)).toBe('单元格 1 第 2 行');
    const both = [{ cell: 3, status: 'error' as const, ranks: [{ rank: 0, error: 'E: a' }, { rank: 1, error: 'E: b' }] }];
    expect(failedCellLine(both, zh)?.text).toBe('单元格 3 在 rank 0,1 上失败：E: a');
    expect(failedCellLine(both)?.text).toBe('cell 3 failed on ranks 0,1: E: a');
  });

  it('calls once after the edits stop', () => {
    jest.useFakeTimers();
    const calls: number[] = [];
    const later = debounce((n: number) => calls.push(n), 100);
    later(1);
    jest.advanceTimersByTime(50);
    later(2);
    jest.advanceTimersByTime(99);
    expect(calls).toEqual([]);
    jest.advanceTimersByTime(1);
    expect(calls).toEqual([2]);
    jest.useRealTimers();
  });
});

describe('the one-card verdict and the cell that stopped the run', () => {
  it('says each status in the words of one table, with what the rerun saw', () => {
    expect(
      oneCardLine({ cell: 3, status: 'fails', detail: 'fails on one card too: not a distribution problem (cell 3: RuntimeError: f(x) broke)' })
    ).toEqual({ words: 'fails on one card too: not a distribution problem', more: 'cell 3: RuntimeError: f(x) broke' });
    expect(oneCardLine({ cell: 1, status: 'runs', detail: 'runs on one card: the distributed run breaks it (cells up to 1 ran at rank size 1)' })).toEqual({
      words: ONE_CARD_WORDS.runs,
      more: 'cells up to 1 ran at rank size 1'
    });
    expect(oneCardLine({ cell: 1, status: 'unknown', detail: 'not known: the one-card rerun up to cell 1 did not finish within 60 s' })).toEqual({
      words: ONE_CARD_WORDS.unknown,
      more: 'the one-card rerun up to cell 1 did not finish within 60 s'
    });
    expect(oneCardLine({ cell: 1, status: 'running', detail: 'rerunning the cells up to cell 1 on one card (at most 60 s)' }).more).toBe('');
  });

  it('names the cell that stopped the run, its ranks and the last line of their error, or the runner\'s message', () => {
    const cells = [
      { cell: 0, status: 'ok' as const, ranks: [] },
      { cell: 1, status: 'error' as const, ranks: [{ rank: 0, error: null }, { rank: 1, error: 'Traceback\n  ...\nValueError: only rank 1\n' }] },
      { cell: 2, status: 'skipped' as const, message: 'not run: cell 1 failed' }
    ];
    expect(failedCellLine(cells)).toEqual({ cell: 1, text: 'cell 1 failed on rank 1: ValueError: only rank 1' });
    expect(failedCellLine([{ cell: 4, status: 'timeout', message: 'timed out after 4 s: rank 0 waits in all_reduce #0' }])).toEqual({
      cell: 4,
      text: 'cell 4 failed: timed out after 4 s: rank 0 waits in all_reduce #0'
    });
    expect(failedCellLine(cells.slice(0, 1))).toBeNull();
  });
});
