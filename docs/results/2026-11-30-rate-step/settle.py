import csv, sys, statistics
# usage: settle.py timeseries.csv [step_at=20] [phase_end=40]
f = sys.argv[1]; at = int(sys.argv[2]) if len(sys.argv) > 2 else 20; end = int(sys.argv[3]) if len(sys.argv) > 3 else 40
runs = {}
for r in csv.DictReader(open(f)):
    if r['server'] != 're': continue
    runs.setdefault(r['run'], {})[int(r['t_s'])] = (float(r['goodput']), float(r['pdd_mean_ms'] or 0))
out = []
for run, ts in sorted(runs.items()):
    g = [ts[t][0] for t in range(at + 1, end + 1) if t in ts]
    steady = statistics.mean(g[10:])
    settle = None
    for i in range(len(g)):
        if all(abs(x - steady) <= 0.1 * steady for x in g[i:]):
            settle = i; break
    pdd = [round(ts[t][1]) for t in range(at + 1, at + 9) if t in ts]
    out.append(settle)
    print(f"run {run}: steady {steady:.0f} settle {settle} s; goodput {[int(x) for x in g[:10]]}; pdd mean {pdd}")
print("settle", out)
