#!/usr/bin/env python3
"""ring.csv -> ring.svg: share of calls set up per answer delay, for both window_delay settings."""
import csv

rows = list(csv.DictReader(open("ring.csv")))
delays = sorted({int(r["answer_delay_ms"]) for r in rows})
colors = {"final": "#d62728", "first-response": "#1f77b4"}
W, H, left, bottom, top = 560, 340, 60, 50, 40
plot_h = H - bottom - top
group_w = (W - left - 20) / len(delays)
out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<text x="{W/2}" y="20" text-anchor="middle" font-size="14">Seed 004 window, idle downstream, 20 calls/s: calls set up</text>']
for i in range(0, 11, 2):
    y = top + plot_h * (1 - i / 10)
    out.append(f'<line x1="{left}" x2="{W-20}" y1="{y}" y2="{y}" stroke="#ddd"/>')
    out.append(f'<text x="{left-6}" y="{y+4}" text-anchor="end">{i*10}%</text>')
for g, d in enumerate(delays):
    x0 = left + g * group_w
    for k, (name, color) in enumerate(colors.items()):
        r = next(r for r in rows if int(r["answer_delay_ms"]) == d and r["window_delay"] == name)
        share = int(r["calls_ok"]) / max(1, int(r["attempted"]))
        bw = group_w * 0.35
        x = x0 + group_w * 0.12 + k * (bw + 4)
        h = plot_h * share
        out.append(f'<rect x="{x:.1f}" y="{top+plot_h-h:.1f}" width="{bw:.1f}" height="{h:.1f}" fill="{color}"/>')
        out.append(f'<text x="{x+bw/2:.1f}" y="{top+plot_h-h-4:.1f}" text-anchor="middle">{share:.0%}</text>')
    out.append(f'<text x="{x0+group_w/2:.1f}" y="{H-bottom+18}" text-anchor="middle">callee rings {d/1000:g} s</text>')
for k, (name, color) in enumerate(colors.items()):
    out.append(f'<rect x="{left+10+k*190}" y="{H-18}" width="12" height="12" fill="{color}"/>')
    out.append(f'<text x="{left+28+k*190}" y="{H-8}">window_delay = "{name}"</text>')
out.append("</svg>")
open("ring.svg", "w").write("\n".join(out) + "\n")
