import json, statistics, sys
for f in sys.argv[1:]:
    d=json.load(open(f)); rows=d['rows']
    print(f, d['meta'].get('command'))
    by={}
    for r in rows:
        by[(r['op'],r['dtype'],r['shape'],r['name'])]=statistics.median(r['us'])
    ratios=[]
    for (op,dt,sh,k),us in by.items():
        if k.endswith(' early'):
            base=k[:-6]
            dflt = (op,dt,sh,base+' (default)') in by
            b = by.get((op,dt,sh,base)) or by.get((op,dt,sh,base+' (default)'))
            if b:
                ratio=us/b; ratios.append(ratio)
                print(f"{op:12s} {sh:11s} {base:42s} {b:7.1f} -> {us:7.1f}  {ratio:.3f}{'  DEFAULT' if dflt else ''}")
    print('n', len(ratios), 'median %.3f min %.3f max %.3f' % (statistics.median(ratios), min(ratios), max(ratios)))
