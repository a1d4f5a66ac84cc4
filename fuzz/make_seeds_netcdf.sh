#!/usr/bin/env bash
# Writes the seed corpus of netcdf_reader_fuzz (fuzz/corpus/netcdf_reader_fuzz/) from the tiny CDL
# below with ncgen: the same small grid as NetCDF-3 classic, 64-bit offset and CDF-5, and as
# NetCDF-4 (HDF5) contiguous and chunked+deflated. Each is a few hundred bytes to a few KB, so the
# fuzzer mutates headers rather than data.
#   fuzz/make_seeds_netcdf.sh          (needs ncgen: Debian's netcdf-bin)
set -euo pipefail
cd "$(dirname "$0")"
out=corpus/netcdf_reader_fuzz
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A CF-style grid: coordinates, a record (unlimited) time axis with two record variables (their
# records interleave), packed shorts with scale/offset/fill, a fixed-size variable and attributes
# of several types.
cat >"$work/grid.cdl" <<'CDL'
netcdf grid {
dimensions:
  time = UNLIMITED ; // (2 currently)
  level = 2 ;
  lat = 3 ;
  lon = 4 ;
variables:
  double time(time) ;
    time:units = "hours since 2000-01-01 00:00:00" ;
    time:calendar = "gregorian" ;
  float level(level) ;
    level:units = "hPa" ;
  float lat(lat) ;
    lat:units = "degrees_north" ;
  float lon(lon) ;
    lon:units = "degrees_east" ;
  short t(time, level, lat, lon) ;
    t:scale_factor = 0.01 ;
    t:add_offset = 273.15 ;
    t:_FillValue = -32767s ;
    t:units = "K" ;
  float msl(time, lat, lon) ;
    msl:missing_value = 1.e+20f ;
  int lsm(lat, lon) ;
    lsm:valid_range = 0, 1 ;
  byte flag ;
// global attributes:
  :Conventions = "CF-1.8" ;
CDL
# Values (the same for every format).
cat >>"$work/grid.cdl" <<'CDL'
data:
 time = 0, 6 ;
 level = 500, 850 ;
 lat = 10, 0, -10 ;
 lon = 0, 90, 180, 270 ;
 t = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, _,
     1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24 ;
 msl = 1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008, 1009, 1010, 1011,
       1012, 1013, 1014, 1015, 1016, 1017, 1018, 1019, 1020, 1021, 1022, 1023 ;
 lsm = 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0 ;
 flag = 1 ;
}
CDL

# CDF-5 only: the 64-bit integer and unsigned types the classic formats lack.
cat >"$work/cdf5.cdl" <<'CDL'
netcdf cdf5 {
dimensions:
  x = 3 ;
variables:
  int64 big(x) ;
  ushort u(x) ;
    u:_FillValue = 65535US ;
data:
  big = 1, -2, 3000000000 ;
  u = 1, 2, 65535 ;
}
CDL

# NetCDF-4 only: chunking, deflate, shuffle and a subgroup (the reader lists the root group).
cat >"$work/nc4.cdl" <<'CDL'
netcdf nc4 {
dimensions:
  lat = 3 ;
  lon = 4 ;
variables:
  float z(lat, lon) ;
    z:_ChunkSizes = 2, 2 ;
    z:_DeflateLevel = 1 ;
    z:_Shuffle = "true" ;
    z:units = "m2 s-2" ;
  string name ;
data:
  z = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 ;
  name = "seed" ;
group: extra {
  variables:
    int n ;
  data:
    n = 7 ;
}
}
CDL

ncgen -k nc3 -o "$out/classic.nc" "$work/grid.cdl"
ncgen -k nc6 -o "$out/offset64.nc" "$work/grid.cdl"
ncgen -k nc5 -o "$out/cdf5.nc" "$work/grid.cdl"
ncgen -k nc5 -o "$out/cdf5_types.nc" "$work/cdf5.cdl"
# In HDF5 an unlimited dimension means chunked storage and B-trees (24 KB here); fixed, 10 KB.
sed 's|UNLIMITED ; // (2 currently)|2 ;|' "$work/grid.cdl" >"$work/grid_fixed.cdl"
ncgen -k nc4 -o "$out/netcdf4.nc" "$work/grid_fixed.cdl"
ncgen -k nc4 -o "$out/netcdf4_chunked.nc" "$work/nc4.cdl"
ls -l "$out"
