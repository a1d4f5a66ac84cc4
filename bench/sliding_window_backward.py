#!/usr/bin/env python3
"""AIFS's sliding-window attention (models/aifs/aifs.cpp `sliding_window_attention`), forward and
backward, as it is written now and with the keys taken another way (issue 26's follow-up).

Now: each query block's keys and values are a `narrow` of the whole k and v. The backward of a
narrow is a gradient the size of the whole tensor (zeros but the slab), and autograd sums one per
block into k's and v's gradients (and q's), so the backward does blocks x whole-size work per layer:
quadratic in the hidden nodes. bench/aifs_step_parts (bench/results/model_parallel_step_aifs_2026-11-27)
sees it as the processor attention's backward growing faster than its forward and as time outside
every autograd node (autograd's own gradient sums) growing 8.4 times from O16 to O32 (3.3 times the
nodes).

Pieces: k and v split once (`split_with_sizes`) at every block's slab edges, each block's slab the
`cat` of its pieces, q split into its blocks: the backward of a split and a cat moves piece-sized
gradients, linear in the nodes. The same keys, masks and products: the outputs and gradients are
bitwise the ones now (printed). Its cost: each block's slab is a copy, which SDPA saves for the
backward (the views of now share k's storage), about 2 (k, v) x (block + 2 window) / block latent-sized
tensors more per layer in training, which the estimator's formulas (models/aifs/aifs_memory.cpp)
would have to count before it replaces the narrow in the model.

  .venv/bin/python bench/sliding_window_backward.py [--nodes 1600 5248] [--window 64] [--reps 3]

One thread; CPU ms per call (process time, the median of the repetitions after one warm-up).
Defaults: O16's and O32's hidden nodes, micro-batch 4, 4 heads of 16 (64 channels), window 64.
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F


def block_size(window, keys):
    return max(min(window, keys), 64)  # as aifs.cpp


def mask(a, b, k0, k1, window, q_offset):
    qi = torch.arange(a + q_offset, b + q_offset).view(-1, 1)
    ki = torch.arange(k0, k1).view(1, -1)
    return (qi - ki).abs() <= window


def narrowed(q, k, v, window, q_offset=0):
    """What aifs.cpp does now."""
    N, K = q.size(2), k.size(2)
    block = block_size(window, K)
    parts = []
    for a in range(0, N, block):
        b = min(N, a + block)
        k0, k1 = max(0, a + q_offset - window), min(K, b + q_offset + window)
        parts.append(F.scaled_dot_product_attention(q[:, :, a:b], k[:, :, k0:k1], v[:, :, k0:k1],
                                                    attn_mask=mask(a, b, k0, k1, window, q_offset)))
    return torch.cat(parts, 2)


def pieces(q, k, v, window, q_offset=0):
    """The same slabs built from pieces split once."""
    N, K = q.size(2), k.size(2)
    block = block_size(window, K)
    slabs, cuts = [], {0, K}
    for a in range(0, N, block):
        b = min(N, a + block)
        k0, k1 = max(0, a + q_offset - window), min(K, b + q_offset + window)
        slabs.append((a, b, k0, k1))
        cuts.update((k0, k1))
    cuts = sorted(cuts)
    sizes = [e - s for s, e in zip(cuts, cuts[1:])]
    kp, vp = k.split(sizes, 2), v.split(sizes, 2)
    qp = q.split(block, 2)
    parts = []
    for i, (a, b, k0, k1) in enumerate(slabs):
        p0, p1 = cuts.index(k0), cuts.index(k1)
        kk = kp[p0] if p1 - p0 == 1 else torch.cat(kp[p0:p1], 2)
        vv = vp[p0] if p1 - p0 == 1 else torch.cat(vp[p0:p1], 2)
        parts.append(F.scaled_dot_product_attention(qp[i], kk, vv, attn_mask=mask(a, b, k0, k1, window, q_offset)))
    return torch.cat(parts, 2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1600, 5248])
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=16)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    for n in args.nodes:
        shape = (args.batch, args.heads, n, args.head_dim)
        q, k, v = (torch.randn(shape, requires_grad=True) for _ in range(3))
        grad = torch.randn(shape)
        results = {}
        for fn in (narrowed, pieces):
            fwd, bwd = [], []
            for rep in range(args.reps + 1):
                for t in (q, k, v):
                    t.grad = None
                t0 = time.process_time()
                out = fn(q, k, v, args.window)
                t1 = time.process_time()
                out.backward(grad)
                t2 = time.process_time()
                if rep > 0:
                    fwd.append(1e3 * (t1 - t0))
                    bwd.append(1e3 * (t2 - t1))
            results[fn.__name__] = [out.detach()] + [t.grad.clone() for t in (q, k, v)]
            print(f"nodes={n} window={args.window} keys={fn.__name__} forward_ms={statistics.median(fwd):.1f} "
                  f"backward_ms={statistics.median(bwd):.1f}")
        diff = max((a - b).abs().max().item() for a, b in zip(results["narrowed"], results["pieces"]))
        print(f"nodes={n} largest difference of output and gradients, pieces against narrowed: {diff:g}")


if __name__ == "__main__":
    main()
