//! A TUN device (`IFF_TUN | IFF_NO_PI`): every `read` returns one IP packet the kernel
//! routed into the device, every `write` hands one IP packet to the kernel as if it had
//! arrived on the device.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::time::Duration;

/// `TUNSETIFF` from `<linux/if_tun.h>`: `_IOW('T', 202, int)`.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;

/// `struct ifreq` as far as `TUNSETIFF` reads it: the name and the flags, padded to the
/// kernel's 40 bytes.
#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// An open TUN device. It lives in the network namespace of the thread that created it,
/// whichever thread uses it afterwards.
#[derive(Debug)]
pub struct Tun {
    file: File,
    name: String,
}

impl Tun {
    /// Creates TUN device `name` (at most 15 bytes) in the calling thread's network
    /// namespace. The device is down and has no address.
    #[allow(unsafe_code)]
    pub fn create(name: &str) -> std::io::Result<Self> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains('\0') {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("TUN device name `{name}` must be 1 to 15 bytes"),
            ));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/net/tun")?;
        let mut req = IfReq {
            name: [0; libc::IFNAMSIZ],
            flags: (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short,
            _pad: [0; 22],
        };
        for (dst, &src) in req.name.iter_mut().zip(name.as_bytes()) {
            *dst = src as libc::c_char;
        }
        // SAFETY: TUNSETIFF reads a `struct ifreq` of 40 bytes; `req` is that size, lives
        // across the call, and the descriptor is an open /dev/net/tun.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF as _, &mut req) };
        if rc < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self {
            file,
            name: name.to_owned(),
        })
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Waits up to `timeout` for a packet; `Ok(None)` when none came.
    #[allow(unsafe_code)]
    pub fn recv(&self, buf: &mut [u8], timeout: Duration) -> std::io::Result<Option<usize>> {
        let mut pfd = libc::pollfd {
            fd: self.file.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
        // SAFETY: one valid pollfd for the duration of the call.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            return if e.kind() == std::io::ErrorKind::Interrupted {
                Ok(None)
            } else {
                Err(e)
            };
        }
        if rc == 0 {
            return Ok(None);
        }
        (&self.file).read(buf).map(Some)
    }

    /// Hands one IP packet to the kernel.
    pub fn send(&self, packet: &[u8]) -> std::io::Result<()> {
        (&self.file).write(packet).map(|_| ())
    }
}
