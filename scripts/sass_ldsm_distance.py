#!/usr/bin/env python3
"""How far ahead of its tensor-core product each shared-memory fragment load
is issued, per region of one kernel's SASS.

Input: `cuobjdump -sass -fun <mangled name> object` of one kernel. Regions
are the code between barriers (BAR.SYNC) and warp syncs (WARPSYNC: the start
of a loop with a break, such as the portable backward's dQ chunks). For each
HMMA the count is the number of instructions since the LDSM that wrote one
of its operand registers (the nearest one); the median and the counts under
4 / 8 / 16 are printed per region. A static view only: the issue order, not
the cycles (bench/NOTES.md, p4, for how far it predicts).

    cuobjdump -sass -fun _Z17flashc_bwd_kernel... bwd_hdim128.o > k.sass
    python3 scripts/sass_ldsm_distance.py k.sass
"""
import collections
import re
import sys


def registers(token, count):
    m = re.match(r"R(\d+)", token)
    if not m:
        return set()
    first = int(m.group(1))
    return set(range(first, first + count))


def main(path):
    code = []
    for line in open(path):
        m = re.search(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", line)
        if m:
            code.append(re.sub(r"^@!?U?P\w+\s+", "", m.group(2).strip()))
    written_by_ldsm = {}  # register -> index of the LDSM that last wrote it
    region = 0
    stats = collections.defaultdict(lambda: {"hmma": 0, "ldsm": 0, "dist": []})
    for i, ins in enumerate(code):
        words = ins.split()
        if not words:
            continue
        op = words[0]
        if op.startswith("BAR.SYNC") or op.startswith("WARPSYNC"):
            region += 1
        st = stats[region]
        operands = [w.rstrip(",").replace(".reuse", "") for w in words[1:]]
        if op.startswith("LDSM"):
            st["ldsm"] += 1
            for r in registers(operands[0], 4):
                written_by_ldsm[r] = i
        elif op.startswith("HMMA"):
            st["hmma"] += 1
            sources = registers(operands[1], 4) | registers(operands[2], 2)
            d = [i - written_by_ldsm[r] for r in sources if r in written_by_ldsm]
            if d:
                st["dist"].append(min(d))
        elif operands:
            for r in registers(operands[0], 1):  # any other write ends the LDSM's value
                written_by_ldsm.pop(r, None)
    for k in sorted(stats):
        st = stats[k]
        if not st["hmma"]:
            continue
        d = sorted(st["dist"])
        n = len(d)
        print(f"region {k}: HMMA {st['hmma']} LDSM {st['ldsm']}; fed by an LDSM {n}: "
              f"under 4 {sum(x < 4 for x in d)}, under 8 {sum(x < 8 for x in d)}, "
              f"under 16 {sum(x < 16 for x in d)}, median {d[n // 2] if n else 0}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
