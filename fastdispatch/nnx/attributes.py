"""A flax GraphDef read by attribute path, for --trace's recompile explanations."""

from __future__ import annotations

from fastdispatch.nnx import _flax


def graph_attributes(graphdef):
    """``{attribute path: value}`` of a flax GraphDef, by path from the root (a
    tuple of attribute names): a static attribute's value, a child node's type.
    flax's own bookkeeping attributes (``_pytree__*``) are left out; a GraphDef
    of another layout gives what was read before it."""
    nodes, attributes = iter(graphdef.nodes), iter(graphdef.attributes)
    found = {}

    def visit(path, reported=True):
        node = next(nodes)
        if reported:
            found[path] = getattr(node, "type", type(node))
        for _ in range(getattr(node, "num_attributes", 0) if isinstance(node, _flax.NodeDef) else 0):
            key, attribute = next(attributes)
            # flax's bookkeeping: its nodes are consumed in order, not reported.
            own = not (isinstance(key, str) and key.startswith(_flax.BOOKKEEPING))
            if isinstance(attribute, _flax.NodeAttr):
                visit(path + (key,), reported and own)
            elif own and reported and isinstance(attribute, _flax.Static):
                found[path + (key,)] = attribute.value

    try:
        visit(())
    except StopIteration:  # a GraphDef of another layout: nothing to say
        pass
    return found
