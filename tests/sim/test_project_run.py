"""Projects of the vendor's shapes (issue 36), single-card in, distributed out, proven on 2 ranks:

* tf2_guide: the TF2 guide's ResNet custom loop in miniature, a package run from its root (the main
  script makes the runnable, whose ``train_step`` calls ``grad_utils`` with the strategy's own SUM
  all-reduce, the data from ``imagenet_preprocessing.input_fn(input_context)``);
* tf1_zoo: the model zoo's TF1 shape (train.py + model.py + data.py, an Estimator, ``npu_bridge``).

``check`` finds the three steps missing, each in the file the guide edits; ``fix DIR -o OUT`` writes
them there; ``run ENTRY -n 2 -- ARGS`` catches the original and proves the copy; the copy still runs
on one card."""

import json
import os
import shutil
from pathlib import Path

import pytest

from sim_notebooks import cli  # same folder: on sys.path (rootdir-less sim tests)

pytestmark = pytest.mark.sim

PROJECTS = Path(__file__).parent / "data" / "projects"
GUIDE_MAIN = "official/vision/image_classification/resnet/resnet_ctl_imagenet_main.py"


def copied(name, tmp_path):
    """The project in a folder of its own: no marker above it makes its root elsewhere."""
    target = tmp_path / name
    shutil.copytree(PROJECTS / name, target)
    return target


def steps(code_out_err):
    code, out, err = code_out_err
    return code, json.loads(out)["checks"], err


@pytest.mark.parametrize("name, entry, arguments, edited", [
    ("tf2_guide", GUIDE_MAIN, ["--train_steps", "8"], {
        GUIDE_MAIN: "npu.distribute.broadcast(runnable.model.trainable_variables)",
        "official/staging/training/grad_utils.py": 'npu.distribute.all_reduce(grads, reduction="sum")',
        "official/vision/image_classification/resnet/imagenet_preprocessing.py": "shard_and_rebatch_dataset(dataset",
    }),
    ("tf1_zoo", "train.py", ["--steps", "8"], {
        "train.py": "hooks=npu_hooks_append()",
        "model.py": "npu_distributed_optimizer_wrapper(optimizer)",
        "data.py": ".shard(int(os.getenv('RANK_SIZE', '1'))",
    }),
])
def test_a_project_is_checked_fixed_in_its_files_and_proven_on_two_ranks(tmp_path, name, entry, arguments, edited):
    project = copied(name, tmp_path)
    arguments = arguments + (["--model_dir", str(tmp_path / "model")] if name == "tf1_zoo" else [])

    code, out, err = cli("check", str(project), "--format", "json", cwd=str(tmp_path))
    assert code == 1, err
    [analysis] = json.loads(out) if out.lstrip().startswith("[") else [json.loads(out)]
    assert analysis["steps"] == {"broadcast": "missing", "allreduce": "missing", "shard": "missing"}
    said_in = {os.path.relpath(os.path.join(tmp_path, f["path"]), project)  # paths as given: from the cwd
               for f in analysis["findings"] if f["code"].startswith("missing-")}
    assert said_in == set(edited), analysis["findings"]

    code, checks, err = steps(cli("run", str(project / entry), "-n", "2", "--format", "json", "--no-one-card",
                                  "--", *arguments, cwd=str(tmp_path)))
    if name == "tf1_zoo":
        # its ranks share one model_dir (its shared-model-dir finding): their checkpoint race may end the
        # run before a check is decided (CI saw all three not observed); caught all the same: no check
        # passes, and either one fails or the run names the race that ended it
        race_named = "every-rank-writes" in err and str(tmp_path / "model") in err
        assert code == 1 and "pass" not in checks.values(), err[-3000:]
        assert "fail" in checks.values() or race_named, err[-3000:]
    else:
        assert code == 1 and checks == {"broadcast": "fail", "allreduce": "fail", "shard": "fail"}, err[-3000:]

    fixed = tmp_path / "fixed"
    code, out, err = cli("fix", str(project), "-o", str(fixed), cwd=str(tmp_path))
    assert code == 0, err
    for path, text in edited.items():
        assert text in (fixed / path).read_text(), path
    assert (project / entry).read_text() == (PROJECTS / name / entry).read_text()  # the original is untouched

    code, checks, err = steps(cli("run", str(fixed / entry), "-n", "2", "--format", "json", "--", *arguments,
                                  cwd=str(tmp_path)))
    assert code == 0 and checks == {"broadcast": "pass", "allreduce": "pass", "shard": "pass"}, err[-3000:]

    code, out, err = cli("run", str(fixed / entry), "-n", "1", "--format", "json", "--", *arguments,
                         cwd=str(tmp_path))
    assert code == 0, err[-3000:]  # one card: every adapter call a no-op
