#!/usr/bin/env bash
# Gathers wxtrain's dependencies other than LibTorch from this machine's Debian packages into one
# relocatable folder, for GPU machines that are offline or not Debian. Nothing is installed: the
# folder can be moved or copied anywhere and used as it is.
#
#   scripts/bundle_deps.sh [--archive] [DIR]   (default deps-bundle/; run scripts/install_deps.sh first)
#       --archive   also write DIR.tar.gz (about 30% of the folder's size) for machines you copy it to
#   . DIR/env.sh     PATH, LD_LIBRARY_PATH, CMAKE_PREFIX_PATH, MPI_HOME, OPAL_PREFIX, OPAL_SYSCONFDIR, PMIX_PREFIX,
#                    PMIX_MCA_mca_base_component_path, ECCODES_DEFINITION_PATH, ECCODES_SAMPLES_PATH
#   cmake -S . -B build -DCMAKE_PREFIX_PATH="<torch.utils.cmake_prefix_path>;$WXTRAIN_BUNDLE"
#   scripts/gpu_check.sh --bundle DIR[.tar.gz]  (does that itself)
#
# The layout mirrors /usr (include/, lib/<multiarch>/, share/), so OpenMPI relocates with OPAL_PREFIX
# and PMIx with PMIX_PREFIX, and the packages' own CMake config files, which find their prefix
# relative to themselves, work from CMAKE_PREFIX_PATH unchanged; only netCDF's, which names its
# dependencies by absolute path, is rewritten. In the bundle:
#   - headers and CMake configs of toml++, CLI11, nlohmann-json, fmt, GoogleTest (its static
#     libgtest, the only form Debian ships) and netCDF-C; OpenMPI's mpi.h and what it includes;
#     the headers of the readers' codecs (c-blosc, zstd, lz4, zlib) and of ecCodes, which
#     data/readers/CMakeLists.txt finds by file (find_path/find_library), with no CMake config;
#   - the shared libraries of toml++, fmt, netCDF-C, OpenMPI, c-blosc, zstd, lz4, zlib and ecCodes
#     and everything they load (ldd): HDF5, curl with its TLS/Kerberos/LDAP stack, libxml2 with ICU
#     (whose data alone is 30 MiB), hwloc, libevent, PMIx, snappy, libaec, OpenJPEG, libpng, ...;
#     not glibc and not the compiler's runtime (libstdc++, libgcc_s, libgomp, which ecCodes loads),
#     which the machine that builds wxtrain has (MANIFEST says which versions the bundle needs);
#   - ecCodes' definitions and samples (share/eccodes/), which it reads at run time: env.sh and the
#     bin/ wrappers set ECCODES_DEFINITION_PATH and ECCODES_SAMPLES_PATH to them, since the library
#     looks in /usr/share/eccodes otherwise. The definitions of the other message kinds ecCodes
#     reads (BUFR, METAR, TAF, GTS: 61 of their 95 MiB) are left out; GRIB 1, 2 and 3 need none of
#     them (definitions/boot.def includes each kind's own boot.def only for a message of that kind);
#     grib_ls, grib_dump, grib_get, grib_set and codes_info come along to look at GRIB files;
#   - OpenMPI's launcher (mpirun, mpiexec, orterun; prterun where the version has it), ompi_info,
#     the wrapper compilers FindMPI runs (mpicc, mpicxx), the MCA plugins except the InfiniBand,
#     UCX, OFI, PSM and OpenSHMEM ones (one node needs none of them, and their libraries would
#     double the bundle), help and wrapper-data files; PMIx's plugins and help files;
#   - ncdump, and the storm NetCDF files of libncarg-data that configs/storm_*.toml read
#     (share/ncarg/data/cdf/; scripts/gpu_check.sh points copies of the configs at them).
# Programs in bin/ are small bash wrappers that set the library path, the OpenMPI/PMIx prefixes and
# ecCodes' paths and exec the real binary from libexec/wxtrain-bundle/, so DIR/bin/mpirun works
# without env.sh. OpenMPI's RUNPATHs (/usr/lib/<multiarch>/openmpi/lib) are rewritten to
# $ORIGIN-relative ones, so a program linked with an RPATH into the bundle finds every library with
# no LD_LIBRARY_PATH (the way scripts/gpu_check.sh builds wxtrain); reading GRIB still takes env.sh's
# ECCODES_* paths. No docs, man pages, pkg-config files or static libraries other than GoogleTest's.
set -euo pipefail
default_dir=$(cd "$(dirname "$0")/.." && pwd)/deps-bundle

die() { echo "bundle_deps.sh: $*" >&2; exit 1; }
usage="usage: scripts/bundle_deps.sh [--archive] [DIR]   (default deps-bundle/)"
archive=0
dir=
for a in "$@"; do
  case $a in
    --archive) archive=1 ;;
    -h | --help) echo "$usage"; exit 0 ;;
    -*) die "unknown option $a; $usage" ;;
    *) [[ -z $dir ]] || die "$usage"; dir=$a ;;
  esac
done
B=$(realpath -m "${dir:-$default_dir}")  # DIR is the caller's; the default is in the checkout
MARKER="wxtrain dependency bundle"

packages=(libtomlplusplus-dev libtomlplusplus3 libcli11-dev nlohmann-json3-dev libfmt-dev libgtest-dev
          libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common libnetcdf-dev libnetcdf19 netcdf-bin libncarg-data
          libblosc-dev libblosc1 libzstd-dev libzstd1 liblz4-dev liblz4-1 zlib1g-dev zlib1g
          libeccodes-dev libeccodes0 libeccodes-data libeccodes-tools libcurl4-gnutls-dev libcurl3-gnutls)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] || die "missing Debian packages: ${missing[*]} (run scripts/install_deps.sh)"
MA=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
L=/usr/lib/$MA

if [[ -e $B ]]; then
  if [[ -f $B/MANIFEST ]] && head -1 "$B/MANIFEST" | grep -q "^# $MARKER"; then
    rm -rf "$B"
  elif [[ -n $(ls -A "$B") ]]; then
    die "$B exists and is not a bundle made by this script: not overwriting it"
  fi
fi
mkdir -p "$B"
echo "# $MARKER: incomplete (bundle_deps.sh did not finish)" >"$B/MANIFEST"
echo "bundling into $B"

declare -A canonical_dirs=() done_files=() made_dirs=()
elf_files=()  # everything whose shared libraries the bundle needs (one ldd at the end)

# bundle_rel PATH: sets REPLY to where PATH goes in the bundle (/usr/x and /lib/x -> x,
# /etc/x -> etc/x). The directory is canonicalised (merged /usr: /lib -> /usr/lib), the file name
# kept (soname links).
bundle_rel() {
  local d=${1%/*}
  [[ -n ${canonical_dirs[$d]:-} ]] || canonical_dirs[$d]=$(readlink -f "$d")
  REPLY="${canonical_dirs[$d]}/${1##*/}"
  case $REPLY in
    /usr/*) REPLY=${REPLY#/usr/} ;;
    /etc/*) REPLY=${REPLY#/} ;;
    *) die "not under /usr or /etc: $1" ;;
  esac
}

# put SRC: copies a file, or a symlink and what it points to, to its place in the bundle.
put() {
  local src=$1 dst target
  [[ -z ${done_files[$src]:-} ]] || return 0
  done_files[$src]=1
  bundle_rel "$src"
  dst="$B/$REPLY"
  [[ -e $dst || -L $dst ]] && return 0
  if [[ -z ${made_dirs[${dst%/*}]:-} ]]; then
    mkdir -p "${dst%/*}"
    made_dirs[${dst%/*}]=1
  fi
  if [[ -L $src ]]; then
    target=$(readlink "$src")
    if [[ $target == /* ]]; then
      put "$target"
      bundle_rel "$target"
      ln -s "$(realpath -m --relative-to="${dst%/*}" "$B/$REPLY")" "$dst"
    else
      ln -s "$target" "$dst"
      put "${src%/*}/$target"
    fi
  elif [[ -f $src ]]; then
    cp -p "$src" "$dst"
  else
    die "not a file: $src"
  fi
}

# put_lib LIB: a shared library with its soname link; what it loads comes with the closure.
put_lib() {
  put "$1"
  put "${1%/*}/$(objdump -p "$(readlink -f "$1")" | awk '/SONAME/ {print $2}')"
  elf_files+=("$1")
}

# put_package PKG REGEX: the package's files (and symlinks) whose path matches REGEX.
put_package() {
  local f
  while read -r f; do
    [[ -f $f || -L $f ]] || continue
    put "$f"
  done < <(dpkg -L "$1" | grep -E "$2" | grep -vE '/(doc|doc-base|man|pkgconfig)/')
}

# glibc and the compiler runtime: every machine that builds wxtrain has its own (and a newer one
# is backward compatible); bundling them would break the programs of the machine they run on.
# libgomp (GCC's OpenMP runtime, which ecCodes loads) too: the torch wheel brings one under the same
# soname, and the process must have a single OpenMP runtime.
is_system_lib() {
  case $1 in
    linux-vdso.so.* | ld-linux*.so.* | libc.so.6 | libm.so.6 | libdl.so.2 | libpthread.so.0 | librt.so.1 | \
      libresolv.so.2 | libutil.so.1 | libanl.so.1 | libmvec.so.1 | libBrokenLocale.so.1 | libthread_db.so.1 | \
      libnss_*.so.2 | libstdc++.so.6 | libgcc_s.so.1 | libgomp.so.1) return 0 ;;
  esac
  return 1
}

# The shared libraries everything in elf_files loads (ldd lists the whole transitive set), but
# the system ones.
put_closure() {
  local line name path file
  while read -r line; do
    case $line in
      *:) file=${line%:} ;;
      *" => "*)
        name=${line%% *}
        path=${line#* => }
        path=${path%% (*}
        is_system_lib "$name" && continue
        [[ $path == /* ]] || die "$file needs $name, which is not on this machine"
        put "$path"
        ;;
    esac
  done < <(ldd "${elf_files[@]}" 2>&1)
}

# wrapper NAME REAL: bin/NAME runs libexec/wxtrain-bundle/REAL (argv[0] = NAME: OpenMPI's wrapper
# compiler picks its data file by that name) with the bundle's libraries and prefixes, and its
# ecCodes data (also for what mpirun starts: the ranks inherit the launcher's environment).
wrapper() {
  cat >"$B/bin/$1" <<EOF
#!/usr/bin/env bash
# $MARKER: runs the bundled $2 with the bundle's libraries, OpenMPI, PMIx and ecCodes data.
b=\$(cd "\$(dirname "\$(readlink -f "\${BASH_SOURCE[0]}")")/.." && pwd)
export LD_LIBRARY_PATH="\$b/lib/$MA\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export OPAL_PREFIX="\$b" OPAL_SYSCONFDIR="\$b/etc/openmpi" PMIX_PREFIX="\$b/lib/$MA/pmix2"
export PMIX_MCA_mca_base_component_path="\$b/lib/$MA/pmix2/lib/pmix"
export ECCODES_DEFINITION_PATH="\$b/share/eccodes/definitions" ECCODES_SAMPLES_PATH="\$b/share/eccodes/samples"
exec -a "$1" "\$b/libexec/wxtrain-bundle/$2" "\$@"
EOF
  chmod +x "$B/bin/$1"
}

# real_program NAME: libexec/wxtrain-bundle/NAME, the program behind /usr/bin/NAME (alternatives resolved).
real_program() {
  cp -p "$(readlink -f "/usr/bin/$1")" "$B/libexec/wxtrain-bundle/$1"
  elf_files+=("$B/libexec/wxtrain-bundle/$1")
}
mkdir -p "$B/bin" "$B/libexec/wxtrain-bundle"

# --- headers, CMake configs and libraries of toml++, CLI11, nlohmann-json, fmt, GoogleTest, netCDF
put_package libtomlplusplus-dev '^/usr/(include/|lib/.*/cmake/|lib/.*\.so$)'
put_package libcli11-dev '^/usr/(include/|share/cmake/)'
put_package nlohmann-json3-dev '^/usr/(include/|share/cmake/)'
put_package libfmt-dev '^/usr/(include/|lib/.*/cmake/|lib/.*\.so$)'
put_package libgtest-dev '^/usr/(include/|lib/.*/cmake/|lib/.*\.a$)'
put_package libnetcdf-dev '^/usr/(include/|lib/.*/cmake/|lib/.*\.so$)'
put_package libcurl4-gnutls-dev '^/usr/(include/|lib/.*\.so$)'  # tracking/mlflow's HTTP (FindCURL)
for f in libtomlplusplus.so libfmt.so libnetcdf.so libcurl-gnutls.so; do put_lib "$L/$f"; done

# netCDF's targets name HDF5, curl, libxml2, ... (and glibc's static libpthread.a and libdl.a) by
# absolute path, for static linking; the shared libnetcdf loads them itself.
targets="$B/lib/$MA/cmake/netCDF/netCDFTargets.cmake"
[[ -f $targets ]] || die "no $targets: libnetcdf-dev's layout changed"
sed -i -E 's|^(  INTERFACE_LINK_LIBRARIES ).*$|\1"dl;m"|' "$targets"
grep -q '^  INTERFACE_LINK_LIBRARIES "dl;m"$' "$targets" || die "could not rewrite netCDF's INTERFACE_LINK_LIBRARIES"

# --- OpenMPI: libmpi, mpi.h and what it includes, the launcher, the wrapper compilers. The C API
# only, as wxtrain uses it (OMPI_SKIP_MPICXX: the deprecated C++ bindings would need libmpi_cxx).
put_lib "$L/libmpi.so.40"
put "$L/openmpi/lib/libmpi.so"  # -lmpi in the wrapper compiler's libdir, for FindMPI
inc=$L/openmpi/include
while read -r h; do put "$h"; done < <(printf '#include <mpi.h>\n#include <mpi-ext.h>\n' |
  gcc -x c -M -I"$inc/openmpi" -I"$inc" - | tr ' \\' '\n\n' | grep "^$inc/")
launchers=()
for p in orterun prterun; do
  if [[ -x /usr/bin/$p ]]; then launchers+=("$p"); fi
done
[[ ${#launchers[@]} -gt 0 ]] || die "openmpi-bin has neither orterun nor prterun"
for p in "${launchers[@]}" orted prted ompi_info opal_wrapper; do
  if [[ -x /usr/bin/$p ]]; then real_program "$p"; fi
done
for p in "${launchers[@]}" orted prted ompi_info; do
  if [[ -x $B/libexec/wxtrain-bundle/$p ]]; then wrapper "$p" "$p"; fi
done
wrapper mpirun "${launchers[0]}"
wrapper mpiexec "${launchers[0]}"
for w in mpicc mpicxx mpic++; do
  put "/usr/share/openmpi/$w-wrapper-data.txt"
  wrapper "$w" opal_wrapper
done
for f in /usr/share/openmpi/help-*.txt; do put "$f"; done
# MCA plugins (pkglibdir, found through OPAL_PREFIX), less the high-speed interconnects and OpenSHMEM.
plugins=$(ls -d "$L"/openmpi/lib/openmpi* | head -1)
skipped=0
for f in "$plugins"/mca_*.so; do
  case ${f##*/} in
    *ucx* | *ofi* | *openib* | *psm* | *_uct* | *verbs* | *usnic* | mca_spml_* | mca_sshmem_* | mca_atomic_* | \
      mca_scoll_* | mca_memheap_*) skipped=$((skipped + 1)); continue ;;
  esac
  put "$f"
  elf_files+=("$f")
done
# Debian's openmpi-mca-params.conf also excludes the plugins left out, which would name components
# the bundle does not have; OPAL_SYSCONFDIR points OpenMPI here rather than at the host's /etc/openmpi.
mkdir -p "$B/etc/openmpi"
cat >"$B/etc/openmpi/openmpi-mca-params.conf" <<EOF
# $MARKER (OPAL_SYSCONFDIR): Debian's defaults, less the exclusions of plugins not bundled.
btl_base_warn_component_unused = 0
EOF
# PMIx (OpenMPI's external runtime): its plugins and help files, relocated by PMIX_PREFIX.
pmix=$(readlink -f "$L/libpmix.so.2" 2>/dev/null || true)
pmix=${pmix%/lib/*}  # .../pmix2
if [[ -d $pmix/lib/pmix ]]; then
  for f in "$pmix"/lib/pmix/*.so; do put "$f"; elf_files+=("$f"); done
  for f in "$pmix"/share/pmix/help-*.txt; do put "$f"; done
  # Debian's file names the plugin folder by absolute path; the default is the same folder, relocated.
  bundle_rel "$pmix/share/pmix-mca-params.conf"
  echo "# $MARKER: PMIx's plugins are found under PMIX_PREFIX" >"$B/$REPLY"
fi

# --- netCDF's ncdump, and the storm data the configs use
real_program ncdump
wrapper ncdump ncdump
for f in /usr/share/ncarg/data/cdf/*storm*.cdf; do put "$f"; done
put /usr/share/ncarg/data/cdf/landsea.nc  # storm_unet's static land-sea mask ([[data.static]])

# --- the Zarr codecs and ecCodes (data/readers): headers, libraries, ecCodes' data and GRIB tools.
# ecCodes' own CMake config and eccodes.pc point at /usr/lib/include and are not bundled (nor its
# Fortran module, libeccodes_f90 and static archive).
for p in libblosc-dev libzstd-dev liblz4-dev zlib1g-dev; do put_package "$p" '^/usr/(include/|lib/[^/]*/[^/]*\.so$)'; done
put_package libeccodes-dev '^/usr/(include/|lib/[^/]*/libeccodes\.so$)'
for f in libblosc.so libzstd.so liblz4.so libz.so libeccodes.so; do put_lib "$L/$f"; done
eccodes_dropped=(bufr metar taf gts)  # message kinds other than GRIB
for d in /usr/share/eccodes/definitions/grib2/boot.def /usr/share/eccodes/samples/GRIB2.tmpl; do
  [[ -f $d ]] || die "no $d: libeccodes-data's layout changed"
done
mkdir -p "$B/share/eccodes"
tar -C /usr/share/eccodes "${eccodes_dropped[@]/#/--exclude=definitions/}" -cf - definitions samples |
  tar -C "$B/share/eccodes" -xf -
[[ -z $(find "$B/share/eccodes" -type l -lname '/*') ]] || die "ecCodes' data has absolute links"
for p in grib_ls grib_dump grib_get grib_set codes_info; do
  real_program "$p"
  wrapper "$p" "$p"
done

put_closure

# OpenMPI's libraries, plugins and programs carry RUNPATH=/usr/lib/<multiarch>/openmpi/lib, which
# outranks an executable's RPATH for what they load (and would find a host's own OpenMPI there):
# rewritten in place, as chrpath does, to $ORIGIN-relative paths into the bundle's lib/<multiarch>/,
# so a program linked with an RPATH into the bundle needs no LD_LIBRARY_PATH.
python3 - "$B" "$B/lib/$MA" <<'EOF'
import os, struct, sys

bundle, libdir = sys.argv[1], sys.argv[2]
patched = 0


def patch(path):
    with open(path, "rb") as f:
        data = bytearray(f.read())
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:  # ELF64, little-endian only
        return 0
    phoff, = struct.unpack_from("<Q", data, 0x20)
    shoff, = struct.unpack_from("<Q", data, 0x28)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 0x36)
    loads, dynamic = [], None
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ = struct.unpack_from("<IIQQQQQQ", data, phoff + i * phentsize)
        if p_type == 1:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == 2:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return 0

    def file_offset(vaddr):
        for va, off, size in loads:
            if va <= vaddr < va + size:
                return vaddr - va + off
        raise ValueError(f"{path}: address {vaddr:#x} outside the loaded segments")

    strtab, paths, names = None, [], []
    for j in range(dynamic[1] // 16):
        tag, val = struct.unpack_from("<qQ", data, dynamic[0] + 16 * j)
        if tag == 0:
            break
        if tag == 5:
            strtab = val
        elif tag in (15, 29):  # DT_RPATH, DT_RUNPATH
            paths.append(val)
        elif tag in (1, 14):  # DT_NEEDED, DT_SONAME
            names.append(val)
    # Symbol names in .dynstr, which the linker may have merged with a tail of the path.
    symbol_names = []
    for i in range(shnum):
        sh_name, sh_type, _, _, sh_offset, sh_size, _, _, _, sh_entsize = struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
        if sh_type == 11 and sh_entsize:  # SHT_DYNSYM
            symbol_names += [struct.unpack_from("<I", data, sh_offset + k * sh_entsize)[0] for k in range(sh_size // sh_entsize)]
    base = file_offset(strtab)
    count = 0
    for p in paths:
        start = base + p
        end = data.index(b"\0", start)
        old = bytes(data[start:end]).decode()
        if not old.startswith("/usr/"):
            continue
        rel = os.path.relpath(libdir, os.path.dirname(path))
        new = "$ORIGIN" if rel == "." else "$ORIGIN/" + rel
        if len(new) > len(old):
            sys.exit(f"bundle_deps.sh: {path}: RUNPATH {old} is shorter than {new}")
        if any(start < base + n <= end for n in names + symbol_names):
            sys.exit(f"bundle_deps.sh: {path}: a dynamic string shares the tail of its RUNPATH {old}")
        data[start:start + len(old)] = new.encode() + b"\0" * (len(old) - len(new))
        count += 1
    if count:
        with open(path, "r+b") as f:
            f.write(data)
    return count


for top in ("lib", "libexec"):  # not share/ (ecCodes' *.so*.def files)
    for root, _, files in os.walk(os.path.join(bundle, top)):
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path) and (".so" in name or "/libexec/" in path):
                patched += patch(path)
print(f"  RUNPATH into the bundle: {patched} OpenMPI files")
EOF
left=$(find "$B/lib" "$B/libexec" -type f \( -name '*.so*' -o -path '*/libexec/*' \) -exec objdump -p {} + 2>/dev/null |
  grep -E '^\s+(RUNPATH|RPATH)\s+/' || true)
[[ -z $left ]] || die "RUNPATHs outside the bundle are left: $left"

# --- env.sh
cat >"$B/env.sh" <<EOF
# $MARKER: source it from bash or zsh (. $(basename "$B")/env.sh), wherever the folder is.
if [ -n "\${BASH_SOURCE:-}" ]; then WXTRAIN_BUNDLE=\$(cd "\$(dirname "\${BASH_SOURCE[0]}")" && pwd)
elif [ -n "\${ZSH_VERSION:-}" ]; then WXTRAIN_BUNDLE=\$(cd "\$(dirname "\${(%):-%x}")" && pwd)
elif [ -z "\${WXTRAIN_BUNDLE:-}" ]; then echo "env.sh: set WXTRAIN_BUNDLE to the bundle's folder first (this shell cannot tell)" >&2; return 1
fi
export WXTRAIN_BUNDLE
export PATH="\$WXTRAIN_BUNDLE/bin\${PATH:+:\$PATH}"
export LD_LIBRARY_PATH="\$WXTRAIN_BUNDLE/lib/$MA\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export CMAKE_PREFIX_PATH="\$WXTRAIN_BUNDLE\${CMAKE_PREFIX_PATH:+:\$CMAKE_PREFIX_PATH}"
export MPI_HOME="\$WXTRAIN_BUNDLE"                    # FindMPI finds bin/mpicc here
export OPAL_PREFIX="\$WXTRAIN_BUNDLE"                 # OpenMPI's plugins, help and wrapper data
export OPAL_SYSCONFDIR="\$WXTRAIN_BUNDLE/etc/openmpi" # not the host's /etc/openmpi
export PMIX_PREFIX="\$WXTRAIN_BUNDLE/lib/$MA/pmix2"   # PMIx's plugins and help
# PMIX_PREFIX relocates PMIx's help files but not, on a host with its own PMIx, the plugin search:
# the bundled libpmix then opened the host's /usr/lib/x86_64-linux-gnu/pmix2 plugins (built for
# another PMIx: "undefined symbol pmix_output_info", seen on the GPU machine). Named explicitly.
export PMIX_MCA_mca_base_component_path="\$WXTRAIN_BUNDLE/lib/$MA/pmix2/lib/pmix"
# ecCodes looks in /usr/share/eccodes otherwise; its definitions must match the library's version.
export ECCODES_DEFINITION_PATH="\$WXTRAIN_BUNDLE/share/eccodes/definitions"
export ECCODES_SAMPLES_PATH="\$WXTRAIN_BUNDLE/share/eccodes/samples"
EOF

# --- MANIFEST: what is in it, from which packages, and what its binaries need of the host
needs=$(find "$B/lib" "$B/libexec" -type f \( -name '*.so*' -o -path '*/libexec/*' \) -print0 |
  xargs -0 objdump -T 2>/dev/null | grep -oE '\b(GLIBC|GLIBCXX)_[0-9.]+\b' | sort -uV)
glibc=$(grep '^GLIBC_' <<<"$needs" | tail -1)
glibcxx=$(grep '^GLIBCXX_' <<<"$needs" | tail -1)
{
  echo "# $MARKER, made $(date -u +%Y-%m-%dT%H:%MZ) on $(. /etc/os-release && echo "$PRETTY_NAME") ($MA)"
  echo "# host needs: glibc >= ${glibc#GLIBC_}, libstdc++ with ${glibcxx:-nothing}, libgcc_s, libgomp (GCC's OpenMP runtime)"
  echo "# packages: $(for p in "${packages[@]}"; do dpkg-query -W -f='${Package}=${Version} ' "$p"; done)"
  echo "# OpenMPI plugins left out (InfiniBand, UCX, OFI, PSM, OpenSHMEM): $skipped"
  echo "# ecCodes definitions left out (not GRIB): ${eccodes_dropped[*]}"
  echo "# share/eccodes/definitions/: $(find "$B/share/eccodes/definitions" -type f | wc -l) files, listed by folder"
  (cd "$B" && find . \( -type f -o -type l \) ! -name 'MANIFEST*' ! -path './share/eccodes/definitions/*/*' | sed 's|^\./||'
   find share/eccodes/definitions -mindepth 1 -maxdepth 1 -type d -printf '%p/\n') | sort
} >"$B/MANIFEST.tmp"
mv "$B/MANIFEST.tmp" "$B/MANIFEST"

mib() { du -smc "$@" | tail -1 | cut -f1; }
echo "bundle: $B"
echo "  $(find "$B" -type f | wc -l) files, $(mib "$B") MiB: shared libraries $(mib "$B/lib/$MA"/*.so*)," \
  "OpenMPI/PMIx plugins and help $(mib "$B/lib/$MA/openmpi" "$B/lib/$MA/pmix2" "$B/share/openmpi")," \
  "headers $(mib "$B/include" "$B/lib/$MA/openmpi/include"), storm data $(mib "$B/share/ncarg")," \
  "ecCodes definitions and samples $(mib "$B/share/eccodes")"
echo "  $(sed -n 2p "$B/MANIFEST" | sed 's/^# //')"
if [[ $archive == 1 ]]; then
  tar -C "$(dirname "$B")" -czf "$B.tar.gz" "$(basename "$B")"
  echo "archive: $B.tar.gz, $(du -m "$B.tar.gz" | cut -f1) MiB"
fi
echo "use: . $B/env.sh"
