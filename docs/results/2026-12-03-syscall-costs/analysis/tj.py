import sys,collections
from capture import datagrams, header
SRV=sys.argv[2]
inv=collections.defaultdict(list)
for t,sp,dp,p in datagrams(sys.argv[1]):
    if dp==SRV and p.startswith(b'INVITE'):
        inv[header(p,b'Call-ID')].append(t)
for k,nom in [(1,0.5),(2,1.0),(3,2.0)]:
    ds=sorted((a[k]-a[k-1]-nom)*1e6 for a in inv.values() if len(a)>k)
    n=len(ds); q=lambda x: ds[min(n-1,int(n*x))]
    print("interval %d (nominal %.1f s): late by p10 %.0f p50 %.0f p90 %.0f p99 %.0f us (n=%d)"%(k,nom,q(.1),q(.5),q(.9),q(.99),n))
