"""``adapters.training.orbax_utils``: Orbax arguments built from a target pytree.

Orbax (``orbax-checkpoint``) is imported when one of these functions is called, so this
module imports without it.
"""

import warnings
from types import ModuleType
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

__all__ = [
    "is_multi_device_array",
    "maybe_construct_transformations",
    "restore_args_from_target",
    "save_args_from_target",
]


def ocp() -> ModuleType:
    """``orbax.checkpoint``, or an ``ImportError`` saying how to install it."""
    try:
        import orbax.checkpoint as orbax_checkpoint
    except ImportError as e:
        raise ImportError(
            "Orbax checkpointing needs the orbax-checkpoint package: pip install "
            "orbax-checkpoint (or set config flax_use_orbax_checkpointing to False to write "
            "msgpack files)."
        ) from e
    return orbax_checkpoint


def is_multi_device_array(value: Any) -> bool:
    """Whether ``value`` is a ``jax.Array`` that is not fully replicated (Orbax then
    writes it with tensorstore rather than msgpack)."""
    return isinstance(value, jax.Array) and not value.is_fully_replicated


def save_args_from_target(target: Any) -> Any:
    """A pytree of default ``orbax.checkpoint.SaveArgs()``, one per leaf of ``target``."""
    save_args = ocp().SaveArgs
    return jax.tree_util.tree_map(lambda _: save_args(), target)


def maybe_construct_transformations(target: Any, transforms: Any | None) -> Any:
    """``transforms`` if given; else Orbax transforms that fall back to the checkpoint's
    value wherever ``target`` holds ``None``."""
    if transforms is not None:
        return transforms
    orbax = ocp()
    flat = orbax.utils.to_flat_dict(target, sep="/", keep_empty_nodes=True)
    return {k: orbax.Transform(use_fallback=True) for k, v in flat.items() if v is None}


def restore_args_from_target(target: Any, mesh: Mesh | None = None) -> Any:
    """Orbax ``restore_args`` for ``target``: arrays come back with the shardings of
    ``target``'s arrays, or as NumPy arrays if ``target`` holds no ``jax.Array``.

    ``mesh`` is deprecated: the shardings are taken from ``target``'s arrays; a mesh given
    here replaces their meshes (with a ``DeprecationWarning``).
    """
    orbax = ocp()
    shardings = jax.tree_util.tree_map(lambda x: getattr(x, "sharding", None), target)
    if not any(jax.tree_util.tree_leaves(shardings)):
        return jax.tree_util.tree_map(lambda _: orbax.RestoreArgs(restore_type=np.ndarray), target)
    if mesh is not None:
        warnings.warn(
            "restore_args_from_target(): `mesh` arg is deprecated. Simply calling the "
            "function with target pytree should suffice.",
            DeprecationWarning,
            stacklevel=2,
        )
        shardings = jax.tree_util.tree_map(
            lambda s: jax.sharding.NamedSharding(mesh, s.spec), shardings
        )
    return orbax.checkpoint_utils.construct_restore_args(target, shardings, set_global_shape=False)
