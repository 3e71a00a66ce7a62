import sys,collections
from capture import datagrams, header
SRV=sys.argv[2]
inv=collections.defaultdict(list); fwd={}; t0=None
for t,sp,dp,p in datagrams(sys.argv[1]):
    if t0 is None: t0=t
    t-=t0
    if not p.startswith(b'INVITE'): continue
    cid=header(p,b'Call-ID')
    if dp==SRV: inv[cid].append(t)
    elif sp==SRV and cid not in fwd: fwd[cid]=t
B=float(sys.argv[3]) if len(sys.argv)>3 else 0.05
n=collections.Counter(); a=collections.Counter()
for cid,at in inv.items():
    fw=fwd.get(cid); kk=max((i for i,x in enumerate(at) if fw is not None and x<=fw),default=None)
    for i,x in enumerate(at):
        b=int(x/B); n[b]+=1
        if kk==i: a[b]+=1
lo,hi=int(3/B),int(10/B)
r=[a[b]/n[b] if n[b] else 0 for b in range(lo,hi)]
m=sum(r)/len(r); v=sum((x-m)**2 for x in r)/len(r)
print("mean accept %.3f sd %.3f over %d bins of %.0f ms"%(m,v**.5,len(r),B*1000))
for lag_s in [0.05,0.1,0.2,0.3,0.5,0.75,1.0,1.5,2.0]:
    L=int(round(lag_s/B))
    if L<1: continue
    c=sum((r[i]-m)*(r[i+L]-m) for i in range(len(r)-L))/(len(r)-L)/v
    print("  acf lag %.2f s: %+.3f"%(lag_s,c))
best=[]
for L in range(1,int(1.2/B)):
    c=sum((r[i]-m)*(r[i+L]-m) for i in range(len(r)-L))/(len(r)-L)/v
    best.append((L*B,c))
print(" ".join("%.2f:%+.2f"%(l,c) for l,c in best))
