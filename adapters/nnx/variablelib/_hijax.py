"""Hijax Variables: ``hijax=True`` Variables as JAX "hijax" types.

A ``HijaxVariable`` is not a pytree. JAX sees the whole Variable as one value whose type
is an ``AbstractVariable`` (registered with ``jax.experimental.hijax``), so it can be an
argument of ``jax.jit``, ``jax.grad`` or be closed over by ``lax.scan``, and what the traced
function does to it (``v[...] = x``, ``v['key'] = x``, metadata changes) is written back to
the caller's Variable when the transform returns.

Its state is the flattened ordinary ("low") Variable: the leaves of its value and the
treedef (which carries the type and the metadata). Every operation

1. reads the state with the ``get_variable`` primitive and rebuilds the low Variable,
2. runs the ordinary ``Variable`` method on it,
3. if the leaves or the treedef changed, stores them with the ``set_variable`` primitive.

Inside a trace the Variable is a Tracer whose aval is an ``AbstractVariable``; the aval
forwards the same operations (``hjx.aval_method``/``aval_property`` and the ``_getitem``,
``_add``, ... hooks JAX's Tracer calls). A Variable whose value lives in a ``jax.Ref``
(``ref=True``) is an immutable hijax type ("no QDD"): the Ref is mutated in place and the
state itself can not change; a plain hijax Variable is mutable: its current leaf types and
treedef are JAX "quasi-dynamic data" (``VariableQDD``), so its structure may change too.
"""

import dataclasses
import itertools
import typing as tp
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.experimental
from jax.core import Tracer
from jax.experimental import hijax as hjx
from jax.extend.core import Effect

from adapters import errors

from .. import reprlib
from . import _variable
from ._metadata import A
from ._variable import Variable

PyTreeDef = Any


# --------------------------------------------------------------------------------------
# Type state and effect
# --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class VariableQDD:
    """The quasi-dynamic data of a mutable hijax Variable: the types of its leaves, its
    treedef (type and metadata included) and its Variable type, at a point of a trace."""

    leaf_avals: tuple[Any, ...]
    treedef: PyTreeDef
    var_type: type[Variable[Any]]

    def to_tangent_qdd(self) -> "VariableQDD":
        tangents = tuple(a.to_tangent_aval() for a in self.leaf_avals)
        return VariableQDD(tangents, self.treedef, self.var_type)

    def normalize(self) -> "VariableQDD":
        return VariableQDD(
            tuple(a.normalize() for a in self.leaf_avals), self.treedef, self.var_type
        )


class VariableEffect(Effect):
    """The effect of reading or writing a mutable hijax Variable."""


variable_effect = VariableEffect()
hjx.control_flow_allowed_effects.add_type(VariableEffect)


def _effects(has_qdd: bool) -> set[Effect]:
    return {variable_effect} if has_qdd else set()


def _aval_of(x: Any) -> Any:
    return x.aval if hjx.is_undefined_primal(x) else jax.typeof(x)


# --------------------------------------------------------------------------------------
# Primitives: new, get, set
# --------------------------------------------------------------------------------------


def _bind_new(
    leaves: Sequence[Any], treedef: PyTreeDef, var_type: type, has_qdd: bool, ref: bool
) -> Any:
    leaves = tuple(hjx.instantiate_zeros(leaf) for leaf in leaves)
    return new_variable_p.bind(
        *leaves, treedef=treedef, var_type=var_type, has_qdd=has_qdd, ref=ref
    )


class _NewVariable(hjx.HiPrimitive):
    """``new_variable(*leaves)``: a hijax Variable holding ``leaves``."""

    def is_high(self, *avals: Any, **params: Any) -> bool:
        return True

    def impl(self, *leaves: Any, treedef: PyTreeDef, var_type: type, has_qdd: bool, ref: bool):
        return HijaxVariable._new(leaves, treedef, var_type, has_qdd, ref)

    to_lojax = impl  # pyright: ignore[reportAssignmentType]

    def abstract_eval(  # pyright: ignore[reportIncompatibleMethodOverride]
        self, *avals: Any, treedef: PyTreeDef, var_type: type, has_qdd: bool, ref: bool
    ):
        if not has_qdd:
            return AbstractVariable(var_type, treedef, avals, False, ref), set()
        aval = AbstractVariable(var_type, None, None, True, ref)
        return hjx.AvalQDD(aval, VariableQDD(avals, treedef, var_type)), {variable_effect}  # type: ignore[arg-type]

    def jvp(self, primals: Any, tangents: Any, *, treedef, var_type, has_qdd, ref):  # type: ignore[override]
        if has_qdd:
            raise NotImplementedError(
                f"Cannot differentiate the creation of a hijax {var_type.__name__} from a "
                "differentiated value. Create it with `hijax=False` inside the "
                "differentiated function, or apply `jax.lax.stop_gradient` to the value."
            )
        primal = _bind_new(primals, treedef, var_type, has_qdd, ref)
        return primal, _bind_new(tangents, treedef, var_type, has_qdd, ref)

    def transpose(self, ct: Any, *leaves: Any, treedef, var_type, has_qdd, ref):  # type: ignore[override]
        avals = tuple(_aval_of(x) for x in leaves)
        return get_variable_p.bind(
            ct, treedef=treedef, avals=avals, var_type=var_type, has_qdd=has_qdd
        )


new_variable_p = _NewVariable("new_variable")


def _refuse_immutable(hv: Any) -> None:
    raise errors.ImmutableVariableError(
        f"Cannot change the structure or metadata of a hijax {hv._var_type.__name__} "
        "with ref=True: its value lives in a jax.Ref, which is updated in place "
        "(`variable[...] = x`). Create the Variable with `ref=False` to change it."
    )


class _SetVariable(hjx.HiPrimitive):
    """``set_variable(variable, *leaves)``: store new leaves (and treedef)."""

    multiple_results = True

    def is_high(self, *avals: Any, **params: Any) -> bool:
        return True

    def impl(self, hv: "HijaxVariable", *leaves: Any, treedef: PyTreeDef, var_type: type):
        if not hv.has_qdd:
            _refuse_immutable(hv)
        object.__setattr__(hv, "_leaves", leaves)
        object.__setattr__(hv, "_treedef", treedef)
        return []

    to_lojax = impl  # pyright: ignore[reportAssignmentType]

    def abstract_eval(self, target: Any, *avals: Any, treedef: PyTreeDef, var_type: type):  # pyright: ignore[reportIncompatibleMethodOverride]
        aval = target.aval if isinstance(target, hjx.AvalMutableQDD) else target
        if not aval.has_qdd:
            _refuse_immutable(aval)
        target.mutable_qdd.update(VariableQDD(avals, treedef, var_type))
        return [], {variable_effect}

    def jvp(self, primals: Any, tangents: Any, *, treedef, var_type):  # type: ignore[override]
        (hv, *leaves), (hv_dot, *leaf_dots) = primals, tangents
        if type(hv_dot) is hjx.Zero:
            if any(type(t) is not hjx.Zero for t in leaf_dots):
                raise ValueError(
                    f"Cannot differentiate writing a differentiated value into the hijax "
                    f"{var_type.__name__} (it is not an argument being differentiated). "
                    "Apply `jax.lax.stop_gradient` to the value written."
                )
            set_variable_p.bind(hv, *leaves, treedef=treedef, var_type=var_type)
            return [], []
        leaf_dots = [hjx.instantiate_zeros(t) for t in leaf_dots]
        set_variable_p.bind(hv, *leaves, treedef=treedef, var_type=var_type)
        set_variable_p.bind(hv_dot, *leaf_dots, treedef=treedef, var_type=var_type)
        return [], []


set_variable_p = _SetVariable("set_variable")


class _GetVariable(hjx.HiPrimitive):
    """``get_variable(variable)``: the leaves it holds now."""

    multiple_results = True

    def impl(self, hv: "HijaxVariable", *, treedef, avals, var_type, has_qdd):
        return list(hv._leaves)

    to_lojax = impl  # pyright: ignore[reportAssignmentType]

    def abstract_eval(self, aval: Any, *, treedef, avals, var_type, has_qdd):  # pyright: ignore[reportIncompatibleMethodOverride]
        return list(avals), _effects(has_qdd)

    def jvp(self, primals: Any, tangents: Any, *, treedef, avals, var_type, has_qdd):  # type: ignore[override]
        ((hv,), (hv_dot,)) = primals, tangents
        params = dict(treedef=treedef, var_type=var_type, has_qdd=has_qdd)
        out = get_variable_p.bind(hv, avals=avals, **params)
        if type(hv_dot) is hjx.Zero:
            return out, [hjx.Zero(a.to_tangent_aval()) for a in avals]
        tangent_avals = tuple(a.to_tangent_aval() for a in avals)
        return out, get_variable_p.bind(hv_dot, avals=tangent_avals, **params)

    def transpose(self, cts: Any, hv: Any, *, treedef, avals, var_type, has_qdd):  # type: ignore[override]
        aval = _aval_of(hv)
        cts = [hjx.instantiate_zeros(ct) for ct in cts]
        return (_bind_new(cts, treedef, var_type, has_qdd, aval.ref),)


get_variable_p = _GetVariable("get_variable")


# --------------------------------------------------------------------------------------
# Reading and writing the low Variable
# --------------------------------------------------------------------------------------


def to_hijax(variable: Variable[Any]) -> Any:
    """The hijax Variable holding ``variable``'s value and metadata (a Tracer in a trace)."""
    leaves, treedef = jax.tree.flatten(variable)
    ref = variable.ref
    return _bind_new(leaves, treedef, type(variable), not ref, ref)


def lower_hijax(x: Any) -> Any:
    """The ordinary Variable of ``x`` if ``x`` is a hijax Variable (a JAX transform
    cannot return one), else ``x``."""
    return _read(x) if isinstance(x, HijaxVariable) else x


def _is_abstract(hv: Any) -> bool:
    return isinstance(hv, (Tracer, AbstractVariable))


def _read(hv: Any) -> Variable[Any]:
    """The low Variable ``hv`` holds now."""
    if hv._ref and _is_abstract(hv):
        raise NotImplementedError(
            f"A hijax {hv._var_type.__name__} with ref=True cannot be used inside a JAX "
            "transform yet. Make it with `hijax=True, ref=False` (its changes still reach "
            "the caller) or with `ref=True, hijax=False` (see nnx.with_vars)."
        )
    if hv.has_qdd:
        state: VariableQDD = jax.experimental.cur_qdd(hv)
        treedef, avals = state.treedef, tuple(state.leaf_avals)
    else:
        treedef = hv._treedef
        avals = tuple(hv._leaves) if _is_abstract(hv) else tuple(map(jax.typeof, hv._leaves))
    leaves = get_variable_p.bind(
        hv, treedef=treedef, avals=avals, var_type=hv._var_type, has_qdd=hv.has_qdd
    )
    return jax.tree.unflatten(treedef, leaves)


def _write(hv: Any, variable: Variable[Any]) -> None:
    leaves, treedef = jax.tree.flatten(variable)
    set_variable_p.bind(hv, *leaves, treedef=treedef, var_type=type(variable))


def _run(hv: Any, action: Callable[[Variable[Any]], Any]) -> Any:
    """Run ``action`` on the low Variable of ``hv``; store what it changed."""
    variable = _read(hv)
    before_leaves, before_def = jax.tree.flatten(variable)
    out = action(variable)
    after_leaves, after_def = jax.tree.flatten(variable)
    if after_def != before_def or any(
        a is not b for a, b in zip(after_leaves, before_leaves, strict=True)
    ):
        _write(hv, variable)
    return out


def _method(name: str) -> Callable[..., Any]:
    def method(hv: Any, *args: Any, **kwargs: Any) -> Any:
        return _run(hv, lambda v: getattr(v, name)(*args, **kwargs))

    method.__name__ = name
    return method


def _tracer_op(name: str) -> Callable[..., Any]:
    """An aval hook ``aval._name(tracer, *args)`` JAX's Tracer calls for ``__name__``."""

    def op(aval: Any, tracer: Any, *args: Any) -> Any:
        return _run(tracer, lambda v: getattr(v, name)(*args))

    op.__name__ = name
    return op


def _attribute(name: str) -> Callable[[Any], Any]:
    def get(hv: Any) -> Any:
        return _run(hv, lambda v: getattr(v, name))

    get.__name__ = name
    return get


_variable.PROPERTY_FILES.add(__file__)  # HijaxVariable.__setattr__ runs the setter


# --------------------------------------------------------------------------------------
# HijaxVariable
# --------------------------------------------------------------------------------------


class _StandsFor(tp.Generic[A]):
    """What a hijax Variable and its JAX type both say of the Variable they stand for."""

    __slots__ = ()
    _var_type: type[Variable[A]]
    _ref: bool

    @property
    def var_type(self) -> type[Variable[A]]:
        """The Variable type this stands for (``nnx.Param``, ...)."""
        return self._var_type

    type = var_type

    @property
    def ref(self) -> bool:
        """Whether the value lives in a ``jax.Ref``."""
        return self._ref

    @property
    def hijax(self) -> bool:
        """Always True."""
        return True


class _HijaxVariableMeta(type):
    def __instancecheck__(cls, instance: Any) -> bool:
        if type.__instancecheck__(cls, instance):
            return True
        return isinstance(instance, Tracer) and isinstance(instance.aval, AbstractVariable)


_OWN_SLOTS = frozenset({"_treedef", "_leaves", "_var_type", "has_qdd", "_ref"})

# Operators and protocol methods forwarded to the low Variable (and, under a trace, from
# the Tracer through the aval's ``_name`` hooks).
_BINARY = "add sub mul matmul truediv floordiv mod divmod pow lshift rshift and xor or".split()
_OPERATORS = (
    [f"__{n}__" for n in _BINARY]
    + [f"__r{n}__" for n in _BINARY]
    + [f"__i{n}__" for n in _BINARY if n != "divmod"]
    + [f"__{n}__" for n in "neg pos abs invert complex int float index trunc floor ceil".split()]
)
_PROTOCOL = ("__getitem__", "__setitem__", "__delitem__", "__call__", "__len__", "__iter__")
_PROTOCOL += ("__contains__", "__round__", "__jax_array__", "__nnx_repr__", "__treescope_repr__")
# Tracer hooks: the in-place and a few protocol operators are not forwarded by JAX.
_INPLACE = {f"__i{n}__" for n in _BINARY}
_TRACER_OPS = [n for n in _OPERATORS if n not in _INPLACE]
_TRACER_OPS += ["__getitem__", "__setitem__", "__len__", "__iter__", "__round__"]
_METHODS = (
    "get_value set_value get_raw_value set_raw_value create_value get_metadata set_metadata "
    "has_metadata del_metadata add_axis remove_axis copy replace to_state get set "
    "_check_can_update"
).split()
_ATTRIBUTES = ("_can_update", "_trace_state", "shape")
_ARRAY_ATTRIBUTES = frozenset(
    "dtype ndim size shape sharding weak_type vma memory_space aval".split()
)


class HijaxVariable(_StandsFor[A], reprlib.Representable, metaclass=_HijaxVariableMeta):
    """The type of Variables created with ``hijax=True`` (or under
    ``nnx.var_defaults(hijax=True)`` / config ``flax_hijax_variable``).

    ``nnx.Param(x, hijax=True)`` returns a ``HijaxVariable`` for which
    ``isinstance(v, nnx.Param)`` holds; it has the Variable API (``v[...]``,
    ``v.set_value``, metadata attributes, operators) and JAX traces it as one value, so
    ``jax.jit(f)(v)`` where ``f`` writes ``v[...] = y`` updates ``v``.
    """

    __slots__ = ("_leaves", "_ref", "_treedef", "_var_type", "has_qdd")
    _treedef: PyTreeDef
    _leaves: tuple[Any, ...]
    _var_type: type[Variable[Any]]
    has_qdd: bool
    _ref: bool

    @classmethod
    def _new(
        cls,
        leaves: Sequence[Any],
        treedef: PyTreeDef,
        var_type: type[Variable[Any]],
        has_qdd: bool,
        ref: bool,
    ) -> "HijaxVariable[Any]":
        hv = object.__new__(cls)
        for name, value in zip(
            ("_leaves", "_treedef", "_var_type", "has_qdd", "_ref"),
            (tuple(leaves), treedef, var_type, has_qdd, ref),
            strict=True,
        ):
            object.__setattr__(hv, name, value)
        return hv

    value = Variable.value  # Variable's, with its deprecation warnings

    if tp.TYPE_CHECKING:  # the Variable API, forwarded (set up below the class)

        def __getattr__(self, name: str) -> Any: ...
        def __getitem__(self, key: Any) -> Any: ...
        def __setitem__(self, key: Any, value: Any) -> None: ...
        def __len__(self) -> int: ...
        def __iter__(self) -> Iterator[Any]: ...
        def __contains__(self, item: Any) -> bool: ...

    else:

        def __getattr__(self, name: str) -> Any:
            if name in _OWN_SLOTS or name.startswith("__"):
                raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
            return _run(self, lambda v: getattr(v, name))

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(getattr(type(self), name, None), property):
            object.__setattr__(self, name, value)  # runs the property's setter
            return
        _run(self, lambda v: setattr(v, name, value))

    def __delattr__(self, name: str) -> None:
        _run(self, lambda v: delattr(v, name))

    def __getstate__(self) -> dict[str, Any]:
        return {name: object.__getattribute__(self, name) for name in _OWN_SLOTS}

    def __setstate__(self, state: dict[str, Any]) -> None:  # copy.deepcopy, pickle
        for name, value in state.items():
            object.__setattr__(self, name, value)

    def copy_from(self, other: Any) -> None:
        """Take ``other``'s value and metadata (a hijax or ordinary Variable)."""
        other = lower_hijax(other)
        _run(self, lambda v: v.copy_from(other))

    def update_from_state(self, variable_state: Any) -> None:
        """Take the raw value and metadata of ``variable_state``, keeping ``hijax``/``ref``."""
        variable_state = lower_hijax(variable_state)
        _run(self, lambda v: v.update_from_state(variable_state))

    def to_variable(self) -> Variable[A]:
        """The ordinary Variable holding the current value and metadata (``hijax`` stays
        True in its metadata; ``nnx.with_vars(v, hijax=False)`` makes a plain one)."""
        return _read(self)

    @classmethod
    def from_metadata(cls, value: Any, attributes: dict[str, Any]) -> Any:
        """Not available on the class itself: use the Variable type's ``from_metadata``."""
        raise TypeError(
            "HijaxVariable.from_metadata needs a Variable type: call it on the type, e.g. "
            "`nnx.Param.from_metadata(value, metadata)` (with metadata['hijax']=True)."
        )

    # -- JAX's hijax interface --------------------------------------------------------

    def cur_qdd(self) -> "VariableQDD":
        return self.type_state()

    def type_state(self) -> "VariableQDD":
        return VariableQDD(tuple(map(jax.typeof, self._leaves)), self._treedef, self._var_type)

    def __repr__(self) -> str:
        return reprlib.Representable.__repr__(self)


for _name in (*_METHODS, *_OPERATORS, *_PROTOCOL):
    setattr(HijaxVariable, _name, _method(_name))
for _name in _ATTRIBUTES:
    setattr(HijaxVariable, _name, property(_attribute(_name)))


def _abstract_of(hv: "HijaxVariable[Any]") -> "AbstractVariable[Any]":
    if hv.has_qdd:
        return AbstractVariable(hv._var_type, None, None, True, hv._ref)
    avals = tuple(map(jax.typeof, hv._leaves))
    return AbstractVariable(hv._var_type, hv._treedef, avals, False, hv._ref)


# --------------------------------------------------------------------------------------
# AbstractVariable
# --------------------------------------------------------------------------------------


def _raise_leaves(leaf_avals: Sequence[Any], lo_vals: Sequence[Any]) -> list[Any]:
    """The leaves rebuilt from their low values (each leaf type takes its ``lo_ty()``)."""
    it = iter(lo_vals)
    leaves = [a.raise_val(*itertools.islice(it, len(a.lo_ty()))) for a in leaf_avals]
    assert next(it, None) is None, "more low values than the leaf types take"
    return leaves


def _lower_leaves(leaf_avals: Sequence[Any], leaves: Sequence[Any]) -> list[Any]:
    return [lo for a, x in zip(leaf_avals, leaves, strict=True) for lo in a.lower_val(x)]


class AbstractVariable(_StandsFor[A], hjx.MutableHiType):
    """The JAX type of a ``HijaxVariable``: its Variable type, and for a ``ref=True``
    (immutable, no-QDD) one also its treedef and leaf types."""

    __slots__ = ["_leaves", "_ref", "_treedef", "_var_type", "has_qdd"]
    _var_type: type[Variable[A]]
    _treedef: PyTreeDef | None
    _leaves: tuple[Any, ...] | None
    has_qdd: bool  # pyright: ignore[reportIncompatibleVariableOverride]
    _ref: bool

    def __init__(
        self,
        var_type: type[Variable[A]],
        treedef: PyTreeDef | None,
        leaves: tuple[Any, ...] | None,
        has_qdd: bool,
        ref: bool = False,
    ) -> None:
        for name, value in zip(
            ("_var_type", "_treedef", "_leaves", "has_qdd", "_ref"),
            (var_type, treedef, leaves, has_qdd, ref),
            strict=True,
        ):
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str) -> Any:
        # metadata and attributes of the value, read from the Tracer (``tracer.name``);
        # not the array attributes JAX probes avals for (the value is not in the type)
        if name.startswith("_") or name in _ARRAY_ATTRIBUTES or hasattr(type(self), name):
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")
        return hjx.aval_property(fget=_attribute(name))

    copy_from = hjx.aval_method(HijaxVariable.copy_from)
    update_from_state = hjx.aval_method(HijaxVariable.update_from_state)
    to_variable = hjx.aval_method(HijaxVariable.to_variable)
    __jax_array__ = hjx.aval_method(_method("__jax_array__"))

    def __hash__(self) -> int:  # pyright: ignore[reportIncompatibleMethodOverride]
        return hash((AbstractVariable, self._var_type, self._treedef, self._leaves))

    def __eq__(self, other: object) -> bool:  # pyright: ignore[reportIncompatibleMethodOverride]
        return (
            isinstance(other, AbstractVariable)
            and self._var_type == other._var_type
            and self.has_qdd == other.has_qdd
            and self._treedef == other._treedef
            and self._leaves == other._leaves
        )

    def str_short(self, short_dtypes: bool = False, **_: Any) -> str:  # type: ignore[override]
        return f"{self._var_type.__name__}()"

    def __repr__(self) -> str:
        return self.str_short()

    __str__ = __repr__

    def to_tangent_aval(self) -> "AbstractVariable[A]":  # type: ignore[override]
        if self.has_qdd:
            return self
        leaves = tuple(a.to_tangent_aval() for a in self._leaves or ())
        return AbstractVariable(self._var_type, self._treedef, leaves, False, self._ref)

    # -- immutable (ref=True) Variables: lowered like a pytree of their leaves ----------

    def lo_ty(self) -> list[Any]:  # pyright: ignore[reportIncompatibleMethodOverride]
        assert self._leaves is not None, "a mutable Variable type lowers with its QDD"
        return [lo for a in self._leaves for lo in a.lo_ty()]

    def lower_val(self, hv: Any) -> list[Any]:
        assert self._leaves is not None
        return _lower_leaves(self._leaves, hv._leaves)

    def raise_val(self, *lo_vals: Any) -> "HijaxVariable[A]":
        assert self._leaves is not None
        leaves = _raise_leaves(self._leaves, lo_vals)
        return HijaxVariable._new(leaves, self._treedef, self._var_type, False, self._ref)

    # -- mutable Variables: lowered with their current QDD -----------------------------

    def lo_ty_qdd(self, state: "VariableQDD") -> list[Any]:  # type: ignore[override]
        return [lo for a in state.leaf_avals for lo in a.lo_ty()]

    def new_from_loval(self, state: "VariableQDD", *lo_vals: Any) -> "HijaxVariable[A]":  # type: ignore[override]
        leaves = _raise_leaves(state.leaf_avals, lo_vals)
        return HijaxVariable._new(leaves, state.treedef, self._var_type, True, self._ref)

    def read_loval(self, state: "VariableQDD", hv: Any) -> list[Any]:  # type: ignore[override]
        leaves, treedef = jax.tree.flatten(_read(hv))
        assert treedef == state.treedef, "the Variable changed structure outside the trace"
        return _lower_leaves(state.leaf_avals, leaves)

    def update_from_loval(self, state: "VariableQDD", hv: Any, *lo_vals: Any) -> None:  # type: ignore[override]
        leaves = _raise_leaves(state.leaf_avals, lo_vals)
        _write(hv, jax.tree.unflatten(state.treedef, leaves))


for _name in _METHODS:
    setattr(AbstractVariable, _name, hjx.aval_method(_method(_name)))
for _name in _ATTRIBUTES:
    if _name != "shape":
        setattr(AbstractVariable, _name, hjx.aval_property(fget=_attribute(_name)))
for _name in _TRACER_OPS:
    setattr(AbstractVariable, "_" + _name.strip("_"), _tracer_op(_name))

hjx.register_hitype(HijaxVariable, _abstract_of)


# --------------------------------------------------------------------------------------
# What ``Variable`` (in ``_variable``) needs from here
# --------------------------------------------------------------------------------------


def _hijax_var_type(x: Any) -> type | None:
    """The Variable type ``x`` stands for if it is a hijax Variable (or its Tracer)."""
    if type(x) is HijaxVariable:
        return x._var_type
    if isinstance(x, Tracer):
        aval = x.aval
        if isinstance(aval, AbstractVariable):
            return aval._var_type
    return None


_variable.HIJAX_HOOKS.install(to_hijax=to_hijax, var_type_of=_hijax_var_type)
