"""Linen layers document their fields and call arguments, and their examples run.

Every public ``adapters.linen`` layer class has a Google-style ``Attributes:`` section
with one entry per dataclass field (``parent`` and ``name`` aside, they are Module's),
and its ``__call__`` an ``Args:`` entry per argument. The docstring examples of the
layer modules run and print what they show (as user code, with JAX's standard
promotion rules).
"""

import dataclasses
import doctest
import importlib
import inspect
import re

import jax
import pytest

from adapters import linen as nn

LAYERS = sorted(
    name
    for name in dir(nn)
    if isinstance(getattr(nn, name), type)
    and issubclass(getattr(nn, name), nn.Module)
    and getattr(nn, name) is not nn.Module
)
# Every module defining a public layer, and the pooling functions: each has examples.
LAYER_MODULES = sorted(
    {getattr(nn, name).__module__ for name in LAYERS} | {"adapters.linen.pooling"}
)


def _section(doc: str, title: str) -> list[str]:
    """The entry names of a Google-style section (``title:`` then indented ``name: ...``)."""
    lines = inspect.cleandoc(doc).splitlines()
    try:
        start = lines.index(f"{title}:")
    except ValueError:
        return []
    names = []
    for line in lines[start + 1 :]:
        if line.strip() and not line.startswith(" "):
            break
        match = re.match(r"^ {2,4}(\*{0,2}\w+)(?: \([^)]*\))?:", line)
        if match:
            names.append(match.group(1))
    return names


def _fields(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if f.name not in ("parent", "name")]


def test_the_layer_list_is_the_expected_one() -> None:
    assert {"Dense", "Conv", "BatchNorm", "MultiHeadDotProductAttention", "LSTMCell"} <= set(LAYERS)
    assert {"adapters.linen.linear", "adapters.linen.recurrent"} <= set(LAYER_MODULES)
    assert "Module" not in LAYERS


@pytest.mark.parametrize("name", LAYERS)
def test_layer_documents_every_field(name: str) -> None:
    cls = getattr(nn, name)
    doc = cls.__doc__ or ""
    fields = _fields(cls)
    documented = _section(doc, "Attributes")
    if fields:
        assert documented, f"{name} has no Attributes: section"
    assert [f for f in fields if f not in documented] == [], f"{name} leaves fields out"
    assert [d for d in documented if d not in fields] == [], f"{name} documents non-fields"


@pytest.mark.parametrize("name", LAYERS)
def test_layer_call_documents_its_arguments(name: str) -> None:
    cls = getattr(nn, name)
    owner = next((c for c in cls.__mro__ if "__call__" in vars(c)), object)
    if not issubclass(owner, nn.Module) or owner is nn.Module:
        pytest.skip(f"{name} defines no __call__ (an abstract base)")
    call = vars(owner)["__call__"]
    params = [
        ("*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD else "") + p.name
        for p in list(inspect.signature(call).parameters.values())[1:]
    ]
    documented = _section(call.__doc__ or "", "Args")
    assert documented == params, f"{name}.__call__ documents {documented}, takes {params}"


def test_section_parser_reads_entries_only() -> None:
    doc = """Summary.

    Attributes:
        alpha: one
          continued: not an entry.
        beta (int): two.

    Example:
        gamma: not an attribute.
    """
    assert _section(doc, "Attributes") == ["alpha", "beta"]
    assert _section(doc, "Args") == []


@pytest.mark.parametrize("name", LAYER_MODULES)
def test_layer_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
        result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0
