#!/bin/bash
# Figs. 17-18 / Tables 2-3 of seed 003 on topology 2 with the paper's 1 s OCC.
# Usage: run.sh OUTDIR (from anywhere; needs target/release/holdline).
R=$(realpath -m "${1:?usage: run.sh OUTDIR}")
cd "$(dirname "$0")/../../../.."
mkdir -p $R
H=./target/release/holdline
run() { # name k alpha
  [ -f $R/load/$1/sweep.json ] || $H sim run lab/sim/seed003-topology2.toml --sweep duration_s=300 --sweep "servers.*.deoc.k=$2" --sweep "servers.*.deoc.alpha=$3" \
    --mechanism occ+deoc --scale 1.179,1.768,2.357 --runs 10 --jobs 2 --quiet --out $R/load/$1
  python3 - "$2" "$3" > $R/step-$1.toml <<'PY'
import re, sys
k, a = sys.argv[1], sys.argv[2]
s = open("lab/sim/seed003-topology2-step.toml").read()
s = re.sub(r'(\[\[servers\]\]\nname = "e\d")\n', lambda m: m.group(1) + f"\ndeoc = {{ k = {k}, alpha = {a} }}\n", s)
print(s, end="")
PY
  $H sim run $R/step-$1.toml --mechanism occ+deoc --runs 10 --jobs 2 --quiet --out $R/step/$1
  gzip -f $R/step/$1/timeseries.csv
}
run k0.5 0.5 0.2
run k0 0 0.0378
run k0.89 0.89 1.941
for a in 0.1 0.5 1.0 2.0; do run a$a 0.5 $a; done
echo finished
