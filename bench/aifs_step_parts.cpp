// Where an AIFS training step's time goes, per part and per rank (issue 26: why two bands gained
// nothing): the real TrainingStep on a run file, in one process or under mpirun with
// distributed.model_parallel, with at::RecordFunction callbacks on the spans models/aifs/aifs.cpp
// names (aifs.encoder, aifs.encoder.halo, aifs.processor.attention, aifs.processor.halo,
// aifs.processor.mlp, aifs.decoder.halo, aifs.decoder).
//
// Forward: each span's wall time less the spans inside it (the window's halo exchange is inside the
// attention's span, and is counted apart). Backward: each autograd node's wall time, charged to the
// innermost span its forward ran in, found by the node's sequence number (autograd numbers nodes
// in creation order, so a span owns the numbers handed out between its start and its end; this is
// how PyTorch's own profiler pairs backward with forward). "backward, outside the spans": the
// loss, the rollout's pointwise update, AccumulateGrad. "rest": the step's wall time less all of
// that (the optimizer, the gradient all-reduce's wait, the batch cut to the band, the loss).
// Each is measured twice: wall time, and the thread's CPU time (clock_gettime
// CLOCK_THREAD_CPUTIME_ID), which on a machine shared with other work is what the part computed
// rather than what it also waited for a core. A halo exchange's time includes the wait for the
// slowest rank of the group: on the faster rank of an unbalanced pair it is mostly that wait (in
// CPU time too, as far as Open MPI polls while it waits).
//
// Per rank it also prints what the rank computes: hidden nodes, encoder and decoder edges, the
// keys of its processor window (own nodes plus the window on either side) and each exchange's
// nodes. Run it without activation checkpointing (a replay would be charged to the checkpoint).
//
//   aifs_step_parts --config FILE [--batch 8] [--warmup 3] [--steps 10] [--set key=value ...]
//   mpirun -np 2 aifs_step_parts --config FILE --set distributed.model_parallel=2 ...
//
// bench/run_aifs_parts_bench.sh writes the run file and runs both.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <time.h>

#include <ATen/Parallel.h>
#include <ATen/SequenceNumber.h>
#include <ATen/record_function.h>

#include "core/config.h"
#include "data/dataset.h"
#include "distributed/communicator.h"
#include "distributed/world.h"
#include "models/aifs/aifs.h"
#include "step_bench_args.h"
#include "trainer/training_step.h"

namespace {

using Clock = std::chrono::steady_clock;
using namespace wxtrain;

// The parts, in the order printed; the last two are not spans.
const std::vector<std::string> kParts = {"aifs.encoder.halo",   "aifs.encoder",        "aifs.processor.attention",
                                         "aifs.processor.halo", "aifs.processor.mlp",  "aifs.decoder.halo",
                                         "aifs.decoder"};
constexpr int kOutside = 7;  // backward outside the spans
constexpr int kRest = 8;     // the step less everything above

// The profile of the steps in between start() and stop(). The step runs on one thread (the CPU's
// autograd engine runs backward on the caller's), so nothing here is locked.
struct Profile {
  bool on = false;
  // Wall time and this thread's CPU time: on a machine shared with other work the CPU time is
  // what the part computed, the wall time also what it waited for a core (and, in an exchange,
  // for the other rank).
  std::vector<double> forward_ms = std::vector<double>(kParts.size() + 2, 0.0);
  std::vector<double> backward_ms = std::vector<double>(kParts.size() + 2, 0.0);
  std::vector<double> forward_cpu_ms = std::vector<double>(kParts.size() + 2, 0.0);
  std::vector<double> backward_cpu_ms = std::vector<double>(kParts.size() + 2, 0.0);
  struct Open {
    int part;
    Clock::time_point start;
    double cpu_start;
    double inner_ms = 0, inner_cpu_ms = 0;
    uint64_t first_seq;
  };
  std::vector<Open> open;
  std::vector<std::tuple<uint64_t, uint64_t, int>> ranges;  // [first, end) sequence numbers -> part
  int backward_depth = 0;

  int part_of_seq(uint64_t seq) const {
    // Spans nest or are disjoint: the innermost one holding seq is the one starting last.
    int part = kOutside;
    uint64_t best = 0;
    bool found = false;
    for (const auto& [first, end, p] : ranges)
      if (seq >= first && seq < end && (!found || first >= best)) best = first, part = p, found = true;
    return part;
  }
};
Profile g_profile;

struct BackwardContext : at::ObserverContext {
  Clock::time_point start;
  double cpu_start = 0;
  int64_t seq = -1;
};

double ms_since(Clock::time_point t) { return 1e3 * std::chrono::duration<double>(Clock::now() - t).count(); }
double thread_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return 1e3 * static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_nsec);
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  Profile& p = g_profile;
  if (!p.on) return nullptr;
  if (fn.scope() == at::RecordScope::USER_SCOPE) {
    if (p.backward_depth > 0) return nullptr;  // a checkpoint's replay: inside its node's time
    const std::string name = fn.name();
    for (size_t i = 0; i < kParts.size(); ++i)
      if (name == kParts[i])
        p.open.push_back({static_cast<int>(i), Clock::now(), thread_cpu_ms(), 0, 0, at::sequence_number::peek()});
    return nullptr;
  }
  // BACKWARD_FUNCTION
  auto ctx = std::make_unique<BackwardContext>();
  if (p.backward_depth++ == 0) ctx->start = Clock::now(), ctx->cpu_start = thread_cpu_ms(), ctx->seq = fn.seqNr();
  return ctx;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* context) {
  Profile& p = g_profile;
  if (!p.on) return;
  if (fn.scope() == at::RecordScope::USER_SCOPE) {
    if (p.open.empty() || p.backward_depth > 0 || kParts[static_cast<size_t>(p.open.back().part)] != fn.name()) return;
    const Profile::Open o = p.open.back();
    p.open.pop_back();
    const double total = ms_since(o.start), cpu = thread_cpu_ms() - o.cpu_start;
    p.forward_ms[static_cast<size_t>(o.part)] += total - o.inner_ms;
    p.forward_cpu_ms[static_cast<size_t>(o.part)] += cpu - o.inner_cpu_ms;
    if (!p.open.empty()) p.open.back().inner_ms += total, p.open.back().inner_cpu_ms += cpu;
    p.ranges.emplace_back(o.first_seq, at::sequence_number::peek(), o.part);
    return;
  }
  auto* ctx = static_cast<BackwardContext*>(context);
  if (ctx == nullptr) return;
  --p.backward_depth;
  if (ctx->seq < 0) return;  // nested inside another node's
  const auto part = static_cast<size_t>(p.part_of_seq(static_cast<uint64_t>(ctx->seq)));
  p.backward_ms[part] += ms_since(ctx->start);
  p.backward_cpu_ms[part] += thread_cpu_ms() - ctx->cpu_start;
}

struct Args : bench::StepBenchArgs {
  std::vector<std::string> sets;
};

int run(const Args& args) {
  const distributed::World world = distributed::init_world();
  std::vector<std::string> overrides = {"train.batch_size=" + std::to_string(args.batch)};
  overrides.insert(overrides.end(), args.sets.begin(), args.sets.end());
  RunConfig config = load_config(args.config, overrides);
  const data::Dataset dataset(config.data);
  data::take_grid(config, dataset);
  const models::ModelShape shape = models::model_shape(config);
  const std::vector<double> latitudes = dataset.has_coordinates() ? dataset.lat() : std::vector<double>{};
  auto comm = distributed::make_communicator(world, config.distributed, torch::kCPU);
  auto state = trainer::build_training_state(config, shape, comm, torch::kCPU, latitudes);
  state->parallel->broadcast_parameters();
  auto* aifs = dynamic_cast<models::AifsImpl*>(state->model.get());
  if (aifs == nullptr) {
    std::fprintf(stderr, "%s: model.name = \"%s\": aifs_step_parts times AIFS's parts, give it an aifs run file\n",
                 args.config.c_str(), config.model.name.c_str());
    return 2;
  }
  const trainer::ModelParallelSetup& mp = state->model_parallel;
  // The group's ranks read the same samples (their data-parallel group's seed).
  torch::manual_seed(1000 + static_cast<uint64_t>(world.rank / std::max<int64_t>(mp.size, 1)));
  const auto batches = trainer::synthetic_micro_batches(config, shape, args.batch, config.train.accumulation, torch::kCPU);
  trainer::TrainingStep step(*state);
  for (int i = 0; i < args.warmup; ++i) step.run(batches, config.train.lr);

  at::addGlobalCallback(at::RecordFunctionCallback(on_start, on_end)
                            .scopes({at::RecordScope::USER_SCOPE, at::RecordScope::BACKWARD_FUNCTION}));
  std::vector<double> step_ms;
  double total_ms = 0, total_cpu_ms = 0;
  for (int i = 0; i < args.steps; ++i) {
    comm->barrier();
    g_profile.on = true;
    g_profile.ranges.clear();
    const auto start = Clock::now();
    const double cpu_start = thread_cpu_ms();
    step.run(batches, config.train.lr);
    const double ms = ms_since(start);
    total_cpu_ms += thread_cpu_ms() - cpu_start;
    g_profile.on = false;
    step_ms.push_back(ms);
    total_ms += ms;
  }
  Profile& p = g_profile;
  double counted = 0, counted_cpu = 0;
  for (size_t i = 0; i < kParts.size(); ++i)
    counted += p.forward_ms[i] + p.backward_ms[i], counted_cpu += p.forward_cpu_ms[i] + p.backward_cpu_ms[i];
  counted += p.backward_ms[kOutside];
  counted_cpu += p.backward_cpu_ms[kOutside];
  p.forward_ms[kRest] = total_ms - counted;
  p.forward_cpu_ms[kRest] = total_cpu_ms - counted_cpu;

  // What this rank computes.
  const int64_t nh = aifs->hidden_grid().size();
  int64_t hidden = nh, encoder_edges = aifs->encoder_edges().edges(), decoder_edges = aifs->decoder_edges().edges();
  int64_t keys = nh, cells = shape.lat * shape.lon;
  if (mp.on()) {
    std::vector<int64_t> bounds{0};
    const int64_t per = shape.point_set ? 1 : shape.lon;
    for (int64_t s : mp.sizes) bounds.push_back(bounds.back() + s * per);
    const std::vector<int> owner = aifs->hidden_owners(bounds);
    const int r = mp.rank;
    hidden = std::count(owner.begin(), owner.end(), r);
    const int64_t first = std::find(owner.begin(), owner.end(), r) - owner.begin();
    const int64_t w = aifs->options().window_size <= 0 ? nh : aifs->options().window_size;
    keys = std::min(nh, first + hidden + w) - std::max<int64_t>(0, first - w);
    const auto er = aifs->encoder_edges().receivers.cpu();
    const int64_t* rp = er.data_ptr<int64_t>();
    encoder_edges = 0;
    for (int64_t e = 0; e < er.numel(); ++e) encoder_edges += owner[static_cast<size_t>(rp[e])] == r;
    const auto dr = aifs->decoder_edges().receivers.cpu();
    const int64_t* dp = dr.data_ptr<int64_t>();
    cells = bounds[static_cast<size_t>(r) + 1] - bounds[static_cast<size_t>(r)];
    decoder_edges = 0;
    for (int64_t e = 0; e < dr.numel(); ++e)
      decoder_edges += dp[e] >= bounds[static_cast<size_t>(r)] && dp[e] < bounds[static_cast<size_t>(r) + 1];
  }
  // Every rank's row, summed over the world (each fills its own), for rank 0 to print.
  const int64_t K = 4 * static_cast<int64_t>(kParts.size() + 2) + 11;
  torch::Tensor table = torch::zeros({world.size, K}, torch::kDouble);
  {
    auto row = table[world.rank];
    int64_t k = 0;
    for (size_t i = 0; i < kParts.size() + 2; ++i) {
      row[k++] = p.forward_ms[i] / args.steps;
      row[k++] = p.backward_ms[i] / args.steps;
      row[k++] = p.forward_cpu_ms[i] / args.steps;
      row[k++] = p.backward_cpu_ms[i] / args.steps;
    }
    // The step's CPU less the exchanges' (their copies and their waits for the other rank): what
    // the rank computed. The slowest rank's, over one process's step, is the ratio two ranks would
    // reach on otherwise idle cores if the exchanges cost nothing.
    double halo_cpu = 0;
    for (size_t i : {0, 3, 5}) halo_cpu += p.forward_cpu_ms[i] + p.backward_cpu_ms[i];
    for (double v : {bench::median(step_ms), total_cpu_ms / args.steps, (total_cpu_ms - halo_cpu) / args.steps, static_cast<double>(cells), static_cast<double>(hidden),
                     static_cast<double>(keys), static_cast<double>(encoder_edges), static_cast<double>(decoder_edges),
                     static_cast<double>(aifs->encoder_exchange_nodes()),
                     static_cast<double>(aifs->halo_exchange_nodes()), static_cast<double>(aifs->decoder_exchange_nodes())})
      row[k++] = v;
  }
  comm->allreduce(table);
  if (world.rank == 0) {
    const models::AifsOptions& o = aifs->options();
    std::printf("aifs %s, %lld channels, window %lld, %lld processor layers; micro-batch %lld, rollout %lld; "
                "%d rank(s), model_parallel %lld, %d thread(s) each; %d steps timed\n",
                o.hidden_grid.c_str(), static_cast<long long>(o.num_channels), static_cast<long long>(o.window_size),
                static_cast<long long>(o.processor_layers), static_cast<long long>(args.batch),
                static_cast<long long>(config.max_rollout()), world.size,
                static_cast<long long>(config.distributed.model_parallel), at::get_num_threads(), args.steps);
    auto a = table.accessor<double, 2>();
    const int64_t c0 = 4 * static_cast<int64_t>(kParts.size() + 2);
    std::printf("%-30s", "per step, ms: wall, CPU");
    for (int r = 0; r < world.size; ++r) std::printf(" | rank %d fwd    bwd  cpu fwd    bwd", r);
    std::printf("\n");
    std::vector<std::string> names = kParts;
    names.push_back("backward outside the spans");
    names.push_back("rest (optimizer, reduce, loss)");
    for (size_t i = 0; i < names.size(); ++i) {
      std::printf("%-30s", names[i].c_str());
      for (int r = 0; r < world.size; ++r)
        std::printf(" | %10.1f %6.1f %7.1f %6.1f", a[r][4 * i], a[r][4 * i + 1], a[r][4 * i + 2], a[r][4 * i + 3]);
      std::printf("\n");
    }
    const char* counts[] = {"step (median wall)", "step (mean CPU)", "step CPU less the exchanges", "cells", "hidden nodes", "window keys", "encoder edges", "decoder edges",
                            "encoder exchange nodes", "window exchange nodes", "decoder exchange nodes"};
    for (int j = 0; j < 11; ++j) {
      std::printf("%-30s", counts[j]);
      for (int r = 0; r < world.size; ++r) std::printf(j < 3 ? " | %32.1f" : " | %32.0f", a[r][c0 + j]);
      std::printf("\n");
    }
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  const std::string usage =
      "[mpirun -np 2] aifs_step_parts --config FILE [--batch N] [--warmup N] [--steps N] [--set key=value ...]";
  static_cast<wxtrain::bench::StepBenchArgs&>(args) = wxtrain::bench::parse_step_bench_args(
      argc, argv, usage, [&](const std::string& arg, const std::function<std::string()>& value) {
        if (arg != "--set") return false;
        args.sets.push_back(value());
        return true;
      });
  const int code = wxtrain::distributed::run_or_abort([&] { return run(args); });
  wxtrain::distributed::finalize_world();
  return code;
}
