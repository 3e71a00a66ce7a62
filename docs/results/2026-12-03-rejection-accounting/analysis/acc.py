import sys,collections
sys.path.insert(0,'/work/main/docs/results/2026-12-03-syscall-costs/analysis')
from capture import datagrams, header, first_line
SRV,UAC,UAS=sys.argv[2:5]
inn=collections.Counter(); out=collections.Counter()
T0=None
for t,s,d,p in datagrams(sys.argv[1]):
    if T0 is None: T0=t
    if t-T0>20: break
    f=first_line(p); m=(header(p,b'CSeq').split() or [b''])[-1].decode()
    if f.startswith(b'SIP/2.0'): k=f.split()[1].decode()+'/'+m
    else: k=f.split()[0].decode()
    if d==SRV: inn[('uas' if s==UAS else 'uac',k)]+=1
    elif s==SRV: out[('uas' if d==UAS else 'uac',k)]+=1
for (who,k),n in sorted(inn.items()):
    other='uas' if who=='uac' else 'uac'
    o=out[(other,k)]
    print("%s %-12s in %6d  out to %s %6d  ratio %.3f"%(who,k,n,other,o,o/n))
print("server's own:",{k:v for k,v in out.items() if inn.get(('uac' if k[0]=='uas' else 'uas',k[1]),0)==0})
