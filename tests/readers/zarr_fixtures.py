"""Zarr stores for tests/readers/test_zarr_reader.cpp, written into the directory given as argv[1].

v2 stores are written by the tools the field uses (Debian's python3-xarray and python3-zarr 2.13).
Debian's zarr 2.13 cannot write the final v3 format, so the v3 stores are written by the small
writer below, which follows the v3 core spec (zarr.json, regular grid, default/v2 chunk keys) and
its codec specs (bytes, transpose, blosc, zstd, gzip, crc32c, sharding_indexed), using numcodecs
for the compressed bytes and a CRC-32C written out here.

For each store S and array A, expected/S/A.f4 and expected/S/A.f8 hold the array as numpy reads it
(the raw stored values, no scale/offset, fill where chunks are missing) as little-endian float32
and float64 in C order: what the reader must return element for element.
"""
import json
import os
import shutil
import struct
import sys

import numcodecs
import numpy as np
import pandas as pd
import xarray as xr
import zarr

OUT = sys.argv[1]


def expect(store, name, values):
    folder = os.path.join(OUT, "expected", store)
    os.makedirs(folder, exist_ok=True)
    values = np.asarray(values)
    values.astype("<f4").tofile(os.path.join(folder, name + ".f4"))
    values.astype("<f8").tofile(os.path.join(folder, name + ".f8"))


def expect_zarr_store(store):
    """Expected values of every top-level array, as zarr-python reads them."""
    group = zarr.open_group(os.path.join(OUT, store), mode="r")
    for name, array in group.arrays():
        if array.dtype.kind in "fiub":
            expect(store, name, array[...])


rng = np.random.default_rng(11)

# --- v2 written by xarray ------------------------------------------------------------------------
times = pd.date_range("2020-01-01", periods=4, freq="6H")
t2m = (250 + 30 * rng.random((4, 5, 6))).astype("f4")
t2m[1, 2, 3] = np.nan
dataset = xr.Dataset(
    {
        "t2m": (("time", "lat", "lon"), t2m, {"units": "K", "long_name": "2 metre temperature"}),
        "z": (("time", "level", "lat", "lon"), rng.standard_normal((4, 2, 5, 6)) * 1000),
    },
    coords={"time": times, "level": [500, 850], "lat": np.linspace(90, -90, 5), "lon": np.arange(6) * 60.0},
)
# Default Blosc compressor, consolidated metadata, per-step chunks for t2m.
dataset.to_zarr(os.path.join(OUT, "xarray_default.zarr"), encoding={"t2m": {"chunks": (1, 5, 6)}, "z": {"chunks": (2, 1, 3, 4)}})
expect_zarr_store("xarray_default.zarr")

packed_source = (270 + 10 * rng.random((4, 5, 6))).astype("f4")
packed_source[0, 0, 0] = np.nan
codecs = xr.Dataset(
    {
        "v_zstd": (("time", "lat", "lon"), t2m),
        "v_lz4": (("time", "lat", "lon"), t2m),
        "v_zlib": (("time", "lat", "lon"), t2m),
        "v_gzip": (("time", "lat", "lon"), t2m),
        "packed": (("time", "lat", "lon"), packed_source),
    },
    coords={"time": times, "station": ("lat", np.array(["a", "bb", "ccc", "d", "e"]))},  # a string coordinate
)
codecs.to_zarr(
    os.path.join(OUT, "xarray_codecs.zarr"),
    encoding={
        "v_zstd": {"compressor": numcodecs.Zstd(level=3), "chunks": (1, 5, 6)},
        "v_lz4": {"compressor": numcodecs.LZ4(), "chunks": (2, 3, 6)},
        "v_zlib": {"compressor": numcodecs.Zlib(level=6), "chunks": (1, 2, 2)},
        "v_gzip": {"compressor": numcodecs.GZip(level=6), "chunks": (4, 5, 6)},
        "packed": {"dtype": "int16", "scale_factor": 0.01, "add_offset": 270.0, "_FillValue": -32767, "chunks": (1, 5, 6)},
    },
)
expect_zarr_store("xarray_codecs.zarr")

# --- v2 written by zarr-python directly: layouts xarray does not produce by default ---------------
layout_path = os.path.join(OUT, "zarr_layout.zarr")
layout = zarr.open_group(layout_path, mode="w")  # not consolidated: the reader lists the directories
forder = layout.create_dataset("forder", shape=(7, 9), chunks=(3, 4), dtype="<f4", order="F",
                               compressor=numcodecs.Zlib(level=1))
forder[...] = rng.standard_normal((7, 9)).astype("f4")
forder.attrs["_ARRAY_DIMENSIONS"] = ["y", "x"]
forder.attrs.update({"title": "F order", "levels": [1, 2, 3], "missing_value": float("nan"), "nested": {"a": 1}})
nested = zarr.open_array(os.path.join(layout_path, "nested"), mode="w", shape=(5, 6), chunks=(2, 3), dtype="<i2",
                         dimension_separator="/")
nested[...] = rng.integers(-30000, 30000, (5, 6))
holes = layout.create_dataset("holes", shape=(6, 4), chunks=(2, 2), dtype="<f4", fill_value=-999.0)
holes[...] = rng.random((6, 4)).astype("f4")
os.remove(os.path.join(layout_path, "holes", "1.0"))
nanfill = layout.create_dataset("nanfill", shape=(5, 5), chunks=(2, 5), dtype="<f8", fill_value=float("nan"))
nanfill[...] = rng.random((5, 5))
os.remove(os.path.join(layout_path, "nanfill", "2.0"))
big_endian = layout.create_dataset("big_endian", shape=(10,), chunks=(4,), dtype=">f8", compressor=numcodecs.LZ4())
big_endian[...] = rng.standard_normal(10)
dtypes = {"u1": "|u1", "i1": "|i1", "u2": "<u2", "be_u4": ">u4", "i4": "<i4", "i8": "<i8", "be_u8": ">u8", "f2": "<f2",
          "be_f2": ">f2", "be_i2": ">i2", "b1": "|b1"}
for name, dtype in dtypes.items():
    array = layout.create_dataset("dt_" + name, shape=(3, 5), chunks=(2, 2), dtype=dtype, compressor=None)
    if dtype.endswith("b1"):
        array[...] = rng.random((3, 5)) > 0.5
    elif "f" in dtype:
        array[...] = rng.standard_normal((3, 5)) * 100
    else:
        info = np.iinfo(np.dtype(dtype))
        array[...] = rng.integers(info.min, info.max, (3, 5), dtype=np.dtype(dtype).newbyteorder("="), endpoint=True)
scalar = layout.create_dataset("scalar", shape=(), dtype="<f8")
scalar[...] = 42.5
expect_zarr_store("zarr_layout.zarr")
# fill_value null: zarr-python leaves a missing chunk's memory as it was; the spec reads it as 0.
nullfill = layout.create_dataset("nullfill", shape=(4, 4), chunks=(2, 2), dtype="<i4", fill_value=None)
values = rng.integers(1, 100, (4, 4)).astype("i4")
nullfill[...] = values
os.remove(os.path.join(layout_path, "nullfill", "0.1"))
values[0:2, 2:4] = 0
expect("zarr_layout.zarr", "nullfill", values)

single = zarr.open_array(os.path.join(OUT, "single.zarr"), mode="w", shape=(3, 4), chunks=(2, 2), dtype="<f4")
single[...] = np.arange(12, dtype="f4").reshape(3, 4)
expect("single.zarr", "single", single[...])


# --- v3, written by hand to the spec ------------------------------------------------------------
def crc32c(data):
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    crc = 0xFFFFFFFF
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value


def codec_name(codec):
    return codec["name"]


def encode(array, codecs):
    """Encodes one chunk (a numpy array of the chunk's shape) through a v3 codec list."""
    data = array
    for codec in codecs:
        config = codec.get("configuration", {})
        name = codec["name"]
        if name == "transpose":
            data = np.ascontiguousarray(data.transpose(config["order"]))
        elif name == "bytes":
            order = ">" if config.get("endian", "little") == "big" else "<"
            data = data.astype(data.dtype.newbyteorder(order)).tobytes()
        elif name == "sharding_indexed":
            data = encode_shard(data, config)
        elif name == "blosc":
            shuffle = {"noshuffle": numcodecs.Blosc.NOSHUFFLE, "shuffle": numcodecs.Blosc.SHUFFLE,
                       "bitshuffle": numcodecs.Blosc.BITSHUFFLE}[config["shuffle"]]
            typed = np.frombuffer(data, dtype="u%d" % config["typesize"]) if len(data) % config["typesize"] == 0 else data
            data = numcodecs.Blosc(cname=config["cname"], clevel=config["clevel"], shuffle=shuffle,
                                   blocksize=config["blocksize"]).encode(typed)
        elif name == "zstd":
            data = numcodecs.Zstd(level=config["level"]).encode(data)
        elif name == "gzip":
            data = numcodecs.GZip(level=config["level"]).encode(data)
        elif name == "crc32c":
            data = bytes(data) + struct.pack("<I", crc32c(bytes(data)))
        else:
            raise ValueError(name)
    return bytes(data)


SHARD_FILL = {}  # id(config) -> fill value, to leave all-fill inner chunks out of a shard


def encode_shard(shard, config):
    inner = config["chunk_shape"]
    grid = [s // c for s, c in zip(shard.shape, inner)]
    fill = SHARD_FILL.get(id(config))
    index = np.full(grid + [2], 2**64 - 1, dtype="<u8")
    chunks = []
    for position in np.ndindex(*grid):
        block = shard[tuple(slice(p * c, (p + 1) * c) for p, c in zip(position, inner))]
        if fill is not None and np.array_equal(block, np.full_like(block, fill), equal_nan=True):
            continue  # stays 2^64-1, 2^64-1: an empty inner chunk
        chunks.append((position, encode(block, config["codecs"])))
    index_size = len(encode(index, config["index_codecs"]))
    offset = index_size if config.get("index_location", "end") == "start" else 0
    body = b""
    for position, data in chunks:
        index[position] = (offset + len(body), len(data))
        body += data
    encoded_index = encode(index, config["index_codecs"])
    return encoded_index + body if config.get("index_location", "end") == "start" else body + encoded_index


V3_TYPES = {"float32": "f4", "float64": "f8", "float16": "f2", "int16": "i2", "int32": "i4", "int64": "i8", "uint8": "u1"}


def fill_json(value):
    if isinstance(value, str):
        return value
    if isinstance(value, float) and np.isnan(value):
        return "NaN"
    return value


def fill_number(value, dtype):
    if isinstance(value, str) and value.startswith("0x"):
        return np.frombuffer(bytes.fromhex(value[2:])[::-1], dtype=dtype)[0]
    return {"NaN": np.nan, "Infinity": np.inf, "-Infinity": -np.inf}.get(value, value) if isinstance(value, str) else value


def write_v3_array(folder, data, chunks, codecs, data_type, fill_value=0, dimension_names=None, attributes=None,
                   key_encoding=None, skip_chunks=(), store=None, name=None):
    """Writes data as a v3 array in folder; returns (metadata, the values a reader must see)."""
    os.makedirs(folder, exist_ok=True)
    key_encoding = key_encoding or {"name": "default", "configuration": {"separator": "/"}}
    metadata = {
        "zarr_format": 3, "node_type": "array", "shape": list(data.shape), "data_type": data_type,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
        "chunk_key_encoding": key_encoding, "fill_value": fill_json(fill_value), "codecs": codecs,
        "attributes": attributes or {},
    }
    if dimension_names is not None:
        metadata["dimension_names"] = dimension_names
    with open(os.path.join(folder, "zarr.json"), "w") as f:
        json.dump(metadata, f, indent=2)
    dtype = np.dtype(V3_TYPES[data_type])
    fill = fill_number(fill_value, dtype)
    for codec in codecs:
        if codec["name"] == "sharding_indexed":
            SHARD_FILL[id(codec["configuration"])] = fill
    expected = data.astype(dtype).copy()
    grid = [-(-s // c) for s, c in zip(data.shape, chunks)]
    separator = key_encoding.get("configuration", {}).get("separator", "/" if key_encoding["name"] == "default" else ".")
    for position in np.ndindex(*grid):
        region = tuple(slice(p * c, min((p + 1) * c, s)) for p, c, s in zip(position, chunks, data.shape))
        if position in skip_chunks:
            expected[region] = fill
            continue
        block = np.full(chunks, fill, dtype=dtype)
        block[tuple(slice(0, r.stop - r.start) for r in region)] = data[region]
        parts = [str(p) for p in position]
        key = separator.join((["c"] if key_encoding["name"] == "default" else []) + parts) or "0"
        path = os.path.join(folder, *key.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(encode(block, codecs))
    if store is not None:
        expect(store, name, expected)
    return metadata


def bytes_codec(endian="little"):
    return {"name": "bytes", "configuration": {"endian": endian}}


def blosc(cname="lz4", shuffle="shuffle", typesize=4):
    return {"name": "blosc", "configuration": {"cname": cname, "clevel": 5, "shuffle": shuffle, "typesize": typesize,
                                               "blocksize": 0}}


def write_v3_group(store, arrays, consolidated):
    root = os.path.join(OUT, store)
    os.makedirs(root, exist_ok=True)
    members = {}
    for name, kwargs in arrays.items():
        members[name] = write_v3_array(os.path.join(root, name), store=store, name=name, **kwargs)
    group = {"zarr_format": 3, "node_type": "group", "attributes": {"title": "v3 fixtures"}}
    if consolidated:
        group["consolidated_metadata"] = {"kind": "inline", "must_understand": False, "metadata": members}
    with open(os.path.join(root, "zarr.json"), "w") as f:
        json.dump(group, f, indent=2)


sharded_values = rng.standard_normal((8, 12)).astype("f4")
sharded_values[0:2, 3:6] = np.nan  # one inner chunk all fill: left out of its shard (2^64-1 entry)
v3_arrays = {
    "plain": dict(data=rng.standard_normal((6, 8)), chunks=(4, 4), codecs=[bytes_codec()], data_type="float32",
                  dimension_names=["y", "x"], attributes={"units": "K", "scale_factor": 0.5, "flags": [1, 2, 4]}),
    "be_blosc": dict(data=rng.integers(-1000, 1000, (5, 7)), chunks=(2, 3), data_type="int16", fill_value=-1,
                     codecs=[bytes_codec("big"), blosc("lz4", "shuffle", 2)], attributes={"_FillValue": -5}),
    "zstd_crc": dict(data=rng.standard_normal((4, 5)), chunks=(3, 5), data_type="float64",
                     codecs=[bytes_codec(), {"name": "zstd", "configuration": {"level": 3, "checksum": True}},
                             {"name": "crc32c"}]),
    "transposed_gzip": dict(data=rng.standard_normal((3, 4, 5)), chunks=(2, 3, 5), data_type="float32",
                            codecs=[{"name": "transpose", "configuration": {"order": [2, 0, 1]}}, bytes_codec(),
                                    {"name": "gzip", "configuration": {"level": 5}}],
                            dimension_names=["a", None, "c"]),
    "sharded": dict(data=sharded_values, chunks=(4, 6), data_type="float32", fill_value="NaN", skip_chunks=[(1, 1)],
                    codecs=[{"name": "sharding_indexed", "configuration": {
                        "chunk_shape": [2, 3], "codecs": [bytes_codec(), blosc("zstd", "bitshuffle", 4)],
                        "index_codecs": [bytes_codec(), {"name": "crc32c"}], "index_location": "end"}}]),
    "sharded_start": dict(data=rng.integers(-10**6, 10**6, (6, 6)), chunks=(6, 6), data_type="int32",
                          codecs=[{"name": "sharding_indexed", "configuration": {
                              "chunk_shape": [3, 3], "codecs": [bytes_codec(), {"name": "gzip", "configuration": {"level": 1}}],
                              "index_codecs": [bytes_codec(), {"name": "crc32c"}], "index_location": "start"}}]),
    "v2keys": dict(data=rng.integers(0, 255, (4, 4)), chunks=(2, 2), data_type="uint8", codecs=[bytes_codec()],
                   key_encoding={"name": "v2", "configuration": {"separator": "."}}),
    "time": dict(data=np.array([0, 6, 12, 1_000_000_007, 2**53 - 1]), chunks=(2,), data_type="int64",
                 codecs=[bytes_codec(), {"name": "zstd", "configuration": {"level": 1, "checksum": False}}],
                 dimension_names=["time"], attributes={"units": "hours since 1900-01-01", "calendar": "gregorian"}),
    "hexfill": dict(data=rng.standard_normal((4, 4)), chunks=(2, 2), data_type="float32", fill_value="0x7fc00000",
                    codecs=[bytes_codec()], skip_chunks=[(0, 1)]),
    "f16": dict(data=rng.standard_normal((3, 3)), chunks=(2, 2), data_type="float16", codecs=[bytes_codec("big")]),
    "nested_keys": dict(data=rng.standard_normal((3, 4)), chunks=(1, 2), data_type="float64", codecs=[bytes_codec()],
                        key_encoding={"name": "default", "configuration": {"separator": "."}}, skip_chunks=[(2, 1)],
                        fill_value="-Infinity"),
}
write_v3_group("v3_consolidated.zarr", v3_arrays, consolidated=True)
write_v3_group("v3_listed.zarr", {k: v3_arrays[k] for k in ("plain", "sharded", "time")}, consolidated=False)
write_v3_array(os.path.join(OUT, "v3_single.zarr"), data=np.arange(10.0), chunks=(4,), data_type="float64",
               codecs=[bytes_codec()], store="v3_single.zarr", name="v3_single")

# zarrita.js writes an array created without codecs with "codecs": [] (stores users get): the chunks
# are the raw little-endian elements, which the reader takes as the bytes codec, with a note.
write_v3_array(os.path.join(OUT, "v3_no_codecs.zarr"), data=np.arange(12.0).reshape(3, 4) - 5.5, chunks=(2, 4),
               data_type="float32", codecs=[], store="v3_no_codecs.zarr", name="v3_no_codecs")

# --- stores that must fail, each with what the message has to name -------------------------------
errors = os.path.join(OUT, "errors")
write_v3_array(os.path.join(errors, "unknown_codec.zarr", "temperature"), data=np.zeros((2, 2)), chunks=(2, 2),
               data_type="float32", codecs=[bytes_codec()])
with open(os.path.join(errors, "unknown_codec.zarr", "zarr.json"), "w") as f:
    json.dump({"zarr_format": 3, "node_type": "group"}, f)
meta_path = os.path.join(errors, "unknown_codec.zarr", "temperature", "zarr.json")
meta = json.load(open(meta_path))
meta["codecs"].append({"name": "fancy_codec", "configuration": {}})
json.dump(meta, open(meta_path, "w"))

filter_store = zarr.open_group(os.path.join(errors, "unknown_filter.zarr"), mode="w")
filter_store.create_dataset("humidity", shape=(4,), dtype="<f4", filters=[numcodecs.Delta(dtype="<f4")])

corrupt = zarr.open_group(os.path.join(errors, "corrupt_chunk.zarr"), mode="w")
corrupt.create_dataset("wind", shape=(4, 4), chunks=(2, 2), dtype="<f4")[...] = 1.5
with open(os.path.join(errors, "corrupt_chunk.zarr", "wind", "1.0"), "wb") as f:
    f.write(b"\x02\x01\x21\x04" + bytes(range(60)))  # a blosc-looking header over garbage

truncated = zarr.open_group(os.path.join(errors, "short_chunk.zarr"), mode="w")
truncated.create_dataset("pressure", shape=(4, 4), chunks=(2, 2), dtype="<f4", compressor=None)[...] = 2.0
with open(os.path.join(errors, "short_chunk.zarr", "pressure", "0.1"), "wb") as f:
    f.write(b"\x00" * 10)

write_v3_array(os.path.join(errors, "bad_checksum.zarr"), data=np.arange(6.0), chunks=(3,), data_type="float64",
               codecs=[bytes_codec(), {"name": "crc32c"}])
with open(os.path.join(errors, "bad_checksum.zarr", "c", "1"), "r+b") as f:
    f.seek(3)
    f.write(b"\xff")

rank_store = zarr.open_group(os.path.join(errors, "rank_mismatch.zarr"), mode="w")
rank_store.create_dataset("geopotential", shape=(4, 4), chunks=(2, 2), dtype="<f4")
zarray_path = os.path.join(errors, "rank_mismatch.zarr", "geopotential", ".zarray")
zarray = json.load(open(zarray_path))
zarray["chunks"] = [2, 2, 2]
json.dump(zarray, open(zarray_path, "w"))

write_v3_array(os.path.join(errors, "shard_not_dividing.zarr"), data=np.zeros((4, 6)), chunks=(4, 6), data_type="float32",
               codecs=[{"name": "sharding_indexed", "configuration": {"chunk_shape": [3, 4], "codecs": [bytes_codec()],
                                                                       "index_codecs": [bytes_codec()]}}])
