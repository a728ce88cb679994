"""Lists and tuples of values, as DCP and Checkpointer each name them.

DCP keeps a list or tuple of plain values (an optimizer's betas, a param
group's params) as one value under its own name; Checkpointer walks into it
and keeps each item as NAME.0, NAME.1, ... So that each reads what the
other wrote, ckpt.dcp's writer also stores the items of such a value under
Checkpointer's names, and its reader composes a value DCP asks for from
numbered items when the checkpoint has only those (as a list: the stored
items do not say whether they were a tuple).
"""
import io
import re
from typing import Dict, List, Set, Tuple

import torch

from .state import leaves
from .values import PickleRefused, encode

_NUMBERED = re.compile(r"^(.*)\.(\d+)$")


def item_objects(fqn: str, blob: bytes) -> List[tuple]:
    """(name, bytes, global) of the items of a list or tuple DCP stores as
    one value (torch.save bytes), named and encoded as Checkpointer would;
    none for other values or for items only pickle stores."""
    try:
        value = torch.load(io.BytesIO(blob), weights_only=True)
    except Exception:
        return []  # only pickle reads it: not a plain sequence
    if not isinstance(value, (list, tuple)) or not value:
        return []
    out = []
    try:
        for item_name, item, _ in leaves({fqn: value}, lambda v: isinstance(v, torch.Tensor)):
            if isinstance(item, torch.Tensor):
                return []  # tensors in the list: DCP's own bytes only
            out.append((item_name, encode(item_name, item, False), True))
    except (PickleRefused, ValueError):
        return []
    return out


def dcp_view(objects, tensors) -> Tuple[Dict[str, List[str]], Set[str]]:
    """How DCP sees a checkpoint's objects: ({name: its items' names} for
    lists Checkpointer kept item by item, to compose; the names DCP must
    not see). Hidden are the items of a value stored whole (what the writer
    added for Checkpointer) and of a composed one: DCP takes a name it does
    not ask for as a sign of an old checkpoint and changes how it names the
    caller's state. A list holding dicts or lists is named alike by both
    (DCP walks into it too): one with names deeper than its items is left."""
    stored = set(objects)
    hidden: Set[str] = set()
    for name in stored:
        parent = name
        while True:
            m = _NUMBERED.match(parent)
            if m is None:
                break
            parent = m.group(1)
            if parent in stored:
                hidden.add(name)
                break
    groups: Dict[str, Dict[int, str]] = {}
    for name in stored - hidden:
        m = _NUMBERED.match(name)
        if m and m.group(1) not in stored and m.group(1) not in tensors:
            groups.setdefault(m.group(1), {})[int(m.group(2))] = name
    everything = stored | set(tensors)
    found: Dict[str, List[str]] = {}
    for parent, items in groups.items():
        if sorted(items) != list(range(len(items))):
            continue
        names = set(items.values())
        prefix = parent + "."
        if any(n.startswith(prefix) and n not in names for n in everything):
            continue
        found[parent] = [items[i] for i in range(len(items))]
        hidden |= names
    return found, hidden
