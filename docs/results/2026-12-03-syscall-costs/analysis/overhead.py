"""The real worker's loop overhead (busy time outside message handling) against the datagrams
it read and sent, fitted by least squares over every run's metrics given on the command line:
python3 overhead.py RUN-serve.metrics ...  (prints one row per run and the fit)."""
import re, sys

def total(text, name):
    s = 0.0
    for m in re.finditer(r'^' + re.escape(name) + r'(\{[^}]*\})? (\S+)$', text, re.M):
        labels = m.group(1) or ''
        if 'transport' in labels and 'udp' not in labels:
            continue
        s += float(m.group(2))
    return s

rows = []
for f in sys.argv[1:]:
    t = open(f).read()
    over = total(t, 'holdline_loop_busy_seconds_sum') - total(t, 'holdline_processing_seconds_sum')
    rows.append((f, total(t, 'holdline_messages_in_total'), total(t, 'holdline_messages_out_total'), over))
print("run,datagrams_in,datagrams_out,overhead_s")
for r in rows:
    print("%s,%d,%d,%.3f" % r)
# least squares: overhead = a * in + b * out
sxx = sum(r[1] * r[1] for r in rows); sxy = sum(r[1] * r[2] for r in rows); syy = sum(r[2] * r[2] for r in rows)
bx = sum(r[1] * r[3] for r in rows); by = sum(r[2] * r[3] for r in rows)
det = sxx * syy - sxy * sxy
a = (bx * syy - by * sxy) / det; b = (by * sxx - bx * sxy) / det
rms = (sum((a * r[1] + b * r[2] - r[3]) ** 2 for r in rows) / len(rows)) ** 0.5
print("# fit: %.2f us per datagram read, %.2f us per datagram sent (rms %.3f s)" % (a * 1e6, b * 1e6, rms))
