"""PhysicsNeMo's Pangu computes the values wxtrain's Pangu must reproduce (test_pangu_reference.cpp).

Run in the reference environment (PhysicsNeMo installed): builds a small
physicsnemo.models.pangu.Pangu with fixed-seed random weights and writes into OUT_DIR
  args.json       the constructor's arguments
  state.pt        its state_dict (parameters and buffers), torch.save of a plain dict
  tensors.pt      the input x [B, 72, H, W] (the reference's channel order: 4 surface, 3 masks, 5 x 13
                  upper air), its outputs (surface [B, 4, H, W], upper_air [B, 5, 13, H, W]), the
                  weights of the scalar loss = sum(surface * w_surface) + sum(upper_air * w_upper)
                  and the loss itself
  grads.pt        d loss / d parameter for every parameter, by the state_dict's names
  published.json  the names, shapes and dtypes of Pangu() with its defaults (the published
                  size), built on the meta device, and its parameter count
Every weight is perturbed from its initialisation (LayerNorms start at 1 and 0, the bias tables
near 0), so that a tensor mapped to the wrong place changes the output.
"""
import json
import os
import sys

import torch
from physicsnemo.models.pangu import Pangu

# A grid whose padding is uneven everywhere: 37 latitudes pad to 40 (1 before, 2 after) in the
# patch embeddings, 70 longitudes to 72 (1, 1); the 10 x 18 token grid pads to windows of 6 x 8
# (1, 1 and 3, 3), the 5 x 9 coarse grid to 6 x 16 (0, 1 and 3, 4): its window is larger than its
# latitudes. The window's longitude (8) is not twice the reference's fixed roll (6), so its
# longitude mask is not at the date line.
ARGS = {
    "img_size": [37, 70],
    "patch_size": [2, 4, 4],
    "embed_dim": 16,
    "num_heads": [2, 4, 4, 2],
    "window_size": [2, 6, 8],
}
BATCH = 2


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    torch.manual_seed(20261126)
    model = Pangu(**ARGS).eval()  # eval: no drop path (wxtrain has none)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    h, w = ARGS["img_size"]
    x = torch.randn(BATCH, 72, h, w)
    w_surface = torch.randn(BATCH, 4, h, w)
    w_upper = torch.randn(BATCH, 5, 13, h, w)
    surface, upper = model(x)
    loss = (surface * w_surface).sum() + (upper * w_upper).sum()
    loss.backward()

    with open(os.path.join(out_dir, "args.json"), "w") as f:
        json.dump(ARGS, f)
    torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, os.path.join(out_dir, "state.pt"))
    torch.save({"input": x, "surface": surface.detach(), "upper_air": upper.detach(), "w_surface": w_surface,
                "w_upper": w_upper, "loss": loss.detach().reshape(1)}, os.path.join(out_dir, "tensors.pt"))
    torch.save({k: p.grad.detach().clone() for k, p in model.named_parameters()}, os.path.join(out_dir, "grads.pt"))

    with torch.device("meta"):
        published = Pangu()
    with open(os.path.join(out_dir, "published.json"), "w") as f:
        json.dump({"parameters": sum(p.numel() for p in published.parameters()),
                   "state": [[k, list(v.shape), str(v.dtype).replace("torch.", "")]
                             for k, v in published.state_dict().items()]}, f)
    print(f"pangu_fixture: {len(model.state_dict())} tensors, loss {loss.item():.6g}, written to {out_dir}")


if __name__ == "__main__":
    main(sys.argv[1])
