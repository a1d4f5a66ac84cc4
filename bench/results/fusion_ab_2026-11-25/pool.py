"""Pools the `pair` lines of fusion_ab outputs: per (fusion, config, precision) the median of the
plain / fused ratios, their quartiles and the share of pairs where the fused step was faster.
    python3 pool.py run1.txt run2.txt run3_all.txt"""
import collections
import re
import statistics
import sys

pairs = collections.defaultdict(list)
for path in sys.argv[1:]:
    for line in open(path):
        m = re.match(r"pair fusion=(\S+) config=(\S+) precision=(\S+) pair=\d+ on_ms=\S+ off_ms=\S+ off/on=(\S+)", line)
        if m:
            pairs[m.groups()[:3]].append(float(m.group(4)))
print("| fusion | config | precision | pairs | plain / fused (median) | quartiles | fused faster in |")
print("|---|---|---|---:|---:|---:|---:|")
for (fusion, config, precision), r in pairs.items():
    s = sorted(r)
    q = lambda p: s[int(p * (len(s) - 1))]
    print(f"| {fusion} | {config} | {precision} | {len(r)} | {statistics.median(r):.3f}x | {q(.25):.3f}-{q(.75):.3f} "
          f"| {100 * sum(x > 1 for x in r) / len(r):.0f}% |")
