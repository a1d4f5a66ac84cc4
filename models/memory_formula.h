#pragma once
// The words a model's memory formulas are written in, for `estimate --analytic` (models too large
// to trace here). Each model says, block by block, what autograd keeps of it for backward (llm.c
// style: the memory model is a table), and counts its parameters layer by layer; estimator/
// analytic.cpp combines the blocks (checkpointing, rollout, accumulation, the optimizer phase).
// Sizes are per sample; widths turn element counts into bytes for the run's precision. Each
// model's formulas are in its folder (models/<name>/<name>_memory.cpp) and reach the estimator
// through its registry entry (models/registry.h).
#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"

namespace wxtrain::models {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Parameter counts of the layers the zoo is made of.
inline int64_t conv_params(int64_t in, int64_t out, int64_t k, bool bias) { return in * out * k * k + (bias ? out : 0); }
inline int64_t linear_params(int64_t in, int64_t out, bool bias = true) { return in * out + (bias ? out : 0); }
inline int64_t norm_params(int64_t channels) { return 2 * channels; }  // GroupNorm / LayerNorm: weight + bias
// An MLP's hidden width from its ratio, as the models compute it (truncated).
inline int64_t mlp_hidden(int64_t width, double ratio) {
  return static_cast<int64_t>(static_cast<double>(width) * ratio);
}

// Element widths of a precision.
struct Widths {
  double low;     // conv/linear/matmul operands and outputs: bf16 under autocast and in pure bf16
  double high;    // what autocast leaves in the parameters' dtype: norms, residual stream, loss
  bool autocast;  // conv/linear inputs are saved as fresh bf16 copies, and so are the weights
};
Widths widths(Precision p);

// How the step runs, as far as a model's formula depends on it.
struct FormulaSettings {
  Widths widths;
  bool checkpointing = false;  // train.checkpointing: each block replayed in backward
  bool inference = false;      // no graph: forward only
  // distributed.model_parallel: a model that can describe one rank of a group (the gnn on a
  // rectangle so far) gives rank 0's band, the widest, with its halo, and says so in
  // ModelMemory::ranks; the others give the whole grid.
  int64_t model_parallel = 1;
};

// A block is its layers in forward order; per layer, per sample, in bytes:
//   saved: what autograd keeps of it until its backward runs;
//   grad:  the gradient it produces for its input (allocated while its output's gradient lives);
//   temp:  what its forward allocates beyond `saved` (outputs nothing keeps, copies), alive only
//          while it runs — matters when a checkpointed block is replayed.
// grad < 0 marks a pure keep (a tensor held for a later block): the flowing gradient passes.
struct Layer {
  const char* kind;
  double saved = 0;
  double grad = 0;
  double temp = 0;
};

struct Block {
  std::string name;
  std::vector<Layer> layers;
  double inputs = 0;       // what its checkpoint keeps: its inputs, unless another block's already
  double carry = 0;        // gradients held during its backward (residual and skip branches)
  double fixed_saved = 0;  // batch-independent saved bytes (the gnn's edge latents)
  double fixed_kept = 0;   // of those, what its checkpoint keeps (its batch-independent outputs)
  double forward_temp = 0; // alive through its whole forward (a local the block's layers run under)
  double weights = 0;      // conv/linear parameters: autocast saves their bf16 copies
  double output = 0;       // bytes it returns that none of its layers keeps (held by a replay)
  double output_grad = 0;  // bytes of the gradients arriving at its outputs
  double replay_grads = 0; // measured extra gradients in flight when it runs as a checkpoint replay
  // Batch-independent bytes alive only while its backward (and a checkpoint's replay) runs: a
  // broadcast term's gradient summed over the batch (AIFS's edge term e), the gradient of a
  // batch-independent input accumulated over the blocks that read it. Per block, not per sample: the
  // step's peak is then the highest of one line per block (analytic.cpp).
  double fixed_backward = 0;
  // Batch-independent bytes alive while its forward (or a replay) runs: a term computed once for
  // the batch (AIFS's e).
  double fixed_forward = 0;
  // Its forward's end can be the step's peak without checkpointing as well: its layers' `temp`
  // holds locals that outlive the statements making them (nothing saves them; they are freed when
  // the block returns), so the forward is walked too (analytic.cpp).
  bool forward_peak = false;
  double saved() const {
    double s = 0;
    for (const Layer& l : layers) s += l.saved;
    return s;
  }
};

// A model's activations: its blocks in forward order, and the size of one predicted state.
struct ModelMemory {
  std::vector<Block> blocks;
  double output = 0;  // per sample elements of one predicted state
  // The model-parallel ranks this is one rank's memory of (1: the whole grid).
  int64_t ranks = 1;
};

// The layer kinds. `in` / `out` are per-sample element counts of the layer's input / output.
// Conv2d / Linear / the operand of a matmul: saves its input — under autocast a fresh bf16 copy.
inline Layer conv_or_linear(const Widths& w, double in, double out) { return {"conv/linear", in * w.low, in * w.high, out * w.low}; }
// GroupNorm / LayerNorm: the input (cast up to the parameters' dtype) and fp32 mean and rstd per group.
inline Layer norm(const Widths& w, double in, double groups) { return {"norm", in * w.high + 8 * groups, in * w.high, in * w.high}; }
// SiLU / GELU: the input, in the width it runs in.
inline Layer activation(double in, double width) { return {"activation", in * width, in * width, in * width}; }
// Softmax: its output.
inline Layer softmax(double elems, double width) { return {"softmax", elems * width, elems * width, elems * width}; }
// max_pool2d: int64 indices per output element (its input is the previous block's kept output).
inline Layer max_pool(double in, double width) { return {"max_pool", in / 4 * 8, in * width, in / 4 * width}; }
// A tensor the next block (or a skip connection) keeps: the block's output.
inline Layer keep(double elems, double width) { return {"keep", elems * width, -1, 0}; }
// index_select / index_add / cat / upsample / residual add: save only indices or sizes; their
// backward allocates a gradient of the input's size.
inline Layer gather(double in, double width, double out_temp = 0) { return {"gather", 0, in * width, out_temp}; }

// The transformer pieces the ViT and FourCastNet share (models/vit, models/fourcastnet).
// The MLP half both blocks end with, x + fc2(gelu(fc1(norm2(x)))), on N tokens (ND = N x width,
// NH = N x hidden), and the block output kept in the stream's width.
void add_mlp_half(Block& b, const Widths& w, double N, double ND, double NH, double stream);
// The patch embedding: a p x p conv with stride p from the padded input to N tokens of width D,
// plus the positional embedding promoting the stream to `stream`.
Block patch_embed_block(int64_t in_channels, const Widths& w, int64_t p, int64_t D, double N, double stream);

}  // namespace wxtrain::models
