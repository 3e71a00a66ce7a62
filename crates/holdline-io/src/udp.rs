//! UDP sockets with batched receive and send.
//!
//! A worker owns one [`UdpSocket`] per UDP listener; with [`UdpOptions::reuse_port`] every
//! worker binds the same address and the kernel spreads datagrams over them by source.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

use mio::event::Source;
use mio::{Interest, Registry, Token};
use socket2::{Domain, Protocol, Socket, Type};

use crate::sys::{self, BpfInsn, MAX_BATCH, RecvMeta};

/// Classic BPF opcodes used by [`invite_steering`] (`linux/bpf_common.h`).
mod op {
    pub(super) const LD_W_ABS: u16 = 0x20;
    pub(super) const LD_H_ABS: u16 = 0x28;
    pub(super) const LD_B_ABS: u16 = 0x30;
    pub(super) const JEQ_K: u16 = 0x15;
    pub(super) const MOD_K: u16 = 0x94;
    pub(super) const ADD_K: u16 = 0x04;
    pub(super) const RET_A: u16 = 0x16;
    /// `SKF_NET_OFF`: loads relative to the network header (the program sees the datagram
    /// from its UDP payload on).
    pub(super) const NET_OFF: i32 = -0x10_0000;
}

/// The reuseport program of [`UdpSocket::steer_invites`]: index `workers + h` for a payload
/// starting with `INVITE `, `h` otherwise, `h` = source port mod `workers` (read at the
/// network header plus 20 or 40 bytes: IPv4 without options, IPv6 without extension headers;
/// any other header only changes which worker reads the datagram, and the workers hand
/// calls to their owners anyway). A payload shorter than 7 bytes makes the load fail, and a
/// failed load ends the program with 0: worker 0's first socket.
fn invite_steering(workers: u32, ipv6: bool) -> Vec<BpfInsn> {
    let sport = (op::NET_OFF + if ipv6 { 40 } else { 20 }) as u32;
    vec![
        (op::LD_W_ABS, 0, 0, 0),
        (op::JEQ_K, 0, 4, u32::from_be_bytes(*b"INVI")),
        (op::LD_H_ABS, 0, 0, 4),
        (op::JEQ_K, 0, 2, u32::from(u16::from_be_bytes(*b"TE"))),
        (op::LD_B_ABS, 0, 0, 6),
        (op::JEQ_K, 3, 0, u32::from(b' ')),
        // 6: anything else
        (op::LD_H_ABS, 0, 0, sport),
        (op::MOD_K, 0, 0, workers),
        (op::RET_A, 0, 0, 0),
        // 9: INVITE
        (op::LD_H_ABS, 0, 0, sport),
        (op::MOD_K, 0, 0, workers),
        (op::ADD_K, 0, 0, workers),
        (op::RET_A, 0, 0, 0),
    ]
}

/// How a UDP socket is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpOptions {
    /// Set `SO_REUSEPORT` (one socket per worker on the same address).
    pub reuse_port: bool,
    /// `SO_RCVBUF` in bytes (`None`: the system default).
    pub recv_buffer: Option<usize>,
    /// `SO_SNDBUF` in bytes (`None`: the system default).
    pub send_buffer: Option<usize>,
    /// Use `recvmmsg`/`sendmmsg` where the platform has them; off forces one datagram per
    /// system call.
    pub batched: bool,
    /// Ask the kernel for each datagram's receive time (`SO_TIMESTAMPNS`, Linux, batched
    /// receive only): [`Datagram::received_at`]. A server measures its queueing delay with it.
    pub timestamps: bool,
}

impl Default for UdpOptions {
    fn default() -> Self {
        Self {
            reuse_port: true,
            recv_buffer: None,
            send_buffer: None,
            batched: true,
            timestamps: false,
        }
    }
}

/// A non-blocking UDP socket registered with a `mio::Poll`.
#[derive(Debug)]
pub struct UdpSocket {
    inner: mio::net::UdpSocket,
    batched: bool,
    /// The bound address, read once after binding (it cannot change afterwards), so that
    /// callers choosing a socket per datagram make no `getsockname` call.
    local: SocketAddr,
}

impl UdpSocket {
    /// Opens a non-blocking socket bound to `addr` with `opts`.
    pub fn bind(addr: SocketAddr, opts: &UdpOptions) -> io::Result<Self> {
        let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        if addr.is_ipv6() {
            socket.set_only_v6(true)?;
        }
        #[cfg(unix)]
        if opts.reuse_port {
            socket.set_reuse_port(true)?;
        }
        if let Some(n) = opts.recv_buffer {
            socket.set_recv_buffer_size(n)?;
        }
        if let Some(n) = opts.send_buffer {
            socket.set_send_buffer_size(n)?;
        }
        if opts.timestamps {
            sys::enable_rx_timestamps(socket.as_raw_fd())?;
        }
        socket.set_nonblocking(true)?;
        socket.bind(&addr.into())?;
        let inner = mio::net::UdpSocket::from_std(socket.into());
        let local = inner.local_addr()?;
        Ok(Self {
            inner,
            batched: opts.batched && sys::HAVE_MMSG,
            local,
        })
    }

    /// The bound address (with the port the system chose for port 0); no system call.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }

    /// The socket's inode number: its identity in `/proc/net/udp` (see [`kernel_drops`]).
    pub fn inode(&self) -> io::Result<u64> {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::metadata(format!("/proc/self/fd/{}", self.inner.as_raw_fd())).map(|m| m.ino())
    }

    /// `SO_RCVBUF` as the kernel reports it.
    pub fn recv_buffer_size(&self) -> io::Result<usize> {
        socket2::SockRef::from(&self.inner).recv_buffer_size()
    }

    /// `SO_SNDBUF` as the kernel reports it.
    pub fn send_buffer_size(&self) -> io::Result<usize> {
        socket2::SockRef::from(&self.inner).send_buffer_size()
    }

    /// Steers datagrams between the sockets bound to this socket's address with
    /// `SO_REUSEPORT` (its group): a datagram whose payload starts with `INVITE ` goes to
    /// the socket bound `workers + h` th, anything else to the `h` th, where `h` is the
    /// sender's UDP port modulo `workers`. The group must therefore be `workers` sockets for
    /// everything bound first, then `workers` sockets for INVITEs: a worker reads the first
    /// kind before the second, and when it cannot keep up the kernel drops new INVITEs from
    /// their own (small) receive buffer, for free, instead of dropping ACKs, BYEs and
    /// responses of calls already admitted from a shared one.
    ///
    /// Classic BPF on the group (`SO_ATTACH_REUSEPORT_CBPF`, Linux ≥ 4.5); `Unsupported`
    /// elsewhere. `workers` must be at least 1.
    pub fn steer_invites(&self, workers: usize) -> io::Result<()> {
        let n = u32::try_from(workers)
            .ok()
            .filter(|&n| (1..=u32::MAX / 2).contains(&n))
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        sys::attach_reuseport_cbpf(
            self.inner.as_raw_fd(),
            &invite_steering(n, self.local.is_ipv6()),
        )
    }

    /// Whether batched system calls are in use.
    pub fn is_batched(&self) -> bool {
        self.batched
    }

    /// Receives as many datagrams as fit in `batch` (at least one or an error; `WouldBlock`
    /// when none is waiting). Previous contents of `batch` are replaced.
    pub fn recv_batch(&self, batch: &mut RecvBatch) -> io::Result<usize> {
        batch.count = 0;
        if self.batched {
            let n = sys::recv_mmsg(
                self.inner.as_raw_fd(),
                &mut batch.data,
                batch.slot,
                &mut batch.meta,
            )?;
            batch.count = n;
            return Ok(n);
        }
        let slot = batch.slot;
        while batch.count < batch.meta.len() {
            let i = batch.count;
            let buf = &mut batch.data[i * slot..(i + 1) * slot];
            match self.inner.recv_from(buf) {
                Ok((len, addr)) => {
                    batch.meta[i] = RecvMeta {
                        len,
                        addr: Some(addr),
                        // recv_from cannot tell; a datagram filling the slot may be cut.
                        truncated: len == slot,
                        rx_ns: None,
                    };
                    batch.count += 1;
                }
                Err(e) if batch.count > 0 && e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        Ok(batch.count)
    }

    /// Sends the queued datagrams of `batch` from the front, removing those sent, and
    /// returns how many were sent. Stops at `WouldBlock`: the rest stay queued and the
    /// caller decides whether to drop them (never block). A datagram the kernel refuses for
    /// another reason is removed and counted in `errors`.
    pub fn send_batch(&self, batch: &mut SendBatch, errors: &mut usize) -> usize {
        let mut sent = 0;
        let mut first = 0;
        let unspecified = SocketAddr::from(([0, 0, 0, 0], 0));
        while first < batch.items.len() {
            let r = if self.batched {
                let end = (first + MAX_BATCH).min(batch.items.len());
                let mut arr: [(SocketAddr, &[u8]); MAX_BATCH] = [(unspecified, &[][..]); MAX_BATCH];
                for (slot, (a, r)) in arr.iter_mut().zip(&batch.items[first..end]) {
                    *slot = (*a, &batch.data[r.clone()]);
                }
                sys::send_mmsg(self.inner.as_raw_fd(), &arr[..end - first])
            } else {
                let (addr, range) = &batch.items[first];
                self.inner
                    .send_to(&batch.data[range.clone()], *addr)
                    .map(|_| 1)
            };
            match r {
                Ok(n) => {
                    sent += n;
                    first += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => {
                    *errors += 1;
                    first += 1;
                }
            }
        }
        batch.drain_front(first);
        sent
    }

    /// Sends one datagram (no batching).
    pub fn send_to(&self, buf: &[u8], addr: SocketAddr) -> io::Result<usize> {
        self.inner.send_to(buf, addr)
    }
}

impl Source for UdpSocket {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        self.inner.register(r, t, i)
    }
    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        self.inner.reregister(r, t, i)
    }
    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        self.inner.deregister(r)
    }
}

/// Buffers for up to `slots` received datagrams of up to `slot_size` bytes each.
#[derive(Debug)]
pub struct RecvBatch {
    slot: usize,
    data: Vec<u8>,
    meta: Vec<RecvMeta>,
    count: usize,
}

impl RecvBatch {
    /// Room for `slots` (at most 32 per call are used) datagrams of `slot_size` bytes.
    /// Give `slot_size` one byte more than the largest message accepted, so that an oversized
    /// datagram shows as truncated.
    pub fn new(slots: usize, slot_size: usize) -> Self {
        let slots = slots.clamp(1, MAX_BATCH);
        let slot = slot_size.max(1);
        Self {
            slot,
            data: vec![0; slots * slot],
            meta: vec![
                RecvMeta {
                    len: 0,
                    addr: None,
                    truncated: false,
                    rx_ns: None,
                };
                slots
            ],
            count: 0,
        }
    }

    /// Datagrams held by the last receive.
    pub fn len(&self) -> usize {
        self.count
    }

    /// How many datagrams one receive can return (a short receive emptied the socket).
    pub fn capacity(&self) -> usize {
        self.meta.len()
    }

    /// Whether the last receive returned nothing.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Datagram `i` of the last receive: payload, source, and whether it was cut short
    /// (longer than the slot).
    pub fn get(&self, i: usize) -> Option<Datagram<'_>> {
        if i >= self.count {
            return None;
        }
        let m = self.meta[i];
        let start = i * self.slot;
        Some(Datagram {
            payload: &self.data[start..start + m.len],
            source: m.addr?,
            truncated: m.truncated,
            received_at: m.rx_ns,
        })
    }
}

/// One received datagram.
#[derive(Clone, Copy, Debug)]
pub struct Datagram<'a> {
    /// The bytes (cut at the slot size if `truncated`).
    pub payload: &'a [u8],
    /// Who sent it.
    pub source: SocketAddr,
    /// Whether it was longer than the receive slot.
    pub truncated: bool,
    /// When the kernel received it: nanoseconds since the Unix epoch on the system's
    /// real-time clock (`CLOCK_REALTIME`), if the socket was opened with
    /// [`UdpOptions::timestamps`]. Compare with the same clock (`SystemTime::now()`).
    pub received_at: Option<u64>,
}

/// Datagrams waiting to be sent with one batched call, payloads packed in one buffer.
#[derive(Debug, Default)]
pub struct SendBatch {
    data: Vec<u8>,
    items: Vec<(SocketAddr, std::ops::Range<usize>)>,
}

impl SendBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues one datagram.
    pub fn push(&mut self, to: SocketAddr, payload: &[u8]) {
        let start = self.data.len();
        self.data.extend_from_slice(payload);
        self.items.push((to, start..self.data.len()));
    }

    /// Datagrams queued.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Drops everything queued; returns how many datagrams were dropped.
    pub fn clear(&mut self) -> usize {
        let n = self.items.len();
        self.items.clear();
        self.data.clear();
        n
    }

    fn drain_front(&mut self, n: usize) {
        if n >= self.items.len() {
            self.clear();
        } else if n > 0 {
            self.items.drain(..n);
        }
    }
}

/// The datagrams the kernel dropped on the sockets whose inodes are `inodes` (see
/// [`UdpSocket::inode`]) because their receive buffer was full: what arrived and was shed
/// before anyone read it. Read from the `drops` column of `/proc/net/udp` and
/// `/proc/net/udp6` (Linux); sockets not found count 0.
pub fn kernel_drops(inodes: &[u64]) -> io::Result<u64> {
    let mut total = 0u64;
    for table in ["/proc/net/udp", "/proc/net/udp6"] {
        let text = match std::fs::read_to_string(table) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        total += drops_in(&text, inodes);
    }
    Ok(total)
}

/// The sum of the `drops` column of the lines of a `/proc/net/udp` table whose inode is one
/// of `inodes`.
fn drops_in(table: &str, inodes: &[u64]) -> u64 {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            // sl local rem st tx:rx tr:tm retrnsmt uid timeout inode ref pointer drops
            let f: Vec<&str> = line.split_whitespace().collect();
            let inode: u64 = f.get(9)?.parse().ok()?;
            inodes
                .contains(&inode)
                .then(|| f.get(12)?.parse::<u64>().ok())
                .flatten()
        })
        .sum()
}

#[cfg(test)]
mod drop_tests {
    use super::*;

    #[test]
    fn the_drops_column_of_our_sockets_is_summed() {
        let table = "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
  563: 0100007F:13C4 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4242 2 0000000000000000 17\n\
  564: 0100007F:13C5 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4243 2 0000000000000000 5\n\
  565: 0100007F:13C6 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 9999 2 0000000000000000 100\n";
        assert_eq!(drops_in(table, &[4242, 4243]), 22);
        assert_eq!(drops_in(table, &[1]), 0);
        assert_eq!(drops_in("garbage\nmore garbage x y\n", &[4242]), 0);
    }

    #[test]
    fn a_socket_we_bound_is_found_with_no_drops() {
        let s = UdpSocket::bind("127.0.0.1:0".parse().expect("addr"), &UdpOptions::default())
            .expect("bind");
        let inode = s.inode().expect("inode");
        assert!(inode > 0);
        assert_eq!(kernel_drops(&[inode]).expect("read /proc/net/udp"), 0);
    }
}
