//! The emulator on real sockets in namespaces it creates: TCP crosses a delayed, lossy link
//! intact; UDP probes see the configured delay; a bottleneck's queue bound drops exactly the
//! packets that do not fit. Needs root (network namespaces, TUN); skipped with a note
//! otherwise.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use holdline_base::Duration as LinkDuration;
use holdline_netem::probe::{self, ProbeConfig};
use holdline_netem::{Clock, Emulator, EmulatorConfig, Topology, netns};
use holdline_netmodel::{LinkConfig, Loss, RateLimit};

fn skip() -> bool {
    if netns::is_root() {
        return false;
    }
    eprintln!("skipped: needs root (network namespaces and TUN devices)");
    true
}

fn config(link: LinkConfig) -> EmulatorConfig {
    EmulatorConfig {
        a_to_b: link,
        b_to_a: link,
        seed: 7,
    }
}

fn delayed(ms: u64) -> LinkConfig {
    LinkConfig {
        delay: LinkDuration::from_millis(ms),
        overhead_bytes: 0,
        ..LinkConfig::default()
    }
}

#[test]
fn tcp_crosses_a_delayed_lossy_link_intact() {
    if skip() {
        return;
    }
    let topo = Topology::create(&format!("hlt{}t", std::process::id())).expect("topology");
    let mut link = delayed(5);
    link.loss = Loss::Random(0.02);
    let emu = Emulator::start(&topo, &config(link), Clock::start()).expect("emulator");
    let server_addr = SocketAddr::from((topo.addr_b, 7001));
    let listener = netns::run_in(&topo.ns_b, move || TcpListener::bind(server_addr))
        .expect("enter b")
        .expect("bind");
    // 1 MiB of a pattern that no lost or reordered segment could leave unchanged.
    let data: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let expected = data.clone();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let mut got = Vec::new();
        s.read_to_end(&mut got).expect("read");
        got
    });
    let connect_took = netns::run_in(&topo.ns_a, move || {
        let t = std::time::Instant::now();
        let mut c = TcpStream::connect_timeout(&server_addr, Duration::from_secs(10))
            .expect("connect through the emulator");
        let took = t.elapsed();
        c.write_all(&data).expect("write");
        took
    })
    .expect("enter a");
    let got = server.join().expect("server");
    let (ab, ba) = emu.stop();
    assert_eq!(got.len(), expected.len(), "bytes received");
    assert!(got == expected, "the stream arrived changed");
    // SYN and SYN-ACK each cross a 5 ms link: no connection can be faster than 10 ms.
    assert!(
        connect_took >= Duration::from_millis(10),
        "connect took {connect_took:?}: the delay was not applied"
    );
    assert!(ab.lost > 0, "2% loss over {} packets lost none", ab.offered);
    assert!(ab.delivered + ab.lost == ab.offered, "a->b: {ab:?}");
    assert!(ba.delivered > 0, "no ACKs came back: {ba:?}");
}

#[test]
fn probes_see_the_delay_and_every_probe_is_accounted_for() {
    if skip() {
        return;
    }
    let topo = Topology::create(&format!("hlt{}p", std::process::id())).expect("topology");
    let clock = Clock::start();
    let emu = Emulator::start(&topo, &config(delayed(10)), clock).expect("emulator");
    let report = probe::measure(
        &topo,
        &ProbeConfig {
            rate: 1_000.0,
            count: 300,
            size: 200,
            drain: Duration::from_millis(300),
        },
        clock,
    )
    .expect("measure");
    let (ab, _) = emu.stop();
    assert_eq!(report.sent, 300);
    assert_eq!(
        report.received, 300,
        "nothing may be lost on a lossless link"
    );
    assert_eq!(ab.delivered, 300, "{ab:?}");
    // No probe can arrive before its delay; the median within a few ms of it.
    assert!(
        report.quantile_ms(0.0) >= 10.0,
        "min {} ms",
        report.quantile_ms(0.0)
    );
    assert!(
        report.quantile_ms(0.5) < 15.0,
        "median {} ms",
        report.quantile_ms(0.5)
    );
    assert_eq!(report.reordered, 0);
}

#[test]
fn a_bottleneck_drops_what_its_queue_cannot_hold() {
    if skip() {
        return;
    }
    let topo = Topology::create(&format!("hlt{}q", std::process::id())).expect("topology");
    let mut link = delayed(1);
    let mut rate = RateLimit::new(1_000_000, 1_000_000);
    rate.queue_packets = Some(5);
    link.rate = Some(rate);
    let clock = Clock::start();
    let emu = Emulator::start(&topo, &config(link), clock).expect("emulator");
    // 200 probes of 500 B at 20,000/s (80 Mbit/s) into a 1 Mbit/s bottleneck (4.2 ms per
    // probe): the queue of 5 overflows.
    let report = probe::measure(
        &topo,
        &ProbeConfig {
            rate: 20_000.0,
            count: 200,
            size: 500,
            drain: Duration::from_millis(1_500),
        },
        clock,
    )
    .expect("measure");
    let (ab, _) = emu.stop();
    assert_eq!(report.sent, 200);
    assert!(ab.queue_drops > 100, "{ab:?}");
    assert_eq!(
        report.received + ab.queue_drops,
        report.sent,
        "every probe either crossed or was dropped at the queue: {ab:?}"
    );
    // Those that crossed left at the bottleneck's rate: 528 B at 1 Mbit/s.
    let kbit = report.received_bps(500) / 1e3;
    assert!((900.0..1_100.0).contains(&kbit), "{kbit} kbit/s");
}

#[test]
fn competing_tcp_and_web_traffic_fill_the_bottleneck_queue() {
    use holdline_netem::traffic::{Traffic, TrafficConfig};
    use holdline_netmodel::QueueDrop;
    if skip() {
        return;
    }
    let topo = Topology::create(&format!("hlt{}c", std::process::id())).expect("topology");
    let mut link = delayed(5);
    let mut rate = RateLimit::new(10_000_000, 10_000_000);
    rate.queue_packets = Some(20);
    rate.drop = QueueDrop::Derivative {
        min_packets: 10,
        max_packets: 20,
        max_probability: 0.95,
    };
    link.rate = Some(rate);
    let started = std::time::Instant::now();
    let emu = Emulator::start(&topo, &config(link), Clock::start()).expect("emulator");
    let traffic = Traffic::start(
        &topo,
        &TrafficConfig {
            long_lived: 2,
            web_sessions_per_s: 4.0,
            web_downloads: 2,
            web_think: Duration::from_millis(200),
            ..TrafficConfig::default()
        },
    )
    .expect("traffic");
    // Bounded wait for enough traffic to have crossed (about 2 s at 10 Mbit/s).
    let deadline = started + Duration::from_secs(30);
    loop {
        let s = traffic.stats();
        if s.bulk_bytes >= 2_000_000 && s.web_objects >= 3 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "traffic did not cross within 30 s: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // What crossed by now, and in how long (stopping the traffic takes up to a second more).
    let elapsed = started.elapsed().as_secs_f64();
    let (crossed, _) = emu.stats();
    let t = traffic.stop();
    let (ab, _) = emu.stop();
    assert_eq!(t.bulk_connections, 2, "{t:?}");
    // TCP pushes past the bottleneck's rate: the queue overflows and DRD drops early.
    assert!(ab.queue_drops + ab.random_drops > 0, "{ab:?}");
    assert!(ab.random_drops > 0, "DRD never dropped: {ab:?}");
    // Nothing crosses faster than the bottleneck (10 Mbit/s), whatever TCP does.
    let bps = crossed.delivered_bytes as f64 * 8.0 / elapsed;
    assert!(
        bps <= 10_000_000.0 * 1.02,
        "{bps} bit/s through a 10 Mbit/s link"
    );
}
