"""NNX Module: a Pytree with the conveniences of a neural-network layer.

``sow``/``perturb`` record intermediates (inside ``nnx.capture``), ``set_attributes``/
``train``/``eval`` switch modes in place, ``view``/``with_attributes`` make switched
copies sharing the arrays, and ``iter_modules`` walks the submodules.
"""

import functools
import inspect
import itertools
import types
import typing
import warnings
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from . import filterlib, graphlib, pytreelib, variablelib
from .pytreelib import Pytree, PytreeMeta
from .statelib import State, split_state
from .variablelib import Variable

A = TypeVar("A")
M = TypeVar("M", bound="Module")
PathParts = tuple[Any, ...]


def tuple_reduce(xs: tuple[Any, ...], x: Any) -> tuple[Any, ...]:
    """The default ``reduce_fn`` of ``sow``: append to a tuple."""
    return (*xs, x)


def tuple_init() -> tuple[Any, ...]:
    """The default ``init_fn`` of ``sow``: an empty tuple."""
    return ()


def _variable_type(variable_type: Any) -> type:
    if isinstance(variable_type, str):
        lookup = getattr(variablelib, "variable_type_from_name", None)
        if lookup is None:
            raise ValueError(f"Unknown Variable type name {variable_type!r}")
        return lookup(variable_type, allow_register=True)
    return variable_type


def _perturbation_type() -> type:
    return getattr(variablelib, "Perturbation", variablelib.Intermediate)


# Flax's two warnings, with the indentation their source literals carry.
_CAPTURE_GUIDE = (
    "https://flax.readthedocs.io/en/latest/guides/extracting_intermediates.html"
    " for more information."
)
_OUTSIDE_CAPTURE_SOW = (
    "Using 'Module.sow()' outside of 'nnx.capture()' is deprecated; see\n"
    f"        {_CAPTURE_GUIDE}\n        "
)
_OUTSIDE_CAPTURE_PERTURB = (
    "\n      Using 'Module.perturb()' outside of 'nnx.capture()' is deprecated; see\n"
    f"      {_CAPTURE_GUIDE}\n      "
)


class ModuleMeta(PytreeMeta):
    """The metaclass of Module (PytreeMeta's construction rules)."""


class Module(Pytree, metaclass=ModuleMeta):
    """Base class of NNX modules: ordinary mutable objects whose attributes may hold
    Variables, submodules, arrays, containers of them (``nnx.List``/``nnx.Dict``, or plain
    ones marked ``nnx.data``) and static configuration.

    A NumPy scalar passed to a subclass's ``__init__`` for a parameter annotated with a
    Python number (``rate: float``, ``features: int``...) arrives as the Python number it
    holds, so a module built from a config of NumPy numbers has the same graphdef as one
    built from literals.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if isinstance(init, types.FunctionType):
            cls.__init__ = _python_numbers(init)  # type: ignore[method-assign]

    def sow(
        self,
        variable_type: Any,
        name: str,
        value: Any,
        reduce_fn: Callable[[Any, Any], Any] = tuple_reduce,
        init_fn: Callable[[], Any] = tuple_init,
    ) -> bool:
        """Record ``value`` under ``name``: into the active ``nnx.capture`` (returns False
        when it captures no ``variable_type``), or (deprecated) into an attribute ``name``
        holding a ``variable_type`` Variable, combining with ``reduce_fn``."""
        variable_type = _variable_type(variable_type)
        captures = getattr(self, "__captures__", None)
        if captures is not None:
            for var in captures:
                if type(var) is variable_type:
                    var[name] = reduce_fn(var[name] if name in var else init_fn(), value)
                    return True
            return False
        if hasattr(self, name):
            variable = getattr(self, name)
            if not isinstance(variable, Variable):
                raise ValueError(
                    f"Expected '{name}' to be a Variable, got {type(variable).__name__}"
                )
            if type(variable) is not variable_type:
                raise ValueError(
                    f"Expected '{name}' to be of type '{variable_type.__name__}', "
                    f"got '{type(variable).__name__}'"
                )
            variable.set_value(reduce_fn(variable.get_value(), value))
        else:
            setattr(self, name, variable_type(reduce_fn(init_fn(), value)))
        warnings.warn(_OUTSIDE_CAPTURE_SOW, DeprecationWarning, stacklevel=2)
        return True

    def perturb(self, name: str, value: Any, variable_type: Any = None) -> Any:
        """``value`` plus the perturbation stored under ``name`` (zeros at first): taking
        the gradient with respect to the perturbation gives the gradient at ``value``."""
        variable_type = _variable_type(
            _perturbation_type() if variable_type is None else variable_type
        )
        captures = getattr(self, "__captures__", None)
        if captures is not None:
            for var in captures:
                if type(var) is variable_type:
                    if name not in var:
                        var[name] = jax.tree.map(jnp.zeros_like, value)
                    return var[name] + value
            return value
        if hasattr(self, name):
            var = getattr(self, name)
            if not isinstance(var, variable_type):
                raise ValueError(
                    f"Expected '{name}' to be of type '{variable_type.__name__}', "
                    f"got '{type(var).__name__}'"
                )
            old_value = var.get_value()
        else:
            old_value = jax.tree.map(jnp.zeros_like, value)
            setattr(self, name, variable_type(old_value))
        warnings.warn(_OUTSIDE_CAPTURE_PERTURB, DeprecationWarning, stacklevel=2)
        return old_value + value

    def iter_modules(self) -> Iterator[tuple[PathParts, "Module"]]:
        """Deprecated: ``nnx.iter_modules(self)``."""
        warnings.warn(
            "The 'm.iter_modules()' method is deprecated; use the 'nnx.iter_modules(m)' "
            "function instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        yield from iter_modules(self)

    def iter_children(self) -> Iterator[tuple[Any, "Module"]]:  # type: ignore[override]
        """Deprecated: ``nnx.iter_children(self)``."""
        warnings.warn(
            "The 'm.iter_children()' method is deprecated; use the 'nnx.iter_children(m)' "
            "function instead.",
            DeprecationWarning,
            stacklevel=2,
        )
        yield from graphlib.iter_children(self)

    def set_attributes(
        self,
        *filters: Any,
        raise_if_not_found: bool = True,
        graph: bool | None = None,
        **attributes: Any,
    ) -> None:
        """Set ``attributes`` in place on every module (this one included) that matches one
        of ``filters`` and already has them."""
        remaining = set(attributes)
        predicates = [filterlib.to_predicate(f) for f in (filters or (True,))]
        for path, module in iter_modules(self, graph=graph):
            for predicate in predicates:
                if predicate(path, module):
                    for name, value in attributes.items():
                        if hasattr(module, name):
                            remaining.discard(name)
                            setattr(module, name, value)
                    break
        if remaining and raise_if_not_found:
            raise ValueError(
                "Could not find at least one instance of the following"
                f" attributes: {sorted(remaining)}"
            )

    def train(self, **attributes: Any) -> None:
        """Training mode: ``deterministic=False``, ``use_running_average=False`` where present."""
        return self.set_attributes(
            deterministic=False, use_running_average=False, **attributes, raise_if_not_found=False
        )

    def eval(self, **attributes: Any) -> None:
        """Evaluation mode: ``deterministic=True``, ``use_running_average=True`` where present."""
        return self.set_attributes(
            deterministic=True, use_running_average=True, **attributes, raise_if_not_found=False
        )


def iter_modules(module: Any, /, *, graph: bool | None = None) -> Iterator[tuple[PathParts, Any]]:
    """``(path, module)`` of every Module in the graph, children before parents."""
    for path, value in graphlib.iter_graph(module, graph=graph):
        if isinstance(value, Module):
            yield path, value


iter_children = graphlib.iter_children
iter_module_children = graphlib.iter_module_children


def first_from(*args: Any, error_msg: str) -> Any:
    """The first argument that is not None (``ValueError(error_msg)`` if all are)."""
    for arg in args:
        if arg is not None:
            return arg
    raise ValueError(error_msg)


# ----------------------------------------------------------------------------- views


def _view_kwargs(node: Any, kwargs: dict[str, Any]) -> tuple[dict[str, Any], set[str] | None]:
    """The kwargs ``node.set_view`` accepts, and the names it consumes (None: all)."""
    params = inspect.signature(node.set_view).parameters.values()
    if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params):
        return kwargs, None
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    names = {p.name for p in params if p.kind in kinds}
    return {k: v for k, v in kwargs.items() if k in names}, names


def view(
    node: A,
    /,
    *,
    only: Any = ...,
    raise_if_not_found: bool = True,
    graph: bool | None = None,
    **kwargs: Any,
) -> A:
    """A copy of ``node`` (sharing its arrays) on which each matching module's ``set_view``
    was called with the keyword arguments it accepts; unused keys raise ``ValueError``."""
    predicate = filterlib.to_predicate(only)
    remaining = set(kwargs)

    def set_view(path: PathParts, x: Any) -> Any:
        if hasattr(x, "set_view") and predicate(path, x):
            accepted, names = _view_kwargs(x, kwargs)
            x.set_view(**accepted)
            if names is None:
                remaining.clear()
            else:
                remaining.difference_update(names)
        return x

    out = graphlib.recursive_map(set_view, node, graph=graph)
    if raise_if_not_found and remaining:
        raise ValueError(f"Unused keys found in nnx.view: {sorted(remaining)}")
    return out


def with_attributes(
    node: A,
    /,
    *,
    only: Any = ...,
    raise_if_not_found: bool = True,
    graph: bool | None = None,
    **attributes: Any,
) -> A:
    """A copy of ``node`` (sharing its arrays) with ``attributes`` set on every matching
    module that has them; the original is unchanged."""
    predicate = filterlib.to_predicate(only)
    remaining = set(attributes)

    def set_attrs(path: PathParts, x: Any) -> Any:
        if isinstance(x, Module) and predicate(path, x):
            for name, value in attributes.items():
                if hasattr(x, name):
                    setattr(x, name, value)
                    remaining.discard(name)
        return x

    out = graphlib.recursive_map(set_attrs, node, graph=graph)
    if remaining and raise_if_not_found:
        raise ValueError(
            f"Could not find at least one instance of the following attributes: {sorted(remaining)}"
        )
    return out


def _parse_docstring_args(doc: str) -> dict[str, str]:
    """``{name: description}`` of the entries of a Google-style ``Args:`` section (each
    entry starts at the section's indentation; its description lines are reindented to 4
    spaces)."""
    lines = doc.split("\n")
    first = next((line for line in lines if line.strip()), "")
    indent = len(first) - len(first.lstrip(" "))
    starts = [
        i
        for i, line in enumerate(lines)
        if line.strip() and len(line) - len(line.lstrip(" ")) == indent
    ]
    starts.append(len(lines))
    out: dict[str, str] = {}
    for start, end in itertools.pairwise(starts):
        colon = lines[start].find(":")
        name = lines[start][:colon].strip()
        rest = [
            " " * 4 + line[indent + 2 :] if line.strip() else line
            for line in lines[start + 1 : end]
        ]
        out[name] = "\n".join([" " * 4 + lines[start][colon + 1 :].strip(), *rest])
    return out


def view_info(node: Any, /, *, only: Any = ..., graph: bool | None = None) -> str:
    """The ``set_view`` arguments of every module class in ``node`` (with their docs)."""
    predicate = filterlib.to_predicate(only)
    classes: set[type] = set()

    def collect(path: PathParts, x: Any) -> Any:
        if hasattr(x, "set_view") and predicate(path, x):
            classes.add(type(x))
        return x

    graphlib.recursive_map(collect, node, graph=graph)
    out: list[str] = []
    for cls in sorted(classes, key=lambda c: c.__qualname__):
        out.append(f"{cls.__qualname__}:")
        sig = inspect.signature(cls.set_view)  # type: ignore[attr-defined]
        doc = inspect.getdoc(cls.set_view)  # type: ignore[attr-defined]
        if not isinstance(doc, str):
            out.append(f"  set_view{sig}")
            continue
        start, end = doc.find("Args:\n"), doc.find("Returns:\n")
        parsed = _parse_docstring_args(doc[start + 6 : len(doc) if end == -1 else end])
        for name, param in sig.parameters.items():
            if name in {"self", "args", "kwargs"}:
                continue
            if param.default is inspect.Parameter.empty:
                out.append(f"  {name}: {param.annotation}")
            else:
                out.append(f"  {name}: {param.annotation} = {param.default}")
            out.append(parsed[name])
    return "\n".join(out)


# ----------------------------------------------------------------------------- capture


def capture(
    fn: Any,
    *var_types: type,
    init: Any = None,
    method_outputs: type | None = None,
) -> Any:
    """Wrap ``fn`` (a function taking the module first, a bound method or a Module) so
    that it returns ``(result, state_per_var_type...)`` of the values ``sow``/``perturb``
    recorded; ``init`` seeds perturbations; ``method_outputs`` sows every public method's
    output. ``capture(VarType, ...)`` returns a decorator."""
    if isinstance(fn, type) and issubclass(fn, Variable):
        all_types = (fn, *var_types)
        return lambda actual: capture(actual, *all_types, init=init, method_outputs=method_outputs)
    bound: Any = None
    call_fn: Any = fn
    if inspect.ismethod(fn) and isinstance(fn.__self__, Module):
        bound = fn.__self__
    elif isinstance(fn, Module):
        bound = fn

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        module = args[0] if bound is None else bound
        by_path = _collect_state_by_path(init) if init else {}
        for path, m in iter_modules(module):
            initial: dict[type, dict[str, Any]] = {t: {} for t in var_types}
            for name, var in by_path.get(path, {}).items():
                initial.setdefault(type(var), {})[name] = var.get_value()
            m.__captures__ = pytreelib.data(tuple(t(v) for t, v in initial.items()))
        if method_outputs:
            for _, m in iter_modules(module):
                _add_capturing(type(m), method_outputs)
        try:
            result = call_fn(*args, **kwargs)
        finally:
            for _, m in iter_modules(module):
                _remove_capturing(type(m))
        captured = State({})
        _extract_captures(module, captured, set(var_types))
        if not var_types:
            return result
        parts = split_state(captured, *var_types)
        return (result, parts) if len(var_types) == 1 else (result, *parts)

    return wrapper


def _collect_state_by_path(state: Any) -> dict[PathParts, dict[str, Any]]:
    found: dict[PathParts, dict[str, Any]] = {}

    def collect(s: Any, path: PathParts) -> None:
        if isinstance(s, MutableMapping):
            for key, value in s.items():
                if isinstance(value, Variable):
                    found.setdefault(path, {})[key] = value
                elif isinstance(value, MutableMapping):
                    collect(value, (*path, key))

    collect(state, ())
    return found


def _extract_captures(module: Any, state: State, var_types: set[type]) -> None:
    for path, mod in iter_modules(module):
        if not hasattr(mod, "__captures__"):
            continue
        for var in mod.__captures__:
            if type(var) not in var_types:
                continue
            current: Any = state
            for part in path:
                if part not in current:
                    current[part] = State({})
                current = current[part]
            for key, value in var.items():
                current[key] = type(var)(value)
        delattr(mod, "__captures__")


def _add_capturing(cls: type, variable_type: type) -> None:
    """Sow the output of each public method (and ``__call__``) defined on ``cls``."""
    for name, method in list(cls.__dict__.items()):
        if not callable(method) or (name.startswith("_") and name != "__call__"):
            continue
        if hasattr(method, "_does_capturing"):
            continue
        setattr(cls, name, _capturing(name, method, variable_type))


def _capturing(name: str, method: Callable[..., Any], variable_type: type) -> Any:
    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = method(self, *args, **kwargs)
        self.sow(variable_type, name, result)
        return result

    wrapper._does_capturing = True  # type: ignore[attr-defined]
    return wrapper


def _remove_capturing(cls: type) -> None:
    for name, method in list(cls.__dict__.items()):
        if hasattr(method, "_does_capturing"):
            setattr(cls, name, method.__wrapped__)


# ----------------------------------------------------------------------------- numbers


def _is_numeric(hint: Any) -> bool:
    if hint is int or hint is float or hint is complex:
        return True
    return any(_is_numeric(a) for a in typing.get_args(hint))


def _number_slots(init: Callable[..., None]) -> tuple[frozenset[int], frozenset[str]]:
    """Positions (``self`` is 0) and names of ``init``'s numeric parameters."""
    try:
        hints: dict[str, Any] = typing.get_type_hints(init)
    except Exception:  # an unresolvable forward reference: no conversion
        hints = {}
    params = list(inspect.signature(init).parameters.values())
    names = frozenset(p.name for p in params if _is_numeric(hints.get(p.name)))
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positions = frozenset(
        i for i, p in enumerate(params) if p.name in names and p.kind in positional
    )
    return positions, names


def _as_python(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value if isinstance(value, np.bool_) else value.item()
    if type(value) in (tuple, list) and any(isinstance(v, np.generic) for v in value):
        return type(value)(_as_python(v) for v in value)
    return value


def _python_numbers(init: Callable[..., None]) -> Callable[..., None]:
    """``init`` taking NumPy scalars in its numeric parameters as Python numbers. The
    annotations are read on the first call, when forward references are defined."""
    slots: list[tuple[frozenset[int], frozenset[str]]] = []

    @functools.wraps(init)
    def __init__(*args: Any, **kwargs: Any) -> None:
        if not slots:
            slots.append(_number_slots(init))
        positions, names = slots[0]
        if positions and len(args) > 1:
            args = tuple(_as_python(a) if i in positions else a for i, a in enumerate(args))
        if kwargs and not names.isdisjoint(kwargs):
            kwargs = {k: _as_python(v) if k in names else v for k, v in kwargs.items()}
        init(*args, **kwargs)

    return __init__
