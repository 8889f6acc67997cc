"""``pm.register_axis_metadata``: classes that are not boxes take part in the one walk of
``pm.add_axis``/``pm.remove_axis`` (an adapter's Variables), beside the boxes."""

from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
import pytest

import pytreemod as pm

LAYERS = {pm.PARTITION_NAME: "layers"}


class Tagged:
    """Not a box and not a pytree node: per-axis names kept beside a value."""

    def __init__(self, names: tuple[Any, ...], log: list[str] | None = None) -> None:
        self.names = names
        self.log = [] if log is None else log


class SubTagged(Tagged):
    pass


def _add(x: Tagged, index: int, params: Mapping[Any, Any]) -> Tagged:
    names = list(x.names)
    names.insert(index, params.get(pm.PARTITION_NAME))
    return type(x)(tuple(names), [*x.log, f"add {index}"])


def _remove(x: Tagged, index: int, params: Mapping[Any, Any]) -> Tagged:
    del params
    return type(x)(x.names[:index] + x.names[index + 1 :], [*x.log, f"remove {index}"])


pm.register_axis_metadata(Tagged, add_axis=_add, remove_axis=_remove)


def test_a_registered_class_goes_through_the_same_walk_as_boxes() -> None:
    tree = {
        "tag": Tagged(("embed",)),
        "sub": [SubTagged(("mlp",))],  # subclasses are found through the MRO
        "box": pm.Partitioned(jnp.zeros((2, 3)), ("embed", "mlp")),
        "plain": jnp.zeros(2),
        "n": 3,
    }
    added = pm.add_axis(tree, 0, LAYERS)
    assert added["tag"].names == ("layers", "embed") and added["tag"].log == ["add 0"]
    assert type(added["sub"][0]) is SubTagged and added["sub"][0].names == ("layers", "mlp")
    assert added["box"].names == ("layers", "embed", "mlp")
    assert added["n"] == 3 and added["plain"] is tree["plain"]
    back = pm.remove_axis(added, 0, LAYERS)
    assert back["tag"].names == ("embed",) and back["tag"].log == ["add 0", "remove 0"]
    assert back["box"].names == ("embed", "mlp")


def test_only_classes_are_registered() -> None:
    with pytest.raises(TypeError, match="register_axis_metadata: expected a class, got 3"):
        pm.register_axis_metadata(3, add_axis=_add, remove_axis=_remove)  # type: ignore[arg-type]
