/** The server extension's REST endpoints (npu_migrate_nb/server). */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { IAnalysis, ICellResult, IFinding, IOneCard } from './logic';

export interface IFixResult {
  notebook: { cells: Array<{ source: string | string[] }> };
  changed_cells: number[];
  findings: IFinding[];
  applied: string[];
}

export interface ICheck {
  name: string;
  status: 'pass' | 'fail' | 'not-observed' | 'not-applicable';
  detail: string;
  cell: number | null;
}

export interface IJob {
  id: string;
  state: 'starting' | 'running' | 'done' | 'failed' | 'stopped';
  ranks: number;
  cells_total: number;
  cells_done: number;
  current_cell: number | null;
  output: { [rank: string]: string };
  messages: string[];
  progress?: { [rank: string]: { [key: string]: unknown } };
  one_card?: IOneCard | null; // after a cell failed on the ranks: the one-card rerun, running or its verdict
  result: {
    ok: boolean;
    checks: { [name: string]: string };
    check_details: { [name: string]: ICheck };
    cells?: ICellResult[];
    one_card?: IOneCard | null;
    // proof mode: the training calls it shortened (null when trained as written)
    proof?: { steps: number; shortened: Array<{ cell: number; text: string; ran_as_written: string }> } | null;
  } | null;
}

let language = 'en';

/** The lab's language (``translator.languageCode``): the server answers in it. */
export function setLanguage(code: string): void {
  language = code || 'en';
}

export async function requestAPI<T>(endpoint: string, init: RequestInit = {}): Promise<T> {
  const settings = ServerConnection.makeSettings();
  const url = URLExt.join(settings.baseUrl, 'npu-migrate', endpoint) + URLExt.objectToQueryString({ lang: language });
  const response = await ServerConnection.makeRequest(url, init, settings);
  const text = await response.text();
  let data: any = text;
  try {
    data = text ? JSON.parse(text) : {};
  } catch {
    // not JSON: keep the text for the message
  }
  if (!response.ok) {
    const message = (data && data.message) || text || response.statusText;
    throw new Error(`${response.status}: ${message}`);
  }
  return data as T;
}

function post<T>(endpoint: string, body: unknown): Promise<T> {
  return requestAPI<T>(endpoint, { method: 'POST', body: JSON.stringify(body) });
}

export function analyze(notebook: unknown, path: string): Promise<IAnalysis> {
  return post<IAnalysis>('analyze', { notebook, path });
}

export function fix(notebook: unknown, codes?: string[]): Promise<IFixResult> {
  return post<IFixResult>('fix', codes ? { notebook, codes } : { notebook });
}

export function startSimulation(notebook: unknown, path: string, ranks: number): Promise<{ id: string }> {
  return post<{ id: string }>('simulate', { notebook, path, ranks });
}

export function simulation(id: string): Promise<IJob> {
  return requestAPI<IJob>(`simulate/${id}`);
}

export function stopSimulation(id: string): Promise<unknown> {
  return requestAPI<unknown>(`simulate/${id}`, { method: 'DELETE' });
}
