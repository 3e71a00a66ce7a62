#!/usr/bin/env python3
"""Recovery after the load steps of lab/sim/seed003-mixed-step.toml (0.5x for 60 s, 3x for
60 s, 0.5x for 60 s; C = 28.6 calls/s). From each run's per-second network goodput
(timeseries.csv.gz, 200 OKs within 10 s received by the callers in that second) and core C1's
OCC occupancy:
  up_s    seconds from the up-step (60 s) to the start of the first 3 s (after the first two,
          in which the calls admitted before DEOC reacted still complete) whose mean goodput
          is >= 0.75 C;
  resp_s  the paper's response time (NOTES.md, Table 2-3): from the first second after the
          up-step in which C1's occupancy is below 50% to the first later second of goodput
          >= 0.8 C (0 when the occupancy never fell below 50%);
  over    mean goodput over seconds 61-120 (the overload step);
  down_s  seconds from the down-step (120 s) to the first second of goodput >= 0.9 x offered.
Means and 95% CIs (Student's t) over runs. Usage: step.py DIR [DIR ...] (plain runs)."""
import csv, gzip, math, sys

C = 28.571
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228]

def est(xs):
    n = len(xs)
    m = sum(xs) / n
    if n < 2:
        return m, 0.0
    v = sum((x - m) ** 2 for x in xs) / (n - 1)
    return m, T975[min(n - 2, 9)] * math.sqrt(v / n)

print("| run directory | to 0.75 C after the up-step (s) | paper's response time (s) | goodput at 3x | back to offered after the down-step (s) |")
print("| --- | ---: | ---: | ---: | ---: |")
for d in sys.argv[1:]:
    runs = {}
    for row in csv.DictReader(gzip.open(f"{d}/timeseries.csv.gz", "rt")):
        if row["server"] != "c1":
            continue
        runs.setdefault(int(row["run"]), []).append(
            (int(row["t_s"]), float(row["goodput"]), int(row["offered"]),
             float(row["occupancy"] or 0)))
    ups, resps, overs, downs = [], [], [], []
    for rows in runs.values():
        g = {t: (gp, off, occ) for t, gp, off, occ in rows}
        up = next((t - 60 for t in range(63, 119)
                   if sum(g[t + k][0] for k in range(3)) / 3 >= 0.75 * C), 60)
        low = next((t for t in range(61, 121) if g[t][2] < 0.5), None)
        if low is None:
            resp = 0
        else:
            resp = next((t - low for t in range(low, 121) if g[t][0] >= 0.8 * C), 120 - low)
        over = sum(g[t][0] for t in range(61, 121)) / 60
        down = next((t - 120 for t in range(121, 181) if g[t][0] >= 0.9 * g[t][1]), 60)
        ups.append(up); resps.append(resp); overs.append(over); downs.append(down)
    f = lambda xs: "%.1f ± %.1f" % est(xs)
    print(f"| {d.rstrip('/').split('/')[-1]} | {f(ups)} | {f(resps)} | {f(overs)} | {f(downs)} |")
