import sys,collections
from capture import datagrams, header, first_line
SRV=sys.argv[2] if len(sys.argv)>2 else '127.0.0.1:23183'; UAS=sys.argv[3] if len(sys.argv)>3 else '127.0.0.1:23136'
calls=collections.defaultdict(lambda: {'att':[], 'fwd':None, 'r200':None, 'r200_uas':None,'t100':None})
for t,sp,dp,p in datagrams(sys.argv[1]):
    first=first_line(p); cid=header(p,b'Call-ID')
    if not cid: continue
    cseqm=header(p,b'CSeq').split()[-1:]
    cseqm=cseqm[0] if cseqm else b''
    c=calls[cid]
    if dp==SRV and first.startswith(b'INVITE'):
        c['att'].append(t)
    elif sp==SRV and dp==UAS and first.startswith(b'INVITE') and c['fwd'] is None:
        c['fwd']=t
    elif sp==SRV and dp!=UAS and first.startswith(b'SIP/2.0 200') and cseqm==b'INVITE' and c['r200'] is None:
        c['r200']=t
    elif sp==SRV and dp!=UAS and first.startswith(b'SIP/2.0 100') and c['t100'] is None:
        c['t100']=t
    elif sp==UAS and first.startswith(b'SIP/2.0 200') and cseqm==b'INVITE' and c['r200_uas'] is None:
        c['r200_uas']=t
calls={k:v for k,v in calls.items() if v['att']}
print("calls",len(calls))
pdd=[];kdist=collections.Counter();sent=collections.Counter();wait=collections.defaultdict(list);resp=[]
for c in calls.values():
    a=sorted(c['att']); 
    for i in range(len(a)): sent[i]+=1
    if c['fwd'] is not None:
        k=max(i for i,x in enumerate(a) if x<=c['fwd']); kdist[k]+=1; wait[k].append(c['fwd']-a[k])
    if c['r200'] is not None:
        pdd.append(c['r200']-a[0])
        if c['fwd'] is not None: resp.append(c['r200']-c['fwd'])
pdd.sort(); n=len(pdd)
print("answered",n,"p50 %.3f p90 %.3f mean %.3f"%(pdd[n//2],pdd[int(n*.9)],sum(pdd)/n))
for x in [1.0,1.5,2.0,2.5,2.7,3.0,3.5,4.0,4.5,5.0]:
    print(" F(%.1f)=%.3f"%(x,sum(1 for v in pdd if v<=x)/n))
print("accepted at attempt k: ", {k:kdist[k] for k in sorted(kdist)})
print("sent attempt k:        ", {k:sent[k] for k in sorted(sent)})
print("accept rate per sent:  ", {k:round(kdist[k]/sent[k],3) for k in sorted(kdist)})
print("INVITE wait by k (mean ms):", {k:round(1000*sum(v)/len(v)) for k,v in sorted(wait.items())})
resp.sort(); print("fwd->200 at UAC: p50 %.3f mean %.3f p90 %.3f"%(resp[len(resp)//2],sum(resp)/len(resp),resp[int(len(resp)*.9)]))
# restricted to what the UAC saw: 200s leaving the server before the UAC's end (first INVITE + 20 s)
start=min(min(c['att']) for c in calls.values()); end=start+20.0
pd=sorted(c['r200']-min(c['att']) for c in calls.values() if c['r200'] is not None and c['r200']<=end)
n=len(pd); print("answered by the UAC's end",n,"p50 %.3f p90 %.3f mean %.3f"%(pd[n//2],pd[int(n*.9)],sum(pd)/n))
for x in [0.5,1.0,1.5,2.0,2.5,2.7,3.0,3.5,4.0,4.5,5.0,6,8,10,12]:
    print(" F(%.1f)=%.3f"%(x,sum(1 for v in pd if v<=x)/n))
# 200 path: attempts of the 200 from UAS needed
r2=collections.Counter()
# acceptance of INVITE copies per global second, by attempt index
acc=collections.defaultdict(lambda:[0,0])
for c in calls.values():
    a=sorted(c['att'])
    kk=max((i for i,x in enumerate(a) if c['fwd'] is not None and x<=c['fwd']),default=None)
    for i,x in enumerate(a):
        sec=int(x-start); key=(sec, 0 if i==0 else (1 if i<=2 else 3))
        acc[key][0]+=1
        if kk==i: acc[key][1]+=1
print("sec: accept rate new | retrans k1-2 | k>=3   (counts)")
for sec in range(0,21):
    row=[]
    for g in (0,1,3):
        n,a_=acc[(sec,g)]
        row.append("%.2f(%5d)"%(a_/n if n else 0,n))
    print(" %2d  %s"%(sec,"  ".join(row)))
