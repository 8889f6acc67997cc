"""Every exception and warning pytreemod raises.

Each class documents its cause and its fix; ``docs/errors.md`` is generated from these
docstrings (``make errors-doc``). Messages always say what is wrong, where (a
path such as ``.blocks[3].mlp.weight``, a class and field, or a collection) and how to fix
it.
"""

import inspect
import sys


class PytreemodError(Exception):
    """Base class of every pytreemod error; catch it to handle any of them."""


class FrozenModuleError(PytreemodError, AttributeError):
    """An attribute of a Module or Variable was assigned after construction.

    Cause: modules are immutable values; ``model.weight = w`` outside ``__init__`` would
    silently diverge from copies held by JAX transforms.

    Fix: build a new model instead: ``model.replace(weight=w)`` for a direct field, or
    ``pytreemod.tree_at(lambda m: m.block.weight, model, w)`` for a nested one.
    """


class UndeclaredFieldError(PytreemodError, AttributeError):
    """``__init__`` (or ``replace``) set an attribute that is not a declared field.

    Cause: only fields declared in the class body (``weight: Param``) are part of the
    PyTree; anything else would be lost on the first ``jax.tree`` round trip.

    Fix: declare the field in the class body, or correct the name.
    """


class UninitializedFieldError(PytreemodError, TypeError):
    """A custom ``__init__`` returned without setting every declared field.

    Fix: assign the field in ``__init__`` or give it a default in the class body.
    """


class InvalidFieldError(PytreemodError, TypeError):
    """A field declaration the Module machinery cannot support.

    Cause: ``field(init=False)`` (a Module rebuilds itself from its fields, so every field
    must be settable), an unhashable value in a ``static=True`` field (static values are
    part of the tree structure, which JAX hashes to cache compilations), or an array or
    ``Variable`` in a ``static=True`` field (it would never be traced or differentiated,
    and ``partition``, gradients and the optimizer would silently leave it out).

    Fix: drop ``init=False`` and set the field in a custom ``__init__``; store static
    configuration as hashable values (a tuple instead of a list, a frozenset instead of a
    set); declare a field holding arrays or Variables as a regular field (without
    ``static=True``).
    """


class UnhashableModuleError(PytreemodError, TypeError):
    """A module holding arrays was hashed.

    Cause: JAX hashes values it treats as static: ``jax.jit(model)`` (the function to
    compile), ``static_argnums``, a static field holding a module. Arrays have no hash.

    Fix: pass the model as a traced argument: ``pm.jit(model)(x)`` (pytreemod's jit traces
    the function's own arrays) or ``jax.jit(lambda m, x: m(x))(model, x)``.
    """


class InvalidFilterError(PytreemodError, TypeError):
    """A value that is not one of the filter forms was used as a filter.

    Fix: use a collection name (``"params"``), a Variable type (``Param``), ``True``/``...``
    (everything), ``False``/``None`` (nothing), ``Not(f)``/``DenyList(f)``, ``Any(...)`` or a
    list/tuple (union), ``All(...)`` (intersection), ``PathContains(key)`` or a predicate
    ``fn(path, value) -> bool``.
    """


class StateMismatchError(PytreemodError, ValueError):
    """States given to ``combine``/``from_variables`` do not fit the model's structure.

    Cause: a variable the structure needs is missing from every state, is present in two
    states, or a state holds an entry the structure has no place for. Nothing is dropped
    or guessed silently.

    Fix: pass the states returned by the same ``partition`` call (or a variables dict of
    the same model), with the paths and collections named in the message.
    """


class TreeAtError(PytreemodError, ValueError):
    """``tree_at``'s ``where`` did not pick out nodes of the tree unambiguously.

    Cause: ``where`` is not a function (a field name such as ``"kernel"``), or it
    returned something that is not a node of the tree (for example a freshly computed
    value), a node that occurs at several places (``None``, an empty tuple), or
    ``replace`` does not match the number of nodes selected.

    Fix: make ``where`` only index into its argument (``lambda m: m.layers[0].weight``);
    to replace ``None`` fields, use ``Module.replace`` or a sentinel value.
    """


class AxisMetadataError(PytreemodError, ValueError):
    """Axis metadata that does not fit the value or the transform.

    Cause: an axis index out of range, or ``remove_axis`` called with ``metadata_params``
    that name a different axis than the one being removed. (A ``Partitioned`` box whose
    names do not match its value's rank is a ``ShardingError`` when it is sharded.)

    Fix: use axes within the value's rank; pass the same ``metadata_params`` to the
    transform that removes an axis as to the one that added it.
    """


class TransformError(PytreemodError, ValueError):
    """A transform (``jit``, ``grad``, ``vmap``, ``scan``, ``cond``...) got an argument it
    cannot handle.

    Cause: an axis spec that does not fit the arguments (a ``StateAxes`` that leaves a
    variable unmatched, a prefix that does not match the tree), two places sharing one
    Variable but given different specs, a scan carry or loop state whose structure
    changes between iterations, ``cond``/``switch`` branches that return different
    variables, a non-array argument that is not hashable, or (``vmap``/``scan``) an
    input without the mapped axis or mapped inputs of different sizes.

    Fix: the message names the path(s) involved; give every variable exactly one spec,
    keep carried state's structure fixed, and create the same variables in every branch.
    """


class StateWriteError(PytreemodError, RuntimeError):
    """A variable was written (``variable.set``) where that is not allowed.

    Cause: outside ``pytreemod.apply``; to a collection that ``apply``'s ``mutable=`` does
    not include; or to a variable that is not part of the model given to the innermost
    ``apply`` (typically inside a transform, which rebuilds the model from its arrays).

    Fix: call ``out, model = pm.apply(model, x, mutable=[...collections...])``; inside a
    transformed function, call ``apply`` there and return the updated module.
    """


class ShapeError(PytreemodError, TypeError, ValueError):
    """An array's shape (or dtype) does not fit a layer, a ``pytreemod.nn.functional`` op,
    or the annotations of a module declared ``typecheck=True``.

    Cause: found at trace time by jaxtyping annotations, e.g. an input whose last axis is
    not the ``in_features`` of a ``Linear``'s kernel, a convolution input whose channels
    are not the kernel's, keys and values of different lengths, or two arguments of your
    own method annotated with one dimension name but given different sizes. The message
    names the module class and method (when a module called the op), the arguments, the
    dimension that disagrees and the shapes seen. A layer that fails inside a model is
    named by its path from the outermost module called (``Model.blocks[3].mlp.up(x=...)``,
    ``Model.attn.query(...)`` for an attention layer's projection; ``[*]`` for a layer of
    a stack that ``pm.scan`` runs), eagerly and under ``jit``.

    The same error, in the same words, covers anything else an annotation refuses: a
    return value that breaks its method's annotation, a Python number, list or string
    where an array is annotated, an argument of another type. Each message names the
    argument (or the return value), what its annotation expects and what it got, and
    ends with ``Fix:``. A NumPy array given where a typechecked method annotates
    ``jax.Array`` is not an error: it is converted with ``jnp.asarray`` first.

    It is both a ``TypeError`` and a ``ValueError``: JAX reports shape mismatches as either
    (``dot_general`` a ``TypeError``, a convolution's channels a ``ValueError``), so code
    written to catch JAX's (or Flax's) error for a shape keeps catching it here.

    Fix: give the layer inputs of the shape its docstring shows, or build the layer with
    sizes that match the data (``Linear(in_features=x.shape[-1], ...)``); for your own
    module, pass arrays that fit its method's annotations or correct the annotations;
    convert other values with ``jnp.asarray``; cast a wrong dtype (``x.astype(...)``).
    """


class LayerConfigError(PytreemodError, ValueError):
    """A layer was built or called with settings that cannot work together.

    Cause: for example ``qkv_features`` not divisible by ``num_heads``, channels not
    divisible by ``num_groups`` or ``feature_group_count``, an unknown padding mode, a
    dropout rate outside ``[0, 1]``, a stochastic call (Dropout or attention dropout in
    training mode) without ``key=`` or with something other than one PRNG key (a number,
    a batch of keys), a norm's initializer that needs a key built without one, or a
    decoding call on an attention layer without ``init_cache``.

    Fix: the message names the layer (by its path in the model you called, e.g.
    ``Model.drop``, for a call) and the setting; change the setting, pass the missing
    argument (``key=jax.random.key(seed)``), or call the method it suggests.
    """


class LogicalAxisRulesError(PytreemodError, ValueError):
    """Logical axis rules that are not a sequence of ``(logical_name, mesh_axes)`` pairs.

    Cause: a rule that is not a 2-tuple, a logical name that is not a string, a mesh side
    that is not a mesh axis name, a tuple of them or ``None``, or a dict given as rules
    (rules are ordered by precedence, so they are a sequence).

    Fix: write the rules as ``(("batch", "data"), ("embed", None), ("mlp", "model"))``; a
    dict can be passed as ``tuple(d.items())``.
    """


class ShardingError(PytreemodError, ValueError):
    """Axis names that cannot be turned into a sharding of the array they describe.

    Cause: a box or ``with_logical_constraint`` whose number of names differs from the
    array's number of axes (often a plain ``jax.vmap`` over a boxed tree, which does not
    update the metadata), a logical name used for two axes of one array, a mesh axis the
    mesh does not have or one used for two axes, an array axis the mesh axes cannot split
    evenly, no mesh to build a ``NamedSharding`` on, or (with
    ``RulesFallback.RAISE_ERROR``) a logical name no rule maps. On an Explicit mesh: a
    layer's contraction, convolution or gather whose operands' shardings the rules cannot
    resolve (JAX finds the output's sharding ambiguous), an ``out_sharding=`` JAX rejects,
    or operands placed on two different meshes.

    Fix: the message names the path in the tree and the names involved: give one name per
    axis, use ``pm.vmap``/``pm.scan`` with ``metadata_params`` to add or remove axes, add
    logical axis rules for the names, pass ``mesh=`` (or use ``jax.set_mesh``), or pick
    sizes divisible by the mesh axis sizes. For a layer's operation the message names the
    layer's path, the operation and both operands' shardings: add a rule that shards them
    compatibly, or pass ``out_sharding=`` to the layer call or the functional op.
    """


class CheckpointError(PytreemodError, ValueError):
    """A tree cannot be saved, or a checkpoint cannot be read.

    Cause: ``save`` was given a value that has no data to write (an ``eval_shape``
    skeleton, a traced value), an array split over processes with ``directory=False``
    (one file cannot hold it), a path key that is not a string or integer, or two paths
    that name the same tensor; the operating system refused the write (a missing or
    read-only folder, a full disk: the target is named, nothing partial is left); or
    ``load`` (or ``CheckpointManager.restore``) was given a path, or a step, with no
    complete checkpoint. Subclasses cover malformed checkpoints and ones that do not fit.

    Fix: save concrete arrays (call ``save`` outside ``jit``); for arrays sharded over
    several processes let ``save`` write a checkpoint directory (the default, or
    ``directory=True``), every process calling it; use string or integer keys; check
    the path, its folder's permissions and free space.
    """


class CheckpointFormatError(CheckpointError):
    """A file is not a valid pytreemod checkpoint.

    Cause: the file is truncated or corrupted, its safetensors header or pytreemod header
    is malformed (unknown dtype, impossible shape, a tensor that disagrees with the
    header, a missing or undescribed tensor), or it was written by another program.
    Nothing is loaded and no code from the file is run.

    Fix: the message names the file and the entry; write the checkpoint again with
    ``pytreemod.save``, or read a foreign safetensors file with ``safetensors`` itself.
    """


class CheckpointMismatchError(CheckpointError, StateMismatchError):
    """A valid checkpoint does not fit the ``like`` tree it is loaded into.

    Cause: a path the model has is missing from the file (or the file has entries the
    model has no place for), or a stored value has another shape, dtype, collection or
    PRNG key type than the model's, or the file ties variables the model keeps separate.
    The whole file is checked before anything is returned.

    Fix: load into a model built with the same configuration as the saved one (an
    ``eval_shape`` skeleton is enough), or load a subset with ``filter=`` (e.g.
    ``filter="params"``); the message names the file, the path and both shapes/dtypes.
    """


class PytreemodWarning(UserWarning):
    """Base class of every pytreemod warning."""


class StaticArrayWarning(PytreemodWarning):
    """A NumPy scalar was stored in a ``static=True`` field.

    Cause: static fields are part of the tree structure; the scalar is a compile-time
    constant, never traced or differentiated, and a new value forces a recompile. (An
    array or a Variable there is an ``InvalidFieldError``.)

    Fix: declare the field without ``static=True`` if the value is data, or store a plain
    Python value (``float(x)``, ``int(x)``) if it really is configuration.
    """


class RetraceWarning(PytreemodWarning):
    """A ``pytreemod.jit`` function was traced and compiled again and again.

    Cause: every call whose arguments differ in something that is not an array value
    compiles a new version: a non-array argument (a Python ``int`` step counter, a float
    hyperparameter) is a compile-time constant, and a new shape, dtype, tree structure or
    static field is a new program. Given once per function (on its 10th trace by default),
    naming the argument that changed and what it held.

    Fix: pass changing numbers as arrays (``jnp.asarray(step)``) so they are traced; pad
    inputs to a few fixed shapes; keep structures and static fields fixed. If the
    retraces are intended, ``pm.jit(f, warn_retraces=None)`` turns the warning off (or
    raise the count with ``warn_retraces=n``).
    """


def require_callable(fun: object, name: str) -> None:
    """Raise a ``TypeError`` naming ``name`` if ``fun`` (the function it transforms or
    wraps) is not callable, as ``jax.jit`` does, instead of failing later inside."""
    if not callable(fun):
        raise TypeError(
            f"{name}: expected a callable value (the function to transform), got {fun!r} "
            f"of type {type(fun).__name__}, which is not callable."
        )


def _all_classes() -> list[type]:
    module = sys.modules[__name__]
    return [
        obj for _, obj in inspect.getmembers(module, inspect.isclass) if obj.__module__ == __name__
    ]


def errors_markdown() -> str:
    """Render every error and warning class as the Markdown of ``docs/errors.md``."""
    lines = [
        "# Errors and warnings",
        "",
        "Generated from `pytreemod/_errors.py` by `make errors-doc`.",
        "",
    ]
    for cls in sorted(_all_classes(), key=lambda c: c.__name__):
        bases = ", ".join(b.__name__ for b in cls.__bases__)
        lines += [f"## `{cls.__name__}` ({bases})", "", inspect.cleandoc(cls.__doc__ or ""), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    print(errors_markdown())
