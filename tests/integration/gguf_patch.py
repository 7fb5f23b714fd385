"""Finds a tensor's data in a GGUF file (version 2/3 layout, from the format's spec) so tests
can overwrite bytes of a copy in place, e.g. put a NaN into one row of output.weight. Not a
test itself (tests/run.sh runs only test_* files)."""
import struct

_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # vtype -> bytes
_STRING, _ARRAY = 8, 9


def _skip_value(f, vtype):
    if vtype in _SCALAR:
        f.read(_SCALAR[vtype])
    elif vtype == _STRING:
        (n,) = struct.unpack("<Q", f.read(8))
        f.read(n)
    elif vtype == _ARRAY:
        etype, n = struct.unpack("<IQ", f.read(12))
        for _ in range(n):
            _skip_value(f, etype)
    else:
        raise ValueError(f"unknown GGUF value type {vtype}")


def tensor_offsets(path):
    """{name: (absolute data offset, [ne...], type)} for every tensor of the file."""
    with open(path, "rb") as f:
        magic, version, n_tensors, n_kv = struct.unpack("<4sIQQ", f.read(24))
        if magic != b"GGUF" or version < 2:
            raise ValueError(f"{path}: not a GGUF v2/v3 file")
        alignment = 32
        for _ in range(n_kv):
            (klen,) = struct.unpack("<Q", f.read(8))
            key = f.read(klen).decode()
            (vtype,) = struct.unpack("<I", f.read(4))
            if key == "general.alignment" and vtype == 4:
                (alignment,) = struct.unpack("<I", f.read(4))
            else:
                _skip_value(f, vtype)
        infos = []
        for _ in range(n_tensors):
            (nlen,) = struct.unpack("<Q", f.read(8))
            name = f.read(nlen).decode()
            (nd,) = struct.unpack("<I", f.read(4))
            ne = list(struct.unpack(f"<{nd}Q", f.read(8 * nd)))
            ttype, off = struct.unpack("<IQ", f.read(12))
            infos.append((name, ne, ttype, off))
        start = (f.tell() + alignment - 1) // alignment * alignment
    return {name: (start + off, ne, ttype) for name, ne, ttype, off in infos}


def poke_f32(path, tensor, index, value):
    """Overwrites element `index` of an F32 tensor in place."""
    off, _, ttype = tensor_offsets(path)[tensor]
    if ttype != 0:
        raise ValueError(f"{tensor} is not F32")
    with open(path, "r+b") as f:
        f.seek(off + 4 * index)
        f.write(struct.pack("<f", value))
