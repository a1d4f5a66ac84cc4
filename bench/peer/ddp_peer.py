#!/usr/bin/env python3
"""PyTorch's own DistributedDataParallel (Gloo backend, torch.multiprocessing.spawn) on the storm
U-Net, timed like bench/ddp_step.cpp: the same architecture and parameter count, the same residual
(tendency) prediction, latitude-weighted MSE, AdamW and global-norm clipping, synthetic batches of
the storm grid, the same threads per rank.

  .venv/bin/python bench/peer/ddp_peer.py --describe FILE [--ranks 2] [--batch 8] [--threads 1]
      [--warmup 3] [--steps 10] [--reps 5] [--precision fp32|bf16-mixed]

FILE is the JSON that `ddp_step --config ... --describe` prints (shape, parameter count, the
model's channels and groups, latitudes); the peer refuses to run when its parameter count differs. The U-Net is
bench/peer/train_peer.py's UNet when that module is there, else the one defined here (both match
models/unet.cpp layer for layer). Prints one line like ddp_step's: impl=pytorch-ddp ... step_ms=<median>.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


class ConvBlock(nn.Module):
    """[maxpool 2x2] -> (conv3x3 no bias -> GroupNorm -> SiLU) x 2, as models/unet.cpp ConvBlock."""

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
        x = F.silu(self.norm1(self.conv1(x).float()))
        return F.silu(self.norm2(self.conv2(x).float()))


class UpBlock(nn.Module):
    """Nearest upsampling to the skip's grid, cat(coarse, skip), ConvBlock."""

    def __init__(self, coarse, skip, cout, groups):
        super().__init__()
        self.conv = ConvBlock(coarse + skip, cout, groups)

    def forward(self, coarse, skip):
        up = F.interpolate(coarse, size=skip.shape[-2:], mode="nearest")
        return self.conv(torch.cat([up, skip.to(up.dtype)], 1))


class UNet(nn.Module):
    """models/unet.cpp: encoder0..L-1, decoder L-2..0, 1x1 head; zero-pads the grid to a multiple
    of 2^(L-1) and crops the output."""

    def __init__(self, in_channels, out_channels, channels, groups):
        super().__init__()
        self.encoders = nn.ModuleList(
            ConvBlock(in_channels if i == 0 else channels[i - 1], c, groups, downsample=i > 0)
            for i, c in enumerate(channels))
        self.decoders = nn.ModuleList(
            UpBlock(channels[i + 1], channels[i], channels[i], groups) for i in range(len(channels) - 1))
        self.head = nn.Conv2d(channels[0], out_channels, 1)
        self.multiple = 2 ** (len(channels) - 1)

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
        return self.head(x)[..., :lat, :lon]


def build_unet(in_channels, out_channels, channels, groups):
    """The colleague's U-Net from bench/peer/train_peer.py (the single-process peer) when it is
    there, so both peers run one definition; else the one above. Returns (model, source)."""
    here = os.path.dirname(os.path.abspath(__file__))
    if os.path.exists(os.path.join(here, "train_peer.py")):
        sys.path.insert(0, here)
        try:
            import train_peer
            model = train_peer.UNet({"channels": channels, "groups": groups},
                                    {"in_channels": in_channels, "out_channels": out_channels})
            return model, "train_peer.UNet"
        except (ImportError, AttributeError, TypeError, KeyError) as e:
            print(f"ddp_peer: train_peer.UNet unusable ({e}); using ddp_peer.UNet", file=sys.stderr)
    return UNet(in_channels, out_channels, channels, groups), "ddp_peer.UNet"


def worker(rank, args, desc, result_path):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    torch.manual_seed(0)
    V = desc["out_channels"]
    model, source = build_unet(desc["in_channels"], V, args.channels, args.groups)
    params = sum(p.numel() for p in model.parameters())
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(ddp.parameters(), lr=2e-3, weight_decay=0.01)
    lat = torch.tensor(desc["latitudes"], dtype=torch.float64)
    w = torch.cos(torch.deg2rad(lat)).clamp_min(0)
    w = (w / w.mean()).float().view(1, 1, -1, 1) if len(lat) else torch.ones(1, 1, desc["lat"], 1)
    torch.manual_seed(1000 + rank)
    x = torch.randn(args.batch, desc["in_channels"], desc["lat"], desc["lon"])
    y = torch.randn(args.batch, V, desc["lat"], desc["lon"])
    bf16 = args.precision == "bf16-mixed"

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            pred = x[:, -V:] + ddp(x).float()
            loss = ((pred - y).square() * w).mean() / w.mean()
        loss_value = loss.item()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
        opt.step()
        return loss_value

    loss = 0.0
    for _ in range(args.warmup):
        loss = step()
    times = []
    for _ in range(args.reps):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            loss = step()
        times.append(1e3 * (time.perf_counter() - t0) / args.steps)
    if rank == 0:
        with open(result_path, "w") as f:
            json.dump({"params": params, "loss": loss, "times": times, "source": source}, f)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--describe", required=True)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16-mixed"])
    ap.add_argument("--port", type=int, default=29511)
    args = ap.parse_args()
    with open(args.describe) as f:
        desc = json.load(f)
    args.channels, args.groups = desc["channels"], desc["groups"]
    result_path = f"/tmp/ddp_peer_{os.getpid()}.json"
    mp.spawn(worker, args=(args, desc, result_path), nprocs=args.ranks, join=True)
    with open(result_path) as f:
        r = json.load(f)
    os.remove(result_path)
    if desc.get("params") and desc["params"] != r["params"]:
        print(f"ddp_peer: parameter count {r['params']} differs from wxtrain's {desc['params']}", file=sys.stderr)
        sys.exit(1)
    reps = ",".join(f"{t:.2f}" for t in r["times"])
    print(f"impl=pytorch-ddp ranks={args.ranks} model={r['source']} precision={args.precision} "
          f"batch_per_rank={args.batch} params={r['params']} threads={args.threads} loss={r['loss']:.5g} "
          f"step_ms_reps={reps} step_ms={statistics.median(r['times']):.3f}")


if __name__ == "__main__":
    main()
