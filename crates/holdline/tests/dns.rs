//! RFC 3263 next hops against a real authoritative DNS server (issue 18 item 1): each test
//! starts hickory's server in this process on `127.0.0.1:0` (UDP) with an in-memory zone
//! whose records it changes while `holdline serve` runs, and checks what the issue's "Done
//! when" asks of DNS:
//!
//! - calls fail over to the SRV backup within their transaction when the primary does not
//!   answer (a bound UDP socket that never replies), with two workers each resolving and
//!   caching on its own;
//! - a lookup that failed once succeeds as soon as the name resolves again (a short,
//!   bounded negative cache; Kamailio#4911's poisoning does not happen);
//! - a slow DNS server delays only the requests waiting for its name: calls to other names
//!   and to IP next hops keep flowing on the same (single) worker.
//!
//! Every process and the DNS server are started here, bounded, and stopped when the test
//! ends.

mod common;

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{
    Guard, Holdline, SipClient, free_port, load, metric, run_load_report, scrape, status_code,
};
use hickory_server::Server;
use hickory_server::net::runtime::TokioRuntimeProvider;
use hickory_server::proto::rr::rdata::{A, NAPTR, SOA, SRV};
use hickory_server::proto::rr::{LowerName, Name, RData, Record};
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::store::in_memory::InMemoryZoneHandler;
use hickory_server::zone_handler::{AxfrPolicy, Catalog, ZoneHandler, ZoneType};

/// The test zone.
const ORIGIN: &str = "example.test.";

/// A name server for [`ORIGIN`] on `127.0.0.1:0` (UDP), on a runtime of its own; records
/// can be added while it runs. Queries for `slow` names wait `delay` before being answered.
struct DnsServer {
    addr: SocketAddr,
    zone: Arc<InMemoryZoneHandler<TokioRuntimeProvider>>,
    serial: u32,
    server: Option<Server<SlowCatalog>>,
    runtime: tokio::runtime::Runtime,
}

/// The catalog, with answers for some names held back.
struct SlowCatalog {
    catalog: Catalog,
    slow: Vec<LowerName>,
    delay: Duration,
}

#[async_trait::async_trait]
impl RequestHandler for SlowCatalog {
    async fn handle_request<R: ResponseHandler, T: hickory_server::net::runtime::Time>(
        &self,
        request: &Request,
        response_handle: R,
    ) -> ResponseInfo {
        let slow = request
            .request_info()
            .is_ok_and(|i| self.slow.contains(i.query.name()));
        if slow {
            tokio::time::sleep(self.delay).await;
        }
        self.catalog
            .handle_request::<R, T>(request, response_handle)
            .await
    }
}

fn name(s: &str) -> Name {
    Name::from_ascii(s).expect("a domain name")
}

impl DnsServer {
    /// Starts it with an SOA (negative TTL 1 s) and no other record.
    fn start(slow: &[&str], delay: Duration) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let origin = name(ORIGIN);
        let zone = Arc::new(InMemoryZoneHandler::<TokioRuntimeProvider>::empty(
            origin.clone(),
            ZoneType::Primary,
            AxfrPolicy::Deny,
        ));
        let soa = SOA::new(
            name(&format!("ns.{ORIGIN}")),
            name(&format!("admin.{ORIGIN}")),
            1,
            3600,
            600,
            86_400,
            1,
        );
        let (server, addr) = runtime.block_on(async {
            assert!(
                zone.upsert(Record::from_rdata(origin.clone(), 60, RData::SOA(soa)), 1)
                    .await,
                "SOA added"
            );
            let mut catalog = Catalog::new();
            catalog.upsert(
                LowerName::new(&origin),
                vec![zone.clone() as Arc<dyn ZoneHandler>],
            );
            let handler = SlowCatalog {
                catalog,
                slow: slow.iter().map(|s| LowerName::new(&name(s))).collect(),
                delay,
            };
            let socket = tokio::net::UdpSocket::bind("127.0.0.1:0")
                .await
                .expect("bind dns");
            let addr = socket.local_addr().expect("dns addr");
            let mut server = Server::new(handler);
            server.register_socket(socket);
            (server, addr)
        });
        Self {
            addr,
            zone,
            serial: 1,
            server: Some(server),
            runtime,
        }
    }

    fn add(&mut self, owner: &str, ttl: u32, data: RData) {
        self.serial += 1;
        let record = Record::from_rdata(name(owner), ttl, data);
        let added = self.runtime.block_on(self.zone.upsert(record, self.serial));
        assert!(added, "{owner} added");
    }

    fn add_a(&mut self, owner: &str) {
        self.add(owner, 60, RData::A(A(Ipv4Addr::LOCALHOST)));
    }

    fn add_srv(&mut self, owner: &str, priority: u16, port: u16, target: &str) {
        self.add(
            owner,
            60,
            RData::SRV(SRV::new(priority, 1, port, name(target))),
        );
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        if let Some(mut s) = self.server.take() {
            let _ = self.runtime.block_on(s.shutdown_gracefully());
        }
    }
}

/// `holdline serve` with `[dns]` pointing at `dns` (and `dns_extra` settings), `workers`
/// workers, T1 = 50 ms (Timer B 3.2 s), and `routes`.
fn serve(
    dir: &std::path::Path,
    workers: usize,
    dns: SocketAddr,
    dns_extra: &str,
    routes: &str,
) -> (Holdline, u16, SocketAddr) {
    let (port, metrics) = (free_port(), free_port());
    let conf = dir.join("dns.toml");
    std::fs::write(
        &conf,
        format!("[timers]\nt1_ms = 50\n[dns]\nservers = [\"{dns}\"]\n{dns_extra}{routes}"),
    )
    .expect("config");
    let h = Holdline::start(&[
        format!("--config={}", conf.display()),
        format!("--listen=udp:127.0.0.1:{port}"),
        format!("--metrics=127.0.0.1:{metrics}"),
        "--store=memory".into(),
        format!("--workers={workers}"),
    ]);
    (h, port, SocketAddr::from(([127, 0, 0, 1], metrics)))
}

/// A UAS answering every INVITE with 200 on `port`.
fn uas(port: u16) -> Guard {
    let g = load(&[
        "uas".to_owned(),
        "--progress=off".to_owned(),
        "--max-time=60".to_owned(),
        format!("--listen=127.0.0.1:{port}"),
    ]);
    common::wait_udp_bound(port, Duration::from_secs(10));
    g
}

#[test]
fn calls_fail_over_to_the_srv_backup_within_their_transaction() {
    let _one_run_at_a_time = common::sipp_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    // The primary: a socket that takes INVITEs and never answers.
    let dead = UdpSocket::bind("127.0.0.1:0").expect("bind the dead primary");
    dead.set_nonblocking(true).expect("nonblocking");
    let dead_port = dead.local_addr().expect("addr").port();
    let backup = free_port();
    let _uas = uas(backup);
    let mut dns = DnsServer::start(&[], Duration::ZERO);
    // NAPTR → SRV (primary priority 10, backup priority 20) → A.
    dns.add(
        &format!("svc.{ORIGIN}"),
        60,
        RData::NAPTR(NAPTR::new(
            10,
            10,
            b"s".to_vec().into_boxed_slice(),
            b"SIP+D2U".to_vec().into_boxed_slice(),
            Vec::new().into_boxed_slice(),
            name(&format!("_sip._udp.svc.{ORIGIN}")),
        )),
    );
    dns.add_srv(
        &format!("_sip._udp.svc.{ORIGIN}"),
        10,
        dead_port,
        &format!("primary.{ORIGIN}"),
    );
    dns.add_srv(
        &format!("_sip._udp.svc.{ORIGIN}"),
        20,
        backup,
        &format!("backup.{ORIGIN}"),
    );
    dns.add_a(&format!("primary.{ORIGIN}"));
    dns.add_a(&format!("backup.{ORIGIN}"));
    let (_server, port, metrics) = serve(
        dir.path(),
        2,
        dns.addr,
        "",
        "[[routes]]\ndomain = \"example.net\"\ntarget = \"sip:svc.example.test\"\n",
    );
    let json = dir.path().join("uac.json");
    let v = run_load_report(
        &[
            "uac".to_owned(),
            "--progress=off".to_owned(),
            "--rate=20".to_owned(),
            "--calls=120".to_owned(),
            "--drain=10".to_owned(),
            "--max-time=30".to_owned(),
            format!("--target=127.0.0.1:{port}"),
            "--to=u{0..99}@example.net".to_owned(),
            format!("--json={}", json.display()),
        ],
        &json,
        Duration::from_secs(40),
    );
    assert_eq!(v["calls_attempted"], 120, "{v}");
    assert_eq!(v["calls_completed"], 120, "every call completes: {v}");
    // The primary got INVITEs (it was tried first) and none was answered by it: the calls
    // sent there completed through a failover branch of their own transaction.
    let mut buf = [0u8; 65_535];
    let mut to_primary = 0;
    while let Ok(n) = dead.recv(&mut buf) {
        if buf[..n].starts_with(b"INVITE ") {
            to_primary += 1;
        }
    }
    assert!(to_primary >= 1, "the primary was tried");
    let text = scrape(metrics);
    let failovers = metric(&text, "holdline_sip_failovers_total", &[]);
    assert!(failovers >= 1.0, "{text}");
    // The calls placed before the first one's Timer B (3.2 s at 20 calls/s: about 64) went
    // to the primary and failed over; once the primary was marked failed, the later ones
    // (about 56) went to the backup first.
    assert!(failovers <= 90.0, "failovers {failovers}");
    eprintln!(
        "120 calls completed; INVITEs to the dead primary {to_primary}, failovers {failovers}"
    );
    assert!(metric(&text, "holdline_dns_targets_failed_total", &[]) >= 1.0);
    assert!(metric(&text, "holdline_dns_cache_hits_total", &[]) >= 1.0);
    assert_eq!(
        metric(
            &text,
            "holdline_dns_rejected_total",
            &["reason=\"unresolved\""]
        ),
        0.0
    );
}

#[test]
fn a_name_that_failed_resolves_as_soon_as_its_records_exist() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = free_port();
    let _uas = uas(target);
    let mut dns = DnsServer::start(&[], Duration::ZERO);
    let (_server, port, metrics) = serve(
        dir.path(),
        1,
        dns.addr,
        "",
        "[[routes]]\ndomain = \"example.org\"\ntarget = \"sip:late.example.test\"\n",
    );
    let proxy = SocketAddr::from(([127, 0, 0, 1], port));
    let mut client = SipClient::new(proxy);
    // No record yet: answered 503 at once (not after a timeout).
    let t0 = Instant::now();
    let resp = client.invite("sip:alice@example.org");
    let failed_at = Instant::now();
    assert_eq!(status_code(&resp), 503, "{resp}");
    assert!(
        failed_at - t0 < Duration::from_secs(2),
        "{:?}",
        failed_at - t0
    );
    // The records appear.
    dns.add_srv(
        &format!("_sip._udp.late.{ORIGIN}"),
        0,
        target,
        &format!("host.{ORIGIN}"),
    );
    dns.add_a(&format!("host.{ORIGIN}"));
    // Calls placed one after another: the failure is kept at most negative_ttl_ms (1 s by
    // default), then the very next call goes through; none fails after that.
    let negative_ttl = Duration::from_secs(1);
    let deadline = failed_at + negative_ttl + Duration::from_secs(3);
    let succeeded_at = loop {
        let started = Instant::now();
        assert!(started < deadline, "no call went through");
        let resp = client.invite("sip:alice@example.org");
        match status_code(&resp) {
            200 => break started,
            503 => assert!(
                started < failed_at + negative_ttl,
                "a call placed {:?} after the failure still failed",
                started - failed_at
            ),
            other => panic!("unexpected {other}: {resp}"),
        }
    };
    assert!(succeeded_at - failed_at <= negative_ttl + Duration::from_millis(500));
    eprintln!(
        "503 after {:?}; first call through placed {:?} after the failure",
        failed_at - t0,
        succeeded_at - failed_at
    );
    for _ in 0..3 {
        assert_eq!(status_code(&client.invite("sip:alice@example.org")), 200);
    }
    let text = scrape(metrics);
    assert!(
        metric(
            &text,
            "holdline_dns_rejected_total",
            &["reason=\"unresolved\""]
        ) >= 1.0
    );
    assert!(
        metric(
            &text,
            "holdline_dns_answers_total",
            &["result=\"not_found\""]
        ) >= 1.0
    );
}

#[test]
fn a_slow_dns_server_delays_only_the_requests_waiting_for_its_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let target = free_port();
    let _uas = uas(target);
    let delay = Duration::from_secs(2);
    let mut dns = DnsServer::start(&[&format!("slow.{ORIGIN}")], delay);
    for svc in ["slow", "fast"] {
        dns.add_srv(
            &format!("_sip._udp.{svc}.{ORIGIN}"),
            0,
            target,
            &format!("host.{ORIGIN}"),
        );
    }
    dns.add_a(&format!("host.{ORIGIN}"));
    let (_server, port, metrics) = serve(
        dir.path(),
        1,
        dns.addr,
        "timeout_ms = 4000\nattempts = 1\n",
        &format!(
            "[[routes]]\ndomain = \"slow.net\"\ntarget = \"sip:slow.example.test\"\n\
             [[routes]]\ndomain = \"fast.net\"\ntarget = \"sip:fast.example.test\"\n\
             [[routes]]\ndomain = \"ip.net\"\ntarget = \"udp:127.0.0.1:{target}\"\n"
        ),
    );
    let proxy = SocketAddr::from(([127, 0, 0, 1], port));
    // A call to the slow name waits for its NAPTR answer (2 s), on a thread of its own.
    let slow = std::thread::spawn(move || {
        let mut client = SipClient::new(proxy);
        let t0 = Instant::now();
        let resp = client.invite("sip:bob@slow.net");
        (status_code(&resp), t0.elapsed())
    });
    common::wait_metrics(metrics, Duration::from_secs(5), |m| {
        metric(m, "holdline_dns_parked", &[]) >= 1.0
    });
    // Meanwhile calls to another name and to an IP next hop go through at once, on the one
    // worker that also holds the waiting call.
    let mut client = SipClient::new(proxy);
    let mut worst = Duration::ZERO;
    for uri in ["sip:carol@fast.net", "sip:dave@ip.net"]
        .iter()
        .cycle()
        .take(10)
    {
        let t0 = Instant::now();
        let resp = client.invite(uri);
        worst = worst.max(t0.elapsed());
        assert_eq!(status_code(&resp), 200, "{uri}: {resp}");
    }
    assert!(
        worst < Duration::from_millis(500),
        "a call waited {worst:?} behind the slow name"
    );
    let waiting = metric(&scrape(metrics), "holdline_dns_parked", &[]);
    assert_eq!(waiting, 1.0, "the slow call still waits");
    let (status, took) = slow.join().expect("slow caller");
    assert_eq!(status, 200);
    eprintln!("other calls: worst {worst:?}; the slow name's call took {took:?}");
    assert!(took >= delay, "{took:?}");
    assert!(took < delay + Duration::from_secs(2), "{took:?}");
}
