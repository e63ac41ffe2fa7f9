"""The one-card rerun starts from the notebook's folder as it was before the ranks wrote in it: a
folder every rank makes (Keras' save-and-load tutorial, ``os.mkdir('training_2')``) fails on the
ranks, and ran on one card, where the ranks' own folder is not there (the rerun in the ranks' folder
said "fails on one card too", which was wrong)."""

import json
import os

import pytest

from npu_migrate_nb.sim.one_card import folder_as_before
from sim_notebooks import cli, write_notebook  # same folder: on sys.path (rootdir-less sim tests)

pytestmark = pytest.mark.sim


def test_the_scratch_folder_links_what_was_there_and_leaves_out_what_the_run_made(tmp_path):
    (tmp_path / "data.csv").write_text("1,2\n")
    (tmp_path / "inputs").mkdir()
    before = (str(tmp_path), frozenset(os.listdir(tmp_path)))
    (tmp_path / "training_2").mkdir()  # made by the ranks
    (tmp_path / "inputs" / "cache").write_text("")  # written into a folder that was there: kept
    scratch = folder_as_before(str(tmp_path), before)
    try:
        assert sorted(os.listdir(scratch)) == ["data.csv", "inputs"]
        with open(os.path.join(scratch, "data.csv")) as stream:
            assert stream.read() == "1,2\n"
        assert os.listdir(os.path.join(scratch, "inputs")) == ["cache"]
    finally:
        for name in os.listdir(scratch):
            os.unlink(os.path.join(scratch, name))
        os.rmdir(scratch)
    assert os.path.isdir(tmp_path / "training_2")  # the original folder is untouched


def test_a_folder_every_rank_makes_fails_on_the_ranks_and_runs_on_one_card(tmp_path):
    notebook = write_notebook(tmp_path / "mkdir.ipynb", ["import os, time", "os.mkdir('training_2')\ntime.sleep(1)"])
    code, out, err = cli("run", str(notebook), "-n", "2", "--format", "json", "--timeout", "120")
    result = json.loads(out)
    assert code == 1, err[-2000:]
    assert [cell["status"] for cell in result["cells"]] == ["ok", "error"], result["cells"]
    assert result["one_card"]["status"] == "runs", result["one_card"]
    assert sorted(os.listdir(tmp_path)) == ["mkdir.ipynb", "training_2"]  # the rerun wrote in its scratch folder
