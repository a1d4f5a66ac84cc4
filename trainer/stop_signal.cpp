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
}

bool stop_requested() { return g_stop != 0; }
void request_stop() { g_stop = 1; }
void clear_stop() { g_stop = 0; }

}  // namespace wxtrain::trainer
