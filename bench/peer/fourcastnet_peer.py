"""FourCastNet in PyTorch's Python API: the peer of models/fourcastnet.cpp, layer for layer.

A patch transformer whose token mixer is the AFNO (Guibas et al. 2021): patch embedding as the ViT's
(conv with kernel = stride = patch_size, learned positional embedding), `depth` AFNO blocks on the
[lat/p, lon/p] patch grid with FourCastNet's double skip, a bias-free Linear head reassembled into
the grid. LayerNorm eps 1e-6 and no norm before the head, as the reference (NVlabs/FourCastNet
networks/afnonet.py) and the C++ model.

The spectral filter is the C++ model's formulation of the reference's: each complex block Linear is
one real block matmul of the modes' interleaved (re, im) parts against the weight
[[w_re, w_im], [-w_im, w_re]] interleaved alike (one matmul per stage where the reference has four
einsums), with the same parameters w1 [2, nb, bs, bs], b1 [2, nb, bs], w2, b2. The
transforms and the filter run in fp32 with autocast off, as spectral_apply does, and the result is
cast back to the input's dtype. Loaded by train_peer.py (PEER_MODULES) as `Model(m, shape)`.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def complex_block_weight(w):
    """[2, nb, in, out] (real, imaginary) -> [nb, 2 in, 2 out], rows and columns interleaved (re, im)
    as view_as_real lays out the modes: the interleaved parts times it are the complex product."""
    re, im = w[0], w[1]
    return torch.stack([torch.stack([re, im], -1), torch.stack([-im, re], -1)], 2).view(
        re.shape[0], 2 * re.shape[1], 2 * re.shape[2])


def complex_block_bias(b):
    """[2, nb, out] -> [nb, 1, 2 out], interleaved as the matmul's output columns."""
    return torch.stack([b[0], b[1]], -1).view(b.shape[1], 1, 2 * b.shape[2])


def kept_modes_mask(h, wf, fraction, device):
    """The lowest int((n/2 + 1) * fraction) frequencies per axis as a [h, wf] 0/1 float mask."""
    kept_h, kept_w = int((h // 2 + 1) * fraction), int(wf * fraction)
    k = torch.arange(h, device=device)
    freq_h = torch.where(k <= h // 2, k, k - h).abs()
    return ((freq_h < kept_h).unsqueeze(1) & (torch.arange(wf, device=device) < kept_w).unsqueeze(0)).float()


class AFNO2D(nn.Module):
    def __init__(self, hidden_size, num_blocks, sparsity_threshold=0.01, hard_thresholding_fraction=1.0):
        super().__init__()
        self.num_blocks = num_blocks
        self.sparsity_threshold = sparsity_threshold
        self.hard_thresholding_fraction = hard_thresholding_fraction
        bs = hidden_size // num_blocks
        scale = 0.02
        self.w1 = nn.Parameter(torch.randn(2, num_blocks, bs, bs) * scale)
        self.b1 = nn.Parameter(torch.randn(2, num_blocks, bs) * scale)
        self.w2 = nn.Parameter(torch.randn(2, num_blocks, bs, bs) * scale)
        self.b2 = nn.Parameter(torch.randn(2, num_blocks, bs) * scale)

    def filter_modes(self, modes):
        B, h, wf, C = modes.shape
        nb = self.num_blocks
        bs = C // nb
        f32 = lambda t: t.float()  # parameters in their own dtype; the filter runs in fp32
        M = B * h * wf
        # [nb, M, 2 bs]: block b's interleaved (re, im) parts of every mode; block-major until the end.
        z = torch.view_as_real(modes).reshape(M, nb, 2 * bs).transpose(0, 1)
        o1 = torch.relu(torch.matmul(z, complex_block_weight(f32(self.w1))) + complex_block_bias(f32(self.b1)))
        o2 = torch.matmul(o1, complex_block_weight(f32(self.w2))) + complex_block_bias(f32(self.b2))
        if self.hard_thresholding_fraction < 1.0:
            mask = kept_modes_mask(h, wf, self.hard_thresholding_fraction, o2.device)
            o2 = (o2.view(nb, B, h, wf, 2 * bs) * mask.view(1, 1, h, wf, 1)).view(nb, M, 2 * bs)
        o2 = F.softshrink(o2, self.sparsity_threshold)
        return torch.view_as_complex(o2.transpose(0, 1).contiguous().view(B, h, wf, nb, bs, 2)).view(B, h, wf, C)

    def forward(self, x):
        h, w = x.shape[1:3]
        with torch.autocast(x.device.type, enabled=False):
            modes = torch.fft.rfft2(x.float(), dim=(1, 2), norm="ortho")
            out = torch.fft.irfft2(self.filter_modes(modes), s=(h, w), dim=(1, 2), norm="ortho").to(x.dtype)
        return x + out  # the filter's own skip (x first: the sum keeps x's contiguous layout)


class AFNOBlock(nn.Module):
    def __init__(self, dim, num_blocks, mlp_ratio, sparsity_threshold, hard_thresholding_fraction):
        super().__init__()
        hidden = int(dim * mlp_ratio)
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.filter = AFNO2D(dim, num_blocks, sparsity_threshold, hard_thresholding_fraction)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        x = x + self.filter(self.norm1(x))  # double skip
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class Model(nn.Module):
    def __init__(self, m, shape):
        super().__init__()
        p, D = m["patch_size"], m["embed_dim"]
        self.p = p
        self.nh, self.nw = -(-shape["lat"] // p), -(-shape["lon"] // p)
        self.out_c = shape["out_channels"]
        self.embed = nn.Conv2d(shape["in_channels"], D, p, stride=p)
        self.pos_embed = nn.Parameter(torch.randn(1, self.nh * self.nw, D) * 0.02)
        self.blocks = nn.ModuleList(
            AFNOBlock(D, m["afno_blocks"], m.get("mlp_ratio", 4.0), m.get("sparsity_threshold", 0.01),
                      m.get("hard_thresholding_fraction", 1.0))
            for _ in range(m["depth"]))
        self.head = nn.Linear(D, p * p * self.out_c, bias=False)

    def forward(self, x):
        lat, lon = x.shape[-2:]
        p, nh, nw = self.p, self.nh, self.nw
        if nh * p != lat or nw * p != lon:
            x = F.pad(x, (0, nw * p - lon, 0, nh * p - lat))
        # Contiguous once: the transposed conv output's layout would otherwise run through every
        # block (the C++ model does the same).
        tokens = (self.embed(x).flatten(2).transpose(1, 2) + self.pos_embed).contiguous()
        x = tokens.view(tokens.shape[0], nh, nw, tokens.shape[2])  # the AFNO works on the patch grid
        for block in self.blocks:
            x = block(x)
        B = x.shape[0]
        grid = (self.head(x).reshape(B, nh, nw, p, p, self.out_c)
                .permute(0, 5, 1, 3, 2, 4).reshape(B, self.out_c, nh * p, nw * p))
        if nh * p == lat and nw * p == lon:
            return grid
        return grid[..., :lat, :lon].contiguous()
