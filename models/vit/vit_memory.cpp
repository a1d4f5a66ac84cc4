// estimate --analytic for the ViT (models/vit/vit.cpp), layer by layer.
#include <string>

#include "models/vit/vit.h"

namespace wxtrain::models {

int64_t vit_parameter_count(const ViTOptions& c, const ModelShape& s) {
  const int64_t D = c.embed_dim, p = c.patch_size, hidden = mlp_hidden(c.embed_dim, c.mlp_ratio);
  const int64_t patches = ceil_div(s.lat, p) * ceil_div(s.lon, p);
  const int64_t k = s.conditional_noise;  // noise channels taken out of the input, into the norms
  const int64_t embed = conv_params(s.in_channels - k, D, p, true) + patches * D;  // + pos_embed
  const int64_t norms = k > 0 ? 2 * conditional_norm_params(D, k) : 2 * norm_params(D);
  const int64_t block = norms + linear_params(D, 3 * D) + linear_params(D, D) + linear_params(D, hidden) +
                        linear_params(hidden, D);
  const int64_t head = norm_params(D) + linear_params(D, p * p * s.out_channels);
  return embed + c.depth * block + head + (k > 0 ? noise_mlp_params(k) : 0);
}

ModelMemory vit_activation_memory(const ViTOptions& c, const ModelShape& s, const FormulaSettings& f) {
  const Widths& w = f.widths;
  ModelMemory m;
  const int64_t p = c.patch_size, D = c.embed_dim, hidden = mlp_hidden(c.embed_dim, c.mlp_ratio);
  const double N = static_cast<double>(ceil_div(s.lat, p) * ceil_div(s.lon, p));
  const double ND = N * D, NH = N * hidden, scores = static_cast<double>(c.heads) * N * N;
  // The residual stream is fp32 under autocast: the bf16 patch tokens plus the fp32 pos_embed promote.
  const double stream = w.high;

  const double k = static_cast<double>(s.conditional_noise);
  m.blocks.push_back(patch_embed_block(s.in_channels - s.conditional_noise, w, p, D, N, stream));
  // Conditional-norm noise: the noise MLP on the tokens (outside every block, never checkpointed),
  // whose output each block reads; a conditional norm saves, beyond a LayerNorm, the normalised
  // tensor and 1 + scale(noise) for their product, and the noise embedding for its two Linears.
  if (k > 0) {
    m.blocks.push_back(noise_injector_block(w, N, k, f.checkpointing));
  }
  const Layer conditional{"conditional norm", 2 * N * D * stream + N * k * w.high, 0, 2 * N * D * stream};

  for (int64_t i = 0; i < c.depth; ++i) {
    Block b;
    b.name = "block" + std::to_string(i);
    // x + proj(softmax(q k^T) v), q k v from qkv(norm1(x)); norm1's input is the block input.
    b.layers.push_back({"norm", 8 * N, ND * stream, ND * stream});
    if (k > 0) b.layers.push_back(conditional);
    b.layers.push_back(conv_or_linear(w, ND, 3 * ND));                   // qkv
    b.layers.push_back({"matmul q k", 2 * ND * w.low, 3 * ND * w.low, scores * w.low});  // contiguous q, k copies
    if (w.low < w.high) {
      // Under autocast the GPU step takes the softmax in fp32, as CUDA's autocast does
      // (ops::cuda_autocast_fp32): the bf16 scores cast up (a temporary), the fp32 output saved,
      // and its bf16 copy saved again by the attn x v matmul; backward holds the fp32 gradient and
      // its bf16 cast for the scores' matmul. Within 2.3% of the trace (tests/estimator).
      b.layers.push_back({"softmax", scores * w.high, scores * (w.high + w.low), scores * (w.high + w.high)});
      b.layers.push_back({"matmul attn v", ND * w.low + scores * w.low, scores * w.low, ND * w.low + scores * w.low});
    } else {
      b.layers.push_back(softmax(scores, w.low));
      b.layers.push_back({"matmul attn v", ND * w.low, scores * w.low, ND * w.low});  // the v copy
    }
    b.layers.push_back(conv_or_linear(w, ND, ND));                        // proj on the merged heads (a copy)
    add_mlp_half(b, w, N, ND, NH, stream);  // norm2 keeps the first residual sum
    if (k > 0) b.layers.push_back(conditional);
    b.inputs = ND * stream + N * k * w.high;  // with the noise embedding it reads
    b.carry = ND * stream;  // the residual branch's gradient
    b.output_grad = ND * stream;
    b.weights = static_cast<double>(linear_params(D, 3 * D) + linear_params(D, D) + linear_params(D, hidden) +
                                    linear_params(hidden, D));
    m.blocks.push_back(b);
  }

  Block head;
  head.name = "head";
  head.layers.push_back(norm(w, 0, N));
  head.layers.push_back(conv_or_linear(w, ND, N * p * p * s.out_channels));
  head.weights = static_cast<double>(linear_params(D, p * p * s.out_channels));
  head.output = head.output_grad = N * p * p * s.out_channels * w.low;
  m.blocks.push_back(head);
  m.output = static_cast<double>(s.out_channels) * s.lat * s.lon;
  return m;
}

}  // namespace wxtrain::models
