"""The two sharding boxes: ``Partitioned`` (names taken as logical names when rules are
active, as mesh axes otherwise) and ``LogicallyPartitioned`` (names always logical).

Each box resolves its own names (``_partition_spec(rules, where)``), so the tree
functions of ``_trees`` ask the box, whatever its class.
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.core
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .._errors import AxisMetadataError, require_callable
from .._meta import PARTITION_NAME, AxisMetadata
from .._module import field
from ._apply import constrain
from ._mesh import AnyMesh, check_rank, named_sharding, pick_mesh
from ._resolve import RulesFallback, names_spec, resolve, spec
from ._rules import LogicalRules, get_logical_axis_rules, optional_rules

_ROOT = "at <root>: "  # where a box's own get_partition_spec/get_sharding errors point


def _as_names(names: Any) -> tuple[Any, ...]:
    return tuple(names)


def _axis_index(index: int, ndim: int) -> int:
    if not -ndim <= index < ndim:
        raise AxisMetadataError(f"axis {index} is out of range for {ndim} axes.")
    return index % ndim


def _partition_name(params: Mapping[Any, Any]) -> Any:
    return params.get(PARTITION_NAME) if params else None


class Partitioned(AxisMetadata):
    """A value with one logical or mesh axis name (or ``None``) per array axis.

    **Fields:**

    - ``value``: the array.
    - ``names``: one entry per axis of ``value``: a mesh axis name, a logical name
      resolved through ``logical_axis_rules``, or ``None`` (replicated).
    - ``mesh``: optional ``jax.sharding.Mesh`` used by ``get_sharding`` when none is given.

    As in Flax, the box does not check ``names`` against the value's rank when it is
    built (a transform may add only a metadata axis, e.g. ``add_metadata_axis``); a
    mismatch is a ``ShardingError`` when the names are turned into a sharding.

    >>> import jax.numpy as jnp
    >>> import pytreemod as pm
    >>> p = pm.Partitioned(jnp.zeros((4, 8)), ("embed", "mlp"))
    >>> p.add_axis(0, {pm.PARTITION_NAME: "layers"}).names
    ('layers', 'embed', 'mlp')
    """

    value: Any
    names: tuple[Any, ...] = field(static=True, converter=_as_names)
    mesh: Any = field(static=True, default=None)

    def unbox(self) -> Any:
        return self.value

    def add_axis(self, index: int, params: Mapping[Any, Any]) -> "Partitioned":
        names = list(self.names)
        names.insert(_axis_index(index, len(names) + 1), _partition_name(params))
        return self.replace(names=tuple(names))

    def remove_axis(self, index: int, params: Mapping[Any, Any]) -> "Partitioned":
        names = list(self.names)
        i = _axis_index(index, len(names))
        expected = _partition_name(params)
        if names[i] != expected:
            raise AxisMetadataError(
                f"remove_axis({index}) expected axis name {expected!r} (from "
                f"metadata_params) but the axis is named {names[i]!r} in {self.names}; pass "
                "the same metadata_params that added the axis."
            )
        del names[i]
        return self.replace(names=tuple(names))

    def _partition_spec(self, rules: LogicalRules, where: str = "") -> PartitionSpec:
        """The names resolved through ``rules`` if there are any, taken literally as mesh
        axes otherwise (what ``pm.get_partition_spec`` gives for this box)."""
        check_rank(self.value, self.names, type(self).__name__, where)
        return names_spec(self.names, rules, where)

    def get_partition_spec(self) -> PartitionSpec:
        """The ``PartitionSpec`` of the names: resolved through the active logical axis
        rules if any are set, taken literally as mesh axis names otherwise (the same as
        ``pytreemod.get_partition_spec`` gives for this box)."""
        return self._partition_spec(get_logical_axis_rules(), _ROOT)

    def get_sharding(self, mesh: AnyMesh | None = None) -> NamedSharding:
        """The ``NamedSharding`` of the value on ``mesh`` (default: the box's own mesh, then
        the mesh set with ``jax.set_mesh``)."""
        chosen = pick_mesh(mesh, self.mesh, _ROOT)
        return named_sharding(chosen, self.get_partition_spec(), _ROOT)


def with_partitioning(
    init_fn: Callable[..., Any], names: tuple[Any, ...], mesh: Any = None
) -> Callable[..., Partitioned]:
    """Wrap an initializer so the array it returns is boxed as ``Partitioned(arr, names)``.

    >>> import jax
    >>> import pytreemod as pm
    >>> init = pm.with_partitioning(jax.nn.initializers.lecun_normal(), (None, "mlp"))
    >>> init(jax.random.key(0), (4, 8)).names
    (None, 'mlp')
    """
    require_callable(init_fn, "with_partitioning")

    def wrapper(*args: Any, **kwargs: Any) -> Partitioned:
        return Partitioned(init_fn(*args, **kwargs), names, mesh)

    wrapper.__wrapped__ = init_fn  # type: ignore[attr-defined]
    return wrapper


class LogicallyPartitioned(Partitioned):
    """A ``Partitioned`` box whose names are always logical (as in Flax).

    Its names resolve through its own ``rules`` if given, else through the active logical
    axis rules; with no rules at all every axis is replicated. (A plain ``Partitioned``
    with no rules active takes its names literally as mesh axes.)

    **Fields:**

    - ``value``, ``names``, ``mesh``: as in ``Partitioned``.
    - ``rules``: optional logical axis rules for this box, overriding the active ones.

    ``unbox()`` returns the value with ``with_logical_constraint`` applied when the value
    is being traced (inside ``jax.jit`` and other transforms) and a mesh is known (the
    box's ``mesh`` or one set with ``jax.set_mesh``); otherwise it returns the value as is.
    ``unbox(apply_constraint=False)`` never adds the constraint.
    """

    rules: LogicalRules | None = field(static=True, default=None, converter=optional_rules)

    def unbox(self, apply_constraint: bool = True) -> Any:
        value = self.value
        if not apply_constraint or not isinstance(value, jax.core.Tracer):
            return value
        return constrain(value, self.names, self.rules, self.mesh, RulesFallback.AXIS_IS_UNSHARDED)

    def _partition_spec(self, rules: LogicalRules, where: str = "") -> PartitionSpec:
        """The names resolved through the box's own rules, else ``rules``."""
        check_rank(self.value, self.names, type(self).__name__, where)
        return spec(resolve(self.names, self.rules if self.rules is not None else rules, where))


def with_logical_partitioning(
    fn: Callable[..., Any],
    names: Sequence[str | None],
    mesh: Mesh | None = None,
    rules: Sequence[tuple[str, Any]] | None = None,
) -> Callable[..., LogicallyPartitioned]:
    """Wrap an initializer so the array it returns is boxed as ``LogicallyPartitioned``.

    >>> import jax
    >>> import pytreemod as pm
    >>> init = pm.with_logical_partitioning(jax.nn.initializers.zeros, ("embed", "mlp"))
    >>> init(jax.random.key(0), (4, 8)).get_partition_spec()
    P(None, None)
    """
    names = tuple(names)

    def wrapper(*args: Any, **kwargs: Any) -> LogicallyPartitioned:
        return LogicallyPartitioned(fn(*args, **kwargs), names, mesh, rules)

    wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
    return wrapper
