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


def write_signed(tensors: dict[str, Any], path: Any, metadata: dict[str, str]) -> None:
    """Write a crafted checkpoint whose header checksum is valid, as ``pm.save`` signs it, so
    that a test reaches the checks behind it (the entries' own checksums stay as given)."""
    from pytreemod import _checkpoint_file

    meta = {k: v for k, v in metadata.items() if k != _checkpoint_file.HEADER_KEY}
    arrays = {k: np.ascontiguousarray(v) for k, v in tensors.items()}
    _checkpoint_file.write(str(path), arrays, lambda sums: meta)
