//! `holdline load`: the command line of the load generator and call handler.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use clap::{Args, Subcommand, ValueEnum};
use holdline_agent::{
    AgentConfig, ArrivalKind, Hold, Hops, MAX_HOPS, RegisterConfig, Timers, UacConfig, UasConfig,
    UserPattern,
};
use holdline_base::{Duration, Transport};
use holdline_load::{LoadConfig, LoadTls, Progress, SctpConfig};

/// `holdline load MODE [OPTIONS]`.
#[derive(Debug, Args)]
pub(crate) struct LoadArgs {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Debug, Subcommand)]
enum Mode {
    /// Place calls through a target (INVITE, ACK, BYE).
    Uac(UacArgs),
    /// Answer calls: 180 then 200 (or a mix), 200 OK retransmitted until the ACK.
    Uas(UasArgs),
    /// REGISTER load and storms.
    Register(RegisterArgs),
    /// UAC and UAS in one process (self-test; measuring the generator itself).
    Pair(PairArgs),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum TransportArg {
    Udp,
    Tcp,
    /// TLS over TCP: the caller verifies the target with `--tls-ca`, the UAS presents
    /// `--tls-cert`/`--tls-key`.
    Tls,
    /// SCTP over UDP (RFC 4168 over RFC 6951), as `holdline serve`'s `sctp:` listeners: each
    /// calling leg is one association to the target (a UDP socket of its own), the UAS
    /// accepts associations on its UDP socket.
    Sctp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ArrivalArg {
    Poisson,
    Constant,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ProgressArg {
    Auto,
    Lines,
    Off,
}

/// Options every mode has.
#[derive(Debug, Args)]
struct Common {
    /// Transport.
    #[arg(long, value_enum, default_value = "udp")]
    transport: TransportArg,
    /// Where this mode listens (the UAS) or binds (the UAC's local address; port 0: any).
    #[arg(long, value_name = "IP:PORT")]
    listen: Option<SocketAddr>,
    /// Per-second CSV file.
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
    /// JSON report file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// A 200 OK counts as goodput within this many seconds of the first INVITE.
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    goodput_window: f64,
    /// Calls placed S seconds after the start or later also go into a steady-state PDD
    /// histogram (`latency.pdd_steady` in the JSON report): the delay once the load step's
    /// transient is over.
    #[arg(long, value_name = "S")]
    steady_after: Option<f64>,
    /// RFC 3261 T1 in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 500)]
    t1_ms: u64,
    /// RFC 3261 T2 in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 4000)]
    t2_ms: u64,
    /// Stop after this many seconds whatever happens.
    #[arg(long, value_name = "S")]
    max_time: Option<f64>,
    /// Socket send and receive buffer size in bytes (capped by net.core.[rw]mem_max).
    #[arg(long, value_name = "BYTES", default_value_t = 32 * 1024 * 1024)]
    socket_buffer: usize,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Under load (16+ messages per wake-up), handle messages in batches at most this often
    /// (microseconds): far fewer system calls and context switches, at most this much added
    /// delay per hop; none at light load; 0 reacts to every message.
    #[arg(long, value_name = "US", default_value_t = 1000)]
    coalesce_us: u64,
    /// Progress display on stderr.
    #[arg(long, value_enum, default_value = "auto")]
    progress: ProgressArg,
    /// Source addresses of the TCP/TLS connections, used in turn (e.g.
    /// 127.0.0.2,127.0.0.3): each has its own ephemeral port range of about 28,000.
    #[arg(long, value_name = "IP[,IP...]", value_delimiter = ',')]
    local_ips: Vec<std::net::IpAddr>,
    /// TLS: the CA certificates (PEM) the target's certificate is verified against.
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<PathBuf>,
    /// TLS: the name the target's certificate must carry (default: its IP address).
    #[arg(long, value_name = "NAME")]
    tls_server_name: Option<String>,
    /// TLS: the UAS's certificate chain (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// TLS: the UAS's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// SCTP: send every SIP message unordered (the U bit; no head-of-line blocking).
    #[arg(long)]
    sctp_unordered: bool,
    /// SCTP: outbound streams per association (a call's messages go on stream
    /// hash(Call-ID) mod N; default 16).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    sctp_streams: Option<u16>,
}

/// Options of the calling side.
#[derive(Debug, Args)]
struct Calling {
    /// Calls per second.
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
    /// Place at most N calls.
    #[arg(long, value_name = "N")]
    calls: Option<u64>,
    /// Place no call after S seconds.
    #[arg(long, value_name = "S")]
    duration: Option<f64>,
    /// Arrival process.
    #[arg(long, value_enum, default_value = "poisson")]
    arrivals: ArrivalArg,
    /// Call holding time: fixed:S or exp:MEAN (seconds); 0 hangs up right after the ACK.
    #[arg(long, value_name = "fixed:S|exp:MEAN", default_value = "fixed:0", value_parser = parse_hold)]
    hold: Hold,
    /// Callees, e.g. 'user{0..9999}@example.com'.
    #[arg(
        long,
        value_name = "PATTERN",
        default_value = "user{0..9999}@example.com"
    )]
    to: String,
    /// The caller's user name.
    #[arg(long, value_name = "USER", default_value = "holdline")]
    from: String,
    /// Calling legs: M TCP connections, M SCTP associations (each from its own UDP port), or
    /// M UDP source ports (M upstream servers).
    #[arg(long, value_name = "M", default_value_t = 1)]
    connections: usize,
    /// CANCEL calls without a final response after S seconds.
    #[arg(long, value_name = "S")]
    cancel_after: Option<f64>,
    /// At most N calls in progress (arrivals beyond are counted as blocked); default open loop.
    #[arg(long, value_name = "N")]
    max_active: Option<u64>,
    /// Do not put ;transport=tcp (tls, sctp) in the Request-URI over TCP (TLS, SCTP).
    #[arg(long)]
    no_uri_transport: bool,
    /// After the last arrival, wait at most S seconds for calls in progress.
    #[arg(long, value_name = "S", default_value_t = 40.0)]
    drain: f64,
    /// Set every calling leg's SCTP association or TCP/TLS connection up before the first
    /// call (waiting at most S seconds; INIT and SYN retransmissions included), so that the
    /// calls measure the path, not the set-up.
    #[arg(long, value_name = "S", num_args = 0..=1, default_missing_value = "30")]
    connect_first: Option<f64>,
}

/// Options of the answering side.
#[derive(Debug, Args)]
struct Answering {
    /// Send 100 Trying before 180.
    #[arg(long)]
    trying: bool,
    /// Milliseconds before 180 Ringing.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    ring_delay_ms: u64,
    /// Milliseconds from 180 to the final response.
    #[arg(long, value_name = "MS", default_value_t = 0)]
    answer_delay_ms: u64,
    /// Final responses and weights, e.g. 200:0.9,486:0.1.
    #[arg(long, value_name = "CODE:WEIGHT,...", default_value = "200:1", value_parser = parse_mix)]
    responses: Mix,
}

#[derive(Clone, Debug)]
struct Mix(Vec<(u16, f64)>);

/// Several first hops (UAC) or registrars (REGISTER load), and failover between them.
#[derive(Debug, Args)]
struct HopArgs {
    /// A further first hop (repeat for more; at most 7 besides --target). Calls: with
    /// --spread each call picks one of --target and these at random (seed 001's loaders over
    /// several first-stage servers); with --failover-after a call fails over to the next,
    /// its INVITE and its BYE alike. Over TCP/TLS, --connections is raised to the number of
    /// hops if smaller (connection i goes to hop i mod hops). REGISTERs (UDP only): each
    /// user registers with --target (with --spread, user u with hop u mod hops) and stays
    /// with the hop it failed over to.
    #[arg(long, value_name = "HOST:PORT", value_parser = parse_target)]
    alternate: Vec<SocketAddr>,
    /// Each call starts at a first hop chosen at random (among those not held down); each
    /// user registers with hop u mod hops.
    #[arg(long)]
    spread: bool,
    /// Client failover (RFC 3263 §4.3): a request (INVITE, BYE, REGISTER) with no response
    /// at all after S seconds, or an INVITE or REGISTER answered 503, is sent again as a new
    /// transaction to the next hop not yet tried; the failed hop is avoided for --hold-down
    /// seconds.
    #[arg(long, value_name = "S")]
    failover_after: Option<f64>,
    /// How long a first hop that failed is avoided, seconds.
    #[arg(long, value_name = "S", default_value_t = 10.0)]
    hold_down: f64,
}

#[derive(Debug, Args)]
struct UacArgs {
    /// Where requests go (the proxy under test, or a UAS).
    #[arg(long, value_name = "HOST:PORT", value_parser = parse_target)]
    target: SocketAddr,
    #[command(flatten)]
    hops: HopArgs,
    #[command(flatten)]
    calling: Calling,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, Args)]
struct UasArgs {
    #[command(flatten)]
    answering: Answering,
    /// Stop after N calls ended.
    #[arg(long, value_name = "N")]
    calls: Option<u64>,
    /// Stop after S seconds.
    #[arg(long, value_name = "S")]
    duration: Option<f64>,
    /// Register N users (from --users) at --registrar first, with this UAS as their contact.
    /// A REGISTER answered 5xx with Retry-After is sent again after that many seconds, at
    /// most 5 (as a phone does, shortened: a registrar that sheds a burst of registrations
    /// must not leave its users unregistered for the run).
    #[arg(long, value_name = "N")]
    register: Option<u64>,
    /// The registrar for --register.
    #[arg(long, value_name = "HOST:PORT", value_parser = parse_target)]
    registrar: Option<SocketAddr>,
    /// The users registered by --register.
    #[arg(
        long,
        value_name = "PATTERN",
        default_value = "user{0..9999}@example.com"
    )]
    users: String,
    /// REGISTERs per second for --register.
    #[arg(long, default_value_t = 1000.0)]
    register_rate: f64,
    /// --register's users send over M TCP/TLS connections (or UDP source ports), user `u`
    /// over number `u mod M`, as phones do: a proxy that reaches a binding over the
    /// connection it was made on brings the calls back over it, and they are answered there.
    #[arg(long, value_name = "M", default_value_t = 1)]
    register_connections: usize,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, Args)]
struct RegisterArgs {
    /// The registrar.
    #[arg(long, value_name = "HOST:PORT", value_parser = parse_target)]
    target: SocketAddr,
    /// The users, e.g. 'user{0..9999}@example.com' (one registration each).
    #[arg(
        long,
        value_name = "PATTERN",
        default_value = "user{0..9999}@example.com"
    )]
    users: String,
    /// Register at most N users (default: every user of the pattern).
    #[arg(long, value_name = "N")]
    calls: Option<u64>,
    /// New registrations per second.
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
    /// Arrival process.
    #[arg(long, value_enum, default_value = "constant")]
    arrivals: ArrivalArg,
    /// Expires requested, seconds.
    #[arg(long, default_value_t = 3600)]
    expires: u32,
    /// Re-register each user S seconds after its last success, until --duration ends.
    #[arg(long, value_name = "S")]
    refresh: Option<f64>,
    /// No new REGISTER after S seconds.
    #[arg(long, value_name = "S")]
    duration: Option<f64>,
    /// UDP source ports or TCP connections.
    #[arg(long, value_name = "M", default_value_t = 1)]
    connections: usize,
    /// After the last arrival, wait at most S seconds for answers (and for the REGISTERs
    /// re-sent after a Retry-After).
    #[arg(long, value_name = "S", default_value_t = 40.0)]
    drain: f64,
    /// A 5xx's Retry-After ends a user's attempt instead of being honoured (by default the
    /// REGISTER is sent again after it, as a phone does, up to 20 times per user).
    #[arg(long)]
    ignore_retry_after: bool,
    /// The longest Retry-After honoured, seconds (longer ones are cut to it).
    #[arg(long, value_name = "S", default_value_t = 300.0)]
    retry_after_cap: f64,
    /// After a REGISTER got no answer at all (Timer F), send it again as a phone does (RFC
    /// 5626 §4.5): after S seconds times 2^(k-1) for the k-th timeout in a row (at most
    /// 1800), times a random factor in [0.5, 1]. 0: a timeout ends the user's attempt.
    #[arg(long, value_name = "S", default_value_t = 30.0)]
    retry_timeout: f64,
    /// At the end, write the address of every user whose REGISTER got a 2xx to FILE, one
    /// per line (what the registrar acknowledged; compare it with the store after a crash).
    #[arg(long, value_name = "FILE")]
    acked: Option<PathBuf>,
    #[command(flatten)]
    hops: HopArgs,
    #[command(flatten)]
    common: Common,
}

#[derive(Debug, Args)]
struct PairArgs {
    /// Send through this proxy instead of straight to the in-process UAS.
    #[arg(long, value_name = "HOST:PORT", value_parser = parse_target)]
    target: Option<SocketAddr>,
    #[command(flatten)]
    calling: Calling,
    #[command(flatten)]
    answering: Answering,
    #[command(flatten)]
    common: Common,
}

fn parse_target(s: &str) -> Result<SocketAddr, String> {
    s.to_socket_addrs()
        .map_err(|e| format!("`{s}`: {e}"))?
        .next()
        .ok_or_else(|| format!("`{s}`: no address"))
}

/// The longest a `load uas --register` user waits on a Retry-After before registering again.
const UAS_REGISTER_RETRY_AFTER_CAP: Duration = Duration::from_secs(5);

fn secs(s: f64, what: &str) -> Result<Duration, String> {
    if (0.0..1e9).contains(&s) {
        Ok(Duration::from_secs_f64(s))
    } else {
        Err(format!("{what}: `{s}` is not a number of seconds"))
    }
}

fn parse_hold(s: &str) -> Result<Hold, String> {
    let (kind, v) = s.split_once(':').unwrap_or(("fixed", s));
    let v: f64 = v
        .parse()
        .map_err(|_| format!("`{s}`: expected fixed:S or exp:MEAN"))?;
    let d = secs(v, "hold")?;
    match kind {
        "fixed" => Ok(Hold::Fixed(d)),
        "exp" => Ok(Hold::Exp(d)),
        _ => Err(format!("`{s}`: expected fixed:S or exp:MEAN")),
    }
}

fn parse_mix(s: &str) -> Result<Mix, String> {
    let mut out = Vec::new();
    for part in s.split(',') {
        let (code, w) = part.split_once(':').unwrap_or((part, "1"));
        let code: u16 = code
            .trim()
            .parse()
            .map_err(|_| format!("`{part}`: bad status code"))?;
        if !(200..700).contains(&code) {
            return Err(format!("`{part}`: a final status is 200..699"));
        }
        let w: f64 = w
            .trim()
            .parse()
            .map_err(|_| format!("`{part}`: bad weight"))?;
        if !(w >= 0.0 && w.is_finite()) {
            return Err(format!("`{part}`: bad weight"));
        }
        out.push((code, w));
    }
    Ok(Mix(out))
}

fn transport(t: TransportArg) -> Transport {
    match t {
        TransportArg::Udp => Transport::Udp,
        TransportArg::Tcp => Transport::Tcp,
        TransportArg::Tls => Transport::Tls,
        TransportArg::Sctp => Transport::Sctp,
    }
}

fn arrival(a: ArrivalArg) -> ArrivalKind {
    match a {
        ArrivalArg::Poisson => ArrivalKind::Poisson,
        ArrivalArg::Constant => ArrivalKind::Constant,
    }
}

fn base_config(c: &Common) -> Result<AgentConfig, String> {
    let mut a = AgentConfig::new(transport(c.transport), Vec::new());
    a.timers = Timers {
        t1: Duration::from_millis(c.t1_ms.max(1)),
        t2: Duration::from_millis(c.t2_ms.max(c.t1_ms.max(1))),
        ..Timers::default()
    };
    a.goodput_window = secs(c.goodput_window, "--goodput-window")?;
    a.steady_after = c
        .steady_after
        .map(|s| secs(s, "--steady-after"))
        .transpose()?;
    a.seed = c.seed;
    Ok(a)
}

fn uac_config(c: &Calling, target: SocketAddr) -> Result<UacConfig, String> {
    if c.calls.is_none() && c.duration.is_none() {
        return Err("give --calls N and/or --duration S: every load run is bounded".into());
    }
    if !(c.rate > 0.0 && c.rate.is_finite()) {
        return Err(format!("--rate {}: must be positive", c.rate));
    }
    Ok(UacConfig {
        target,
        to: UserPattern::parse(&c.to).map_err(|e| e.to_string())?,
        from_user: c.from.clone(),
        arrivals: arrival(c.arrivals),
        rate: c.rate,
        rate_end: None,
        calls: c.calls,
        duration: c.duration.map(|d| secs(d, "--duration")).transpose()?,
        hold: c.hold,
        cancel_after: c
            .cancel_after
            .map(|d| secs(d, "--cancel-after"))
            .transpose()?,
        max_active: c.max_active,
        uri_transport: !c.no_uri_transport,
        hops: Hops::default(),
    })
}

/// The first hops of `holdline load uac` and `register`: `--alternate`, `--spread`,
/// `--failover-after`, `--hold-down`.
fn hops(a: &HopArgs) -> Result<Hops, String> {
    if a.alternate.len() + 1 > MAX_HOPS {
        return Err(format!(
            "{} first hops (--target and --alternate): at most {MAX_HOPS}",
            a.alternate.len() + 1
        ));
    }
    if a.alternate.is_empty() && (a.spread || a.failover_after.is_some()) {
        return Err("--spread and --failover-after need at least one --alternate".into());
    }
    Ok(Hops {
        alternates: a.alternate.clone(),
        spread: a.spread,
        failover_after: a
            .failover_after
            .map(|s| secs(s, "--failover-after"))
            .transpose()?,
        hold_down: secs(a.hold_down, "--hold-down")?,
    })
}

fn uas_config(a: &Answering, calls: Option<u64>) -> UasConfig {
    UasConfig {
        trying: a.trying,
        ring_delay: Duration::from_millis(a.ring_delay_ms),
        answer_delay: Duration::from_millis(a.answer_delay_ms),
        mix: a.responses.0.clone(),
        calls,
    }
}

fn load_config(
    agent: AgentConfig,
    c: &Common,
    listen: SocketAddr,
    connections: usize,
    drain: f64,
    mode: &str,
) -> Result<LoadConfig, String> {
    let tls = if agent.transport == Transport::Tls {
        let target = agent
            .uac
            .as_ref()
            .map(|u| u.target)
            .or_else(|| agent.register.as_ref().map(|r| r.registrar));
        if agent.uas.is_some() && c.tls_cert.is_none() {
            return Err("a TLS UAS needs --tls-cert FILE and --tls-key FILE".into());
        }
        Some(LoadTls::from_files(
            c.tls_ca.as_deref(),
            c.tls_server_name.as_deref(),
            target,
            c.tls_cert.as_deref().zip(c.tls_key.as_deref()),
        )?)
    } else {
        None
    };
    if agent.transport != Transport::Sctp && (c.sctp_unordered || c.sctp_streams.is_some()) {
        return Err("--sctp-unordered and --sctp-streams need --transport sctp".into());
    }
    let defaults = SctpConfig::default();
    let sctp = SctpConfig {
        unordered: c.sctp_unordered,
        streams: c.sctp_streams.unwrap_or(defaults.streams),
        ..defaults
    };
    Ok(LoadConfig {
        agent,
        listen: c.listen.unwrap_or(listen),
        connections,
        drain: secs(drain, "--drain")?,
        max_time: c.max_time.map(|d| secs(d, "--max-time")).transpose()?,
        csv: c.csv.clone(),
        progress: match c.progress {
            ProgressArg::Auto => Progress::Auto,
            ProgressArg::Lines => Progress::Lines,
            ProgressArg::Off => Progress::Quiet,
        },
        socket_buffer: Some(c.socket_buffer),
        coalesce: Duration::from_micros(c.coalesce_us),
        target_uas: false,
        acked_file: None,
        tls,
        local_ips: c.local_ips.clone(),
        sctp,
        connect_first: None,
        meta: serde_json::json!({
            "mode": mode,
            "command": std::env::args().collect::<Vec<_>>().join(" "),
        }),
    })
}

fn build(mode: Mode) -> Result<(LoadConfig, Option<PathBuf>), String> {
    let localhost = SocketAddr::from(([127, 0, 0, 1], 0));
    match mode {
        Mode::Uac(a) => {
            let mut cfg = base_config(&a.common)?;
            let mut uac = uac_config(&a.calling, a.target)?;
            uac.hops = hops(&a.hops)?;
            let connections = if cfg.transport.is_reliable() {
                a.calling.connections.max(1 + a.hops.alternate.len())
            } else {
                a.calling.connections
            };
            cfg.uac = Some(uac);
            let mut l = load_config(
                cfg,
                &a.common,
                localhost,
                connections,
                a.calling.drain,
                "uac",
            )?;
            l.connect_first = a
                .calling
                .connect_first
                .map(|s| secs(s, "--connect-first"))
                .transpose()?;
            Ok((l, a.common.json))
        }
        Mode::Uas(a) => {
            let mut cfg = base_config(&a.common)?;
            cfg.uas = Some(uas_config(&a.answering, a.calls));
            if let Some(n) = a.register {
                let registrar = a
                    .registrar
                    .ok_or("--register needs --registrar HOST:PORT")?;
                let users = UserPattern::parse(&a.users).map_err(|e| e.to_string())?;
                cfg.register = Some(RegisterConfig {
                    registrar,
                    count: n.min(users.len()),
                    users,
                    rate: a.register_rate,
                    arrivals: ArrivalKind::Constant,
                    expires: 3600,
                    refresh: None,
                    duration: None,
                    contact: None,
                    retry_after_cap: Some(UAS_REGISTER_RETRY_AFTER_CAP),
                    retry_timeout_base: None,
                    hops: Hops::default(),
                    deregister_every: None,
                });
            }
            let mut l = load_config(
                cfg,
                &a.common,
                SocketAddr::from(([127, 0, 0, 1], 5070)),
                a.register_connections.max(1),
                0.0,
                "uas",
            )?;
            if let Some(d) = a.duration {
                l.max_time = Some(secs(d, "--duration")?);
            }
            Ok((l, a.common.json))
        }
        Mode::Register(a) => {
            let mut cfg = base_config(&a.common)?;
            let users = UserPattern::parse(&a.users).map_err(|e| e.to_string())?;
            if !(a.rate > 0.0 && a.rate.is_finite()) {
                return Err(format!("--rate {}: must be positive", a.rate));
            }
            cfg.register = Some(RegisterConfig {
                registrar: a.target,
                count: a.calls.unwrap_or(u64::MAX).min(users.len()),
                users,
                rate: a.rate,
                arrivals: arrival(a.arrivals),
                expires: a.expires,
                refresh: a.refresh.map(|r| secs(r, "--refresh")).transpose()?,
                duration: a.duration.map(|d| secs(d, "--duration")).transpose()?,
                contact: None,
                retry_after_cap: (!a.ignore_retry_after)
                    .then(|| secs(a.retry_after_cap, "--retry-after-cap"))
                    .transpose()?,
                retry_timeout_base: (a.retry_timeout != 0.0)
                    .then(|| secs(a.retry_timeout, "--retry-timeout"))
                    .transpose()?,
                hops: hops(&a.hops)?,
                deregister_every: None,
            });
            let mut l = load_config(
                cfg,
                &a.common,
                localhost,
                a.connections,
                a.drain,
                "register",
            )?;
            l.acked_file = a.acked;
            Ok((l, a.common.json))
        }
        Mode::Pair(a) => {
            let mut cfg = base_config(&a.common)?;
            // The UAS binds first; the target defaults to it (filled in after binding).
            let listen = a.common.listen.unwrap_or(localhost);
            let target = a.target.unwrap_or(listen);
            cfg.uac = Some(uac_config(&a.calling, target)?);
            cfg.uas = Some(uas_config(&a.answering, None));
            cfg.shared_clock = true;
            if a.calling.connect_first.is_some() {
                return Err("--connect-first is for `holdline load uac` (a pair's UAS answers in the same loop)".into());
            }
            let mut l = load_config(
                cfg,
                &a.common,
                listen,
                a.calling.connections,
                a.calling.drain,
                "pair",
            )?;
            if a.target.is_none() {
                l.meta["target"] = "in-process UAS".into();
            }
            Ok((l, a.common.json))
        }
    }
}

pub(crate) fn main(args: LoadArgs) -> ExitCode {
    let pair_direct = matches!(&args.mode, Mode::Pair(p) if p.target.is_none());
    let (mut cfg, json) = match build(args.mode) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("holdline load: {e}");
            return ExitCode::from(2);
        }
    };
    cfg.target_uas = pair_direct;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, Arc::clone(&stop)) {
            eprintln!("holdline load: cannot handle signal {sig}: {e}");
            return ExitCode::FAILURE;
        }
    }
    let report = match holdline_load::run(cfg, &stop) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("holdline load: {e}");
            return ExitCode::FAILURE;
        }
    };
    print!("{}", holdline_load::summary(&report));
    if let Some(path) = json
        && let Err(e) = std::fs::write(&path, report.to_json())
    {
        eprintln!("holdline load: JSON file {}: {e}", path.display());
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
