"""run_distributed.sh with stand-ins: a ``python3`` that records its environment (and can fail or
wait), an ``hccn_tool`` that answers like the vendor's. Every rank's variables, the logs, a failing
rank, an interrupt, the rank table on one server and on two; and shellcheck's verdict."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from npu_migrate_nb.cli import main
from tests.conftest import interruptible
from npu_migrate_nb.sim.rank_env import rank_table

DATA = Path(__file__).resolve().parent.parent / "sim" / "data"
RANK_VARIABLES = ("RANK_SIZE", "RANK_ID", "DEVICE_ID", "ASCEND_DEVICE_ID", "RANK_TABLE_FILE", "JOB_ID")

# Records its environment and working directory; when it is rank $FAIL_RANK, fails once the others
# run; otherwise waits $SLEEP seconds with a child of its own (which stopping the rank must stop too).
STAND_IN_PYTHON = """#!/usr/bin/env bash
env | grep -E '^(RANK_SIZE|RANK_ID|DEVICE_ID|ASCEND_DEVICE_ID|RANK_TABLE_FILE|JOB_ID|CM_WORKER_SIZE)=' > env.txt
echo "cwd=$PWD" >> env.txt
echo "rank $RANK_ID running $1, reading $(cat data.txt)"
echo "rank $RANK_ID" > written.txt
if [[ ${FAIL_RANK-} == "$RANK_ID" ]]; then
  for _ in {1..300}; do  # fail once the 7 others are running
    (($(find .. -name pids.txt | wc -l) >= 7)) && break
    sleep 0.1
  done
  echo "Traceback: rank $RANK_ID broke"
  exit 3
fi
sleep "${SLEEP-0}" &
echo "$$ $!" > pids.txt
wait
"""
STAND_IN_HCCN_TOOL = """#!/usr/bin/env bash
# hccn_tool -i DEVICE -ip -g, as on an Ascend server
echo "ipaddr:192.168.10.$(($2 + 100))"
echo "netmask:255.255.255.0"
"""


@pytest.fixture
def job(tmp_path):
    """An exported job (8 devices a server, 2 servers) and an environment with the stand-ins on PATH."""
    directory = tmp_path / "job"
    assert main(["export", str(DATA / "keras_fixed.ipynb"), "-o", str(directory), "--servers", "2"]) == 0
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("python3", STAND_IN_PYTHON), ("hccn_tool", STAND_IN_HCCN_TOOL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {key: value for key, value in os.environ.items() if key not in RANK_VARIABLES}
    env.update(PATH=f"{bin_dir}:{os.environ['PATH']}", CM_WORKER_SIZE="4", GRACE_SECONDS="5")
    return directory, env


def launch(directory, env, *args, **extra_env):
    return subprocess.run(["bash", str(directory / "run_distributed.sh"), *args], capture_output=True, text=True,
                          env=dict(env, **extra_env), timeout=120)


def rank_environment(directory, rank):
    lines = (directory / f"rank_{rank}" / "env.txt").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines)


def test_one_server_of_eight_gives_every_rank_its_variables_and_writes_the_rank_table(job):
    directory, env = job
    done = launch(directory, env, "--servers", "1", "--server-ip", "10.1.2.3")
    assert done.returncode == 0, done.stderr
    table_path = str(directory / "rank_table.json")
    for rank in range(8):
        assert rank_environment(directory, rank) == {
            "RANK_SIZE": "8", "RANK_ID": str(rank), "DEVICE_ID": str(rank), "ASCEND_DEVICE_ID": str(rank),
            "RANK_TABLE_FILE": table_path, "JOB_ID": "10087", "cwd": str(directory / f"rank_{rank}"),
        }  # CM_WORKER_SIZE, an error next to RANK_SIZE for the real adapter, is gone
    table = json.loads(Path(table_path).read_text())
    assert table["server_list"][0]["server_id"] == "10.1.2.3"
    assert [device["device_ip"] for device in table["server_list"][0]["device"]] == [
        f"192.168.10.{100 + device}" for device in range(8)]  # from hccn_tool
    simulator_layout = rank_table(8)
    for device in simulator_layout["server_list"][0]["device"]:
        device["device_ip"] = f"192.168.10.{100 + int(device['device_id'])}"
    simulator_layout["server_list"][0]["server_id"] = "10.1.2.3"
    assert table == simulator_layout


def test_the_logs_land_where_the_readme_says(job):
    directory, env = job
    readme = (directory / "README.md").read_text()
    assert "rank_R/train.log" in readme and "bash run_distributed.sh --simulate" in readme
    (directory / "data.txt").write_text("the data\n")  # read by a relative path, as in the simulator
    assert launch(directory, env, "--servers", "1").returncode == 0
    for rank in range(8):
        assert (directory / f"rank_{rank}" / "train.log").read_text() == (
            f"rank {rank} running {directory}/train.py, reading the data\n")
        assert (directory / f"rank_{rank}" / "written.txt").read_text() == f"rank {rank}\n"  # its own
    assert not (directory / "written.txt").exists()


def test_server_one_of_two_runs_ranks_eight_to_fifteen_with_the_merged_table(job, tmp_path):
    directory, env = job
    for server in (0, 1):
        ips = tmp_path / f"ips{server}.txt"
        ips.write_text("# device IPs\n" + "".join(f"10.{server}.0.{device}\n" for device in range(8)))
        done = launch(directory, env, "--server-index", str(server), "--write-rank-table",
                      "--device-ips", str(ips), "--server-ip", f"10.9.9.{server}")
        assert done.returncode == 0, done.stderr
    parts = [str(directory / f"rank_table.server{server}.json") for server in (1, 0)]
    assert launch(directory, env, "--merge-rank-tables", *parts, PYTHON=sys.executable).returncode == 0
    merged = json.loads((directory / "rank_table.json").read_text())
    assert merged["server_count"] == "2" and [s["server_id"] for s in merged["server_list"]] == ["10.9.9.0", "10.9.9.1"]
    assert [d["rank_id"] for s in merged["server_list"] for d in s["device"]] == [str(r) for r in range(16)]
    assert merged["server_list"][1]["device"][2] == {"device_id": "2", "device_ip": "10.1.0.2", "rank_id": "10"}
    simulated = rank_table(16, 8)  # the simulator's table of the same job: the same layout
    assert [[(d["device_id"], d["rank_id"]) for d in s["device"]] for s in merged["server_list"]] == [
        [(d["device_id"], d["rank_id"]) for d in s["device"]] for s in simulated["server_list"]]
    assert merged.keys() == simulated.keys() and merged["server_count"] == simulated["server_count"]

    done = launch(directory, env, "--server-index", "1", "--rank-table", str(directory / "rank_table.json"))
    assert done.returncode == 0, done.stderr
    for device in range(8):
        variables = rank_environment(directory, 8 + device)
        assert (variables["RANK_ID"], variables["DEVICE_ID"], variables["ASCEND_DEVICE_ID"], variables["RANK_SIZE"]) \
            == (str(8 + device), str(device), str(device), "16")
        assert variables["RANK_TABLE_FILE"] == str(directory / "rank_table.json")
    assert not (directory / "rank_0").exists()


def test_several_servers_without_the_jobs_rank_table_are_refused(job):
    directory, env = job
    done = launch(directory, env, "--server-index", "1")
    assert done.returncode == 2 and "needs the job's rank table (--rank-table FILE)" in done.stderr
    assert not list(directory.glob("rank_*/"))


def test_no_device_ips_is_said_plainly(job, tmp_path):
    directory, env = job
    env = dict(env, PATH=f"{tmp_path / 'bin'}:/usr/bin:/bin")
    (tmp_path / "bin" / "hccn_tool").unlink()
    done = launch(directory, env, "--servers", "1")
    assert done.returncode == 2 and "no IP for device 0" in done.stderr and "--device-ips FILE" in done.stderr


def gone(pid):
    try:
        with open(f"/proc/{pid}/status") as status:
            return "\nState:\tZ" in status.read()
    except FileNotFoundError:
        return True


def started_pids(directory, ranks):
    pids = []
    for rank in ranks:
        pids += [int(pid) for pid in (directory / f"rank_{rank}" / "pids.txt").read_text().split()]
    return pids


def test_a_failing_rank_stops_the_others_and_the_exit_code_says_so(job):
    directory, env = job
    started = time.monotonic()
    done = launch(directory, env, "--servers", "1", FAIL_RANK="3", SLEEP="300")
    assert time.monotonic() - started < 60
    assert done.returncode == 3
    assert "rank 3 failed (exit status 3); stopping the other ranks" in done.stderr
    assert "Traceback: rank 3 broke" in done.stderr  # the tail of its log
    assert all(gone(pid) for pid in started_pids(directory, [0, 1, 2, 4, 5, 6, 7]))


def test_an_interrupt_stops_every_rank_and_leaves_no_process(job):
    directory, env = job
    process = subprocess.Popen(["bash", str(directory / "run_distributed.sh"), "--servers", "1"],
                               env=dict(env, SLEEP="300"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=interruptible)
    deadline = time.monotonic() + 60
    while not all((directory / f"rank_{rank}" / "pids.txt").exists() for rank in range(8)):
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.1)
    pids = started_pids(directory, range(8))
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130 and "interrupted: stopping every rank" in err
    assert all(gone(pid) for pid in pids)


def test_the_launch_script_is_shellcheck_clean(job):
    directory, _ = job
    done = subprocess.run(["shellcheck", str(directory / "run_distributed.sh")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout
