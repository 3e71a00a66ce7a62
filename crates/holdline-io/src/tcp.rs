//! TCP: listeners and non-blocking connections with a read buffer and a bounded write queue.
//!
//! A [`TcpConn`] knows nothing about SIP: the caller appends what [`TcpConn::read`] returns
//! to its framer by looking at [`TcpConn::buffered`] and calling [`TcpConn::consume`].
//! Writes go through [`TcpConn::enqueue`] (refused when the queue would exceed its bound) and
//! [`TcpConn::flush`] (writes until the socket would block).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

use mio::event::Source;
use mio::{Interest, Registry, Token};
use socket2::{Domain, Protocol, Socket, Type};

/// How TCP sockets are opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpOptions {
    /// `SO_REUSEPORT` on listeners (one listener per worker on the same address).
    pub reuse_port: bool,
    /// Listen backlog.
    pub backlog: i32,
    /// `TCP_NODELAY` on connections.
    pub nodelay: bool,
    /// `SO_RCVBUF` in bytes (`None`: system default).
    pub recv_buffer: Option<usize>,
    /// `SO_SNDBUF` in bytes (`None`: system default).
    pub send_buffer: Option<usize>,
    /// Ask the kernel for receive times (`SO_TIMESTAMPNS`, Linux): each
    /// [`TcpConn::read`] then reports when the newest bytes it read arrived
    /// ([`ReadOutcome::rx_ns`]), so the caller can tell how long data waited in the socket.
    pub timestamps: bool,
    /// `TCP_MAXSEG` in bytes (`None`: the path's): the largest segment this socket sends and,
    /// on a listener, the MSS it announces, which bounds what peers send to it. With a small
    /// receive buffer, segments well below a SIP message keep the advertised window in small
    /// steps, so a sender never waits on a window smaller than its next segment (Linux
    /// otherwise holds the segment until its persist timer fires, 200 ms and more).
    pub max_segment: Option<u32>,
}

impl Default for TcpOptions {
    fn default() -> Self {
        Self {
            reuse_port: true,
            backlog: 1024,
            nodelay: true,
            recv_buffer: None,
            send_buffer: None,
            timestamps: false,
            max_segment: None,
        }
    }
}

/// A non-blocking listening socket.
#[derive(Debug)]
pub struct TcpListener {
    inner: mio::net::TcpListener,
    opts: TcpOptions,
}

impl TcpListener {
    /// Binds and listens on `addr`.
    pub fn bind(addr: SocketAddr, opts: &TcpOptions) -> io::Result<Self> {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        if addr.is_ipv6() {
            socket.set_only_v6(true)?;
        }
        socket.set_reuse_address(true)?;
        #[cfg(unix)]
        if opts.reuse_port {
            socket.set_reuse_port(true)?;
        }
        if let Some(n) = opts.recv_buffer {
            socket.set_recv_buffer_size(n)?;
        }
        if let Some(n) = opts.max_segment {
            socket.set_tcp_mss(n)?;
        }
        socket.set_nonblocking(true)?;
        socket.bind(&addr.into())?;
        socket.listen(opts.backlog)?;
        Ok(Self {
            inner: mio::net::TcpListener::from_std(socket.into()),
            opts: *opts,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// Accepts one pending connection (`WouldBlock` when none), configured per the options.
    pub fn accept(&self, limits: ConnLimits) -> io::Result<TcpConn> {
        let (stream, peer) = self.inner.accept()?;
        apply_options(&stream, &self.opts)?;
        Ok(TcpConn::new(
            stream,
            peer,
            limits,
            false,
            self.opts.timestamps,
        ))
    }
}

impl Source for TcpListener {
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

fn apply_options(stream: &mio::net::TcpStream, opts: &TcpOptions) -> io::Result<()> {
    stream.set_nodelay(opts.nodelay)?;
    let sock = socket2::SockRef::from(stream);
    if let Some(n) = opts.send_buffer {
        sock.set_send_buffer_size(n)?;
    }
    if let Some(n) = opts.recv_buffer {
        sock.set_recv_buffer_size(n)?;
    }
    if opts.timestamps {
        crate::sys::enable_rx_timestamps(stream.as_raw_fd())?;
    }
    Ok(())
}

/// Bounds of one connection's buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnLimits {
    /// Most bytes held in the read buffer (reading pauses at this size until the caller
    /// consumes; set it above the largest message).
    pub max_read_buffer: usize,
    /// Most bytes held in the write queue; an `enqueue` past it is refused.
    pub max_queue_bytes: usize,
}

impl Default for ConnLimits {
    fn default() -> Self {
        Self {
            max_read_buffer: 128 * 1024,
            max_queue_bytes: 1024 * 1024,
        }
    }
}

/// What one [`TcpConn::read`] saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ReadOutcome {
    /// Bytes appended to the read buffer.
    pub bytes: usize,
    /// The peer closed its side.
    pub eof: bool,
    /// The socket was drained (`WouldBlock`); if false, read again after consuming.
    pub drained: bool,
    /// With [`TcpOptions::timestamps`]: the kernel's receive time of the newest bytes read
    /// (`CLOCK_REALTIME` ns since the Unix epoch; compare with `SystemTime::now()`). Every byte
    /// this read appended arrived then or earlier.
    pub rx_ns: Option<u64>,
}

/// The write queue is full: the bytes were not queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueFull;

impl std::fmt::Display for QueueFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("connection write queue full")
    }
}

impl std::error::Error for QueueFull {}

const READ_CHUNK: usize = 16 * 1024;

/// A non-blocking TCP connection with a read buffer and a bounded write queue.
#[derive(Debug)]
pub struct TcpConn {
    stream: mio::net::TcpStream,
    peer: SocketAddr,
    limits: ConnLimits,
    rbuf: Vec<u8>,
    rstart: usize,
    queue: VecDeque<Vec<u8>>,
    front_written: usize,
    queued: usize,
    connecting: bool,
    /// Reads ask for kernel receive times.
    stamped: bool,
}

impl TcpConn {
    fn new(
        stream: mio::net::TcpStream,
        peer: SocketAddr,
        limits: ConnLimits,
        connecting: bool,
        stamped: bool,
    ) -> Self {
        Self {
            stream,
            peer,
            limits,
            rbuf: Vec::new(),
            rstart: 0,
            queue: VecDeque::new(),
            front_written: 0,
            queued: 0,
            connecting,
            stamped,
        }
    }

    /// Starts a non-blocking connect to `addr`; the connection is usable once it reports
    /// writable (see [`finish_connect`](Self::finish_connect)). Bytes may be queued before.
    pub fn connect(addr: SocketAddr, opts: &TcpOptions, limits: ConnLimits) -> io::Result<Self> {
        let stream = mio::net::TcpStream::connect(addr)?;
        // Options that fail before the connection is established are retried never: they are
        // optimisations, not requirements.
        let applied = apply_options(&stream, opts).is_ok();
        Ok(Self::new(
            stream,
            addr,
            limits,
            true,
            opts.timestamps && applied,
        ))
    }

    /// Whether a connect started by [`connect`](Self::connect) is still in progress.
    pub fn is_connecting(&self) -> bool {
        self.connecting
    }

    /// After a writable or error event on a connecting socket: `Ok(true)` once connected,
    /// `Ok(false)` if still in progress, an error if the connect failed.
    pub fn finish_connect(&mut self) -> io::Result<bool> {
        if !self.connecting {
            return Ok(true);
        }
        if let Some(e) = self.stream.take_error()? {
            return Err(e);
        }
        match self.stream.peer_addr() {
            Ok(_) => {
                self.connecting = false;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// The remote address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// The local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.stream.local_addr()
    }

    /// Reads until the socket would block, the peer closes, or the read buffer is full.
    pub fn read(&mut self) -> io::Result<ReadOutcome> {
        let mut out = ReadOutcome::default();
        if self.rstart > 0 && (self.rstart >= self.rbuf.len() / 2 || self.rstart >= READ_CHUNK) {
            self.rbuf.drain(..self.rstart);
            self.rstart = 0;
        }
        loop {
            let held = self.rbuf.len() - self.rstart;
            let room = self
                .limits
                .max_read_buffer
                .saturating_sub(held)
                .min(READ_CHUNK);
            if room == 0 {
                return Ok(out);
            }
            let len = self.rbuf.len();
            self.rbuf.resize(len + room, 0);
            let r = if self.stamped {
                crate::sys::recv_stamped(self.stream.as_raw_fd(), &mut self.rbuf[len..]).map(
                    |(n, ts)| {
                        out.rx_ns = ts.or(out.rx_ns);
                        n
                    },
                )
            } else {
                self.stream.read(&mut self.rbuf[len..])
            };
            match r {
                Ok(0) => {
                    self.rbuf.truncate(len);
                    out.eof = true;
                    return Ok(out);
                }
                Ok(n) => {
                    self.rbuf.truncate(len + n);
                    out.bytes += n;
                }
                Err(e) => {
                    self.rbuf.truncate(len);
                    match e.kind() {
                        io::ErrorKind::WouldBlock => {
                            out.drained = true;
                            return Ok(out);
                        }
                        io::ErrorKind::Interrupted => {}
                        _ => return Err(e),
                    }
                }
            }
        }
    }

    /// Bytes read and not consumed yet.
    pub fn buffered(&self) -> &[u8] {
        &self.rbuf[self.rstart..]
    }

    /// Drops the first `n` buffered bytes.
    pub fn consume(&mut self, n: usize) {
        self.rstart = (self.rstart + n).min(self.rbuf.len());
        if self.rstart == self.rbuf.len() {
            self.rbuf.clear();
            self.rstart = 0;
        }
    }

    /// Queues `bytes` for sending; refused (nothing queued) if the queue would exceed
    /// [`ConnLimits::max_queue_bytes`]. Call [`flush`](Self::flush) afterwards.
    pub fn enqueue(&mut self, bytes: &[u8]) -> Result<(), QueueFull> {
        if self.queued + bytes.len() > self.limits.max_queue_bytes {
            return Err(QueueFull);
        }
        self.queued += bytes.len();
        self.queue.push_back(bytes.to_vec());
        Ok(())
    }

    /// Writes queued bytes until the queue is empty or the socket would block; returns the
    /// bytes written. Does nothing while connecting.
    pub fn flush(&mut self) -> io::Result<usize> {
        let mut written = 0;
        if self.connecting {
            return Ok(0);
        }
        while let Some(front) = self.queue.front() {
            match self.stream.write(&front[self.front_written..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    written += n;
                    self.queued -= n;
                    self.front_written += n;
                    if self.front_written == front.len() {
                        self.queue.pop_front();
                        self.front_written = 0;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(written)
    }

    /// Bytes queued and not yet handed to the kernel.
    pub fn queued_bytes(&self) -> usize {
        self.queued
    }

    /// The queue's bound.
    pub fn max_queue_bytes(&self) -> usize {
        self.limits.max_queue_bytes
    }

    /// Bytes the kernel holds unsent or unacknowledged for this connection (`SIOCOUTQ`).
    pub fn unacked_bytes(&self) -> io::Result<usize> {
        siocoutq(&self.stream)
    }

    /// Bytes the kernel holds and has not sent yet for this connection (`SIOCOUTQNSD`): the
    /// backlog smart forwarding looks at (bytes in flight waiting for an ACK are not backlog).
    pub fn unsent_bytes(&self) -> io::Result<usize> {
        siocoutqnsd(&self.stream)
    }

    /// Closes both directions now (queued bytes are lost).
    pub fn shutdown(&self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

impl Source for TcpConn {
    fn register(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        self.stream.register(r, t, i)
    }
    fn reregister(&mut self, r: &Registry, t: Token, i: Interest) -> io::Result<()> {
        self.stream.reregister(r, t, i)
    }
    fn deregister(&mut self, r: &Registry) -> io::Result<()> {
        self.stream.deregister(r)
    }
}

/// Bytes in a TCP socket's send queue not sent yet (`SIOCOUTQNSD`; Linux; `Unsupported`
/// elsewhere): what the peer's closed window holds back.
pub fn siocoutqnsd<S: AsRawFd>(socket: &S) -> io::Result<usize> {
    crate::sys::siocoutqnsd(socket.as_raw_fd())
}

/// Bytes in a TCP socket's send queue not yet acknowledged by the peer (`SIOCOUTQ`; Linux;
/// `Unsupported` elsewhere). A growing value means the peer or the path is not keeping up.
pub fn siocoutq<S: AsRawFd>(socket: &S) -> io::Result<usize> {
    crate::sys::siocoutq(socket.as_raw_fd())
}
