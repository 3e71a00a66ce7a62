import sys
# Generates lab/sim/seed003-mixed*.toml: seed 003 topology 1 reduced to one core.
def gen(name, deoc_edges, steps, header_extra, interval=""):
    out=[]
    out.append(header_extra)
    out.append(f'''name = "{name}"
seed = 3
runs = 10
duration_s = {steps[-1][0] + 60 if len(steps)>1 else 100}
drain_s = 40
settle_s = {40 if len(steps)==1 else 5}
capacity_cps = 28.571
goodput_window_s = 10
fairness_flows = [{", ".join('"ua%d-to-%d"' % (i, j) for i in range(1,5) for j in (5,6))}]
''')
    srv='''
[[servers]]
name = "{n}"
local = "occ"
{interval}discipline = "paper"
service_us = 5000
reject_us = 5000
queue = 100
batch = 1
read_batches = 1
'''
    out.append(srv.format(n="c1", interval=interval))
    for i in range(1,7):
        s=srv.format(n=f"e{i}", interval=interval)
        if i in deoc_edges:
            s+='edge = "deoc"\n'
        out.append(s)
    for j in (5,6):
        out.append(f'\n[[uas]]\nname = "ua{j}"\n')
    for i in range(1,5):
        for j in (5,6):
            st=", ".join("{ at_s = %g, factor = %g }" % (a, f) for a,f in steps)
            out.append(f'''
[[uac]]
name = "ua{i}-to-{j}"
target = "e{i}"
domain = "e{j}.example"
hold = "exp"
hold_ms = 30000
steps = [{st}]
''')
    for i in range(1,5):
        for j in (5,6):
            out.append(f'\n[[routes]]\nserver = "e{i}"\ndomain = "e{j}.example"\nto = "c1"\n')
    for j in (5,6):
        out.append(f'\n[[routes]]\nserver = "c1"\ndomain = "e{j}.example"\nto = "e{j}"\n')
        out.append(f'\n[[routes]]\nserver = "e{j}"\ndomain = "e{j}.example"\nto = "ua{j}"\n')
    out.append('\n[default_link]\ndelay_ms = 1\n')
    return "".join(out)

head = '''# Seed 003's future work (l. 442-444), issue 24 item 4: DEOC and non-DEOC edges sharing an
# overloaded core. Seed 003's topology 1 (lab/sim/seed003-topology1.toml) reduced to one core:
# ingress edges E1-E4 send every call through core C1 to egress edge E5 or E6 (target
# uniform: one UAC population per (ingress, target) pair, 1/8 of the load each), then to the
# callee. The paper's settings (l. 296-307, NOTES.md): 200 messages/s per server (5 ms), the
# paper's discipline (FIFO of 100 messages, early rejection, a 503 costs a message), OCC at
# every server with holdline's 100 ms interval (the paper's 1 s makes the core's OCC swing
# between admitting all and nearly nothing every few seconds: docs/sim.md, "Seed 003,
# topologies 1 and 2"; seed003-mixed-occ1s.toml is this file with the paper's 1 s), Poisson
# arrivals, exponential holding time of mean 30 s,
# goodput = 200 OK within 10 s. C1 is the bottleneck: 7 messages per call, 28.6 calls/s
# (`capacity_cps`). Jain's index over the 8 admitted call flows (NOTES.md: over (ingress,
# target) pairs sharing the bottleneck).
#
# E1 and E2 run DEOC (`edge = "deoc"`), E3 and E4 do not (the paper's "edge servers not
# under the control of the carrier"). The mechanisms, with `+asis` keeping those edge roles:
#   holdline sim run lab/sim/seed003-mixed.toml \\
#       --mechanism occ+asis,occ+asis+fair,occ+asis+probe+fair,occ+deoc,occ+deoc+probe \\
#       --scale 1,2,3 --runs 10 --jobs 2 --out DIR
# (`+fair`: `local_fairness = "per-upstream"` at every server; `+probe`: `load_report` at
# every server and `deoc = { signal = "load-report" }` at the DEOC edges; `occ+deoc`: DEOC
# at all four ingress edges.)
'''
open("lab/sim/seed003-mixed.toml","w").write(gen("seed003-mixed", {1,2}, [(0,0.125)], head))
head2 = '''# Seed 003's load step (Section 5.2.2, Figs. 12-15) on the one-core network of
# lab/sim/seed003-mixed.toml (read its header), every ingress edge running DEOC: 0.5x the
# capacity for 60 s, 3x for 60 s, 0.5x for 60 s (rates per flow: capacity/16, 3/8 capacity,
# capacity/16), to compare the recovery of plain DEOC and DEOC with load reports:
#   holdline sim run lab/sim/seed003-mixed-step.toml --mechanism occ+deoc --runs 10 --out DIR
#   holdline sim run lab/sim/seed003-mixed-step.toml --mechanism occ+deoc+probe+fair ...
# (one mechanism without --scale: a plain run, with timeseries.csv: goodput per second).
'''
head3 = head.replace("# Seed 003's future work", "# lab/sim/seed003-mixed.toml with the paper's OCC interval (1 s, local_interval_ms = 1000).\n# Seed 003's future work", 1).replace("lab/sim/seed003-mixed.toml \\", "lab/sim/seed003-mixed-occ1s.toml \\")
open("lab/sim/seed003-mixed-occ1s.toml","w").write(gen("seed003-mixed-occ1s", {1,2}, [(0,0.125)], head3, "local_interval_ms = 1000\n"))
open("lab/sim/seed003-mixed-step.toml","w").write(gen("seed003-mixed-step", {1,2,3,4}, [(0,0.0625),(60,0.375),(120,0.0625)], head2))
