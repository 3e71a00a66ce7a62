import struct,sys,collections
f=open(sys.argv[1],'rb'); hdr=f.read(24)
magic,_,_,_,_,_,link=struct.unpack('<IHHiIII',hdr); nano = magic==0xa1b23c4d
SRV=sys.argv[2]
off=14 if link==1 else (0 if link==101 else 4)
inv=collections.defaultdict(list); fwd={}; t0=None
while True:
    h=f.read(16)
    if len(h)<16: break
    ts,tf,incl,orig=struct.unpack('<IIII',h); d=f.read(incl); t=ts+tf/(1e9 if nano else 1e6)
    if t0 is None: t0=t
    t-=t0
    ip=d[off:]; ihl=(ip[0]&15)*4
    spn,dpn=struct.unpack('>HH',ip[ihl:ihl+4])
    sp='%d.%d.%d.%d:%d'%(*ip[12:16],spn); dp='%d.%d.%d.%d:%d'%(*ip[16:20],dpn)
    p=ip[ihl+8:]
    if not p.startswith(b'INVITE'): continue
    i=p.find(b'\r\nCall-ID:'); j=p.find(b'\r\n',i+2); cid=p[i+2:j]
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
