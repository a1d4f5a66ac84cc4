#pragma once
// Inputs a weather model is given besides the atmosphere's state: computed forcings (functions of
// the grid point and the valid time, known exactly for any future step of a rollout) and static
// fields read from a file once (land-sea mask, orography). GraphCast, FourCastNet and Pangu feed
// variants of both.
//
// Computed forcings, all float32 [lat, lon], computed in double:
//   cos_latitude, sin_latitude     cos/sin of the point's latitude (radians); units "1"
//   cos_longitude, sin_longitude   cos/sin of the point's longitude (radians); units "1"
//   cos_local_time, sin_local_time of local mean solar time as an angle,
//                                  2*pi * (UTC seconds of day + lon_deg/360 * 86400) / 86400
//                                  (0 at local midnight, pi at local noon); units "1"
//   cos_day_of_year, sin_day_of_year of 2*pi * (seconds since the start of the valid time's year)
//                                  / (length of that year in the calendar: 365 or 366 days in
//                                  standard/proleptic_gregorian/julian, 365 in noleap, 366 in
//                                  all_leap, 360 in 360_day); (1, 0) at Jan 1 00:00; units "1"
//   insolation                     top-of-atmosphere incident solar radiation, instantaneous:
//                                  S0 * (r0/r)^2 * max(0, cos(solar zenith angle)), in W m-2, with
//                                  S0 = 1361 W m-2 (IAU 2015 Resolution B3 nominal total solar
//                                  irradiance) and r0/r the mean over the actual Earth-Sun distance.
//     Solar declination, equation of time and (r0/r)^2 are Spencer's (1971) Fourier series as NOAA's
//     "General Solar Position Calculations" gives them, evaluated at the fractional year of
//     day_of_year above (in 360_day and the other idealized calendars the year is scaled onto the
//     orbit the same way). The hour angle comes from the true solar time, UTC + 4 min per degree of
//     longitude + the equation of time. Declination is good to about 0.035 degrees and (r0/r)^2 to
//     about 1e-4, so insolation is within a few W m-2 of an ephemeris.
//     ERA5's toa_incident_solar_radiation (what GraphCast feeds) is this quantity integrated over
//     the hour before the valid time, in J m-2 (about 3600 times ours, smoothed over the hour);
//     ours is instantaneous at the valid time. Do not mix the two in one model.
//
// Times are time points as TimeAxis::seconds holds them (data/time/cf_time.h): seconds since
// 1970-01-01T00:00:00 in `calendar`. Coordinates are degrees; longitudes in any convention
// (-180..180 or 0..360 give the same values). Latitudes must lie in [-90, 90] (a Dataset without
// coordinate variables has indices for latitudes, which would be silently wrong here).
//
// Speed: each forcing is an outer combination of a per-latitude and a per-longitude factor, and
// the calendar is consulted once per call, so a 721 x 1440 grid costs a few milliseconds per
// rollout step.
//
// Every failure is a wxtrain::DataError (core/error.h) naming the name, file, variable or value at
// fault and what was expected.
#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/config.h"
#include "data/time/cf_time.h"

namespace wxtrain::data {

// The computed forcings are wxtrain::computed_forcing_names() (core/config.h, where the run-file
// parser checks data.forcings against them): cos_latitude, sin_latitude, cos_longitude,
// sin_longitude, cos_local_time, sin_local_time, cos_day_of_year, sin_day_of_year, insolation.
bool is_computed_forcing(const std::string& name);
// False for the four coordinate forcings (constant in time), true for the others. Unknown names
// throw DataError listing the accepted ones.
bool forcing_needs_time(const std::string& name);
// "1" for the trigonometric forcings, "W m-2" for insolation. Unknown names throw as above.
std::string forcing_units(const std::string& name);

// float32 [lat_deg.size(), lon_deg.size()] of one forcing at valid time `seconds` (in `calendar`).
// Unknown name: DataError listing the accepted names. A latitude outside [-90, 90] or a NaN
// coordinate: DataError naming its index and value.
torch::Tensor compute_forcing(const std::string& name, const std::vector<double>& lat_deg,
                              const std::vector<double>& lon_deg, int64_t seconds, Calendar calendar);
// Several at once: float32 [names.size(), lat, lon], in the order of `names` (what the sample
// builder calls per rollout step). Every name is checked before anything is computed.
torch::Tensor compute_forcings(const std::vector<std::string>& names, const std::vector<double>& lat_deg,
                               const std::vector<double>& lon_deg, int64_t seconds, Calendar calendar);

// The same on a point set (data/grid.h): one latitude and longitude per cell, float32
// [names.size(), 1, cells].
torch::Tensor compute_cell_forcings(const std::vector<std::string>& names, const std::vector<double>& lat_deg,
                                    const std::vector<double>& lon_deg, int64_t seconds, Calendar calendar);

// A 2-D static field (land-sea mask, orography) from a file any Reader opens (open_reader), as
// float32 [lat_deg.size(), lon_deg.size()] on the target grid (south-to-north or north-to-south,
// any longitude convention: whatever the caller's grid is).
//
// The variable must have exactly two dimensions, latitude and longitude in either order (told
// apart as Dataset does: by name, units degrees_north/degrees_east or standard_name; when neither
// is recognised they are taken as (lat, lon)), or those two after one leading dimension of length
// 1 (a time dimension, as ERA5's invariant fields have). Both need coordinate variables: the field
// is placed on the grid by value. CF decoding as in Dataset: points equal to _FillValue or
// missing_value become NaN, then scale_factor/add_offset are applied.
//
// regrid:
//   "none"    the file's coordinates must equal the target's within 1e-4 degrees after flipping
//             latitude and rolling longitude mod 360 (as Dataset does for its sources); otherwise
//             a DataError names the file, the variable and the first coordinate that differs and
//             suggests regrid = "nearest".
//   "nearest" each target point takes the source point nearest in latitude and nearest in
//             longitude (longitude distance taken mod 360; ties go to the lower coordinate), for a
//             source on any regular or irregular 1-D lat/lon grid. A target latitude beyond the
//             source's latitude span by more than the source's spacing at that edge is a DataError;
//             so is a target longitude farther than one source spacing from every source longitude
//             (a regional source regridded onto a wider grid), rather than a field silently
//             stretched from its edge.
// Errors name the file, the variable and what was expected: a missing file, a missing variable
// (listing those present), wrong dimensions, a missing coordinate variable, an unknown regrid
// (listing "none", "nearest").
torch::Tensor read_static_field(const std::string& file, const std::string& variable, const std::string& regrid,
                                const std::vector<double>& lat_deg, const std::vector<double>& lon_deg);

}  // namespace wxtrain::data
