#!/usr/bin/env python3
"""real.csv -> real.svg: calls a DEOC edge gapped in front of a healthy callee with 1% stray 503s."""
import csv

rows = list(csv.DictReader(open("real.csv")))
W, H, left, bottom, top = 520, 320, 60, 60, 40
plot_h = H - bottom - top
n = len(rows)
bar_w = (W - left - 20) / n
peak = max(int(r["attempted"]) for r in rows)
out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<text x="{W/2}" y="20" text-anchor="middle" font-size="14">DEOC edge, healthy callee, 1% stray 503s, 50 calls/s, 60 s</text>']
for i in range(0, 101, 20):
    y = top + plot_h * (1 - i / 100)
    out.append(f'<line x1="{left}" x2="{W-20}" y1="{y}" y2="{y}" stroke="#ddd"/>')
    out.append(f'<text x="{left-6}" y="{y+4}" text-anchor="end">{i}%</text>')
for k, r in enumerate(rows):
    share = int(r["gapped"]) / int(r["attempted"])
    h = plot_h * share
    x = left + k * bar_w + bar_w * 0.2
    out.append(f'<rect x="{x}" y="{top + plot_h - h}" width="{bar_w*0.6}" height="{h}" fill="#d62728"/>')
    out.append(f'<text x="{x + bar_w*0.3}" y="{top + plot_h - h - 4}" text-anchor="middle">{int(r["gapped"])}</text>')
    out.append(f'<text x="{x + bar_w*0.3}" y="{H - bottom + 16}" text-anchor="middle">{r["min_rejections"]}</text>')
out.append(f'<text x="{W/2}" y="{H-12}" text-anchor="middle">min_rejections (calls gapped of {peak} offered)</text>')
out.append("</svg>")
open("real.svg", "w").write("\n".join(out))
