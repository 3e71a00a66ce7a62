import os, resource, time
def run(prezero, n=3000, size=6000):
    path = "/tmp/reg/probe.wal"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC)
    if prezero:
        os.write(fd, b"\0" * (n * size + 4096)); os.fsync(fd); os.lseek(fd, 0, 0)
    buf = os.urandom(size)
    r0 = resource.getrusage(resource.RUSAGE_SELF); t0 = time.time()
    lat = []
    for i in range(n):
        a = time.time(); os.write(fd, buf); os.fdatasync(fd); lat.append(time.time() - a)
        time.sleep(0.0015)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / n * 1e6
    lat.sort()
    print(f"prezero={prezero}: cpu {cpu:.0f} us/op, latency p50 {lat[n//2]*1e3:.2f} p99 {lat[int(n*.99)]*1e3:.2f} max {lat[-1]*1e3:.1f} ms")
    os.close(fd); os.unlink(path)
for p in (False, True, False, True):
    run(p)
