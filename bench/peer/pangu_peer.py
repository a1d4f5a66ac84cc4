"""The PyTorch (Python API) peer of models/pangu.{h,cpp}: Pangu-Weather's 3D Earth-specific
transformer, layer for layer, for bench/peer/train_peer.py (`class Model(m, shape)`).

The same modules under the same names (a state dict of the C++ model loads into this one), the
same parameters (train_peer.py asserts the count), the same ops in the same order: the (level,
lat, lon) patch embeddings as one Linear per patch, post-norm Earth-specific blocks with 3-D window
attention computed per window ([B * lon windows, window types * heads, N, N] scores, never the
volume's), the shifted windows rolled around longitude and masked across level and latitude
edges, patch merging, the upsampling and the patch recovery with the skip.

Attention is ATen's math path spelled out, as models/pangu.cpp's unfused (--unfused) CPU path is:
q and k scaled by sqrt(1/sqrt(hd)) each, q @ k^T, the Earth-specific bias (+ mask) added in
place, softmax, @ v. That is what F.scaled_dot_product_attention runs on the CPU when the additive
bias needs a gradient (always, in training), less its _safe_softmax's extra passes over the
scores, so spelled out the peer does no more work than SDPA would. wxtrain's own (fused) step
computes the same function with fewer passes: oneDNN's products reading q, k, v in place (fp32),
and the scale, bias and softmax as one fused op (scaled_biased_softmax).

The bf16 casts models/pangu.cpp makes through cuda_autocast_fp32 (LayerNorm and softmax inputs in
fp32) happen only in its GPU-standing (--unfused) step; in the step train_throughput times they
are no-ops, so here there are none: both sides hand autocast's bf16 to LayerNorm and softmax.

The index buffers (each attention's position_index, the shifted blocks' shift_mask) are built here
as models/pangu.cpp builds them; with shape["buffers_dir"] (train_peer.py --buffers) the C++
model's own are loaded and the built ones must equal them.
"""
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import train_peer


def ceil_div(a, b):
    return -(-a // b)


def round_up(a, b):
    return ceil_div(a, b) * b


def pad_volume(x, multiple):
    """[B, Z, H, W, C] zero-padded at the end of Z, H, W up to multiples of `multiple`."""
    pz, ph, pw = (round_up(x.shape[1 + d], multiple[d]) - x.shape[1 + d] for d in range(3))
    if pz == 0 and ph == 0 and pw == 0:
        return x
    return F.pad(x, (0, 0, 0, pw, 0, ph, 0, pz))


def crop_volume(x, extent):
    if tuple(x.shape[1:4]) == tuple(extent):
        return x
    return x[:, :extent[0], :extent[1], :extent[2]]


def window_partition(x, window):
    """[B, Z, H, W, C] -> [B * nw, nz * nh, N, C]: longitude windows into the batch, the window's
    type (level window, latitude window) second, as it selects the Earth-specific bias."""
    B, Z, H, W, C = x.shape
    wz, wh, ww = window
    nz, nh, nw = Z // wz, H // wh, W // ww
    return (x.reshape(B, nz, wz, nh, wh, nw, ww, C).permute(0, 5, 1, 3, 2, 4, 6, 7)
            .reshape(B * nw, nz * nh, wz * wh * ww, C))


def window_reverse(windows, window, batch, extent):
    wz, wh, ww = window
    nz, nh, nw = extent[0] // wz, extent[1] // wh, extent[2] // ww
    return (windows.reshape(batch, nw, nz, nh, wz, wh, ww, windows.shape[-1]).permute(0, 2, 4, 3, 5, 1, 6, 7)
            .reshape(batch, extent[0], extent[1], extent[2], windows.shape[-1]))


def earth_position_index(window):
    """Query i, key j -> the bias table's row: level and latitude by both absolute positions,
    longitude by the offset alone ([N * N] int64, models/pangu.cpp's)."""
    wz, wh, ww = window
    n = torch.arange(wz * wh * ww)
    z, h, w = n.div(wh * ww, rounding_mode="floor"), n.div(ww, rounding_mode="floor").remainder(wh), n.remainder(ww)
    level = z.view(-1, 1) + z.view(1, -1) * wz
    lat = h.view(-1, 1) + h.view(1, -1) * wh
    lon = w.view(-1, 1) - w.view(1, -1) + (ww - 1)
    return ((level * (wh * wh) + lat) * (2 * ww - 1) + lon).reshape(-1)


def shifted_window_mask(extent, window, shift):
    """[types, N, N]: -inf between tokens on different sides of a level or latitude edge the roll
    wrapped around, 0 elsewhere (longitude is periodic and never masked)."""
    wz, wh, ww = window
    nz, nh, N = extent[0] // wz, extent[1] // wh, wz * wh * ww
    n = torch.arange(N)
    oz, oh = n.div(wh * ww, rounding_mode="floor"), n.div(ww, rounding_mode="floor").remainder(wh)
    rz = torch.arange(nz).view(nz, 1, 1) * wz + oz.view(1, 1, N)
    rh = torch.arange(nh).view(1, nh, 1) * wh + oh.view(1, 1, N)
    label = torch.zeros(nz, nh, N, dtype=torch.long)
    if shift[0] > 0:
        label = label + (rz >= extent[0] - shift[0]).long() * 2
    if shift[1] > 0:
        label = label + (rh >= extent[1] - shift[1]).long()
    label = label.reshape(nz * nh, N)
    return torch.zeros(nz * nh, N, N).masked_fill(label.unsqueeze(2) != label.unsqueeze(1), -math.inf)


def index_buffer(module, name, built, shape, full_name):
    """Register `built`; with --buffers it must equal the C++ model's (loaded, not trusted blindly)."""
    directory = shape.get("buffers_dir")
    if directory:
        loaded = train_peer.load_npy(os.path.join(directory, full_name + ".npy"))
        if loaded.dtype != built.dtype or not torch.equal(loaded, built):
            sys.exit(f"pangu_peer: {full_name} differs from the C++ model's")
        built = loaded
    module.register_buffer(name, built)


def window_attention_math(q, k, v, additive):
    s = math.sqrt(1.0 / math.sqrt(q.shape[-1]))
    scores = (q * s) @ (k.transpose(-2, -1) * s)
    scores.add_(additive)
    attn = torch.softmax(scores, -1)
    return (attn if attn.dtype == v.dtype else attn.to(v.dtype)) @ v


class EarthAttention3D(nn.Module):
    def __init__(self, dim, heads, window, types, shape, name):
        super().__init__()
        self.heads, self.window = heads, window
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        wz, wh, ww = window
        self.earth_bias = nn.Parameter(torch.randn(wz * wz * wh * wh * (2 * ww - 1), types, heads) * 0.02)
        index_buffer(self, "position_index", earth_position_index(window), shape, name + ".position_index")

    def bias(self):
        N, types = math.prod(self.window), self.earth_bias.shape[1]
        return self.earth_bias.index_select(0, self.position_index).view(N, N, types, self.heads).permute(2, 3, 0, 1)

    def forward(self, windows, mask):
        B, T, N, C = windows.shape
        heads = self.heads
        hd = C // heads
        # The window types join the heads: one [1, T * heads, N, N] bias broadcasts over the batch
        # and the longitude windows.
        q, k, v = (t.reshape(B, T * heads, N, hd) for t in
                   self.qkv(windows).view(B, T, N, 3, heads, hd).permute(3, 0, 1, 4, 2, 5).unbind(0))
        additive = self.bias()
        if mask is not None:
            additive = additive + mask.unsqueeze(1).to(additive.dtype)
        additive = additive.reshape(1, T * heads, N, N).to(q.dtype)
        out = window_attention_math(q, k, v, additive)
        return self.proj(out.view(B, T, heads, N, hd).permute(0, 1, 3, 2, 4).reshape(B, T, N, C))


class EarthSpecificBlock(nn.Module):
    def __init__(self, dim, heads, grid, window, shifted, mlp_ratio, shape, name):
        super().__init__()
        self.grid, self.window = grid, window
        self.padded = tuple(round_up(grid[d], window[d]) for d in range(3))
        # Half a window, where there is more than one window to shift across.
        self.shift = tuple(window[d] // 2 if shifted and self.padded[d] > window[d] else 0 for d in range(3))
        types = (self.padded[0] // window[0]) * (self.padded[1] // window[1])
        self.attn = EarthAttention3D(dim, heads, window, types, shape, name + ".attn")
        self.norm1 = nn.LayerNorm(dim)
        hidden = int(dim * mlp_ratio)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.register_buffer("shift_mask", None)  # no mask: no roll across a level or latitude edge
        if self.shift[0] > 0 or self.shift[1] > 0:
            index_buffer(self, "shift_mask", shifted_window_mask(self.padded, window, self.shift), shape,
                         name + ".shift_mask")

    def attention(self, x):
        rolled = any(self.shift)
        v = pad_volume(x, self.window)
        if rolled:
            v = torch.roll(v, tuple(-s for s in self.shift), (1, 2, 3))
        out = self.attn(window_partition(v, self.window), self.shift_mask)
        v = window_reverse(out, self.window, x.shape[0], self.padded)
        if rolled:
            v = torch.roll(v, self.shift, (1, 2, 3))
        return crop_volume(v, self.grid)

    def forward(self, x):
        # Post-norm, the pseudocode's: the branch's output is normalised.
        y = x + self.norm1(self.attention(x))
        return y + self.norm2(self.fc2(F.gelu(self.fc1(y))))


class PanguEmbed(nn.Module):
    def __init__(self, upper_variables, surface_channels, dim, level_patch, patch):
        super().__init__()
        self.level_patch, self.patch = level_patch, patch
        self.upper = nn.Linear(upper_variables * level_patch * patch * patch, dim) if upper_variables > 0 else None
        self.surface = nn.Linear(surface_channels * patch * patch, dim)

    def forward(self, upper_air, surface_fields):
        p, pz = self.patch, self.level_patch
        B, Cs = surface_fields.shape[:2]
        h, w = ceil_div(surface_fields.shape[2], p), ceil_div(surface_fields.shape[3], p)

        def pad_grid(t, pad_levels):
            pad_lat, pad_lon = h * p - t.shape[-2], w * p - t.shape[-1]
            if pad_levels == 0 and pad_lat == 0 and pad_lon == 0:
                return t
            return F.pad(t, (0, pad_lon, 0, pad_lat) + ((0, pad_levels) if t.dim() == 5 else ()))

        s = (pad_grid(surface_fields, 0).reshape(B, Cs, h, p, w, p).permute(0, 2, 4, 1, 3, 5)
             .reshape(B, 1, h, w, Cs * p * p))
        tokens = self.surface(s)
        if upper_air is None:
            return tokens
        V, Z = upper_air.shape[1:3]
        zu = ceil_div(Z, pz)
        u = (pad_grid(upper_air, zu * pz - Z).reshape(B, V, zu, pz, h, p, w, p).permute(0, 2, 4, 6, 1, 3, 5, 7)
             .reshape(B, zu, h, w, V * pz * p * p))
        return torch.cat([tokens, self.upper(u)], 1)


class PanguDownSample(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(4 * dim)
        self.reduce = nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x):
        B, Z, _, _, C = x.shape
        h, w = ceil_div(x.shape[2], 2), ceil_div(x.shape[3], 2)
        merged = (pad_volume(x, (1, 2, 2)).reshape(B, Z, h, 2, w, 2, C).permute(0, 1, 2, 4, 3, 5, 6)
                  .reshape(B, Z, h, w, 4 * C))
        return self.reduce(self.norm(merged))


class PanguUpSample(nn.Module):
    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.expand = nn.Linear(in_dim, 4 * out_dim, bias=False)
        self.norm = nn.LayerNorm(out_dim)
        self.mix = nn.Linear(out_dim, out_dim, bias=False)

    def forward(self, x, lat, lon):
        B, Z, h, w, _ = x.shape
        y = self.expand(x)
        C = y.shape[4] // 4
        y = y.view(B, Z, h, w, 2, 2, C).permute(0, 1, 2, 4, 3, 5, 6).reshape(B, Z, 2 * h, 2 * w, C)
        return self.mix(self.norm(crop_volume(y, (Z, lat, lon))))


class PanguHead(nn.Module):
    def __init__(self, dim, upper_variables, levels, surface_channels, level_patch, patch, lat, lon):
        super().__init__()
        self.upper_variables, self.levels, self.surface_channels = upper_variables, levels, surface_channels
        self.level_patch, self.patch, self.lat, self.lon = level_patch, patch, lat, lon
        pp = patch * patch
        # The transposed convolutions' parameters: a weight per (channel, patch position), one bias
        # per channel added after the patches are laid out.
        self.upper = self.upper_bias = self.surface = self.surface_bias = None
        if upper_variables > 0:
            self.upper = nn.Linear(dim, upper_variables * level_patch * pp, bias=False)
            self.upper_bias = nn.Parameter(torch.zeros(upper_variables))
        if surface_channels > 0:
            self.surface = nn.Linear(dim, surface_channels * pp, bias=False)
            self.surface_bias = nn.Parameter(torch.zeros(surface_channels))

    def forward(self, x, skip):
        t = torch.cat([skip, x], -1)  # the pseudocode's order: skip first
        B, _, h, w, _ = t.shape
        p, pz, lat, lon = self.patch, self.level_patch, self.lat, self.lon
        parts = []
        if self.upper is not None:
            V, zu = self.upper_variables, t.shape[1] - 1
            u = (self.upper(t[:, 1:]).view(B, zu, h, w, V, pz, p, p).permute(0, 4, 1, 5, 2, 6, 3, 7)
                 .reshape(B, V, zu * pz, h * p, w * p))
            u = u[:, :, :self.levels, :lat, :lon] + self.upper_bias.view(1, V, 1, 1, 1)
            parts.append(u.reshape(B, V * self.levels, lat, lon))
        if self.surface is not None:
            C = self.surface_channels
            s = (self.surface(t[:, 0]).view(B, h, w, C, p, p).permute(0, 3, 1, 4, 2, 5)
                 .reshape(B, C, h * p, w * p))
            parts.append(s[..., :lat, :lon] + self.surface_bias.view(1, C, 1, 1))
        return parts[0].contiguous() if len(parts) == 1 else torch.cat(parts, 1)


class Model(nn.Module):
    def __init__(self, m, shape):
        super().__init__()
        self.upper_variables, self.levels = m.get("upper_variables", 0), m.get("levels", 0)
        upper = self.upper_channels = self.upper_variables * self.levels
        # The newest state's upper air: states come oldest first.
        self.upper_offset = (shape["history"] - 1) * shape["state_channels"] if shape["state_channels"] > 0 else 0
        p, pz, D = m["patch_size"], m["level_patch"], m["embed_dim"]
        lat, lon = shape["lat"], shape["lon"]
        h, w = ceil_div(lat, p), ceil_div(lon, p)
        levels = 1 + (ceil_div(self.levels, pz) if self.upper_variables > 0 else 0)
        self.tokens = (levels, h, w)
        coarse = (levels, ceil_div(h, 2), ceil_div(w, 2))
        depths, heads, mlp_ratio = m["stage_depths"], m["stage_heads"], m.get("mlp_ratio", 4.0)

        self.embed = PanguEmbed(self.upper_variables, shape["in_channels"] - upper, D, pz, p)
        self.stages = [[] for _ in range(4)]  # the blocks are registered by the C++ model's names

        def stage(number, dim, grid):
            window = tuple(min(m["window"][d], grid[d]) for d in range(3))
            for i in range(depths[number - 1]):
                name = f"layer{number}_block{i}"
                block = EarthSpecificBlock(dim, heads[number - 1], grid, window, i % 2 == 1, mlp_ratio, shape, name)
                self.add_module(name, block)
                self.stages[number - 1].append(block)

        stage(1, D, self.tokens)
        self.downsample = PanguDownSample(D)
        stage(2, 2 * D, coarse)
        stage(3, 2 * D, coarse)
        self.upsample = PanguUpSample(2 * D, D)
        stage(4, D, self.tokens)
        self.head = PanguHead(2 * D, self.upper_variables, self.levels, shape["out_channels"] - upper, pz, p, lat, lon)

    def split_input(self, x):
        if self.upper_channels == 0:
            return None, x
        B, _, lat, lon = x.shape
        o, n = self.upper_offset, self.upper_channels
        volume = x.narrow(1, o, n).reshape(B, self.upper_variables, self.levels, lat, lon)
        rest = []
        if o > 0:
            rest.append(x.narrow(1, 0, o))
        if x.shape[1] - o - n > 0:
            rest.append(x.narrow(1, o + n, x.shape[1] - o - n))
        return volume, rest[0] if len(rest) == 1 else torch.cat(rest, 1)

    def forward(self, x):
        volume, surface = self.split_input(x)
        x = self.embed(volume, surface)
        for block in self.stages[0]:
            x = block(x)
        skip = x
        x = self.downsample(x)
        for block in self.stages[1] + self.stages[2]:
            x = block(x)
        x = self.upsample(x, self.tokens[1], self.tokens[2])
        for block in self.stages[3]:
            x = block(x)
        return self.head(x, skip)
