// libFuzzer target for the NetCDF reader (data/readers/netcdf_reader.cpp over netCDF-C): the bytes
// as a file, opened by wxtrain::data::open_reader as the dataset opens it, every variable listed
// with its dimensions and attributes, each variable's first slab read and each 1-D variable read
// whole as a coordinate. A wxtrain::Error is the expected answer to a bad file; a crash, leak or
// sanitizer report in our code is a bug. netCDF-C and HDF5 are not instrumented (Debian's builds),
// so ASan sees their heap only through malloc/free. Seeds: fuzz/corpus/netcdf_reader_fuzz/, written
// by fuzz/make_seeds_netcdf.sh (NetCDF-3 classic, 64-bit offset, CDF-5; NetCDF-4).
#include <sanitizer/lsan_interface.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/readers/reader.h"

namespace {

// One file per process, rewritten for every input: the reader opens files by path. ".nc" so that
// open_reader does not take it for GRIB by its name.
const std::string& input_path() {
  static const std::string path = "/tmp/wxtrain_netcdf_fuzz_" + std::to_string(::getpid()) + ".nc";
  return path;
}

// A header can declare dimensions of 2^32 (2^63 in CDF-5) entries in a few bytes; the truncation
// check refuses what the file cannot hold, but a slab of a variable whose data is all there could
// still be large (a NetCDF-4 variable with a fill value has no stored data at all). Reading that
// many values is no bug, just slow, so slabs past this are not read.
constexpr size_t kMaxSlabPoints = size_t{1} << 20;

// netCDF-C 4.9.0 with HDF5 1.10.8 (Debian 12) leaks when nc_open fails on a damaged NetCDF-4 file:
// NC4_open has built the root group (nc4_grp_list_add: ncindexnew -> NC_hashmapnew, ~5 KB per
// index) when H5Gopen2 fails on a corrupt object header (H5O_protect -> H5C_protect ->
// H5FL_blk_malloc), and neither is freed on that error path; nc_open returns NC_EHDFERR, which we
// report as "not a readable NetCDF file". Reproducer: netcdf4.nc here with bytes 600-699 set to
// 'A'; nc_open alone, in a C program built with -fsanitize=address, leaks 424 bytes. No check before nc_open can tell a damaged HDF5 file from a good one short of
// reading it as HDF5 does, and the leaked objects are allocated inside those libraries, so leak
// detection is off while a file that is not classic NetCDF is handled. Classic files (which go
// through the same wxtrain code: NetcdfFile, NetcdfReader) keep it on, and every input keeps
// ASan and UBSan and crash detection.
class LeakCheckOff {
 public:
  explicit LeakCheckOff(bool off) : off_(off) {
    if (off_) __lsan_disable();
  }
  ~LeakCheckOff() {
    if (off_) __lsan_enable();
  }

 private:
  bool off_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // GRIB has its own target (grib_reader_fuzz); open_reader would send these bytes there.
  if (size >= 4 && std::memcmp(data, "GRIB", 4) == 0) return 0;
  FILE* file = std::fopen(input_path().c_str(), "wb");
  if (!file) return 0;
  std::fwrite(data, 1, size, file);
  std::fclose(file);
  const bool classic = size >= 4 && std::memcmp(data, "CDF", 3) == 0;
  LeakCheckOff leak_check_off(!classic);
  try {
    auto reader = wxtrain::data::open_reader(input_path());
    (void)reader->format();
    for (const std::string& name : reader->variable_names()) {
      const wxtrain::data::VariableMeta& meta = reader->variable(name);
      (void)meta.text("units");
      (void)meta.number("scale_factor");
      std::vector<size_t> start(meta.dims.size(), 0), count;
      size_t points = 1;
      for (size_t d = 0; d < meta.dims.size(); ++d) {
        // The first slab, as the dataset reads one: one time (and level), the whole grid.
        const size_t length = meta.dims.size() > 1 && d + 2 < meta.dims.size()
                                  ? std::min<size_t>(1, meta.dims[d].length)
                                  : meta.dims[d].length;
        count.push_back(length);
        points = length == 0 ? 0 : points > kMaxSlabPoints / length ? kMaxSlabPoints + 1 : points * length;
      }
      if (points == 0 || points > kMaxSlabPoints) continue;
      try {  // one variable that cannot be read (a char or string variable) leaves the others to read
        std::vector<float> slab(points);
        reader->read(name, start, count, slab.data());
        if (meta.dims.size() == 1) reader->read_doubles(name);
      } catch (const wxtrain::DataError&) {
      }
    }
  } catch (const wxtrain::Error& e) {
    // A corrupt file is reported, which is what is asked of the reader.
    // WXTRAIN_FUZZ_VERBOSE=1 prints it (to see what a reproducer is answered).
    static const bool verbose = std::getenv("WXTRAIN_FUZZ_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "wxtrain::Error: %s\n", e.what());
  }
  return 0;
}
