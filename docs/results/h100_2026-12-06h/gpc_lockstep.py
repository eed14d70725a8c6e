"""Which of the engine's CTAs that load the same A or B tile (same K block) sit in the same GPC and
ask for it within 64 ns, from the per-CTA stamps of pair_stamps_lab.patch (h100_2026-12-06g) and
the SM-to-GPC map of the clusters of 16 in h100_2026-12-06g/placement (7 GPCs; SMs outside them: x).
From the repository root:
    xz -dk docs/results/h100_2026-12-06h/st.csv.xz
    python3 docs/results/h100_2026-12-06h/gpc_lockstep.py docs/results/h100_2026-12-06h/st.csv"""
import csv, collections, sys
gpc={}
for line in open('docs/results/h100_2026-12-06g/placement/placement_128_16.txt'):
    p=line.split()
    if len(p)==4 and p[0]=='16' and int(p[2])<7: gpc[int(p[3])]=int(p[2])
runs=collections.OrderedDict()
for r in csv.reader(open(sys.argv[1])):
    label, w, rows, n, k, config, cta, smid, unit, row0, col0, kb, t = r
    runs.setdefault((rows, config.split()[0]), []).append((int(cta), int(smid), int(unit), int(row0), int(col0), int(kb), int(t)))
for key, recs in runs.items():
    pair='/c2' in key[1]
    print(key)
    for op, kf in (('A', lambda x: (x[3], x[5])), ('B', lambda x: (x[4], x[5], x[0]&1 if pair else 0))):
        g=collections.defaultdict(list)
        for x in recs: g[kf(x)].append((x[6], gpc.get(x[1], 'x'), x[0]))
        tot=0; same_near=0; any_near=0; same_any=0
        for v in g.values():
            for i,(t,gp,c) in enumerate(v):
                tot+=1
                others=[(abs(t-t2),gp2) for j,(t2,gp2,c2) in enumerate(v) if j!=i]
                if any(d<=64 and gp2==gp and gp!='x' for d,gp2 in others): same_near+=1
                if any(d<=64 for d,gp2 in others): any_near+=1
                if any(gp2==gp and gp!='x' for d,gp2 in others): same_any+=1
        print('  %s loads %d: a sharer within 64 ns %.2f; in the same GPC (any time) %.2f; same GPC and within 64 ns %.2f' % (op, tot, any_near/tot, same_any/tot, same_near/tot))
