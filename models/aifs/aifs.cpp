#include "models/aifs/aifs.h"

#include <ATen/ExpandUtils.h>
#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <utility>

#include "core/error.h"

namespace wxtrain::models {
namespace {

constexpr double kRadians = 3.14159265358979323846 / 180.0;

torch::nn::LayerNorm layer_norm(int64_t channels) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({channels}));  // eps 1e-5, as torch.nn.LayerNorm
}

// anemoi's node attributes: [sin lat, sin lon, cos lat, cos lon] of the coordinates in radians.
torch::Tensor sin_cos(const LatLonPoints& p) {
  torch::Tensor t = torch::empty({p.size(), 4}, torch::kFloat);
  float* out = t.data_ptr<float>();
  for (int64_t i = 0; i < p.size(); ++i) {
    // float32 radians first, as anemoi holds its coordinates.
    const float lat = static_cast<float>(p.latitudes[static_cast<size_t>(i)] * kRadians);
    const float lon = static_cast<float>(p.longitudes[static_cast<size_t>(i)] * kRadians);
    out[4 * i] = std::sin(lat), out[4 * i + 1] = std::sin(lon), out[4 * i + 2] = std::cos(lat), out[4 * i + 3] = std::cos(lon);
  }
  return t;
}

// f() inside a named span of at::RecordFunction's user scope, so that a profiler (PyTorch's, or
// bench/aifs_step_parts.cpp, which also charges each span's backward to it by the autograd nodes'
// sequence numbers) can say where a step's time goes: encoder, each processor layer's attention and
// MLP, the halo exchanges, decoder. With no profiler listening it costs one flag check.
template <typename F>
auto span(const char* name, F&& f) {
  RECORD_USER_SCOPE(name);
  return f();
}

}  // namespace

torch::nn::Sequential anemoi_mlp(int64_t in, int64_t hidden, int64_t out) {
  return torch::nn::Sequential(torch::nn::Linear(in, hidden),
                               torch::nn::GELU(),  // torch.nn.GELU(): the exact erf form
                               torch::nn::Linear(hidden, out));
}

// ---- the mapper ----

GraphTransformerMapperImpl::GraphTransformerMapperImpl(int64_t src_channels, int64_t src_nodes, int64_t dst_channels,
                                                       int64_t dst_nodes, int64_t channels, int64_t heads,
                                                       int64_t mlp_hidden, int64_t edge_dim, int64_t out_channels)
    : heads(heads), head_dim(channels / heads) {
  TORCH_CHECK(channels % heads == 0, "aifs: channels ", channels, " not divisible by heads ", heads);
  auto no_bias = [](int64_t in, int64_t out) { return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false)); };
  // The backward mapper's source is the processor's latent: no embedding when widths agree (anemoi).
  if (src_channels > 0) emb_nodes_src = register_module("emb_nodes_src", torch::nn::Linear(src_channels, channels));
  if (src_nodes > 0) emb_nodes_src_position = register_module("emb_nodes_src_position", no_bias(src_nodes, channels));
  // The receivers' bias sits on the per-sample Linear when there is one, else on the node features'.
  if (dst_channels > 0) emb_nodes_dst = register_module("emb_nodes_dst", torch::nn::Linear(dst_channels, channels));
  if (dst_nodes > 0)
    emb_nodes_dst_position = register_module(
        "emb_nodes_dst_position",
        dst_channels > 0 ? no_bias(dst_nodes, channels) : torch::nn::Linear(dst_nodes, channels));
  lin_key = register_module("lin_key", torch::nn::Linear(channels, channels));
  lin_query = register_module("lin_query", torch::nn::Linear(channels, channels));
  lin_value = register_module("lin_value", torch::nn::Linear(channels, channels));
  lin_self = register_module("lin_self", torch::nn::Linear(channels, channels));
  lin_edge = register_module("lin_edge", torch::nn::Linear(edge_dim, channels));
  projection = register_module("projection", torch::nn::Linear(channels, channels));
  layer_norm_attention_src = register_module("layer_norm_attention_src", layer_norm(channels));
  layer_norm_attention_dest = register_module("layer_norm_attention_dest", layer_norm(channels));
  layer_norm_mlp_dst = register_module("layer_norm_mlp_dst", layer_norm(channels));
  node_dst_mlp = register_module("node_dst_mlp", anemoi_mlp(channels, mlp_hidden, channels));
  if (out_channels > 0)
    node_data_extractor = register_module(
        "node_data_extractor", torch::nn::Sequential(layer_norm(channels), torch::nn::Linear(channels, out_channels)));
}

namespace {

// Inference (autograd off) computes `a op= b` in place where the out-of-place `a op b` would give a
// tensor of a's shape and dtype: the same values (IEEE add and multiply commute), one tensor fewer
// alive. With autograd on, the out-of-place op, so that training runs exactly the ops it ran before
// (the saved tensors and the backward are autograd's, untouched). The dtype check keeps autocast's
// promotions (a bf16 tensor times an fp32 one is fp32 out of place).
bool fuse(const torch::Tensor& a, const torch::Tensor& b) {
  return !torch::GradMode::is_enabled() && at::result_type(a, b) == a.scalar_type() &&
         at::infer_size(a.sizes(), b.sizes()) == a.sizes().vec();
}
torch::Tensor add_or_fuse(torch::Tensor a, const torch::Tensor& b) { return fuse(a, b) ? a.add_(b) : a + b; }
torch::Tensor mul_or_fuse(torch::Tensor a, const torch::Tensor& b) { return fuse(a, b) ? a.mul_(b) : a * b; }
torch::Tensor div_or_fuse(torch::Tensor a, const torch::Tensor& b) { return fuse(a, b) ? a.div_(b) : a / b; }

// anemoi_mlp (Linear, GELU, Linear) on a tensor the caller hands over (a temporary, or moved): in
// inference its input is let go once the first Linear has read it and GELU runs in place (the same
// kernel, the same values) unless autocast picks its dtype, so that one hidden-sized tensor is
// alive, not three (the input, the Linear's output and GELU's). With autograd on, the module's
// forward as before.
torch::Tensor run_mlp(torch::nn::Sequential mlp, torch::Tensor x) {
  if (torch::GradMode::is_enabled()) return mlp->forward(x);
  torch::Tensor h = mlp->ptr(0)->as<torch::nn::Linear>()->forward(x);
  x.reset();
  if (at::autocast::is_autocast_enabled(h.device().type()))
    h = mlp->ptr(1)->as<torch::nn::GELU>()->forward(h);
  else
    at::gelu_(h);  // torch::nn::GELU's default: the exact erf form
  return mlp->ptr(2)->as<torch::nn::Linear>()->forward(h);
}

// Training (autograd on): the forward as it has always run, statement by statement, so that the
// saved tensors, the backward and the step's memory are exactly what they were (the equality tests
// against anemoi-models, the training formulas of aifs_memory.cpp).
torch::Tensor mapper_forward_autograd(GraphTransformerMapperImpl& m, const torch::Tensor& src_in,
                                      const torch::Tensor& src_nodes, const torch::Tensor& dst_in,
                                      const torch::Tensor& dst_nodes, const torch::Tensor& edge_attr,
                                      const torch::Tensor& senders, const torch::Tensor& receivers) {
  // Embeddings: [B, N, C] per sample plus [N, C] of the node features, broadcast.
  auto embed = [](torch::nn::Linear per_sample, torch::nn::Linear nodes, const torch::Tensor& x,
                  const torch::Tensor& f) {
    torch::Tensor out;
    if (per_sample) out = per_sample->forward(x);
    if (nodes) out = out.defined() ? out + nodes->forward(f) : nodes->forward(f);
    return out;
  };
  torch::Tensor src = m.emb_nodes_src || m.emb_nodes_src_position ? embed(m.emb_nodes_src, m.emb_nodes_src_position, src_in, src_nodes)
                                                              : src_in;
  torch::Tensor dst = embed(m.emb_nodes_dst, m.emb_nodes_dst_position, dst_in, dst_nodes);
  const int64_t B = std::max(src.dim() == 3 ? src.size(0) : 1, dst.dim() == 3 ? dst.size(0) : 1);
  if (src.dim() == 2) src = src.unsqueeze(0).expand({B, -1, -1});
  if (dst.dim() == 2) dst = dst.unsqueeze(0).expand({B, -1, -1});
  const int64_t Nr = dst.size(1), E = senders.size(0), H = m.heads, d = m.head_dim;
  const torch::Tensor xs = m.layer_norm_attention_src->forward(src);
  const torch::Tensor xd = m.layer_norm_attention_dest->forward(dst);
  const torch::Tensor x_r = m.lin_self->forward(xd);
  const torch::Tensor q = m.lin_query->forward(xd).view({B, Nr, H, d});
  const torch::Tensor k = m.lin_key->forward(xs).view({B, -1, H, d});
  const torch::Tensor v = m.lin_value->forward(xs).view({B, -1, H, d});
  const torch::Tensor e = m.lin_edge->forward(edge_attr).view({1, E, H, d});  // the same for every sample
  // PyG's GraphTransformerConv message and softmax (torch_geometric.utils.softmax): per receiver,
  // alpha = softmax(q_i . (k_j + e) / sqrt(d)) less the receiver's max (no gradient through it),
  // divided by the sum + 1e-16; messages alpha (v_j + e) summed into the receivers.
  const torch::Tensor key_j = k.index_select(1, senders) + e;
  const torch::Tensor alpha = (q.index_select(1, receivers) * key_j).sum(-1) / std::sqrt(static_cast<double>(d));
  const torch::Tensor index = receivers.view({1, E, 1}).expand({B, E, H});
  const torch::Tensor max = torch::full({B, Nr, H}, -std::numeric_limits<float>::infinity(), alpha.options())
                                .scatter_reduce(1, index, alpha.detach(), "amax", /*include_self=*/false);
  const torch::Tensor ex = (alpha - max.index_select(1, receivers)).exp();
  const torch::Tensor sum = torch::zeros({B, Nr, H}, ex.options()).index_add(1, receivers, ex) + 1e-16;
  const torch::Tensor a = ex / sum.index_select(1, receivers);
  const torch::Tensor messages = (v.index_select(1, senders) + e) * a.unsqueeze(-1);
  const torch::Tensor attention = torch::zeros({B, Nr, H, d}, messages.options()).index_add(1, receivers, messages);
  torch::Tensor out = m.projection->forward(attention.view({B, Nr, H * d}) + x_r) + dst;
  out = m.node_dst_mlp->forward(m.layer_norm_mlp_dst->forward(out)) + out;
  return m.node_data_extractor ? m.node_data_extractor->forward(out) : out;
}

}  // namespace

// Each intermediate is let go (reset, or a scope's end) once nothing reads it, as anemoi's Python
// frees a temporary when its expression is done: in inference the live set at each statement is
// what the computation needs, not every local the function made (issue 23: five edge-sized tensors
// at the messages' statement before, 1.6 M decoder edges x 1024 channels = 6.7 GB each in fp32 on
// AIFS Single). Inference only: with autograd on, mapper_forward_autograd above.
torch::Tensor GraphTransformerMapperImpl::forward(const torch::Tensor& src_in, const torch::Tensor& src_nodes,
                                                  const torch::Tensor& dst_in, const torch::Tensor& dst_nodes,
                                                  const torch::Tensor& edge_attr, const torch::Tensor& senders,
                                                  const torch::Tensor& receivers) {
  if (torch::GradMode::is_enabled())
    return mapper_forward_autograd(*this, src_in, src_nodes, dst_in, dst_nodes, edge_attr, senders, receivers);
  // Embeddings: [B, N, C] per sample plus [N, C] of the node features, broadcast.
  auto embed = [](torch::nn::Linear per_sample, torch::nn::Linear nodes, const torch::Tensor& x,
                  const torch::Tensor& f) {
    torch::Tensor out;
    if (per_sample) out = per_sample->forward(x);
    if (nodes) out = out.defined() ? add_or_fuse(out, nodes->forward(f)) : nodes->forward(f);
    return out;
  };
  torch::Tensor src = emb_nodes_src || emb_nodes_src_position ? embed(emb_nodes_src, emb_nodes_src_position, src_in, src_nodes)
                                                              : src_in;
  torch::Tensor dst = embed(emb_nodes_dst, emb_nodes_dst_position, dst_in, dst_nodes);
  const int64_t B = std::max(src.dim() == 3 ? src.size(0) : 1, dst.dim() == 3 ? dst.size(0) : 1);
  if (src.dim() == 2) src = src.unsqueeze(0).expand({B, -1, -1});
  if (dst.dim() == 2) dst = dst.unsqueeze(0).expand({B, -1, -1});
  const int64_t Nr = dst.size(1), E = senders.size(0), H = heads, d = head_dim;
  // The statements in the order training has always run them (the backward's accumulation order).
  torch::Tensor xs = layer_norm_attention_src->forward(src);
  src.reset();
  torch::Tensor xd = layer_norm_attention_dest->forward(dst);
  torch::Tensor x_r = lin_self->forward(xd);
  torch::Tensor q = lin_query->forward(xd).view({B, Nr, H, d});
  xd.reset();
  torch::Tensor k = lin_key->forward(xs).view({B, -1, H, d});
  torch::Tensor v = lin_value->forward(xs).view({B, -1, H, d});
  xs.reset();
  torch::Tensor e = lin_edge->forward(edge_attr).view({1, E, H, d});  // the same for every sample
  // PyG's GraphTransformerConv message and softmax (torch_geometric.utils.softmax): per receiver,
  // alpha = softmax(q_i . (k_j + e) / sqrt(d)) less the receiver's max (no gradient through it),
  // divided by the sum + 1e-16; messages alpha (v_j + e) summed into the receivers.
  torch::Tensor alpha;
  {
    torch::Tensor key_j = add_or_fuse(k.index_select(1, senders), e);
    k.reset();
    torch::Tensor product = mul_or_fuse(q.index_select(1, receivers), key_j);
    key_j.reset(), q.reset();
    alpha = product.sum(-1);
    product.reset();
    alpha = fuse(alpha, alpha) ? alpha.div_(std::sqrt(static_cast<double>(d))) : alpha / std::sqrt(static_cast<double>(d));
  }
  torch::Tensor a;
  {
    const torch::Tensor index = receivers.view({1, E, 1}).expand({B, E, H});
    torch::Tensor max = torch::full({B, Nr, H}, -std::numeric_limits<float>::infinity(), alpha.options())
                            .scatter_reduce(1, index, alpha.detach(), "amax", /*include_self=*/false);
    alpha = fuse(alpha, alpha) ? alpha.sub_(max.index_select(1, receivers)) : alpha - max.index_select(1, receivers);
    max.reset();
    // Out of place even in inference: autocast may run exp in fp32 (an edge x heads tensor, small).
    torch::Tensor ex = alpha.exp();
    alpha.reset();
    torch::Tensor sum = torch::zeros({B, Nr, H}, ex.options());
    sum = fuse(sum, sum) ? sum.index_add_(1, receivers, ex) : sum.index_add(1, receivers, ex);
    sum = fuse(sum, sum) ? sum.add_(1e-16) : sum + 1e-16;
    a = div_or_fuse(ex, sum.index_select(1, receivers));
  }
  torch::Tensor attention;
  {
    torch::Tensor messages = add_or_fuse(v.index_select(1, senders), e);
    v.reset(), e.reset();
    messages = mul_or_fuse(messages, a.unsqueeze(-1));
    a.reset();
    attention = torch::zeros({B, Nr, H, d}, messages.options());
    attention = fuse(attention, attention) ? attention.index_add_(1, receivers, messages)
                                           : attention.index_add(1, receivers, messages);
  }
  attention = add_or_fuse(attention.view({B, Nr, H * d}), x_r);
  x_r.reset();
  torch::Tensor out = projection->forward(attention);
  attention.reset();
  out = add_or_fuse(out, dst);
  dst.reset();
  // mlp(norm(out)) + out; in place out + mlp(norm(out)), the same sum.
  {
    torch::Tensor mlp = run_mlp(node_dst_mlp, layer_norm_mlp_dst->forward(out));
    out = fuse(out, mlp) ? out.add_(mlp) : mlp + out;
  }
  return node_data_extractor ? node_data_extractor->forward(out) : out;
}

// ---- the processor ----

TransformerLayerImpl::TransformerLayerImpl(int64_t channels, int64_t heads, int64_t mlp_hidden, int64_t window,
                                           int64_t condition)
    : heads(heads), window(window) {
  TORCH_CHECK(channels % heads == 0, "aifs: channels ", channels, " not divisible by heads ", heads);
  if (condition > 0) {
    cond_norm_attention = register_module("layer_norm_attention", ConditionalLayerNorm(channels, condition));
    cond_norm_mlp = register_module("layer_norm_mlp", ConditionalLayerNorm(channels, condition));
  } else {
    layer_norm_attention = register_module("layer_norm_attention", layer_norm(channels));
    layer_norm_mlp = register_module("layer_norm_mlp", layer_norm(channels));
  }
  auto no_bias = [&] { return torch::nn::Linear(torch::nn::LinearOptions(channels, channels).bias(false)); };
  lin_q = register_module("lin_q", no_bias());
  lin_k = register_module("lin_k", no_bias());
  lin_v = register_module("lin_v", no_bias());
  projection = register_module("projection", torch::nn::Linear(channels, channels));
  mlp = register_module("mlp", anemoi_mlp(channels, mlp_hidden, channels));
}

namespace {

// Overlapping slabs of x along dim 2 (x.narrow(2, starts[i], lengths[i]): views, as narrow's), with
// one backward for all of them: their gradients added into one tensor of x's size. Autograd's own
// backward of each narrow is a gradient of x's whole size, zeros but the slab, summed with the
// others in its input buffers: per layer blocks x whole-size work, quadratic in the hidden nodes
// (bench/sliding_window_backward.py; at O32 it was a quarter of the training step,
// bench/results/model_parallel_step_aifs_2026-11-27). The slabs stay views: what the attention
// saves for backward is what it saved before.
class OverlappingSlabs : public torch::autograd::Function<OverlappingSlabs> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                                const std::vector<int64_t>& starts, const std::vector<int64_t>& lengths) {
    ctx->saved_data["starts"] = starts;
    ctx->saved_data["lengths"] = lengths;
    ctx->saved_data["sizes"] = x.sizes().vec();
    torch::autograd::variable_list out;
    for (size_t i = 0; i < starts.size(); ++i) out.push_back(x.narrow(2, starts[i], lengths[i]));
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const std::vector<int64_t> starts = ctx->saved_data["starts"].toIntVector();
    const std::vector<int64_t> lengths = ctx->saved_data["lengths"].toIntVector();
    torch::Tensor grad;
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined()) continue;
      if (!grad.defined()) grad = torch::zeros(ctx->saved_data["sizes"].toIntVector(), grads[i].options());
      grad.narrow(2, starts[i], lengths[i]).add_(grads[i]);
    }
    return {grad, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor sliding_window_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                       int64_t window, int64_t q_offset) {
  const int64_t N = q.size(2), K = k.size(2);
  if (q_offset == 0 && K == N && (window <= 0 || window >= N - 1)) return at::scaled_dot_product_attention(q, k, v);
  if (window <= 0 || window >= K) window = K;  // every key
  // Query block [a, b) sees keys [a + q_offset - w, b - 1 + q_offset + w]: a band mask on that slab.
  const int64_t block = std::max<int64_t>(std::min(window, K), 64);
  std::vector<int64_t> starts, lengths;
  for (int64_t a = 0; a < N; a += block) {
    const int64_t b = std::min(N, a + block);
    const int64_t k0 = std::max<int64_t>(0, a + q_offset - window), k1 = std::min(K, b + q_offset + window);
    starts.push_back(k0), lengths.push_back(k1 - k0);
  }
  // With autograd recording, the blocks of q by one split and the slabs of k and v by
  // OverlappingSlabs, so that backward moves block- and slab-sized gradients; otherwise plain views.
  const bool record = torch::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
  const std::vector<torch::Tensor> qs = record ? q.split(block, 2) : std::vector<torch::Tensor>{};
  const torch::autograd::variable_list ks = record ? OverlappingSlabs::apply(k, starts, lengths) : torch::autograd::variable_list{};
  const torch::autograd::variable_list vs = record ? OverlappingSlabs::apply(v, starts, lengths) : torch::autograd::variable_list{};
  std::vector<torch::Tensor> parts;
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t a = static_cast<int64_t>(i) * block, b = std::min(N, a + block), k0 = starts[i], n = lengths[i];
    const torch::Tensor qi = torch::arange(a + q_offset, b + q_offset, torch::kLong).view({-1, 1});
    const torch::Tensor ki = torch::arange(k0, k0 + n, torch::kLong).view({1, -1});
    const torch::Tensor mask = ((qi - ki).abs() <= window).to(q.device());
    parts.push_back(record ? at::scaled_dot_product_attention(qs[i], ks[i], vs[i], mask)
                           : at::scaled_dot_product_attention(q.narrow(2, a, b - a), k.narrow(2, k0, n),
                                                              v.narrow(2, k0, n), mask));
  }
  return torch::cat(parts, 2);
}

torch::Tensor TransformerLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& cond, const WindowKeys& keys) {
  const int64_t B = x.size(0), N = x.size(1), C = x.size(2), d = C / heads;
  TORCH_CHECK(cond.defined() == static_cast<bool>(cond_norm_attention),
              "aifs: a processor layer with conditional norms needs the noise conditioning, and only it");
  auto norm = [&](torch::nn::LayerNorm plain, ConditionalLayerNorm conditional, const torch::Tensor& t) {
    return conditional ? conditional->forward(t, cond) : plain->forward(t);
  };
  if (torch::GradMode::is_enabled()) {  // training: as it has always run (see the mapper's)
    torch::Tensor y = span("aifs.processor.attention", [&] {
      const torch::Tensor h = norm(layer_norm_attention, cond_norm_attention, x);
      const torch::Tensor hk = keys.fetch ? keys.fetch(h) : h;
      auto split = [&](const torch::Tensor& t) { return t.view({B, t.size(1), heads, d}).transpose(1, 2); };
      const torch::Tensor o = sliding_window_attention(split(lin_q->forward(h)), split(lin_k->forward(hk)),
                                                       split(lin_v->forward(hk)), window, keys.fetch ? keys.before : 0);
      return x + projection->forward(o.transpose(1, 2).reshape({B, N, C}));
    });
    return span("aifs.processor.mlp", [&] { return y + mlp->forward(norm(layer_norm_mlp, cond_norm_mlp, y)); });
  }
  // Inference: the attention's inputs and output are let go once read (scopes), as the mapper's.
  torch::Tensor y = span("aifs.processor.attention", [&] {
    torch::Tensor o;
    {
      const torch::Tensor h = norm(layer_norm_attention, cond_norm_attention, x);
      // Model parallelism: the keys and values are of the range widened by the window, fetched from
      // the ranks that own it (the queries are this rank's own nodes).
      const torch::Tensor hk = keys.fetch ? keys.fetch(h) : h;
      auto split = [&](const torch::Tensor& t) { return t.view({B, t.size(1), heads, d}).transpose(1, 2); };  // [B, H, N, d]
      o = sliding_window_attention(split(lin_q->forward(h)), split(lin_k->forward(hk)), split(lin_v->forward(hk)),
                                   window, keys.fetch ? keys.before : 0);
    }
    o = o.transpose(1, 2).reshape({B, N, C});
    return x + projection->forward(o);
  });
  return span("aifs.processor.mlp", [&] {
    torch::Tensor m = run_mlp(mlp, norm(layer_norm_mlp, cond_norm_mlp, y));
    return fuse(y, m) ? y.add_(m) : y + m;  // in inference y += mlp(norm(y)), the same sum
  });
}

// ---- chunks ----

std::vector<EdgeChunk> chunk_edges(const BipartiteEdges& edges, int64_t receivers, int64_t chunks) {
  chunks = std::max<int64_t>(1, std::min(chunks, std::max<int64_t>(receivers, 1)));
  const torch::Tensor r = edges.receivers.contiguous(), s = edges.senders.contiguous();
  const int64_t* rp = r.data_ptr<int64_t>();
  const int64_t E = r.size(0);
  std::vector<EdgeChunk> out;
  int64_t dst = 0, e = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    // [3, 3, 2, 2] for 10 in 4: the first (receivers % chunks) groups one larger.
    const int64_t size = receivers / chunks + (c < receivers % chunks ? 1 : 0);
    EdgeChunk chunk;
    chunk.dst_begin = dst, chunk.dst_end = dst + size, chunk.edge_begin = e;
    while (e < E && rp[e] < chunk.dst_end) ++e;
    chunk.edge_end = e;
    const torch::Tensor cs = s.narrow(0, chunk.edge_begin, e - chunk.edge_begin);
    auto [unique, inverse] = at::_unique(cs, /*sorted=*/true, /*return_inverse=*/true);
    chunk.senders = unique;
    chunk.local_senders = inverse;
    chunk.local_receivers = r.narrow(0, chunk.edge_begin, e - chunk.edge_begin) - chunk.dst_begin;
    out.push_back(std::move(chunk));
    dst += size;
  }
  return out;
}

// ---- the model ----

AifsImpl::AifsImpl(const AifsOptions& options, const ModelShape& shape) : WeatherModelImpl(shape), options_(options) {
  const CellCoordinates cells = cell_coordinates(shape);
  data_.latitudes = cells.latitudes;
  data_.longitudes = cells.longitudes;
  hidden_ = octahedral_grid(octahedral_number(options.hidden_grid, "model.hidden_grid"));
  encoder_edges_ = cutoff_edges(data_, hidden_, options.cutoff_factor, options.max_neighbours);
  decoder_edges_ = knn_edges(hidden_, data_, options.decoder_neighbours);
  if (encoder_edges_.edges() == 0)
    throw ConfigError("model.cutoff_factor = " + std::to_string(options.cutoff_factor) + ": no grid cell lies within "
                      "the cut-off radius of any hidden node of " + options.hidden_grid + "; raise it or use a finer grid");
  // Buffers: they move with the model and land in checkpoints.
  encoder_edges_.senders = register_index_buffer("encoder_senders", encoder_edges_.senders);
  encoder_edges_.receivers = register_index_buffer("encoder_receivers", encoder_edges_.receivers);
  encoder_edges_.features = register_buffer("encoder_edge_features", encoder_edges_.features);
  decoder_edges_.senders = register_index_buffer("decoder_senders", decoder_edges_.senders);
  decoder_edges_.receivers = register_index_buffer("decoder_receivers", decoder_edges_.receivers);
  decoder_edges_.features = register_buffer("decoder_edge_features", decoder_edges_.features);
  latlons_data_ = register_buffer("latlons_data", sin_cos(data_));
  latlons_hidden_ = register_buffer("latlons_hidden", sin_cos(hidden_));
  const int64_t C = options.num_channels, mlp = aifs_mlp_hidden(options);
  const int64_t cell_features = 4 + options.data_trainable, hidden_features = 4 + options.hidden_trainable;
  const int64_t edge_dim = 3 + options.edge_trainable;
  // Conditional-norm noise: the last k input channels are noise fields, not read by the mappers.
  const int64_t k = shape.conditional_noise, in = shape.in_channels - k;
  if (k < 0 || in <= 0)
    throw ConfigError("aifs: " + std::to_string(k) + " conditional noise channel(s) of " +
                      std::to_string(shape.in_channels) + " input channels leave no input");
  encoder_ = register_block("encoder", GraphTransformerMapper(in, cell_features, 0, hidden_features, C,
                                                              options.mapper_num_heads, mlp, edge_dim, /*out_channels=*/0));
  if (k > 0) {
    // anemoi's module path noise_injector.noise_mlp, so that state_dicts keep its names.
    noise_injector_ = register_block("noise_injector", NoiseInjector(k));
  }
  for (int64_t i = 0; i < options.processor_layers; ++i)
    processor_.push_back(register_block("processor" + std::to_string(i),
                                        TransformerLayer(C, options.num_heads, mlp, options.window_size, k)));
  decoder_ = register_block("decoder", GraphTransformerMapper(0, 0, in, cell_features, C,
                                                              options.mapper_num_heads, mlp, edge_dim, shape.out_channels));
  // anemoi's TrainableTensor: zeros.
  if (options.data_trainable > 0)
    data_trainable_ = encoder_->register_parameter("data_trainable", torch::zeros({data_.size(), options.data_trainable}));
  if (options.hidden_trainable > 0)
    hidden_trainable_ =
        encoder_->register_parameter("hidden_trainable", torch::zeros({hidden_.size(), options.hidden_trainable}));
  if (options.edge_trainable > 0) {
    encoder_edge_trainable_ =
        encoder_->register_parameter("edge_trainable", torch::zeros({encoder_edges_.edges(), options.edge_trainable}));
    decoder_edge_trainable_ =
        decoder_->register_parameter("edge_trainable", torch::zeros({decoder_edges_.edges(), options.edge_trainable}));
  }
}

std::vector<ChannelAxis> AifsImpl::channel_axes() const {
  const int64_t last = 1;  // node_data_extractor: LayerNorm (0), Linear (1)
  // Conditional-norm noise channels are not columns of the embeddings: the axes skip them.
  const int64_t k = shape().conditional_noise;
  ChannelAxis src{"encoder.emb_nodes_src.weight", 1, true}, dst{"decoder.emb_nodes_dst.weight", 1, true};
  src.skip_begin = dst.skip_begin = shape().in_channels - k;
  src.skip_count = dst.skip_count = k;
  return {src,
          dst,
          {"decoder.node_data_extractor." + std::to_string(last) + ".weight", 0, false},
          {"decoder.node_data_extractor." + std::to_string(last) + ".bias", 0, false}};
}

torch::Tensor AifsImpl::run_mapper(const GraphTransformerMapper& mapper, const std::vector<EdgeChunk>& chunks,
                                   const std::vector<torch::Tensor>& inputs, bool checkpointed) const {
  // inputs: src [B, Ns, *], src node features [Ns, *], dst [B, Nr, *], dst node features [Nr, *],
  // edge features [E, *]; an undefined one is passed as an empty tensor (checkpoint needs tensors).
  std::shared_ptr<GraphTransformerMapperImpl> m = mapper.ptr();
  std::vector<torch::Tensor> outputs;
  for (const EdgeChunk& c : chunks) {
    const int64_t e0 = c.edge_begin, ne = c.edge_end - c.edge_begin, d0 = c.dst_begin, nd = c.dst_end - c.dst_begin;
    const torch::Tensor senders = c.senders, local_senders = c.local_senders, local_receivers = c.local_receivers;
    // Only the chunk's senders and edges (anemoi's GraphPartition.materialise): one chunk's
    // edge-sized tensors at a time.
    const ops::BlockFn fn = [m, senders, local_senders, local_receivers, e0, ne, d0, nd](
                                const std::vector<torch::Tensor>& in) {
      auto rows = [&](const torch::Tensor& t, int64_t dim, bool of_senders) {
        if (t.numel() == 0) return torch::Tensor();
        return of_senders ? t.index_select(dim, senders) : t.narrow(dim, d0, nd);
      };
      return std::vector<torch::Tensor>{m->forward(rows(in[0], 1, true), rows(in[1], 0, true), rows(in[2], 1, false),
                                                   rows(in[3], 0, false), in[4].narrow(0, e0, ne), local_senders,
                                                   local_receivers)};
    };
    std::vector<torch::Tensor> in;
    for (const torch::Tensor& t : inputs) in.push_back(t.defined() ? t : torch::empty({0}));
    outputs.push_back(run_block(*m, fn, in, checkpointed)[0]);
  }
  return outputs.size() == 1 ? outputs[0] : torch::cat(outputs, 1);
}

std::vector<std::vector<torch::Tensor>> AifsImpl::block_parameters() const {
  std::vector<std::vector<torch::Tensor>> blocks = WeatherModelImpl::block_parameters();
  const std::vector<torch::Tensor> outside = {data_trainable_, hidden_trainable_, encoder_edge_trainable_,
                                              decoder_edge_trainable_};
  for (auto& block : blocks)
    block.erase(std::remove_if(block.begin(), block.end(),
                               [&](const torch::Tensor& p) {
                                 return std::any_of(outside.begin(), outside.end(), [&](const torch::Tensor& o) {
                                   return o.defined() && o.unsafeGetTensorImpl() == p.unsafeGetTensorImpl();
                                 });
                               }),
                block.end());
  return blocks;
}

std::vector<int> aifs_hidden_owners(const LatLonPoints& data, const LatLonPoints& hidden,
                                    const std::vector<int64_t>& bounds) {
  const auto P = static_cast<int>(bounds.size()) - 1;
  TORCH_CHECK(P >= 1 && bounds.front() == 0 && bounds.back() == data.size(), "aifs: node shard bounds must run from 0 to "
              "the ", data.size(), " grid cells, one range per rank");
  // Equal ranges of the sequence, not the bands' latitudes: nearly all of a step's work in the
  // hidden space is per hidden node (the encoder's receivers are embedded, projected and MLP'd
  // whether or not an edge reaches them, and every processor layer attends for every node), so a
  // rank's share of the nodes is its share of that work. Cut at the bands' latitudes, the storm
  // data's bands (20-40 and 41-60 degrees N) held 1276 and 324 of O16's 1600 nodes and the second
  // rank waited in the halo exchanges for the first: two ranks took longer than one
  // (bench/results/model_parallel_step_aifs_2026-11-27). The range at the sequence's start (the
  // north) goes to the northernmost band, so that a band's cells are near its hidden nodes.
  double first_mean = 0, last_mean = 0;
  for (int64_t c = bounds[0]; c < bounds[1]; ++c) first_mean += data.latitudes[static_cast<size_t>(c)];
  for (int64_t c = bounds[static_cast<size_t>(P) - 1]; c < bounds[static_cast<size_t>(P)]; ++c)
    last_mean += data.latitudes[static_cast<size_t>(c)];
  first_mean /= static_cast<double>(std::max<int64_t>(1, bounds[1] - bounds[0]));
  last_mean /= static_cast<double>(std::max<int64_t>(1, bounds[static_cast<size_t>(P)] - bounds[static_cast<size_t>(P) - 1]));
  const bool north_first = first_mean >= last_mean;
  const int64_t nh = hidden.size();
  std::vector<int> owner(static_cast<size_t>(nh), 0);
  int64_t h = 0;
  for (int r = 0; r < P; ++r)  // r: the range's place in the sequence; the first nh % P one longer
    for (int64_t n = nh / P + (r < nh % P ? 1 : 0); n > 0; --n) owner[static_cast<size_t>(h++)] = north_first ? r : P - 1 - r;
  return owner;
}

std::vector<int> AifsImpl::hidden_owners(const std::vector<int64_t>& bounds) const {
  return aifs_hidden_owners(data_, hidden_, bounds);
}

AifsPartition aifs_partition(const LatLonPoints& data, const LatLonPoints& hidden_grid, const BipartiteEdges& encoder,
                             const BipartiteEdges& decoder, const std::vector<int64_t>& bounds, int r,
                             const AifsOptions& options) {
  const auto P = static_cast<int>(bounds.size()) - 1;
  TORCH_CHECK(P >= 1 && r >= 0 && r < P && bounds.front() == 0 && bounds.back() == data.size(),
              "aifs: node shard bounds must run from 0 to the ", data.size(), " grid cells, one range per rank");
  AifsPartition out;
  const NodePartition cells = NodePartition::from_bounds(bounds);
  const NodePartition hidden = NodePartition::from_owners(aifs_hidden_owners(data, hidden_grid, bounds), P);
  const auto& mine = hidden.owned[static_cast<size_t>(r)];
  TORCH_CHECK(!mine.empty() && mine.back() - mine.front() + 1 == static_cast<int64_t>(mine.size()),
              "aifs: rank ", r, "'s hidden nodes are not one contiguous range");
  out.cell_begin = bounds[static_cast<size_t>(r)];
  out.cell_count = bounds[static_cast<size_t>(r) + 1] - out.cell_begin;
  out.hidden_begin = mine.front();
  out.hidden_count = static_cast<int64_t>(mine.size());
  out.encoder = shard_graph(encoder.senders, encoder.receivers, cells, hidden, r);
  out.decoder = shard_graph(decoder.senders, decoder.receivers, hidden, cells, r);
  // The processor's window: each rank reads window_size nodes on either side of its range (every
  // node, when the window covers the sequence).
  const int64_t nh = hidden_grid.size();
  const int64_t w = options.window_size <= 0 || options.window_size >= nh - 1 ? nh : options.window_size;
  std::vector<std::vector<int64_t>> needs(static_cast<size_t>(P));
  for (int q = 0; q < P; ++q) {
    const auto& own = hidden.owned[static_cast<size_t>(q)];
    if (own.empty()) continue;
    auto& need = needs[static_cast<size_t>(q)];
    for (int64_t h = std::max<int64_t>(0, own.front() - w); h < own.front(); ++h) need.push_back(h);
    for (int64_t h = own.back() + 1; h < std::min(nh, own.back() + 1 + w); ++h) need.push_back(h);
  }
  out.window = halo_of(needs, hidden, r);
  out.window_before = std::min(w, out.hidden_begin);
  // Chunks of the local edges (receivers local, senders this rank's nodes then the halo).
  auto chunks = [&](const ShardedGraph& g, int64_t receivers, int64_t count) {
    BipartiteEdges local;
    local.senders = g.senders, local.receivers = g.receivers;
    return chunk_edges(local, receivers, count);
  };
  out.encoder_chunks = chunks(out.encoder, out.hidden_count, options.encoder_chunks);
  out.decoder_chunks = chunks(out.decoder, out.cell_count, options.decoder_chunks);
  return out;
}

void AifsImpl::set_node_shard(const NodeShard& shard) {
  const auto P = static_cast<int>(shard.bounds.size()) - 1;
  TORCH_CHECK(P >= 1 && shard.rank >= 0 && shard.rank < P && shard.bounds.front() == 0 &&
                  shard.bounds.back() == data_.size(),
              "aifs: node shard bounds must run from 0 to the ", data_.size(), " grid cells, one range per rank");
  // The noise is averaged onto the hidden nodes over the encoder's edges outside its mapper.
  TORCH_CHECK(shape().conditional_noise == 0,
              "aifs: model parallelism cannot train train.noise_injection = \"conditional_norm\" yet");
  const torch::Device device = encoder_edges_.senders.device();
  AifsPartition part = aifs_partition(data_, hidden_, encoder_edges_, decoder_edges_, shard.bounds, shard.rank, options_);
  cell_begin_ = part.cell_begin, cell_count_ = part.cell_count;
  hidden_begin_ = part.hidden_begin, hidden_count_ = part.hidden_count;
  encoder_shard_ = std::move(part.encoder);
  decoder_shard_ = std::move(part.decoder);
  window_halo_ = std::move(part.window);
  window_before_ = part.window_before;
  auto on_device = [&](std::vector<EdgeChunk> chunks) {
    for (EdgeChunk& c : chunks) {
      c.senders = c.senders.to(device);
      c.local_senders = c.local_senders.to(device);
      c.local_receivers = c.local_receivers.to(device);
    }
    return chunks;
  };
  local_encoder_chunks_ = on_device(std::move(part.encoder_chunks));
  local_decoder_chunks_ = on_device(std::move(part.decoder_chunks));
  std::vector<int64_t> sources(static_cast<size_t>(cell_count_));
  std::iota(sources.begin(), sources.end(), cell_begin_);
  sources.insert(sources.end(), encoder_shard_.halo_ids.begin(), encoder_shard_.halo_ids.end());
  encoder_source_ids_ = torch::tensor(sources, torch::kLong).to(device);
  for (ShardedGraph* g : {&encoder_shard_, &decoder_shard_, &window_halo_}) g->to(device);
  shard_ = shard;
  sharded_ = P > 1;
}

torch::Tensor AifsImpl::forward(torch::Tensor x) {
  const int64_t cells_here = sharded_ ? cell_count_ : data_.size();
  TORCH_CHECK(x.dim() == 4 && x.size(1) == shape().in_channels && x.size(2) * x.size(3) == cells_here &&
                  (sharded_ || (x.size(2) == shape().lat && x.size(3) == shape().lon)),
              "aifs: expected input [batch, ", shape().in_channels, ", ", shape().lat, ", ", shape().lon, "]",
              sharded_ ? " (this rank's " + std::to_string(cells_here) + " cells of them)" : std::string(), ", got ",
              x.sizes());
  const int64_t B = x.size(0), lat = x.size(2), lon = x.size(3);
  auto with = [&](const torch::Tensor& features, const torch::Tensor& trainable) {
    std::vector<torch::Tensor> parts = {features.to(x.scalar_type())};
    if (trainable.defined()) parts.push_back(trainable.to(x.scalar_type()));
    return torch::cat(parts, 1);
  };
  torch::Tensor data = x.flatten(2).transpose(1, 2);                        // [B, Nd, C_in]
  // anemoi's NoiseConditioning with noise_edges_name = (data, to, hidden), row-normalised: the
  // members' noise fields, drawn by the rollout on the data grid, averaged onto each hidden node
  // over its encoder edges (the cells within its cut-off), then the noise MLP. No gradient flows
  // into the noise (anemoi: requires_grad = False).
  torch::Tensor cond;
  if (const int64_t k = shape().conditional_noise; k > 0) {
    const torch::Tensor noise = data.narrow(2, data.size(2) - k, k).detach();
    data = data.narrow(2, 0, data.size(2) - k);
    const torch::Tensor& senders = encoder_edges_.senders;
    const torch::Tensor& receivers = encoder_edges_.receivers;
    const torch::Tensor sums = torch::zeros({B, hidden_.size(), k}, noise.options())
                                   .index_add(1, receivers, noise.index_select(1, senders));
    // A hidden node without edges gets zero noise (a zero row of the matrix), not a division by 0.
    const torch::Tensor counts =
        torch::zeros({hidden_.size()}, noise.options()).index_add(0, receivers, torch::ones_like(receivers, noise.options()));
    cond = run_forward(noise_injector_,
                       sums / counts.clamp_min(1).view({1, -1, 1}), /*checkpointed=*/false);  // [B, Nh, k]
  }
  const torch::Tensor cells = with(latlons_data_, data_trainable_);         // [Nd, 4 + data_trainable]
  const torch::Tensor hidden = with(latlons_hidden_, hidden_trainable_);    // [Nh, 4 + hidden_trainable]
  const torch::Tensor encoder_edges = with(encoder_edges_.features, encoder_edge_trainable_);
  const torch::Tensor decoder_edges = with(decoder_edges_.features, decoder_edge_trainable_);
  // The chunks' index tensors, on the edges' device (rebuilt when the model moves): not buffers, so
  // that a checkpoint does not depend on the chunk counts.
  if (encoder_chunks_.empty() || encoder_chunks_[0].senders.device() != encoder_edges_.senders.device()) {
    auto on_device = [&](std::vector<EdgeChunk> chunks) {
      for (EdgeChunk& c : chunks) {
        c.senders = c.senders.to(encoder_edges_.senders.device());
        c.local_senders = c.local_senders.to(encoder_edges_.senders.device());
        c.local_receivers = c.local_receivers.to(encoder_edges_.senders.device());
      }
      return chunks;
    };
    auto on_cpu = [](const BipartiteEdges& e) {
      BipartiteEdges c;
      c.senders = e.senders.cpu(), c.receivers = e.receivers.cpu();
      return c;
    };
    encoder_chunks_ = on_device(chunk_edges(on_cpu(encoder_edges_), hidden_.size(), options_.encoder_chunks));
    decoder_chunks_ = on_device(chunk_edges(on_cpu(decoder_edges_), data_.size(), options_.decoder_chunks));
  }
  const bool on = checkpointing();
  // Model parallelism: the mappers' halos are fetched before their chunks (a checkpointed chunk
  // saves its input with the halo, and its replay exchanges nothing); the processor's inside each
  // layer, so a checkpointed group of layers fetches them again in its replay.
  torch::Tensor latent;
  if (sharded_) {
    // The halo cells' input rows (in_channels: fewer values than their embeddings).
    const torch::Tensor source = span("aifs.encoder.halo", [&] { return encoder_shard_.with_halo(data, 1, shard_); });
    latent = span("aifs.encoder", [&] {
      return run_mapper(encoder_, local_encoder_chunks_,
                        {source, cells.index_select(0, encoder_source_ids_), torch::Tensor(),
                         hidden.narrow(0, hidden_begin_, hidden_count_),
                         encoder_edges.index_select(0, encoder_shard_.edges)},
                        on && options_.checkpoint_encoder);
    });
  } else {
    latent = span("aifs.encoder", [&] {
      return run_mapper(encoder_, encoder_chunks_, {data, cells, torch::Tensor(), hidden, encoder_edges},
                        on && options_.checkpoint_encoder);
    });
  }

  // Processor layers in options_.processor_chunks groups, each one checkpoint (anemoi's run_layers).
  WindowKeys keys;
  if (sharded_) {
    const NodeShard shard = shard_;
    const ShardedGraph halo = window_halo_;
    const int64_t before = window_before_;
    keys.before = before;
    keys.fetch = [shard, halo, before](const torch::Tensor& h) {
      // Owned rows then the halo ascending: the halo's first `before` rows precede this range.
      const torch::Tensor all = span("aifs.processor.halo", [&] { return halo.with_halo(h, 1, shard); });
      const int64_t n = h.size(1), after = all.size(1) - n - before;
      return torch::cat({all.narrow(1, n, before), h, all.narrow(1, n + before, after)}, 1);
    };
  }
  const torch::Tensor processor_input = latent;
  // ZeRO-3 gathers one block at a time (run_block): under it every layer is a group of its own, and
  // its own checkpoint.
  const int64_t per_chunk = has_block_runner() ? 1 : options_.processor_layers / options_.processor_chunks;
  for (int64_t first = 0; first < options_.processor_layers; first += per_chunk) {
    std::vector<std::shared_ptr<TransformerLayerImpl>> layers;
    std::vector<torch::Tensor> params;
    for (int64_t i = first; i < first + per_chunk; ++i) {
      layers.push_back(processor_[static_cast<size_t>(i)].ptr());
      for (const torch::Tensor& p : layers.back()->parameters()) params.push_back(p);
    }
    const ops::BlockFn fn = [layers, keys](const std::vector<torch::Tensor>& in) {
      torch::Tensor h = in[0];
      const torch::Tensor c = in.size() > 1 ? in[1] : torch::Tensor();
      for (const auto& layer : layers) h = layer->forward(h, c, keys);
      return std::vector<torch::Tensor>{h};
    };
    const std::vector<torch::Tensor> in = cond.defined() ? std::vector<torch::Tensor>{latent, cond}
                                                         : std::vector<torch::Tensor>{latent};
    const bool checkpointed = on && options_.checkpoint_processor;
    if (per_chunk == 1)
      latent = run_block(*layers.front(), fn, in, checkpointed)[0];
    else
      latent = (checkpointed && torch::GradMode::is_enabled()) ? ops::checkpoint(fn, in, params)[0] : fn(in)[0];
  }
  if (options_.latent_skip) latent = latent + processor_input;

  torch::Tensor out;
  if (sharded_) {
    const torch::Tensor source = span("aifs.decoder.halo", [&] { return decoder_shard_.with_halo(latent, 1, shard_); });
    out = span("aifs.decoder", [&] {
      return run_mapper(decoder_, local_decoder_chunks_,
                        {source, torch::Tensor(), data, cells.narrow(0, cell_begin_, cell_count_),
                         decoder_edges.index_select(0, decoder_shard_.edges)},
                        on && options_.checkpoint_decoder);  // [B, cells here, C_out]
    });
  } else {
    out = span("aifs.decoder", [&] {
      return run_mapper(decoder_, decoder_chunks_, {latent, torch::Tensor(), data, cells, decoder_edges},
                        on && options_.checkpoint_decoder);  // [B, Nd, C_out]
    });
  }
  return out.transpose(1, 2).reshape({B, out.size(2), lat, lon});
}

ModelEntry aifs_entry() {
  ModelEntry e = make_model_entry<AifsOptions, AifsImpl>(aifs_schema(), &aifs_parameter_count, &aifs_activation_memory,
                                                         {/*gemms=*/true, /*convolutions=*/false}, &aifs_buffer_bytes);
  e.conditional_noise = true;
  e.memory_savers = &aifs_memory_savers;
  return e;
}

}  // namespace wxtrain::models
