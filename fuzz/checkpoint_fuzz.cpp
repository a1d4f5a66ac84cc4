// libFuzzer target for the checkpoint loader (trainer/checkpoint_io.cpp, load_checkpoint, over
// LibTorch's zip + pickle serialization): the bytes as checkpoint.pt, loaded as `train --resume`,
// `init_from` and `forecast` load it. A wxtrain::Error naming the file is the expected answer to a
// bad file; a crash, abort, leak, sanitizer report in our code or any other exception (c10::Error
// escaping the loader) is a bug. LibTorch is the wheel's, not instrumented: ASan and UBSan check
// checkpoint_io.cpp and see LibTorch's heap only through malloc/free.
//
// Seeds: fuzz/corpus/checkpoint_fuzz/, written by fuzz/make_seeds_checkpoint.sh (a real checkpoint
// of a tiny U-Net from `wxtrain train`, and small ones cut down from it).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "trainer/checkpoint_io.h"

namespace {

const std::string& input_path() {
  static const std::string path = "/tmp/wxtrain_checkpoint_fuzz_" + std::to_string(::getpid()) + ".pt";
  return path;
}

}  // namespace

// One leak in LibTorch that no check of ours can prevent, suppressed so the fuzzer looks past it:
// caffe2::serialize::PyTorchStreamReader::init() (torch 2.11, caffe2/serialize/inline_container.cc)
// opens the zip with mz_zip_reader_init and then throws when the archive has no files, a file
// outside a folder, no readable 'version' record (a bad CRC, a damaged local header) or a version
// out of range; the constructor throws, so ~PyTorchStreamReader never calls mz_zip_reader_end and
// miniz's central directory copy (~2 KB, mz_zip_reader_read_central_dir) is lost. load_checkpoint
// reports such a file as "not a readable wxtrain checkpoint"; the process then ends with that
// error, so the leak is once per run. Reproducer: flip a byte of the 'version' entry of any
// checkpoint.pt. LibTorch has no frame pointers, so the stacks LSan records on malloc end at
// miniz's frame: the suppressions name the two miniz functions that allocate the reader's state,
// which a reader that is closed frees.
extern "C" const char* __lsan_default_suppressions() {
  return "leak:mz_zip_reader_init\nleak:mz_zip_reader_read_central_dir\n";
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FILE* file = std::fopen(input_path().c_str(), "wb");
  if (!file) return 0;
  std::fwrite(data, 1, size, file);
  std::fclose(file);
  try {
    const wxtrain::trainer::Checkpoint c = wxtrain::trainer::load_checkpoint(input_path());
    // What the callers touch next: every tensor's shape and bytes (load_weights compares sizes and
    // copies them; Normalization::from_map reads its values). LibTorch is not instrumented, so a
    // tensor whose sizes and strides reach past its storage would be read out of bounds unseen:
    // that is checked here.
    auto check = [](const torch::Tensor& t) {
      if (!t.defined() || t.numel() == 0) return;
      __int128 low = t.storage_offset(), high = t.storage_offset();  // element indices reached
      for (int64_t d = 0; d < t.dim(); ++d) {
        const __int128 reach = static_cast<__int128>(t.size(d) - 1) * t.stride(d);
        (reach < 0 ? low : high) += reach;
      }
      const __int128 bytes = (high + 1) * static_cast<__int128>(t.element_size());
      if (low < 0 || bytes > static_cast<__int128>(t.storage().nbytes())) {
        std::fprintf(stderr, "a loaded tensor reaches past its storage (%lld bytes): elements %lld..%lld\n",
                     static_cast<long long>(t.storage().nbytes()), static_cast<long long>(low),
                     static_cast<long long>(high));
        __builtin_trap();
      }
    };
    check(c.rng_state);
    for (const auto* map : {&c.model, &c.optimizer, &c.scaler, &c.normalization}) {
      for (const auto& [name, tensor] : *map) check(tensor);
    }
  } catch (const wxtrain::Error& e) {
    // A corrupt checkpoint is reported naming the file, which is what is asked of the loader.
    // WXTRAIN_FUZZ_VERBOSE=1 prints it (to see what a reproducer is answered).
    static const bool verbose = std::getenv("WXTRAIN_FUZZ_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "wxtrain::Error: %s\n", e.what());
  }
  return 0;
}
