"""Fits the real worker loop's cost outside the handling (agreement.csv: real_loop_cost_ms) to the
datagrams read and sent and the model's wake-ups (sim_wakes, scaled to the real datagrams sent):
python3 fit-wakes.py DIR ... (each with a `sim agree` agreement.csv; no control at 5x and 10x left
out: the labs read those servers' metrics in the middle of a long iteration)."""
import csv,sys
rows=[]
for f in sys.argv[1:]:
    for r in csv.DictReader(open(f+'/agreement.csv')):
        if r['real_loop_cost_ms'] and r['sim_sent'] and not (r['mechanism']=='none' and float(r['load_factor'])>=5):
            rs=float(r['real_sent']); ss=float(r['sim_sent']); w=float(r['sim_wakes'])*rs/ss
            rin=sum(float(r['real_'+k] or 0) for k in ['invites','acks','byes','r1xx','r2xx','r3xx_6xx'])
            rows.append((f.rstrip('/').split('/')[-1]+' '+r['mechanism']+' '+r['ses']+' '+r['load_factor'], rin, rs, w, float(r['real_loop_cost_ms'])/1000))
def lsq(cols,y):
    k=len(cols); n=len(y)
    M=[[sum(cols[i][r]*cols[j][r] for r in range(n)) for j in range(k)] for i in range(k)]
    v=[sum(cols[i][r]*y[r] for r in range(n)) for i in range(k)]
    for i in range(k):
        for j in range(i+1,k):
            f=M[j][i]/M[i][i]
            for c in range(k): M[j][c]-=f*M[i][c]
            v[j]-=f*v[i]
    x=[0]*k
    for i in reversed(range(k)): x[i]=(v[i]-sum(M[i][c]*x[c] for c in range(i+1,k)))/M[i][i]
    pred=[sum(x[j]*cols[j][r] for j in range(k)) for r in range(n)]
    return x,(sum((p-t)**2 for p,t in zip(pred,y))/n)**.5,pred
y=[r[4] for r in rows]
for name,idx in [("sent",[2]),("in,sent",[1,2]),("sent,wakes",[2,3]),("in,sent,wakes",[1,2,3])]:
    x,rms,pred=lsq([[r[i] for r in rows] for i in idx],y)
    print(name,["%.2f us"%(v*1e6) for v in x],"rms %.3f s"%rms)
    if name=="sent,wakes":
        for r,p in zip(rows,pred): print("   %-28s real %.3f fit %.3f"%(r[0],r[4],p))
