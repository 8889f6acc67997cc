"""Where in the model a call is: the one model-path walk behind every error that names a
layer.

A ``ShapeError`` (``_shapecheck``), a ``ShardingError`` raised by an op on an Explicit
mesh (``_sharding._op_errors``) and a ``LayerConfigError`` a layer raises while it is
called (a missing PRNG key, a missing decoding cache) all name the layer the same way:
the outermost module on the calling frames that holds it, then the key path down to it
(``Model.blocks[3].mlp.up``), ``[*]`` for a layer of a stack that ``pm.scan`` or
``pm.vmap`` slices (``Model.blocks[*].attn``), or the layer's class name alone when no
calling module holds it (``Linear``).

- ``layer_name(module, frame)``: how ``module``, whose method is running, is named;
  ``frame`` is the frame that called that method (its ``sys._getframe(1)``).
- ``current_layer(frame)``: the name of the innermost layer whose method is running on
  ``frame`` or the frames that called it, ``None`` outside any layer (for an op, which
  has no ``self``).
- ``at_layer(message, frame)``: an op's error message prefixed with ``current_layer``.
- ``model_path(module, frame)``: the two parts, the outermost holder and the path from it
  (``""`` when none holds ``module``), for a caller that adds the method and arguments.
- ``module_frame(frame)``: the innermost frame (``frame`` outward) running a Module method.

Only an error path pays for this: the calling frames are walked once the error is being
raised. A Module method running on the stack has its module as ``self``; each enclosing
one that holds the module below it (as a field, in a list or dict field, or deeper:
``self.mlp.up(x)``) adds the key path between the two. Nothing is recorded while a model
runs, so a successful call and the compiled program are unchanged. Under a trace the
frames are the same (JAX traces Python on this stack), and a layer wrapped by
``trace_once`` whose cached trace fails is run again directly, from its caller's frame,
so the path holds there too.
"""

import types
from collections.abc import Callable
from typing import Any

import jax.tree_util as jtu
from jax.core import Tracer

from ._tree import format_path


def is_module(obj: Any) -> bool:
    """Whether ``obj`` is a pytreemod Module, recognised by the field table its metaclass
    gives every Module class (this module sits below ``_module``)."""
    return hasattr(type(obj), "_pytreemod_fieldset")


def module_frame(frame: types.FrameType | None) -> types.FrameType | None:
    """The innermost frame, ``frame`` outward, running a method of a Module (its
    ``self``), or ``None``."""
    while frame is not None:
        if is_module(frame.f_locals.get("self")):
            return frame
        frame = frame.f_back
    return None


def model_path(module: Any, frame: types.FrameType | None) -> tuple[Any, str]:
    """The outermost module on the calling frames (``frame`` outward) that holds
    ``module`` (through a chain of modules each holding the next), and the path from it
    to ``module`` (``".blocks[1].mlp.up"``; ``""`` when no calling module holds it, the
    root then being ``module`` itself)."""
    root, path = module, ""
    seen: set[int] = {id(module)}
    while frame is not None:
        owner = frame.f_locals.get("self")
        if owner is not None and id(owner) not in seen and is_module(owner):
            seen.add(id(owner))
            found = _key_path(owner, root)
            if found is not None:
                root, path = owner, found + path
        frame = frame.f_back
    return root, path


def layer_name(module: Any, frame: types.FrameType | None) -> str:
    """``module`` as errors name it: ``Model.blocks[1].drop`` when a model on the calling
    frames (``frame`` outward) holds it, else its class name (``Dropout``)."""
    root, path = model_path(module, frame)
    return f"{type(root).__name__}{path}"


def current_layer(frame: types.FrameType | None) -> str | None:
    """The ``layer_name`` of the innermost layer whose method is running on ``frame`` or
    the frames that called it, or ``None`` outside any layer."""
    found = module_frame(frame)
    if found is None:
        return None
    return layer_name(found.f_locals["self"], found.f_back)


def at_layer(message: str, frame: types.FrameType | None) -> str:
    """``message`` of an error an op raises, prefixed with ``current_layer(frame)`` when
    a layer's method is running (``Model.norm: axis 5 is out of range...``); as it is
    for an op called outside any layer."""
    where = current_layer(frame)
    return f"{where}: {message}" if where else message


def _key_path(owner: Any, child: Any) -> str | None:
    """The path from ``owner`` to ``child`` among its PyTree children or static fields,
    or ``None`` when it does not hold it.

    ``child`` is found by identity; failing that, as the one child of its class and tree
    structure that is a copy of it (the same array objects: JAX rebuilt the module from
    its leaves) or, when ``child`` holds tracers (a transform rebuilt it), whose arrays
    have its shapes or one more leading axis (a layer of a stack that ``pm.scan`` or
    ``pm.vmap`` slices: ``[*]``).
    """
    for keys, node in _nodes(owner, lambda x: x is child):
        if node is child:
            return format_path(keys)
    for name in getattr(type(owner), "_pytreemod_static", ()):
        if getattr(owner, name, None) is child:
            return f".{name}"
    traced = any(isinstance(x, Tracer) for x in jtu.tree_leaves(child))
    same_kind = lambda x: x is not owner and type(x) is type(child)
    nodes = _nodes(owner, same_kind)
    matches = [(keys, m) for keys, m in nodes if type(m) is type(child)]
    found = [(k, s) for k, m in matches if (s := _stacked(m, child, traced)) is not None]
    if len(found) != 1:
        return None
    keys, stacked = found[0]
    return format_path(keys) + ("[*]" if stacked else "")


def _nodes(tree: Any, is_leaf: Callable[[Any], bool]) -> list[tuple[Any, Any]]:
    try:
        return jtu.tree_flatten_with_path(tree, is_leaf=is_leaf)[0]
    except Exception:  # a tree JAX cannot flatten: no path through it
        return []


def _stacked(candidate: Any, child: Any, traced: bool) -> bool | None:
    """``False`` if ``candidate`` has ``child``'s structure and its very leaves, or (when
    ``traced``) its shapes; ``True`` if (when ``traced``) it has its structure and one
    more leading axis on every array; else ``None``. The structure is the tree's, or,
    where static metadata differs (the axis names of a sliced stack's boxes), the key
    paths of its leaves."""
    leaves, treedef = jtu.tree_flatten(candidate)
    child_leaves, child_treedef = jtu.tree_flatten(child)
    if treedef != child_treedef and _leaf_paths(candidate) != _leaf_paths(child):
        return None  # (a box's names differ in a stack: ``("layers", ...)``; its paths not)
    if all(a is b for a, b in zip(leaves, child_leaves)):
        return False
    if not traced:
        return None
    shapes = [tuple(getattr(x, "shape", ())) for x in leaves]
    child_shapes = [tuple(getattr(x, "shape", ())) for x in child_leaves]
    if shapes == child_shapes:
        return False
    if shapes and all(s[1:] == c and len(s) == len(c) + 1 for s, c in zip(shapes, child_shapes)):
        return True
    return None


def _leaf_paths(tree: Any) -> list[str]:
    return [jtu.keystr(path) for path, _ in jtu.tree_flatten_with_path(tree)[0]]
