#!/usr/bin/env bash
# The CTest checks (label `scripts`, bench/CMakeLists.txt) of scripts/bundle_deps.sh and
# scripts/gpu_check.sh, on a machine without a GPU:
#
#   bench/check_scripts.sh bundle-make  WORK  bundle_deps.sh into WORK/made, the expected files, then
#                                             the bundle moved to WORK/moved/deps-bundle (it must be
#                                             relocatable)
#   bench/check_scripts.sh bundle-run   WORK  from the moved bundle in a clean environment: env.sh,
#                                             ncdump -h on the storm data, mpirun --version, a C program
#                                             built with the bundle's mpicc under mpirun -np 2, a C
#                                             program against netCDF, one against the readers' codecs
#                                             and ecCodes that writes a GRIB2 field from ecCodes' sample
#                                             and reads it back, and the bundle's grib_ls on it
#   bench/check_scripts.sh bundle-cmake WORK  find_package of every dependency from the bundle alone
#                                             (CMAKE_FIND_USE_CMAKE_SYSTEM_PATH=OFF), the codecs and
#                                             ecCodes as data/readers/CMakeLists.txt finds them (the
#                                             folder added, nothing of it built), programs using them
#                                             all
#   bench/check_scripts.sh no-device WORK GPU_CHECK [PYTHON]
#                                             scripts/gpu_check.sh and the gpu_check binary stop at
#                                             once with "no CUDA device" and exit code 3, building
#                                             nothing; with PYTHON (a torch) also when nvidia-smi
#                                             lists a GPU torch cannot use. Skipped (77) where a GPU is.
#   bench/check_scripts.sh plumbing WORK BUILD PYTHON STAGES [fresh]
#                                             scripts/gpu_check.sh --device cpu --only STAGES on the
#                                             storm unet (and the presets' toy sizes) with the binaries
#                                             of BUILD, into WORK (emptied first with `fresh`): exit 0,
#                                             each stage RAN or PASS in
#                                             report.json, and its raw results there. Skipped (77)
#                                             without a torch in PYTHON or the binaries in BUILD.
#
# "Clean": env -i, and, where this runs as root and may make a mount namespace (unshare -m), every
# file the bundle provides is also hidden at its original place on this machine (/dev/null bound over
# it), except the libraries the host's own tools (bash, cmake, the compiler) load, and ecCodes'
# data folder /usr/share/eccodes is hidden whole (an empty tmpfs over it), so the bundle cannot lean
# on the Debian packages it came from. Without the namespace the checks say so.
set -euo pipefail
usage="usage: check_scripts.sh bundle-make|bundle-run|bundle-cmake WORK | no-device WORK GPU_CHECK [PYTHON] | plumbing WORK BUILD PYTHON STAGES [fresh]"
mode=${1:?$usage}
work=$(realpath -m "${2:?$usage}")
src=$(cd "$(dirname "$0")/.." && pwd)
bundle=$work/moved/deps-bundle
MA=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)

fail() { echo "FAIL: $*" >&2; exit 1; }

# hide_host BUNDLE: in a private mount namespace, hides the host's copy of each file of BUNDLE.
hide_host() {
  local b=$1 rel host n=0 tool lib
  local -A keep=()
  keep_libs() {  # the sonames a program loads and the files they point to
    local name path
    while read -r name path; do
      keep[$name]=1
      [[ $path == /* ]] && keep[$(basename "$(readlink -f "$path")")]=1
    done < <(ldd "$1" 2>/dev/null | awk '/=>/ {print $1, $3}')
  }
  for tool in bash cmake ctest gcc g++ cc ld as make ninja find sed grep cat ls readlink dirname env python3 tar gzip; do
    tool=$(command -v "$tool" 2>/dev/null) || continue
    keep_libs "$tool"
  done
  for tool in cc1 cc1plus collect2 lto-wrapper; do
    tool=$(gcc -print-prog-name=$tool)
    [[ -x $tool ]] || continue
    keep_libs "$tool"
  done
  for tool in /usr/bin/python3* /usr/lib/python3*/lib-dynload/*.so; do  # Python and its modules (ssl, hashlib, ...)
    [[ -f $tool ]] || continue
    keep_libs "$tool"
  done
  while IFS= read -r rel; do
    case $rel in
      env.sh | MANIFEST | share/eccodes/*) continue ;;  # ecCodes' thousands of definitions: below
      bin/* | libexec/wxtrain-bundle/*) host=/usr/bin/${rel##*/} ;;
      etc/*) host=/$rel ;;
      *) host=/usr/$rel ;;
    esac
    [[ -n ${keep[${rel##*/}]:-} ]] && continue
    # A bind mount over a link covers what it points to: not a kept library (libz.so -> libz.so.1.2.13).
    [[ -L $host && -n ${keep[$(basename "$(readlink -f "$host")")]:-} ]] && continue
    if [[ -e $host ]]; then mount --bind /dev/null "$host" && n=$((n + 1)); fi
  done < <(cd "$b" && find . \( -type f -o -type l \) | sed 's|^\./||')
  echo "isolation: $n files of this machine that the bundle provides are hidden (${#keep[@]} libraries of the host's tools kept)"
  if [[ -d $b/share/eccodes && -d /usr/share/eccodes ]]; then
    mount -t tmpfs -o ro,size=4k wxtrain-hidden /usr/share/eccodes
    echo "isolation: /usr/share/eccodes is hidden (an empty folder)"
  fi
}

# isolated SCRIPT: bash -c SCRIPT with a clean environment and the host's copies hidden where possible.
isolated() {
  local clean=(env -i HOME="$work" PATH=/usr/bin:/bin LANG=C.UTF-8 TMPDIR="$work" B="$bundle" W="$work" S="$src"
               OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1)
  if [[ $(id -u) == 0 ]] && unshare -m true 2>/dev/null; then
    unshare -m -- "${clean[@]}" bash -c "set -euo pipefail; $(declare -f hide_host); hide_host \"\$B\"; $1"
  else
    echo "isolation: none (not root, or no mount namespace here): the host's packages stay visible"
    "${clean[@]}" bash -c "set -euo pipefail; $1"
  fi
}

# readers_deps_c DIR: DIR/readers_deps.c, a program against the readers' codecs and ecCodes.
readers_deps_c() {
  cat >"$1/readers_deps.c" <<'EOF'
/* The data readers' native dependencies: each Zarr codec round-trips a buffer (c-blosc with each of
   its compressors, zstd, lz4, zlib), and a GRIB2 field is written from ecCodes' sample
   (ECCODES_SAMPLES_PATH) to argv[1] and read back (ECCODES_DEFINITION_PATH). */
#include <blosc.h>
#include <eccodes.h>
#include <lz4.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

static double src[1000], back[1000];
static char packed[16384];

static int same(const char* what, int ok) {
  ok = ok && memcmp(src, back, sizeof src) == 0;
  if (!ok) printf("codec %s: no round trip\n", what);
  memset(back, 0, sizeof back);
  return ok ? 0 : 1;
}

int main(int argc, char** argv) {
  const char* compressors[] = {"blosclz", "lz4", "zstd", "zlib"};
  int bad = 0, err = 0;
  if (argc != 2) return 2;
  for (int i = 0; i < 1000; ++i) src[i] = 273.15 + i % 17;
  blosc_init();
  for (int k = 0; k < 4; ++k) {
    int n = blosc_set_compressor(compressors[k]) < 0 ? -1
            : blosc_compress(5, BLOSC_SHUFFLE, sizeof(double), sizeof src, src, packed, sizeof packed);
    bad += same(compressors[k], n > 0 && blosc_decompress(packed, back, sizeof back) == (int)sizeof src);
  }
  blosc_destroy();
  size_t z = ZSTD_compress(packed, sizeof packed, src, sizeof src, 3);
  bad += same("zstd", !ZSTD_isError(z) && ZSTD_decompress(back, sizeof back, packed, z) == sizeof src);
  int l = LZ4_compress_default((const char*)src, packed, sizeof src, sizeof packed);
  bad += same("lz4", l > 0 && LZ4_decompress_safe(packed, (char*)back, l, sizeof back) == (int)sizeof src);
  uLongf zl = sizeof packed, bl = sizeof back;
  bad += same("zlib", compress((Bytef*)packed, &zl, (const Bytef*)src, sizeof src) == Z_OK &&
                          uncompress((Bytef*)back, &bl, (const Bytef*)packed, zl) == Z_OK && bl == sizeof src);
  printf("codecs: blosc %s (blosclz, lz4, zstd, zlib), zstd %s, lz4 %s, zlib %s: %s\n", BLOSC_VERSION_STRING,
         ZSTD_versionString(), LZ4_versionString(), zlibVersion(), bad ? "FAILED" : "round trips");

  /* 2 m temperature on a 4 x 3 grid, written from the sample and read back. */
  codes_handle* h = codes_grib_handle_new_from_samples(NULL, "regular_ll_sfc_grib2");
  if (!h) { printf("grib: no sample regular_ll_sfc_grib2\n"); return 1; }
  codes_set_long(h, "Ni", 4);
  codes_set_long(h, "Nj", 3);
  codes_set_double(h, "latitudeOfFirstGridPointInDegrees", 2);
  codes_set_double(h, "latitudeOfLastGridPointInDegrees", 0);
  codes_set_double(h, "longitudeOfFirstGridPointInDegrees", 0);
  codes_set_double(h, "longitudeOfLastGridPointInDegrees", 3);
  codes_set_double(h, "iDirectionIncrementInDegrees", 1);
  codes_set_double(h, "jDirectionIncrementInDegrees", 1);
  size_t len = 0;
  err = codes_set_string(h, "shortName", "2t", &len);
  err = err ? err : codes_set_double_array(h, "values", src, 12);
  err = err ? err : codes_write_message(h, argv[1], "w");
  codes_handle_delete(h);
  if (err) { printf("grib: cannot write %s: %s\n", argv[1], codes_get_error_message(err)); return 1; }
  FILE* f = fopen(argv[1], "rb");
  h = f ? codes_handle_new_from_file(NULL, f, PRODUCT_GRIB, &err) : NULL;
  if (!h) { printf("grib: cannot read %s back\n", argv[1]); return 1; }
  char name[64] = "";
  long ni = 0, nj = 0, edition = 0;
  size_t name_len = sizeof name, n = 1000;
  codes_get_string(h, "shortName", name, &name_len);
  codes_get_long(h, "Ni", &ni);
  codes_get_long(h, "Nj", &nj);
  codes_get_long(h, "edition", &edition);
  err = codes_get_double_array(h, "values", back, &n);
  printf("grib: edition %ld, %s, %ld x %ld, %zu values %.2f .. %.2f\n", edition, name, ni, nj, n, back[0], back[n - 1]);
  codes_handle_delete(h);
  fclose(f);
  return bad || err || n != 12;
}
EOF
}

case $mode in
  bundle-make)
    rm -rf "$work"
    mkdir -p "$work"
    "$src/scripts/bundle_deps.sh" "$work/made"
    b=$work/made
    for f in env.sh MANIFEST bin/mpirun bin/mpiexec bin/mpicc bin/ncdump include/toml++/toml.h \
      include/CLI/CLI.hpp include/nlohmann/json.hpp include/fmt/core.h include/gtest/gtest.h include/netcdf.h \
      lib/$MA/openmpi/include/mpi.h lib/$MA/openmpi/lib/libmpi.so lib/$MA/libmpi.so.40 lib/$MA/libnetcdf.so.19 \
      lib/$MA/libhdf5_serial.so.103 lib/$MA/libfmt.so.9 lib/$MA/libtomlplusplus.so.3 lib/$MA/libgtest.a \
      lib/$MA/cmake/netCDF/netCDFConfig.cmake lib/$MA/cmake/fmt/fmt-config.cmake lib/$MA/cmake/GTest/GTestConfig.cmake \
      lib/$MA/cmake/tomlplusplus/tomlplusplusConfig.cmake share/cmake/CLI11/CLI11Config.cmake \
      share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake share/openmpi/help-orterun.txt \
      share/openmpi/mpicc-wrapper-data.txt etc/openmpi/openmpi-mca-params.conf \
      include/blosc.h include/zstd.h include/lz4.h include/zlib.h include/$MA/eccodes.h lib/$MA/libblosc.so \
      lib/$MA/libblosc.so.1 lib/$MA/libzstd.so.1 lib/$MA/liblz4.so.1 lib/$MA/libz.so.1 lib/$MA/libeccodes.so.0 \
      lib/$MA/libaec.so.0 bin/grib_ls bin/grib_set bin/codes_info share/eccodes/definitions/boot.def \
      share/eccodes/definitions/grib1/boot.def share/eccodes/definitions/grib2/boot.def \
      share/eccodes/definitions/grib2/template.3.0.def share/eccodes/samples/regular_ll_sfc_grib2.tmpl; do
      [[ -e $b/$f ]] || fail "the bundle has no $f"
    done
    # ecCodes' definitions of the other message kinds are left out; env.sh points ecCodes at the bundle.
    [[ ! -e $b/share/eccodes/definitions/bufr ]] || fail "ecCodes' BUFR definitions bundled"
    grep -q 'ECCODES_DEFINITION_PATH="$WXTRAIN_BUNDLE/share/eccodes/definitions"' "$b/env.sh" || fail "env.sh sets no ECCODES_DEFINITION_PATH"
    grep -q 'ECCODES_SAMPLES_PATH="$WXTRAIN_BUNDLE/share/eccodes/samples"' "$b/env.sh" || fail "env.sh sets no ECCODES_SAMPLES_PATH"
    for v in P T U V U500 V500; do [[ -s $b/share/ncarg/data/cdf/${v}storm.cdf ]] || fail "no ${v}storm.cdf"; done
    [[ -s $b/share/ncarg/data/cdf/landsea.nc ]] || fail "no landsea.nc (storm_unet's static field)"
    grep -q 'PMIX_MCA_mca_base_component_path="$WXTRAIN_BUNDLE/lib/'"$MA"'/pmix2/lib/pmix"' "$b/env.sh" ||
      fail "env.sh does not point PMIx at the bundled plugins"
    ls "$b/lib/$MA/pmix2/lib/pmix/"*.so >/dev/null || fail "no PMIx plugins"
    ls "$b/lib/$MA/openmpi/lib/openmpi"*/mca_btl_vader.so >/dev/null || fail "no OpenMPI plugins"
    # Nothing from the documentation, no other static library, no glibc, no link pointing outside.
    [[ -z $(find "$b" -path '*/doc/*' -o -path '*/man/*' -o -name '*.pc') ]] || fail "docs or pkg-config files bundled"
    [[ -z $(find "$b" -name '*.a' ! -name 'libgtest*.a') ]] || fail "static libraries other than GoogleTest's"
    [[ -z $(find "$b" -name 'libc.so*' -o -name 'libstdc++.so*' -o -name 'ld-linux*' -o -name 'libgomp.so*') ]] ||
      fail "glibc, libstdc++ or libgomp bundled"
    while read -r l; do
      [[ $(readlink -f "$l") == "$b"/* ]] || fail "$l points outside the bundle ($(readlink "$l"))"
    done < <(find "$b" -type l)
    grep -q "^# wxtrain dependency bundle, made" "$b/MANIFEST" || fail "MANIFEST incomplete"
    grep -q '^  INTERFACE_LINK_LIBRARIES "dl;m"$' "$b/lib/$MA/cmake/netCDF/netCDFTargets.cmake" || fail "netCDF targets not rewritten"
    mkdir -p "$work/moved"
    mv "$b" "$bundle"
    echo "bundle made and moved to $bundle ($(du -sm "$bundle" | cut -f1) MiB)"
    ;;

  bundle-run)
    [[ -f $bundle/env.sh ]] || fail "no bundle in $bundle (run the make check first)"
    readers_deps_c "$work"
    out=$(isolated '
      . "$B/env.sh"
      [ "$WXTRAIN_BUNDLE" = "$B" ] || { echo "env.sh: WXTRAIN_BUNDLE=$WXTRAIN_BUNDLE"; exit 1; }
      case ":$LD_LIBRARY_PATH:" in *":$B/lib/'"$MA"':"*) ;; *) echo "LD_LIBRARY_PATH lacks the bundle"; exit 1 ;; esac
      [ "$OPAL_PREFIX" = "$B" ] || { echo "OPAL_PREFIX=$OPAL_PREFIX"; exit 1; }
      [ "$(command -v mpirun)" = "$B/bin/mpirun" ] || { echo "mpirun is $(command -v mpirun)"; exit 1; }
      case ":$CMAKE_PREFIX_PATH:" in *":$B:"*) ;; *) echo "CMAKE_PREFIX_PATH lacks the bundle"; exit 1 ;; esac
      cd "$W"
      ncdump -h "$B/share/ncarg/data/cdf/Pstorm.cdf" >ncdump.txt  # (no pipe into head: SIGPIPE)
      mpirun --version >mpirun.txt
      head -3 ncdump.txt
      head -1 mpirun.txt
      printf "%s\n" "#include <mpi.h>" "#include <stdio.h>" \
        "int main(int c, char** v) { int r, n, s, t = 0; MPI_Init(&c, &v); MPI_Comm_rank(MPI_COMM_WORLD, &r);" \
        "  MPI_Comm_size(MPI_COMM_WORLD, &n); s = r + 1; MPI_Allreduce(&s, &t, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);" \
        "  if (r == 0) printf(\"mpi ranks %d sum %d\\n\", n, t); MPI_Finalize(); return 0; }" >hello_mpi.c
      mpicc hello_mpi.c -o hello_mpi
      mpirun -np 2 ./hello_mpi
      printf "%s\n" "#include <netcdf.h>" "#include <stdio.h>" \
        "int main(int c, char** v) { int nc, nd, nv; if (nc_open(v[1], NC_NOWRITE, &nc)) return 1;" \
        "  nc_inq(nc, &nd, &nv, 0, 0); printf(\"netcdf %.5s: %d dims %d vars\\n\", nc_inq_libvers(), nd, nv);" \
        "  return nc_close(nc); }" >hello_nc.c
      cc -I"$B/include" hello_nc.c -L"$B/lib/'"$MA"'" -lnetcdf -o hello_nc
      ./hello_nc "$B/share/ncarg/data/cdf/Tstorm.cdf"
      ldd ./hello_nc | grep -E "libnetcdf|libhdf5_serial\."
      [ "$ECCODES_DEFINITION_PATH" = "$B/share/eccodes/definitions" ] || { echo "ECCODES_DEFINITION_PATH=$ECCODES_DEFINITION_PATH"; exit 1; }
      [ "$ECCODES_SAMPLES_PATH" = "$B/share/eccodes/samples" ] || { echo "ECCODES_SAMPLES_PATH=$ECCODES_SAMPLES_PATH"; exit 1; }
      if [ -d /usr/share/eccodes ] && [ -z "$(ls -A /usr/share/eccodes)" ]; then echo "host ecCodes data: hidden"; fi
      codes_info >codes_info.txt
      grep "^ecCodes Version" codes_info.txt
      cc -I"$B/include" -I"$B/include/'"$MA"'" readers_deps.c -L"$B/lib/'"$MA"'" -leccodes -lblosc -lzstd -llz4 -lz -o readers_deps
      ./readers_deps "$W/t2m.grib2"
      grib_ls -p edition,shortName,Ni,Nj,numberOfValues "$W/t2m.grib2" | sed -n 3p
      ldd ./readers_deps | grep -E "lib(eccodes|blosc|zstd|lz4|z|aec|openjp2|png16|snappy)\.so" ' 2>&1) ||
      { echo "$out"; fail "the bundle does not run on its own"; }
    echo "$out"
    grep -q "^netcdf Pstorm" <<<"$out" || fail "ncdump -h printed no header"
    grep -q "Open MPI" <<<"$out" || fail "mpirun --version"
    grep -q "^mpi ranks 2 sum 3$" <<<"$out" || fail "mpirun -np 2 of a program built with the bundle's mpicc"
    grep -q "^netcdf 4\.9.*dims" <<<"$out" || fail "a C program against the bundle's netCDF"
    grep -q "^codecs: blosc.*: round trips$" <<<"$out" || fail "a C program against the bundle's codecs"
    grep -q "^grib: edition 2, 2t, 4 x 3, 12 values 273.15 .. 284.15$" <<<"$out" ||
      fail "a GRIB2 field written from the bundle's ecCodes sample and read back with its definitions"
    grep -qE "^2 +2t +4 +3 +12 *$" <<<"$out" || fail "the bundle's grib_ls on that field"
    [[ $(grep -cE "=> $bundle/lib/" <<<"$out") -ge 11 ]] || fail "not every library from the bundle"
    if ! grep -q "^isolation: none" <<<"$out"; then
      grep -q "^host ecCodes data: hidden$" <<<"$out" || fail "/usr/share/eccodes was not hidden"
    fi
    ! grep -E "=> (/usr)?/lib/" <<<"$out" || fail "libraries loaded from the host, not the bundle"
    ;;

  bundle-cmake)
    [[ -f $bundle/env.sh ]] || fail "no bundle in $bundle (run the make check first)"
    rm -rf "$work/cmake-src" "$work/cmake-build"
    mkdir -p "$work/cmake-src"
    cat >"$work/cmake-src/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.18)
project(bundle_check C CXX)
set(CMAKE_CXX_STANDARD 17)
# As the top-level CMakeLists.txt finds them.
find_package(MPI REQUIRED COMPONENTS C)
find_package(netCDF REQUIRED)
find_package(tomlplusplus REQUIRED)
find_package(CLI11 REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(fmt REQUIRED)
find_package(GTest REQUIRED)
find_package(CURL REQUIRED)
# The readers' codecs and ecCodes, by data/readers/CMakeLists.txt itself (nothing of it built).
add_subdirectory(${WXTRAIN_SOURCE}/data/readers readers EXCLUDE_FROM_ALL)
get_target_property(mpi_include MPI::MPI_C INTERFACE_INCLUDE_DIRECTORIES)
foreach(v netCDF_DIR tomlplusplus_DIR CLI11_DIR nlohmann_json_DIR fmt_DIR GTest_DIR CURL_INCLUDE_DIR CURL_LIBRARY MPI_C_COMPILER mpi_include MPI_mpi_LIBRARY)
  message(STATUS "found ${v} = ${${v}}")
endforeach()
foreach(lib blosc zstd lz4 zlib eccodes)
  get_target_property(location wxtrain::${lib} IMPORTED_LOCATION)
  get_target_property(include wxtrain::${lib} INTERFACE_INCLUDE_DIRECTORIES)
  message(STATUS "found wxtrain::${lib} = ${location}")
  message(STATUS "found wxtrain::${lib} include = ${include}")
endforeach()
add_executable(deps deps.cpp)
target_link_libraries(deps PRIVATE MPI::MPI_C netCDF::netcdf tomlplusplus::tomlplusplus CLI11::CLI11
                      nlohmann_json::nlohmann_json fmt::fmt GTest::gtest CURL::libcurl)
target_compile_definitions(deps PRIVATE OMPI_SKIP_MPICXX)  # as wxtrain_distributed: the C API only
# Linked as scripts/gpu_check.sh links wxtrain (an RPATH): runs with no LD_LIBRARY_PATH at all.
add_executable(rpath_only rpath_only.c)
target_link_libraries(rpath_only PRIVATE MPI::MPI_C netCDF::netcdf)
add_executable(readers_deps readers_deps.c)  # linked as wxtrain_readers links them
target_link_libraries(readers_deps PRIVATE wxtrain::blosc wxtrain::zstd wxtrain::lz4 wxtrain::zlib wxtrain::eccodes)
EOF
    readers_deps_c "$work/cmake-src"
    cat >"$work/cmake-src/rpath_only.c" <<'EOF'
#include <mpi.h>
#include <netcdf.h>
#include <stdio.h>
int main(int argc, char** argv) {
  int nc = 0, dims = 0, mpi = 1;
  MPI_Initialized(&mpi);  /* libmpi and what it loads, without a launcher */
  if (nc_open(argv[1], NC_NOWRITE, &nc) || nc_inq_ndims(nc, &dims)) return 1;
  nc_close(nc);
  printf("rpath_only: netcdf %.5s, %d dims, MPI initialized %d\n", nc_inq_libvers(), dims, mpi);
  return 0;
}
EOF
    cat >"$work/cmake-src/deps.cpp" <<'EOF'
#include <mpi.h>
#include <netcdf.h>
#include <CLI/CLI.hpp>
#include <fmt/core.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>
#include <curl/curl.h>

TEST(Bundle, EveryDependencyWorks) {
  ASSERT_NE(curl_version_info(CURLVERSION_NOW), nullptr);
  int nc = 0, dims = 0;
  ASSERT_EQ(nc_open(std::getenv("STORM"), NC_NOWRITE, &nc), NC_NOERR);
  ASSERT_EQ(nc_inq_ndims(nc, &dims), NC_NOERR);
  nc_close(nc);
  const auto t = toml::parse("[train]\nbatch_size = 8\n");
  const nlohmann::json j = {{"dims", dims}, {"batch", t["train"]["batch_size"].value_or(0)}};
  CLI::App app("deps");
  int ranks = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  fmt::print("deps: {} ranks {}\n", j.dump(), ranks);
  EXPECT_EQ(j["batch"], 8);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int status = RUN_ALL_TESTS();
  MPI_Finalize();
  return status;
}
EOF
    # Built as scripts/gpu_check.sh builds wxtrain: env.sh, but no LD_LIBRARY_PATH for cmake and the
    # compiler, the linker pointed at the bundle instead, and an RPATH into it.
    out=$(isolated '
      . "$B/env.sh"
      unset LD_LIBRARY_PATH
      lib="$B/lib/'"$MA"'"
      cmake -S "$W/cmake-src" -B "$W/cmake-build" -G "Unix Makefiles" -DCMAKE_BUILD_TYPE=Release -DWXTRAIN_SOURCE="$S" \
        -DCMAKE_FIND_USE_CMAKE_SYSTEM_PATH=OFF "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags -Wl,-rpath-link,$lib" \
        "-DCMAKE_BUILD_RPATH=$lib" | grep -E "^-- found "
      cmake --build "$W/cmake-build" -j2 >/dev/null
      STORM="$B/share/ncarg/data/cdf/Ustorm.cdf" mpirun -np 1 "$W/cmake-build/deps" | grep -E "^deps:|PASSED"
      "$W/cmake-build/rpath_only" "$B/share/ncarg/data/cdf/Vstorm.cdf"
      ldd "$W/cmake-build/rpath_only" | grep -E "libhdf5_serial\.|libopen-pal"
      "$W/cmake-build/readers_deps" "$W/t2m.grib2"  # ecCodes data from env.sh, libraries by the RPATH
      ldd "$W/cmake-build/readers_deps" | grep -E "lib(eccodes|blosc|zstd|lz4|z|aec|openjp2|png16|snappy)\.so" ' 2>&1) ||
      { echo "$out"; fail "a CMake project could not find, build or run against the bundle"; }
    echo "$out"
    # 21: six packages by their configs, libcurl (header and library), MPI (three) and five
    # libraries of ours by header and library.
    [[ $(grep -c "^-- found " <<<"$out") == 21 ]] || fail "not every package was reported"
    while read -r line; do
      [[ $line == *" = $bundle/"* ]] || fail "found outside the bundle: $line"
    done < <(grep "^-- found " <<<"$out")
    grep -q '^deps: {"batch":8,"dims":[0-9]*} ranks 1$' <<<"$out" || fail "the program against every dependency"
    grep -q '^rpath_only: netcdf 4\.9.*MPI initialized 0$' <<<"$out" || fail "a program linked with an RPATH, without LD_LIBRARY_PATH"
    grep -q "^codecs: blosc.*: round trips$" <<<"$out" || fail "a program against the codecs data/readers finds"
    grep -q "^grib: edition 2, 2t, 4 x 3, 12 values 273.15 .. 284.15$" <<<"$out" ||
      fail "a GRIB2 field written and read back through the ecCodes data/readers finds"
    [[ $(grep -cE "=> $bundle/lib/" <<<"$out") -ge 11 ]] || fail "not every library from the bundle"
    ! grep -E "=> (/usr)?/lib/" <<<"$out" || fail "libraries loaded from the host, not the bundle"
    ;;

  no-device)
    gpu_check=${3:?$usage}
    python=${4:-}
    if { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; } ||
      compgen -G '/dev/nvidia[0-9]*' >/dev/null; then
      echo "a GPU is present: this checks the machines without one"
      exit 77
    fi
    rm -rf "$work"
    mkdir -p "$work"
    # expect_no_device WHAT CMD...: exit code 3, "no CUDA device" on stderr, within 60 s.
    expect_no_device() {
      local what=$1 rc=0 t0=$SECONDS
      shift
      timeout 60 "$@" >"$work/out.txt" 2>"$work/err.txt" || rc=$?
      echo "$what: exit $rc in $((SECONDS - t0)) s: $(head -c 300 "$work/err.txt")"
      [[ $rc == 3 ]] || { cat "$work/out.txt" "$work/err.txt"; fail "$what exited $rc, not 3"; }
      grep -q "no CUDA device" "$work/err.txt" || fail "$what did not say \"no CUDA device\""
    }
    expect_no_device "gpu_check.sh" "$src/scripts/gpu_check.sh" --out "$work/report" --build "$work/build"
    [[ ! -e $work/build && ! -e $work/report ]] || fail "gpu_check.sh made its build or report folder before the device check"
    expect_no_device "gpu_check device" "$gpu_check" device
    expect_no_device "gpu_check accuracy" "$gpu_check" accuracy --config "$src/configs/storm_unet.toml"
    # A driver that lists a GPU which torch cannot use (a fake nvidia-smi): torch's verdict decides.
    if [[ -n $python ]] && "$python" -c 'import torch' 2>/dev/null; then
      mkdir -p "$work/fakebin"
      printf '#!/bin/sh\necho "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)"\n' >"$work/fakebin/nvidia-smi"
      chmod +x "$work/fakebin/nvidia-smi"
      expect_no_device "gpu_check.sh with a GPU torch cannot use" env PATH="$work/fakebin:$PATH" \
        "$src/scripts/gpu_check.sh" --python "$python" --out "$work/report" --build "$work/build"
      [[ ! -e $work/build ]] || fail "gpu_check.sh made its build folder before the device check"
    else
      echo "no Python with torch given: the torch side of the device check is not exercised"
    fi
    ;;

  plumbing)
    build=${3:?$usage} python=${4:?$usage} stages=${5:?$usage}
    "$python" -c 'import torch' 2>/dev/null || { echo "no torch in $python"; exit 77; }
    [[ -x $build/bench/gpu_check && -x $build/cli/wxtrain ]] || { echo "no gpu_check or wxtrain in $build"; exit 77; }
    if [[ ${6:-} == fresh ]]; then rm -rf "$work"; fi
    rc=0
    "$src/scripts/gpu_check.sh" --device cpu --configs storm_unet --build "$build" --python "$python" --out "$work" \
      --only "$stages" || rc=$?
    [[ $rc == 0 ]] || fail "gpu_check.sh --device cpu --only $stages exited $rc"
    "$python" - "$work" "$stages" <<'EOF' || fail "the report or the raw results are not as expected"
import glob, json, os, sys
out, stages = sys.argv[1], sys.argv[2].split(",")
report = json.load(open(os.path.join(out, "report.json")))
assert report["device_kind"] == "cpu", report["device_kind"]
for s in stages:
    assert report["stages"][s]["result"] in ("RAN", "PASS"), (s, report["stages"][s])
parts = os.path.join(out, "parts")
if "accuracy" in stages:
    cases = [json.loads(l) for l in open(os.path.join(parts, "accuracy.jsonl"))]
    assert len(cases) == 2 and all("error_total" in c and c["measured"]["peak_allocated"] > 0 for c in cases), cases
    assert all(c["predicted"]["overhead"]["total"] > 0 for c in cases)
if "fit" in stages:
    fits = [json.loads(l) for l in open(os.path.join(parts, "fit.jsonl"))]
    assert len(fits) == 1 and fits[0]["real_max"] > 0 and fits[0]["probes"], fits
    probes = fits[0]["probes"]  # the search ends on a pass at real_max and a failure just above it
    assert any(p["batch"] == fits[0]["real_max"] and not p["oom"] for p in probes), probes
    assert any(p["batch"] == fits[0]["real_max"] + 1 and p["oom"] for p in probes), probes
if "tune" in stages:
    tunes = glob.glob(os.path.join(parts, "tune", "*.json"))
    assert tunes and all(json.load(open(t))["batch"] > 0 for t in tunes), tunes
if "throughput" in stages:
    impls = {l.split()[1] for l in open(os.path.join(parts, "throughput.txt"))}
    assert impls == {"impl=wxtrain", "impl=pytorch"}, impls
if "presets" in stages:
    # The toy presets: graphcast-1.0 (checkpointed, rollout 2, edge blocks), fourcastnet-0.25 at
    # batch 1 and 2, pangu-0.25 checkpointed, graphcast-1.0 in inference: each measured against its
    # estimate, in the stage's order, and fourcastnet against both peers.
    cases = [json.loads(l) for l in open(os.path.join(parts, "presets.jsonl"))]
    got = [(c["preset"], c["mode"], c["batch"]) for c in cases]
    assert got == [("graphcast-1.0", "train", 1), ("fourcastnet-0.25", "train", 1),
                   ("fourcastnet-0.25", "train", 2), ("pangu-0.25", "train", 1), ("graphcast-1.0", "inference", 1)], got
    for c in cases:
        assert not c["measured"]["oom"] and c["measured"]["peak_allocated"] > 0, c
        assert c["predicted"]["total"] > 0 and c["measured"]["samples_per_s"] > 0, c
    assert cases[0]["rollout_steps"] == 2 and cases[0]["checkpointing"], cases[0]
    impls = {l.split()[1] for l in open(os.path.join(parts, "presets_throughput.txt"))}
    assert impls == {"impl=wxtrain", "impl=pytorch"}, impls  # torch.compile: the GPU stage only
print("report.json and parts/ as expected for", ", ".join(stages))
EOF
    ;;

  *) fail "unknown mode $mode; $usage" ;;
esac
echo "PASS: check_scripts.sh $mode"
