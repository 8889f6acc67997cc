"""The checksums of a tensor's pieces (chunks; tiles of row blocks by column blocks), and
reading only some shards of a tensor: the part of a file each process of a multi-process
load reads (the two-process loads themselves are in test_checkpoint_part_processes.py and
test_checkpoint_multiprocess.py). In one process, on the suite's 8 CPU devices; a
"process" here is the shards of some of them."""

import json
import pathlib
from typing import Any

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
ROWS, COLS = 1024, 1000  # 4,096,000 bytes of float32: 4 tiles a row (250 columns each)


def _model() -> dict[str, np.ndarray]:
    return {
        "big": np.arange(ROWS * COLS, dtype=np.float32).reshape(ROWS, COLS),
        # 8 tiles a row (128 columns each), 256 rows a block: half the middle axis
        "deep": np.arange(2 * 512 * 1024, dtype=np.float32).reshape(2, 512, 1024) % 1009,
        "long": np.arange(600_000, dtype=np.float32),  # 1-D: chunks of a MiB
        "small": np.ones(3, np.float32),
    }


@pytest.fixture
def saved(tmp_path: pathlib.Path) -> tuple[pathlib.Path, dict[str, np.ndarray]]:
    model = _model()
    path = tmp_path / "model.safetensors"
    pm.save(path, {k: pm.Param(v) for k, v in model.items()})
    return path, model


def _like(model: dict[str, np.ndarray]) -> dict[str, Any]:
    return {k: pm.Param(np.zeros_like(v)) for k, v in model.items()}


def _entry(path: pathlib.Path, key: str) -> tuple[cread.Reader, fmt.Entry]:
    f = cread.Reader(str(path))
    assert f.metadata is not None and cfile.verify_header(str(path), f.metadata)
    header = fmt.parse_header(f.metadata, f.tensors, str(path), header_checked=True)
    return f, header.entries[key]


def _data_offset(path: pathlib.Path, key: str) -> int:
    with cread.Reader(str(path)) as f:
        return f.data_start + f._spans[key][0]


def _flip(path: pathlib.Path, at: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[at] ^= 0x01
    path.write_bytes(bytes(raw))


def test_the_tiles_a_tensor_is_hashed_in() -> None:
    layout = cfile.tile_layout
    assert layout((ROWS, COLS), 4) == cfile.Layout(1024, 4000, 262, 4, tiled=True)
    assert layout((4096, 4096), 2) == cfile.Layout(4096, 8192, 128, 16, tiled=True)  # bf16
    assert layout((4096, 1024), 2) == cfile.Layout(4096, 2048, 512, 4, tiled=True)  # 512 B
    assert layout((300, 999), 4) is None  # odd: one tile a row, which the chunks cover
    assert layout((2, 1 << 20), 4) == cfile.Layout(2, 1 << 22, 1, 16, tiled=True)
    assert layout((600_000,), 4) is None  # one axis: chunks only
    assert layout((512, 512), 4) is None  # small


def test_a_tile_checksum_is_the_hash_of_its_row_segments_in_order(
    saved: tuple[pathlib.Path, dict[str, np.ndarray]],
) -> None:
    """Tiles (of the large matrices) beside chunks (of every tensor)."""
    path, model = saved
    for key in ("big", "deep"):
        f, entry = _entry(path, key)
        with f:
            assert entry.tile_checksums is not None
            sums = f.sums(key, entry.tile_checksums)
        layout = sums.layout
        rows = model[key].view(np.uint8).reshape(layout.rows, layout.row_bytes)
        for block in range(layout.blocks):
            for tile in range(layout.tiles):
                h = cfile.hasher()
                top = block * layout.block_rows
                for row in rows[top : top + layout.height(block)]:
                    h.update(row[tile * layout.tile_row : (tile + 1) * layout.tile_row].data)
                assert cfile.hex_of(h) == sums.of(block, tile)
    for key, value in model.items():
        f, entry = _entry(path, key)
        f.close()
        flat = value.reshape(-1).view(np.uint8)
        chunks = [cfile.digest_bytes(flat[i : i + MIB].data) for i in range(0, flat.size, MIB)]
        assert entry.chunk_checksums == cfile.label_chunks("".join(chunks))
        assert (entry.tile_checksums is None) == (key in ("long", "small"))
    back = pm.load(path, _like(model))
    for key, value in model.items():
        np.testing.assert_array_equal(back[key].value, value)


SPECS = [
    ("big", P("data", "model")),
    ("big", P(None, "model")),
    ("big", P(None, ("data", "model"))),
    ("big", P("model")),
    ("big", P()),
    ("deep", P(None, "model")),  # a middle axis
    ("deep", P("data", None, "model")),
    ("deep", P(None, "data", "model")),
    ("long", P("model")),
]


@pytest.mark.parametrize(("key", "spec"), SPECS)
def test_shards_cut_from_their_pieces_are_the_array(
    saved: tuple[pathlib.Path, dict[str, np.ndarray]], key: str, spec: P
) -> None:
    path, model = saved
    sharding = NamedSharding(jax.make_mesh((2, 4), ("data", "model")), spec)
    f, entry = _entry(path, key)
    with f:
        out = cpart.read_part(f, entry, sharding, key)
    assert out.sharding == sharding
    for shard in out.addressable_shards:
        np.testing.assert_array_equal(np.asarray(shard.data), model[key][shard.index])


def _half(path: pathlib.Path, key: str, spec: P) -> tuple[cread.Reader, Any]:
    """The shards of the first four devices (one process's) of ``key`` split by ``spec``,
    read as that process does."""
    f, entry = _entry(path, key)
    mesh = jax.make_mesh((2, 4), ("data", "model"))
    shape = entry.shape
    indices = NamedSharding(mesh, spec).devices_indices_map(shape)
    mine = {d: cpart._full(indices[d], shape) for d in mesh.devices.reshape(-1)[:4]}
    assert entry.tile_checksums is not None
    sums = f.sums(key, entry.tile_checksums)
    return f, lambda: cpart._tiled_parts(f, key, sums, mine, np.dtype(np.float32), f"{key!r}")


def test_a_process_reads_only_the_tiles_of_its_shards(
    saved: tuple[pathlib.Path, dict[str, np.ndarray]],
) -> None:
    """Half the columns (or the middle axis) split over "two processes": one reads half
    the bytes; a damaged byte in the other half's tiles is not read, one in its own is
    an error naming the tensor."""
    path, model = saved
    for key, spec in [("big", P(None, ("data", "model"))), ("deep", P(None, "data"))]:
        f, read = _half(path, key, spec)
        with f:
            _assert_parts(read(), model[key])
            assert f.bytes_read == model[key].nbytes // 2
    offset = _data_offset(path, "big")
    _flip(path, offset + 700 * COLS * 4 + 600 * 4)  # row 700, column 600: the other half
    f, read = _half(path, "big", P(None, ("data", "model")))
    with f:
        _assert_parts(read(), model["big"])
    _flip(path, offset + 700 * COLS * 4 + 600 * 4)
    _flip(path, offset + 900 * COLS * 4 + 10 * 4)  # row 900, column 10: its own
    f, read = _half(path, "big", P(None, ("data", "model")))
    with (
        f,
        pytest.raises(
            pm.CheckpointFormatError,
            match=r"model\.safetensors'?: the stored bytes of 'big' do not match their checksum",
        ),
    ):
        read()


def _assert_parts(parts: dict[Any, np.ndarray], array: np.ndarray) -> None:
    for index, got in parts.items():
        np.testing.assert_array_equal(got, array[tuple(slice(*i) for i in index)])


def test_a_file_that_cannot_be_mapped_is_read_by_spans(
    saved: tuple[pathlib.Path, dict[str, np.ndarray]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, model = saved
    anonymous = cread.mmap.mmap

    def no_file_maps(fileno: int, *args: Any, **kwargs: Any) -> Any:
        if fileno != -1:
            raise OSError(19, "No such device")
        return anonymous(fileno, *args, **kwargs)

    monkeypatch.setattr(cread.mmap, "mmap", no_file_maps)
    sharding = NamedSharding(jax.make_mesh((2, 4), ("data", "model")), P(None, "model"))
    f, entry = _entry(path, "big")
    with f:
        out = cpart.read_part(f, entry, sharding, "big")
        assert f.bytes_read == model["big"].nbytes  # from its first column to its last
    for shard in out.addressable_shards:
        np.testing.assert_array_equal(np.asarray(shard.data), model["big"][shard.index])


def test_a_damaged_tile_fails_a_whole_load(
    saved: tuple[pathlib.Path, dict[str, np.ndarray]],
) -> None:
    """(A load of the whole tensor checks its chunks.)"""
    path, model = saved
    _flip(path, _data_offset(path, "deep") + model["deep"].nbytes - 5)
    with pytest.raises(
        pm.CheckpointFormatError, match=r"the stored bytes of \.deep \(tensor 'deep'\) do not"
    ):
        pm.load(path, _like(model))


def test_a_span_is_read_in_whole_chunks_each_checked(
    saved: tuple[pathlib.Path, dict[str, np.ndarray]],
) -> None:
    """A damaged byte in chunk 1 of a 1-D tensor is found by a read of a span in it, and
    by none of a span outside it (only the chunks a span touches are read)."""
    path, model = saved
    long = model["long"]
    _flip(path, _data_offset(path, "long") + MIB + 5)
    f, entry = _entry(path, "long")
    with f:
        data, start = f.read_span("long", 8, MIB - 4, entry.chunk_checksums, "'long'")
        assert (start, len(data)) == (0, MIB)
        np.testing.assert_array_equal(data.view(np.float32), long[: MIB // 4])
        with pytest.raises(
            pm.CheckpointFormatError,
            match=r"model\.safetensors'?: the stored bytes of 'long' do not match their checksum",
        ):
            f.read_span("long", MIB - 4, MIB + 4, entry.chunk_checksums, "'long'")
        last, start = f.read_span("long", 2 * MIB + 4, 2 * MIB + 8, entry.chunk_checksums, "")
        assert (start, len(last)) == (2 * MIB, long.nbytes - 2 * MIB)  # the short one


def test_byte_spans() -> None:
    shape, item = (4, 6, 5), 2
    assert cpart.byte_span(shape, item, (slice(1, 3),)) == (60, 180)  # whole rows: exact
    assert cpart.byte_span(shape, item, (slice(None), slice(2, 4))) == (20, 220)
    assert cpart.byte_span(shape, item, (slice(3, 4), slice(5, 6), slice(4, 5))) == (238, 240)
    assert cpart.byte_span(shape, item, (slice(2, 2),)) is None
    assert cpart.byte_span((), 4, ()) == (0, 4)


def _rewrite(path: pathlib.Path, change: Any) -> None:
    with safe_open(str(path), framework="np") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    header = json.loads(meta["pytreemod"])
    change(header, tensors)
    meta["pytreemod"] = json.dumps(header)
    write_signed(tensors, path, meta)


def _to_version_3(header: dict[str, Any], tensors: dict[str, np.ndarray]) -> None:
    """Chunk checksums of every tensor, as pytreemod wrote them before tiles."""
    header["version"] = 3
    for key, entry in header["entries"].items():
        flat = tensors[key].reshape(-1).view(np.uint8)
        hexes = [cfile.digest_bytes(flat[i : i + MIB].data) for i in range(0, flat.size, MIB)]
        entry["chunk_checksums"] = cfile.label_chunks("".join(hexes))
        entry.pop("tile_checksums", None)


def test_a_version_3_file_loads_and_its_shards_are_read_by_chunks(
    saved: tuple[pathlib.Path, dict[str, np.ndarray]],
) -> None:
    path, model = saved
    _rewrite(path, _to_version_3)
    back = pm.load(path, _like(model))
    for key, value in model.items():
        np.testing.assert_array_equal(back[key].value, value)
    sharding = NamedSharding(jax.make_mesh((2, 4), ("data", "model")), P(None, "model"))
    f, entry = _entry(path, "big")
    with f:
        assert entry.chunk_checksums is not None and entry.tile_checksums is None
        out = cpart.read_part(f, entry, sharding, "big")
    for shard in out.addressable_shards:
        np.testing.assert_array_equal(np.asarray(shard.data), model["big"][shard.index])


def _set_sums(key: str, field: str, change: Any) -> Any:
    def rewrite(header: dict[str, Any], tensors: dict[str, np.ndarray]) -> None:
        entry = header["entries"][key]
        entry[field] = change(entry.get(field, entry["chunk_checksums"]))

    return rewrite


@pytest.mark.parametrize(
    ("key", "field", "change", "message"),
    [
        (
            "long",
            "chunk_checksums",
            lambda s: s.replace(f"/{MIB}:", f"/{2 * MIB}:"),
            r"entry 'long': 3 chunk checksums, but the tensor's 2400000 bytes are 2 chunks "
            r"of 2097152",
        ),
        (
            "long",
            "chunk_checksums",
            lambda s: s.replace("xxh3_64/", "md5/"),
            r"entry 'long': 'chunk_checksums' are not xxh3_64 chunk checksums",
        ),
        (
            "big",
            "tile_checksums",
            lambda s: s.replace("x4:", "x2:"),
            r"entry 'big': 16 tile checksums, but the tensor's 1024 rows are 4 blocks of 262 "
            r"rows, 2 tiles each",
        ),
        (
            "big",
            "tile_checksums",
            lambda s: s.replace("x4:", "x3:"),
            r"entry 'big': its last axis \(1000\) does not divide into 3 tiles",
        ),
        (
            "long",
            "tile_checksums",
            lambda s: s.replace(f"/{MIB}:", "/1x1:"),
            r"entry 'long': tile checksums of a tensor of shape \[600000\] without rows",
        ),
        (
            "big",
            "tile_checksums",
            lambda s: s.replace("262x4:", f"{MIB}:"),
            r"entry 'big': 'tile_checksums' are not xxh3_64 tile checksums",
        ),
        (
            "small",
            "chunk_checksums",
            lambda s: s.replace(f"/{MIB}:", "/1x1:"),
            r"entry 'small': 'chunk_checksums' are not xxh3_64 chunk checksums",
        ),
    ],
)
def test_malformed_checksums_are_format_errors(
    saved: tuple[pathlib.Path, dict[str, np.ndarray]],
    key: str,
    field: str,
    change: Any,
    message: str,
) -> None:
    path, model = saved
    _rewrite(path, _set_sums(key, field, change))
    with pytest.raises(pm.CheckpointFormatError, match=message):
        pm.load(path, _like(model))
