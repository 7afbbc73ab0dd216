"""The error-feedback residuals in terse's saved compression state, read
without terse: the soak's oracle for the conservation law of error
feedback compares what the engine reports with what it computed.

residuals_of(state) takes the bytes of save_compression_state(): the
chunked format (engine/checkpoint_format.h) or the older CompressionState
protobuf (engine/compression_state.proto), parsed by hand from the wire
format so the oracle shares no code with the engine.
"""

import numpy as np


def _varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def _fields(buf):
    """(field number, wire type, value or memoryview) of a message."""
    i, n = 0, len(buf)
    while i < n:
        key, i = _varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        elif wire == 2:
            length, i = _varint(buf, i)
            value, i = buf[i:i + length], i + length
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire} in the compression state")
        yield field, wire, value


def residuals_of(state):
    """{(name, tensor_offset): float32 array} of the engine's compression
    state: the chunked format (engine/checkpoint_format.h: "TERSECKP", u32
    version, u32 header length, u32 header CRC, a CheckpointHeader, then
    every tensor's float32 bytes in header order), or the older
    CompressionState protobuf."""
    buf = memoryview(state)
    if bytes(buf[:8]) == b"TERSECKP":
        return _chunked_residuals(buf)
    out = {}
    for field, wire, value in _fields(buf):
        if field != 2 or wire != 2:
            continue
        name, offset, values = "", 0, []
        for f, w, v in _fields(value):
            if f == 1:
                name = bytes(v).decode()
            elif f == 2:
                offset = v
            elif f == 3 and w == 2:
                values.append(np.frombuffer(v, dtype="<f4"))
            elif f == 3 and w == 5:
                values.append(np.frombuffer(v, dtype="<f4"))
        out[(name, offset)] = (np.concatenate(values) if values
                               else np.zeros(0, np.float32))
    return out


RESIDUAL_KIND = 1  # CheckpointTensor.Kind.RESIDUAL


def _chunked_residuals(buf):
    header_len = int.from_bytes(buf[12:16], "little")
    header = buf[20:20 + header_len]
    at = 20 + header_len
    out = {}
    for field, wire, value in _fields(header):
        if field != 4 or wire != 2:  # CheckpointHeader.tensors
            continue
        name, offset, kind, count = "", 0, 0, 0
        for f, w, v in _fields(value):
            if f == 1:
                name = bytes(v).decode()
            elif f == 2:
                offset = v
            elif f == 3:
                kind = v
            elif f == 5:
                count = v
        data = np.frombuffer(buf[at:at + 4 * count], dtype="<f4")
        at += 4 * count
        if kind == RESIDUAL_KIND:
            out[(name, offset)] = data.copy()
    return out
