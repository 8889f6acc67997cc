"""pm.save when the operating system fails or the writer is killed: a CheckpointError
naming the target, the old checkpoint intact, no partial file, strays removed later."""

import contextlib
import json
import os
import pathlib
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import jax.numpy as jnp
import numpy as np
import pytest

import pytreemod as pm
from pytreemod import _checkpoint_atomic


def _listing(folder: pathlib.Path) -> list[str]:
    return sorted(os.listdir(folder))


def test_missing_folder_names_the_target(tmp_path: pathlib.Path) -> None:
    target = tmp_path / "nope" / "model.safetensors"
    with pytest.raises(
        pm.CheckpointError,
        match=r"Cannot save '.*nope/model\.safetensors': the folder '.*nope' does not exist",
    ):
        pm.save(target, {"w": jnp.ones(2)})
    assert not (tmp_path / "nope").exists()


@contextlib.contextmanager
def _read_only(folder: pathlib.Path) -> Iterator[None]:
    """``folder`` read-only: by its mode, or (for root, whom modes do not stop) by the
    immutable attribute where the file system has one."""
    os.chmod(folder, 0o555)
    immutable = False
    try:
        probe = folder / ".probe"
        try:
            probe.touch()
        except OSError:
            pass
        else:
            probe.unlink()
            immutable = subprocess.run(["chattr", "+i", str(folder)], check=False).returncode == 0
            if not immutable:
                pytest.skip("cannot make a read-only folder here (root, no chattr)")
        yield
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        os.chmod(folder, 0o755)


def test_read_only_folder_names_the_target_and_keeps_the_old_file(
    tmp_path: pathlib.Path,
) -> None:
    target = tmp_path / "model.safetensors"
    pm.save(target, {"w": jnp.ones(2)})
    before = target.read_bytes()
    with _read_only(tmp_path):
        with pytest.raises(
            pm.CheckpointError,
            match=r"Cannot save '.*model\.safetensors': the folder '.*' cannot be written "
            r"\((PermissionError|OSError): .*\)\. Save to a writable folder",
        ):
            pm.save(target, {"w": jnp.zeros(2)})
    assert target.read_bytes() == before
    assert _listing(tmp_path) == ["model.safetensors"]


def test_full_disk_names_the_target_and_leaves_nothing_partial(tmp_path: pathlib.Path) -> None:
    """A file-size limit (SIGXFSZ ignored, so the write fails with EFBIG) stands for a
    full disk."""
    target = tmp_path / "model.safetensors"
    pm.save(target, {"w": np.ones(4, np.float32)})
    before = target.read_bytes()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, hard))
        with pytest.raises(
            pm.CheckpointError,
            match=r"Cannot save '.*model\.safetensors': the disk \(or the file-size limit or "
            r"quota\) is full \(OSError: File too large\)\. .* an earlier checkpoint at that "
            r"path is intact",
        ):
            pm.save(target, {"w": np.ones(1 << 16, np.float32)})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)
    assert target.read_bytes() == before
    assert _listing(tmp_path) == ["model.safetensors"]


def test_a_folder_in_the_way(tmp_path: pathlib.Path) -> None:
    (tmp_path / "model.safetensors").mkdir()
    with pytest.raises(pm.CheckpointError, match=r"a folder of that name is in the way"):
        pm.save(tmp_path / "model.safetensors", {"w": jnp.ones(2)})
    assert _listing(tmp_path) == ["model.safetensors"]


# A save on a slow disk: every MiB written takes 50 ms, so the test kills it mid-write.
_SLOW_SAVE = """
import sys, time
import numpy as np
import pytreemod as pm
from pytreemod import _checkpoint_file as cfile

write_all = cfile._write_all
def slow(f, view):
    write_all(f, view)
    time.sleep(0.05)
cfile._write_all = slow
pm.save(sys.argv[1], {"w": np.zeros(1 << 22, np.float32)})
"""


def test_a_killed_save_leaves_the_old_file_and_the_next_save_removes_its_stray(
    tmp_path: pathlib.Path,
) -> None:
    target = tmp_path / "model.safetensors"
    pm.save(target, {"w": np.ones(1 << 22, np.float32)})
    other = tmp_path / ".other.safetensors.tmp-00000000-1-0123456789abcdef"
    other.write_bytes(b"not ours to remove")
    child = subprocess.Popen([sys.executable, "-c", _SLOW_SAVE, str(target)])
    try:
        deadline = time.monotonic() + 60
        strays: list[str] = []
        while not strays and child.poll() is None and time.monotonic() < deadline:
            strays = [n for n in _listing(tmp_path) if n.startswith(".model.safetensors.tmp-")]
            time.sleep(0.005)
        assert strays, "the child never started writing"
        time.sleep(0.1)  # a few MiB in
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL
    assert (tmp_path / strays[0]).stat().st_size > 0  # the killed writer's partial file
    assert np.all(pm.load(target, {"w": np.zeros(1 << 22, np.float32)})["w"] == 1)
    pm.save(target, {"w": np.full(3, 2.0, np.float32)})
    assert _listing(tmp_path) == sorted([other.name, "model.safetensors"])
    assert pm.load(target, {"w": np.zeros(3, np.float32)})["w"].tolist() == [2.0, 2.0, 2.0]


# Forks a writer for every line read (after the imports, before JAX starts: each child
# starts its own JAX); the child saves a checkpoint directory of the model of value k for
# k = 1, 2, ... until it is killed (the test kills it after its first save, in one of the
# next ones, each ~0.3 s); the parent reaps the child named by the next line.
_DIR_WRITERS = """
import os, sys
import numpy as np
import pytreemod as pm

for line in sys.stdin:
    if line.startswith("reap"):
        os.waitpid(int(line.split()[1]), 0)
        continue
    pid = os.fork()
    if pid:
        continue
    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P

    sharding = NamedSharding(jax.make_mesh((2, 4), ("data", "model")), P("data", "model"))
    print(os.getpid(), flush=True)
    for k in range(1, 1 << 30):
        w = jax.device_put(np.full((64, 64), k, np.float32), sharding)
        pm.save(sys.argv[1], {"w": pm.Param(w), "b": pm.Param(np.full(3, k, np.float32))})
        if k == 1:  # the first save's start-up done: the next ones are killed
            print("saved", flush=True)
"""


def test_saves_of_a_directory_killed_at_random_moments(tmp_path: pathlib.Path) -> None:
    """Each kill leaves a checkpoint that loads whole (one save's model, never a mix),
    never a partial one; the next save removes what the killed writers left."""
    import random

    target = tmp_path / "ckpt"
    like = {"w": pm.Param(np.zeros((64, 64), np.float32)), "b": pm.Param(np.zeros(3, np.float32))}
    pm.save(target, {k: pm.Param(np.asarray(v.value)) for k, v in like.items()}, directory=True)
    writers = subprocess.Popen(
        [sys.executable, "-c", _DIR_WRITERS, str(target)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert writers.stdin is not None and writers.stdout is not None
    moments = random.Random(0)
    try:
        for _ in range(4):
            writers.stdin.write("fork\n")
            writers.stdin.flush()
            child = int(writers.stdout.readline())
            assert writers.stdout.readline() == "saved\n"
            time.sleep(moments.uniform(0.0, 0.6))
            os.kill(child, signal.SIGKILL)
            writers.stdin.write(f"reap {child}\n")
            writers.stdin.flush()
            back = pm.load(target, like)
            k = back["b"].value[0]
            assert np.all(back["w"].value == k) and np.all(back["b"].value == k)
    finally:
        writers.stdin.close()
        writers.wait(timeout=60)
        writers.stdout.close()
    pm.save(target, {"w": pm.Param(np.ones((64, 64), np.float32)), "b": pm.Param(np.ones(3))})
    current = json.loads((target / "CHECKPOINT").read_text())["current"]
    assert _listing(target) == sorted(["CHECKPOINT", current])


def test_strays_of_live_writers_and_of_other_hosts(tmp_path: pathlib.Path) -> None:
    target = str(tmp_path / "m.safetensors")
    live = pathlib.Path(_checkpoint_atomic.temporary(target))  # this process: running
    gone_host = tmp_path / ".m.safetensors.tmp-ffffffff-12-0123456789abcdef"
    recent_host = tmp_path / ".m.safetensors.tmp-fffffffe-12-0123456789abcdef"
    landed = tmp_path / ".m.safetensors.0123456789abcdef.tmp"  # the landed naming
    for f in (live, gone_host, recent_host, landed):
        f.write_bytes(b"x")
    old = time.time() - 2 * _checkpoint_atomic.STALE_SECONDS
    for f in (gone_host, landed):
        os.utime(f, (old, old))
    if _checkpoint_atomic._HOST in ("ffffffff", "fffffffe"):
        pytest.skip("this host's hash is one the test uses for another host")
    removed = _checkpoint_atomic.remove_strays(target)
    assert sorted(removed) == sorted([str(gone_host), str(landed)])
    assert _listing(tmp_path) == sorted([live.name, recent_host.name])


# Loads a saved model of 8 tensors of 8 MiB in a fresh process; prints the peak resident
# memory (VmHWM, reset just before the load) over the memory before it, as a multiple of
# the file. (ru_maxrss would not do: Linux carries it over from the parent through exec.)
_MEASURE_LOAD = """
import os, sys
import jax, jax.numpy as jnp
import pytreemod as pm

def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field))

like = {f"t{i}": pm.Param(jax.ShapeDtypeStruct((512, 4096), jnp.float32)) for i in range(8)}
jax.block_until_ready(jax.device_put(jnp.ones(3)))
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # VmHWM := VmRSS
base = status("VmRSS:")
out = jax.block_until_ready(pm.load(sys.argv[1], like))
assert float(out["t7"].value[0, 0]) == 7.0
print((status("VmHWM:") - base) / os.path.getsize(sys.argv[1]))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux's /proc")
def test_load_streams_one_tensor_at_a_time(tmp_path: pathlib.Path) -> None:
    """Peak host memory of a load: the model plus at most its largest tensor (1/8 here),
    not the file mapped in memory beside the arrays (2x, as safetensors' own load)."""
    target = tmp_path / "model.safetensors"
    pm.save(target, {f"t{i}": pm.Param(np.full((512, 4096), i, np.float32)) for i in range(8)})
    run = subprocess.run(
        [sys.executable, "-c", _MEASURE_LOAD, str(target)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert float(run.stdout.split()[-1]) <= 1.1 + 1 / 8, run.stdout
