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


def unescape(name: str) -> str:
    """The key escape() was given (names from other writers come back as
    they are)."""
    if "-" not in name:
        return name
    out, i = bytearray(), 0
    while i < len(name):
        if name[i] == "-" and i + 3 <= len(name):
            try:
                out.append(int(name[i + 1:i + 3], 16))
                i += 3
                continue
            except ValueError:
                pass
        out += name[i].encode()
        i += 1
    return out.decode(errors="replace")


Leaf = Tuple[str, Any, Callable[[Any], None]]  # name, value, setter


class Leaves(list):
    """The leaves, plus each tuple met on the way (its path from the root and
    the replacements its items' setters recorded): tuples cannot change in
    place, so rebuild() makes new ones. By path, not by identity: one tuple
    object may sit at several places (an optimizer's param_groups share
    their betas), each with its own values."""

    def __init__(self):
        super().__init__()
        self.tuples: List[Tuple[tuple, dict]] = []


def leaves(state, is_leaf: Callable[[Any], bool]) -> Leaves:
    """Every leaf with its name and a setter that replaces it in its parent."""
    out = Leaves()
    seen = set()

    def walk(node, name, path, setter):
        if not is_leaf(node) and isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{name}.{escape(k)}" if name else escape(k), path + (k,),
                     _item_setter(node, k))
        elif not is_leaf(node) and isinstance(node, (list, tuple)):
            updates = None
            if isinstance(node, tuple):
                updates = {}
                out.tuples.append((path, updates))
            for i, v in enumerate(node):
                walk(v, f"{name}.{i}" if name else str(i), path + (i,),
                     _item_setter(node, i, updates))
        elif not name:
            raise ValueError("the state must be a dict or list, not a single value")
        elif name in seen:
            raise ValueError(f"two leaves of the state are both named {name!r}")
        else:
            seen.add(name)
            out.append((name, node, setter))

    walk(state, "", (), None)
    return out


def _item_setter(parent, key, updates=None):
    if updates is not None:
        return lambda value: updates.__setitem__(key, value)

    def assign(value):
        parent[key] = value
    return assign


def rebuild(state, found: Leaves):
    """state with new tuples where their items were replaced (dicts and lists
    were updated in place); deepest tuples first, so nested ones compose."""
    updates_at = {path: updates for path, updates in found.tuples}

    def get(path):
        node = state
        for k in path:
            node = node[k]
        return node

    for path, updates in sorted(found.tuples, key=lambda t: -len(t[0])):
        if not updates:
            continue
        old = get(path)
        items = [updates.get(i, v) for i, v in enumerate(old)]
        new = type(old)(*items) if hasattr(old, "_fields") else type(old)(items)
        if not path:
            return new
        parent_path, key = path[:-1], path[-1]
        if parent_path in updates_at:
            updates_at[parent_path][key] = new  # the parent tuple is rebuilt next
        else:
            get(parent_path)[key] = new
    return state
