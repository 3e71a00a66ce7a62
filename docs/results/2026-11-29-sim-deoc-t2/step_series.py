#!/usr/bin/env python3
"""Per-second network goodput and mean setup delay of the load step, averaged over the runs of
each plain run directory (timeseries.csv.gz of `holdline sim run ... --mechanism M`), written
as step-series.csv and drawn as step-series.svg (goodput above, setup delay below, one line per
directory). Usage: step_series.py OUTDIR LABEL=DIR [LABEL=DIR ...]."""
import csv, gzip, sys

out = sys.argv[1]
series = {}
for arg in sys.argv[2:]:
    label, d = arg.split("=", 1)
    acc = {}
    for row in csv.DictReader(gzip.open(f"{d}/timeseries.csv.gz", "rt")):
        if row["server"] != "c1":  # network-wide columns repeat on every server's row
            continue
        t = int(row["t_s"])
        a = acc.setdefault(t, [0.0, 0, 0.0, 0.0])
        a[0] += float(row["goodput"])
        a[1] += 1
        if row["pdd_mean_ms"]:
            a[2] += float(row["pdd_mean_ms"]) * float(row["goodput"])
            a[3] += float(row["goodput"])
    series[label] = {t: (g / n, (ds / dn if dn else None)) for t, (g, n, ds, dn) in acc.items()}

ts = sorted(set().union(*[s.keys() for s in series.values()]))
with open(f"{out}/step-series.csv", "w") as f:
    w = csv.writer(f)
    w.writerow(["t_s"] + [f"{l}_goodput_cps" for l in series] + [f"{l}_setup_delay_ms" for l in series])
    for t in ts:
        w.writerow([t] + ["%.2f" % series[l].get(t, (0, None))[0] for l in series]
                   + ["" if series[l].get(t, (0, None))[1] is None else "%.1f" % series[l][t][1] for l in series])

W, H, L, PAD = 900, 560, 60, 30
COLORS = ["#888888", "#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e"]
tmax = max(ts)
def x(t):
    return L + (W - L - PAD) * t / tmax
def panel(top, height, ymax, key, label, fmt):
    parts = [f'<text x="{L}" y="{top - 8}" font-size="13">{label}</text>',
             f'<line x1="{L}" y1="{top + height}" x2="{W - PAD}" y2="{top + height}" stroke="black"/>',
             f'<line x1="{L}" y1="{top}" x2="{L}" y2="{top + height}" stroke="black"/>']
    for i in range(5):
        v = ymax * i / 4
        y = top + height - height * i / 4
        parts.append(f'<text x="{L - 5}" y="{y + 4}" font-size="11" text-anchor="end">{fmt(v)}</text>')
        parts.append(f'<line x1="{L}" y1="{y}" x2="{W - PAD}" y2="{y}" stroke="#eee"/>')
    for i, (lab, s) in enumerate(series.items()):
        pts = []
        for t in ts:
            v = s.get(t, (0, None))[key]
            if v is None:
                continue
            y = top + height - height * min(v, ymax) / ymax
            pts.append(f"{x(t):.1f},{y:.1f}")
        parts.append(f'<polyline fill="none" stroke="{COLORS[i % len(COLORS)]}" stroke-width="1.2" points="{" ".join(pts)}"/>')
    return parts
gmax = max(v[0] for s in series.values() for v in s.values()) * 1.1
parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif">',
         '<rect width="100%" height="100%" fill="white"/>']
parts += panel(30, 200, gmax, 0, "goodput (calls/s, mean over runs)", lambda v: "%.0f" % v)
parts += panel(300, 190, 2000.0, 1, "setup delay (ms, mean of the second's 200 OKs; clipped at 2 s)", lambda v: "%.0f" % v)
for t in range(0, tmax + 1, 100):
    parts.append(f'<text x="{x(t)}" y="{510}" font-size="11" text-anchor="middle">{t} s</text>')
for i, lab in enumerate(series):
    parts.append(f'<rect x="{L + 10 + 140 * i}" y="{528}" width="12" height="12" fill="{COLORS[i % len(COLORS)]}"/>')
    parts.append(f'<text x="{L + 26 + 140 * i}" y="{539}" font-size="12">{lab}</text>')
parts.append("</svg>")
open(f"{out}/step-series.svg", "w").write("\n".join(parts))
