#!/usr/bin/env python3
"""Checks a memory snapshot written by `wxtrain profile --snapshot FILE --json` with PyTorch's own
tools (run by the torch wheel's interpreter, .venv/bin/python):

  * `python -m torch.cuda._memory_viz stats | trace | trace_plot | segment_plot FILE` succeed, and
    trace_plot writes an HTML page that embeds the snapshot;
  * the pickle uses only the opcodes the unpickler of pytorch.org/memory_viz (MemoryViz.js) reads,
    and its integers are exact in JavaScript;
  * the structure memory_viz reads: segments with blocks that tile them, device_traces entries with
    action, addr, size, stream, time_us (and frames);
  * the trace is consistent: every alloc inside a live segment, allocs and frees of an address
    alternate with equal sizes, what the trace leaves live is what the segments hold;
  * the peak of live bytes over the trace (memory_viz's "Active Memory Timeline") is within
    --tolerance of the `peak_bytes` that `wxtrain profile --json` reported.

Usage: check_snapshot.py SNAPSHOT.pickle PROFILE.json [--tolerance 0.02] [--expect-entries N]
       [--labels]
"""
import argparse
import base64
import json
import pickle
import pickletools
import re
import subprocess
import sys

# The opcodes MemoryViz.js's unpickle() handles (torch/utils/viz/MemoryViz.js): anything else makes
# the page fail with "UNKNOWN OPCODE" when the file is dropped on it.
MEMORY_VIZ_OPCODES = {
    "PROTO", "APPEND", "APPENDS", "LIST", "TUPLE", "NEWFALSE", "NEWTRUE", "NONE", "BINGET", "BININT",
    "BININT1", "BININT2", "EMPTY_DICT", "EMPTY_LIST", "FRAME", "LONG1", "LONG_BINGET", "MARK",
    "MEMOIZE", "BINPUT", "LONG_BINPUT", "SETITEMS", "SETITEM", "DICT", "SHORT_BINUNICODE",
    "BINUNICODE", "STOP", "EMPTY_TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "BINFLOAT",
}
ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "segment_map",
           "segment_unmap", "oom", "snapshot"}
SEGMENT_KEYS = {"device", "address", "total_size", "allocated_size", "active_size", "requested_size", "stream",
                "segment_type", "blocks"}
BLOCK_KEYS = {"size", "requested_size", "state", "frames"}
BLOCK_STATES = {"active_allocated", "active_pending_free", "inactive"}

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
    return condition


def memory_viz(*args):
    cmd = [sys.executable, "-m", "torch.cuda._memory_viz", *args]
    run = subprocess.run(cmd, capture_output=True, text=True)
    check(run.returncode == 0,
          f"{' '.join(cmd[1:])} exited {run.returncode}:\n{run.stdout[-2000:]}{run.stderr[-4000:]}")
    return run.stdout


def check_opcodes(raw):
    seen = set()
    for op, arg, _pos in pickletools.genops(raw):
        seen.add(op.name)
        if op.name == "LONG1" or op.name.startswith("BININT"):
            check(abs(arg) < 2**53, f"integer {arg} is not exact in memory_viz's JavaScript")
    unknown = seen - MEMORY_VIZ_OPCODES
    check(not unknown, f"opcodes memory_viz cannot read: {sorted(unknown)}")
    check(raw[:2] == b"\x80\x02", f"expected pickle protocol 2 (as PyTorch writes it), got {raw[:2]!r}")


def check_structure(data, device):
    if not check(isinstance(data, dict) and {"segments", "device_traces"} <= set(data),
                 f"expected a dict with segments and device_traces, got {type(data).__name__}"):
        return None
    check(isinstance(data["device_traces"], list) and len(data["device_traces"]) > device,
          f"device_traces has no trace for device {device}")
    for i, seg in enumerate(data["segments"]):
        missing = SEGMENT_KEYS - set(seg)
        if not check(not missing, f"segment {i} lacks {sorted(missing)}"):
            continue
        blocks = seg["blocks"]
        check(len(blocks) > 0, f"segment {i} has no blocks")
        check(sum(b["size"] for b in blocks) == seg["total_size"], f"segment {i}'s blocks do not tile it")
        allocated = sum(b["size"] for b in blocks if b["state"] == "active_allocated")
        check(seg["allocated_size"] == allocated, f"segment {i}: allocated_size {seg['allocated_size']} != {allocated}")
        address = seg["address"]
        for b in blocks:
            check(not (BLOCK_KEYS - set(b)), f"a block of segment {i} lacks {sorted(BLOCK_KEYS - set(b))}")
            check(b.get("state") in BLOCK_STATES, f"block state {b.get('state')!r}")
            check(0 <= b.get("requested_size", 0) <= b.get("size", 0), f"block of segment {i}: requested > size")
            if "address" in b:
                check(b["address"] == address, f"segment {i}: block address {b['address']} != {address}")
            address += b.get("size", 0)
    trace = data["device_traces"][device] if len(data["device_traces"]) > device else []
    for i, e in enumerate(trace):
        check(e.get("action") in ACTIONS, f"entry {i}: action {e.get('action')!r}")
        # frames are optional: PyTorch leaves them out of events recorded without a stack.
        keys = {"action", "size", "stream", "time_us", "device_free" if e.get("action") == "oom" else "addr"}
        check(keys <= set(e), f"entry {i} ({e.get('action')}) lacks {sorted(keys - set(e))}")
        for f in e.get("frames", []):
            check({"filename", "line", "name"} <= set(f), f"entry {i}: a frame lacks filename/line/name")
    times = [e["time_us"] for e in trace if "time_us" in e]
    check(all(b >= a - 1_000_000 for a, b in zip(times, times[1:])), "time_us goes backwards")
    return trace


def check_trace(data, trace, device):
    """Replays the trace as memory_viz does; returns the peak of live bytes over it."""
    segments = {s["address"]: s["total_size"] for s in data["segments"] if s["device"] == device}
    # The segments at the start of the trace: undo its segment events from the end (memory_viz's
    # segment view does the same).
    for e in reversed(trace):
        if e["action"] in ("segment_alloc", "segment_map"):
            check(e["addr"] in segments, f"segment_alloc of {e['addr']:#x} that is gone without a segment_free")
            segments.pop(e["addr"], None)
        elif e["action"] in ("segment_free", "segment_unmap"):
            check(e["addr"] not in segments, f"segment_free of {e['addr']:#x} that is still a segment")
            segments[e["addr"]] = e["size"]

    def in_segment(addr):
        return any(a <= addr < a + size for a, size in segments.items())

    live, requested, allocated_in_trace = {}, {}, set()
    freed_before_alloc = 0  # blocks from before the trace: freed with no alloc in it
    alloc_bytes = free_bytes = 0
    for i, e in enumerate(trace):
        action = e["action"]
        if action == "segment_alloc":
            segments[e["addr"]] = e["size"]
        elif action == "segment_free":
            segments.pop(e["addr"], None)
        elif action == "alloc":
            check(e["addr"] not in live, f"entry {i}: alloc of {e['addr']:#x}, which is live")
            check(in_segment(e["addr"]), f"entry {i}: alloc of {e['addr']:#x} outside every segment")
            live[e["addr"]] = e["size"]
            allocated_in_trace.add(e["addr"])
            alloc_bytes += e["size"]
        elif action == "free_requested":
            if e["addr"] in live:
                check(live[e["addr"]] == e["size"], f"entry {i}: freed {e['size']} B of a {live[e['addr']]} B block")
            else:
                check(e["addr"] not in allocated_in_trace, f"entry {i}: second free of {e['addr']:#x}")
            requested[e["addr"]] = e["size"]
        elif action == "free_completed":
            check(requested.pop(e["addr"], None) == e["size"], f"entry {i}: free_completed without free_requested")
            if e["addr"] in live:
                del live[e["addr"]]
            else:
                freed_before_alloc += 1
            free_bytes += e["size"]
    active = {}
    for s in data["segments"]:
        if s["device"] != device:
            continue
        address = s["address"]
        for b in s["blocks"]:
            if b["state"] in ("active_allocated", "active_pending_free"):
                active[address] = b["requested_size"]
            address += b["size"]
    for addr, size in live.items():
        check(active.get(addr) == size,
              f"the trace leaves {size} B live at {addr:#x}, the segments hold {active.get(addr)} B there")
    for addr in requested:
        check(addr in active, f"free of {addr:#x} requested and never completed, and not pending in the segments")
    end = sum(active.values())
    start = end - alloc_bytes + free_bytes
    check(start >= 0, f"the trace frees {free_bytes - alloc_bytes - end} B more than it could hold")
    peak = now = start
    for e in trace:
        if e["action"] == "alloc":
            now += e["size"]
            peak = max(peak, now)
        elif e["action"] == "free_completed":
            now -= e["size"]
    check(now == end, f"replaying the trace ends at {now} B, the segments hold {end} B")
    allocs = sum(1 for e in trace if e["action"] == "alloc")
    frees = sum(1 for e in trace if e["action"] == "free_completed")
    print(f"trace: {len(trace)} events, {allocs} allocs, {frees} frees ({freed_before_alloc} of blocks from before "
          f"it), {len(live)} left live; live bytes {start} at its start, {end} at its end, peak {peak}")
    return peak


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("snapshot")
    parser.add_argument("profile_json")
    parser.add_argument("--device", type=int, default=0, help="the trace to check (default 0)")
    parser.add_argument("--tolerance", type=float, default=0.02,
                        help="largest relative difference between the trace's peak and peak_bytes")
    parser.add_argument("--expect-entries", type=int, default=0, help="the trace holds exactly this many events")
    parser.add_argument("--labels", action="store_true",
                        help="every event of the steps is labelled with its step and phase (CPU)")
    args = parser.parse_args()

    with open(args.profile_json) as f:
        profile = json.load(f)
    with open(args.snapshot, "rb") as f:
        raw = f.read()
    check_opcodes(raw)
    data = pickle.loads(raw)
    trace = check_structure(data, args.device)
    if failures:
        return report()
    check(len(trace) > 0, "the trace is empty")

    # PyTorch's own readers.
    stats = memory_viz("stats", args.snapshot)
    check("total_reserved" in stats, "`stats` printed no totals")
    text = memory_viz("trace", args.snapshot)
    check(re.search(rf"\b{len(trace)} entries", text) is not None, f"`trace` did not report {len(trace)} entries")
    html_path = args.snapshot + ".html"
    memory_viz("trace_plot", args.snapshot, "-o", html_path)
    with open(html_path) as f:
        html = f.read()
    embedded = re.search(r'"base64": "([A-Za-z0-9+/=]+)"', html)
    if check("MemoryViz.js" in html and embedded is not None, "trace_plot wrote no memory_viz page"):
        check(len(html) > len(raw), f"trace_plot's page ({len(html)} chars) is smaller than the snapshot")
        check(pickle.loads(base64.b64decode(embedded.group(1))) == data, "the page embeds another snapshot")
    memory_viz("segment_plot", args.snapshot, "-o", args.snapshot + ".segments.html")

    if args.expect_entries:
        check(len(trace) == args.expect_entries,
              f"expected {args.expect_entries} events (the ring buffer's bound), got {len(trace)}")
    peak = check_trace(data, trace, args.device)
    truncated = args.expect_entries and len(trace) == args.expect_entries
    expected = profile["peak_bytes"]
    if not truncated:
        diff = abs(peak - expected) / max(expected, 1)
        print(f"peak over the trace {peak} B, wxtrain profile's peak_bytes {expected} B ({100 * diff:.3f}% apart)")
        check(diff <= args.tolerance,
              f"the trace's peak {peak} B is {100 * diff:.2f}% from peak_bytes {expected} B "
              f"(tolerance {100 * args.tolerance:.1f}%)")
    if args.labels:
        steps = len(profile["steps"])
        seen = set()
        for e in trace:
            if e["action"] != "alloc":
                continue
            frames = e["frames"]
            if check(len(frames) == 1 and frames[0]["filename"] == "wxtrain profile step",
                     f"alloc without its step label: {frames}"):
                seen.add((frames[0]["line"], frames[0]["name"]))
        want = {(s, p) for s in range(1, steps + 1) for p in ("forward/backward", "optimizer")}
        check(want <= seen, f"no allocations labelled {sorted(want - seen)}")
    return report()


def report():
    for message in failures[:50]:
        print("FAIL:", message)
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    print("snapshot OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
