"""Helpers shared by tests."""

from typing import Any

import jax
import numpy as np


def tree_allclose(a: Any, b: Any, *, rtol: float = 1e-6, atol: float = 1e-6) -> bool:
    """Same structure and numerically close leaves."""
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    if ta != tb:
        return False
    return all(
        np.allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol) for x, y in zip(la, lb)
    )


def kill_processes(procs: list[Any]) -> None:
    """Kill the process groups of those of ``procs`` still running (started with
    ``start_new_session=True``) and reap them."""
    import os
    import signal

    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def wait_for_processes(procs: list[Any], timeout: float) -> list[str]:
    """Wait for the worker processes ``procs`` (``subprocess.Popen`` with stdout piped and
    ``start_new_session=True``), killing them all if one fails or times out; assert that
    every one exited with 0 (their output in the message) and return their outputs."""
    outputs: list[str] = []
    try:
        for p in procs:
            out, _ = p.communicate(timeout=timeout)
            outputs.append(out.decode(errors="replace")[-3000:])
    finally:
        kill_processes(procs)
    assert [p.returncode for p in procs] == [0] * len(procs), "\n".join(outputs)
    return outputs


def free_port() -> int:
    """A TCP port free on this machine now (for a JAX cluster's coordinator)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_workers(
    module: str,
    folder: Any,
    *extra: str,
    count: int = 2,
    devices: int = 4,
    env: dict[str, str] | None = None,
) -> list[Any]:
    """``count`` processes ``python -m module <i> <port> <folder> *extra`` of one JAX
    cluster (``port``: a free one for its coordinator), each with ``devices`` CPU devices
    and ``env`` added to this process's environment, output piped, each in its own
    process group (``wait_for_processes`` / ``kill_processes`` end them)."""
    import os
    import pathlib
    import subprocess
    import sys

    from tests.xla_env import xla_flags

    root = pathlib.Path(__file__).resolve().parents[1]
    port = free_port()
    full = dict(os.environ, XLA_FLAGS=xla_flags(devices), JAX_PLATFORMS="cpu", **(env or {}))
    full["PYTHONPATH"] = os.pathsep.join([str(root), full.get("PYTHONPATH", "")])
    return [
        subprocess.Popen(
            [sys.executable, "-m", module, str(i), str(port), str(folder), *extra],
            cwd=root,
            env=full,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for i in range(count)
    ]


def write_signed(tensors: dict[str, Any], path: Any, metadata: dict[str, str]) -> None:
    """Write a crafted checkpoint whose header checksum is valid, as ``pm.save`` signs it, so
    that a test reaches the checks behind it (the entries' own checksums stay as given)."""
    from pytreemod import _checkpoint_file

    meta = {k: v for k, v in metadata.items() if k != _checkpoint_file.HEADER_KEY}
    arrays = {k: np.ascontiguousarray(v) for k, v in tensors.items()}
    _checkpoint_file.write(str(path), arrays, lambda sums: meta)
