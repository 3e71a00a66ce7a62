//! TCP: listeners and non-blocking connections with a read buffer and a bounded write queue.
//!
//! A [`TcpConn`] knows nothing about SIP: the caller appends what [`TcpConn::read`] returns
//! to its framer by looking at [`TcpConn::buffered`] and calling [`TcpConn::consume`].
//! Writes go through [`TcpConn::enqueue`] (refused when the queue would exceed its bound) and
//! [`TcpConn::flush`] (writes until the socket would block).
//!
//! TLS ([`TcpConn::start_tls`]): a rustls session sits between the socket and the buffers,
//! driven sans-IO style: what is read from the socket goes to `read_tls` and
//! `process_new_packets`, the plaintext comes out of the session's reader into the read
//! buffer; what is enqueued goes into the session's writer and its records (`write_tls`) into
//! the write queue, so that the queue's bound, [`TcpConn::queued_bytes`] and the kernel's
//! counters ([`TcpConn::unsent_bytes`]) all count TLS records, as the wire carries them.
//! Plaintext enqueued before the handshake ends waits beside the queue (counted in it).

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
/// The most read-buffer capacity a connection keeps once everything it read was consumed
/// (see [`TcpConn::consume`]).
pub const IDLE_READ_BUFFER: usize = 4 * 1024;

/// The TLS layer of a connection.
struct Tls {
    session: rustls::Connection,
    /// Plaintext enqueued while the handshake runs, written into the session once it is
    /// over (counted in [`TcpConn::queued`]).
    early: VecDeque<Vec<u8>>,
    /// The handshake has completed.
    established: bool,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("established", &self.established)
            .field("early", &self.early.len())
            .finish_non_exhaustive()
    }
}

/// What the TLS session of a connection has done so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsState {
    /// The handshake is still running.
    Handshaking,
    /// The handshake has completed.
    Established,
}

/// A TLS failure (bad certificate, protocol error, alert from the peer): the error
/// [`TcpConn::read`] returns, wrapped in an [`io::Error`] of kind `InvalidData`.
pub fn tls_error(e: &io::Error) -> Option<&rustls::Error> {
    e.get_ref()?.downcast_ref::<rustls::Error>()
}

/// A reader over the socket for rustls's `read_tls`, with kernel receive times.
struct SocketReader<'a> {
    stream: &'a mio::net::TcpStream,
    stamped: bool,
    rx_ns: &'a mut Option<u64>,
}

impl Read for SocketReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.stamped {
            let (n, ts) = crate::sys::recv_stamped(self.stream.as_raw_fd(), buf)?;
            *self.rx_ns = ts.or(*self.rx_ns);
            Ok(n)
        } else {
            let mut s = self.stream;
            s.read(buf)
        }
    }
}

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
    /// The TLS session, when the connection carries TLS.
    tls: Option<Box<Tls>>,
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
            tls: None,
        }
    }

    /// Puts a TLS session (client or server side) on this connection, before anything was
    /// read or written: from now on reads yield plaintext and enqueued bytes leave as TLS
    /// records. A client session's first flight is queued at once (sent when connected).
    pub fn start_tls(&mut self, mut session: rustls::Connection) {
        // The write queue is the bound; the session holds nothing for long.
        session.set_buffer_limit(None);
        self.tls = Some(Box::new(Tls {
            session,
            early: VecDeque::new(),
            established: false,
        }));
        self.drain_tls();
    }

    /// Whether the connection carries TLS, and how far its handshake is.
    pub fn tls_state(&self) -> Option<TlsState> {
        self.tls.as_ref().map(|t| {
            if t.established {
                TlsState::Established
            } else {
                TlsState::Handshaking
            }
        })
    }

    /// The TLS session, if any (e.g. for the peer's certificates).
    pub fn tls_session(&self) -> Option<&rustls::Connection> {
        self.tls.as_ref().map(|t| &t.session)
    }

    /// Moves the session's pending records into the write queue.
    fn drain_tls(&mut self) {
        let Some(t) = self.tls.as_mut() else {
            return;
        };
        while t.session.wants_write() {
            let mut records = Vec::new();
            // Writing into a Vec cannot fail.
            if t.session.write_tls(&mut records).is_err() || records.is_empty() {
                break;
            }
            self.queued += records.len();
            self.queue.push_back(records);
        }
    }

    /// After the session processed new records: once the handshake is over, what waited for
    /// it goes into the session.
    fn after_tls_packets(&mut self) -> io::Result<()> {
        let Some(t) = self.tls.as_mut() else {
            return Ok(());
        };
        if !t.established && !t.session.is_handshaking() {
            t.established = true;
            while let Some(plain) = t.early.pop_front() {
                self.queued -= plain.len();
                t.session.writer().write_all(&plain)?;
            }
        }
        self.drain_tls();
        Ok(())
    }

    /// [`read`](Self::read) through the TLS session.
    fn read_tls(&mut self) -> io::Result<ReadOutcome> {
        let mut out = ReadOutcome::default();
        let result = self.read_tls_inner(&mut out);
        // Handshake messages, alerts and what waited for the handshake go out now (an
        // alert telling the peer why is sent even when the session failed).
        let after = self.after_tls_packets();
        let flushed = self.flush();
        result?;
        after?;
        flushed?;
        Ok(out)
    }

    fn read_tls_inner(&mut self, out: &mut ReadOutcome) -> io::Result<()> {
        let Some(t) = self.tls.as_mut() else {
            return Ok(());
        };
        loop {
            // Plaintext the session holds first, as far as the read buffer has room.
            loop {
                let held = self.rbuf.len() - self.rstart;
                let room = self
                    .limits
                    .max_read_buffer
                    .saturating_sub(held)
                    .min(READ_CHUNK);
                if room == 0 {
                    return Ok(());
                }
                let len = self.rbuf.len();
                self.rbuf.resize(len + room, 0);
                let r = t.session.reader().read(&mut self.rbuf[len..]);
                match r {
                    Ok(0) => {
                        // close_notify: a clean end.
                        self.rbuf.truncate(len);
                        out.eof = true;
                        return Ok(());
                    }
                    Ok(n) => {
                        self.rbuf.truncate(len + n);
                        out.bytes += n;
                    }
                    Err(e) => {
                        self.rbuf.truncate(len);
                        match e.kind() {
                            io::ErrorKind::WouldBlock => break,
                            io::ErrorKind::UnexpectedEof => {
                                out.eof = true;
                                return Ok(());
                            }
                            _ => return Err(e),
                        }
                    }
                }
            }
            let mut socket = SocketReader {
                stream: &self.stream,
                stamped: self.stamped,
                rx_ns: &mut out.rx_ns,
            };
            match t.session.read_tls(&mut socket) {
                Ok(0) => {
                    out.eof = true;
                    return Ok(());
                }
                Ok(_) => {
                    if let Err(e) = t.session.process_new_packets() {
                        return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                    }
                }
                Err(e) => match e.kind() {
                    io::ErrorKind::WouldBlock => {
                        out.drained = true;
                        return Ok(());
                    }
                    io::ErrorKind::Interrupted => {}
                    _ => return Err(e),
                },
            }
        }
    }

    /// Starts a non-blocking connect to `addr`; the connection is usable once it reports
    /// writable (see [`finish_connect`](Self::finish_connect)). Bytes may be queued before.
    pub fn connect(addr: SocketAddr, opts: &TcpOptions, limits: ConnLimits) -> io::Result<Self> {
        let stream = mio::net::TcpStream::connect(addr)?;
        Ok(Self::connecting(stream, addr, opts, limits))
    }

    /// A connection whose connect to `addr` is in progress on `stream`.
    fn connecting(
        stream: mio::net::TcpStream,
        addr: SocketAddr,
        opts: &TcpOptions,
        limits: ConnLimits,
    ) -> Self {
        // Options that fail before the connection is established are retried never: they are
        // optimisations, not requirements.
        let applied = apply_options(&stream, opts).is_ok();
        Self::new(stream, addr, limits, true, opts.timestamps && applied)
    }

    /// [`connect`](Self::connect) from `local` (an address of this host, port 0 for any):
    /// many connections to one server need several source addresses (each has one
    /// ephemeral port range).
    pub fn connect_from(
        local: SocketAddr,
        addr: SocketAddr,
        opts: &TcpOptions,
        limits: ConnLimits,
    ) -> io::Result<Self> {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        socket.set_nonblocking(true)?;
        socket.bind(&local.into())?;
        match socket.connect(&addr.into()) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) => return Err(e),
        }
        let stream = mio::net::TcpStream::from_std(socket.into());
        Ok(Self::connecting(stream, addr, opts, limits))
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
    ///
    /// With TLS: the bytes appended are plaintext; a TLS failure is an error of kind
    /// `InvalidData` carrying the [`rustls::Error`] ([`tls_error`]).
    pub fn read(&mut self) -> io::Result<ReadOutcome> {
        self.read_some(false)
    }

    /// One `recv` only (with TLS: as [`read`](Self::read)): what the kernel holds now, up to
    /// the read buffer's room. `drained` is set only when that one call would block. A
    /// server that reads on demand (seed 000's small application buffer) reads this way,
    /// so that its read-ahead is bounded by the socket's receive buffer and not by the
    /// read buffer: bytes that stay in the kernel hold the sender's window closed.
    pub fn read_once(&mut self) -> io::Result<ReadOutcome> {
        self.read_some(true)
    }

    fn read_some(&mut self, once: bool) -> io::Result<ReadOutcome> {
        if self.tls.is_some() {
            return self.read_tls();
        }
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
                    if once {
                        return Ok(out);
                    }
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

    /// The read buffer's capacity, bytes: memory the connection holds for reading.
    pub fn read_buffer_capacity(&self) -> usize {
        self.rbuf.capacity()
    }

    /// Bytes read and not consumed yet.
    pub fn buffered(&self) -> &[u8] {
        &self.rbuf[self.rstart..]
    }

    /// Drops the first `n` buffered bytes. Once nothing is left, a read buffer grown past
    /// [`IDLE_READ_BUFFER`] is released: an idle connection (a phone between two
    /// registrations) holds no read buffer, a busy one allocates one per read that leaves
    /// nothing behind.
    pub fn consume(&mut self, n: usize) {
        self.rstart = (self.rstart + n).min(self.rbuf.len());
        if self.rstart == self.rbuf.len() {
            self.rstart = 0;
            if self.rbuf.capacity() > IDLE_READ_BUFFER {
                self.rbuf = Vec::new();
            } else {
                self.rbuf.clear();
            }
        }
    }

    /// Queues `bytes` for sending; refused (nothing queued) if the queue would exceed
    /// [`ConnLimits::max_queue_bytes`]. Call [`flush`](Self::flush) afterwards.
    pub fn enqueue(&mut self, bytes: &[u8]) -> Result<(), QueueFull> {
        if self.queued + bytes.len() > self.limits.max_queue_bytes {
            return Err(QueueFull);
        }
        if let Some(t) = self.tls.as_mut() {
            if !t.established {
                self.queued += bytes.len();
                t.early.push_back(bytes.to_vec());
                return Ok(());
            }
            // The session's buffer is unbounded (the queue is the bound): this cannot fail.
            if t.session.writer().write_all(bytes).is_err() {
                return Err(QueueFull);
            }
            self.drain_tls();
            return Ok(());
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

    /// Bytes queued and not yet handed to the kernel (with TLS: records, and the plaintext
    /// waiting for the handshake).
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

    /// The unsent bytes the *peer* holds back: [`unsent_bytes`](Self::unsent_bytes) when
    /// the peer's advertised window (`tcpi_snd_wnd`) is smaller than what the socket holds
    /// (`SIOCOUTQ`: unsent and unacknowledged), 0 when the window has room for all of it —
    /// then the sender's own congestion window holds the bytes back (slow start, a long
    /// round trip, BBR's ProbeRTT), which says nothing of the peer's load. Where the window
    /// cannot be read (kernels before 5.4, other systems), the unsent bytes as they are.
    pub fn peer_held_bytes(&self) -> io::Result<usize> {
        let unsent = siocoutqnsd(&self.stream)?;
        if unsent == 0 {
            return Ok(0);
        }
        match crate::sys::tcp_snd_wnd(self.stream.as_raw_fd()) {
            Ok(window) => {
                let held = siocoutq(&self.stream)?;
                Ok(if window as usize >= held { 0 } else { unsent })
            }
            Err(_) => Ok(unsent),
        }
    }

    /// The peer's advertised receive window, bytes (`TCP_INFO`'s `tcpi_snd_wnd`; Linux 5.4
    /// and later).
    pub fn peer_window(&self) -> io::Result<u32> {
        crate::sys::tcp_snd_wnd(self.stream.as_raw_fd())
    }

    /// Closes both directions now (queued bytes are lost). With TLS, a `close_notify` alert
    /// is offered to the socket first (never waited for).
    pub fn shutdown(&mut self) {
        if let Some(t) = self.tls.as_mut()
            && t.established
        {
            t.session.send_close_notify();
            let mut records = Vec::new();
            while t.session.wants_write() && t.session.write_tls(&mut records).is_ok() {}
            let mut s = &self.stream;
            let _ = s.write(&records);
        }
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
