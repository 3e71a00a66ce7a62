import socket, time
def fill(r, s, addr, payload):
    n = 0
    while True:
        before = drops(r)
        s.sendto(payload, addr)
        time.sleep(0.0002)
        if drops(r) > before:
            return n
        n += 1
def drops(r):
    port = r.getsockname()[1]
    for line in open('/proc/net/udp').read().splitlines()[1:]:
        f = line.split()
        if int(f[1].split(':')[1], 16) == port:
            return int(f[-1])
r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
r.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 212992)
r.bind(('127.0.0.1', 0)); addr = r.getsockname()
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
p = b'x' * 700
print('rcvbuf', r.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))
print('first fill', fill(r, s, addr, p))
for k in [1, 5, 10, 20, 30, 40, 50, 60]:
    for _ in range(k): r.recv(2000)
    print('read', k, 'then fits', fill(r, s, addr, p))
