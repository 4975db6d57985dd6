#!/usr/bin/env python3
"""Idle time between GPU kernels, from an Nsight Systems kernel trace.

Reads the CSV of `nsys stats --report cuda_gpu_trace --format csv` (one
row per kernel or memory operation, with "Start (ns)", "Duration (ns)"
and "Name" columns) and reports, for the rows of the last WINDOW
milliseconds of the trace (the decode steps of a `bench speed` run end
it): the kernels, their summed run time, the span from the first start to
the last end, and the idle gaps between one operation's end and the next
one's start (median, 90th percentile, sum). A decode step that is bound by
launches, not by its kernels, shows as a sum of gaps near the kernel time.

Usage: kernel_gaps.py TRACE.csv [WINDOW_MS]
"""
import csv
import statistics
import sys


def column(header, *names):
    for n in names:
        for i, h in enumerate(header):
            if h.strip().lower() == n.lower():
                return i
    raise SystemExit(f"kernel_gaps: no column {names[0]!r} in {header}")


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    window = float(sys.argv[2]) * 1e6 if len(sys.argv) > 2 else 50e6
    with open(sys.argv[1], newline="") as f:
        rows = list(csv.reader(f))
    # nsys may print notes before the header: start at the row naming Start.
    start = next((i for i, r in enumerate(rows) if any("Start" in c for c in r)), None)
    if start is None:
        raise SystemExit("kernel_gaps: no header row with a Start column")
    header, body = rows[start], rows[start + 1:]
    cs, cd, cn = column(header, "Start (ns)", "Start"), column(header, "Duration (ns)", "Duration"), column(header, "Name")
    ops = []
    for r in body:
        try:
            ops.append((int(float(r[cs])), int(float(r[cd])), r[cn]))
        except (ValueError, IndexError):
            continue
    if not ops:
        raise SystemExit("kernel_gaps: no rows")
    ops.sort()
    end = max(s + d for s, d, _ in ops)
    ops = [o for o in ops if o[0] >= end - window]
    gaps, busy_until = [], ops[0][0]
    for s, d, _ in ops:
        if s > busy_until:
            gaps.append(s - busy_until)
        busy_until = max(busy_until, s + d)
    run = sum(d for _, d, _ in ops)
    span = busy_until - ops[0][0]
    print(f"last {window / 1e6:.1f} ms of the trace: {len(ops)} operations, {run / 1e3:.1f} µs running, "
          f"span {span / 1e3:.1f} µs, {len(gaps)} gaps summing to {sum(gaps) / 1e3:.1f} µs")
    if gaps:
        q = statistics.quantiles(gaps, n=10) if len(gaps) > 1 else [gaps[0]] * 9
        print(f"gap median {statistics.median(gaps) / 1e3:.2f} µs, 90th percentile {q[8] / 1e3:.2f} µs")


if __name__ == "__main__":
    main()
