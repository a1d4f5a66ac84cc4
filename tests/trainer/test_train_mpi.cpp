// `mpirun -np 2 wxtrain train` end to end on the real storm data: the built wxtrain binary is run
// as a user runs it (one process, or two ranks under mpirun), and the checkpoints it writes are
// compared here. Registered in CTest with the label `distributed` (tests/trainer/CMakeLists.txt).
//
// Why a two-rank run can be compared with one process at all: the loader gives rank r the
// positions r, r + W, ... of the epoch's permutation (data/loader.cpp, like DistributedSampler), so
// with micro-batch b on W = 2 ranks, global batch k is positions [2kb, 2kb + 2b) of the permutation
// — exactly batch k of one process at batch 2b (the same seed gives the same permutation, and both
// use the same 48 samples per epoch). DDP averages the per-rank mean losses' gradients, which is
// the gradient of the mean over the 2b samples because both ranks hold b. The runs are fp32, so
// the remaining differences are summation order only.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "mpi_runs.h"
#include "run_outputs.h"
#include "storm_run.h"
#include "trainer/checkpoint_io.h"

using namespace wxtrain;
using namespace wxtrain::trainer;
using testing_support::losses;
using testing_support::max_difference;
using testing_support::read_file;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

const std::string kWxtrain = WXTRAIN_BINARY;
const std::string kMpirun = testing_support::mpirun(2);

std::string base_dir() {
  static const std::string dir = testing_support::fresh_run_folder("wxtrain_train_mpi");
  return dir;
}

// A child process (bash -c command, in its own process group) with stdout+stderr in a log file.
class Process {
 public:
  explicit Process(const std::string& command, const std::string& log) : log_(log) {
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::setenv("OMP_NUM_THREADS", "1", 1);
      ::execl("/bin/bash", "bash", "-c", command.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::setpgid(pid_, pid_);
  }
  ~Process() {
    if (running_) kill_group(SIGKILL), wait_for(10);
  }
  pid_t pid() const { return pid_; }
  void kill_group(int sig) { ::kill(-pid_, sig); }
  // Exit status, or -1 after `seconds` (the whole group is then killed).
  int wait_for(double seconds) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    while (running_) {
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        running_ = false;
        code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      if (Clock::now() > deadline) {
        kill_group(SIGKILL);
        ::waitpid(pid_, &status, 0);
        running_ = false;
        code_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return code_;
  }
  std::string output() const { return read_file(log_); }

 private:
  std::string log_;
  pid_t pid_ = -1;
  bool running_ = true;
  int code_ = -1;
};

struct Result {
  int code;
  std::string output;
};

Result run(const std::string& command, const std::string& log, double timeout_s = 120) {
  Process p(command, log);
  const int code = p.wait_for(timeout_s);
  return {code, p.output()};
}

// The storm run file of the trainer tests (small U-Net, seed 3), in fp32 so that a two-rank run
// and one process differ by summation order only.
std::string run_file() {
  static const std::string path = [] {
    const std::string p = base_dir() + "/run.toml";
    std::ofstream(p) << testing_support::storm_run_text(base_dir() + "/unused", "precision = \"fp32\"\n");
    return p;
  }();
  return path;
}

std::string train_command(const std::string& out_dir, int64_t batch, const std::string& extra = "") {
  return kWxtrain + " train -q -c " + run_file() + " --set train.steps=10 --set train.batch_size=" +
         std::to_string(batch) + " --set train.out_dir=" + out_dir + " " + extra;
}

// Trains into base_dir()/name once per test binary; every test that needs the run shares it.
std::string trained(const std::string& name, bool mpi, int64_t batch, const std::string& extra = "") {
  const std::string dir = base_dir() + "/" + name;
  if (fs::exists(dir + "/checkpoint.pt")) return dir;
  const Result r = run((mpi ? kMpirun : std::string()) + train_command(dir, batch, extra), dir + ".log");
  EXPECT_EQ(r.code, 0) << name << ":\n" << r.output;
  return dir;
}

Checkpoint checkpoint_in(const std::string& dir) { return load_checkpoint(dir + "/checkpoint.pt"); }

}  // namespace

TEST(TrainMpi, TwoRanksAtMicroBatch4EqualOneProcessAtBatch8) {
  const std::string single = trained("single_b8", false, 8);
  const std::string ddp = trained("ddp_b4", true, 4);
  const Checkpoint a = checkpoint_in(single), b = checkpoint_in(ddp);
  EXPECT_EQ(a.step, 10);
  EXPECT_EQ(b.step, 10);
  EXPECT_EQ(b.world_size, 2);
  std::string worst;
  // Two ranks sum the gradients in another order (float rounding, ~1e-7 relative). Adam divides by
  // sqrt(v), so where a gradient is near zero that rounding moves a weight by up to ~1% of an lr
  // step (lr 2e-3): over 10 steps a few 1e-5 at most (1.2e-5 measured with the residual
  // normalisation's tendency scale, 1.3e-6 without it). A real divergence (a lost bucket, a wrong
  // average) moves weights by whole lr steps.
  EXPECT_LE(max_difference(a.model, b.model, &worst), 3e-5) << "largest difference in " << worst;
  // ... and the optimizer state, consolidated from the ranks, matches the single process's.
  EXPECT_LE(max_difference(a.optimizer, b.optimizer, &worst), 1e-5) << "optimizer: " << worst;
  // Same samples per step, so the same loss curve.
  const auto la = losses(single), lb = losses(ddp);
  ASSERT_EQ(la.size(), 10u);
  ASSERT_EQ(lb.size(), 10u);
  for (size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(la[i], lb[i], 1e-4 * std::abs(la[i])) << "step " << i + 1;
  EXPECT_LT(la.back(), la.front());
}

TEST(TrainMpi, Zero1AndZero2TrainLikeDdp) {
  const std::string ddp = trained("ddp_b4", true, 4);
  const Checkpoint base = checkpoint_in(ddp);
  for (int stage : {1, 2}) {
    const std::string dir =
        trained("zero" + std::to_string(stage), true, 4, "--set distributed.zero_stage=" + std::to_string(stage));
    const Checkpoint z = checkpoint_in(dir);
    EXPECT_EQ(z.step, 10);
    std::string worst;
    EXPECT_LE(max_difference(base.model, z.model, &worst), 1e-5) << "ZeRO-" << stage << ": " << worst;
    EXPECT_LE(max_difference(base.optimizer, z.optimizer, &worst), 1e-5) << "ZeRO-" << stage << " optimizer: " << worst;
  }
}

TEST(TrainMpi, RolloutCheckpointingUnderDdpTrainsLikeOneProcessWithout) {
  // Per-step (nested in per-block) replays hand the parameter gradients to DDP's bucket hooks from
  // inside a backward: the two-rank run must still train as one plain process on the whole batch.
  const std::string rollout = "--set data.rollout_steps=2";
  const std::string single = trained("single_b8_rollout2", false, 8, rollout);
  const std::string ddp = trained("ddp_b4_rollout2_ckpt", true, 4,
                                  rollout + " --set train.rollout_checkpointing=true --set train.checkpointing=true");
  const Checkpoint a = checkpoint_in(single), b = checkpoint_in(ddp);
  EXPECT_EQ(b.step, 10);
  EXPECT_EQ(b.world_size, 2);
  std::string worst;
  EXPECT_LE(max_difference(a.model, b.model, &worst), 3e-5) << "largest difference in " << worst;
  const auto la = losses(single), lb = losses(ddp);
  ASSERT_EQ(lb.size(), la.size());
  for (size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(la[i], lb[i], 1e-4 * std::abs(la[i])) << "step " << i + 1;
}

TEST(TrainMpi, TwoRankCheckpointResumesOnOneProcess) {
  // Stop the two-rank run after 5 steps, continue on one process with the same global batch: it
  // must land where the uninterrupted one-process run did.
  const std::string dir = base_dir() + "/resume_2_to_1";
  Result first = run(kMpirun + train_command(dir, 4, "--stop-after 5"), dir + ".first.log");
  ASSERT_EQ(first.code, 0) << first.output;
  EXPECT_NE(first.output.find("stopped at step 5"), std::string::npos) << first.output;
  EXPECT_EQ(checkpoint_in(dir).world_size, 2);
  Result second = run(train_command(dir, 8, "--resume"), dir + ".second.log");
  ASSERT_EQ(second.code, 0) << second.output;
  EXPECT_NE(second.output.find("finished at step 10 of 10"), std::string::npos) << second.output;
  const Checkpoint c = checkpoint_in(dir);
  EXPECT_EQ(c.step, 10);
  EXPECT_EQ(c.world_size, 1);
  const auto l = losses(dir);
  ASSERT_EQ(l.size(), 10u);
  for (double v : l) EXPECT_TRUE(std::isfinite(v));
  std::string worst;
  // The first five steps summed over two ranks: the rounding the DDP test above bounds by 3e-5 for
  // the same reason (Adam's normalised steps near zero gradients). 1.16e-5 measured on an Intel Xeon,
  // under 1e-5 on the AMD EPYC; a real divergence moves weights by whole lr steps.
  EXPECT_LE(max_difference(checkpoint_in(trained("single_b8", false, 8)).model, c.model, &worst), 3e-5) << worst;
}

TEST(TrainMpi, OneProcessCheckpointResumesOnTwoRanks) {
  const std::string dir = base_dir() + "/resume_1_to_2";
  Result first = run(train_command(dir, 8, "--stop-after 5"), dir + ".first.log");
  ASSERT_EQ(first.code, 0) << first.output;
  EXPECT_EQ(checkpoint_in(dir).step, 5);
  Result second = run(kMpirun + train_command(dir, 4, "--resume --set distributed.zero_stage=2"), dir + ".second.log");
  ASSERT_EQ(second.code, 0) << second.output;
  EXPECT_NE(second.output.find("resuming at step 5"), std::string::npos) << second.output;
  EXPECT_NE(second.output.find("finished at step 10 of 10"), std::string::npos) << second.output;
  const Checkpoint c = checkpoint_in(dir);
  EXPECT_EQ(c.step, 10);
  EXPECT_EQ(c.world_size, 2);
  const auto l = losses(dir);
  ASSERT_EQ(l.size(), 10u);
  for (double v : l) EXPECT_TRUE(std::isfinite(v));
  std::string worst;
  EXPECT_LE(max_difference(checkpoint_in(trained("single_b8", false, 8)).model, c.model, &worst), 1e-5) << worst;
}

namespace {

// The pids of mpirun's children that run wxtrain (the ranks).
std::vector<pid_t> rank_pids(pid_t mpirun) {
  std::vector<pid_t> out;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string stat = read_file(entry.path().string() + "/stat");
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::stringstream rest(stat.substr(close + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == mpirun && stat.find("(wxtrain)") != std::string::npos) out.push_back(std::stoi(name));
  }
  return out;
}

// Starts a long two-rank run, waits until it has logged `steps` steps, and returns it running.
std::unique_ptr<Process> start_long_run(const std::string& dir, pid_t* mpirun_pid) {
  fs::create_directories(dir);
  // `exec` makes mpirun the process itself (its pid is the group leader's).
  auto p = std::make_unique<Process>("exec " + kMpirun + kWxtrain + " train -q -c " + run_file() +
                                         " --set train.steps=100000 --set train.out_dir=" + dir,
                                     dir + ".log");
  *mpirun_pid = p->pid();
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (Clock::now() < deadline) {
    std::ifstream csv(dir + "/metrics.csv");
    int lines = 0;
    for (std::string l; std::getline(csv, l);) ++lines;
    if (lines >= 4) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return p;
}

// `exit_zero`: the job's exit status must be 0. Open MPI's mpirun, itself sent SIGTERM, forwards it
// to the ranks and then reports the job as signalled (exit status 1) even though every rank saved
// and returned 0; there only the ranks' behaviour is ours to check.
void expect_saved_and_stopped(Process& p, const std::string& dir, bool exit_zero) {
  const int code = p.wait_for(60);
  const std::string out = p.output();
  ASSERT_NE(code, -1) << "the job did not stop within 60 s:\n" << out;
  if (exit_zero) {
    EXPECT_EQ(code, 0) << out;
  }
  EXPECT_NE(out.find("stopped at step"), std::string::npos) << out;
  const Checkpoint c = checkpoint_in(dir);
  EXPECT_GE(c.step, 3);
  EXPECT_EQ(c.world_size, 2);
  // The checkpoint holds the last logged step: nothing trained after it was lost.
  EXPECT_EQ(static_cast<int64_t>(losses(dir).size()), c.step);
}

}  // namespace

TEST(TrainMpi, SigtermToOneRankStopsBothRanksWithACheckpoint) {
  const std::string dir = base_dir() + "/sigterm_rank";
  pid_t mpirun = 0;
  auto p = start_long_run(dir, &mpirun);
  const auto ranks = rank_pids(mpirun);
  ASSERT_EQ(ranks.size(), 2u) << p->output();
  ASSERT_EQ(::kill(ranks.back(), SIGTERM), 0);
  expect_saved_and_stopped(*p, dir, /*exit_zero=*/true);
}

TEST(TrainMpi, SigtermToMpirunStopsBothRanksWithACheckpoint) {
  const std::string dir = base_dir() + "/sigterm_mpirun";
  pid_t mpirun = 0;
  auto p = start_long_run(dir, &mpirun);
  ASSERT_EQ(rank_pids(mpirun).size(), 2u) << p->output();
  ASSERT_EQ(::kill(mpirun, SIGTERM), 0);
  expect_saved_and_stopped(*p, dir, /*exit_zero=*/false);
  // No rank was killed before it finished saving: both returned from train() (one summary line).
  EXPECT_NE(p->output().find("stopped at step"), std::string::npos);
}

TEST(TrainMpi, AFailingRankTakesTheJobDownWithItsMessage) {
  // Rank 1 reads a corrupt copy of one data file (a damaged file on one node); rank 0 is fine and
  // goes on into training, where it would wait forever in the first collective.
  const std::string dir = base_dir() + "/rank_failure";
  fs::create_directories(dir);
  const std::string bad = dir + "/Tstorm.cdf";
  {
    const std::string good = read_file("/usr/share/ncarg/data/cdf/Tstorm.cdf");
    std::ofstream(bad, std::ios::binary) << good.substr(0, good.size() / 3);
  }
  std::string text = read_file(run_file());
  const std::string from = "/usr/share/ncarg/data/cdf/Tstorm.cdf";
  text.replace(text.find(from), from.size(), bad);
  const std::string bad_run = dir + "/bad_run.toml";
  std::ofstream(bad_run) << text;
  const std::string wrapper = dir + "/rank1_bad.sh";
  std::ofstream(wrapper) << "#!/bin/bash\nif [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then exec " << kWxtrain
                         << " train -q -c " << bad_run << " --set train.out_dir=" << dir << "; else exec " << kWxtrain
                         << " train -q -c " << run_file() << " --set train.out_dir=" << dir << "; fi\n";
  fs::permissions(wrapper, fs::perms::owner_all);
  const auto start = Clock::now();
  Result r = run(kMpirun + wrapper, dir + ".log", 60);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_NE(r.code, -1) << "the job hung after rank 1 failed:\n" << r.output;
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(bad), std::string::npos) << "the message should name the bad file:\n" << r.output;
  EXPECT_LT(seconds, 60);
  EXPECT_FALSE(fs::exists(dir + "/checkpoint.pt"));
}
