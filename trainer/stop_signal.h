#pragma once
// SIGINT/SIGTERM (spot instances are preempted with SIGTERM) and SIGUSR1 (what mpirun forwards to
// the ranks; Slurm's --signal=USR1@60) ask the trainer to finish the step, save a checkpoint and
// exit 0. A second SIGINT kills the process as usual.
namespace wxtrain::trainer {

void install_stop_handlers();
bool stop_requested();
void request_stop();  // as if a signal had arrived (tests)
void clear_stop();

}  // namespace wxtrain::trainer
