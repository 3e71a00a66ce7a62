#!/usr/bin/env python3
"""Summarizes a `holdline sim run --mechanism ... --scale ...` sweep of
lab/sim/seed003-mixed*.toml: per point, network goodput and setup delay (sweep.json, mean and
95% CI over runs), Jain's index over the 8 call flows (per run, mean and 95% CI; and of the
flows' mean goodput), and the goodput of the flows entering at E1+E2 (DEOC edges in the mixed
mechanisms) and at E3+E4. Writes summary.csv in the sweep directory and prints a Markdown
table. Usage: summarize.py SWEEP_DIR"""
import csv, json, os, sys

d = sys.argv[1]
sweep = json.load(open(os.path.join(d, "sweep.json")))
rows = []
for p in sweep["points"]:
    name = f"{p['local']}-{p['scale']:g}x"
    r = json.load(open(os.path.join(d, name, "results.json")))
    flows = {q["population"]: q["goodput_cps"]["mean"] for q in r["points"]}
    xs = list(flows.values())
    pooled = sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))
    j = r["jain_index"]
    e12 = sum(v for k, v in flows.items() if k.startswith(("ua1-", "ua2-")))
    e34 = sum(v for k, v in flows.items() if k.startswith(("ua3-", "ua4-")))
    rows.append({
        "mechanism": p["local"], "scale": p["scale"], "runs": p["runs"],
        "offered_cps": round(p["offered_cps"]["mean"], 1),
        "goodput_cps": round(p["goodput_cps"]["mean"], 2),
        "goodput_ci95": round(p["goodput_cps"]["ci95"], 2),
        "pdd_p50_ms": round(p["pdd_p50_ms"]["mean"], 1),
        "pdd_p50_ci95": round(p["pdd_p50_ms"]["ci95"], 1),
        "jain_per_run": round(j["mean"], 3), "jain_ci95": round(j["ci95"], 3),
        "jain_pooled": round(pooled, 3),
        "goodput_e1_e2": round(e12, 2), "goodput_e3_e4": round(e34, 2),
    })
with open(os.path.join(d, "summary.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
    w.writeheader()
    w.writerows(rows)
print("| mechanism | load | goodput (calls/s) | setup delay p50 | Jain per run | Jain of means | E1+E2 | E3+E4 |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for r in rows:
    print(f"| `{r['mechanism']}` | {r['scale']:g}x | {r['goodput_cps']:.1f} ± {r['goodput_ci95']:.1f} "
          f"| {r['pdd_p50_ms']:.0f} ± {r['pdd_p50_ci95']:.0f} ms | {r['jain_per_run']:.3f} ± {r['jain_ci95']:.3f} "
          f"| {r['jain_pooled']:.3f} | {r['goodput_e1_e2']:.1f} | {r['goodput_e3_e4']:.1f} |")
