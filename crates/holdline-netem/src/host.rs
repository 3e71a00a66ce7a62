//! Losses of the host, not of the link: packets the kernel dropped on the way into the
//! emulator (a TUN device's full transmit queue) or out of it (a receiver's full socket
//! buffer). A measurement of the link must count them apart, or a busy host reads as a
//! lossy link.

use crate::error::{NetemError, Result};
use crate::netns;

/// Kernel drop counters of one network namespace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostDrops {
    /// Packets the device dropped on transmit (for a TUN device: its queue to the emulator
    /// was full), `/proc/net/dev`.
    pub device_tx_dropped: u64,
    /// Packets the device dropped on receive, `/proc/net/dev`.
    pub device_rx_dropped: u64,
    /// UDP datagrams dropped at a full socket receive buffer (`Udp: RcvbufErrors`,
    /// `/proc/net/snmp`).
    pub udp_rcvbuf_errors: u64,
}

impl HostDrops {
    /// Reads the counters of namespace `ns` for device `device`.
    pub fn read(ns: &str, device: &str) -> Result<Self> {
        let device = device.to_owned();
        netns::run_in(ns, move || -> std::io::Result<Self> {
            // `thread-self`: the namespace of this thread, not of the process's first one.
            let dev = std::fs::read_to_string("/proc/thread-self/net/dev")?;
            let snmp = std::fs::read_to_string("/proc/thread-self/net/snmp")?;
            let (rx, tx) = device_drops(&dev, &device).unwrap_or((0, 0));
            Ok(Self {
                device_tx_dropped: tx,
                device_rx_dropped: rx,
                udp_rcvbuf_errors: snmp_field(&snmp, "Udp:", "RcvbufErrors").unwrap_or(0),
            })
        })?
        .map_err(|e| NetemError::io(format!("read the drop counters of namespace {ns}"), e))
    }

    /// All three counters summed.
    pub fn total(&self) -> u64 {
        self.device_drops() + self.udp_rcvbuf_errors
    }

    /// Drops at the device, on transmit and on receive.
    pub fn device_drops(&self) -> u64 {
        self.device_tx_dropped + self.device_rx_dropped
    }

    /// The counters of `self` and `other` added (two namespaces' together).
    pub fn plus(&self, other: &Self) -> Self {
        Self {
            device_tx_dropped: self.device_tx_dropped + other.device_tx_dropped,
            device_rx_dropped: self.device_rx_dropped + other.device_rx_dropped,
            udp_rcvbuf_errors: self.udp_rcvbuf_errors + other.udp_rcvbuf_errors,
        }
    }

    /// The counts between `earlier` and `self`.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            device_tx_dropped: self
                .device_tx_dropped
                .saturating_sub(earlier.device_tx_dropped),
            device_rx_dropped: self
                .device_rx_dropped
                .saturating_sub(earlier.device_rx_dropped),
            udp_rcvbuf_errors: self
                .udp_rcvbuf_errors
                .saturating_sub(earlier.udp_rcvbuf_errors),
        }
    }
}

/// `(rx dropped, tx dropped)` of `device` in the text of `/proc/net/dev`.
fn device_drops(text: &str, device: &str) -> Option<(u64, u64)> {
    text.lines().find_map(|line| {
        let (name, rest) = line.split_once(':')?;
        if name.trim() != device {
            return None;
        }
        let f: Vec<u64> = rest
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        // Receive: bytes packets errs drop fifo frame compressed multicast;
        // transmit: bytes packets errs drop ...
        Some((*f.get(3)?, *f.get(11)?))
    })
}

/// The value of `field` in the `prefix` table of `/proc/net/snmp` (a header line of names
/// followed by a line of values).
fn snmp_field(text: &str, prefix: &str, field: &str) -> Option<u64> {
    let mut lines = text.lines().filter(|l| l.starts_with(prefix));
    let names = lines.next()?;
    let values = lines.next()?;
    let i = names.split_whitespace().position(|n| n == field)?;
    values.split_whitespace().nth(i)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_device_and_udp_drop_columns() {
        let dev = "Inter-|   Receive                                                |  Transmit\n \
                   face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
                   lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0\n   \
                   nt0:  123456     789    0    5    0     0          0         0   654321     987    0   42    0     0       0          0\n";
        assert_eq!(device_drops(dev, "nt0"), Some((5, 42)));
        assert_eq!(device_drops(dev, "eth9"), None);
        let snmp = "Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors\n\
                    Udp: 4878 0 70 5000 70 0 0 0 0\n\
                    UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors\n\
                    UdpLite: 0 0 0 0 0 0 0 0 0\n";
        assert_eq!(snmp_field(snmp, "Udp:", "RcvbufErrors"), Some(70));
        assert_eq!(snmp_field(snmp, "Udp:", "Nope"), None);
        let a = HostDrops {
            device_tx_dropped: 3,
            device_rx_dropped: 0,
            udp_rcvbuf_errors: 10,
        };
        let b = HostDrops {
            device_tx_dropped: 5,
            device_rx_dropped: 1,
            udp_rcvbuf_errors: 70,
        };
        assert_eq!(b.since(&a).total(), 2 + 1 + 60);
        assert_eq!(a.plus(&b).device_drops(), 3 + 5 + 1);
        assert_eq!(a.plus(&b).total(), a.total() + b.total());
    }
}
