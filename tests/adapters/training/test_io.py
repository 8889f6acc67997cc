"""adapters.io: flax.io's file operations on the local file system."""

import importlib.util
from typing import Any

import pytest

from adapters import errors, io


def test_file_operations(tmp_path: Any) -> None:
    d = str(tmp_path / "a" / "b")
    io.makedirs(d)
    io.makedirs(d)  # no error when it exists
    assert io.isdir(d) and io.exists(d)
    f = f"{d}/x.txt"
    with io.GFile(f, "w") as fp:
        fp.write("héllo")
    with io.GFile(f, "rb") as fp:
        assert fp.read() == "héllo".encode()
    assert io.getsize(f) == len("héllo".encode())
    assert io.listdir(d) == ["x.txt"]
    assert io.glob(f"{d}/*.txt") == [f]
    io.copy(f, f"{d}/y.txt")
    with pytest.raises(errors.AlreadyExistsError, match="Trying overwrite an existing file"):
        io.copy(f, f"{d}/y.txt")
    with pytest.raises(errors.AlreadyExistsError, match=r"y\.txt"):
        io.rename(f, f"{d}/y.txt")
    io.rename(f, f"{d}/y.txt", overwrite=True)
    assert io.listdir(d) == ["y.txt"]
    io.remove(f"{d}/y.txt")
    io.rmtree(str(tmp_path / "a"))
    assert not io.exists(d)
    with pytest.raises(io.NotFoundError):
        io.listdir(d)


def test_backend_modes() -> None:
    assert io.io_mode is io.BackendMode.DEFAULT
    with io.override_mode(io.BackendMode.DEFAULT):
        assert io.io_mode is io.BackendMode.DEFAULT
    if importlib.util.find_spec("tensorflow") is None:
        with pytest.raises(ValueError, match="needs tensorflow"):
            io.set_mode(io.BackendMode.TF)
    with pytest.raises(ValueError, match="Unknown IO Backend Mode"):
        io.set_mode("gfile")  # type: ignore[arg-type]
    assert io.io_mode is io.BackendMode.DEFAULT
