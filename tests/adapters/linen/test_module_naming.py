"""Linen Module naming: autonames, explicit names, setup attributes (and containers),
collisions, adoption of modules passed in, compact_name_scope, share_scope, copies."""

from typing import Any

import jax
import jax.numpy as jnp
import pytest

import adapters.linen as nn
from adapters import errors
from adapters.core import Scope


def shapes(tree: Any) -> Any:
    return jax.tree.map(jnp.shape, tree)


class Scale(nn.Module):
    """A minimal layer with one parameter, independent of the layers files."""

    features: int = 2

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        w = self.param("w", jax.nn.initializers.ones, (x.shape[-1], self.features))
        return x @ w


def test_compact_autonames_follow_creation_order_per_class() -> None:
    class Net(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            x = Scale(3)(x)
            x = Scale(4, name="head")(x)
            return Scale(5)(x)

    params = Net().init(jax.random.key(0), jnp.ones((1, 2)))["params"]
    assert shapes(params) == {
        "Scale_0": {"w": (2, 3)},
        "head": {"w": (3, 4)},
        "Scale_1": {"w": (4, 5)},
    }


def test_reusing_one_instance_shares_its_parameters() -> None:
    class Net(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            layer = Scale(2)
            return layer(layer(x))

    variables = Net().init(jax.random.key(0), jnp.ones((1, 2)))
    assert list(variables["params"]) == ["Scale_0"]


def test_helper_method_creates_submodules_under_the_caller() -> None:
    class Net(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            return self.block(self.block(x))

        def block(self, x: jax.Array) -> jax.Array:
            return Scale(2)(x)

    params = Net().init(jax.random.key(0), jnp.ones((1, 2)))["params"]
    assert sorted(params) == ["Scale_0", "Scale_1"]


def test_setup_names_by_attribute_including_containers() -> None:
    class Net(nn.Module):
        def setup(self) -> None:
            self.first = Scale(2)
            self.stack = [Scale(2), Scale(2)]
            self.heads = {"a": Scale(1), "b": {"c": Scale(1)}}

        def __call__(self, x: jax.Array) -> jax.Array:
            x = self.first(x)
            for layer in self.stack:
                x = layer(x)
            return self.heads["a"](x) + self.heads["b"]["c"](x)

    params = Net().init(jax.random.key(0), jnp.ones((1, 2)))["params"]
    assert sorted(params) == ["first", "heads_a", "heads_b_c", "stack_0", "stack_1"]


def test_setup_containers_are_frozen() -> None:
    class Net(nn.Module):
        def setup(self) -> None:
            self.items = [1, 2]
            self.table = {"k": [3]}

        def __call__(self) -> Any:
            return self.items, self.table

    items, table = Net().apply({})
    assert items == (1, 2)
    assert isinstance(table, nn.FrozenDict) and table["k"] == (3,)


def test_suffix_pairs_and_freeze_helpers() -> None:
    assert nn.module._get_suffix_value_pairs([]) == [("", [])]
    assert nn.module._get_suffix_value_pairs({"b": 2, "a": {"c": 1}}) == [("_a_c", 1), ("_b", 2)]
    assert nn.module._freeze_attr([1, [2]]) == (1, (2,))


def test_variable_name_collisions_raise_name_in_use() -> None:
    class Twice(nn.Module):
        @nn.compact
        def __call__(self) -> None:
            self.param("p", jax.nn.initializers.zeros, ())
            self.param("p", jax.nn.initializers.zeros, ())

    with pytest.raises(errors.NameInUseError, match='Could not create param "p" in Module Twice'):
        Twice().init(jax.random.key(0))

    class VarTwice(nn.Module):
        @nn.compact
        def __call__(self) -> None:
            self.variable("a", "v", jnp.zeros, ())
            self.variable("b", "v", jnp.zeros, ())  # another collection: allowed
            self.variable("a", "v", jnp.zeros, ())

    with pytest.raises(errors.NameInUseError, match='Could not create variable "v"'):
        VarTwice().init(jax.random.key(0))


def test_submodule_named_like_a_param_raises_name_in_use() -> None:
    class Clash(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            self.param("sub", jax.nn.initializers.zeros, ())
            return Scale(name="sub")(x)

    with pytest.raises(errors.NameInUseError, match='Could not create submodule "sub"'):
        Clash().init(jax.random.key(0), jnp.ones((1, 2)))


def test_submodule_outside_setup_or_compact_is_an_error() -> None:
    class Plain(nn.Module):
        def __call__(self, x: jax.Array) -> jax.Array:
            return Scale()(x)

    class Outer(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            return Plain()(x)

    with pytest.raises(errors.AssignSubModuleError, match="Submodule Scale must be defined"):
        Outer().init(jax.random.key(0), jnp.ones((1, 2)))


def test_variables_outside_setup_or_compact_are_errors() -> None:
    class NoCompact(nn.Module):
        def __call__(self) -> None:
            self.param("p", jax.nn.initializers.zeros, ())

    scope = Scope({}, {"params": jax.random.key(0)}, mutable=True)
    with pytest.raises(ValueError, match="Parameters must be initialized in `setup"):
        NoCompact(parent=scope)()

    class NoCompactVar(nn.Module):
        def __call__(self) -> None:
            self.variable("c", "v", jnp.zeros, ())

    with pytest.raises(ValueError, match="Variables must be initialized in `setup"):
        NoCompactVar(parent=scope.rewound())()


def test_invalid_parent_is_an_error() -> None:
    with pytest.raises(ValueError, match="parent must be None, Module or Scope"):
        Scale(parent=3)  # type: ignore[arg-type]


def test_passed_in_modules_are_adopted_under_the_attribute_name() -> None:
    class Wrapper(nn.Module):
        inner: nn.Module

        def __call__(self, x: jax.Array) -> jax.Array:
            return self.inner(x)

    template = Scale(2, name="given")
    params = Wrapper(template).init(jax.random.key(0), jnp.ones((1, 2)))["params"]
    assert list(params) == ["inner"]
    assert template.name == "given" and template.scope is None  # the template is untouched


def test_preserve_adopted_names_class_attribute() -> None:
    class Keep(nn.Module):
        inner: nn.Module
        preserve_adopted_names = True

        def __call__(self, x: jax.Array) -> jax.Array:
            return self.inner(x)

    params = Keep(Scale(2, name="given")).init(jax.random.key(0), jnp.ones((1, 2)))["params"]
    assert list(params) == ["given"]


def test_a_module_shared_by_two_attributes_is_adopted_once() -> None:
    class Counter(nn.Module):
        @nn.compact
        def __call__(self) -> jax.Array:
            n = self.variable("counts", "n", jnp.zeros, ())
            n.value = n.value + 1
            return n.value

    class Two(nn.Module):
        a: nn.Module
        b: nn.Module

        def __call__(self) -> jax.Array:
            self.a()
            return self.b()

    shared = Counter()
    out, state = Two(shared, shared).apply({}, mutable="counts")
    assert out == 2
    assert list(state["counts"]) == ["a"]


def test_copy_gets_a_new_autoname_and_clone_keeps_attributes() -> None:
    class Net(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            layer = Scale(2)
            return layer.copy(name="twin")(layer(x))

    params = Net().init(jax.random.key(0), jnp.ones((1, 2)))["params"]
    assert sorted(params) == ["Scale_0", "twin"]
    clone = Scale(3, name="x").clone(features=4)
    assert (clone.features, clone.name, clone.parent) == (4, "x", None)


def test_compact_name_scope_methods_get_their_own_scope() -> None:
    class Net(nn.Module):
        @nn.compact_name_scope
        def encode(self, x: jax.Array) -> jax.Array:
            return Scale(2)(x)

        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            return self.encode(x) + Scale(2)(x)

    variables = Net().init(jax.random.key(0), jnp.ones((1, 2)))
    assert shapes(variables["params"]) == {
        "encode": {"Scale_0": {"w": (2, 2)}},
        "Scale_0": {"w": (2, 2)},
    }
    y = Net().apply(variables, jnp.ones((1, 2)), method="encode")
    assert y.shape == (1, 2)


def test_compact_name_scope_on_an_unbound_module_is_an_error() -> None:
    class Net(nn.Module):
        @nn.compact_name_scope
        def encode(self, x: jax.Array) -> jax.Array:
            return x

    with pytest.raises(ValueError, match="Cannot call compact_name_scope method 'encode'"):
        Net().encode(jnp.ones(()))


def test_share_scope_puts_child_variables_next_to_the_parents() -> None:
    class Lora(nn.Module):
        base: nn.Module

        def setup(self) -> None:
            nn.share_scope(self, self.base)

        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            a = self.param("a", jax.nn.initializers.zeros, (x.shape[-1], 2))
            return self.base(x) + x @ a

    params = Lora(Scale(2)).init(jax.random.key(0), jnp.ones((1, 3)))["params"]
    assert sorted(params) == ["a", "w"]


def test_share_scope_needs_bound_modules() -> None:
    with pytest.raises(errors.CallShareScopeOnUnboundModuleError, match="share_scope"):
        nn.share_scope(Scale(), Scale())


def test_path_of_nested_modules() -> None:
    seen: list[tuple[str, ...]] = []

    class Leaf(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            seen.append(self.path)
            return x

    class Root(nn.Module):
        def setup(self) -> None:
            self.left = Leaf()

        def __call__(self, x: jax.Array) -> jax.Array:
            seen.append(self.path)
            return self.left(x)

    Root().init(jax.random.key(0), jnp.ones(()))
    assert seen == [(), ("left",)]
    with pytest.raises(ValueError, match="Can't access module paths on unbound modules"):
        _ = Leaf().path
