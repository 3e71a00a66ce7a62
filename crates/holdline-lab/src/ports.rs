//! Ports for the processes a lab run or a test starts, picked outside the kernel's ephemeral
//! range.
//!
//! Binding port 0 returns an ephemeral port, and that is the range every connecting TCP
//! socket and every unbound UDP sender of the machine draws from: between the pick and the
//! child's `bind`, another process of the run (a load generator opening connections, a test
//! running in parallel) can take it, and the child fails with "Address already in use". A
//! port below `net.ipv4.ip_local_port_range` is never handed out implicitly, so only another
//! explicit picker could take it; the start point is spread by process id, time and a
//! counter so that parallel pickers do not walk the same ports, and a process never hands
//! out the same port twice (two tests of one test binary, running in parallel, would
//! otherwise both get a port that is still free when each checks it).

use std::collections::HashSet;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

/// Lowest port handed out.
const FIRST: u16 = 10_000;
/// Picks made by this process (spreads consecutive picks).
static PICKS: AtomicU32 = AtomicU32::new(0);
/// Ports this process has handed out; none is handed out again.
static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// The kernel's ephemeral port range, `(low, high)`; Linux's default when it cannot be read.
fn ephemeral_range() -> (u16, u16) {
    let text =
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let mut it = text
        .split_whitespace()
        .filter_map(|s| s.parse::<u16>().ok());
    match (it.next(), it.next()) {
        (Some(lo), Some(hi)) if lo <= hi => (lo, hi),
        _ => (32_768, 60_999),
    }
}

/// The candidate ports: `[FIRST, low)` of the ephemeral range, or above `high` when the range
/// starts too low to leave room below it.
fn candidates() -> (u16, u16) {
    let (lo, hi) = ephemeral_range();
    if lo > FIRST + 1_000 {
        (FIRST, lo)
    } else if hi < u16::MAX - 1_000 {
        (hi + 1, u16::MAX)
    } else {
        (FIRST, u16::MAX)
    }
}

/// Whether `port` on 127.0.0.1 is free for UDP and for TCP right now.
///
/// The TCP check binds and listens *without* `SO_REUSEADDR` (std's `TcpListener::bind` sets
/// it): with it, a port whose earlier connections linger (TIME_WAIT, or still established
/// from a stopped step's server) looks free, and a server that then listens there fails with
/// "Address already in use" (Kamailio did, in `holdline bench`).
fn free(port: u16) -> bool {
    UdpSocket::bind(("127.0.0.1", port)).is_ok() && tcp_free(port)
}

fn tcp_free(port: u16) -> bool {
    use socket2::{Domain, Socket, Type};
    let Ok(s) = Socket::new(Domain::IPV4, Type::STREAM, None) else {
        return false;
    };
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    s.bind(&addr.into()).is_ok() && s.listen(1).is_ok()
}

/// A port free for UDP and TCP on 127.0.0.1, outside the ephemeral range; `None` when none is
/// found in 1,000 tries.
pub fn free_port() -> Option<u16> {
    let (first, end) = candidates();
    let span = u32::from(end - first);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let seed = std::process::id()
        .wrapping_mul(2_654_435_761)
        .wrapping_add(nanos)
        .wrapping_add(PICKS.fetch_add(1, Ordering::Relaxed).wrapping_mul(7_919));
    (0..1_000u32)
        .map(|i| first + ((seed.wrapping_add(i.wrapping_mul(104_729))) % span) as u16)
        .find(|&p| {
            let mut handed = HANDED_OUT.lock().unwrap_or_else(PoisonError::into_inner);
            let handed = handed.get_or_insert_with(HashSet::new);
            // Reserved before the check so that a parallel pick skips it meanwhile.
            if !handed.insert(p) {
                return false;
            }
            free(p) || {
                handed.remove(&p);
                false
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn picks_free_ports_outside_the_ephemeral_range() {
        let (lo, hi) = ephemeral_range();
        let mut seen = HashSet::new();
        for _ in 0..50 {
            let p = free_port().expect("a free port");
            assert!(!(lo..=hi).contains(&p), "{p} is ephemeral ({lo}-{hi})");
            // Bindable for both transports right after the pick.
            let _u = UdpSocket::bind(("127.0.0.1", p)).expect("udp");
            let _t = TcpListener::bind(("127.0.0.1", p)).expect("tcp");
            seen.insert(p);
        }
        assert_eq!(seen.len(), 50, "a port was handed out twice");
    }

    #[test]
    fn skips_a_port_in_use() {
        let p = free_port().expect("a free port");
        let _hold = TcpListener::bind(("127.0.0.1", p)).expect("tcp");
        assert!(!free(p));
        // Not skipped merely as handed out: the check itself must refuse it.
        if let Some(h) = HANDED_OUT
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
        {
            h.remove(&p);
        }
        for _ in 0..200 {
            assert_ne!(free_port(), Some(p));
        }
    }

    #[test]
    fn a_port_with_a_lingering_connection_is_not_free() {
        // A listener on p, a connection to it, then the listener closed: the accepted
        // connection still holds local port p (as a stopped step's server leaves it), and a
        // server listening there would fail although std's bind (SO_REUSEADDR) succeeds.
        let p = free_port().expect("a free port");
        let l = TcpListener::bind(("127.0.0.1", p)).expect("tcp");
        let _c = TcpStream::connect(("127.0.0.1", p)).expect("connect");
        let (_accepted, _) = l.accept().expect("accept");
        drop(l);
        assert!(
            TcpListener::bind(("127.0.0.1", p)).is_ok(),
            "std's check passes"
        );
        assert!(!free(p), "ours does not");
    }
}
