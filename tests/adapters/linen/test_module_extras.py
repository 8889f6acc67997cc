"""Linen Module details: kw-only dataclass helpers, metadata boxes through
get_variable, call records for tabulate, and setup validation before transforms."""

import dataclasses
import inspect
from typing import Any

import jax
import jax.numpy as jnp
import pytest

import adapters.linen as nn
from adapters import errors, serialization
from adapters.linen import kw_only_dataclasses
from adapters.linen.module import _context, _tabulate_context


class Scale(nn.Module):
    features: int = 2

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        w = self.param("w", jax.nn.initializers.ones, (x.shape[-1], self.features))
        return x @ w


def test_kw_only_fields_stay_kw_only_when_redeclared() -> None:
    @kw_only_dataclasses.dataclass
    class A:
        x: int = kw_only_dataclasses.field(default=1, kw_only=True)

    @kw_only_dataclasses.dataclass
    class B(A):
        size: float
        x: int = 2

    params = inspect.signature(B).parameters
    assert list(params) == ["size", "x"]
    assert params["x"].kind is inspect.Parameter.KEYWORD_ONLY and params["x"].default == 2


def test_extra_fields_come_last() -> None:
    @kw_only_dataclasses.dataclass(
        extra_fields=[("tag", str, kw_only_dataclasses.field(default="t", kw_only=True))]
    )
    class C:
        a: int

    assert [f.name for f in dataclasses.fields(C)] == ["a", "tag"]
    assert C(1).tag == "t"


def test_get_variable_keeps_metadata_boxes_and_param_unboxes() -> None:
    seen: dict[str, Any] = {}

    class Boxed(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            init = nn.with_partitioning(jax.nn.initializers.ones, ("in", "out"))
            kernel = self.param("kernel", init, (x.shape[-1], 2))
            seen["param"] = kernel
            seen["stored"] = self.get_variable("params", "kernel")
            return x @ kernel

    Boxed().init(jax.random.key(0), jnp.ones((1, 3)))
    assert isinstance(seen["stored"], nn.Partitioned)
    assert seen["stored"].names == ("in", "out")
    assert not isinstance(seen["param"], nn.Partitioned)


def test_call_records_for_tabulate() -> None:
    class Net(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            return Scale(name="inner")(x)

    with _tabulate_context():
        Net().init(jax.random.key(0), jnp.ones((1, 2)))
        calls = list(_context.call_info_stack[-1].calls)
    assert [(c.index, c.path, c.method) for c in calls] == [
        (1, ("inner",), "__call__"),
        (0, (), "__call__"),
    ]
    assert all(c.module.scope is None for c in calls)
    assert not _context.call_info_stack


def test_setup_is_checked_once_abstractly_before_a_transform() -> None:
    calls: list[str] = []

    class Inner(nn.Module):
        def setup(self) -> None:
            calls.append("setup")
            self.layer = Scale(2)

        @nn.remat
        def __call__(self, x: jax.Array) -> jax.Array:
            return self.layer(x)

    class Outer(nn.Module):
        def setup(self) -> None:
            self.inner = Inner()

        def __call__(self, x: jax.Array) -> jax.Array:
            return self.inner(x)

    Outer().init(jax.random.key(0), jnp.ones((1, 2)))
    assert calls == ["setup", "setup"]  # the abstract check, then the real run

    class Clash(nn.Module):
        def setup(self) -> None:
            self.a = Scale(name="x")
            self.b = Scale(name="x")

        @nn.remat
        def __call__(self, x: jax.Array) -> jax.Array:
            return x

    class Host(nn.Module):
        def setup(self) -> None:
            self.clash = Clash()

        def __call__(self, x: jax.Array) -> jax.Array:
            return self.clash(x)

    with pytest.raises(errors.NameInUseError, match='submodule "x"'):
        Host().init(jax.random.key(0), jnp.ones((1, 2)))


def test_module_passed_as_argument_and_attribute_gets_one_scope() -> None:
    class Pair(nn.Module):
        first: nn.Module

        @nn.compact
        def __call__(self, x: jax.Array, second: nn.Module) -> jax.Array:
            return second(self.first(x))

    class Host(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            shared = Scale(2)
            return nn.jit(Pair)(shared)(x, shared)

    params = Host().init(jax.random.key(0), jnp.ones((1, 2)))["params"]
    assert list(params) == ["Scale_0"]


def test_while_loop_split_rngs_with_deny_list_keys() -> None:
    class Host(nn.Module):
        def setup(self) -> None:
            pass

    bound = Host().bind({}, rngs={"noise": jax.random.key(0)})

    def body(mdl: Host, c: jax.Array) -> jax.Array:
        return c + jax.random.uniform(mdl.make_rng("noise"), ())

    out = nn.while_loop(
        lambda mdl, c: c < 3.0,  # type: ignore[arg-type,return-value]
        body,
        bound,
        jnp.zeros(()),
        split_rngs={"params": False, nn.DenyList("params"): True},
    )
    assert float(out) >= 3.0


def test_jit_fingerprints_serializable_attributes_by_state() -> None:
    class Node:
        def __init__(self, a: int):
            self.a = a

        def __hash__(self) -> int:
            raise TypeError("not hashable")

    serialization.register_serialization_state(
        Node, lambda n: {"a": n.a}, lambda n, d: Node(d["a"])
    )
    traces: list[int] = []

    class Holder(nn.Module):
        node: Any

        @nn.jit
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            traces.append(1)
            return x + self.node.a

    try:
        Holder(Node(1)).init_with_output(jax.random.key(0), jnp.ones(()))
        Holder(Node(1)).init_with_output(jax.random.key(0), jnp.ones(()))
        assert len(traces) == 1
        y, _ = Holder(Node(2)).init_with_output(jax.random.key(0), jnp.ones(()))
        assert len(traces) == 2 and float(y) == 3.0
    finally:
        del serialization._STATE_DICT_REGISTRY[Node]
