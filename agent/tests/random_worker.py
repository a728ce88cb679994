"""One rank of a randomized resharding case (test_random_sharding.py).

    python random_worker.py save|load SOCKET JOB SEED RANK
    python random_worker.py save_common|load_common SOCKET JOB SEED RANK WORLD

Everything is derived from SEED: the worlds, the tensors' shapes, dtypes
and bytes, how each rank holds its part when saving and when loading, and
each rank's non-tensor values. So every rank rebuilds the same global
tensors by itself and checks what it loaded against its own part of them,
byte for byte. On a failure it prints the case and the first wrong bytes to
stderr and exits 1.
"""
import math
import random
import sys

import numpy
import torch

import ckpt

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.int16,
          torch.int32, torch.int64, torch.uint8, torch.bool]


# --------------------------------------------------------------------------
# Geometry: a part of a global tensor is ("whole",), ("box", offsets,
# lengths) or ("flat", begin, end).

def numel(shape):
    return math.prod(shape)


def part_shape(part, shape):
    """The local tensor's shape for a part."""
    if part[0] == "whole":
        return tuple(shape)
    if part[0] == "box":
        return tuple(part[2])
    return (part[2] - part[1],)


def part_elements(part, shape):
    return numel(part_shape(part, shape))


def extract(g, part):
    """The part of global tensor g, as a new contiguous tensor."""
    if part[0] == "whole":
        return g.clone()
    if part[0] == "box":
        return g[tuple(slice(o, o + n) for o, n in zip(part[1], part[2]))].clone()
    return g.reshape(-1)[part[1]:part[2]].clone()


def view_of(g, part):
    """The part of g as a view of g's memory (not a copy)."""
    if part[0] == "whole":
        return g
    if part[0] == "box":
        return g[tuple(slice(o, o + n) for o, n in zip(part[1], part[2]))]
    return g.reshape(-1)[part[1]:part[2]]


def equivalent_forms(part, shape):
    """Parts naming the same elements as part: replicas a rank may list in
    another form (the daemon must see that they are the same region)."""
    n = numel(shape)
    full = [("whole",), ("box", (0,) * len(shape), tuple(shape)), ("flat", 0, n)]
    if part_elements(part, shape) == 0:
        return [part]  # empty parts are compared by elements only; keep it
    if part[0] == "whole" or (part[0] == "flat" and part[1:] == (0, n)):
        return full
    if part[0] == "box":
        offs, lens = part[1], part[2]
        if tuple(lens) == tuple(shape):
            return full
        # A box is a flat range when, before its first dimension that is not
        # full, every dimension has length 1.
        k = len(shape)
        while k > 0 and lens[k - 1] == shape[k - 1]:
            k -= 1
        if k > 0 and all(lens[i] == 1 for i in range(k - 1)):
            begin = 0
            for d in range(len(shape)):
                begin = begin * shape[d] + offs[d]
            return [part, ("flat", begin, begin + numel(lens))]
    return [part]


def cut_points(rng, length, pieces):
    """pieces [begin, end) intervals tiling [0, length): sometimes as
    ckpt.split_range (torch.tensor_split) gives them, else at random points
    (empty intervals included)."""
    if rng.random() < 0.4:
        return [ckpt.split_range(length, i, pieces) for i in range(pieces)]
    points = sorted(rng.randint(0, length) for _ in range(pieces - 1))
    bounds = [0] + points + [length]
    return [(bounds[i], bounds[i + 1]) for i in range(pieces)]


def empty_part(rng, shape):
    n = numel(shape)
    if not shape or rng.random() < 0.5:
        b = rng.randint(0, n)
        return ("flat", b, b)
    d = rng.randrange(len(shape))
    offs, lens = [], []
    for k, s in enumerate(shape):
        o = rng.randint(0, s)
        offs.append(o)
        lens.append(0 if k == d else rng.randint(0, s - o))
    return ("box", tuple(offs), tuple(lens))


def random_box(rng, shape):
    offs, lens = [], []
    for s in shape:
        a = rng.randint(0, s)
        b = rng.randint(0, s)
        a, b = min(a, b), max(a, b)
        if rng.random() < 0.3:
            a, b = 0, s
        offs.append(a)
        lens.append(b - a)
    return ("box", tuple(offs), tuple(lens))


def random_flat(rng, shape):
    n = numel(shape)
    a, b = sorted((rng.randint(0, n), rng.randint(0, n)))
    return ("flat", a, b)


def partition(rng, shape, world):
    """Parts that tile the tensor exactly (no overlap), at most world of
    them: one split along a dimension, a grid over two, a flat split, or the
    whole. Returns (strategy, parts)."""
    n = numel(shape)
    nd = len(shape)
    choices = ["whole", "flat"]
    if nd >= 1:
        choices += ["split", "split"]
    if nd >= 2 and world >= 4:
        choices.append("grid")
    how = rng.choice(choices)
    if how == "whole":
        return how, [("whole",)]
    if how == "flat":
        pieces = rng.randint(1, world)
        return how, [("flat", b, e) for b, e in cut_points(rng, n, pieces)]
    if how == "split":
        d = rng.randrange(nd)
        pieces = rng.randint(1, world)
        parts = []
        for b, e in cut_points(rng, shape[d], pieces):
            offs = [0] * nd
            lens = list(shape)
            offs[d], lens[d] = b, e - b
            parts.append(("box", tuple(offs), tuple(lens)))
        return f"split(dim {d})", parts
    d1, d2 = rng.sample(range(nd), 2)
    parts = []
    for b1, e1 in cut_points(rng, shape[d1], 2):
        for b2, e2 in cut_points(rng, shape[d2], 2):
            offs = [0] * nd
            lens = list(shape)
            offs[d1], lens[d1] = b1, e1 - b1
            offs[d2], lens[d2] = b2, e2 - b2
            parts.append(("box", tuple(offs), tuple(lens)))
    return f"grid(dims {d1},{d2})", parts


def save_plan(rng, shape, world):
    """Each save rank's part (or None): the parts tile the tensor; ranks left
    over hold a replica of one (perhaps in another form), an empty part, or
    nothing."""
    how, parts = partition(rng, shape, world)
    ranks = list(range(world))
    rng.shuffle(ranks)
    plan = [None] * world
    for part, r in zip(parts, ranks):
        plan[r] = part
    for r in ranks[len(parts):]:
        c = rng.random()
        if c < 0.55:
            plan[r] = rng.choice(parts)
        elif c < 0.8:
            plan[r] = empty_part(rng, shape)
    plan = [None if p is None else rng.choice(equivalent_forms(p, shape)) for p in plan]
    return how, plan


def load_plan(rng, shape, world):
    """Each load rank's part (or None): a partition as when saving, or parts
    chosen by each rank at random (overlapping, empty, whole...)."""
    if rng.random() < 0.5:
        how, parts = partition(rng, shape, world)
        plan = [None] * world
        ranks = list(range(world))
        rng.shuffle(ranks)
        for part, r in zip(parts, ranks):
            plan[r] = part
        for r in ranks[len(parts):]:
            plan[r] = rng.choice(parts + [None, empty_part(rng, shape)])
    else:
        how = "random"
        plan = []
        for _ in range(world):
            c = rng.random()
            if c < 0.1:
                plan.append(None)
            elif c < 0.25:
                plan.append(("whole",))
            elif c < 0.65 and shape:
                plan.append(random_box(rng, shape))
            elif c < 0.7:
                plan.append(empty_part(rng, shape))
            else:
                plan.append(random_flat(rng, shape))
    plan = [None if p is None else rng.choice(equivalent_forms(p, shape)) for p in plan]
    return how, plan


def random_shape(rng):
    if rng.random() < 0.12:  # larger: many chunks with a small --chunk_bytes
        return rng.choice([(rng.randint(2000, 30000),),
                           (rng.randint(40, 200), rng.randint(40, 200)),
                           (rng.randint(3, 9), rng.randint(20, 60), rng.randint(20, 60))])
    nd = rng.choices([0, 1, 2, 3, 4], weights=[2, 3, 3, 3, 1])[0]
    dims = []
    for _ in range(nd):
        c = rng.random()
        dims.append(0 if c < 0.08 else 1 if c < 0.22 else rng.randint(2, 9))
    return tuple(dims)


LAYOUTS_SAVE = ["plain", "noncontig", "strided", "view"]
LAYOUTS_LOAD = ["plain", "noncontig", "strided"]


class TensorCase:
    def __init__(self, index, name, dtype, shape, save_how, save, load_how, load,
                 save_layouts, load_layouts, layout_seed):
        self.index, self.name, self.dtype, self.shape = index, name, dtype, shape
        self.save_how, self.save, self.load_how, self.load = save_how, save, load_how, load
        self.save_layouts, self.load_layouts = save_layouts, load_layouts
        self.layout_seed = layout_seed

    def describe(self):
        dt = str(self.dtype).replace("torch.", "")
        lines = [f"  {self.name}: {dt}{list(self.shape)}"]
        lines.append(f"    save {self.save_how}: " + "; ".join(
            f"r{r}={fmt(p)}/{self.save_layouts[r]}" for r, p in enumerate(self.save)))
        lines.append(f"    load {self.load_how}: " + "; ".join(
            f"r{r}={fmt(p)}/{self.load_layouts[r]}" for r, p in enumerate(self.load)))
        return "\n".join(lines)


def fmt(part):
    if part is None:
        return "-"
    if part[0] == "whole":
        return "whole"
    if part[0] == "box":
        return f"box(off={list(part[1])},len={list(part[2])})"
    return f"flat[{part[1]},{part[2]})"


class Case:
    def __init__(self, seed):
        rng = random.Random(seed)
        self.seed = seed
        self.save_world = rng.randint(1, 4)
        self.load_world = rng.choice([w for w in range(1, 5) if w != self.save_world])
        self.step = rng.randint(0, 10 ** 6)
        # A second save of other bytes, before or after the step loaded.
        self.decoy = rng.choice([None, "before", "after"])
        self.decoy_step = (rng.randint(0, self.step - 1) if self.decoy == "before" and self.step > 0
                           else self.step + rng.randint(1, 1000))
        if self.decoy == "before" and self.step == 0:
            self.decoy = None
        self.load_by = "latest" if self.decoy != "after" and rng.random() < 0.5 else "step"
        self.blocking = rng.random() < 0.3
        # First, a save the daemon must refuse on every rank (overlapping
        # regions, or regions that do not cover the tensor), at a step above
        # the others: "latest" must not see it afterwards.
        self.bad, self.bad_shape, self.bad_plan = bad_save_plan(rng, self.save_world)
        self.bad_step = self.step + 5000
        self.tensors = []
        count = rng.randint(30, 60) if rng.random() < 0.1 else rng.randint(4, 10)
        for i in range(count):
            dtype = rng.choice(DTYPES)
            shape = random_shape(rng)
            # Names the agent escapes (" ", "ü", "-") and dotted ones.
            name = rng.choice(["t{}", "layers.{}.weight", "w {}", "ü{}", "{}-x"]).format(i)
            save_how, save = save_plan(rng, shape, self.save_world)
            load_how, load = load_plan(rng, shape, self.load_world)
            save_layouts = [rng.choice(LAYOUTS_SAVE) for _ in save]
            load_layouts = [rng.choice(LAYOUTS_LOAD) for _ in load]
            self.tensors.append(TensorCase(i, name, dtype, shape, save_how, save, load_how, load,
                                           save_layouts, load_layouts, rng.randrange(1 << 30)))

    def describe(self):
        head = (f"seed {self.seed}: save world {self.save_world} step {self.step}, load world "
                f"{self.load_world} by {self.load_by}, decoy {self.decoy}"
                f"{'' if self.decoy is None else ' at step ' + str(self.decoy_step)}"
                f"{', blocking' if self.blocking else ''}")
        bad = []
        if self.bad:
            bad = [f"  refused first ({self.bad}, step {self.bad_step}): bad{list(self.bad_shape)}: "
                   + "; ".join(f"r{r}={fmt(p)}" for r, p in enumerate(self.bad_plan))]
        return "\n".join([head] + bad + [t.describe() for t in self.tensors])


def bad_save_plan(rng, world):
    """(kind, shape, parts): a save of one float32 tensor that must be
    refused: "gap" (an element no rank holds) or "overlap" (two ranks hold
    different regions that share elements)."""
    kind = rng.choice([None, "gap"] + (["overlap"] if world >= 2 else []))
    if kind is None:
        return None, (), []
    shape = tuple(rng.randint(1, 6) for _ in range(rng.randint(1, 3)))
    n = numel(shape)
    while n < 3:
        shape = shape + (rng.randint(2, 4),)
        n = numel(shape)
    if kind == "gap":
        # Flat pieces with one element left out somewhere.
        hole = rng.randrange(n)
        pieces = [("flat", 0, hole), ("flat", hole + 1, n)]
        if world == 1:
            pieces = [rng.choice([p for p in pieces if p[2] > p[1]])]
    else:
        a = rng.randint(1, n - 1)       # rank A: [0, a + k); rank B: [a, n)
        k = rng.randint(1, n - a)
        pieces = [("flat", 0, a + k), ("flat", a, n)]
        if rng.random() < 0.5 and shape[0] >= 2:
            # The same as boxes along dimension 0, when that is possible.
            rows = rng.randint(1, shape[0] - 1)
            pieces = [("box", (0,) * len(shape), (rows + 1,) + shape[1:]),
                      ("box", (rows,) + (0,) * (len(shape) - 1), (shape[0] - rows,) + shape[1:])]
    plan = [None] * world
    ranks = rng.sample(range(world), min(world, len(pieces)))
    for r, p in zip(ranks, pieces):
        plan[r] = p
    return kind, shape, plan


# --------------------------------------------------------------------------
# Bytes.

def global_tensor(seed, tc, salt=0):
    """The tensor's global value: random bytes (any bit pattern, NaNs with
    payloads included) for every dtype but bool (0 or 1)."""
    g = torch.Generator().manual_seed(seed * 1009 + tc.index * 7 + salt * 1000003)
    n = numel(tc.shape)
    if tc.dtype == torch.bool:
        return (torch.randint(0, 2, (n,), dtype=torch.uint8, generator=g) == 1).reshape(tc.shape)
    size = torch.empty((), dtype=tc.dtype).element_size()
    raw = torch.randint(0, 256, (n * size,), dtype=torch.uint8, generator=g)
    return raw.view(tc.dtype).reshape(tc.shape)


def raw(t):
    """A tensor's elements as bytes, in row-major order (0-d and empty too)."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def flipped(t):
    """t with every byte changed (bool: negated)."""
    if t.dtype == torch.bool:
        return ~t
    return torch.bitwise_not(raw(t)).view(t.dtype).reshape(t.shape)


def with_layout(values, layout, rng, filler_byte=0xA5):
    """A tensor equal to values whose memory is laid out as asked, and the
    tensor that owns that memory: "plain" (contiguous), "noncontig" (two
    dimensions transposed in memory), "strided" (every other element of a
    larger buffer along one dimension)."""
    if layout == "noncontig" and values.dim() >= 2:
        a, b = rng.sample(range(values.dim()), 2)
        base = values.transpose(a, b).contiguous()
        return base.transpose(a, b), base
    if layout == "noncontig" and values.dim() == 1:
        layout = "strided"
    if layout == "strided" and values.dim() >= 1:
        d = rng.randrange(values.dim())
        step, start = rng.randint(2, 3), rng.randint(0, 1)
        shape = list(values.shape)
        shape[d] = start + step * shape[d] + rng.randint(0, 1)
        if values.dtype == torch.bool:
            base = torch.ones(shape, dtype=torch.bool)
        else:
            base = torch.full((numel(shape) * values.element_size(),), filler_byte,
                              dtype=torch.uint8).view(values.dtype).reshape(shape)
        index = [slice(None)] * values.dim()
        index[d] = slice(start, start + step * values.shape[d], step)
        view = base[tuple(index)]
        view.copy_(values)
        return view, base
    base = values.clone()
    return base, base


def first_difference(got, want):
    g, w = raw(got), raw(want)
    if g.numel() != w.numel():
        return f"{g.numel()} bytes, expected {w.numel()}"
    bad = (g != w).nonzero().reshape(-1)
    if bad.numel() == 0:
        return None
    i = int(bad[0])
    return (f"{bad.numel()} of {g.numel()} bytes differ, first at byte {i}: got "
            f"{g[i:i + 8].tolist()} expected {w[i:i + 8].tolist()}")


def as_leaf(local, part, shape):
    if part[0] == "whole":
        return local
    if part[0] == "box":
        return ckpt.shard_box(local, shape, part[1])
    return ckpt.shard_flat(local, shape, part[1])


# --------------------------------------------------------------------------
# Non-tensor values.

def make_values(seed, rank):
    rng = random.Random(seed * 7919 + rank)
    nrng = numpy.random.default_rng(seed * 31 + rank)

    def array(dtype, shape, order="C"):
        if numpy.dtype(dtype) == numpy.bool_:
            a = nrng.integers(0, 2, size=shape).astype(numpy.bool_)
        else:
            a = numpy.frombuffer(nrng.bytes(int(numpy.prod(shape)) * numpy.dtype(dtype).itemsize),
                                 dtype=dtype).reshape(shape).copy()
        return numpy.asfortranarray(a) if order == "F" else a

    big = rng.choice([1, -1]) * (2 ** rng.randint(64, 400) + rng.randint(0, 10 ** 9))
    text = "".join(rng.choice(["a", "Z", " ", "\x00", "ü", "✓", "😀", "\n", "\"", "\\", "é",
                               "\ud800"])  # a lone surrogate too
                   for _ in range(rng.randint(1, 40)))
    blob = bytes(rng.getrandbits(8) for _ in range(rng.choice([1, 7, 4096, 20000])))
    values = {
        "rank": rank,
        "seed": seed,
        "empty_bytes": b"",
        "empty_str": "",
        "empty_list": [],
        "empty_dict": {},
        "empty_tuple": (),
        "nested": (rank, ("a", (b"\x00\xff", (None, (2.5, [True, {"k": (False, -1)}])))), []),
        "big": big,
        "big_neg": -(2 ** 127),
        "huge": rng.choice([1, -1]) * 2 ** rng.randint(14300, 30000) - rng.randint(0, 9),
        "ints": [0, -1, 127, -128, 255, -256, 2 ** 63 - 1, -2 ** 63, 2 ** 64],
        "nan": float("nan"),
        "neg_zero": -0.0,
        "inf": float("inf"),
        "neg_inf": float("-inf"),
        "tiny": 5e-324,
        "max": 1.7976931348623157e308,
        "float": rng.uniform(-1e6, 1e6),
        "none": None,
        "true": True,
        "zero": 0,
        "text": text,
        "blob": blob,
        "list": [rng.randint(-5, 5) for _ in range(rng.randint(0, 5))],
        # Loaded into one tuple object shared by every place (see load()).
        "betas": [(rng.random(), rng.random()) for _ in range(rng.randint(2, 4))],
        "keys needing escape": {"a b": 1, "ü": 2, "-": 3, "x-2e": 4},
        "arrays": {
            "f32": array(numpy.float32, (rng.randint(0, 5), 3)),
            "f16": array(numpy.float16, (rng.randint(1, 7),)),
            "f64_0d": array(numpy.float64, ()),
            "i8": array(numpy.int8, (2, 0, 3)),
            "u16": array(numpy.uint16, (4, 5), "F"),
            "i64": array(numpy.int64, (rng.randint(0, 9),)),
            "i32_big_endian": array(numpy.dtype(">i4"), (3, 2)),
            "bool": array(numpy.bool_, (rng.randint(0, 6),)),
            "bool_0d": array(numpy.bool_, ()),
            "c64": array(numpy.complex64, (2,)),
            "empty_0": numpy.zeros((0,), dtype=numpy.float32),
            "u8_empty_2d": numpy.zeros((0, 0), dtype=numpy.uint8),
            "strided_view": array(numpy.int16, (7, 6))[::2, 1::3],
            "unicode": numpy.array([text[:3], "", "ü✓"]),
            "datetime": numpy.array(["2024-02-29T12:00", "NaT"], dtype="datetime64[ms]"),
            "record": numpy.array([(rank, 1.5, b"ab")], dtype=[("a", "<i4"), ("b", "<f8"),
                                                                ("c", "S2")]),
        },
    }
    return values


def placeholders(node):
    """The same structure with every value replaced."""
    if isinstance(node, dict):
        return {k: placeholders(v) for k, v in node.items()}
    if isinstance(node, list):
        return [placeholders(v) for v in node]
    if isinstance(node, tuple):
        return tuple(placeholders(v) for v in node)
    return "placeholder"


def value_difference(a, b, path="v"):
    """None if b is exactly a (types, float bits, array dtypes and bytes)."""
    if isinstance(a, dict):
        if not isinstance(b, dict) or list(a) != list(b):
            return f"{path}: {b!r} is not a dict with keys {list(a)}"
        for k in a:
            d = value_difference(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, (list, tuple)):
        if type(a) is not type(b) or len(a) != len(b):
            return f"{path}: {b!r} is not a {type(a).__name__} of {len(a)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = value_difference(x, y, f"{path}.{i}")
            if d:
                return d
        return None
    if isinstance(a, numpy.ndarray):
        if not (isinstance(b, numpy.ndarray) and a.dtype == b.dtype and a.shape == b.shape
                and a.tobytes() == b.tobytes()):
            return f"{path}: {b!r} is not {a!r} ({a.dtype}, {a.shape})"
        return None
    if isinstance(a, float):
        if not (isinstance(b, float) and
                numpy.float64(a).tobytes() == numpy.float64(b).tobytes()):
            return f"{path}: {b!r} is not {a!r}"
        return None
    if type(a) is not type(b) or a != b:
        return f"{path}: {b!r} ({type(b).__name__}) is not {a!r} ({type(a).__name__})"
    return None


# --------------------------------------------------------------------------
# The two phases.

def save(case, socket, job, rank):
    def state_of(salt):
        tensors, keep = {}, []
        for tc in case.tensors:
            part = tc.save[rank]
            if part is None:
                continue
            g = global_tensor(case.seed, tc, salt)
            rng = random.Random(tc.layout_seed * 5 + rank + salt)
            layout = tc.save_layouts[rank]
            if layout == "view":
                local = view_of(g, part)  # straight out of the global tensor
                keep.append(g)
            else:
                local, base = with_layout(extract(g, part), layout, rng)
                keep.append(base)
            tensors[tc.name] = as_leaf(local, part, tc.shape)
        return {"t": tensors, "v": make_values(case.seed, rank) if salt == 0 else {"decoy": salt}}, keep

    with ckpt.Checkpointer(job, rank=rank, world_size=case.save_world, socket_path=socket) as cp:
        if case.bad:
            part = case.bad_plan[rank]
            state = {"extra": {"rank": rank}}
            if part is not None:
                class Bad:
                    index, dtype, shape = 99, torch.float32, case.bad_shape
                state["bad"] = as_leaf(extract(global_tensor(case.seed, Bad), part).clone(), part,
                                       case.bad_shape)
            try:
                cp.save(case.bad_step, state, blocking=case.blocking).wait_persisted()
            except ckpt.CheckpointError as e:
                words = "overlaps" if case.bad == "overlap" else "covers"
                if e.code != "INVALID_ARGUMENT" or words not in str(e) or "bad" not in str(e):
                    print(f"rank {rank}: the {case.bad} save failed otherwise: {e.code}: {e}\n"
                          f"{case.describe()}", file=sys.stderr)
                    return 1
            else:
                print(f"rank {rank}: the {case.bad} save was not refused\n{case.describe()}",
                      file=sys.stderr)
                return 1
        order = [(case.step, 0)]
        if case.decoy == "before":
            order.insert(0, (case.decoy_step, 1))
        elif case.decoy == "after":
            order.append((case.decoy_step, 1))
        for step, salt in order:
            state, keep = state_of(salt)
            handle = cp.save(step, state, blocking=case.blocking)
            handle.wait_snapshot()
            # The snapshot is taken: changing the tensors now must not
            # change what is written.
            for t in keep:
                if t.numel():
                    t.copy_(flipped(t))
            handle.wait_persisted()
    return 0


def load(case, socket, job, rank):
    tensors, checks = {}, []
    for tc in case.tensors:
        part = tc.load[rank]
        if part is None:
            continue
        want = extract(global_tensor(case.seed, tc), part)
        rng = random.Random(tc.layout_seed * 11 + rank)
        local, base = with_layout(flipped(want), tc.load_layouts[rank], rng)
        want_base = base.clone()
        # The same view of want_base as local is of base.
        offset = local.storage_offset() - base.storage_offset()
        want_base.as_strided(local.shape, local.stride(), want_base.storage_offset() + offset).copy_(want)
        leaf = as_leaf(local, part, tc.shape)
        tensors[tc.name] = leaf
        checks.append((tc, leaf, local, base, want_base))
    state = {"t": tensors}
    # Each rank gets its own values back; a rank beyond the saved world gets
    # rank 0's (the job's).
    want_values = make_values(case.seed, rank if rank < case.save_world else 0)
    state["v"] = placeholders(want_values)
    # As an optimizer's param_groups hold their betas: one tuple object at
    # several places, each to be given its own values.
    state["v"]["betas"] = [state["v"]["betas"][0]] * len(state["v"]["betas"])
    with ckpt.Checkpointer(job, rank=rank, world_size=case.load_world, socket_path=socket) as cp:
        step, loaded = cp.load_state("latest" if case.load_by == "latest" else case.step, state)
    errors = []
    if step != case.step:
        errors.append(f"loaded step {step}, expected {case.step}")
    for tc, leaf, local, base, want_base in checks:
        got = loaded["t"][tc.name]
        if got is not leaf:
            errors.append(f"{tc.name}: the state's leaf was replaced by {type(got).__name__}")
        diff = first_difference(base, want_base)
        if diff:
            errors.append(f"{tc.name} ({fmt(tc.load[rank])}, {tc.load_layouts[rank]}): {diff}")
    diff = value_difference(want_values, loaded["v"])
    if diff:
        errors.append(f"values: {diff}")
    if errors:
        print(f"rank {rank} of {case.load_world}: " + "\n".join(errors), file=sys.stderr)
        print(case.describe(), file=sys.stderr)
        return 1
    return 0


def common_values(seed):
    """Values every rank saves alike, as a trainer's do (its epoch, its
    optimizer's param_groups)."""
    rng = random.Random(seed)
    return {"epoch": rng.randint(0, 99), "name": "run-" + str(seed),
            "param_groups": [{"lr": rng.random(), "betas": (0.9, rng.random()), "params": [0, 1]},
                             {"lr": 0.0, "weight_decay": -0.0, "params": [2]}]}


def common(mode, socket, job, seed, rank, world):
    """A world of ranks saving (or loading) one tensor in flat ranges and the
    common values: what a trainer resuming on a larger world does."""
    g = torch.arange(1000, dtype=torch.float32) * 0.25 + seed
    b, e = ckpt.split_range(g.numel(), rank, world)
    with ckpt.Checkpointer(job, rank=rank, world_size=world, socket_path=socket) as cp:
        if mode == "save_common":
            cp.save(1, {"w": ckpt.shard_flat(g[b:e].clone(), g.shape, b),
                        "extra": common_values(seed)}).wait_persisted()
            return 0
        state = {"w": ckpt.shard_flat(torch.zeros(e - b), g.shape, b),
                 "extra": placeholders(common_values(seed))}
        _, loaded = cp.load_state(1, state)
    diff = value_difference(common_values(seed), loaded["extra"])
    if diff or not torch.equal(state["w"].tensor, g[b:e]):
        print(f"rank {rank} of {world}: {diff or 'w differs'}", file=sys.stderr)
        return 1
    return 0


def main():
    mode, socket, job, seed, rank = sys.argv[1:6]
    if mode in ("save_common", "load_common"):
        return common(mode, socket, job, int(seed), int(rank), int(sys.argv[6]))
    case = Case(int(seed))
    return (save if mode == "save" else load)(case, socket, job, int(rank))


if __name__ == "__main__":
    sys.exit(main())
