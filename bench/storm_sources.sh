# Sourced by the bench scripts that train on the storm data (NCL's storm files in Debian's
# ncl-ncarg: surface pressure, temperature, winds at the surface and at 500 hPa; the data
# configs/storm_*.toml read). Sets `sources` to their [[data.sources]] tables, one per variable.
sources=""
for e in Pstorm:p:p Tstorm:t:t Ustorm:u:u Vstorm:v:v U500storm:u:u500 V500storm:v:v500; do
  IFS=: read -r file variable name <<< "$e"
  sources+="[[data.sources]]
file = \"/usr/share/ncarg/data/cdf/$file.cdf\"
variable = \"$variable\"
name = \"$name\"
"
done
