"""``flax.nnx.visualization``: ``nnx.display`` and a treescope rendering helper.

treescope is optional here: without it (or outside IPython) ``display`` prints.
"""

from collections.abc import Mapping
from typing import Any

__all__ = ["display", "render_object_constructor"]


def _in_ipython() -> bool:
    try:
        from IPython import get_ipython  # type: ignore[import-not-found]  # optional
    except ImportError:
        return False
    return get_ipython() is not None


def display(*args: Any) -> None:
    """Show each object with treescope in IPython; elsewhere ``print`` it."""
    if not _in_ipython():
        for x in args:
            print(x)
        return
    try:
        import treescope  # optional: only needed in a notebook
    except ImportError:
        for x in args:
            print(x)
        return
    for x in args:
        treescope.display(x, ignore_exceptions=True, autovisualize=True)


def render_object_constructor(
    object_type: type[Any],
    attributes: Mapping[str, Any],
    path: str | None,
    subtree_renderer: Any,
    roundtrippable: bool = False,
    color: str | None = None,
    first_line_annotation: Any = None,
) -> Any:
    """A treescope rendering ``Type(name=value, ...)`` of an object whose ``attributes``
    are real attributes (``obj.name``), for use in ``__treescope_repr__``; an optional
    ``first_line_annotation`` (a size comment, say) goes after the opening line."""
    from treescope import rendering_parts as rp  # optional: only needed to render

    type_name = rp.maybe_qualified_type_name(object_type)
    if roundtrippable:
        prefix = rp.siblings(type_name, "(")
        suffix = rp.text(")")
    else:
        prefix = rp.siblings(rp.roundtrip_condition(roundtrip=rp.text("<")), type_name, "(")
        suffix = rp.siblings(")", rp.roundtrip_condition(roundtrip=rp.text(">")))
    lines = []
    last = len(attributes) - 1
    for i, (name, value) in enumerate(attributes.items()):
        child_path = None if path is None else f"{path}.{name}"
        if i < last:
            comma = rp.siblings(",", rp.fold_condition(collapsed=rp.text(" ")))
        else:
            comma = rp.fold_condition(expanded=rp.text(","))
        entry = rp.siblings_with_annotations(f"{name}=", subtree_renderer(value, path=child_path))
        lines.append(rp.build_full_line_with_annotations(entry, comma))
    return rp.build_foldable_tree_node_from_children(
        prefix=prefix,
        children=lines,
        suffix=suffix,
        path=path,
        background_color=color,
        first_line_annotation=first_line_annotation,
    )
