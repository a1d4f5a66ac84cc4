"""Regenerates the Zarr fuzzers' seed corpora (fuzz/corpus/zarr_*_fuzz/) from the test fixtures.

    /usr/bin/python3 tests/readers/zarr_fuzz_seeds.py

Writes the fixtures (zarr_fixtures.py) into a temporary directory and copies small chunks and
metadata files from it, each under a few KB, in the input format each fuzzer expects.
"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "..", "fuzz", "corpus")


def seed(target, name, data):
    folder = os.path.join(CORPUS, target)
    os.makedirs(folder, exist_ok=True)
    if len(data) <= 4096:
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)


def read(*parts):
    with open(os.path.join(*parts), "rb") as f:
        return f.read()


with tempfile.TemporaryDirectory() as out:
    subprocess.run([sys.executable, os.path.join(HERE, "zarr_fixtures.py"), out], check=True)
    for folder in [f for f in os.listdir(os.path.join(CORPUS)) if f.startswith("zarr_")]:
        shutil.rmtree(os.path.join(CORPUS, folder))
    default, codecs, layout = (os.path.join(out, s) for s in ("xarray_default.zarr", "xarray_codecs.zarr", "zarr_layout.zarr"))
    v3 = os.path.join(out, "v3_consolidated.zarr")
    seed("zarr_blosc_fuzz", "t2m_0.0.0", read(default, "t2m", "0.0.0"))
    seed("zarr_blosc_fuzz", "time_0", read(default, "time", "0"))
    seed("zarr_zstd_fuzz", "v_zstd_0.0.0", read(codecs, "v_zstd", "0.0.0"))
    seed("zarr_zstd_fuzz", "v3_time_c_0", read(v3, "time", "c", "0"))
    seed("zarr_lz4_fuzz", "v_lz4_0.0.0", read(codecs, "v_lz4", "0.0.0"))
    seed("zarr_lz4_fuzz", "big_endian_0", read(layout, "big_endian", "0"))
    seed("zarr_zlib_fuzz", "v_zlib_0.0.0", read(codecs, "v_zlib", "0.0.0"))
    seed("zarr_zlib_fuzz", "forder_0.0", read(layout, "forder", "0.0"))
    seed("zarr_gzip_fuzz", "v_gzip_0.0.0", read(codecs, "v_gzip", "0.0.0"))
    seed("zarr_gzip_fuzz", "v3_transposed_c_0_0_0", read(v3, "transposed_gzip", "c", "0", "0", "0"))
    seed("zarr_crc32c_fuzz", "zstd_crc_c_0_0", read(v3, "zstd_crc", "c", "0", "0"))
    seed("zarr_crc32c_fuzz", "check_value", b"123456789" + (0xE3069283).to_bytes(4, "little"))
    # zarr_sharding_fuzz: a layout byte (0: end + crc32c + blosc, 1: start + gzip), then the shard.
    seed("zarr_sharding_fuzz", "end_blosc_c_0_0", b"\x00" + read(v3, "sharded", "c", "0", "0"))
    seed("zarr_sharding_fuzz", "end_blosc_c_1_0", b"\x00" + read(v3, "sharded", "c", "1", "0"))
    # zarr_bytes_transpose_fuzz: rank-1, 4 sizes, element size and endian, permutation, then elements.
    seed("zarr_bytes_transpose_fuzz", "rank3_f4_big", bytes([2, 1, 2, 3, 0, 2 | 4, 3]) + bytes(range(2 * 3 * 4 * 4)))
    seed("zarr_bytes_transpose_fuzz", "rank2_f8", bytes([1, 3, 4, 0, 0, 3, 1]) + bytes(range(4 * 5 * 8)))
    # zarr_metadata_fuzz: an even byte then .zarray NUL .zattrs (v2), or an odd byte then zarr.json (v3).
    for name in ("t2m", "time"):
        seed("zarr_metadata_fuzz", "v2_" + name, b"\x00" + read(default, name, ".zarray") + b"\x00" + read(default, name, ".zattrs"))
    seed("zarr_metadata_fuzz", "v2_forder", b"\x00" + read(layout, "forder", ".zarray") + b"\x00" + read(layout, "forder", ".zattrs"))
    seed("zarr_metadata_fuzz", "v2_nested", b"\x00" + read(layout, "nested", ".zarray"))
    for name in ("plain", "be_blosc", "zstd_crc", "transposed_gzip", "sharded", "sharded_start", "v2keys", "hexfill"):
        seed("zarr_metadata_fuzz", "v3_" + name, b"\x01" + read(v3, name, "zarr.json"))
