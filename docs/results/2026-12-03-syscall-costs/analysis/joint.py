import sys,collections
from capture import datagrams, header, first_line
SRV=sys.argv[2]; UAS=sys.argv[3]
C=collections.defaultdict(lambda:{'att':[],'fwd':[],'u200':[],'r200':None})
for t,sp,dp,p in datagrams(sys.argv[1]):
    first=first_line(p); cid=header(p,b'Call-ID'); m=(header(p,b'CSeq').split() or [b''])[-1]
    c=C[cid]
    if first.startswith(b'INVITE'):
        if dp==SRV: c['att'].append(t)
        elif sp==SRV: c['fwd'].append(t)
    elif first.startswith(b'SIP/2.0 200') and m==b'INVITE':
        if sp==UAS: c['u200'].append(t)
        elif sp==SRV and c['r200'] is None: c['r200']=t
C={k:v for k,v in C.items() if v['att']}
start=min(min(c['att']) for c in C.values()); end=start+20
J=collections.Counter(); Jb=collections.Counter(); K=collections.Counter(); Kb=collections.Counter(); n=0; nb=0
fwdn=collections.Counter()
for c in C.values():
    if c['r200'] is None or c['r200']>end: continue
    a=sorted(c['att']); t0=a[0]; pdd=c['r200']-t0
    f0=c['fwd'][0] if c['fwd'] else None
    kk=max((i for i,x in enumerate(a) if f0 is not None and x<=f0),default=-1)
    jj=sum(1 for x in c['u200'] if x<c['r200'])  # UAS 200 sends before the one that passed
    fwdn[min(len(c['fwd']),4)]+=1
    n+=1; K[kk]+=1; J[min(jj,6)]+=1
    if 2.0<=pdd<3.0: nb+=1; Kb[kk]+=1; Jb[min(jj,6)]+=1
print("answered",n,"; in [2,3) s:",nb,"(%.3f)"%(nb/n))
print(" INVITE accepted at attempt k, all:   ",{k:round(v/n,3) for k,v in sorted(K.items())})
print(" ... of those in [2,3) s (share of all):",{k:round(v/n,3) for k,v in sorted(Kb.items())})
print(" UAS 200 sends needed j, all:          ",{k:round(v/n,3) for k,v in sorted(J.items())})
print(" ... of those in [2,3) s (share of all):",{k:round(v/n,3) for k,v in sorted(Jb.items())})
print(" INVITE forwards to UAS per answered call:",{k:round(v/n,3) for k,v in sorted(fwdn.items())})
H=collections.Counter(); tot=0
for c in C.values():
    u=sorted(c['u200'])
    if len(u)<2: continue
    for x in u[1:]:
        o=x-u[0]
        if o<2.0: H[int(o/0.05)]+=1; tot+=1
print(" UAS 200 re-sends by offset from the first (50 ms bins, share):")
print("  "+" ".join("%.2f:%.3f"%(b*0.05,H[b]/tot) for b in sorted(H) if H[b]/tot>0.01))
F=collections.Counter(); tf=0
for c in C.values():
    fw=sorted(c['fwd'])
    for x in fw[1:]:
        o=x-fw[0]
        if o<4.0: F[int(o/0.05)]+=1; tf+=1
print(" server INVITE re-forwards by offset from the first forward:")
print("  "+" ".join("%.2f:%.3f"%(b*0.05,F[b]/tf) for b in sorted(F) if F[b]/tf>0.01))
