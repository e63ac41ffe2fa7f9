"""How fast does the server extension answer ``POST npu-migrate/analyze`` after a one-cell edit?

A real ``jupyter server`` on 127.0.0.1 with a token and this extension, a 600-cell notebook (the
one ``bench_analysis.py`` builds): one analysis cold, then N times "change one cell, POST again", as
the side panel does while someone types. The analyzer's per-cell cache lives in the server process,
so only the changed cell is parsed again.

Measured: the handler's own time (``X-NPU-Analysis-Ms``: from the handler's start to the response
written, body parsing and serialization included; ``Server-Timing`` splits it), and end to end
(request sent to response parsed, on a kept-alive connection). Reference, in the same run: parsing
the same request body with ``json.loads``, and re-analysis after a one-cell edit in this process,
without a server (what ``bench_analysis.py`` measures).

Goal: <= 50 ms in the handler for the one-cell-changed case.

    python benchmarks/bench_server.py [--cells 600] [--repeat 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_analysis import make_notebook  # noqa: E402
from tests.jupyter_app import JupyterApp  # noqa: E402

GOAL_MS = 50.0


def server_timing(header: str) -> dict:
    parts = {}
    for item in header.split(","):
        name, _, duration = item.strip().partition(";dur=")
        parts[name] = float(duration)
    return parts


def analyze_over_http(server: JupyterApp, body: bytes):
    started = time.perf_counter()
    status, headers, data = server.request("POST", "/npu-migrate/analyze", body)
    answer = json.loads(data)
    end_to_end = (time.perf_counter() - started) * 1000
    if status != 200:
        raise SystemExit(f"analyze answered {status}: {data[:500]!r}")
    return float(headers["X-NPU-Analysis-Ms"]), server_timing(headers["Server-Timing"]), end_to_end, answer


def in_process_reanalysis(document: dict, target: int, repeat: int) -> float:
    """The same edits analyzed in this process, no server (cache warmed first): ms, median."""
    from npu_migrate_nb.analysis import analyze
    from npu_migrate_nb.notebook import loads_notebook

    notebook = loads_notebook(json.dumps(document))
    analyze(notebook)
    cell = next(cell for cell in notebook.cells if cell.index == target)
    times = []
    for n in range(repeat):
        cell.source = cell.source + f"\n# local edit {n}\n"
        started = time.perf_counter()
        analyze(notebook)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cells", type=int, default=600)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    document = make_notebook(args.cells)
    target = next(i for i, cell in enumerate(document["cells"])
                  if cell["cell_type"] == "code" and "compile" in cell["source"])
    original = document["cells"][target]["source"]
    with tempfile.TemporaryDirectory() as folder:
        server = JupyterApp(Path(folder), "server", enable_extension=True, log_level="WARN")
        try:
            started = time.perf_counter()
            body = json.dumps({"notebook": document, "path": "large.ipynb"}).encode()
            cold_handler, cold_parts, cold_end, answer = analyze_over_http(server, body)
            findings = len(answer["findings"])
            handler, end_to_end, reference, parts = [], [], [], []
            for n in range(args.repeat):
                document["cells"][target]["source"] = original + f"\n# edit {n}\n"  # one cell changed
                body = json.dumps({"notebook": document, "path": "large.ipynb"}).encode()
                t0 = time.perf_counter()
                json.loads(body)
                reference.append((time.perf_counter() - t0) * 1000)
                ms, timing, e2e, _ = analyze_over_http(server, body)
                handler.append(ms)
                parts.append(timing)
                end_to_end.append(e2e)
            elapsed = time.perf_counter() - started
        finally:
            server.stop()
    local = in_process_reanalysis(make_notebook(args.cells), target, args.repeat)
    code_cells = sum(1 for cell in document["cells"] if cell["cell_type"] == "code")
    ref = statistics.median(reference)
    med = statistics.median(handler)
    e2e = statistics.median(end_to_end)

    def part(name: str) -> float:
        return statistics.median(p.get(name, 0.0) for p in parts)

    print(f"server: POST npu-migrate/analyze, {args.cells} cells ({code_cells} code, {findings} findings), "
          f"body {len(body) / 1024:.0f} KB; medians of {args.repeat} one-cell edits ({elapsed:.1f} s in all)")
    print(f"  {'measure':52} {'ms':>9} {'vs ref':>8}")
    print(f"  {'reference: json.loads of the request body':52} {ref:9.2f} {1.0:7.2f}x")
    print(f"  {'reference: analyze() after the edit, in process':52} {local:9.2f} {local / ref:7.2f}x")
    print(f"  {'handler, cold (first analysis of the notebook)':52} {cold_handler:9.1f} {cold_handler / ref:7.0f}x")
    print(f"  {'end to end, cold':52} {cold_end:9.1f} {cold_end / ref:7.0f}x")
    print(f"  {'handler, one cell changed':52} {med:9.2f} {med / ref:7.2f}x   (goal <= {GOAL_MS:.0f} ms: "
          f"{'met' if med <= GOAL_MS else 'NOT met'})")
    print(f"  {'  parse body + notebook':52} {part('parse'):9.2f}")
    print(f"  {'  analyze':52} {part('analyze'):9.2f}")
    print(f"  {'  serialize the answer':52} {part('serialize'):9.2f}")
    print(f"  {'end to end, one cell changed (keep-alive HTTP)':52} {e2e:9.2f} {e2e / ref:7.2f}x")
    print(f"  handler, one cell changed, all runs: {' '.join(f'{t:.1f}' for t in handler)}")


if __name__ == "__main__":
    main()
