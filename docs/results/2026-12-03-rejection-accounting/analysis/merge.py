import json,sys
old=json.load(open(sys.argv[1])); new=json.load(open(sys.argv[2]))
for p in old['points']:
    if 'tag' in p: p['tag']='old-'+p['tag']
    else: p['tag']='old-none'
new['points']=old['points']+new['points']
new['command']=new['command']+'  (merged with '+sys.argv[1]+')'
json.dump(new,open(sys.argv[3],'w'),indent=1)
print(len(new['points']))
