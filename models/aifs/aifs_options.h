#pragma once
// [model] keys of AIFS (model.name = "aifs"), ECMWF's encoder-processor-decoder as anemoi-models
// 0.19 builds it (AnemoiModelEncProcDec), read by aifs_schema(). Defaults are a small model for a
// CPU; the published sizes are the presets (aifs-single-1.0).
#include <cstdint>
#include <string>

#include "core/model_options.h"

namespace wxtrain::models {

struct AifsOptions : ModelOptionsOf<AifsOptions> {
  // Keys named as anemoi's config names them (num_channels, num_heads, mlp_hidden_ratio).
  int64_t num_channels = 128;      // model.num_channels: latent width of mappers and processor (AIFS: 1024)
  std::string mapper = "graph_transformer";  // model.mapper: encoder and decoder kind
  std::string processor = "transformer";     // model.processor: processor kind
  int64_t processor_layers = 4;    // model.processor_layers (AIFS: 16)
  int64_t num_heads = 8;           // model.num_heads: processor attention heads (AIFS: 16)
  int64_t mapper_num_heads = 8;    // model.mapper_num_heads: encoder/decoder graph-attention heads (AIFS: 16)
  double mlp_hidden_ratio = 4;     // model.mlp_hidden_ratio: MLP hidden width / num_channels (rounded)
  std::string hidden_grid = "o8";  // model.hidden_grid: octahedral reduced Gaussian grid of the hidden nodes (AIFS: o96)
  int64_t window_size = 512;       // model.window_size: processor sliding-window half width over the hidden nodes (0 = all)
  double cutoff_factor = 0.6;      // model.cutoff_factor: encoder cut-off radius / hidden grid reference distance
  int64_t max_neighbours = 64;     // model.max_neighbours: encoder edges kept per hidden node (nearest)
  int64_t decoder_neighbours = 3;  // model.decoder_neighbours: hidden nodes each grid cell reads from (KNN)
  int64_t data_trainable = 8;      // model.data_trainable: learned features per grid cell
  int64_t hidden_trainable = 8;    // model.hidden_trainable: learned features per hidden node
  int64_t edge_trainable = 8;      // model.edge_trainable: learned features per encoder/decoder edge
  bool latent_skip = true;         // model.latent_skip: processor output + its input
  // Chunks (anemoi's num_chunks): a mapper computes its receivers in this many groups one after
  // another (each its own checkpoint when checkpointed); the processor checkpoints this many groups
  // of layers. Outputs are the same for any count.
  int64_t encoder_chunks = 1;      // model.encoder_chunks
  int64_t processor_chunks = 1;    // model.processor_chunks (divides processor_layers)
  int64_t decoder_chunks = 1;      // model.decoder_chunks
  // With train.checkpointing: which components are checkpointed (anemoi checkpoints all three).
  bool checkpoint_encoder = true;    // model.checkpoint_encoder
  bool checkpoint_processor = true;  // model.checkpoint_processor
  bool checkpoint_decoder = true;    // model.checkpoint_decoder
};

ModelSchema aifs_schema();

}  // namespace wxtrain::models
