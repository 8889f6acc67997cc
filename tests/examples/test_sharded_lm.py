"""The sharded LM example (tiny config): on JAX's default Explicit 2x4 mesh, FSDP x tensor
parallel from logical names alone, its losses are the single-device run's and every device
holds an eighth of the parameters; two processes with 4 devices each train as one, and,
killed in the middle of a checkpoint save and started again, resume from their last
complete checkpoint with the losses of an uninterrupted run."""

import json
import os
import pathlib
import subprocess
import sys
import types
from typing import Any

import jax
import numpy as np
import pytest
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

import pytreemod as pm
from tests.helpers import kill_processes, start_workers, wait_for_processes

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "sharded_lm.py"
TINY = ["--steps", "4", "--layers", "1", "--width", "16", "--context", "8", "--batch", "4"]
MODULE = "tests.examples.test_sharded_lm"
TIMEOUT = 150  # seconds for the two workers together


def _example() -> types.ModuleType:
    if "sharded_lm" in sys.modules:
        return sys.modules["sharded_lm"]
    module = types.ModuleType("sharded_lm")
    module.__file__ = str(EXAMPLE)
    sys.modules["sharded_lm"] = module
    exec(compile(EXAMPLE.read_text(), str(EXAMPLE), "exec"), module.__dict__)
    return module


def _check_sharded_run(run: dict, devices: int) -> None:
    """Every one of this process's ``devices`` devices holds an eighth of the parameters."""
    assert run["total_bytes"] % 8 == 0
    assert run["per_device_bytes"] == {
        d.id: run["total_bytes"] // 8 for d in jax.local_devices()[:devices]
    }


@pytest.fixture(scope="module")
def tiny_runs() -> tuple[dict, str]:
    """The tiny config on the Explicit mesh, then on one device; and what it printed."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        runs = _example().main(TINY)
    return runs, out.getvalue()


def test_explicit_fsdp_tp_matches_one_device(tiny_runs: tuple[dict, str]) -> None:
    runs, out = tiny_runs
    sharded, single = runs["explicit"], runs["none"]
    assert len(sharded["losses"]) == 4
    np.testing.assert_allclose(sharded["losses"], single["losses"], rtol=1e-4)
    assert sharded["losses"][-1] < sharded["losses"][0]
    _check_sharded_run(sharded, 8)
    table = sharded["model"].embed.embedding.value.value  # after training: still sharded
    assert jax.typeof(table).sharding.mesh.axis_types == (AxisType.Explicit,) * 2
    assert table.sharding.spec == P("model", "data")
    moment = sharded["opt_state"][0].mu.blocks.mlp.up.kernel.value.value
    assert moment.sharding.spec == P(None, "data", "model")
    assert f"device 7: {sharded['total_bytes'] // 8} (8.00x less)" in out
    assert "largest relative difference from the one-device losses" in out


# ----------------------------------------------------------------- two processes
#
# Two processes with 4 devices each train the tiny config with a checkpoint every 2 steps
# (pm.CheckpointManager: a checksummed checkpoint directory per step, each process writing
# its own shards). The uninterrupted run is the reference; a second run is SIGKILLed (both
# processes) while it saves step 4, after step 2 is complete, and started again: it
# resumes from step 2 with the uninterrupted run's losses.

EVERY = 2  # steps between checkpoints
CHECKPOINTS = ["--checkpoint-every", str(EVERY), "--keep", "3"]


def _hang_in_second_save(folder: str, process_id: int) -> None:
    """Make the second checkpoint save stop once this process has written its shards (in
    the step's temporary folder), before the checkpoint is committed: it announces it
    with a file in ``folder`` and waits there to be killed."""
    import time

    from pytreemod import _checkpoint_dir

    hash_mine = _checkpoint_dir._hash_mine
    calls = []

    def hang(version_folder: str, arrays: dict[str, Any]) -> dict[str, str]:
        calls.append(version_folder)
        if len(calls) == 2:
            pathlib.Path(folder, f"hung{process_id}").touch()
            time.sleep(10 * TIMEOUT)  # killed before it wakes
        return hash_mine(version_folder, arrays)

    _checkpoint_dir._hash_mine = hang


def worker(process_id: int, port: int, folder: str, mode: str = "train") -> None:
    flags = ["--coordinator", f"127.0.0.1:{port}", "--num-processes", "2"]
    flags += ["--process-id", str(process_id), "--no-reference", *CHECKPOINTS]
    flags += ["--checkpoint-dir", os.path.join(folder, "run")]
    if mode == "hang":
        _hang_in_second_save(folder, process_id)
    run = _example().main([*TINY, *flags])["explicit"]
    _check_sharded_run(run, 4)
    result = {"losses": run["losses"], "first_step": run["first_step"]}
    result["devices"] = [jax.device_count(), jax.process_count()]
    with open(os.path.join(folder, f"worker{process_id}.json"), "w") as f:
        json.dump(result, f)


def _start(
    folder: pathlib.Path, cache: pathlib.Path | None, mode: str = "train"
) -> list[subprocess.Popen[bytes]]:
    """Two workers; with JAX's persistent compilation ``cache`` (most of a run is
    compiling its programs, the same in every run: the restarted run reads those of the
    uninterrupted one, which has finished writing them)."""
    env: dict[str, str] = {}
    if cache is not None:
        env["JAX_COMPILATION_CACHE_DIR"] = str(cache)
        env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
        env["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "-1"
    return start_workers(MODULE, folder, mode, env=env)


def _results(folder: pathlib.Path) -> list[dict]:
    return [json.loads((folder / f"worker{i}.json").read_text()) for i in range(2)]


def _steps(run: pathlib.Path) -> tuple[list[int], list[str]]:
    """The complete steps of a run folder (as ``pm.CheckpointManager`` lists them), and
    the names of the other entries in it (unfinished steps' temporary folders)."""
    with pm.CheckpointManager(run) as manager:
        steps = manager.all_steps()
    return steps, sorted(set(os.listdir(run)) - {str(s) for s in steps})


def _kill(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGKILL the process groups of ``procs``."""
    kill_processes(procs)
    for p in procs:
        assert p.stdout is not None
        p.stdout.close()


def _kill_when_hung(procs: list[subprocess.Popen[bytes]], folder: pathlib.Path) -> None:
    """Wait until both workers stop in their second save, then SIGKILL them (a worker
    that exits instead fails the test with its output)."""
    import time

    deadline = time.monotonic() + TIMEOUT
    try:
        while not all((folder / f"hung{i}").exists() for i in range(2)):
            if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
                wait_for_processes(procs, timeout=1)
                pytest.fail("the workers did not reach their second save")
            time.sleep(0.05)
    finally:
        _kill(procs)


def _uninterrupted_and_killed(tmp_path: pathlib.Path) -> tuple[list[dict], pathlib.Path]:
    """Two processes train the tiny config with checkpoints, uninterrupted, into
    ``tmp_path / "uninterrupted"`` (their results); meanwhile two more are SIGKILLed in
    their save of step 4 (their folder)."""
    folder, killed = tmp_path / "uninterrupted", tmp_path / "killed"
    folder.mkdir()
    killed.mkdir()
    procs = _start(folder, tmp_path / "jax-cache")
    try:
        # meanwhile, without the compilation cache (the other run is writing it)
        _kill_when_hung(_start(killed, None, "hang"), killed)
    except BaseException:
        _kill(procs)
        raise
    wait_for_processes(procs, timeout=TIMEOUT)
    return _results(folder), killed


def test_two_processes_train_as_one_and_resume_after_a_kill(
    tmp_path: pathlib.Path, tiny_runs: tuple[dict, str]
) -> None:
    """One test (its runs are shared, and the suite's workers must not start them twice)."""
    uninterrupted, killed = _uninterrupted_and_killed(tmp_path)
    single = tiny_runs[0]["explicit"]  # one process with 8 devices
    for result in uninterrupted:
        assert result["devices"] == [8, 2]
        assert result["first_step"] == 0
        np.testing.assert_allclose(result["losses"], single["losses"], rtol=1e-5)
    run = tmp_path / "uninterrupted" / "run"
    assert _steps(run) == ([2, 4], [])
    # each step holds a checkpoint directory (the arrays are split over the processes)
    assert (run / "4" / "model" / "checkpoint" / "CHECKPOINT").is_file()

    # The killed run: step 2 complete, step 4 cut off in its save.
    assert not (killed / "worker0.json").exists()  # killed before the end
    steps, others = _steps(killed / "run")
    assert steps == [2]  # step 4 was being written: not listed, not restored
    assert len(others) == 1 and others[0].startswith("4.")  # its unfinished folder

    # Started again: from step 2, with the uninterrupted run's losses.
    outputs = wait_for_processes(_start(killed, tmp_path / "jax-cache"), timeout=TIMEOUT)
    for out in outputs:
        assert "resuming from the checkpoint of step 2" in out
    reference = uninterrupted[0]["losses"]
    for result in _results(killed):
        assert result["first_step"] == 2
        np.testing.assert_allclose(result["losses"], reference[EVERY:], rtol=1e-6, atol=0)
    assert _steps(killed / "run") == ([2, 4], [])  # step 4 written again, in full


if __name__ == "__main__":
    if len(sys.argv) not in (4, 5):
        pytest.exit("usage: python -m tests.examples.test_sharded_lm ID PORT DIR [hang]")
    worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], *sys.argv[4:])
