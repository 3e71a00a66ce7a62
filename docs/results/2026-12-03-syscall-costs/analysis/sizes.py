import struct,sys,collections
f=open(sys.argv[1],'rb'); hdr=f.read(24)
magic,_,_,_,_,_,link=struct.unpack('<IHHiIII',hdr)
SRV=sys.argv[2]; off=14 if link==1 else (0 if link==101 else 4)
sz=collections.defaultdict(collections.Counter)
while True:
    h=f.read(16)
    if len(h)<16: break
    ts,tf,incl,orig=struct.unpack('<IIII',h); d=f.read(incl)
    ip=d[off:]; ihl=(ip[0]&15)*4
    spn,dpn=struct.unpack('>HH',ip[ihl:ihl+4]); dp='%d.%d.%d.%d:%d'%(*ip[16:20],dpn)
    if dp!=SRV: continue
    p=ip[ihl+8:]; first=p[:p.find(b'\r\n')]
    k=p.find(b'\r\nCSeq:'); l=p.find(b'\r\n',k+2); m=p[k+2:l].split()[-1].decode()
    kind=first.split()[0].decode() if not first.startswith(b'SIP') else first.split()[1].decode()+'/'+m
    sz[kind][len(p)]+=1
for k,c in sorted(sz.items()):
    print("%-12s %s"%(k, ", ".join("%d B x%d"%(s,n) for s,n in c.most_common(4))))
