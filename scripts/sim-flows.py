#!/usr/bin/env python3
"""Per-flow goodput of `holdline sim run` results for seed 003's topology 2.

Usage: scripts/sim-flows.py OUT_DIR

For every point directory of OUT_DIR (each holds a results.json), prints the mean goodput per
flow within a domain (ua1..4 to ua1..4, ua5..8 to ua5..8) and between the domains, Jain's index
over all 56 flows, the simulator's own index (the 16 flows from domain A to B), and the total.
A call between the domains crosses a core of each; one within a domain a core of its own, so a
mechanism can raise its total goodput by carrying more of the cheap calls (docs/deoc.md).
"""
import glob
import json
import sys


def main(out):
    for f in sorted(glob.glob(out + "/*/results.json")):
        d = json.load(open(f))
        intra, inter = [], []
        for p in d["points"]:
            name = p.get("population", "")
            if not name.startswith("ua"):
                continue
            a, b = (int(x) for x in name[2:].split("-to-"))
            g = p["goodput_cps"]["mean"]
            (intra if (a <= 4) == (b <= 4) else inter).append(g)
        xs = intra + inter
        if not xs or not any(xs):
            continue
        jain = sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))
        point = f.split("/")[-2].split(",")[0]
        print(
            f"{point:24} within {sum(intra) / len(intra):.2f} between "
            f"{sum(inter) / len(inter):.2f} Jain(all 56) {jain:.3f} "
            f"Jain(A to B) {d['jain_index']['mean']:.3f} total {sum(xs):.1f}"
        )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
