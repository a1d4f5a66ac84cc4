#!/usr/bin/env python3
"""crps_reference.py CRPS_CASES OUT — wxtrain's afCRPS against anemoi-training's CRPS(alpha).

Runs the crps_cases program (tests/trainer/crps_cases.cpp), which writes random members, targets
and wxtrain's afCRPS per point, and recomputes each case here with torch the way anemoi-training's
naive kernel CRPS does (anemoi/training/losses/kcrps.py, re-derived, not imported): the mean absolute
error of the members, minus (1 - eps) times the sum of |x_i - x_j| over the pairs i < j, looped
member by member, times 1 / (M (M - 1)), eps = (1 - alpha) / M. That is the formula of Lang et al.
2024 (arXiv 2412.15832, eq. 4) with the pairs j != k counted once each way. For alpha = 0 it is also
checked against the energy form E|X - y| - E|X - X'| / 2 over all M^2 pairs (the kernel CRPS).

Exit 0: every case agrees to 1e-5 relative; 1: a case differs; 77: no torch here (skipped).
"""
import subprocess
import sys

try:
    import torch
except ImportError:
    print("no torch in " + sys.executable + ": skipped")
    sys.exit(77)


def anemoi_afcrps(members, target, alpha):
    """members [M, P], target [P], float64: anemoi-training's naive almost-fair kernel CRPS."""
    m = members.shape[0]
    eps = (1.0 - alpha) / m
    mae = (members - target.unsqueeze(0)).abs().mean(0)
    spread = torch.zeros_like(target)
    for i in range(m):  # anemoi loops over members to keep memory at M x P
        spread += (members[i].unsqueeze(0) - members[i + 1:]).abs().sum(0)
    return mae - (1.0 - eps) * spread / (m * (m - 1))


def kernel_crps(members, target):
    """alpha = 0: the plain kernel (energy) form over all M^2 pairs."""
    skill = (members - target.unsqueeze(0)).abs().mean(0)
    pairs = (members.unsqueeze(0) - members.unsqueeze(1)).abs().mean((0, 1))
    return skill - 0.5 * pairs


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    subprocess.run([sys.argv[1], sys.argv[2]], check=True)
    lines = open(sys.argv[2]).read().splitlines()
    failures = cases = 0
    worst = 0.0
    for c in range(0, len(lines), 4):
        alpha, m, p, precision = lines[c].split()
        alpha, m, p = float(alpha), int(m), int(p)
        values = [torch.tensor([float(v) for v in lines[c + k].split()], dtype=torch.float64) for k in (1, 2, 3)]
        members, target, ours = values[0].view(m, p), values[1], values[2]
        reference = anemoi_afcrps(members, target, alpha)
        scale = max(1.0, reference.abs().max().item())
        err = (ours - reference).abs().max().item() / scale
        if alpha == 0.0:
            err = max(err, (reference - kernel_crps(members, target)).abs().max().item() / scale)
        worst = max(worst, err)
        cases += 1
        if err > 1e-5:
            failures += 1
            print(f"FAIL: alpha {alpha}, {m} members, {precision}: max relative difference {err:.3g}")
    if cases != 2 * 3 * 15:
        print(f"FAIL: expected 90 cases, read {cases}")
        return 1
    if failures:
        return 1
    print(f"PASS: {cases} cases (alpha 0, 0.95, 1; members 2..16; fp32 and bf16-mixed) agree with anemoi's "
          f"CRPS formula, max relative difference {worst:.2g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
