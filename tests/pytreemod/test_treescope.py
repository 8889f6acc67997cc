"""treescope rendering of modules and variables: a foldable tree with one child per field."""

import re
import subprocess
import sys
from typing import Any

import jax
import jax.numpy as jnp
import pytest

import pytreemod as pm
from pytreemod._treescope import treescope_repr

treescope = pytest.importorskip("treescope")

# What the classes define themselves, before the fixture below replaces it.
MODULE_HOOK = pm.Module.__dict__.get("__treescope_repr__")
VARIABLE_HOOK = pm.Variable.__dict__.get("__treescope_repr__")


class Block(pm.Module):
    weight: pm.Param
    stats: pm.BatchStat
    width: int = pm.field(static=True, default=4)
    hidden: int = pm.field(static=True, default=0, repr=False)


class Net(pm.Module):
    blocks: tuple[Block, ...]
    head: Any

    def __init__(self) -> None:
        self.blocks = (
            Block(pm.Param(jnp.ones((2, 3))), pm.BatchStat(jnp.zeros(3))),
            Block(pm.Param(jnp.ones((3, 3))), pm.BatchStat(jnp.zeros(3)), width=7),
        )
        self.head = jnp.arange(5.0)


@pytest.fixture(autouse=True)
def hooked(monkeypatch: pytest.MonkeyPatch) -> None:
    # Module/Variable.__treescope_repr__ delegate to treescope_repr; install it directly so
    # these tests exercise this file whatever the classes define.
    monkeypatch.setattr(pm.Module, "__treescope_repr__", treescope_repr, raising=False)
    monkeypatch.setattr(pm.Variable, "__treescope_repr__", treescope_repr, raising=False)


def test_text_rendering_shows_every_field_and_the_nesting() -> None:
    text = treescope.render_to_text(Net())
    assert text.startswith("Net(")
    for name in ("blocks=(", "weight=Param(", "stats=BatchStat(", "width=7", "head="):
        assert name in text
    assert "width=4" in text
    assert "hidden=" not in text  # repr=False fields stay hidden, as in repr()
    assert text.count("Block(") == 2
    assert "float32(2, 3)" in text or "float32" in text


def test_roundtrip_mode_qualifies_types_and_marks_custom_init() -> None:
    text = treescope.render_to_text(Net(), roundtrip_mode=True)
    # Net has a custom __init__: not rebuilt by calling it with its fields.
    assert text.startswith("<") and "Net(" in text
    # Block's dataclass __init__ takes its fields: a constructor call that roundtrips.
    assert "test_treescope.Block(" in text
    assert "pytreemod._variables.Param(" in text


def test_html_rendering_is_foldable() -> None:
    html = treescope.render_to_html(Net(), compressed=False)
    assert "Block" in html and "weight" in html
    # Foldable nodes are rendered with treescope's expand/collapse markers.
    assert "foldable" in html


def test_other_objects_are_left_to_treescope() -> None:
    def renderer(value: Any, path: str | None = None) -> Any:
        raise AssertionError("not called")

    assert treescope_repr({"a": 1}, None, renderer) is NotImplemented
    assert treescope_repr(jnp.ones(2), None, renderer) is NotImplemented


def test_paths_of_children_follow_attribute_syntax() -> None:
    seen: list[str | None] = []

    def renderer(value: Any, path: str | None = None) -> Any:
        seen.append(path)
        from treescope import rendering_parts

        return rendering_parts.text("x")

    rendering = treescope_repr(Net(), "root", renderer)
    assert seen == ["root.blocks", "root.head"]
    assert "FoldableTreeNode" in repr(rendering.renderable)
    seen.clear()
    treescope_repr(pm.Param(jnp.ones(2)), ".w", renderer)
    assert seen == [".w.value"]


def test_abstract_modules_render() -> None:
    abstract = jax.eval_shape(Net)
    text = treescope.render_to_text(abstract)
    assert "ShapeDtypeStruct" in text and "blocks=" in text


def test_module_classes_delegate_when_wired() -> None:
    if MODULE_HOOK is None:
        pytest.skip("Module.__treescope_repr__ is not defined by pytreemod._module yet")
    seen: list[str | None] = []

    def renderer(value: Any, path: str | None = None) -> Any:
        from treescope import rendering_parts

        seen.append(path)
        return rendering_parts.text("x")

    MODULE_HOOK(Net(), "m", renderer)
    assert seen == ["m.blocks", "m.head"]


def test_variables_render_as_foldable_constructor_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    # The classes' own hooks, not the fixture's direct installation.
    assert VARIABLE_HOOK is not None and MODULE_HOOK is not None
    monkeypatch.setattr(pm.Variable, "__treescope_repr__", VARIABLE_HOOK)
    monkeypatch.setattr(pm.Module, "__treescope_repr__", MODULE_HOOK)
    seen: list[tuple[Any, str | None]] = []

    def renderer(value: Any, path: str | None = None) -> Any:
        from treescope import rendering_parts

        seen.append((value, path))
        return rendering_parts.text("x")

    param = pm.Param(jnp.arange(3.0))
    rendering = param.__treescope_repr__(".w", renderer)
    assert "FoldableTreeNode" in repr(rendering.renderable)
    assert [p for _, p in seen] == [".w.value"] and seen[0][0] is param.value
    text = treescope.render_to_text(Net())
    assert len(re.findall(r"weight=Param\(\s*value=<jax\.Array float32", text)) == 2
    assert len(re.findall(r"stats=BatchStat\(\s*value=", text)) == 2
    html = treescope.render_to_html(pm.Param(jnp.ones((2, 3))), compressed=False)
    assert "Param" in html and "value" in html and "foldable" in html


def test_treescope_layer_recognises_variables_without_importing_them() -> None:
    import pytreemod._treescope as ts

    assert "Variable" not in vars(ts)
    assert ts._is_variable(pm.BatchStat(1.0)) and not ts._is_variable(jnp.ones(2))

    class Lookalike:  # has a value and a collection, but is not a pytreemod Variable
        value = 1
        collection = "params"

    assert not ts._is_variable(Lookalike())


def test_missing_treescope_is_a_clear_import_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "treescope", None)
    with pytest.raises(ImportError, match=r"needs the `treescope` package"):
        treescope_repr(Net(), None, lambda v, path=None: None)


def test_pytreemod_imports_without_treescope() -> None:
    code = (
        "import sys; sys.modules['treescope'] = None\n"
        "import jax.numpy as jnp, pytreemod as pm\n"
        "print(repr(pm.Param(jnp.ones(2))))\n"
        "print('treescope' in sys.modules and sys.modules['treescope'] is not None)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["Param(f32[2])", "False"]
