import struct,sys,collections
f=open(sys.argv[1],'rb'); hdr=f.read(24)
magic,_,_,_,_,_,link=struct.unpack('<IHHiIII',hdr); nano = magic==0xa1b23c4d
SRV=sys.argv[2]
off=14 if link==1 else (0 if link==101 else 4)
inv=collections.defaultdict(list)
while True:
    h=f.read(16)
    if len(h)<16: break
    ts,tf,incl,orig=struct.unpack('<IIII',h); d=f.read(incl); t=ts+tf/(1e9 if nano else 1e6)
    ip=d[off:]; ihl=(ip[0]&15)*4
    spn,dpn=struct.unpack('>HH',ip[ihl:ihl+4])
    dp='%d.%d.%d.%d:%d'%(*ip[16:20],dpn)
    p=ip[ihl+8:]
    if dp==SRV and p.startswith(b'INVITE'):
        i=p.find(b'\r\nCall-ID:'); j=p.find(b'\r\n',i+2); inv[p[i+2:j]].append(t)
for k,nom in [(1,0.5),(2,1.0),(3,2.0)]:
    ds=sorted((a[k]-a[k-1]-nom)*1e6 for a in inv.values() if len(a)>k)
    n=len(ds); q=lambda x: ds[min(n-1,int(n*x))]
    print("interval %d (nominal %.1f s): late by p10 %.0f p50 %.0f p90 %.0f p99 %.0f us (n=%d)"%(k,nom,q(.1),q(.5),q(.9),q(.99),n))
