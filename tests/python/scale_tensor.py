"""Multiplies one F32 tensor of a safetensors file by a factor, in place, and rewrites its
crc32.<name> in __metadata__ (8 hex digits: the header keeps its length).

    python3 scale_tensor.py FILE NAME FACTOR

Used to make one part of a model's gradients larger than the rest (test_fp16_parallel.sh:
an overflow on one pipeline stage alone)."""
import json
import struct
import sys
import zlib
from array import array


def main(path, name, factor):
    with open(path, "r+b") as f:
        data = bytearray(f.read())
        n = struct.unpack("<Q", data[:8])[0]
        header = json.loads(data[8:8 + n])
        t = header[name]
        if t["dtype"] != "F32":
            sys.exit("%s: %s is %s, expected F32" % (path, name, t["dtype"]))
        lo, hi = (8 + n + o for o in t["data_offsets"])
        values = array("f")
        values.frombytes(bytes(data[lo:hi]))
        if sys.byteorder != "little":
            values.byteswap()
        values = array("f", (v * factor for v in values))
        if sys.byteorder != "little":
            values.byteswap()
        data[lo:hi] = values.tobytes()
        meta = header.get("__metadata__", {})
        key = "crc32." + name
        if key in meta:
            old = ('"%s":"%s"' % (key, meta[key])).encode()
            new = ('"%s":"%08x"' % (key, zlib.crc32(data[lo:hi]) & 0xFFFFFFFF)).encode()
            at = data.find(old, 8, 8 + n)
            if at < 0:
                sys.exit("%s: cannot find %s in the header" % (path, key))
            data[at:at + len(old)] = new
        f.seek(0)
        f.write(data)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]))
