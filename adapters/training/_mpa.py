"""Multiprocess arrays in msgpack checkpoints (``save_checkpoint_multiprocess``).

An array not fully addressable by this process cannot go into the msgpack file: the file
holds the placeholder ``MP_ARRAY_PH + <its path>`` instead, and the array is written with
a ``GlobalAsyncCheckpointManager`` (tensorstore) under ``<checkpoint>_gda/<its path>``.
"""

import functools
import os
from collections.abc import Callable
from typing import Any

import jax

from .. import errors, io, serialization, traverse_util
from ..core import FrozenDict
from ._checkpoint_files import COMMIT_SUCCESS_FILE, MP_ARRAY_PH, MP_ARRAY_POSTFIX, logger


def is_multiprocess_array(value: Any) -> bool:
    return isinstance(value, jax.Array) and not value.is_fully_addressable


def split_mp_arrays(target: Any) -> tuple[Any, list[tuple[Any, str]]]:
    """``target`` (a state dict) with placeholders for multiprocess arrays, and the
    ``(array, subpath)`` pairs taken out."""
    if not isinstance(target, (dict, FrozenDict)):
        if is_multiprocess_array(target):
            return MP_ARRAY_PH, [(target, "")]
        return target, []
    flat = traverse_util.flatten_dict(target, keep_empty_nodes=True)
    taken: list[tuple[Any, str]] = []
    for key, value in flat.items():
        if is_multiprocess_array(value):
            subpath = "/".join(key)
            taken.append((value, subpath))
            flat[key] = MP_ARRAY_PH + subpath
    return traverse_util.unflatten_dict(flat), taken


def make_mpa_dirs(mpa_targets: list[tuple[Any, str]], tmp_path: str) -> None:
    if tmp_path.startswith("gs://"):
        return
    root = tmp_path + MP_ARRAY_POSTFIX
    if io.exists(root):
        logger.info("Removing outdated MPA temporary files at %s", root)
        io.rmtree(root)
    for _, subpath in mpa_targets:
        io.makedirs(os.path.join(root, subpath))


def save_mpas(
    gda_manager: Any,
    mpa_targets: list[tuple[Any, str]],
    tmp_path: str,
    final_path: str,
    commit: Callable[..., None],
) -> None:
    """Write the arrays asynchronously; ``commit(write_commit_success=...)`` runs after."""
    from jax.experimental.array_serialization.serialization import get_tensorstore_spec

    root = tmp_path + MP_ARRAY_POSTFIX
    on_gcs = tmp_path.startswith("gs://")
    if on_gcs:  # renames are not atomic there: write in place, mark success at commit
        root = final_path + MP_ARRAY_POSTFIX
    specs = [get_tensorstore_spec(os.path.join(root, sub)) for _, sub in mpa_targets]
    gda_manager.serialize(
        [arr for arr, _ in mpa_targets],
        specs,
        on_commit_callback=functools.partial(commit, has_mpa=True, write_commit_success=on_gcs),
    )


def commit_mpas(tmp_path: str, final_path: str, write_commit_success: bool) -> None:
    tmp_root, final_root = tmp_path + MP_ARRAY_POSTFIX, final_path + MP_ARRAY_POSTFIX
    if write_commit_success:
        with io.GFile(os.path.join(final_root, COMMIT_SUCCESS_FILE), "w") as f:
            f.write(f"Checkpoint commit was successful to {final_root}")
        return
    if io.exists(final_root):
        logger.info("Removing outdated checkpoint at %s", final_root)
        io.rmtree(final_root)
    io.rename(tmp_root, final_root)


def restore_mpas(
    state_dict: Any,
    target: Any,
    ckpt_path: str,
    step: Any,
    gda_manager: Any,
    allow_partial: bool = False,
) -> Any:
    """Replace the placeholders of ``state_dict`` by arrays read with ``gda_manager``,
    placed with the shardings of the arrays at the same paths of ``target``."""

    def require() -> None:
        if not gda_manager:
            raise errors.MPACheckpointingRequiredError(ckpt_path, step)
        if not target and not allow_partial:
            raise errors.MPARestoreTargetRequiredError(ckpt_path, step)

    def read(wanted: list[tuple[Any, Any, str]]) -> list[Any]:
        from jax.experimental.array_serialization.serialization import get_tensorstore_spec

        gda_manager.wait_until_finished()
        marker = os.path.join(ckpt_path + MP_ARRAY_POSTFIX, COMMIT_SUCCESS_FILE)
        if ckpt_path.startswith("gs://") and not io.exists(marker):
            raise errors.MPARestoreDataCorruptedError(step, ckpt_path)
        shardings = [arr.sharding for _, arr, _ in wanted]
        return gda_manager.deserialize(shardings, [get_tensorstore_spec(p) for *_, p in wanted])

    def is_placeholder(value: Any) -> bool:
        return isinstance(value, str) and value.startswith(MP_ARRAY_PH)

    if not isinstance(state_dict, (dict, FrozenDict)):
        if is_multiprocess_array(target) and is_placeholder(state_dict):
            require()
            return read([((), target, ckpt_path + MP_ARRAY_POSTFIX)])[0]
        return state_dict

    flat = traverse_util.flatten_dict(state_dict, keep_empty_nodes=True)
    target_flat: dict[Any, Any] = {}
    if target:
        target_flat = traverse_util.flatten_dict(
            serialization.to_state_dict(target), keep_empty_nodes=True
        )
    wanted: list[tuple[Any, Any, str]] = []
    for key, value in flat.items():
        if not is_placeholder(value):
            continue
        require()
        if key in target_flat and is_multiprocess_array(target_flat[key]):
            path = os.path.join(ckpt_path + MP_ARRAY_POSTFIX, value[len(MP_ARRAY_PH) :])
            wanted.append((key, target_flat[key], path))
        elif allow_partial:
            logger.warning(
                "Multiprocess array %s could not be restored because a valid array is not "
                "found in target at the corresponding location. Proceed to restore other "
                "arrays because allow_partial_restoration=True",
                key,
            )
        else:
            raise errors.MPARestoreTargetRequiredError(ckpt_path, step, key)
    if not wanted:
        return state_dict
    for array, (key, _, _) in zip(read(wanted), wanted):
        flat[key] = array
    return traverse_util.unflatten_dict(flat)
