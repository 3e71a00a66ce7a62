#!/bin/bash
# A/B of the RFC 7339 answer mend under a 10% CPU quota: old = f9809cb (before), new = HEAD.
for i in 1 2; do
  for v in old new; do
    exe=/work/main/target/release/holdline; [ $v = old ] && exe=/work/tgt-old/release/holdline
    /work/main/target/release/holdline lab feedback --exe $exe --cpu-quota 10 --ses 1 --capacity 1230 --loads 1,2,4 --mechanisms loss --out /tmp/r17/ab-$v-$i > /tmp/r17/ab-$v-$i.log 2>&1
  done
done
echo done > /tmp/r17/ab.done
