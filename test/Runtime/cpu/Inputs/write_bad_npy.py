"""write_bad_npy.py DIR: writes damaged .npy files into DIR: huge.npy (128
bytes declaring 1000000000 x 1000 floats), overflow.npy ((2^62, 4)),
long.npy (a 26-digit dimension), product.npy (dimensions each allowed,
their product too large) and long-header.npy (a format-2 header claiming
4 GiB)."""
import os
import struct
import sys


def npy(shape_text, data=b""):
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % shape_text
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data


out = sys.argv[1]
files = {
    "huge.npy": npy("(1000000000, 1000)"),
    "overflow.npy": npy("(%d, 4)" % 2**62),
    "long.npy": npy("(99999999999999999999999999,)"),
    "product.npy": npy("(1099511627776, 1099511627776)"),
    "long-header.npy": b"\x93NUMPY\x02\x00" + struct.pack("<I", 2**32 - 1) + b"{}",
}
for name, data in files.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
