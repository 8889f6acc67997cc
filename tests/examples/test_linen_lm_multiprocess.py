"""The LM example's sharded training step in two processes (4 CPU devices each,
``jax.distributed`` on loopback) gives the losses of one process with 8 devices, and the
Orbax checkpoint the two processes write restores in one process.

The test starts two copies of this file as workers (``python -m
tests.examples.test_linen_lm_multiprocess <id> <port> <folder>``); each runs the
example's ``main`` with ``--coordinator``. They are bounded in time, and their process
groups are killed if they overrun or the test fails.
"""

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
from safetensors.numpy import load_file

from tests.helpers import kill_processes, start_workers, wait_for_processes

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "linen_lm.py"
TINY = ["--steps", "3", "--layers", "2", "--width", "32", "--context", "16", "--batch", "8"]
TINY += ["--sample-len", "0", "--no-plot", "--no-bridge"]
TIMEOUT = 150  # seconds for the two workers together


def _example() -> types.ModuleType:
    if "linen_lm" in sys.modules:  # loaded by test_linen_lm in this process
        return sys.modules["linen_lm"]
    module = types.ModuleType("linen_lm")
    module.__file__ = str(EXAMPLE)
    sys.modules["linen_lm"] = module  # dataclasses look their module up by name
    exec(compile(EXAMPLE.read_text(), str(EXAMPLE), "exec"), module.__dict__)
    return module


def worker(process_id: int, port: int, folder: str) -> None:
    flags = ["--coordinator", f"127.0.0.1:{port}", "--num-processes", "2"]
    flags += ["--process-id", str(process_id), "--checkpoint", os.path.join(folder, "ckpt")]
    result = _example().main([*TINY, *flags])
    with open(os.path.join(folder, f"worker{process_id}.json"), "w") as f:
        json.dump({"losses": result["losses"], "devices": result["devices"]}, f)
    # The trained state in full (gathered from both processes), to compare the restore with.
    from jax.experimental import multihost_utils
    from safetensors.numpy import save_file

    state = {"params": result["params"], "opt_state": result["opt_state"]}
    full = multihost_utils.process_allgather(state, tiled=True)
    if process_id == 0:
        save_file(_flat(full), os.path.join(folder, "state.safetensors"))


def _flat(tree: Any) -> dict[str, np.ndarray]:
    return {jax.tree_util.keystr(k): np.asarray(v) for k, v in jax.tree.leaves_with_path(tree)}


def _start_workers(folder: pathlib.Path) -> list[subprocess.Popen[bytes]]:
    return start_workers("tests.examples.test_linen_lm_multiprocess", folder)


def _assert_close(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert got.keys() == want.keys()
    for path, a in got.items():
        # The attention's key bias has no gradient in exact arithmetic (softmax ignores a
        # shift shared by all keys): its "gradient" is rounding noise, which Adam scales
        # up to steps of about the learning rate, different for every device layout.
        atol = 3 * 3e-3 if "['key']['bias']" in path else 1e-6
        np.testing.assert_allclose(a, want[path], rtol=1e-5, atol=atol, err_msg=path)


def test_two_processes_train_as_one_and_their_checkpoint_restores_in_one(
    tmp_path: pathlib.Path,
) -> None:
    example = _example()
    procs = _start_workers(tmp_path)
    try:
        # The one-process run (8 devices, this process) while the workers run.
        with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
            single = example.main(TINY)
    except BaseException:
        kill_processes(procs)
        raise
    wait_for_processes(procs, timeout=TIMEOUT)
    results = [json.loads((tmp_path / f"worker{i}.json").read_text()) for i in range(2)]

    assert single["devices"] == [8, 8, 1]  # global devices, local devices, processes
    assert len(single["losses"]) == 3
    for r in results:
        assert r["devices"] == [8, 4, 2]
        np.testing.assert_allclose(r["losses"], single["losses"], rtol=1e-5)

    # The checkpoint of the two processes, read into this process's 8-device shardings.
    mesh = example.make_mesh()
    with example.nn.logical_axis_rules(example.RULES):
        trainer = example.make_trainer(
            single["config"], mesh, batch=8, context=16, steps=3, learning_rate=3e-3
        )
    params, opt_state = example.restore_checkpoint(str(tmp_path / "ckpt"), trainer)
    kernel = params["backbone"]["blocks"]["Dense_0"]["kernel"]
    assert kernel.sharding.spec == jax.sharding.PartitionSpec(None, None, "model")
    assert len(kernel.sharding.device_set) == 8
    restored = _flat({"params": params, "opt_state": opt_state})
    written = load_file(tmp_path / "state.safetensors")  # what the two processes held
    assert restored.keys() == written.keys()
    for path, value in restored.items():
        np.testing.assert_array_equal(value, written[path], err_msg=path)
    # ... and the state of the one-process run, up to rounding.
    _assert_close(restored, _flat({"params": single["params"], "opt_state": single["opt_state"]}))


if __name__ == "__main__":
    if len(sys.argv) != 4:
        pytest.exit("usage: python -m tests.examples.test_linen_lm_multiprocess ID PORT DIR")
    worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
