"""Chunk checksums of large tensors, and reading only some shards of a tensor: the part
of a file each process of a multi-process load reads (the two-process load itself is in
test_checkpoint_multiprocess.py). In one process, on the suite's 8 CPU devices."""

import json
import pathlib

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from safetensors import safe_open

import pytreemod as pm
from pytreemod import _checkpoint_file as cfile
from pytreemod import _checkpoint_format as fmt
from pytreemod import _checkpoint_part as cpart
from pytreemod import _checkpoint_read as cread
from tests.helpers import write_signed

MIB = cfile.CHUNK_BYTES
ROWS, COLS = 1024, 1000  # 4,096,000 bytes of float32: four chunks, the last one short


@pytest.fixture
def saved(tmp_path: pathlib.Path) -> tuple[pathlib.Path, np.ndarray]:
    big = np.arange(ROWS * COLS, dtype=np.float32).reshape(ROWS, COLS)
    path = tmp_path / "model.safetensors"
    pm.save(path, {"big": pm.Param(big), "small": pm.Param(np.ones(3, np.float32))})
    return path, big


def _entry(path: pathlib.Path, key: str) -> tuple[cread.Reader, fmt.Entry]:
    f = cread.Reader(str(path))
    assert f.metadata is not None and cfile.verify_header(str(path), f.metadata)
    header = fmt.parse_header(f.metadata, f.tensors, str(path), header_checked=True)
    return f, header.entries[key]


def _data_offset(path: pathlib.Path, key: str) -> int:
    with cread.Reader(str(path)) as f:
        return f.data_start + f._spans[key][0]


def test_a_tensor_of_several_chunks_has_a_checksum_per_chunk(
    saved: tuple[pathlib.Path, np.ndarray],
) -> None:
    path, big = saved
    f, entry = _entry(path, "big")
    with f:
        assert entry.chunk_checksums is not None
        size, sums = cfile.unlabel_chunks(entry.chunk_checksums)
        flat = big.reshape(-1).view(np.uint8)
        assert size == MIB and len(sums) == 4
        assert sums == [cfile.digest_bytes(flat[i : i + MIB].data) for i in range(0, 4 * MIB, MIB)]
    f, small = _entry(path, "small")
    f.close()
    assert small.chunk_checksums == cfile.label_chunks(cfile.digest(np.ones(3, np.float32)))
    back = pm.load(
        path, {"big": pm.Param(np.zeros_like(big)), "small": pm.Param(np.ones(3, np.float32))}
    )
    np.testing.assert_array_equal(back["big"].value, big)


@pytest.mark.parametrize(
    "spec", [P("data", "model"), P(None, "model"), P("model"), P(), P(None, ("data", "model"))]
)
def test_shards_read_by_their_spans_are_the_array(
    saved: tuple[pathlib.Path, np.ndarray], spec: P
) -> None:
    path, big = saved
    sharding = NamedSharding(jax.make_mesh((2, 4), ("data", "model")), spec)
    f, entry = _entry(path, "big")
    with f:
        out = cpart.read_part(f, entry, sharding, "big")
    assert out.sharding == sharding
    for shard in out.addressable_shards:
        np.testing.assert_array_equal(np.asarray(shard.data), big[shard.index])


def test_byte_spans() -> None:
    shape, item = (4, 6, 5), 2
    assert cpart.byte_span(shape, item, (slice(1, 3),)) == (60, 180)  # whole rows: exact
    assert cpart.byte_span(shape, item, (slice(None), slice(2, 4))) == (20, 220)
    assert cpart.byte_span(shape, item, (slice(3, 4), slice(5, 6), slice(4, 5))) == (238, 240)
    assert cpart.byte_span(shape, item, (slice(2, 2),)) is None
    assert cpart.byte_span((), 4, ()) == (0, 4)


def test_a_span_is_read_in_whole_chunks_each_checked(
    saved: tuple[pathlib.Path, np.ndarray],
) -> None:
    """A damaged byte in chunk 2 is found by a read of a span in it, and by none of a
    span outside it (only the chunks a span touches are read)."""
    path, big = saved
    raw = bytearray(path.read_bytes())
    raw[_data_offset(path, "big") + 2 * MIB + 5] ^= 0x01
    path.write_bytes(bytes(raw))
    f, entry = _entry(path, "big")
    with f:
        data, start = f.read_span("big", MIB + 8, 2 * MIB - 4, entry.chunk_checksums, "'big'")
        assert (start, len(data)) == (MIB, MIB)
        np.testing.assert_array_equal(data.view(np.float32), big.reshape(-1)[MIB // 4 : MIB // 2])
        with pytest.raises(
            pm.CheckpointFormatError,
            match=r"model\.safetensors'?: the stored bytes of 'big' do not match their checksum",
        ):
            f.read_span("big", 2 * MIB - 4, 2 * MIB + 4, entry.chunk_checksums, "'big'")
        last, start = f.read_span("big", 3 * MIB + 4, 3 * MIB + 8, entry.chunk_checksums, "")
        assert (start, len(last)) == (3 * MIB, ROWS * COLS * 4 - 3 * MIB)  # the short one


def _rewrite(path: pathlib.Path, change: str, to: str) -> None:
    with safe_open(str(path), framework="np") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    header = json.loads(meta["pytreemod"])
    entry = header["entries"]["big"]
    entry["chunk_checksums"] = entry["chunk_checksums"].replace(change, to, 1)
    meta["pytreemod"] = json.dumps(header)
    write_signed(tensors, path, meta)


def test_malformed_chunk_checksums_are_format_errors(
    saved: tuple[pathlib.Path, np.ndarray],
) -> None:
    path, big = saved
    like = {"big": pm.Param(np.zeros_like(big)), "small": pm.Param(np.ones(3, np.float32))}
    _rewrite(path, f"/{MIB}:", f"/{2 * MIB}:")
    with pytest.raises(
        pm.CheckpointFormatError,
        match=r"entry 'big': 4 chunk checksums, but the tensor's 4096000 bytes are 2 chunks "
        r"of 2097152",
    ):
        pm.load(path, like)
    _rewrite(path, "xxh3_64/", "md5/")
    with pytest.raises(
        pm.CheckpointFormatError, match=r"entry 'big': 'chunk_checksums' are not xxh3_64 chunk"
    ):
        pm.load(path, like)
