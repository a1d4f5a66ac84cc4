#include "models/weather_model.h"

#include <string>

#include "core/error.h"
#include "models/registry.h"

namespace wxtrain::models {

ModelShape model_shape(const RunConfig& config) {
  ModelShape s;
  s.out_channels = config.out_channels();  // prognostic + diagnostic
  s.in_channels = config.in_channels();    // prognostic x history + forcings + static fields
  const ChannelLayout layout = config.channels();
  s.state_channels = static_cast<int64_t>(layout.prognostic.size());
  s.history = layout.history;
  s.lat = config.data.lat;
  s.lon = config.data.lon;
  if (s.lat <= 0 || s.lon <= 0)
    throw ConfigError(config.path + ": the grid size is unknown: set [data] grid = [lat, lon] or open the data first");
  if (!config.data.grid_name.empty() && static_cast<int64_t>(config.data.lat_coords.size()) != s.lon)
    throw ConfigError(config.path + ": data.grid = \"" + config.data.grid_name +
                      "\" names a point set whose cells have not been generated (data::take_named_grid)");
  // A point set (data::take_grid): one row of cells, with a latitude as well as a longitude per
  // cell. A rectangle of one row has a single latitude, so the two never look alike.
  if (s.lat == 1 && s.lon > 1 && static_cast<int64_t>(config.data.lat_coords.size()) == s.lon &&
      static_cast<int64_t>(config.data.lon_coords.size()) == s.lon) {
    s.point_set = true;
    s.latitudes = config.data.lat_coords;
    s.longitudes = config.data.lon_coords;
  } else if (static_cast<int64_t>(config.data.lat_coords.size()) == s.lat &&
             static_cast<int64_t>(config.data.lon_coords.size()) == s.lon) {
    s.latitudes = config.data.lat_coords;
    s.longitudes = config.data.lon_coords;
  }
  if (config.train.conditional_noise()) {
    if (!find_model(config.model.name).conditional_noise) {
      std::string takers;
      for (const ModelEntry& e : model_registry())
        if (e.conditional_noise) takers += (takers.empty() ? "" : ", ") + e.schema.name;
      throw ConfigError(config.path + ": train.noise_injection = \"conditional_norm\" is not supported by model.name = \"" +
                        config.model.name + "\": it has no processor of LayerNorms to condition (models that take it: " +
                        takers + "; docs/ensembles.md); use train.noise_injection = \"input\" (noise fields as input "
                        "channels)");
    }
    s.conditional_noise = layout.noise;
  }
  return s;
}

WeatherModelImpl::WeatherModelImpl(const ModelShape& shape) : shape_(shape) {
  TORCH_CHECK(shape.in_channels > 0 && shape.out_channels > 0 && shape.lat > 0 && shape.lon > 0,
              "model shape needs channels and a grid, got ", shape.in_channels, " -> ", shape.out_channels, " on ",
              shape.lat, " x ", shape.lon);
}

torch::Tensor WeatherModelImpl::register_index_buffer(const std::string& name, torch::Tensor indices) {
  torch::Tensor b = register_buffer(name, std::move(indices));
  index_buffers_.push_back(b);
  return b;
}

template <typename Move>
void WeatherModelImpl::move_keeping_indices(const Move& move, const std::optional<torch::Device>& device,
                                            bool non_blocking) {
  std::vector<torch::Tensor> moved;
  // detach(): a handle of its own, untouched by the set_data that Module::to does on the buffers.
  for (const torch::Tensor& t : index_buffers_) moved.push_back(t.detach().to(device.value_or(t.device()), non_blocking));
  move();
  for (size_t i = 0; i < moved.size(); ++i) index_buffers_[i].set_data(moved[i]);
}

void WeatherModelImpl::to(torch::Device device, torch::Dtype dtype, bool non_blocking) {
  move_keeping_indices([&] { torch::nn::Module::to(device, dtype, non_blocking); }, device, non_blocking);
}

void WeatherModelImpl::to(torch::Dtype dtype, bool non_blocking) {
  move_keeping_indices([&] { torch::nn::Module::to(dtype, non_blocking); }, std::nullopt, non_blocking);
}

void WeatherModelImpl::to(torch::Device device, bool non_blocking) {
  move_keeping_indices([&] { torch::nn::Module::to(device, non_blocking); }, device, non_blocking);
}

std::vector<torch::Tensor> WeatherModelImpl::run_block(const torch::nn::Module& block, const ops::BlockFn& fn,
                                                       const std::vector<torch::Tensor>& inputs) const {
  return run_block(block, fn, inputs, checkpointing_);
}

std::vector<std::vector<torch::Tensor>> WeatherModelImpl::block_parameters() const {
  std::vector<std::vector<torch::Tensor>> blocks;
  for (const auto& block : block_modules_) blocks.push_back(block->parameters());
  return blocks;
}

std::vector<torch::Tensor> WeatherModelImpl::run_block(const torch::nn::Module& block, const ops::BlockFn& fn,
                                                       const std::vector<torch::Tensor>& inputs,
                                                       bool checkpointed) const {
  // By reference: the runner calls it before returning (checkpoint() keeps fn, not this).
  auto plain = [&block, &fn, checkpointed](const std::vector<torch::Tensor>& in) {
    if (!checkpointed || !torch::GradMode::is_enabled()) return fn(in);
    return ops::checkpoint(fn, in, block.parameters());
  };
  if (!block_runner_) return plain(inputs);
  size_t index = 0;
  while (index < block_modules_.size() && block_modules_[index].get() != &block) ++index;
  TORCH_CHECK(index < block_modules_.size(), "run_block: the module is not one of the model's registered blocks");
  return block_runner_->run_block(index, plain, inputs);
}

torch::Tensor WeatherModelImpl::run_block(const torch::nn::Module& block,
                                          const std::function<torch::Tensor(const torch::Tensor&)>& fn,
                                          const torch::Tensor& input) const {
  return run_block(block, fn, input, checkpointing_);
}

torch::Tensor WeatherModelImpl::run_block(const torch::nn::Module& block,
                                          const std::function<torch::Tensor(const torch::Tensor&)>& fn,
                                          const torch::Tensor& input, bool checkpointed) const {
  auto wrapped = [fn](  // by value: checkpoint keeps it until backward
                     const std::vector<torch::Tensor>& in) { return std::vector<torch::Tensor>{fn(in[0])}; };
  return run_block(block, ops::BlockFn(wrapped), {input}, checkpointed)[0];
}

CellCoordinates cell_coordinates(const ModelShape& shape) {
  CellCoordinates cells;
  if (shape.point_set) {
    if (shape.lat != 1 || static_cast<int64_t>(shape.latitudes.size()) != shape.lon ||
        shape.longitudes.size() != shape.latitudes.size())
      throw Error("a point-set grid needs lat = 1 and one latitude and longitude per cell; got lat = " +
                  std::to_string(shape.lat) + ", " + std::to_string(shape.lon) + " cells, " +
                  std::to_string(shape.latitudes.size()) + " latitudes and " + std::to_string(shape.longitudes.size()) +
                  " longitudes");
    cells.latitudes = shape.latitudes;
    cells.longitudes = shape.longitudes;
    return cells;
  }
  std::vector<double> rows = shape.latitudes, columns = shape.longitudes;
  if (rows.empty() && columns.empty()) {
    for (int64_t i = 0; i < shape.lat; ++i)
      rows.push_back(shape.lat == 1 ? 0.0 : 90.0 - 180.0 * static_cast<double>(i) / static_cast<double>(shape.lat - 1));
    for (int64_t j = 0; j < shape.lon; ++j) columns.push_back(360.0 * static_cast<double>(j) / static_cast<double>(shape.lon));
  }
  if (static_cast<int64_t>(rows.size()) != shape.lat || static_cast<int64_t>(columns.size()) != shape.lon)
    throw Error("the grid is " + std::to_string(shape.lat) + " x " + std::to_string(shape.lon) + " but its coordinates are " +
                std::to_string(rows.size()) + " x " + std::to_string(columns.size()));
  cells.latitudes.reserve(rows.size() * columns.size());
  cells.longitudes.reserve(rows.size() * columns.size());
  for (double lat : rows)
    for (double lon : columns) {
      cells.latitudes.push_back(lat);
      cells.longitudes.push_back(lon);
    }
  return cells;
}

}  // namespace wxtrain::models
