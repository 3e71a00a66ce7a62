import struct,sys,collections,bisect
f=open(sys.argv[1],'rb'); hdr=f.read(24)
magic,_,_,_,_,_,link=struct.unpack('<IHHiIII',hdr); nano = magic==0xa1b23c4d
SRV=sys.argv[2]; UAS=sys.argv[3]
off=14 if link==1 else (0 if link==101 else 4)
srv_sends=[]; inv=collections.defaultdict(list); fwd={}
while True:
    h=f.read(16)
    if len(h)<16: break
    ts,tf,incl,orig=struct.unpack('<IIII',h); d=f.read(incl); t=ts+tf/(1e9 if nano else 1e6)
    ip=d[off:]; ihl=(ip[0]&15)*4
    spn,dpn=struct.unpack('>HH',ip[ihl:ihl+4])
    sp='%d.%d.%d.%d:%d'%(*ip[12:16],spn); dp='%d.%d.%d.%d:%d'%(*ip[16:20],dpn)
    p=ip[ihl+8:]
    if sp==SRV: srv_sends.append(t)
    if not p.startswith(b'INVITE'): continue
    i=p.find(b'\r\nCall-ID:'); j=p.find(b'\r\n',i+2); cid=p[i+2:j]
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
