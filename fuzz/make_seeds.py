#!/usr/bin/env python3
"""Writes the starting corpus of every fuzz target into DIR/TARGET/ (default fuzz/corpus/):
small valid files of each format (through NumPy when it is installed) and some broken ones.

The input layout of each target is the one fuzz/common/harness.rs reads: an .npy input is the
file itself; a vecs, bin or text input is one byte that picks the extension (modulo the
family's size, in the order of harness::extensions) followed by the file; an hdf5_layout
input is what harness::decode_layout decodes.

These are only where fuzzing starts: the corpus kept in fuzz/seeds/ is what `cargo fuzz cmin`
made of it after fuzzing.
"""

import io
import os
import struct
import sys

try:
    import numpy as np
except ImportError:  # the hand-made files below are enough to start from
    np = None

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")

VECS = ["fvecs", "bvecs", "ivecs"]
BIN = ["fbin", "u8bin", "i8bin", "ibin"]
TEXT = ["csv", "tsv"]


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def npy_header(descr, shape, fortran=False, version=1, pad=True):
    """An .npy header written by hand, for shapes and dtypes NumPy would refuse to write."""
    d = "{'descr': %s, 'fortran_order': %s, 'shape': %s, }" % (descr, "True" if fortran else "False", shape)
    pre = 10 if version == 1 else 12
    if pad:
        d += " " * ((-(pre + len(d) + 1)) % 64)
    d += "\n"
    d = d.encode("latin1")
    size = struct.pack("<H", len(d)) if version == 1 else struct.pack("<I", len(d))
    return b"\x93NUMPY" + bytes([version, 0]) + size + d


def npy_seeds():
    t = "npy"
    if np is not None:
        def save(name, a, **kw):
            b = io.BytesIO()
            np.save(b, a, **kw)
            put(t, name, b.getvalue())
        save("f32", np.arange(12, dtype="<f4").reshape(3, 4) - 5.5)
        save("f64_be", np.arange(6, dtype=">f8").reshape(2, 3))
        save("f16", np.arange(8, dtype="<f2").reshape(4, 2))
        for dt in ["i1", "<i2", "<i4", "<i8", "u1", "<u2", ">u4", "<u8", "?"]:
            save("int_" + dt.strip("<>|").replace("?", "bool"), (np.arange(6) % 3).astype(dt).reshape(2, 3))
        save("fortran", np.asfortranarray(np.arange(12, dtype="<f4").reshape(3, 4)))
        save("fortran3", np.asfortranarray(np.arange(24, dtype="<f4").reshape(2, 3, 4)))
        save("c3", np.arange(24, dtype="<i2").reshape(2, 3, 4))
        save("one_d", np.arange(4, dtype="<f4"))
        save("scalar", np.float32(1.5))
        save("empty_rows", np.zeros((0, 3), dtype="<f4"))
        save("empty_cols", np.zeros((3, 0), dtype="<f4"))
        save("complex", np.zeros((2, 2), dtype="<c8"))
        save("structured", np.zeros((2, 2), dtype=[("a", "<f4"), ("b", "<i2")]))
        save("unicode", np.array([["ab", "c"]]))
        b = io.BytesIO()
        np.lib.format.write_array(b, np.ones((2, 2), dtype="<f4"), version=(2, 0))
        put(t, "v2", b.getvalue())
        b = io.BytesIO()
        np.lib.format.write_array(b, np.ones((2, 2), dtype="<f4"), version=(3, 0))
        put(t, "v3", b.getvalue())
    f4 = struct.pack("<4f", 1, 2, 3, 4)
    put(t, "hand_f4", npy_header("'<f4'", "(2, 2)") + f4)
    put(t, "hand_truncated", npy_header("'<f4'", "(3, 2)") + f4)
    put(t, "hand_overlong", npy_header("'<f4'", "(1, 2)") + f4)
    put(t, "hand_huge", npy_header("'<f4'", "(4294967296, 4294967296)") + f4)
    put(t, "hand_zero_huge", npy_header("'<f4'", "(0, 4611686018427387904)", fortran=True))
    put(t, "hand_hex", npy_header("'<f4'", "(0x2, 0b10)") + f4)
    put(t, "hand_sum", npy_header("'<f4'", "(1+1, 3-1)") + f4)
    put(t, "hand_dq", b"\x93NUMPY\x01\x00" + struct.pack("<H", 60) + b'{"descr": "<f4", "fortran_order": False, "shape": (2, 2)}  \n' + f4)
    put(t, "hand_v2", npy_header("'<f4'", "(2, 2)", version=2) + f4)
    put(t, "hand_no_pad", npy_header("'<f4'", "(2, 2)", pad=False) + f4)
    put(t, "hand_record", npy_header("[('x', '<f4', (2,))]", "(2,)") + f4)
    put(t, "hand_nested", npy_header("'<f4'", "((2,), 2)") + f4)
    put(t, "hand_badlen", b"\x93NUMPY\x02\x00\xff\xff\xff\xff{}")
    put(t, "magic_only", b"\x93NUMPY")
    put(t, "zip", b"PK\x03\x04" + bytes(26))


def vecs_seeds():
    t = "vecs"
    ext = {e: bytes([i]) for i, e in enumerate(VECS)}
    def rows(fmt, size_fmt, values, dim):
        out = b""
        for r in range(0, len(values), dim):
            out += struct.pack("<i", dim) + struct.pack("<%d%s" % (dim, size_fmt), *values[r:r + dim])
        return out
    put(t, "f_3x4", ext["fvecs"] + rows("f", "f", [float(i) - 3 for i in range(12)], 4))
    put(t, "b_2x5", ext["bvecs"] + rows("b", "B", list(range(0, 250, 25)), 5))
    put(t, "i_4x2", ext["ivecs"] + rows("i", "i", [-7, 9, 1 << 24, 3, 0, -1, 5, 6], 2))
    put(t, "f_1x1", ext["fvecs"] + rows("f", "f", [0.5], 1))
    put(t, "f_ragged", ext["fvecs"] + rows("f", "f", [1, 2], 2) + rows("f", "f", [3, 4, 5], 3))
    put(t, "f_ragged_whole", ext["fvecs"] + rows("f", "f", [1, 2, 3], 3) + rows("f", "f", [4], 1) + rows("f", "f", [5, 6, 7, 8, 9], 5))
    put(t, "f_truncated", ext["fvecs"] + rows("f", "f", [1, 2, 3, 4, 5, 6], 3)[:-3])
    put(t, "f_negative_dim", ext["fvecs"] + struct.pack("<i", -4))
    put(t, "b_zero_dim", ext["bvecs"] + struct.pack("<i", 0) * 3)
    put(t, "i_huge_dim", ext["ivecs"] + struct.pack("<i", 0x7fffffff) + bytes(8))
    put(t, "b_short", ext["bvecs"] + b"\x01\x00")
    put(t, "empty", ext["fvecs"])
    put(t, "text", ext["fvecs"] + b"hello, this is text and not vectors\n")


def bin_seeds():
    t = "bin"
    ext = {e: bytes([i]) for i, e in enumerate(BIN)}
    hdr = lambda r, c: struct.pack("<II", r, c)
    put(t, "f_3x2", ext["fbin"] + hdr(3, 2) + struct.pack("<6f", 1, -2, 3.5, 0, 1e30, -1e-30))
    put(t, "u8_2x3", ext["u8bin"] + hdr(2, 3) + bytes([0, 1, 2, 253, 254, 255]))
    put(t, "i8_3x1", ext["i8bin"] + hdr(3, 1) + bytes([0x80, 0x7f, 0]))
    put(t, "i_2x2", ext["ibin"] + hdr(2, 2) + struct.pack("<4i", -3, 7, 1 << 20, -1))
    put(t, "f_truncated", ext["fbin"] + hdr(10, 4) + bytes(100))
    put(t, "f_overlong", ext["fbin"] + hdr(1, 4) + bytes(20))
    put(t, "u8_zero_rows", ext["u8bin"] + hdr(0, 0xffffffff))
    put(t, "u8_zero_cols", ext["u8bin"] + hdr(0xffffffff, 0))
    put(t, "i_huge", ext["ibin"] + hdr(0xffffffff, 0xffffffff) + bytes(4))
    put(t, "short_header", ext["fbin"] + b"\x01\x02\x03")
    put(t, "text", ext["u8bin"] + b"this is not a vector file at all")


def text_seeds():
    t = "text"
    ext = {e: bytes([i]) for i, e in enumerate(TEXT)}
    put(t, "csv_plain", ext["csv"] + b"1,2,3\n4,5,6\n")
    put(t, "csv_header", ext["csv"] + b"x,y\n1.5,-2e3\n0.1,inf\n")
    put(t, "csv_savetxt", ext["csv"] + b"# made by numpy.savetxt\n1.000000000000000000e+00,2.0e+00\n\n3,4\n")
    put(t, "csv_crlf_spaces", ext["csv"] + b" 1 , 2 \r\n 3 ,4\r\n")
    put(t, "csv_quoted", ext["csv"] + b'"a","b"\n"1","2"\n')
    put(t, "csv_nan", ext["csv"] + b"nan,-Infinity\n1,2\n")
    put(t, "csv_ragged", ext["csv"] + b"h1,h2\n1,2\n3,4\n5,6,7\n")
    put(t, "csv_bad_number", ext["csv"] + b"1,2,3\n4,five,6\n")
    put(t, "csv_empty_field", ext["csv"] + b"a,b\n1,2\n3,\n")
    put(t, "csv_header_only", ext["csv"] + b"a,b,c\n")
    put(t, "csv_blank", ext["csv"] + b"\n\n\n")
    put(t, "csv_unterminated_quote", ext["csv"] + b'1,"2\n3,4\n')
    put(t, "csv_latin1", ext["csv"] + b"\xe9,\xff\n1,2\n")
    put(t, "tsv_plain", ext["tsv"] + b"1\t2\n3\t4\n")
    put(t, "tsv_commas", ext["tsv"] + b"1\t2\n3,4\t5\n")
    put(t, "tsv_one_column", ext["tsv"] + b"1\n2\n3\n")
    if np is not None:
        b = io.BytesIO()
        np.savetxt(b, np.arange(6, dtype=float).reshape(2, 3) / 7, delimiter=",", header="a,b,c")
        put(t, "csv_numpy", ext["csv"] + b.getvalue())
        b = io.BytesIO()
        np.savetxt(b, np.arange(6, dtype=float).reshape(3, 2), delimiter="\t")
        put(t, "tsv_numpy", ext["tsv"] + b.getvalue())


def layout(shape, max_shape=None, chunk=None, elem_size=4):
    """Encodes check_hdf5_layout's arguments as harness::decode_layout reads them."""
    flags = 0
    lens = b""
    if max_shape is not None:
        flags |= 1
        if len(max_shape) != len(shape):
            flags |= 4
            lens += bytes([len(max_shape)])
    if chunk is not None:
        flags |= 2
        if len(chunk) != len(shape):
            flags |= 8
            lens += bytes([len(chunk)])
    out = bytes([len(shape), flags]) + lens
    for v in [elem_size] + list(shape) + list(max_shape or []) + list(chunk or []):
        out += b"\x03" + struct.pack("<Q", v)
    return out


def hdf5_layout_seeds():
    t = "hdf5_layout"
    m = (1 << 64) - 1
    put(t, "plain", layout([1000, 128]))
    put(t, "f64_max_chunk", layout([1000, 128], [1000, 128], [100, 128], 8))
    put(t, "unlimited", layout([10, 3], [m, 3], [5, 3], 4))
    put(t, "rank1", layout([10]))
    put(t, "rank0", layout([]))
    put(t, "rank8", layout([2] * 8, [2] * 8, [1] * 8))
    put(t, "shape_over_max", layout([10, 3], [5, 3]))
    put(t, "max_rank_differs", layout([10, 3], [10, 3, 1]))
    put(t, "chunk_rank_differs", layout([10, 3], None, [10]))
    put(t, "zero_chunk", layout([10, 3], None, [0, 3]))
    put(t, "huge_chunk", layout([10, 3], None, [m, m]))
    put(t, "overflow", layout([m, m], None, None, 8))
    put(t, "zero_elem", layout([10, 3], None, None, 0))
    put(t, "huge_elem", layout([10, 3], None, None, m))
    put(t, "zero_rows", layout([0, 3]))
    put(t, "empty", b"")


def index_seeds():
    """Index files written by `knng index build` (the release binary, which must be built),
    from small .npy files of each kind of index, and some damaged copies."""
    import subprocess
    import tempfile

    t = "index"
    knng = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "release", "knng")
    if np is None or not os.path.exists(knng):
        print("index: skipped (needs NumPy and target/release/knng)")
        return
    rng = np.random.default_rng(7)
    sets = {
        "line_euclidean_covertree": (np.arange(12, dtype=np.float32).reshape(6, 2), "euclidean", "covertree"),
        "duplicates_cosine_covertree": (np.repeat(rng.normal(size=(4, 3)), 3, axis=0), "cosine", "covertree"),
        "correlation_covertree": (rng.normal(size=(12, 5)) + 100.0, "correlation", "covertree"),
        "sqeuclidean_covertree_one_row": (np.ones((1, 3)), "sqeuclidean", "covertree"),
        "inner_product_brute": (rng.normal(size=(5, 4)), "inner_product", "brute"),
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name, (x, metric, algorithm) in sets.items():
            data, out = os.path.join(tmp, name + ".npy"), os.path.join(tmp, name + ".knng")
            np.save(data, np.asarray(x, dtype=np.float32))
            subprocess.run([knng, "index", "build", data, "-o", out, "-m", metric, "--algorithm", algorithm,
                            "--backend", "cpu", "-q"], check=True)
            with open(out, "rb") as f:
                good = f.read()
            put(t, name, good)
        put(t, "truncated", good[: len(good) // 2])
        put(t, "header_only", good[:216])
        flipped = bytearray(good)
        flipped[-1] ^= 1
        put(t, "last_byte_flipped", bytes(flipped))
        put(t, "magic_only", b"KNNGINDX")
        put(t, "empty", b"")


if __name__ == "__main__":
    npy_seeds()
    vecs_seeds()
    bin_seeds()
    text_seeds()
    hdf5_layout_seeds()
    index_seeds()
    for target in sorted(os.listdir(OUT)):
        print(target, len(os.listdir(os.path.join(OUT, target))), "files")
