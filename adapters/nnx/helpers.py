"""Containers that are Modules (``nnx.List``, ``nnx.Dict``), ``nnx.Sequential`` and the
functional ``nnx.TrainState``."""

import inspect
from collections.abc import Callable, Iterable, Iterator, MutableMapping, MutableSequence
from typing import Any, Generic, TypeVar

import jax
import jax.numpy as jnp
import optax

from .. import struct
from . import reprlib
from .graphlib import GraphDef, update_variable
from .module import Module
from .statelib import State
from .variablelib import Variable

A = TypeVar("A")
M = TypeVar("M", bound=Module)
TS = TypeVar("TS", bound="TrainState[Any]")


class Dict(reprlib.MappingReprMixin, Module, MutableMapping[str, A]):
    """A Module that is a mutable mapping from names to values (arrays, Variables,
    Modules and static values alike); entries are attributes, so they are graph children."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        for name, value in dict(*args, **kwargs).items():
            setattr(self, name, value)

    def __getitem__(self, key: str) -> A:
        try:
            return getattr(self, key)
        except AttributeError as e:
            raise KeyError(key) from e

    def __setitem__(self, key: str, value: A) -> None:
        setattr(self, key, value)

    def __iter__(self) -> Iterator[str]:
        return (k for k in vars(self) if not k.startswith("_pytree__"))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __hash__(self) -> int:
        return id(self)

    def __delitem__(self, key: str) -> None:
        try:
            delattr(self, key)
        except AttributeError as e:
            raise KeyError(key) from e


def _bounds(index: int, length: int) -> int:
    if index < 0:
        index += length
    if index < 0 or index >= length:
        raise IndexError("Index out of bounds")
    return index


class List(reprlib.SequenceReprMixin, Module, MutableSequence[A]):
    """A Module that is a mutable sequence; element ``i`` is the attribute ``'i'`` (an int
    key in paths), so elements are graph children."""

    _pytree__has_int_keys = True

    def __init__(self, it: Iterable[A] | None = None, /) -> None:
        self._length: int = 0
        if it is not None:
            for value in it:
                self.append(value)

    def _get_elem(self, key: int) -> A:
        return getattr(self, str(key))

    def _set_elem(self, key: int, value: A) -> None:
        setattr(self, str(key), value)

    def _del_elem(self, key: int) -> None:
        delattr(self, str(key))

    def __len__(self) -> int:
        return self._length

    def append(self, value: A) -> None:
        """Add ``value`` at the end."""
        self._set_elem(self._length, value)
        self._length += 1

    def insert(self, index: int, value: A) -> None:
        """Insert ``value`` before ``index`` (clamped to the list)."""
        if index < 0:
            index += self._length
        index = min(max(index, 0), self._length)
        for i in range(self._length, index, -1):
            self._set_elem(i, self._get_elem(i - 1))
        self._set_elem(index, value)
        self._length += 1

    def __iter__(self) -> Iterator[A]:
        for i in range(self._length):
            yield self._get_elem(i)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, int):
            return self._get_elem(_bounds(index, self._length))
        if isinstance(index, slice):
            return [self._get_elem(i) for i in list(range(self._length))[index]]
        raise TypeError("Invalid index type")

    def __setitem__(self, index: Any, value: Any) -> None:
        if isinstance(index, int):
            self._set_elem(_bounds(index, self._length), value)
        elif isinstance(index, slice):
            if not isinstance(value, Iterable):
                raise TypeError("Expected an iterable")
            values = list(value)
            idxs = list(range(self._length))[index]
            if len(idxs) != len(values):
                raise ValueError("Length mismatch")
            for i, v in zip(idxs, values, strict=True):
                self._set_elem(i, v)
        else:
            raise TypeError("Invalid index type")

    def __delitem__(self, index: Any) -> None:
        if isinstance(index, int):
            index = _bounds(index, self._length)
            self._del_elem(index)
            for i in range(index + 1, self._length):
                self._set_elem(i - 1, self._get_elem(i))
            self._length -= 1
        elif isinstance(index, slice):
            for i in reversed(list(range(self._length))[index]):
                del self[i]
        else:
            raise TypeError("Invalid index type")

    def _graph_node_set_key(self, key: Any, value: Any) -> None:
        if not isinstance(key, int):
            raise KeyError(f"Invalid key: {key}")
        if key < len(self):
            current = self[key]
            if isinstance(current, Variable) and isinstance(value, Variable):
                update_variable(current, value)
            else:
                self[key] = value
        else:
            self.insert(key, value)


def has_keyword_arg(func: Callable[..., Any], name: str) -> bool:
    """Whether ``func`` takes an argument ``name`` by keyword."""
    return any(
        p.name == name and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
        for p in inspect.signature(func).parameters.values()
    )


class Sequential(Module):
    """Applies its callables in order: a tuple output is splatted into the next call, a
    dict output is passed as keyword arguments; ``rngs`` reaches the layers that take it."""

    def __init__(self, *fns: Callable[..., Any]) -> None:
        self.layers = List(fns)

    def __call__(self, *args: Any, rngs: Any = None, **kwargs: Any) -> Any:
        if len(self.layers) == 0:
            if len(args) == 1:
                return args[0]
            if args:
                return args
            return kwargs or None
        output: Any = None
        for i, f in enumerate(self.layers):
            if not callable(f):
                raise TypeError(f"Sequence[{i}] is not callable: {f}")
            if i > 0:
                if isinstance(output, tuple):
                    args, kwargs = output, {}
                elif isinstance(output, dict):
                    args, kwargs = (), output
                else:
                    args, kwargs = (output,), {}
            if rngs is not None and has_keyword_arg(f, "rngs"):
                kwargs["rngs"] = rngs
            output = f(*args, **kwargs)
        return output


class TrainState(Generic[M], struct.PyTreeNode):
    """A functional train state: the model's GraphDef, its params State, the optax state
    and step; ``apply`` runs the model, ``apply_gradients`` takes one optimizer step."""

    graphdef: GraphDef[M]
    params: State
    opt_state: Any
    step: jax.Array
    tx: optax.GradientTransformation = struct.field(pytree_node=False)

    @classmethod
    def create(
        cls,
        graphdef: GraphDef[M],
        *,
        params: State,
        tx: optax.GradientTransformation,
        step: int = 0,
        **kwargs: Any,
    ) -> Any:
        """A TrainState at ``step`` with ``tx`` initialized on ``params``."""
        return cls(  # type: ignore[call-arg]
            graphdef=graphdef,
            params=params,
            opt_state=tx.init(params),
            step=jnp.asarray(step),
            tx=tx,
            **kwargs,
        )

    def apply(self, state: State | str, *states: State | str) -> Any:
        """``graphdef.apply`` on the given States (a name means the attribute of that name)."""
        resolved: list[State] = []
        for s in (state, *states):
            if isinstance(s, str):
                value = getattr(self, s)
                if not isinstance(value, State):
                    raise TypeError(
                        f"Expected {type(self).__name__}.{s} to be a State, got {type(value)}"
                    )
                s = value
            resolved.append(s)
        return self.graphdef.apply(*resolved)

    def apply_gradients(self: TS, grads: State, **kwargs: Any) -> TS:
        """One optimizer step: new params, optimizer state and step (other fields from
        ``kwargs``)."""
        updates, opt_state = self.tx.update(grads, self.opt_state, self.params)
        params = optax.apply_updates(self.params, updates)  # type: ignore[arg-type]
        return self.replace(params=params, opt_state=opt_state, step=self.step + 1, **kwargs)
