# For UAS 200/INVITE, UAS 180 and UAC ACK arrivals at the server: accepted iff the server
# forwards the same kind for the call before that sender's next copy. Acceptance by the
# time since the server's previous send burst start (ms bins) and per sender.
import sys,collections,bisect
sys.path.insert(0,'/work/main/docs/results/2026-12-03-syscall-costs/analysis')
from capture import datagrams, header, first_line
SRV,UAS=sys.argv[2:4]
arr=collections.defaultdict(list)   # (cid,kind) -> arrival times
fw=collections.defaultdict(list)    # (cid,kind) -> forward times
sends=[]; T0=None
for t,s,d,p in datagrams(sys.argv[1]):
    if T0 is None: T0=t
    if t-T0>20: break
    f=first_line(p); cid=header(p,b'Call-ID'); m=(header(p,b'CSeq').split() or [b''])[-1]
    if f.startswith(b'SIP/2.0 200') and m==b'INVITE': k='200'
    elif f.startswith(b'SIP/2.0 180'): k='180'
    elif f.startswith(b'ACK'): k='ACK'
    elif f.startswith(b'INVITE'): k='INV'
    else: k=None
    if s==SRV:
        sends.append(t)
        if k: fw[(cid,k)].append(t)
    elif d==SRV and k:
        arr[(cid,k)].append(t)
# send bursts: a send more than 0.5 ms after the previous one starts a burst
bursts=[sends[0]]+[b for a,b in zip(sends,sends[1:]) if b-a>0.0005]
acc=collections.defaultdict(lambda:[0,0])
for (cid,k),a in arr.items():
    if k=='INV': continue
    f=fw.get((cid,k),[])
    for i,x in enumerate(a):
        nxt=a[i+1] if i+1<len(a) else x+1.0
        ok=any(x<y<=nxt for y in f)
        j=bisect.bisect_right(bursts,x)-1
        ph=(x-bursts[j])*1e3 if j>=0 else 99
        b=min(int(ph/0.25),12)
        acc[(k,b)][0]+=ok; acc[(k,b)][1]+=1
for k in ('200','180','ACK'):
    print(k, " ".join("%.2f:%.2f(%d)"%(b*0.25,acc[(k,b)][0]/max(1,acc[(k,b)][1]),acc[(k,b)][1]) for b in range(13)))
d=[b-a for a,b in zip(bursts,bursts[1:])]; d.sort(); n=len(d)
print("bursts",n,"gap p10 %.1f p50 %.1f p90 %.1f ms"%tuple(1e3*d[int(n*x)] for x in (.1,.5,.9)))
