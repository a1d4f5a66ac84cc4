#include "estimator/analytic.h"

#include <algorithm>
#include <vector>

#include "data/dataset.h"
#include "estimator/model_states.h"
#include "models/registry.h"

// The analytic estimate: each model says, block by block, what autograd keeps of it for backward
// (its formulas, models/<name>/<name>_memory.cpp, in the words of models/memory_formula.h, found
// through the registry); here those blocks are combined into the step's peak: checkpointing
// replays, rollout steps, accumulation, and the optimizer phase.

namespace wxtrain::estimator {
namespace {

using models::Block;
using models::Layer;
using models::ModelMemory;
using models::Widths;

// Backward through `b` with `below` bytes saved by everything that runs before it and `flowing`
// bytes of gradient arriving at its output: the highest live total while its layers run.
double backward_peak(const Block& b, double below, double& flowing) {
  double remaining = below + b.saved(), peak = 0;
  for (auto l = b.layers.rbegin(); l != b.layers.rend(); ++l) {
    const double grad = l->grad < 0 ? 0 : l->grad;
    peak = std::max(peak, remaining + b.carry + flowing + grad);
    remaining -= l->saved;
    if (l->grad >= 0) flowing = l->grad;
  }
  return peak;
}

// A checkpointed block's replay: its forward again (saving this time), with its temporaries.
double replay_peak(const Block& b, double below) {
  double saved = 0, peak = 0;
  for (const Layer& l : b.layers) {
    peak = std::max(peak, below + b.forward_temp + saved + l.temp);
    saved += l.saved;
  }
  return peak;
}

// An ensemble's blocks: every per-row term times the rows each sample becomes (its members); the
// batch-independent terms (fixed, weights) stay.
ModelMemory rows_per_sample(ModelMemory m, double rows) {
  if (rows == 1) return m;
  for (Block& b : m.blocks) {
    for (Layer& l : b.layers) {
      l.saved *= rows;
      l.temp *= rows;
      if (l.grad >= 0) l.grad *= rows;
    }
    for (double* v : {&b.inputs, &b.carry, &b.forward_temp, &b.output, &b.output_grad, &b.replay_grads}) *v *= rows;
  }
  m.output *= rows;
  return m;
}

}  // namespace

// The rows per sample one rank's model runs: its share of the members, when distributed.ensemble_group
// ranks share one ensemble (M / G; the step gathers the other ranks' members before the loss).
int64_t members_per_sample(const RunConfig& config) {
  return std::max<int64_t>(1, config.train.ensemble_members / std::max<int64_t>(1, config.distributed.ensemble_group));
}

double batch_grid_points(const RunConfig& config, const models::ModelShape& shape) {
  const int64_t P = config.distributed.model_parallel;
  const ModelSchema* schema = find_model_schema(config.model.name);
  if (P <= 1 || !schema || !schema->shards_grid) return static_cast<double>(shape.lat * shape.lon);
  // Bands of rows on a rectangle, of cells on a point set (lat = 1).
  if (shape.point_set || shape.lat == 1) return static_cast<double>(data::grid_band(shape.lon, P, 0).second);
  return static_cast<double>(data::grid_band(shape.lat, P, 0).second * shape.lon);
}

double batch_tensor_bytes(const RunConfig& config, const models::ModelShape& shape) {
  const double rollout = static_cast<double>(std::max<int64_t>(1, config.max_rollout()));
  const double accumulation = static_cast<double>(std::max<int64_t>(1, config.train.accumulation));
  const double grid = batch_grid_points(config, shape);
  const ChannelLayout layout = config.channels();
  // The step's micro-batches (fp32 input, forcings for every rollout step, target), all alive for
  // the whole step; the input's channels count one step's forcings already. An ensemble's noise
  // channels are drawn by the rollout, never held by the batch (trainer::synthetic_micro_batches).
  const double noise = layout.in_channels() == shape.in_channels ? static_cast<double>(layout.noise) : 0.0;
  const double in_elems = (static_cast<double>(shape.in_channels) - noise) * grid;
  const double forcing_elems = static_cast<double>(layout.forcing.size() + layout.statics.size()) * grid;
  return accumulation * 4 * (in_elems + (rollout - 1) * forcing_elems + rollout * shape.out_channels * grid);
}

int64_t analytic_param_count(const ModelConfig& config, const models::ModelShape& shape) {
  return models::find_model(config.name).parameter_count(config, shape);
}

ActivationFit analytic_activations(const RunConfig& config, const models::ModelShape& shape, Mode mode) {
  const models::ModelEntry& model = models::find_model(config.model.name);
  const Widths w = models::widths(config.train.precision);
  // An ensemble's model runs batch x members rows (trainer::tile_members): every per-sample term of
  // its blocks is per row, times the members; its batch-independent terms are not.
  const double members = mode == Mode::kTrain ? static_cast<double>(members_per_sample(config)) : 1.0;
  const ModelMemory m = rows_per_sample(
      model.activation_memory(config.model, shape,
                              {w, config.train.checkpointing, mode == Mode::kInference,
                               mode == Mode::kTrain ? config.distributed.model_parallel : int64_t{1}}),
      members);
  ActivationFit fit;
  fit.num_params = model.parameter_count(config.model, shape);
  fit.ranks = m.ranks;
  const StateLayout layout = state_layout(config.train.precision, config.train.optimizer, config.train.momentum);
  // What the trace counts as states: parameters, their flat gradients and optimizer state, the
  // latitude weights (training only), and the model's buffers.
  // The loss's channel weights (one float per output channel) and, for a limited-area run, the
  // boundary frame and interior mask (a float per grid point each).
  double buffers = mode == Mode::kTrain ? 4.0 * static_cast<double>(shape.lat + shape.out_channels) : 0.0;
  if (mode == Mode::kTrain && config.data.boundary > 0) buffers += 2 * 4.0 * static_cast<double>(shape.lat * shape.lon);
  // The model's own buffers (graphs, index tables), cast with the parameters.
  buffers += model.buffer_bytes(config.model, shape, layout.param_bytes);
  const double per_param = mode == Mode::kTrain ? 2 * layout.param_bytes + layout.optimizer_bytes : layout.param_bytes;
  fit.traced_states = static_cast<int64_t>(static_cast<double>(fit.num_params) * per_param + buffers);

  const double rollout = static_cast<double>(std::max<int64_t>(1, config.max_rollout()));
  // The grid points of this rank's tensors: its band under model parallelism (training only).
  const double grid = mode == Mode::kTrain ? batch_grid_points(config, shape) : static_cast<double>(shape.lat * shape.lon);
  const double in_elems = static_cast<double>(shape.in_channels) * grid;
  const ChannelLayout layout_channels = config.channels();
  const double forcing_elems = static_cast<double>(layout_channels.forcing.size() + layout_channels.statics.size()) * grid;
  const double batch_tensors = batch_tensor_bytes(config, shape);

  double saved = 0, inputs = 0, fixed_saved = 0, fixed_kept = 0, weights = 0, worst_weights = 0;
  for (const Block& b : m.blocks) {
    saved += b.saved();
    inputs += b.inputs;
    fixed_saved += b.fixed_saved;
    fixed_kept += b.fixed_kept;
    weights += b.weights;
    worst_weights = std::max(worst_weights, b.weights);
  }
  // ZeRO-3's largest gathered block: the formulas count each block's conv/linear weights; norms
  // and biases are spread over the blocks in the same proportion. No parameter is outside a block
  // in the zoo's formulas.
  if (weights > 0)
    fit.blocks.largest = static_cast<int64_t>(static_cast<double>(fit.num_params) * worst_weights / weights);

  if (mode == Mode::kInference) {
    // No graph: the largest block's forward temporaries on top of its input and output.
    double peak = 0;
    for (const Block& b : m.blocks) peak = std::max(peak, replay_peak(b, 0));
    fit.forward_backward.per_sample = 4 * in_elems + peak;
    fit.forward_backward.fixed = fixed_saved;
    return fit;
  }

  // The residual prediction and loss: the fp32 states, their stack, and the difference square() saves.
  // An ensemble's afCRPS (trainer::afcrps) keeps, per member and point, the difference to the truth
  // that abs() saves (fp32, 4 bytes) and the sort's int64 indices (8): 12 bytes. While it runs, the
  // abs() output, the sorted values and their product with the rank coefficients are alive beside
  // them (21 bytes at its forward's peak; its backward holds 20.5: the indices and the difference
  // with two member-sized gradients), above the stack of the members' predictions (4): 25 in all
  // (measured: tests/estimator/test_members.cpp, AfcrpsMemory). Its backward frees them before the
  // model's runs: for an ensemble the loss is a peak of its own, not a term under the model's.
  // `m.output` is per sample here: members x one state. The MSE's difference stays counted under the
  // model's backward, as the deterministic formulas were fitted with it.
  // In an ensemble group the loss runs over all M members, the other ranks' gathered (trainer::
  // gather_members): M / (members per rank) times this rank's output.
  const bool ensemble = config.train.ensemble();
  const double gathered = static_cast<double>(std::max<int64_t>(1, config.train.ensemble_members)) / members;
  const double loss_saved = ensemble ? 0 : rollout * m.output * 4;
  const double loss_peak = ensemble ? rollout * m.output * gathered * 25 : 0;
  // How many rollout steps' model activations the forward keeps: all of them, or with
  // train.rollout_checkpointing only each step's input parts and one step's activations at a time,
  // rebuilt by the replay of the step whose backward is running (last step first). The parts are
  // views of the micro-batch (counted in batch_tensors) and the fed-back predictions: each
  // prediction but the last stays (fp32, prognostic and diagnostic; in pure bf16 a bf16 copy of the
  // prognostic part and of each step's forcings).
  const bool steps_checkpointed = config.train.rollout_checkpointing;
  const double kept_steps = steps_checkpointed ? 1 : rollout;
  const double state_elems =
      static_cast<double>(shape.state_channels > 0 ? shape.state_channels : shape.out_channels) * grid;
  const double step_inputs =
      !steps_checkpointed ? 0
      : config.train.precision == Precision::kBf16 ? members * (rollout - 1) * (state_elems + forcing_elems) * 2
                                                   : (rollout - 1) * m.output * 4;
  // (m.output counts every member's state, and so does the bf16 term: the fed-back predictions are tiled.)
  // An ensemble's model input is not a view of the micro-batch but a fresh tensor of members x rows:
  // the tiled input cat the step's noise (and forcings). A checkpointed first block (one whose
  // `inputs` are the model input's, counted as a batch tensor for one member) keeps it, every kept
  // rollout step; with rollout checkpointing the steps' checkpoints keep their parts instead: the
  // tiled input and forcings and each step's noise (fp32 before any cast), and the replayed step's
  // first block its input.
  double ensemble_inputs = 0;
  if (ensemble) {
    const double noise_elems = static_cast<double>(layout_channels.noise) * grid;
    const double input_width = config.train.precision == Precision::kBf16 ? 2 : 4;
    const bool first_keeps_input = config.train.checkpointing && !m.blocks.empty() && m.blocks.front().inputs == 0;
    if (steps_checkpointed)
      ensemble_inputs = members * 4 * (in_elems - noise_elems - forcing_elems + rollout * (forcing_elems + noise_elems)) +
                        (first_keeps_input ? members * in_elems * input_width : 0);
    else if (first_keeps_input)
      ensemble_inputs = kept_steps * members * in_elems * input_width;
  }
  // While the loss runs the forward keeps what the model saved, or with rollout checkpointing only
  // the steps' parts: no step's activations are held then.
  auto loss_base = [&](double kept) { return steps_checkpointed ? step_inputs + ensemble_inputs : kept; };
  double flowing = m.output * 4;  // the gradient of the last predicted state
  // The step's peak is the highest of several lines: one per block's backward (its per-sample peak
  // beside its own batch-independent bytes, Block::fixed_backward), and the loss's. A block with a
  // large fixed term can hold the peak at a small batch and another block at a large one.
  std::vector<Line> peaks;
  auto candidate = [&](double per_sample, double fixed) { peaks.push_back({fixed, per_sample}); };
  if (config.train.checkpointing) {
    // Forward keeps each block's inputs (every kept rollout step); backward replays one block at a time.
    double below = step_inputs + ensemble_inputs + kept_steps * inputs + loss_saved;
    candidate(loss_base(below - loss_saved) + loss_peak, 0);
    for (auto b = m.blocks.rbegin(); b != m.blocks.rend(); ++b) {
      below -= b->inputs;
      // The replay's outputs and the gradients that arrived for them are held until it is done.
      const double held = below + b->inputs + b->output + b->output_grad + b->replay_grads;
      double first = 0;
      candidate(replay_peak(*b, held), b->fixed_forward);
      candidate(backward_peak(*b, held, first), b->fixed_backward);
      flowing = first;
    }
  } else {
    // Forward keeps everything (every kept rollout step); backward frees block by block.
    double below = step_inputs + ensemble_inputs + kept_steps * saved + loss_saved;
    candidate(loss_base(below - loss_saved) + loss_peak, 0);
    // The last rollout step's forward, for the blocks whose locals can make it the peak.
    double before = step_inputs + ensemble_inputs + (kept_steps - 1) * saved;
    for (const Block& b : m.blocks) {
      if (b.forward_peak) candidate(replay_peak(b, before), b.fixed_forward);
      before += b.saved();
    }
    for (auto b = m.blocks.rbegin(); b != m.blocks.rend(); ++b) {
      below -= b->saved();
      candidate(backward_peak(*b, below, flowing), b->fixed_backward);
    }
  }
  // A replayed rollout step hands back the gradient of its whole input (fp32, on its way to the
  // step before) and, in one piece, its parameters' gradients, before they are accumulated: one
  // more set of gradients at the peak (measured on the trace, tests/estimator).
  const double step_replay_grads = steps_checkpointed ? members * in_elems * 4 : 0;
  // Autocast's bf16 weight copies: cached and saved for the whole step, or (checkpointed, cache
  // off) one block's at a time during its replay.
  const double cast_weights = w.autocast ? 2 : 0;
  double fixed = config.train.checkpointing ? fixed_kept + cast_weights * worst_weights : fixed_saved + cast_weights * weights;
  if (steps_checkpointed) fixed += static_cast<double>(fit.num_params) * layout.param_bytes;
  // The lines that can be the highest at some batch (none both lower and flatter than another); the
  // steepest is forward_backward (per_sample() reads it), the others bound it at small batches.
  std::sort(peaks.begin(), peaks.end(), [](const Line& a, const Line& b) {
    return a.per_sample != b.per_sample ? a.per_sample > b.per_sample : a.fixed > b.fixed;
  });
  double highest_fixed = -1;
  bool first = true;
  for (const Line& p : peaks) {
    if (p.fixed <= highest_fixed) continue;  // a steeper line has at least this fixed part
    highest_fixed = p.fixed;
    const Line l{fixed + p.fixed, batch_tensors + p.per_sample + step_replay_grads};
    (first ? fit.forward_backward : fit.small_batch.emplace_back()) = l;
    first = false;
  }
  // Optimizer phase: the batch tensors are still alive; pure bf16 updates an fp32 copy of the grads.
  fit.optimizer.per_sample = batch_tensors;
  fit.optimizer.fixed = config.train.precision == Precision::kBf16 ? 4.0 * static_cast<double>(fit.num_params) : 0.0;
  return fit;
}

}  // namespace wxtrain::estimator
