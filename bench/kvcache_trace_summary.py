"""Sums up the per-CTA timelines of a -DFLASHC_KVC_TRACE build (written by
kvcache_bench with FLASHC_KVC_TRACE_OUT; src/cuda/hopper_kvcache_trace.cuh).

One table row per traced call: CTAs and SMs, the kernel's span, when CTAs
end (first, 10th, 50th and 90th percentile, from the first start), the
spread of their starts, their key steps, and "loss": the share of the span
beyond what the call's steps take at its steady rate (each CTA's steps
spread evenly over its life; the steady rate is the median over the middle
half of the span). The loss is what an even tail could save at most.

    python3 bench/kvcache_trace_summary.py trace.txt [--by-sm LABEL]

--by-sm LABEL prints, for that call, each SM's CTA durations (us)."""
import collections
import sys


def load(path):
    calls = collections.OrderedDict()
    for line in open(path):
        f = line.split()
        if len(f) == 6:
            calls.setdefault(f[0], []).append(tuple(int(x) for x in f[1:]))
    return calls


def summary(label, ctas, bin_us=0.25):
    t0 = min(c[1] for c in ctas)
    starts = sorted((c[1] - t0) / 1e3 for c in ctas)
    ends = sorted((c[2] - t0) / 1e3 for c in ctas)
    span = ends[-1]
    bins = max(1, int(span / bin_us))
    rate = [0.0] * (bins + 1)
    for _, s, e, _, steps in ctas:
        a, b = (s - t0) / 1e3, (e - t0) / 1e3
        if b <= a or steps == 0:
            continue
        r = steps / (b - a)
        for i in range(int(a / bin_us), min(int(b / bin_us), bins) + 1):
            lo, hi = max(a, i * bin_us), min(b, (i + 1) * bin_us)
            if hi > lo:
                rate[i] += r * (hi - lo) / bin_us
    middle = sorted(rate[bins // 4: 3 * bins // 4])
    steady = middle[len(middle) // 2] if middle else 0.0
    total = sum(c[4] for c in ctas)
    loss = (span - total / steady) / span * 100 if steady else float("nan")
    q = lambda v, p: v[min(len(v) - 1, int(p * len(v)))]
    steps = [c[4] for c in ctas]
    return (f"| {label} | {len(ctas)} | {len(set(c[3] for c in ctas))} | {span:.1f} | {ends[0]:.1f} | "
            f"{q(ends, .1):.1f} | {q(ends, .5):.1f} | {q(ends, .9):.1f} | {starts[-1]:.1f} | "
            f"{min(steps)} / {max(steps)} | {loss:.1f} % |")


def main():
    calls = load(sys.argv[1])
    if len(sys.argv) == 4 and sys.argv[2] == "--by-sm":
        by_sm = collections.defaultdict(list)
        for _, s, e, sm, _ in calls[sys.argv[3]]:
            by_sm[sm].append((e - s) / 1e3)
        for sm in sorted(by_sm):
            print(sm, " ".join(f"{d:.1f}" for d in by_sm[sm]))
        return
    print("| call (KV heads, batch, cache, block size, kernel) | CTAs | SMs | span us | first end | p10 end | "
          "p50 end | p90 end | start spread | steps min / max | loss |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for label, ctas in calls.items():
        print(summary(label, ctas))


if __name__ == "__main__":
    main()
