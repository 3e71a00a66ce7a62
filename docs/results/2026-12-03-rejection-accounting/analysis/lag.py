import sys,collections
sys.path.insert(0,'/work/main/docs/results/2026-12-03-syscall-costs/analysis')
from capture import datagrams, header, first_line
SRV,UAS=sys.argv[2:4]
fwd={}; lags=[]; uaclag=[]
r200={}
T0=None
for t,s,d,p in datagrams(sys.argv[1]):
    if T0 is None: T0=t
    if t-T0>20: break
    cid=header(p,b'Call-ID')
    if s==SRV and d==UAS and p.startswith(b'INVITE'):
        fwd[cid]=t   # latest forward
    elif s==UAS and p.startswith(b'SIP/2.0 180') and cid in fwd:
        lags.append(t-fwd.pop(cid))
    elif s==SRV and d!=UAS and p.startswith(b'SIP/2.0 200') and b'INVITE' in header(p,b'CSeq') and cid not in r200:
        r200[cid]=t
    elif s!=SRV and d==SRV and p.startswith(b'ACK') and cid in r200:
        uaclag.append(t-r200.pop(cid))
def q(l):
    l=sorted(l); n=len(l)
    return "n=%d p10 %.2f p50 %.2f p90 %.2f p99 %.2f ms"%(n,*(1e3*l[min(n-1,int(n*x))] for x in (.1,.5,.9,.99)))
print("UAS 180 after a forward:",q(lags))
print("UAC ACK after a relayed 200:",q(uaclag))
