#!/usr/bin/env python3
"""persecond.csv -> persecond-5x.svg: calls set up per second in the two-domain lab at 5x,
DEOC with min_rejections 4 / share 0.25 with max_decrease 0, 0.5 and 0.25, and OCC-Hop."""
import csv

rows = list(csv.DictReader(open("persecond.csv")))
series = {
    "DEOC, max_decrease 0 (r1)": ("r1", "occ+deoc-5x", "#1f77b4", ""),
    "DEOC, max_decrease 0 (r2)": ("r2", "occ+deoc-5x", "#1f77b4", "4 3"),
    "DEOC, max_decrease 0.5 (md1)": ("md1", "occ+deoc-5x", "#d62728", ""),
    "DEOC, max_decrease 0.5 (md2)": ("md2", "occ+deoc-5x", "#d62728", "4 3"),
    "DEOC, max_decrease 0.25 (mq1)": ("mq1", "occ+deoc-5x", "#ff7f0e", ""),
    "DEOC, max_decrease 0.25 (mq2)": ("mq2", "occ+deoc-5x", "#ff7f0e", "4 3"),
    "OCC-Hop (r1)": ("r1", "occ+hop-5x", "#7f7f7f", ""),
}
W, H, left, right, bottom, top = 800, 380, 60, 250, 50, 40
pw, ph = W - left - right, H - bottom - top
tmax, ymax = 60, 200
X = lambda t: left + pw * t / tmax
Y = lambda v: top + ph * (1 - v / ymax)
out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<text x="{left + pw/2}" y="20" text-anchor="middle" font-size="14">Two-domain lab, 5x of 137 calls/s from t = 0: calls set up per second</text>']
for v in range(0, ymax + 1, 50):
    out.append(f'<line x1="{left}" x2="{left+pw}" y1="{Y(v)}" y2="{Y(v)}" stroke="#ddd"/>')
    out.append(f'<text x="{left-6}" y="{Y(v)+4}" text-anchor="end">{v}</text>')
for t in range(0, tmax + 1, 10):
    out.append(f'<text x="{X(t)}" y="{top+ph+16}" text-anchor="middle">{t}</text>')
out.append(f'<line x1="{left}" x2="{left+pw}" y1="{Y(137)}" y2="{Y(137)}" stroke="#2ca02c" stroke-dasharray="2 2"/>')
out.append(f'<text x="{left+pw-4}" y="{Y(137)-4}" text-anchor="end" fill="#2ca02c">capacity 137</text>')
for i, (name, (run, point, colour, dash)) in enumerate(series.items()):
    pts = [(int(r["t_s"]), int(r["calls_ok"])) for r in rows if r["run"] == run and r["point"] == point]
    pts = [p for p in pts if p[0] < tmax]  # the last second holds the drain
    d = " ".join(f"{X(t):.1f},{Y(v):.1f}" for t, v in pts)
    out.append(f'<polyline points="{d}" fill="none" stroke="{colour}" stroke-width="1.5" stroke-dasharray="{dash}"/>')
    ly = top + 14 + 18 * i
    out.append(f'<line x1="{left+pw+10}" x2="{left+pw+34}" y1="{ly}" y2="{ly}" stroke="{colour}" stroke-width="1.5" stroke-dasharray="{dash}"/>')
    out.append(f'<text x="{left+pw+40}" y="{ly+4}">{name}</text>')
out.append(f'<text x="{left + pw/2}" y="{H-10}" text-anchor="middle">seconds of load</text>')
out.append("</svg>")
open("persecond-5x.svg", "w").write("\n".join(out))
