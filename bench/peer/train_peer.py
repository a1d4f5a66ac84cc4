#!/usr/bin/env python3
"""The PyTorch (Python API) peer of bench/train_throughput.cpp.

The same three storm models as models/{unet,vit,gnn}.cpp, layer for layer (the parameter count is
asserted against what the C++ benchmark reports), the same latitude-weighted MSE, the same step
(zero_grad, forward under autocast, loss.item(), backward, clip_grad_norm_, optimizer step) with
torch.optim.AdamW at its CPU defaults, on synthetic batches of the same shape, timed the same way:
after `warmup` steps, `reps` repetitions of `steps` steps; the median repetition's samples/s.

  .venv/bin/python bench/peer/train_peer.py --config configs/storm_unet.toml \
      --shape shape.json --precision bf16-mixed [--batch 8 --warmup 3 --steps 10 --reps 5]

shape.json is `train_throughput --config ... --describe`: grid, channels, latitudes, parameter
count and LibTorch's default thread count (the peer uses the same). The models of issue 14 are in
fourcastnet_peer.py, pangu_peer.py and graphcast_peer.py; those that run on a graph or a table the
C++ model built take it from `--buffers DIR` (`train_throughput --describe --buffers DIR`).

--device cuda runs the same step on the GPU (the peer of `gpu_check throughput`, which prints the
same line; scripts/gpu_check.sh runs both): model, batches and latitude weights on cuda:0, autocast
on CUDA, AdamW at its CUDA defaults (foreach), and the clock read after torch.cuda.synchronize().
"""
import argparse
import json
import math
import statistics
import sys
import time
import tomllib

import torch
import torch.nn as nn
import torch.nn.functional as F


def norm_in_param_dtype(norm, x):
    # CPU autocast in 1.13 hands GroupNorm/LayerNorm the bf16 output of a conv/linear, and they
    # need input and affine parameters of one dtype: normalise in fp32, as models/*.cpp do.
    return norm(x if x.dtype == norm.weight.dtype else x.to(norm.weight.dtype))


def load_npy(path):
    """A .npy file written by `train_throughput --describe --buffers DIR` as a tensor (the wheel's
    environment has no NumPy; the format is a short Python-literal header and the raw data)."""
    import ast
    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"\x93NUMPY" or data[6] != 1:
        sys.exit(f"train_peer: {path} is not a version-1 .npy file")
    length = int.from_bytes(data[8:10], "little")
    header = ast.literal_eval(data[10:10 + length].decode("latin1"))
    dtype = {"<f4": torch.float32, "<f8": torch.float64, "<i8": torch.int64, "<i4": torch.int32,
             "|b1": torch.bool}[header["descr"]]
    flat = torch.frombuffer(bytearray(data[10 + length:]), dtype=dtype) if len(data) > 10 + length \
        else torch.empty(0, dtype=dtype)
    return flat.reshape(header["shape"]).clone()


# ---- U-Net (models/unet.cpp) ----

class ConvBlock(nn.Module):
    def __init__(self, cin, cout, groups, downsample=False):
        super().__init__()
        self.downsample = downsample
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
        self.norm1 = nn.GroupNorm(groups, cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.norm2 = nn.GroupNorm(groups, cout)

    def forward(self, x):
        if self.downsample:
            x = F.max_pool2d(x, 2)
        x = F.silu(norm_in_param_dtype(self.norm1, self.conv1(x)))
        return F.silu(norm_in_param_dtype(self.norm2, self.conv2(x)))


class UpBlock(nn.Module):
    def __init__(self, coarse, skip, cout, groups):
        super().__init__()
        self.conv = ConvBlock(coarse + skip, cout, groups)

    def forward(self, coarse, skip):
        up = F.interpolate(coarse, size=skip.shape[-2:], mode="nearest")
        return self.conv(torch.cat([up, skip.to(up.dtype)], 1))


class UNet(nn.Module):
    def __init__(self, m, shape):
        super().__init__()
        ch, g = m["channels"], m["groups"]
        self.encoders = nn.ModuleList(
            ConvBlock(shape["in_channels"] if i == 0 else ch[i - 1], ch[i], g, downsample=i > 0)
            for i in range(len(ch)))
        self.decoders = nn.ModuleList(UpBlock(ch[i + 1], ch[i], ch[i], g) for i in range(len(ch) - 1))
        self.head = nn.Conv2d(ch[0], shape["out_channels"], 1)
        self.multiple = 2 ** (len(ch) - 1)

    def forward(self, x):
        lat, lon = x.shape[-2:]
        m = self.multiple
        x = F.pad(x, (0, (m - lon % m) % m, 0, (m - lat % m) % m))
        skips = []
        for enc in self.encoders:
            x = enc(x)
            skips.append(x)
        for i in reversed(range(len(self.decoders))):
            x = self.decoders[i](x, skips[i])
        out = self.head(x)
        return out[..., :lat, :lon].contiguous()


# ---- ViT (models/vit.cpp) ----

class SelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, D = x.shape
        hd = D // self.heads
        q, k, v = self.qkv(x).view(B, N, 3, self.heads, hd).permute(2, 0, 3, 1, 4).unbind(0)
        attn = torch.softmax((q @ k.transpose(-2, -1)).mul_(1.0 / math.sqrt(hd)), -1)
        out = attn.to(v.dtype) @ v
        return self.proj(out.transpose(1, 2).reshape(B, N, D))


class TransformerBlock(nn.Module):
    def __init__(self, dim, heads, mlp_ratio):
        super().__init__()
        hidden = int(dim * mlp_ratio)
        self.norm1 = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class ViT(nn.Module):
    def __init__(self, m, shape):
        super().__init__()
        p, D = m["patch_size"], m["embed_dim"]
        self.p = p
        self.nh, self.nw = -(-shape["lat"] // p), -(-shape["lon"] // p)
        self.out_c = shape["out_channels"]
        self.embed = nn.Conv2d(shape["in_channels"], D, p, stride=p)
        self.pos_embed = nn.Parameter(torch.randn(1, self.nh * self.nw, D) * 0.02)
        self.blocks = nn.ModuleList(TransformerBlock(D, m["heads"], m.get("mlp_ratio", 4.0)) for _ in range(m["depth"]))
        self.head_norm = nn.LayerNorm(D)
        self.head = nn.Linear(D, p * p * self.out_c)

    def forward(self, x):
        lat, lon = x.shape[-2:]
        p, nh, nw = self.p, self.nh, self.nw
        x = F.pad(x, (0, nw * p - lon, 0, nh * p - lat))
        x = self.embed(x).flatten(2).transpose(1, 2) + self.pos_embed
        for block in self.blocks:
            x = block(x)
        B = x.shape[0]
        grid = (self.head(self.head_norm(x)).view(B, nh, nw, p, p, self.out_c)
                .permute(0, 5, 1, 3, 2, 4).reshape(B, self.out_c, nh * p, nw * p))
        if nh * p == lat and nw * p == lon:
            return grid
        return grid[..., :lat, :lon].contiguous()


# ---- GNN (models/gnn.cpp) ----

def grid_graph(lat, lon, radius):
    """Edges sender -> receiver within `radius` cells (Chebyshev), sorted by receiver."""
    node = torch.arange(lat * lon)
    rlat, rlon = (node // lon).unsqueeze(1), (node % lon).unsqueeze(1)
    span = torch.arange(-radius, radius + 1)
    dlat, dlon = (t.flatten() for t in torch.meshgrid(span, span, indexing="ij"))
    keep = (dlat != 0) | (dlon != 0)
    dlat, dlon = dlat[keep].unsqueeze(0), dlon[keep].unsqueeze(0)
    slat, slon = rlat + dlat, rlon + dlon
    valid = (slat >= 0) & (slat < lat) & (slon >= 0) & (slon < lon)
    senders = (slat * lon + slon)[valid]
    receivers = node.unsqueeze(1).expand_as(valid)[valid]
    fdlat = dlat.expand_as(valid)[valid].float()
    fdlon = dlon.expand_as(valid)[valid].float()
    edge_features = torch.stack([fdlat, fdlon, torch.sqrt(fdlat * fdlat + fdlon * fdlon)], 1) / radius

    def scaled(idx, n):
        return idx.float() * (2.0 / (n - 1)) - 1.0 if n > 1 else torch.zeros(idx.shape)

    positions = torch.stack([scaled(rlat.squeeze(1), lat), scaled(rlon.squeeze(1), lon)], 1)
    return senders, receivers, edge_features, positions


class GraphMLP(nn.Module):
    """MLP on a concatenation of inputs with the first Linear split per input (bias on the first
    only), so node projections can be computed per node and gathered per edge."""

    def __init__(self, in_features, hidden, out, layers, layer_norm=True):
        super().__init__()
        first_out = out if layers == 1 else hidden
        self.first = nn.ModuleList(nn.Linear(f, first_out, bias=k == 0) for k, f in enumerate(in_features))
        self.layers = nn.ModuleList(nn.Linear(hidden, out if i + 1 == layers else hidden) for i in range(1, layers))
        self.norm = nn.LayerNorm(out) if layer_norm else None

    def project(self, k, x):
        return self.first[k](x)

    def finish(self, x):
        for layer in self.layers:
            x = layer(F.silu(x))
        return x if self.norm is None else norm_in_param_dtype(self.norm, x)

    def forward(self, *inputs):
        s = self.project(0, inputs[0])
        for k in range(1, len(inputs)):
            s = s + self.project(k, inputs[k])
        return self.finish(s)


class InteractionLayer(nn.Module):
    def __init__(self, latent, mlp_layers):
        super().__init__()
        self.edge_mlp = GraphMLP([latent] * 3, latent, latent, mlp_layers)
        self.node_mlp = GraphMLP([latent] * 2, latent, latent, mlp_layers)

    def forward(self, h, e, senders, receivers):
        pre = self.edge_mlp.project(1, h).index_select(1, senders)
        pre.add_(self.edge_mlp.project(2, h).index_select(1, receivers))
        pre = pre + self.edge_mlp.project(0, e)
        e_new = e + self.edge_mlp.finish(pre)
        agg = torch.zeros(h.shape[0], h.shape[1], e_new.shape[-1], dtype=e_new.dtype,
                          device=e_new.device).index_add_(1, receivers, e_new)
        h_new = h + self.node_mlp.finish(self.node_mlp.project(0, h) + self.node_mlp.project(1, agg))
        return h_new, e_new


class GraphNet(nn.Module):
    def __init__(self, m, shape):
        super().__init__()
        L, layers = m["latent"], m.get("mlp_layers", 2)
        s, r, ef, pos = grid_graph(shape["lat"], shape["lon"], m["neighbourhood"])
        self.register_buffer("senders", s)
        self.register_buffer("receivers", r)
        self.register_buffer("edge_features", ef)
        self.register_buffer("node_positions", pos)
        self.enc_node = GraphMLP([shape["in_channels"], 2], L, L, layers)
        self.enc_edge = GraphMLP([3], L, L, layers)
        self.processors = nn.ModuleList(InteractionLayer(L, layers) for _ in range(m["processor_layers"]))
        self.decoder = GraphMLP([L], L, shape["out_channels"], layers, layer_norm=False)

    def forward(self, x):
        B, C, lat, lon = x.shape
        nodes = x.flatten(2).transpose(1, 2)
        h = self.enc_node.finish(self.enc_node.project(0, nodes) + self.enc_node.project(1, self.node_positions))
        e = self.enc_edge(self.edge_features)
        for p in self.processors:
            h, e = p(h, e, self.senders, self.receivers)
        out = self.decoder(h)
        return out.transpose(1, 2).reshape(B, out.shape[2], lat, lon)


MODELS = {"unet": UNet, "vit": ViT, "gnn": GraphNet}
# The published architectures of issue 14, each in its own file beside this one, whose class
# `Model(m, shape)` is built like the three above; a model that runs on a graph or table the C++ model
# built reads it from shape["buffers_dir"] (--buffers) with load_npy.
PEER_MODULES = {"fourcastnet": "fourcastnet_peer", "pangu": "pangu_peer", "graphcast": "graphcast_peer"}


def model_class(name):
    if name in MODELS:
        return MODELS[name]
    if name in PEER_MODULES:
        import importlib
        return importlib.import_module(PEER_MODULES[name]).Model
    sys.exit(f"train_peer: no peer for model '{name}'")


# ---- the step (trainer/training_step.cpp) ----

def weighted_mse(prediction, target, lat_weights):
    err = (prediction.float() - target.float()).square()
    w = lat_weights.view(1, 1, -1, 1)
    return (err * w).mean() / w.mean()


def rollout(model, x, steps, variables):
    states = []
    for r in range(steps):
        # The model predicts the tendency: next = newest state + model(window).
        nxt = x[:, -variables:].float() + model(x).float()
        states.append(nxt)
        if r + 1 < steps:
            x = torch.cat([x[:, variables:], nxt.to(x.dtype)], 1)
    return torch.stack(states, 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--shape", required=True, help="JSON from train_throughput --describe")
    ap.add_argument("--buffers", help="directory of the model's buffers (train_throughput --describe --buffers DIR)")
    ap.add_argument("--precision", choices=["fp32", "bf16-mixed"], default="fp32")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--profile", help="write a chrome trace of `steps` steps after warm-up instead of timing")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cuda: the step on cuda:0 (timed after torch.cuda.synchronize())")
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the model (inductor; the optimizer stays eager); reported as impl=pytorch-compile")
    args = ap.parse_args()

    with open(args.config, "rb") as f:
        cfg = tomllib.load(f)
    with open(args.shape) as f:
        shape = json.load(f)
    m, t = cfg["model"], cfg["train"]
    shape["buffers_dir"] = args.buffers
    torch.set_num_threads(shape["threads"])
    torch.manual_seed(t.get("seed", 0))

    model = model_class(m["name"])(m, shape)
    params = sum(p.numel() for p in model.parameters())
    if params != shape["params"]:
        sys.exit(f"train_peer: {m['name']} has {params} parameters, wxtrain's has {shape['params']}: "
                 "the architectures differ")
    model.train()
    device = torch.device(args.device)
    model.to(device)  # before the optimizer takes the parameters (a no-op on the CPU)
    # The clock is read on the host: on CUDA after the queued kernels are done.
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    if args.compile:
        # Compiled on the first warm-up step; the rollout calls the same compiled module each step.
        model = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=t["lr"], betas=(t.get("beta1", 0.9), t.get("beta2", 0.999)),
                            eps=t.get("eps", 1e-8), weight_decay=t.get("weight_decay", 0.01))
    grad_clip = t.get("grad_clip", 0.0)

    lat_w = torch.ones(shape["lat"])
    if shape["latitudes"]:
        lat_w = torch.tensor(shape["latitudes"], dtype=torch.float64).mul(math.pi / 180).cos().clamp_min(0).float()
        lat_w = lat_w / lat_w.mean()
    lat_w = lat_w.to(device)
    steps_out = shape["rollout_steps"]
    V = shape["out_channels"]
    x = torch.randn(args.batch, shape["in_channels"], shape["lat"], shape["lon"], device=device)
    y = torch.randn(args.batch, steps_out, V, shape["lat"], shape["lon"], device=device)
    bf16 = args.precision == "bf16-mixed"

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = weighted_mse(rollout(model, x, steps_out, V), y, lat_w)
        value = loss.item()
        loss.backward()
        if grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        opt.step()
        return value

    loss = 0.0
    for _ in range(args.warmup):
        loss = step()
    if args.profile:
        with torch.autograd.profiler.profile() as prof:
            for _ in range(args.steps):
                step()
        prof.export_chrome_trace(args.profile)
        return
    rates = []
    for _ in range(args.reps):
        sync()
        start = time.perf_counter()
        for _ in range(args.steps):
            loss = step()
        sync()
        rates.append(args.steps * args.batch / (time.perf_counter() - start))
    impl = "pytorch-compile" if args.compile else "pytorch"
    on = " device=cuda" if device.type == "cuda" else ""
    print(f"impl={impl}{on} model={m['name']} precision={args.precision} batch={args.batch} params={params} "
          f"threads={torch.get_num_threads()} loss={loss:.5g} reps={','.join(f'{r:.2f}' for r in rates)} "
          f"samples_per_s={statistics.median(rates):.3f}")


if __name__ == "__main__":
    main()
