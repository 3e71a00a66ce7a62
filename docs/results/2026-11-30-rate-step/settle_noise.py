import csv, sys, statistics
# settle by the lab's rule (±10 %) and by a noise-aware band ±max(10 %, 2 sd of the seconds 6..14 after the step)
rows = list(csv.DictReader(open(sys.argv[1])))
pts = {}
for r in rows:
    pts.setdefault((r['mechanism'], r['ses'], r['run']), []).append((float(r['t_s']), float(r['re_goodput'])))
for (m, ses, run), s in sorted(pts.items()):
    at = 10.0; end = max(t for t, _ in s) - 1
    steady_s = [g for t, g in s if end - 5 < t <= end]
    tail = [g for t, g in s if at + 5 < t <= end]
    mean = statistics.mean(steady_s); sd = statistics.pstdev(tail)
    def settle(band):
        after = [(t, g) for t, g in s if at < t <= end]
        out = [t for t, g in after if abs(g - mean) > band]
        return (max(out) - at) if out else 0
    print(f"{m:7} {ses:>2} SEs: mean {mean:.0f}, sd of seconds 6-14 after {sd:.1f} ({sd/mean*100:.0f} %); settled ±10 %: {settle(0.1*mean):.0f} s, ±max(10 %, 2 sd): {settle(max(0.1*mean, 2*sd)):.0f} s")
