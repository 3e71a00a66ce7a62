import sys,collections,bisect
from capture import datagrams, header
SRV=sys.argv[2]; UAS=sys.argv[3]
srv_sends=[]; inv=collections.defaultdict(list); fwd={}
for t,sp,dp,p in datagrams(sys.argv[1]):
    if sp==SRV: srv_sends.append(t)
    if not p.startswith(b'INVITE'): continue
    cid=header(p,b'Call-ID')
    if dp==SRV: inv[cid].append(t)
    elif sp==SRV and cid not in fwd: fwd[cid]=t
bins=collections.defaultdict(lambda:[0,0])
for cid,a in inv.items():
    fw=fwd.get(cid); kk=max((i for i,x in enumerate(a) if fw is not None and x<=fw),default=None)
    for i,x in enumerate(a):
        j=bisect.bisect_right(srv_sends,x)-1
        dt=(x-srv_sends[j])*1000 if j>=0 else 999
        b=min(int(dt/4),12)
        bins[b][0]+=1
        if kk==i: bins[b][1]+=1
tot=sum(v[0] for v in bins.values())
for b in sorted(bins):
    n,a=bins[b]; print(" since last server send %4.1f-%4.1f ms: %6d copies (%.2f of all), accepted %.3f"%(b*4,b*4+4,n,n/tot,a/n))
