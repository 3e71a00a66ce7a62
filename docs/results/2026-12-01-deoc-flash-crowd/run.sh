#!/usr/bin/env bash
# The runs of docs/deoc.md "Flash crowds: max_decrease" (root not needed; ~4 min per run of
# two mechanisms at two loads). r1, r2: DEOC with min_rejections 4 and share 0.25 against
# OCC-Hop; md1, md2: the same DEOC with max_decrease 0.5; mq1, mq2: with 0.25.
set -euo pipefail
out=${1:-deoc-flash-crowd}
common=(lab deoc --topology domains --capacity 137 --duration 60 --sim-runs 1
        --deoc min_rejections=4 --deoc min_rejection_share=0.25)
for r in r1 r2; do
  holdline "${common[@]}" --loads 2,5 --mechanisms occ+deoc,occ+hop --out "$out/$r"
done
holdline "${common[@]}" --loads 2,5 --mechanisms occ+deoc --deoc max_decrease=0.5 --out "$out/md1"
holdline "${common[@]}" --loads 2,5,8 --mechanisms occ+deoc --deoc max_decrease=0.5 --out "$out/md2"
holdline "${common[@]}" --loads 2,5 --mechanisms occ+deoc --deoc max_decrease=0.25 --out "$out/mq1"
holdline "${common[@]}" --loads 2,5,8 --mechanisms occ+deoc --deoc max_decrease=0.25 --out "$out/mq2"
holdline "${common[@]}" --loads 5,8 --mechanisms occ+deoc --deoc max_decrease=0.9 --out "$out/m9"
