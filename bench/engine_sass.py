#!/usr/bin/env python3
"""The GEMM engine's machine code, two builds side by side, without a GPU: for each tile config and
B layout, the registers, stack and local memory of each kernel (cuobjdump --dump-resource-usage)
and the instruction counts of the kernel and of its hot loops (cuobjdump -sass), old against new.

    python3 bench/engine_sass.py --old OLD.o [OLD.o ...] --new NEW.o [NEW.o ...] [--diff CONFIG]

OLD and NEW are object files holding gemm_ws_kernel instantiations: the engine's inst_*.o (one
kernel per A source, B layout and config), or the single gemm_engine.o of the engine before it
was split into roles (one kernel per B layout and config, every A source at run time: it is
compared with each source's kernel). Needs cuobjdump and nvdisasm on the PATH (CUDA toolkit, or
the nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm wheels).

Hot loops, found from the backward branches of each kernel:
  K step     the consumers' K loop (the innermost loop with HGMMA) without the once-per-unit
             branch that computes the next unit's schedule: what runs for every 64-wide K block
  producer   the producer's K loop (the innermost loop with a TMA load and an mbarrier wait)
  tile       the consumers' unit loop (the innermost loop with HGMMA and the epilogue's global
             stores): mainloop plus epilogue
A count marked '=' has the same instructions as the old one, registers and addresses aside; a
kernel only the new build has (a config added since) shows its own numbers, marked 'new'.
--diff 128x256x64/s4 prints the old and new K step of that config side by side (B column-major,
plain source)."""
import argparse
import collections
import difflib
import re
import subprocess
import sys

FN = re.compile(r'Function : (\S+)')
INS = re.compile(r'/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;')
RES_FN = re.compile(r'Function (\S+):')
RES = re.compile(r'REG:(\d+) STACK:(\d+) SHARED:\d+ LOCAL:(\d+)')
# gemm_ws_kernel<BM, BN, STAGES, WGN, B_MN, CL, SK> (before the split),
# gemm_ws_kernel<gemm_cfg<BM, BN, STAGES, WGN, B_MN, CL, SK>, a_SOURCE<...>, ...> (after), and
# gemm_cfg<..., SK, PP> since the ping-pong consumers (PP 0 where absent).
CFG = re.compile(r'gemm_ws_kernelI(?:8gemm_cfgI)?' + r'ELi'.join([r'Li(\d+)'] + [r'(\d+)'] * 6) + r'E(?:Li(\d+)E)?')
SRC = re.compile(r'\d+(a_\w+?)IS')


def run(args):
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def kernels(objs):
    """{(bm, bn, stages, wgn, b_mn, cl, sk, pp): {source: (instructions, (regs, stack, local))}}"""
    out = collections.defaultdict(dict)
    for obj in objs:
        res, cur = {}, None
        for line in run(['cuobjdump', '--dump-resource-usage', obj]).splitlines():
            m = RES_FN.search(line)
            if m:
                cur = m.group(1)
            m = RES.search(line)
            if m and cur:
                res[cur] = tuple(int(x) for x in m.groups())
        sass, cur = collections.OrderedDict(), None
        for line in run(['cuobjdump', '-sass', obj]).splitlines():
            m = FN.search(line)
            if m:
                cur = m.group(1)
                sass[cur] = []
                continue
            m = INS.search(line)
            if m and cur:
                sass[cur].append((int(m.group(1), 16), m.group(2)))
        for name, ins in sass.items():
            m = CFG.search(name)
            if not m:
                continue
            s = SRC.search(name[m.end():])
            out[tuple(int(x or 0) for x in m.groups())][s.group(1)[2:] if s else 'any'] = (ins, res.get(name))
    return out


def opcode(text):
    t = re.sub(r'^@!?U?P[T0-9]+\s+', '', text).split()
    return t[0] if t else ''


def loops(ins):
    for a, t in ins:
        m = re.search(r'\bBRA\b.*?(0x[0-9a-f]+)', t)
        if m and int(m.group(1), 16) <= a:
            tgt = int(m.group(1), 16)
            yield [x for x in ins if tgt <= x[0] <= a]


def innermost(ins, *ops):
    cands = [b for b in loops(ins) if all(any(opcode(t).startswith(op) for _, t in b) for op in ops)]
    return min(cands, key=len) if cands else []


def k_step(ins):
    k = innermost(ins, 'HGMMA')
    if not k:
        return k
    last = max(i for i, (_, t) in enumerate(k) if 'HGMMA' in t)
    for a, t in k[last + 1:last + 4]:
        m = re.search(r'BRA (0x[0-9a-f]+)', t)
        if m and t.lstrip().startswith('@'):
            skip_to = int(m.group(1), 16)
            return [x for x in k if not a < x[0] < skip_to]
    return k


def hot(ins):
    return k_step(ins), innermost(ins, 'UTMALDG', 'SYNCS.PHASECHK'), innermost(ins, 'HGMMA', 'STG.E')


def norm(body):
    """Instruction text with registers, addresses and branch targets made neutral."""
    return [re.sub(r'\bU?R\d+\b|\bU?P\d\b|0x[0-9a-f]+', '_', t) for _, t in body]


def count(ins):
    return sum(1 for _, t in ins if opcode(t) != 'NOP')


def cfg_name(key):
    bm, bn, st, wgn, b_mn, cl, sk, pp = key
    return '%dx%dx64/s%d%s%s%s' % (bm, bn, st, '/c2' if cl == 2 else '', '/sk' if sk else '', '/pp' if pp else '')


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--old', nargs='+', required=True)
    ap.add_argument('--new', nargs='+', required=True)
    ap.add_argument('--diff', help='a config name, e.g. 128x256x64/s4: print its K steps')
    a = ap.parse_args()
    old, new = kernels(a.old), kernels(a.new)
    if a.diff:
        key = next((k for k in old if cfg_name(k) == a.diff and k[4] == 0), None)
        if key is None or key not in new:
            sys.exit('no kernel for ' + a.diff)
        o = old[key].get('any') or old[key].get('plain')
        for line in difflib.unified_diff(norm(k_step(o[0])), norm(k_step(new[key]['plain'][0])), 'old', 'new',
                                         lineterm=''):
            print(line)
        return
    print('| config | B | source | regs | stack | local | instructions | K step | producer K loop | tile loop |')
    print('|---|---|---|---|---|---|---|---|---|---|')
    for key in sorted(new):
        name, b_mn = cfg_name(key).replace('x64/', '/'), key[4]
        for src, (ins, res) in sorted(new[key].items()):
            base = old.get(key, {})
            o = base.get(src) or base.get('any')
            if not o:  # a kernel the old build does not have: the new one's numbers alone
                nh = hot(ins)
                print('| %s | %s | %s | new %d | new %d | new %d | new %d | new %d | new %d | new %d |' % (
                    name, 'row' if b_mn else 'col', src, res[0], res[1], res[2], count(ins), count(nh[0]),
                    count(nh[1]), count(nh[2])))
                continue
            oh, nh = hot(o[0]), hot(ins)
            cell = lambda x, y: '%d -> %d%s' % (count(x), count(y), ' =' if x and norm(x) == norm(y) else '')
            print('| %s | %s | %s | %d -> %d | %d -> %d | %d -> %d | %s | %s | %s | %s |' % (
                name, 'row' if b_mn else 'col', src, o[1][0], res[0], o[1][1], res[1], o[1][2], res[2],
                cell(o[0], ins), cell(oh[0], nh[0]), cell(oh[1], nh[1]), cell(oh[2], nh[2])))


if __name__ == '__main__':
    main()
