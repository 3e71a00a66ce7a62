#!/usr/bin/env python3
"""Seed 003's load step on topology 2 (lab/sim/seed003-topology2-step.toml: 25 calls/s for
200 s, 100 calls/s from 200 s to 400 s, 25 calls/s to 600 s). From each run's per-second
series (timeseries.csv.gz: network goodput = 200 OKs within 10 s received in that second,
pdd_mean_ms = their mean setup delay; the cores' OCC occupancy and busy share):
  delay_s   seconds from the up-step (200 s) until the setup delay is under 1 s for good
            (every later second of the overload step with answers has a mean under 1 s);
  resp_s    the paper's response time (NOTES.md, Tables 2-3): from the first second after the
            up-step in which every core's occupancy is below 50% to the first later second of
            goodput >= C (0 when no such second: the cores never emptied);
  over      mean goodput over seconds 221-400; pdd  mean setup delay over them (ms);
  down_s    seconds from the down-step (400 s) to the first second of goodput >= 0.9 x offered.
Means and 95% CIs (Student's t) over runs. Usage: step.py C DIR [DIR ...] (plain runs)."""
import csv, gzip, math, sys

T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228]
CORES = ("c1", "c2", "c3", "c4")


def est(xs):
    n = len(xs)
    m = sum(xs) / n
    if n < 2:
        return m, 0.0
    v = sum((x - m) ** 2 for x in xs) / (n - 1)
    return m, T975[min(n - 2, 9)] * math.sqrt(v / n)


C = float(sys.argv[1])
print("| run directory | setup delay < 1 s after the up-step (s) | paper's response time (s) | goodput at 100 calls/s | setup delay there (ms) | back to offered after the down-step (s) |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for d in sys.argv[2:]:
    runs = {}
    for row in csv.DictReader(gzip.open(f"{d}/timeseries.csv.gz", "rt")):
        r = runs.setdefault(int(row["run"]), {})
        t = int(row["t_s"])
        sec = r.setdefault(t, {"occ": 0.0})
        if row["server"] in CORES:
            sec["occ"] = max(sec["occ"], float(row["occupancy"] or 0))
        sec["g"] = float(row["goodput"])
        sec["off"] = int(row["offered"])
        sec["pdd"] = float(row["pdd_mean_ms"]) if row["pdd_mean_ms"] else None
    delays, resps, overs, pdds, downs = [], [], [], [], []
    for g in runs.values():
        bad = [t for t in range(201, 401) if g[t]["pdd"] is not None and g[t]["pdd"] >= 1000]
        delays.append((max(bad) - 200) if bad else 0)
        low = next((t for t in range(201, 401) if g[t]["occ"] < 0.5), None)
        if low is None:
            resps.append(0)
        else:
            resps.append(next((t - low for t in range(low, 401) if g[t]["g"] >= C), 400 - low))
        overs.append(sum(g[t]["g"] for t in range(221, 401)) / 180)
        w = [(g[t]["g"], g[t]["pdd"]) for t in range(221, 401) if g[t]["pdd"] is not None]
        pdds.append(sum(a * b for a, b in w) / max(1, sum(a for a, _ in w)))
        downs.append(next((t - 400 for t in range(401, 601) if g[t]["g"] >= 0.9 * g[t]["off"]), 200))
    f = lambda xs, p=1: ("%." + str(p) + "f ± %." + str(p) + "f") % est(xs)
    print(f"| {d.rstrip('/').split('/')[-1]} | {f(delays)} | {f(resps)} | {f(overs)} | {f(pdds, 0)} | {f(downs)} |")
