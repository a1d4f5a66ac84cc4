#!/usr/bin/python3
"""make_convention_data.py DIR: NetCDF files written the way users' tools write them, and run files
for them, for the CLI tests of how wxtrain reads the grid, attributes and time (issue 28):

  latlon_1d.nc   float lat(latitude), float lon(longitude) in degrees_north/degrees_east, on
                 dimensions without coordinate variables (xarray: "Dimensions without
                 coordinates"); t has no `coordinates` attribute, u names them in one
  no_grid.nc     (time, y, x) and nothing that says where the points are
  strings.nc     every text attribute a NetCDF-4 `string` (NC_STRING), as netCDF4-python's
                 setncattr_string, h5netcdf and ncgen's `string` write them; noleap calendar
  monthly_360.nc "months since 1990-01-01", 360_day calendar, 48 months
  monthly_std.nc "months since 1990-01-01", standard calendar, 48 months
  monthly_frac.nc "months since 1990-01-01" at mid-month (0.5, 1.5, ...), standard calendar
  latlon_1d.zarr the latlon_1d grid through xarray's to_zarr (lat and lon in `coordinates`)

All on the same 16 x 20 grid: latitudes 60 down to 30, longitudes 230 to 268 every 2 degrees.
"""
import os
import sys

import netCDF4
import numpy as np

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
LAT = np.arange(60.0, 29.0, -2.0)  # 16 rows, north to south
LON = np.arange(230.0, 270.0, 2.0)  # 20 columns


def field(n_times, phase=0.0):
    """A travelling wave on the grid: something a model can learn in a few steps."""
    t = np.arange(n_times)[:, None, None]
    y = np.arange(LAT.size)[None, :, None]
    x = np.arange(LON.size)[None, None, :]
    return (280.0 + 10.0 * np.sin(0.4 * x - 0.3 * t + phase) * np.cos(0.2 * y)).astype("f4")


def write(name, times, time_units, calendar, grid="latlon_1d", strings=False):
    with netCDF4.Dataset(os.path.join(out, name), "w", format="NETCDF4") as nc:
        def text(var, key, value):
            if strings:
                var.setncattr_string(key, value)
            else:
                var.setncattr(key, value)

        if grid == "latlon_1d":
            nc.createDimension("time", len(times))
            nc.createDimension("latitude", LAT.size)
            nc.createDimension("longitude", LON.size)
            dims = ("time", "latitude", "longitude")
            lat = nc.createVariable("lat", "f4", ("latitude",))
            lon = nc.createVariable("lon", "f4", ("longitude",))
        elif grid == "coordinate_variables":
            nc.createDimension("time", len(times))
            nc.createDimension("lat", LAT.size)
            nc.createDimension("lon", LON.size)
            dims = ("time", "lat", "lon")
            lat = nc.createVariable("lat", "f4", ("lat",))
            lon = nc.createVariable("lon", "f4", ("lon",))
        else:  # no grid at all
            nc.createDimension("time", len(times))
            nc.createDimension("y", LAT.size)
            nc.createDimension("x", LON.size)
            dims = ("time", "y", "x")
            lat = lon = None
        if lat is not None:
            lat[:] = LAT
            lon[:] = LON
            text(lat, "units", "degrees_north")
            text(lon, "units", "degrees_east")
        time = nc.createVariable("time", "f8", ("time",))
        time[:] = times
        text(time, "units", time_units)
        text(time, "calendar", calendar)
        for name_, phase in (("t", 0.0), ("u", 1.0)):
            v = nc.createVariable(name_, "f4", dims)
            v[:] = field(len(times), phase)
            text(v, "units", "K" if name_ == "t" else "m s-1")
            text(v, "long_name", "air temperature" if name_ == "t" else "eastward wind")
        if grid == "latlon_1d":
            text(nc["u"], "coordinates", "lat lon")


six_hourly = np.arange(40) * 6.0
write("latlon_1d.nc", six_hourly, "hours since 2000-01-01 00:00:00", "standard")
write("no_grid.nc", six_hourly, "hours since 2000-01-01 00:00:00", "standard", grid="none")
# 2000-02-27 + 39 x 6 h: March 8 18:00 in noleap (no February 29), March 7 in the standard calendar.
write("strings.nc", six_hourly, "hours since 2000-02-27 00:00:00", "noleap", grid="coordinate_variables",
      strings=True)
# The same grid through xarray to Zarr: lat and lon are non-index coordinates, so xarray writes the
# `coordinates` attribute ("lat lon") on each variable and no latitude/longitude arrays.
import xarray  # noqa: E402

with netCDF4.Dataset(os.path.join(out, "latlon_1d.nc")) as nc:
    hours = nc["time"][:]
xarray.Dataset(
    {"t": (("time", "latitude", "longitude"), field(40)), "u": (("time", "latitude", "longitude"), field(40, 1.0))},
    coords={"time": ("time", np.datetime64("2000-01-01") + hours.astype("i8") * np.timedelta64(1, "h")),
            "lat": ("latitude", LAT, {"units": "degrees_north"}),
            "lon": ("longitude", LON, {"units": "degrees_east"})},
).to_zarr(os.path.join(out, "latlon_1d.zarr"), mode="w")
months = np.arange(48, dtype="f8")
write("monthly_360.nc", months, "months since 1990-01-01", "360_day", grid="coordinate_variables")
write("monthly_std.nc", months, "months since 1990-01-01", "standard", grid="coordinate_variables")
write("monthly_frac.nc", months + 0.5, "months since 1990-01-01", "standard", grid="coordinate_variables")


def run_file(name, data_file, data_lines="", steps=2):
    with open(os.path.join(out, name + ".toml"), "w") as f:
        f.write(f"""[model]
name = "unet"
channels = [8, 16]
groups = 4

[data]
history = 2
rollout_steps = 1
val_fraction = 0.25
{data_lines}
[[data.sources]]
file = "{os.path.join(out, data_file)}"
variable = "t"
[[data.sources]]
file = "{os.path.join(out, data_file)}"
variable = "u"

[train]
batch_size = 2
steps = {steps}
lr = 2e-3
warmup_steps = 1
log_every = 1000
checkpoint_every = 0
out_dir = "{os.path.join(out, 'runs', name)}"
""")


run_file("latlon_1d", "latlon_1d.nc", 'forcings = ["cos_latitude", "insolation"]\n')
run_file("latlon_1d_region", "latlon_1d.nc", "region = { lat = [40, 50], lon = [240, 250] }\n")
run_file("latlon_1d_zarr", "latlon_1d.zarr", 'forcings = ["cos_latitude"]\n')
run_file("no_grid", "no_grid.nc")
run_file("no_grid_region", "no_grid.nc", "region = { lat = [40, 50], lon = [240, 250] }\n")
run_file("no_grid_forcings", "no_grid.nc", 'forcings = ["cos_latitude"]\n')
run_file("strings", "strings.nc", 'time_step = "12h"\n')
monthly_forcings = 'forcings = ["cos_day_of_year", "sin_day_of_year"]\n'
run_file("monthly_360", "monthly_360.nc", 'time_step = "1mo"\n' + monthly_forcings)
run_file("monthly_std", "monthly_std.nc", 'time_step = "1mo"\n' + monthly_forcings)
run_file("monthly_std_default_step", "monthly_std.nc", monthly_forcings)
run_file("monthly_std_quarterly", "monthly_std.nc", 'time_step = "3mo"\n')
run_file("monthly_std_30d", "monthly_std.nc", 'time_step = "30d"\n')
run_file("monthly_frac", "monthly_frac.nc", 'time_step = "1mo"\n')
run_file("step_9h", "latlon_1d.nc", 'time_step = "9h"\n')
# Text the run-file parser refuses with its file and line.
run_file("bad_step", "latlon_1d.nc", 'time_step = "6x"\n')
run_file("bad_origin", "latlon_1d.nc", 'time_origin = "1996-02-30"\n')
run_file("bad_period", "latlon_1d.nc",
         'train_period = ["2000-01-01", "2000-13-01"]\nval_period = ["2000-01-08", "2000-01-10"]\n')
print("convention data in", out)
