"""What ``inspect.signature`` and ``help()`` show of a Module class: its parameters, the
options a ``**kwargs: Unpack[Options]`` forwards, and nothing of the library's machinery."""

import dataclasses
import inspect
import pydoc
from typing import Any, Required, TypedDict, Unpack

import jax
import jax.numpy as jnp

import pytreemod as pm


def _help_text(obj: Any) -> str:
    """What ``help(obj)`` prints (without terminal bold)."""
    return pydoc.plain(pydoc.render_doc(obj))


class Base(pm.Module):
    weight: jax.Array
    scale: float = pm.field(static=True)

    def __init__(self, size: int, *, scale: float = 2.0, fill: float = 0.0, key: jax.Array):
        self.weight = jnp.full((size,), fill)
        self.scale = scale


class Options(TypedDict, total=False):
    scale: float
    fill: float
    key: Required[jax.Array]


class Sized(Base):
    def __init__(self, **kwargs: Unpack[Options]):
        super().__init__(3, **kwargs)


class Plain(pm.Module):
    weight: jax.Array
    size: int = pm.field(static=True, default=3)


def test_unpacked_options_are_spelled_out_with_the_bases_defaults() -> None:
    sig = inspect.signature(Sized)
    assert list(sig.parameters) == ["scale", "fill", "key"]
    assert [p.kind for p in sig.parameters.values()] == [inspect.Parameter.KEYWORD_ONLY] * 3
    assert sig.parameters["scale"].default == 2.0 and sig.parameters["fill"].default == 0.0
    assert sig.parameters["key"].default is inspect.Parameter.empty
    assert sig.parameters["fill"].annotation is float
    assert Sized(fill=1.0, key=jax.random.key(0)).weight.tolist() == [1.0, 1.0, 1.0]


def test_an_option_without_a_default_anywhere_keeps_kwargs() -> None:
    class More(TypedDict, total=False):
        colour: str

    class Unknown(Base):
        def __init__(self, **kwargs: Unpack[More]):
            super().__init__(3, key=jax.random.key(0))

    assert list(inspect.signature(Unknown).parameters) == ["kwargs"]


def test_help_shows_fields_not_the_library_machinery() -> None:
    for cls in (Plain, Sized, pm.Module, pm.TrainState, pm.nn.Linear):
        page = _help_text(cls)
        assert "_pytreemod" not in page, cls.__name__
    page = _help_text(Plain)
    init = next(line for line in page.splitlines() if "__init__(self" in line)
    assert init.startswith(" |  __init__(self, weight: ") and init.endswith(
        "size: int = 3) -> None"
    )
    assert "__dataclass_fields__ = {'weight': Field(name='weight'" in page


def test_the_dataclass_view_is_unchanged() -> None:
    assert [f.name for f in pm.fields(Plain)] == ["weight", "size"]
    assert dataclasses.replace(Plain(jnp.ones(2)), size=4).size == 4
    m: Any = Plain(jnp.ones(2))
    assert jax.tree.map(lambda x: x + 1, m).weight.tolist() == [2.0, 2.0]
