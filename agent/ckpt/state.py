"""Walking a nested state (dicts, lists, tuples) down to its leaves.

Each leaf gets a name made of the keys on its path joined by "." (list
positions as numbers), so model.state_dict() keys come out as they are:
{"model": {"layers.0.weight": t}} is "model.layers.0.weight". Characters
the daemon does not take in names (outside [A-Za-z0-9._]) are written as
"-" and two hex digits per UTF-8 byte, "-" itself included. Two leaves that
come out with one name are an error, not a silent overwrite.
"""
from typing import Any, Callable, List, Tuple

_PLAIN = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._")


def escape(key) -> str:
    text = str(key)
    return "".join(c if c in _PLAIN else "".join(f"-{b:02x}" for b in c.encode()) for c in text)


Leaf = Tuple[str, Any, Callable[[Any], None]]  # name, value, setter


def leaves(state, is_leaf: Callable[[Any], bool]) -> List[Leaf]:
    """Every leaf with its name and a setter that replaces it in its parent
    (tuples are rebuilt by rebuild(), so their setters record instead)."""
    out: List[Leaf] = []
    seen = {}

    def walk(node, name, setter):
        if not is_leaf(node) and isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{name}.{escape(k)}" if name else escape(k), _item_setter(node, k))
        elif not is_leaf(node) and isinstance(node, (list, tuple)):
            for i, v in enumerate(node):
                walk(v, f"{name}.{i}" if name else str(i), _item_setter(node, i))
        elif not name:
            raise ValueError("the state must be a dict or list, not a single value")
        elif name in seen:
            raise ValueError(f"two leaves of the state are both named {name!r}")
        else:
            seen[name] = True
            out.append((name, node, setter))

    walk(state, "", None)
    return out


_tuple_updates: "dict[int, dict]" = {}


def _item_setter(parent, key):
    if isinstance(parent, tuple):
        def record(value, parent=parent, key=key):
            _tuple_updates.setdefault(id(parent), {})[key] = value
        return record

    def assign(value, parent=parent, key=key):
        parent[key] = value
    return assign


def rebuild(state):
    """state with the recorded tuple replacements applied (new tuples; dicts
    and lists were updated in place)."""
    def walk(node):
        if isinstance(node, dict):
            for k in list(node):
                node[k] = walk(node[k])
            return node
        if isinstance(node, list):
            for i in range(len(node)):
                node[i] = walk(node[i])
            return node
        if isinstance(node, tuple):
            updates = _tuple_updates.pop(id(node), {})
            items = [walk(updates.get(i, v)) for i, v in enumerate(node)]
            return type(node)(*items) if hasattr(node, "_fields") else tuple(items)
        return node
    try:
        return walk(state)
    finally:
        _tuple_updates.clear()
