"""Errors of the ops on Explicit meshes: JAX's ``ShardingTypeError`` made a
``ShardingError`` that names the layer path, the op, the operands' shardings and the fix.

The layer is named by ``_where.current_layer``, as shape errors name it: the innermost
layer running on the calling frames, by its path from the outermost model holding it
(``Model.blocks[3].mlp``, ``[*]`` inside a scanned stack).
"""

import contextlib
import sys
import types
from collections.abc import Iterator
from typing import Any

from jax.sharding import PartitionSpec

from .._errors import ShardingError
from .._where import current_layer
from ._mesh import type_sharding


def _describe(x: Any) -> str:
    sharding = type_sharding(x)
    shape = "x".join(map(str, getattr(x, "shape", ()))) or "scalar"
    spec = sharding.spec if sharding is not None else PartitionSpec()
    return f"{shape} sharded {spec}"


def sharding_message(
    op: str, operands: dict[str, Any], reason: str, fix: str, frame: types.FrameType | None
) -> str:
    where = current_layer(frame)
    shown = ", ".join(f"{k}: {_describe(v)}" for k, v in operands.items() if v is not None)
    at = f"{where}: " if where else ""
    return f"{at}pytreemod.nn.functional.{op} on an Explicit mesh ({shown}): {reason}. Fix: {fix}."


def _is_sharding_type_error(error: BaseException) -> bool:
    return any(c.__name__ == "ShardingTypeError" for c in type(error).__mro__)


@contextlib.contextmanager
def sharding_errors(op: str, **operands: Any) -> Iterator[None]:
    """Turn JAX's ``ShardingTypeError`` raised inside an op into a ``ShardingError`` that
    names the layer path, the op, the operands' shardings and the fix."""
    try:
        yield
    except Exception as error:
        if not _is_sharding_type_error(error):
            raise
        frame = sys._getframe(2)
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ShardingError(
            sharding_message(
                op,
                operands,
                f"JAX cannot shard it ({reason})",
                "add a logical axis rule that shards the operands compatibly, or pass "
                "out_sharding= (a PartitionSpec of the output) to the layer call or the op",
                frame,
            )
        ) from None
