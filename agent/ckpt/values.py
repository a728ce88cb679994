"""Non-tensor leaves of a state, as the bytes of a checkpoint object.

Numbers, strings, booleans, None and bytes are stored as themselves (JSON,
or raw bytes), numpy arrays in .npy form without pickle. Anything else is
pickled only when the caller asks for it, and a pickled object is unpickled
only when the loading caller asks for it too: loading a checkpoint must not
run code from it by default.
"""
import io
import json
import pickle

_JSON, _BYTES, _NUMPY, _PICKLE, _INT = b"J", b"B", b"N", b"P", b"I"
# A value as torch.save wrote it: what torch.distributed.checkpoint keeps of
# a non-tensor (ckpt.dcp stores it as it came).
TORCH = b"T"


class PickleRefused(TypeError):
    """A value needs pickle and the caller did not allow it."""


def encode(path: str, value, allow_pickle: bool) -> bytes:
    if isinstance(value, int) and not isinstance(value, bool):
        # Two's complement bytes: any size (Python caps int<->str at 4300
        # digits, so not as JSON).
        return _INT + value.to_bytes(value.bit_length() // 8 + 1, "little", signed=True)
    if value is None or isinstance(value, (bool, float, str)):
        # json writes floats with repr (exact) and NaN/Infinity.
        return _JSON + json.dumps(value).encode()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _BYTES + bytes(value)
    try:
        import numpy
        if isinstance(value, numpy.ndarray) and value.dtype != object:
            buffer = io.BytesIO()
            numpy.save(buffer, value, allow_pickle=False)
            return _NUMPY + buffer.getvalue()
    except ImportError:
        pass
    if not allow_pickle:
        raise PickleRefused(
            f"{path}: a {type(value).__name__} is not a tensor, number, string, bytes, None or "
            f"numpy array; save(..., allow_pickle=True) stores it with pickle")
    return _PICKLE + pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def decode(path: str, data: bytes, allow_pickle: bool):
    tag, body = data[:1], data[1:]
    if tag == _JSON:
        return json.loads(body)
    if tag == _BYTES:
        return body
    if tag == _INT:
        return int.from_bytes(body, "little", signed=True)
    if tag == _NUMPY:
        import numpy
        return numpy.load(io.BytesIO(body), allow_pickle=False)
    if tag == TORCH:
        import torch
        # weights_only: tensors, numbers, strings and containers, no code.
        return torch.load(io.BytesIO(body), weights_only=not allow_pickle)
    if tag == _PICKLE:
        if not allow_pickle:
            raise PickleRefused(
                f"{path}: stored with pickle; load(..., allow_pickle=True) unpickles it (only "
                f"for checkpoints you trust: unpickling runs code)")
        return pickle.loads(body)
    raise ValueError(f"{path}: not a value this agent wrote (tag {tag!r})")
