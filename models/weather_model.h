#pragma once
// The model zoo's common shape: input [batch, variables x history, lat, lon] -> output
// [batch, variables, lat, lon] (the next state). A model's forward is a sequence of named blocks
// (submodules registered with register_block); each runs through run_block, which checkpoints it
// when checkpointing is on. The block list is what the estimator and the docs talk about.
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "core/block_runner.h"
#include "core/config.h"
#include "ops/checkpoint.h"

namespace wxtrain::models {

struct ModelShape {
  int64_t in_channels = 0;   // variables x history
  int64_t out_channels = 0;  // variables
  int64_t lat = 0;
  int64_t lon = 0;
  // The grid's coordinates in degrees (lat rows, lon columns), when the data gave them; empty
  // otherwise. Only models that place the grid on the sphere read them (graphcast; without them it
  // assumes a regular global grid of lat x lon).
  std::vector<double> latitudes, longitudes;
  // How the input's channels group (model_shape() fills these from the run's ChannelLayout): the
  // first history x state_channels are `history` prognostic states, oldest first, the rest forcings
  // and static fields. state_channels = 0: not known (a bare shape built in code); a model that
  // needs it reads the input as one state of in_channels.
  int64_t state_channels = 0;
  int64_t history = 1;
  // A point-set grid (reduced Gaussian, anemoi-datasets' cells, any list of scattered cells)
  // rather than a rectangle: the tensors keep their four dimensions with lat = 1 and lon = the
  // number of cells, and latitudes/longitudes hold one value per cell. Models that need a
  // rectangle (convolutions, patches, windows) refuse it by name; the graph models take it.
  bool point_set = false;
  // train.noise_injection = "conditional_norm" (docs/ensembles.md): the last conditional_noise
  // input channels are an ensemble member's noise fields, which the model takes out of its input
  // and feeds to the conditional LayerNorms of its processor instead of reading them as channels.
  // 0: whatever noise fields there are, are ordinary input channels.
  int64_t conditional_noise = 0;
};

ModelShape model_shape(const RunConfig& config);  // from [data] (sources or variables/grid)

// One latitude and longitude (degrees) per grid cell, in the order the tensors' last two
// dimensions flatten: row-major over a rectangle, the cells' own order for a point set. A rectangle
// without coordinates is the regular global grid graphcast assumes (90 to -90 inclusive, longitudes
// from 0 in steps of 360 / lon).
struct CellCoordinates {
  std::vector<double> latitudes, longitudes;
};
CellCoordinates cell_coordinates(const ModelShape& shape);

// A parameter one of whose dimensions runs over the model's input or output channels (the
// variables x history of the input, the variables of the output). Fine-tuning onto another set of
// channels (trainer/channel_transfer.h) carries these over channel by channel, by name: a channel
// the checkpoint also has keeps its slices, a new one keeps its fresh initialisation.
struct ChannelAxis {
  std::string parameter;  // full name as in named_parameters(), e.g. "encoder0.conv1.weight"
  int64_t dim = 0;        // the dimension that runs over channels
  bool input = true;      // input channels (true) or output channels (false)
  // Entries along `dim` per channel, and their layout: channel-major, channel c owns the
  // contiguous entries [c * per_channel, (c + 1) * per_channel); channel-minor (strided), it owns
  // entries c, c + C, c + 2C, ... for C channels. The ViT's head is Linear(D, p*p*C_out) viewed as
  // [p, p, C_out]: p*p entries per channel, channel-minor.
  int64_t per_channel = 1;
  bool channel_major = true;
  // Channels [skip_begin, skip_begin + skip_count) of the model's list are not on this axis: their
  // weights live elsewhere (Pangu's upper-air volume, embedded by variable, not by channel). The
  // axis runs over the other channels in their order, and the checkpoint's side leaves out the
  // channels of the same names.
  int64_t skip_begin = 0;
  int64_t skip_count = 0;
};

// Where this model's grid lies in the grid a checkpoint was trained on, when fine-tuning a model
// trained on a whole grid on a data.region crop of it: row i of ours is row rows[i] of the trained
// grid of trained_lat rows (columns likewise). Empty: unknown, or the same grid.
struct GridPlacement {
  int64_t trained_lat = 0, trained_lon = 0;
  std::vector<int64_t> rows, cols;
  bool known() const { return trained_lat > 0 && !rows.empty(); }
};

// What WeatherModelImpl::fit_checkpoint_to_grid did to a checkpoint's tensors; the channel
// transfer's report (trainer/channel_transfer.h) says it on the terminal.
struct GridFit {
  // A line per tensor of the checkpoint fitted to this grid, or dropped because this grid needs
  // none: "name: how" (cut, interpolated, rebuilt), in the order the report prints them.
  std::vector<std::string> regridded;
  // Those whose value was replaced by one fitted to this grid (the others were erased): they carry
  // the checkpoint's values over, and the report lists them as regridded, not as loaded.
  std::set<std::string> fitted;
  // Buffers the model builds from its grid (GraphCast's graph) and keeps as its own: the
  // checkpoint's, for another grid or absent (a reference's state_dict), were replaced by them.
  // grid_change says in a line what differs; both empty when the checkpoint's are this grid's.
  std::set<std::string> rebuilt;
  std::string grid_change;
};

// Model parallelism (distributed.model_parallel; docs/distributed.md): the ranks of a group each
// own a contiguous range of the grid's cells in the order the last two dimensions flatten (a band of
// latitude rows on a rectangle, a range of cells on a point set). Rank r owns cells
// [bounds[r], bounds[r + 1]) and its forward takes and returns only those: [B, C, rows, lon] (or
// [B, C, 1, cells]). `exchange` is the group's differentiable halo exchange
// (distributed::exchange_halo_rows): send [rows[rank], ...] -> every rank's send rows in rank order.
struct NodeShard {
  std::vector<int64_t> bounds;  // group size + 1 cell offsets, 0 .. cells
  int rank = 0;
  std::function<torch::Tensor(const torch::Tensor& send, const std::vector<int64_t>& rows)> exchange;
};

class WeatherModelImpl : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor x) = 0;

  // Whether set_node_shard is implemented (gnn, graphcast, aifs); the config refuses the others by
  // name (ModelSchema::shards_grid, core/model_options.h).
  virtual bool can_shard_nodes() const { return false; }
  // From now on forward runs this rank's cells only (NodeShard). Call after the model is on its
  // device: the shard's index tensors are built on the buffers' device. The parameters stay whole.
  virtual void set_node_shard(const NodeShard& shard) {
    (void)shard;
    TORCH_CHECK(false, "this model cannot shard its grid over model-parallel ranks");
  }
  // After set_node_shard: the nodes one halo exchange moves (every rank's send rows together) and
  // the values per node (the latent width); an exchange's payload is their product x batch.
  virtual int64_t halo_exchange_nodes() const { return 0; }
  virtual int64_t halo_node_width() const { return 0; }
  // The models whose encoder and decoder cross to a second node set (GraphCast's mesh, AIFS's
  // hidden grid) run one exchange more before each, once per rollout step: its nodes (every rank's
  // send rows) and values per node. Zero for the others.
  struct MapperHalos {
    int64_t encoder_nodes = 0, encoder_width = 0, decoder_nodes = 0, decoder_width = 0;
  };
  virtual MapperHalos mapper_halos() const { return {}; }

  // Every parameter indexed by input or output channel, with how (see ChannelAxis). Everything
  // else is independent of the channel lists: the same shape for any set of variables.
  virtual std::vector<ChannelAxis> channel_axes() const = 0;

  // Fine-tuning on another grid than a checkpoint's (a data.region crop of a global model): the
  // checkpoint's tensors `weights` edited in place to fit this model's grid, and what was done.
  // `where` places this grid in the grid the checkpoint was trained on (GridPlacement; unknown when
  // not a region crop); `from` is the checkpoint's grid as it recorded it (lat, lon and their
  // coordinates in degrees; lat = 0: not recorded), shape() this model's. What still does not fit
  // is left as it is, for the loader to refuse by name. trainer/channel_transfer.h calls it once,
  // before matching names, and reports the result. The default: nothing depends on the grid.
  //   FourCastNet: the positional embedding cut or interpolated to this grid's patches;
  //   Pangu: the Earth-specific bias tables cut to this grid's latitude windows, masks rebuilt;
  //   GraphCast: the graph, built for this grid, in place of the checkpoint's.
  virtual GridFit fit_checkpoint_to_grid(std::map<std::string, torch::Tensor>& weights, const GridPlacement& where,
                                         const ModelShape& from) const {
    (void)weights, (void)where, (void)from;
    return {};
  }

  const ModelShape& shape() const { return shape_; }
  const std::vector<std::string>& block_names() const { return block_names_; }
  // Each block's submodule, in block_names() order (ZeRO-3 shards their parameters block by block).
  const std::vector<std::shared_ptr<torch::nn::Module>>& block_modules() const { return block_modules_; }
  // Each block's parameters as ZeRO-3 gathers them around the block's runs, in block_modules()
  // order: the block's own, less any the model reads outside run_block (AIFS's trainable node and
  // edge features, registered in its mappers but read before either runs); those stay resident,
  // as parameters of no block do. The estimate's gathered-block peak counts these too.
  virtual std::vector<std::vector<torch::Tensor>> block_parameters() const;
  // What runs around every block from now on (null: nothing, the block runs as it is). ZeRO-3
  // installs its parameter gathering here (distributed/sharded_parameters.h).
  void set_block_runner(std::shared_ptr<BlockRunner> runner) { block_runner_ = std::move(runner); }
  bool has_block_runner() const { return block_runner_ != nullptr; }
  void set_checkpointing(bool on) { checkpointing_ = on; }
  bool checkpointing() const { return checkpointing_; }

  // Module::to(dtype) converts every buffer; index buffers (register_index_buffer) must stay int64
  // (bf16 cannot even hold the indices), so these move them by device only.
  void to(torch::Device device, torch::Dtype dtype, bool non_blocking = false) override;
  void to(torch::Dtype dtype, bool non_blocking = false) override;
  void to(torch::Device device, bool non_blocking = false) override;

 protected:
  // Checks the shape every zoo model needs (channels and a grid) once, for all of them.
  explicit WeatherModelImpl(const ModelShape& shape);

  // Registers a block: a submodule that run_block will run (and checkpoint) as a unit.
  template <typename ModuleHolder>
  ModuleHolder register_block(const std::string& name, ModuleHolder module) {
    block_names_.push_back(name);
    ModuleHolder registered = register_module(name, module);
    block_modules_.push_back(registered.ptr());
    return registered;
  }

  // Registers an int64 index buffer (graph edges): it moves with the model's device and keeps its
  // dtype through to(dtype).
  torch::Tensor register_index_buffer(const std::string& name, torch::Tensor indices);

  // Runs fn(inputs) as the block `block`: plain, or through checkpoint() with the block's
  // parameters when checkpointing is on. fn is kept until backward when checkpointed: capture
  // by value (this, and copies of tensors/holders), never references to locals.
  std::vector<torch::Tensor> run_block(const torch::nn::Module& block, const ops::BlockFn& fn,
                                       const std::vector<torch::Tensor>& inputs) const;
  torch::Tensor run_block(const torch::nn::Module& block,
                          const std::function<torch::Tensor(const torch::Tensor&)>& fn,
                          const torch::Tensor& input) const;
  // The same with this run's own choice of checkpointing, for a model whose options checkpoint
  // its parts separately (AIFS's mappers, chunk by chunk, and its processor) or never (the noise
  // MLPs, which the memory formulas count outside every checkpoint).
  std::vector<torch::Tensor> run_block(const torch::nn::Module& block, const ops::BlockFn& fn,
                                       const std::vector<torch::Tensor>& inputs, bool checkpointed) const;
  torch::Tensor run_block(const torch::nn::Module& block,
                          const std::function<torch::Tensor(const torch::Tensor&)>& fn, const torch::Tensor& input,
                          bool checkpointed) const;
  // A registered block's own forward(input) run as the block.
  template <typename ModuleHolder>
  torch::Tensor run_forward(const ModuleHolder& block, const torch::Tensor& input, bool checkpointed) const {
    auto module = block.ptr();  // by value: checkpoint keeps the function until backward
    return run_block(*module, [module](const torch::Tensor& x) { return module->forward(x); }, input, checkpointed);
  }

 private:
  ModelShape shape_;
  template <typename Move>
  void move_keeping_indices(const Move& move, const std::optional<torch::Device>& device, bool non_blocking);

  std::vector<std::string> block_names_;
  std::vector<std::shared_ptr<torch::nn::Module>> block_modules_;
  std::shared_ptr<BlockRunner> block_runner_;
  std::vector<torch::Tensor> index_buffers_;  // handles sharing the registered buffers' storage
  bool checkpointing_ = false;
};

using WeatherModel = std::shared_ptr<WeatherModelImpl>;

// Builds the zoo model `config.name` for `shape` (models/registry.cpp), after checking its options
// against the model's rules; an unknown name is a ConfigError listing the accepted ones.
WeatherModel build_model(const ModelConfig& config, const ModelShape& shape);

}  // namespace wxtrain::models
