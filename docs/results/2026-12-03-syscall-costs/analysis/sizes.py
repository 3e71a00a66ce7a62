import sys,collections
from capture import datagrams, header, first_line
SRV=sys.argv[2]
sz=collections.defaultdict(collections.Counter)
for t,sp,dp,p in datagrams(sys.argv[1]):
    if dp!=SRV: continue
    first=first_line(p); m=header(p,b'CSeq').split()[-1].decode()
    kind=first.split()[0].decode() if not first.startswith(b'SIP') else first.split()[1].decode()+'/'+m
    sz[kind][len(p)]+=1
for k,c in sorted(sz.items()):
    print("%-12s %s"%(k, ", ".join("%d B x%d"%(s,n) for s,n in c.most_common(4))))
