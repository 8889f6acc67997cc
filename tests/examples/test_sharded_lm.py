"""The sharded LM example (tiny config): on JAX's default Explicit 2x4 mesh, FSDP x tensor
parallel from logical names alone, its losses are the single-device run's and every device
holds an eighth of the parameters; two processes with 4 devices each train as one."""

import json
import os
import pathlib
import socket
import subprocess
import sys
import types

import jax
import numpy as np
import pytest
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

from tests.helpers import wait_for_processes
from tests.xla_env import xla_flags

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


def worker(process_id: int, port: int, folder: str) -> None:
    flags = ["--coordinator", f"127.0.0.1:{port}", "--num-processes", "2"]
    flags += ["--process-id", str(process_id), "--no-reference"]
    run = _example().main([*TINY, *flags])["explicit"]
    _check_sharded_run(run, 4)
    result = {"losses": run["losses"], "devices": [jax.device_count(), jax.process_count()]}
    with open(os.path.join(folder, f"worker{process_id}.json"), "w") as f:
        json.dump(result, f)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_train_as_one(tmp_path: pathlib.Path, tiny_runs: tuple[dict, str]) -> None:
    port = _free_port()
    env = dict(os.environ, XLA_FLAGS=xla_flags(4))
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", MODULE, str(i), str(port), str(tmp_path)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, killed as a whole
        )
        for i in range(2)
    ]
    wait_for_processes(procs, timeout=TIMEOUT)
    single = tiny_runs[0]["explicit"]  # one process with 8 devices
    for i in range(2):
        result = json.loads((tmp_path / f"worker{i}.json").read_text())
        assert result["devices"] == [8, 2]
        np.testing.assert_allclose(result["losses"], single["losses"], rtol=1e-5)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        pytest.exit("usage: python -m tests.examples.test_sharded_lm ID PORT DIR")
    worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
