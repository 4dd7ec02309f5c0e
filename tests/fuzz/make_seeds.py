#!/usr/bin/env python3
"""Writes the hand-made seed inputs of tests/fuzz/corpus/ (run from the repository root).

Seeds are small valid inputs (and a few near misses) that reach deep into each parser; the
fuzzer mutates from there. The checkpoint seed comes from Kiln itself: checkpoint_seed.cc.
Crash inputs found later are added beside these as crash-<what>, never regenerated.
"""
import gzip
import json
import os
import struct

ROOT = "tests/fuzz/corpus"


def put(target, name, data):
    os.makedirs(f"{ROOT}/{target}", exist_ok=True)
    with open(f"{ROOT}/{target}/{name}", "wb") as f:
        f.write(data)


def safetensors(tensors, metadata=None):
    """tensors: [(name, dtype, shape, raw bytes)] laid out in order."""
    header, blob = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    return struct.pack("<Q", len(text)) + text + blob


put("safetensors", "f32_i64_bool_meta", safetensors(
    [("w", "F32", [2, 2], struct.pack("<4f", 1, -2, 3.5, 0)),
     ("n", "I64", [3], struct.pack("<3q", 1, -1, 1 << 40)),
     ("mask", "BOOL", [2], b"\x01\x00")],
    {"format": "pt", "note": "seed"}))
put("safetensors", "half_types_scalar", safetensors(
    [("h", "F16", [], b"\x00\x3c"), ("b", "BF16", [1, 2], b"\x80\x3f\x00\x40"),
     ("d", "F64", [1], struct.pack("<d", 2.5)), ("i", "I32", [0, 4], b"")]))
put("safetensors", "empty_header", safetensors([]))
put("safetensors", "unsupported_dtype", safetensors([("u", "U8", [2], b"\x01\x02")]))

def idx(type_code, dims, raw):
    return bytes([0, 0, type_code, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + raw


put("idx", "u8_2x3", idx(0x08, [2, 3], bytes(range(6))))
put("idx", "i8_4", idx(0x09, [4], b"\x00\x7f\x80\xff"))
put("idx", "i16_2", idx(0x0B, [2], struct.pack(">2h", -300, 300)))
put("idx", "i32_1x1x2", idx(0x0C, [1, 1, 2], struct.pack(">2i", -7, 1 << 30)))
put("idx", "f32_3", idx(0x0D, [3], struct.pack(">3f", 0.5, -1, 1e30)))
put("idx", "f64_1", idx(0x0E, [1], struct.pack(">d", 3.25)))
put("idx", "u8_gzip", gzip.compress(idx(0x08, [3, 2], bytes(range(6))), mtime=0))
put("idx", "u8_gzip_two_members",
    gzip.compress(idx(0x08, [4], b"")[:6], mtime=0) + gzip.compress(idx(0x08, [4], bytes(4))[6:], mtime=0))


def frame(body):
    return struct.pack("<I", len(body)) + body


def s(x):
    x = x.encode() if isinstance(x, str) else x
    return struct.pack("<I", len(x)) + x


def strs(xs):
    return struct.pack("<I", len(xs)) + b"".join(s(x) for x in xs)


HELLO = b"KILN" + struct.pack("<I", 1)
SET, GET, ADD, CHECK, WAIT, DELETE = range(1, 7)
op = lambda o: bytes([o])
u64 = lambda v: struct.pack("<Q", v)
i64 = lambda v: struct.pack("<q", v)
SPLIT = b"|next|"

put("store_protocol", "every_op", HELLO + b"".join(frame(b) for b in [
    op(SET) + s("a") + s(b"\x00\x01value"),
    op(GET) + s("a") + u64(1000),
    op(ADD) + s("n") + i64(5),
    op(ADD) + s("n") + i64(-7),
    op(ADD) + s("a") + i64(1),  # not a number: an ERROR reply
    op(CHECK) + strs(["a", "n", "zz"]),
    op(WAIT) + strs(["a", "n"]) + u64(0),
    op(DELETE) + s("a"),
    op(DELETE) + s("a"),
]))
put("store_protocol", "parked_then_set_by_other",
    HELLO + frame(op(GET) + s("k") + u64(60000)) + frame(op(WAIT) + strs(["k", "j"]) + u64(5)) + SPLIT +
    HELLO + frame(op(SET) + s("k") + s("v")) + frame(op(ADD) + s("j") + i64(1)))
put("store_protocol", "timeout_missing", HELLO + frame(op(WAIT) + strs(["x", "y"]) + u64(1)))
put("store_protocol", "bad_version", b"KILN" + struct.pack("<I", 9) + frame(op(SET) + s("a") + s("b")))
put("store_protocol", "malformed_then_good",
    HELLO + frame(op(CHECK) + struct.pack("<I", 1 << 30)) + SPLIT + HELLO + frame(op(DELETE) + s("q")))

args = lambda *a: b"\x00".join(x.encode() for x in a)
put("cli", "mnist_typical", args("--model", "cnn", "--epochs", "3", "--lr=0.01", "--optimizer", "adamw"))
put("cli", "pipeline", args("--pipeline-stages", "2", "--micro-batches", "4", "--batch-size", "64",
                            "--pipeline-schedule", "1f1b", "--amp", "bf16", "--amp-mode", "o2"))
put("cli", "launcher_typical", args("--nproc-per-node", "2", "--master_port=29500", "--", "prog", "--x", "1"))
put("cli", "launcher_nodes", args("--nnodes", "2", "--node-rank", "1", "--master-addr", "h", "--kill-grace", "0.5",
                                  "prog"))
put("cli", "help", args("--help"))
put("cli", "bad_values", args("--epochs", "three", "--device", "tpu", "--seed", "-1", "--threads", "1e400"))
