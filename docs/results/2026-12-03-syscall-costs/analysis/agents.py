import json,csv,collections,sys
real=sys.argv[1]; sim=sys.argv[2]; cols=sys.argv[3].split(',')
rows=list(csv.DictReader(open(sim+'/agents.csv')))
nr=len(set(r['run'] for r in rows))
by=collections.defaultdict(lambda: collections.defaultdict(float))
for r in rows:
    t=round(float(r['t_s']))
    for c in cols: by[(r['agent'],t)][c]+=float(r[c])/nr
for ag in ('uac','uas'):
    d=json.load(open(f"{real}/{ag}.json"))['per_second']
    print(ag, "t  " + "  ".join("%14s"%c for c in cols))
    tot_r=collections.Counter(); tot_s=collections.Counter()
    for r in d:
        t=round(r['t_s']); s=by[(ag,t)]
        for c in cols: tot_r[c]+=r[c]; tot_s[c]+=s[c]
        print("   %2d "%t + "  ".join("%6d /%6.0f"%(r[c],s[c]) for c in cols))
    print("  tot " + "  ".join("%6d /%6.0f"%(tot_r[c],tot_s[c]) for c in cols))
