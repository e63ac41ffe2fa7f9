"""The simulation job process's parts that need no cluster: its event stream, and how it refuses
input; the server's choice of the ranks' working directory."""

import json
import subprocess
import sys

from npu_migrate_nb.server.handlers import notebook_directory
from npu_migrate_nb.sim.job import RankSplitter


class Events:
    def __init__(self):
        self.events = []

    def emit(self, event):
        self.events.append(json.loads(json.dumps(event)))


TRACEBACK = "Traceback (most recent call last):\nValueError: x\n"


def test_rank_lines_become_output_events_and_the_others_messages():
    events = Events()
    splitter = RankSplitter(events, "stderr")
    splitter.write("[rank 0] Epoch 1/2\n[rank 0] 16/16 - loss: 0.7\n[rank 1] Epoch 1/2\n")
    splitter.write("rank 1 died during cell 3 (killed by SIGKILL)")  # print() writes the line, then its end
    splitter.write("\n")
    splitter.write("[ranks 0,1] Traceback (most recent call last):\n[ranks 0,1] ValueError: x\n[rank 2] [rank 9] \n")
    assert events.events == [
        {"event": "output", "rank": 0, "stream": "stderr", "text": "Epoch 1/2\n16/16 - loss: 0.7\n"},
        {"event": "output", "rank": 1, "stream": "stderr", "text": "Epoch 1/2\n"},
        {"event": "message", "text": "rank 1 died during cell 3 (killed by SIGKILL)"},
        {"event": "output", "rank": 0, "stream": "stderr", "text": TRACEBACK},
        {"event": "output", "rank": 1, "stream": "stderr", "text": TRACEBACK},
        {"event": "output", "rank": 2, "stream": "stderr", "text": "[rank 9] \n"},
    ]


def test_a_partial_line_waits_for_its_end_or_for_finish():
    events = Events()
    splitter = RankSplitter(events, "stdout")
    splitter.write("[rank 1] 3/16 ")
    splitter.flush()
    assert events.events == []
    splitter.write("- loss: 0.5\n[rank 1] tail")
    splitter.finish()
    assert [e["text"] for e in events.events] == ["3/16 - loss: 0.5\n", "tail\n"]


def run_job(*args):
    done = subprocess.run([sys.executable, "-m", "npu_migrate_nb.sim.job", *args], capture_output=True,
                          text=True, timeout=120, check=False)
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()]


def test_the_job_refuses_what_is_not_a_python_notebook_with_an_error_event(tmp_path):
    broken = tmp_path / "broken.ipynb"
    broken.write_text("{not json")
    code, events = run_job(str(broken), "--ranks", "2")
    assert code == 2
    assert events == [{"event": "error", "message": f"{broken}: invalid JSON at line 1 column 2: "
                                                    "Expecting property name enclosed in double quotes"}]
    r_notebook = tmp_path / "r.ipynb"
    r_notebook.write_text(json.dumps({"cells": [], "metadata": {"kernelspec": {"name": "ir", "language": "R"}},
                                      "nbformat": 4, "nbformat_minor": 5}))
    code, events = run_job(str(r_notebook))
    assert code == 2 and events == [{"event": "error", "message": "not a Python notebook (language 'R')"}]


def test_the_ranks_work_in_the_notebooks_directory_only_under_the_root(tmp_path):
    root = tmp_path / "root"
    (root / "project" / "data").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (root / "link").symlink_to(tmp_path / "outside")
    assert notebook_directory(str(root), "project/train.ipynb") == str((root / "project").resolve())
    assert notebook_directory(str(root), "/project/data/train.ipynb") == str((root / "project" / "data").resolve())
    assert notebook_directory(str(root), "train.ipynb") == str(root.resolve())
    for escaping in ("../outside/train.ipynb", "project/../../outside/x.ipynb", "link/train.ipynb",
                     "missing/train.ipynb", "project//x.ipynb"):
        assert notebook_directory(str(root), escaping) is None, escaping
    assert notebook_directory(None, "train.ipynb") is None
    assert notebook_directory(str(root), None) is None
