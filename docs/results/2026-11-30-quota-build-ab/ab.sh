#!/bin/bash
# A/B under a 10% CPU quota: old = 0d2c78e (2026-11-29's quota10 build, its own lab), new = HEAD (its own lab).
for i in 1 2; do
  for v in old new; do
    exe=/work/main/target/release/holdline; [ $v = old ] && exe=/work/tgt-old/release/holdline
    $exe lab feedback --cpu-quota 10 --ses 1 --loads 1,2,4 --mechanisms occ,loss,window --duration 15 --out /tmp/r18/$v-$i > /tmp/r18/$v-$i.log 2>&1
  done
done
echo done > /tmp/r18/ab.done
