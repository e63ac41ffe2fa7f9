"""The cluster magics in a real kernel driven through jupyter_client: ranks started from the notebook,
cells run on them statefully, checks, faults and the stop button, and no process left behind."""

import json
import os
import signal
import time

import psutil
import pytest

from .kernel import Kernel, new_cell_id

pytestmark = pytest.mark.sim
DATA = os.path.join(os.path.dirname(__file__), os.pardir, "sim", "data")


def code_cells(name):
    with open(os.path.join(DATA, name), encoding="utf-8") as stream:
        notebook = json.load(stream)
    return ["".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "code"]


@pytest.fixture
def kernel():
    kernel = Kernel(extra_env={"NPU_MIGRATE_NB_WIDGETS": "0"})
    yield kernel
    pid = kernel.pid
    kernel.shutdown()
    assert not _descendants_alive(pid)


def _descendants(pid):
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _descendants_alive(pid, wait=5.0):
    """Processes the kernel started that are still alive after ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while True:
        alive = [p for p in _descendants(pid) if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def run(kernel, code, status="ok", timeout=300):
    execution = kernel.execute(code, cell_id=new_cell_id(), timeout=timeout)
    assert execution.status == status, execution.text()
    return execution


def checks_of(text):
    found = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] in ("broadcast", "allreduce", "shard"):
            found[words[0]] = words[1]
    return found


def test_cells_share_state_on_the_ranks_and_a_fixed_keras_notebook_passes_the_checks(kernel):
    run(kernel, "%load_ext npu_migrate_nb")
    started = run(kernel, "%npu_cluster start -n 2")
    assert "simulated cluster: 2 ranks" in started.text() and "rank 1: idle" in started.text()
    outputs = [run(kernel, "%%npu_distribute --run\n" + cell) for cell in code_cells("keras_fixed.ipynb")]
    last = outputs[-1].text()
    assert "[rank 0] loss" in last and "[rank 1] loss" in last  # the model of the earlier cells, on each rank
    assert checks_of(last) == {"broadcast": "pass", "allreduce": "pass", "shard": "pass"}, last
    assert "(cell 5, keras fit)" in last  # cells are named by their execution count
    pulled = run(kernel, "import npu_migrate_nb\nprint(npu_migrate_nb.pull(\"round(history.history['loss'][-1], 4)\"))")
    losses = [line.split()[-1] for line in last.splitlines() if line.startswith("[rank ") and " loss " in line]
    assert pulled.stream().strip() == "[" + ", ".join(losses) + "]", (pulled.text(), losses)
    status = run(kernel, "%npu_cluster status").text()
    assert "cells run on the ranks: 3 ok, 4 ok, 5 ok" in status  # pull runs no cell
    assert checks_of(run(kernel, "%npu_cluster checks").text())["shard"] == "pass"
    assert "checks reset" in run(kernel, "%npu_cluster checks --reset").text()
    assert set(checks_of(run(kernel, "%npu_cluster checks").text()).values()) == {"not-observed"}
    again = run(kernel, "%%npu_distribute --run\nhistory = model.fit(dataset, epochs=1, verbose=0)").text()
    assert checks_of(again)["allreduce"] == "pass", again  # judged afresh, on the ranks' state as it was
    rank_pids = [p.pid for p in _descendants(kernel.pid)]
    assert len(rank_pids) >= 4  # controller, mpiexec, two ranks (and hydra)
    assert "stopped the simulated cluster (2 ranks)" in run(kernel, "%npu_cluster stop").text()
    assert not _descendants_alive(kernel.pid)
    assert "no simulated cluster is running" in run(kernel, "%npu_cluster status").text()


def test_an_unfixed_keras_notebook_fails_shard_and_the_kernel_stays_usable(kernel):
    run(kernel, "%load_ext npu_migrate_nb")
    for cell in code_cells("keras_single.ipynb"):
        last = run(kernel, "%%npu_distribute --run -n 2\n" + cell)  # --run starts 2 ranks by itself
    checks = checks_of(last.text())
    assert checks["shard"] == "fail" and checks["broadcast"] == "fail", last.text()
    assert "npu.distribute.shard_and_rebatch_dataset" in last.text()
    assert run(kernel, "print(6 * 7)").stream().strip() == "42"


def test_the_stop_button_during_a_collective_one_rank_skips_stops_every_rank(kernel):
    run(kernel, "%load_ext npu_migrate_nb")
    run(kernel, "%npu_cluster start -n 2")
    run(kernel, "%%npu_distribute --run\nimport os\nimport tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()")
    stuck = "%%npu_distribute --run\nif os.environ['RANK_ID'] == '0':\n    npu.distribute.all_reduce([tf.ones(3)])\n"
    pressed = []

    def press_stop_once_waiting(message):
        if not pressed and message["msg_type"] == "status" and message["content"]["execution_state"] == "busy":
            pressed.append(time.monotonic())

    kernel.client.shell_channel.send(kernel.client.session.msg("execute_request", {
        "code": stuck, "silent": False, "store_history": True, "user_expressions": {}, "allow_stdin": False,
        "stop_on_error": True}))
    time.sleep(4.0)  # rank 0 is now waiting in the all-reduce rank 1 skipped
    kernel.interrupt()
    execution_messages = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        execution_messages += kernel.pump()
        if any(m["msg_type"] == "error" for m in execution_messages):
            break
        time.sleep(0.05)
    text = "".join(m["content"].get("text", "") for m in execution_messages if m["msg_type"] == "stream")
    errors = [m["content"] for m in execution_messages if m["msg_type"] == "error"]
    assert errors and errors[0]["ename"] == "KeyboardInterrupt", execution_messages
    assert "interrupted during cell" in text and "stopped all 2 ranks" in text, text
    kernel.settle(1.0)
    assert not _descendants_alive(kernel.pid)
    assert run(kernel, "print('still here')").stream().strip() == "still here"
    refused = run(kernel, "%%npu_distribute --run\nprint(1)", status="error")
    assert "the ranks were stopped at cell 4 (interrupted)" in refused.text(), refused.text()


def test_a_rank_that_dies_is_named_and_the_others_are_stopped(kernel):
    run(kernel, "%load_ext npu_migrate_nb")
    run(kernel, "%npu_cluster start -n 2")
    died = run(kernel, "%%npu_distribute --run --no-one-card\nimport os, time\nprint('rank', os.environ['RANK_ID'], 'ready', flush=True)\n"
                       "time.sleep(0.5)\nif os.environ['RANK_ID'] == '1':\n    os._exit(3)\ntime.sleep(60)", status="error")
    text = died.text()
    assert "rank 1 died during cell" in text and "Stopped the other ranks (0)" in text, text
    assert "rank 1 ready" in text
    assert not _descendants_alive(kernel.pid)
    assert run(kernel, "print('usable')").stream().strip() == "usable"


def test_start_replay_moves_the_cells_run_so_far_to_new_ranks_and_autorun_sends_every_cell(kernel):
    run(kernel, "%load_ext npu_migrate_nb")
    run(kernel, "import os\nanswer = 41")
    run(kernel, "answer += 1")
    run(kernel, "%%npu_distribute --check\nanswer += 100")  # never ran: not replayed
    replayed = run(kernel, "%npu_cluster start -n 2 --replay")
    assert "replaying 2 cell(s) on the ranks" in replayed.text()
    shown = run(kernel, "%%npu_distribute --run\nprint('rank', os.environ['RANK_ID'], answer)")
    assert "[rank 0] rank 0 42" in shown.text() and "[rank 1] rank 1 42" in shown.text()
    run(kernel, "%npu_cluster autorun on")
    auto = run(kernel, "print('auto', os.environ['RANK_SIZE'])")
    assert "[rank 0] auto 2" in auto.text() and "[rank 1] auto 2" in auto.text()
    run(kernel, "%npu_cluster autorun off")
    here = run(kernel, "print('here', os.environ.get('RANK_SIZE'))")
    assert here.stream().strip() == "here None"
    # Restart with 4 ranks: state is replayed there too.
    run(kernel, "%npu_cluster restart -n 4 --replay")
    four = run(kernel, "%%npu_distribute --run\nprint('four', answer)")
    assert sum(f"[rank {r}] four 42" in four.text() for r in range(4)) == 4, four.text()
    mismatch = run(kernel, "%%npu_distribute --run -n 2\nprint(1)", status="error")
    assert "has 4 ranks, not 2" in mismatch.text()
    run(kernel, "%unload_ext npu_migrate_nb")  # stops the cluster it started
    assert not _descendants_alive(kernel.pid)


def test_a_kernel_killed_outright_leaves_no_rank_behind():
    kernel = Kernel(extra_env={"NPU_MIGRATE_NB_WIDGETS": "0"})
    try:
        run(kernel, "%load_ext npu_migrate_nb")
        run(kernel, "%npu_cluster start -n 2")
        cluster = [p for p in _descendants(kernel.pid) if "watchdog" not in " ".join(p.cmdline())]
        assert len(cluster) >= 4
        os.killpg(kernel.pid, signal.SIGKILL)  # the kernel's process group: no atexit, no cleanup
        _, alive = psutil.wait_procs(cluster, timeout=15)
        assert not [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], alive
    finally:
        kernel.shutdown()


def _widget_states(kernel):
    opened = {m["content"]["comm_id"]: dict(m["content"]["data"]["state"]) for m in kernel.comm_opens
              if m["content"].get("target_name") == "jupyter.widget"}
    updates = {}
    for message in kernel.comm_msgs:
        content = message["content"]
        if content["comm_id"] in opened and content["data"].get("method") == "update":
            updates.setdefault(content["comm_id"], []).append(content["data"]["state"])
    return opened, updates


def _bar_values(bars, updates, rank):
    return [u["value"] for cid, states in updates.items() if bars.get(cid, {}).get("description") == f"rank {rank}"
            for u in states if "value" in u]


def test_the_run_widget_shows_each_rank_progress_and_its_output_in_a_tab():
    kernel = Kernel()  # widgets on
    try:
        run(kernel, "%load_ext npu_migrate_nb")
        run(kernel, "%npu_cluster start -n 2")
        run(kernel, "%%npu_distribute --run\nimport os, time\nimport numpy as np\nimport tensorflow as tf\n"
                    "def slow(x):\n    time.sleep(0.03)\n    return x\n"
                    "x = np.random.rand(64, 4).astype('float32'); y = np.random.rand(64, 1).astype('float32')\n"
                    "ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)"
                    ".map(lambda a, b: (tf.py_function(slow, [a], tf.float32), b))\n"
                    "model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(4,))])\n"
                    "model.compile(optimizer='sgd', loss='mse')")
        run(kernel, "%%npu_distribute --run --full\nprint('rank', os.environ['RANK_ID'], 'fits')\n"
                    "history = model.fit(ds, epochs=2, verbose=0)")
        opened, updates = _widget_states(kernel)
        bars = {cid: s for cid, s in opened.items() if s.get("_model_name") == "IntProgressModel"}
        assert sorted(s["description"] for s in bars.values()) == ["rank 0", "rank 0", "rank 1", "rank 1"]
        texts = [u.get("value", "") for cid, states in updates.items() for u in states
                 if opened[cid].get("_model_name") == "HTMLModel"]
        for rank in (0, 1):
            values = _bar_values(bars, updates, rank)
            assert values and max(values) == 8, values  # 8 steps an epoch
        assert any("epoch 2/2" in text for text in texts), texts
        outputs = [u["outputs"] for cid, states in updates.items() if opened[cid].get("_model_name") == "OutputModel"
                   for u in states if "outputs" in u]
        shown = "".join(o.get("text", "") for batch in outputs for o in batch)
        assert "rank 0 fits" in shown and "rank 1 fits" in shown
        assert any("not-observed" in text or "pass" in text for text in texts)  # the checks

        # proof mode (the default): the bar counts toward the proof (2 steps + 1 more), not the written epochs
        kernel.comm_opens.clear()
        kernel.comm_msgs.clear()
        run(kernel, "%%npu_distribute --run\nhistory = model.fit(ds, epochs=2, verbose=0)")
        opened, updates = _widget_states(kernel)
        bars = {cid: s for cid, s in opened.items() if s.get("_model_name") == "IntProgressModel"}
        for rank in (0, 1):
            maxima = [u["max"] for cid, states in updates.items() if bars.get(cid, {}).get("description") == f"rank {rank}"
                      for u in states if "max" in u]
            assert maxima and max(maxima) == 3, maxima
            assert max(_bar_values(bars, updates, rank)) == 3
    finally:
        pid = kernel.pid
        kernel.shutdown()
        assert not _descendants_alive(pid)


def test_a_collective_one_rank_skips_times_out_naming_where_each_rank_is(kernel):
    run(kernel, "%load_ext npu_migrate_nb")
    run(kernel, "%npu_cluster start -n 2")
    run(kernel, "%%npu_distribute --run\nimport os\nimport tensorflow as tf\nimport npu_device as npu\nnpu.open().as_default()")
    stuck = run(kernel, "%%npu_distribute --run --timeout 4 --no-one-card\nif os.environ['RANK_ID'] == '0':\n"
                        "    npu.distribute.all_reduce([tf.ones(3)])\n", status="error")
    text = stuck.text()
    assert "timed out after 4 s: rank 0 waits in all_reduce #0 at line 3 of the cell" in text, text
    assert "rank(s) 1 finished the cell" in text and "Stopped all ranks." in text
    assert not _descendants_alive(kernel.pid)
    assert run(kernel, "print('usable')").stream().strip() == "usable"
