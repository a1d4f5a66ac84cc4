#include "trainer/stop_signal.h"

#include <csignal>

namespace wxtrain::trainer {

namespace {
volatile std::sig_atomic_t g_stop = 0;

extern "C" void on_stop_signal(int signal) {
  if (g_stop && signal == SIGINT) {
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
  }
  g_stop = 1;
}
}  // namespace

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  // Open MPI's mpirun forwards SIGUSR1 to every rank, whereas SIGTERM to mpirun aborts the job
  // (it exits 1 and sends SIGKILL one second after SIGTERM), so SIGUSR1 is how to stop a job cleanly.
  sigaction(SIGUSR1, &action, nullptr);
}

bool stop_requested() { return g_stop != 0; }
void request_stop() { g_stop = 1; }
void clear_stop() { g_stop = 0; }

}  // namespace wxtrain::trainer
