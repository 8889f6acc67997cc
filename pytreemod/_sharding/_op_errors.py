"""Errors of the ops on Explicit meshes: JAX's ``ShardingTypeError`` made a
``ShardingError`` that names the layer path, the op, the operands' shardings and the fix.
"""

import contextlib
import sys
import types
from collections.abc import Iterator
from typing import Any

from jax.sharding import PartitionSpec

from .._errors import ShardingError
from .._shapecheck import _module_frame, call_site
from ._mesh import type_sharding


def layer_path(frame: types.FrameType | None) -> str | None:
    """The path of the innermost layer whose method is running on the calling frames
    (``frame`` outward), as shape errors name it (``_shapecheck.call_site``: the
    outermost model holding it, then ``.blocks[3].mlp``, ``[*]`` inside a scanned stack),
    or ``None`` outside any layer."""
    found = _module_frame(frame)
    if found is None:
        return None
    return call_site(found.f_locals["self"], found.f_back)


def _describe(x: Any) -> str:
    sharding = type_sharding(x)
    shape = "x".join(map(str, getattr(x, "shape", ()))) or "scalar"
    spec = sharding.spec if sharding is not None else PartitionSpec()
    return f"{shape} sharded {spec}"


def sharding_message(
    op: str, operands: dict[str, Any], reason: str, fix: str, frame: types.FrameType | None
) -> str:
    where = layer_path(frame)
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
