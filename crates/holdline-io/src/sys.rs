//! The `unsafe` system calls: batched datagrams (`recvmmsg`, `sendmmsg`), `SIOCOUTQ`, and
//! the reuseport steering program (`SO_ATTACH_REUSEPORT_CBPF`).
//! Everything else in the crate is safe code over these few functions.

use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;

/// Most datagrams one batched call moves (the arrays live on the stack).
pub(crate) const MAX_BATCH: usize = 32;

/// What the kernel reported for one received datagram.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecvMeta {
    pub(crate) len: usize,
    pub(crate) addr: Option<SocketAddr>,
    pub(crate) truncated: bool,
    /// The kernel's receive time (`SO_TIMESTAMPNS`, `CLOCK_REALTIME` nanoseconds since the
    /// Unix epoch), when the socket asked for it and the kernel gave it.
    pub(crate) rx_ns: Option<u64>,
}

/// Receives up to `min(meta.len(), MAX_BATCH, data.len() / slot)` datagrams with one
/// `recvmmsg(MSG_DONTWAIT)`; datagram `i` lands in `data[i * slot..(i + 1) * slot]`.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn recv_mmsg(
    fd: RawFd,
    data: &mut [u8],
    slot: usize,
    meta: &mut [RecvMeta],
) -> io::Result<usize> {
    use socket2::{SockAddr, SockAddrStorage};
    let n = meta.len().min(MAX_BATCH).min(data.len() / slot.max(1));
    if n == 0 || slot == 0 {
        return Ok(0);
    }
    let mut storages: [SockAddrStorage; MAX_BATCH] =
        std::array::from_fn(|_| SockAddrStorage::zeroed());
    // SAFETY: iovec is a plain C struct (pointer + length); all-zero is a valid value.
    let mut iovs: [libc::iovec; MAX_BATCH] = unsafe { std::mem::zeroed() };
    // SAFETY: mmsghdr is a plain C struct of integers and pointers; all-zero is valid (null
    // pointers with zero lengths).
    let mut hdrs: [libc::mmsghdr; MAX_BATCH] = unsafe { std::mem::zeroed() };
    // Room for one SCM_TIMESTAMPNS control message per datagram, 8-byte aligned.
    let mut controls = [[0u64; CONTROL_WORDS]; MAX_BATCH];
    for (i, chunk) in data.chunks_exact_mut(slot).take(n).enumerate() {
        iovs[i].iov_base = chunk.as_mut_ptr().cast();
        iovs[i].iov_len = slot;
        hdrs[i].msg_hdr.msg_name = (&raw mut storages[i]).cast();
        hdrs[i].msg_hdr.msg_namelen = storages[i].size_of();
        hdrs[i].msg_hdr.msg_iov = &raw mut iovs[i];
        hdrs[i].msg_hdr.msg_iovlen = 1;
        hdrs[i].msg_hdr.msg_control = controls[i].as_mut_ptr().cast();
        hdrs[i].msg_hdr.msg_controllen = CONTROL_WORDS * 8;
    }
    // SAFETY: `hdrs[..n]` point at `n` live iovecs, each covering a distinct `slot`-byte chunk
    // of `data`, at `n` live address storages and `n` live control buffers whose sizes are
    // given; all outlive the call.
    // The kernel writes at most those lengths. A null timeout is allowed.
    let got = unsafe {
        libc::recvmmsg(
            fd,
            hdrs.as_mut_ptr(),
            n as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    let got = got as usize;
    for i in 0..got {
        let h = &hdrs[i];
        // SAFETY: the kernel initialised `msg_namelen` bytes of `storages[i]`, which is a
        // sockaddr_storage-sized buffer; SockAddr only reads them as the family says.
        let addr = unsafe {
            SockAddr::new(
                std::mem::replace(&mut storages[i], SockAddrStorage::zeroed()),
                h.msg_hdr.msg_namelen,
            )
        };
        meta[i] = RecvMeta {
            len: (h.msg_len as usize).min(slot),
            addr: addr.as_socket(),
            truncated: h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
            rx_ns: rx_timestamp(&h.msg_hdr),
        };
    }
    Ok(got)
}

/// 8-byte words of control buffer per datagram: one `cmsghdr` (16 bytes) and a `timespec`
/// (16 bytes), with room to spare.
#[cfg(any(target_os = "linux", target_os = "android"))]
const CONTROL_WORDS: usize = 8;

/// The `SCM_TIMESTAMPNS` time in a received message's control data, as nanoseconds since
/// the Unix epoch.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn rx_timestamp(h: &libc::msghdr) -> Option<u64> {
    if h.msg_control.is_null() || h.msg_controllen == 0 {
        return None;
    }
    // SAFETY: `h` is a msghdr the kernel filled: `msg_control` points at our live control
    // buffer and `msg_controllen` is what the kernel wrote into it. CMSG_FIRSTHDR/NXTHDR stay
    // within those bounds; CMSG_DATA of a header whose level/type is SCM_TIMESTAMPNS holds a
    // timespec, read unaligned.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                let secs = u64::try_from(ts.tv_sec).ok()?;
                let nanos = u64::try_from(ts.tv_nsec).ok()?;
                return secs.checked_mul(1_000_000_000)?.checked_add(nanos);
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    None
}

/// Asks the kernel to stamp every received datagram with its receive time
/// (`SO_TIMESTAMPNS`).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn enable_rx_timestamps(fd: RawFd) -> io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a pointer to a live local.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            (&raw const on).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// One classic BPF instruction: `(code, jt, jf, k)` as in `struct sock_filter`.
pub(crate) type BpfInsn = (u16, u8, u8, u32);

/// Attaches a classic BPF program to the `SO_REUSEPORT` group of `fd`
/// (`SO_ATTACH_REUSEPORT_CBPF`): the kernel then runs it on every datagram for the group's
/// address and delivers the datagram to the socket whose index (order of binding) it returns.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn attach_reuseport_cbpf(fd: RawFd, program: &[BpfInsn]) -> io::Result<()> {
    let mut filter: Vec<libc::sock_filter> = program
        .iter()
        .map(|&(code, jt, jf, k)| libc::sock_filter { code, jt, jf, k })
        .collect();
    let len = libc::c_ushort::try_from(filter.len())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let prog = libc::sock_fprog {
        len,
        filter: filter.as_mut_ptr(),
    };
    // SAFETY: setsockopt reads one `sock_fprog` from a pointer to a live local, whose
    // `filter` points at `len` live `sock_filter`s; the kernel copies the program.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            (&raw const prog).cast(),
            size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `SO_ATTACH_REUSEPORT_CBPF` is Linux-only.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn attach_reuseport_cbpf(_fd: RawFd, _program: &[BpfInsn]) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// Receive timestamps are Linux-only here.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn enable_rx_timestamps(_fd: RawFd) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// Reads from a stream socket into `buf` with one `recvmsg(MSG_DONTWAIT)`; returns the
/// bytes read and, when the socket has `SO_TIMESTAMPNS` on, the kernel's receive time of the
/// newest segment the read took bytes from (`CLOCK_REALTIME` ns since the Unix epoch): every
/// byte read arrived at that time or before.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn recv_stamped(fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<u64>)> {
    let mut control = [0u64; CONTROL_WORDS];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is a plain C struct of integers and pointers; all-zero is valid.
    let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
    h.msg_iov = &raw mut iov;
    h.msg_iovlen = 1;
    h.msg_control = control.as_mut_ptr().cast();
    h.msg_controllen = CONTROL_WORDS * 8;
    // SAFETY: `h` points at one live iovec covering `buf` and at a live control buffer of the
    // given size; both outlive the call, and the kernel writes at most those lengths.
    let n = unsafe { libc::recvmsg(fd, &raw mut h, libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((n as usize, rx_timestamp(&h)))
}

/// Stamped stream reads are Linux-only here.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn recv_stamped(_fd: RawFd, _buf: &mut [u8]) -> io::Result<(usize, Option<u64>)> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// Sends `items` (destination, payload) with one `sendmmsg(MSG_DONTWAIT)`; returns how many
/// the kernel took (the first ones). An error means the first one failed.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn send_mmsg(fd: RawFd, items: &[(SocketAddr, &[u8])]) -> io::Result<usize> {
    use socket2::SockAddr;
    let n = items.len().min(MAX_BATCH);
    if n == 0 {
        return Ok(0);
    }
    let addrs: [Option<SockAddr>; MAX_BATCH] =
        std::array::from_fn(|i| items.get(i).map(|(a, _)| SockAddr::from(*a)));
    // SAFETY: see `recv_mmsg`: plain C structs, all-zero is valid.
    let mut iovs: [libc::iovec; MAX_BATCH] = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut hdrs: [libc::mmsghdr; MAX_BATCH] = unsafe { std::mem::zeroed() };
    for (i, (_, payload)) in items.iter().take(n).enumerate() {
        let Some(addr) = addrs[i].as_ref() else {
            continue;
        };
        iovs[i].iov_base = payload.as_ptr().cast_mut().cast();
        iovs[i].iov_len = payload.len();
        hdrs[i].msg_hdr.msg_name = addr.as_ptr().cast_mut().cast();
        hdrs[i].msg_hdr.msg_namelen = addr.len();
        hdrs[i].msg_hdr.msg_iov = &raw mut iovs[i];
        hdrs[i].msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: `hdrs[..n]` point at live iovecs over the callers' payloads (only read by
    // sendmmsg despite the `*mut` type) and at live socket addresses of the given lengths.
    let sent =
        unsafe { libc::sendmmsg(fd, hdrs.as_mut_ptr(), n as libc::c_uint, libc::MSG_DONTWAIT) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sent as usize)
}

/// Bytes queued in a TCP socket's send buffer that the peer has not acknowledged
/// (`ioctl(SIOCOUTQ)`, Linux).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn siocoutq(fd: RawFd) -> io::Result<usize> {
    let mut value: libc::c_int = 0;
    // SAFETY: TIOCOUTQ (== SIOCOUTQ) writes one c_int through the pointer, which points at a
    // live local.
    let rc = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &raw mut value) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(usize::try_from(value).unwrap_or(0))
}

/// Bytes in a TCP socket's send queue not sent yet (`ioctl(SIOCOUTQNSD)`, Linux): unlike
/// `SIOCOUTQ` it leaves out bytes sent and waiting for their acknowledgement, so it is not
/// inflated by delayed ACKs or a long round trip; it grows when the peer's window is closed.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn siocoutqnsd(fd: RawFd) -> io::Result<usize> {
    let mut value: libc::c_int = 0;
    // SAFETY: SIOCOUTQNSD writes one c_int through the pointer, which points at a live local.
    let rc = unsafe { libc::ioctl(fd, libc::SIOCOUTQNSD as _, &raw mut value) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(usize::try_from(value).unwrap_or(0))
}

/// The peer's advertised receive window, bytes (`getsockopt(TCP_INFO)`'s `tcpi_snd_wnd`,
/// Linux 5.4 and later; `Unsupported` on a kernel whose `tcp_info` is shorter).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn tcp_snd_wnd(fd: RawFd) -> io::Result<u32> {
    // SAFETY: tcp_info is plain data; all zeroes is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `info`, a live local of that size,
    // and the new length into `len`.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&raw mut info).cast(),
            &raw mut len,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let end = std::mem::offset_of!(libc::tcp_info, tcpi_snd_wnd) + size_of::<u32>();
    if (len as usize) < end {
        return Err(io::Error::from(io::ErrorKind::Unsupported));
    }
    Ok(info.tcpi_snd_wnd)
}

/// `TCP_INFO` is Linux-only here.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn tcp_snd_wnd(_fd: RawFd) -> io::Result<u32> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// CPU time the calling thread has used (`clock_gettime(CLOCK_THREAD_CPUTIME_ID)`).
#[cfg(unix)]
pub(crate) fn thread_cpu_time() -> io::Result<std::time::Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through the pointer, which points at a live
    // local.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &raw mut ts) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u32::try_from(ts.tv_nsec).unwrap_or(0).min(999_999_999);
    Ok(std::time::Duration::new(secs, nanos))
}

/// Thread CPU time is read with a Unix call.
#[cfg(not(unix))]
pub(crate) fn thread_cpu_time() -> io::Result<std::time::Duration> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// `SIOCOUTQNSD` is Linux-only.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn siocoutqnsd(_fd: RawFd) -> io::Result<usize> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// `SIOCOUTQ` is Linux-only.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn siocoutq(_fd: RawFd) -> io::Result<usize> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// Whether this platform has `recvmmsg`/`sendmmsg`.
pub(crate) const HAVE_MMSG: bool = cfg!(any(target_os = "linux", target_os = "android"));

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn recv_mmsg(_: RawFd, _: &mut [u8], _: usize, _: &mut [RecvMeta]) -> io::Result<usize> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn send_mmsg(_: RawFd, _: &[(SocketAddr, &[u8])]) -> io::Result<usize> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// Moves the calling thread to `SCHED_IDLE`: it runs only when no other thread of normal
/// priority wants its CPU (lowering one's own priority needs no privilege).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn set_thread_idle_priority() -> io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler reads one sched_param through the pointer, which points at
    // a live local; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &raw const param) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `SCHED_IDLE` is Linux-only.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn set_thread_idle_priority() -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}
