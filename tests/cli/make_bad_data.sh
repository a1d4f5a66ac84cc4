#!/bin/bash
# make_bad_data.sh DIR — bad inputs for the CLI tests, made fresh in DIR (the files under
# /usr/share are only read): corrupt and truncated NetCDF files, a file without the configured variable, a file
# on another grid, a malformed run file, and run files pointing at each bad file.
set -eu
dir="$1"
src=/usr/share/ncarg/data/cdf
rm -rf "$dir"
mkdir -p "$dir"
cd "$dir"

# Damaged: the magic number overwritten. Truncated: cut inside the header.
{ printf 'garbage'; tail -c +8 "$src/Tstorm.cdf"; } > corrupt.cdf
head -c 300 "$src/Tstorm.cdf" > truncated.cdf
# Tstorm with its variable renamed: "t" is missing.
ncdump "$src/Tstorm.cdf" | sed -e 's/^netcdf Tstorm/netcdf renamed/' -e 's/float t(/float temp(/' -e 's/^\t\tt:_FillValue/\t\ttemp:_FillValue/' -e 's/^ t =$/ temp =/' > renamed.cdl
ncgen -o missing_var.cdf renamed.cdl
# A 20 x 18 grid with the same variable name and time axis as the others.
cat > small_grid.cdl <<'CDL'
netcdf small_grid {
dimensions:
  timestep = 64 ;
  lat = 20 ;
  lon = 18 ;
variables:
  float t(timestep, lat, lon) ;
data:
}
CDL
ncgen -o small_grid.cdf small_grid.cdl

sources() {  # sources FILE_FOR_T VARIABLE_FOR_T
  local entries=("Pstorm p p" "TEMP t t" "Ustorm u u" "Vstorm v v" "U500storm u u500" "V500storm v v500")
  for e in "${entries[@]}"; do
    set -- $e
    local file="$src/$1.cdf" var="$2"
    if [ "$1" = TEMP ]; then file="$T_FILE"; var="$T_VAR"; fi
    printf '[[data.sources]]\nfile = "%s"\nvariable = "%s"\nname = "%s"\n' "$file" "$var" "$3"
  done
}
run_file() {  # run_file OUT T_FILE T_VAR
  T_FILE="$2" T_VAR="$3"
  {
    printf '[model]\nname = "unet"\nchannels = [16, 32]\ngroups = 4\n\n[data]\nhistory = 2\nrollout_steps = 1\nval_fraction = 0.2\n'
    sources
    printf '\n[train]\nbatch_size = 4\nsteps = 3\nlr = 2e-3\nwarmup_steps = 1\nlog_every = 1000\ncheckpoint_every = 0\nout_dir = "%s"\n' "$dir/out_$1"
  } > "$1.toml"
}
run_file good "$src/Tstorm.cdf" t
run_file corrupt "$dir/corrupt.cdf" t
run_file truncated "$dir/truncated.cdf" t
run_file missing_var "$dir/missing_var.cdf" t
run_file grid_mismatch "$dir/small_grid.cdf" t
run_file unknown_model "$src/Tstorm.cdf" t
sed -i 's/name = "unet"/name = "unte"/' unknown_model.toml
printf '[model]\nname = "unet"\nchannels = [16, 32\n\n[train]\nbatch_size = 4\n' > malformed.toml
# The published GraphCast fine-tuned over 12 steps: fits no GPU with per-block checkpointing alone.
printf '[model]\npreset = "graphcast-0.25"\n[data]\nrollout_steps = 12\n[train]\nbatch_size = 1\nprecision = "bf16-mixed"\ncheckpointing = true\n' > graphcast_12_steps.toml
# Pangu cannot shard its grid over model-parallel ranks: its GPUs-per-model answer is a projection.
printf '[model]\npreset = "pangu-0.25"\n[data]\nrollout_steps = 12\n[train]\nbatch_size = 1\nprecision = "fp32"\ncheckpointing = false\n' > pangu_12_steps.toml
# A [data] key written under [train]; a model step that is not a duration (dated six-hourly from
# 1996-01-05 like configs/storm_unet.toml, with a unit nobody knows).
run_file wrong_section "$src/Tstorm.cdf" t
sed -i 's/^steps = 3$/steps = 3\nval_fraction = 0.3/' wrong_section.toml
run_file bad_duration "$src/Tstorm.cdf" t
sed -i 's/^val_fraction = 0.2$/val_fraction = 0.2\ntime_origin = "1996-01-05"\ntime_step = "6 hourz"/' bad_duration.toml
echo "bad inputs in $dir"
