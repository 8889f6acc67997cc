"""Two processes (4 CPU devices each, ``jax.distributed`` on loopback) load one checkpoint
file whose kernel is split on its last axis over both (the tensor-parallel layout of an
output axis): each reads only the tiles of its own columns, every byte it uses checked. A
damaged byte in one process's tiles is found by that process alone and is an error on
both; a version 3 file (chunk checksums only) still loads.

The test starts two copies of this file as workers (``python -m
tests.pytreemod.test_checkpoint_part_processes <id> <port> <folder>``), bounded in time;
one launch covers every case.
"""

import json
import os
import pathlib
import sys
from typing import Any

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import pytreemod as pm
from tests.helpers import start_workers, wait_for_processes, write_signed

ROOT = pathlib.Path(__file__).resolve().parents[2]
ROWS, COLS = 256, 2048  # float32: 16 tiles a row (512 bytes), 128 rows a block
SPECS = {"kernel": P(None, ("data", "model")), "rows": P("data"), "bias": P()}


def model() -> dict[str, np.ndarray]:
    return {
        "kernel": np.arange(ROWS * COLS, dtype=np.float32).reshape(ROWS, COLS),
        "rows": np.arange(1024 * 512, dtype=np.float32).reshape(1024, 512) % 7,
        "bias": np.ones(COLS, np.float32),
    }


def write_files(folder: pathlib.Path) -> None:
    """The file; copies with one byte changed in a tile only process 1 reads (row 200,
    column 1800: the second half of the columns), and in one of process 0's; and the
    file as version 3 wrote it."""
    from pytreemod import _checkpoint_file as cfile
    from pytreemod import _checkpoint_read as cread

    path = folder / "file.safetensors"
    pm.save(path, {k: pm.Param(v) for k, v in model().items()})
    with cread.Reader(str(path)) as f:
        kernel = f.data_start + f._spans["kernel"][0]
        meta = f.metadata
    assert meta is not None
    for name, (row, col) in {"damaged1": (200, 1800), "damaged0": (3, 5)}.items():
        raw = bytearray(path.read_bytes())
        raw[kernel + (row * COLS + col) * 4] ^= 0x02
        (folder / f"{name}.safetensors").write_bytes(bytes(raw))
    doc = json.loads(meta["pytreemod"])
    doc["version"] = 3
    for key, value in model().items():
        flat = value.reshape(-1).view(np.uint8)
        mib = cfile.CHUNK_BYTES
        hexes = [cfile.digest_bytes(flat[i : i + mib].data) for i in range(0, flat.size, mib)]
        doc["entries"][key]["chunk_checksums"] = cfile.label_chunks("".join(hexes))
        doc["entries"][key].pop("tile_checksums", None)
    write_signed(model(), folder / "version3.safetensors", {**meta, "pytreemod": json.dumps(doc)})


def load_all(folder: str) -> dict[str, Any]:
    """Each file loaded into ``SPECS``: the bytes read, whether the shards are the model,
    the error, and whether this process found the damage itself."""
    from pytreemod import _checkpoint_part as cpart
    from pytreemod import _checkpoint_read as cread

    read: list[int] = []
    found: list[int] = []
    close, agree = cread.Reader.close, cpart.agree

    def counted_close(self: cread.Reader) -> None:
        read.append(self.bytes_read)
        close(self)

    def told_agree(failure: int) -> int:
        found.append(failure)
        return agree(failure)

    cread.Reader.close = counted_close  # type: ignore[method-assign]
    cpart.agree = told_agree
    mesh = jax.make_mesh((2, 4), ("data", "model"))
    want = model()
    like = {
        k: pm.Param(jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=NamedSharding(mesh, SPECS[k])))
        for k, v in want.items()
    }
    out: dict[str, Any] = {}
    back: dict[str, Any] = {}
    for name in ("file", "damaged1", "damaged0", "version3"):
        read.clear()
        found.clear()
        try:
            back = {k: v.value for k, v in pm.load(f"{folder}/{name}.safetensors", like).items()}
            same = all(
                np.array_equal(np.asarray(s.data), want[k][s.index])
                for k in want
                for s in back[k].addressable_shards
            )
            result: Any = {"same": same}
        except pm.CheckpointFormatError as e:
            result = {"error": str(e)}
        out[name] = {**result, "read": sum(read), "found": found[0] >= 0}
    kernel: jax.Array = back["kernel"]  # the version 3 file's
    out["columns"] = sorted({s.index[1].start for s in kernel.addressable_shards})
    return out


def worker(process_id: int, port: int, folder: str) -> None:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=process_id)
    assert (jax.process_count(), jax.device_count(), jax.local_device_count()) == (2, 8, 4)
    results = load_all(folder)
    with open(os.path.join(folder, f"worker{process_id}.json"), "w") as f:
        json.dump(results, f)
    jax.distributed.shutdown()


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("part-processes")
    write_files(folder)
    procs = start_workers("tests.pytreemod.test_checkpoint_part_processes", folder)
    wait_for_processes(procs, timeout=120)
    return [json.loads((folder / f"worker{i}.json").read_text()) for i in range(2)]


def test_a_last_axis_split_reads_only_its_own_columns(results: list[dict[str, Any]]) -> None:
    """Half the kernel's columns (whole tiles), half the rows, all of the bias."""
    m = model()
    mine = m["kernel"].nbytes // 2 + m["rows"].nbytes // 2 + m["bias"].nbytes
    assert [r["columns"] for r in results] == [[0, 256, 512, 768], [1024, 1280, 1536, 1792]]
    for r in results:
        assert r["file"] == {"same": True, "read": mine, "found": False}
        assert r["version3"]["same"]  # chunks: whole ones, from its first column to its last
        assert r["version3"]["read"] > m["kernel"].nbytes


def test_a_damaged_tile_is_found_by_its_reader_and_fails_both(
    results: list[dict[str, Any]],
) -> None:
    for name, finder in (("damaged1", 1), ("damaged0", 0)):
        assert [r[name]["found"] for r in results] == [finder == 0, finder == 1]
        for r in results:
            assert f"{name}.safetensors" in r[name]["error"]
            assert (
                "the stored bytes of .kernel (tensor 'kernel') do not match their checksum"
                in r[name]["error"]
            )


if __name__ == "__main__":
    if len(sys.argv) != 4:
        pytest.exit("usage: python -m tests.pytreemod.test_checkpoint_part_processes ID PORT DIR")
    worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3])
