"""Reads a libpcap file (a `dumpcap -i lo -P` capture of the real lab, Ethernet or Linux
loopback framing, or `holdline sim run --pcap`, raw IP) and yields its UDP/IPv4 datagrams."""
import re
import struct


def datagrams(path):
    """(time_s, "src_ip:port", "dst_ip:port", payload) for every IPv4 UDP datagram."""
    with open(path, 'rb') as f:
        magic, _, _, _, _, _, link = struct.unpack('<IHHiIII', f.read(24))
        scale = 1e9 if magic == 0xa1b23c4d else 1e6
        off = {1: 14, 0: 4, 101: 0}.get(link, 16)
        while True:
            h = f.read(16)
            if len(h) < 16:
                return
            ts, tf, incl, _ = struct.unpack('<IIII', h)
            d = f.read(incl)
            ip = d[off:]
            ihl = (ip[0] & 15) * 4
            sp, dp = struct.unpack('>HH', ip[ihl:ihl + 4])
            yield (ts + tf / scale, '%d.%d.%d.%d:%d' % (*ip[12:16], sp),
                   '%d.%d.%d.%d:%d' % (*ip[16:20], dp), ip[ihl + 8:])


def header(payload, name):
    """The value of the first header `name` (bytes; b'' when absent)."""
    m = re.search(rb'\r\n' + name + rb':\s*([^\r]*)', payload)
    return m.group(1).strip() if m else b''


def first_line(payload):
    return payload[:payload.find(b'\r\n')]
