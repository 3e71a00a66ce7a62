//! Packaging (issue 22 item 8): the systemd unit checked by `systemd-analyze`, readiness
//! notification on `$NOTIFY_SOCKET`, completions and the man page from clap, and the Debian
//! package built from the workspace (cargo-deb), installed with `dpkg -i`, started once and
//! removed (root).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{BIN, Guard, free_port, is_root};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn has(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

/// `systemd-analyze verify` of `unit`: every problem it prints (unknown keys, bad values,
/// missing executables) fails, not only its exit status.
fn verify(unit: &Path, man: bool) -> Result<(), String> {
    let out = run(Command::new("systemd-analyze")
        .arg("verify")
        .arg(format!("--man={}", if man { "yes" } else { "no" }))
        .arg(unit));
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    if out.status.success() && text.trim().is_empty() {
        Ok(())
    } else {
        Err(format!("{:?}: {text}", out.status))
    }
}

/// The repository's unit with `ExecStart=` pointing at the binary under test (verify checks
/// that the executables exist).
fn unit_for_test(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(repo().join("ops/systemd/holdline.service")).expect("unit");
    let path = dir.join("holdline.service");
    std::fs::write(&path, text.replace("/usr/bin/holdline", BIN)).expect("write unit");
    path
}

#[test]
fn systemd_unit_passes_systemd_analyze() {
    if !has("systemd-analyze") {
        eprintln!("SKIPPED: systemd-analyze is not installed (Debian's `systemd` package)");
        return;
    }
    let text = std::fs::read_to_string(repo().join("ops/systemd/holdline.service")).expect("unit");
    for key in [
        "Type=notify",
        "ExecStart=/usr/bin/holdline serve --config /etc/holdline/holdline.toml",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "LimitNOFILE=65536",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
        "ReadWritePaths=/var/lib/holdline",
        "StateDirectory=holdline",
    ] {
        assert!(
            text.lines().any(|l| l.trim() == key),
            "the unit has `{key}`"
        );
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let unit = unit_for_test(dir.path());
    verify(&unit, false).unwrap_or_else(|e| panic!("systemd-analyze verify: {e}"));
    // The check catches a mistake: a bad value is a warning with status 0.
    let bad = dir.path().join("bad").join("holdline.service");
    std::fs::create_dir(bad.parent().expect("parent")).expect("mkdir");
    std::fs::write(
        &bad,
        std::fs::read_to_string(&unit)
            .expect("unit")
            .replace("LimitNOFILE=65536", "LimitNOFILE=lots"),
    )
    .expect("write");
    assert!(verify(&bad, false).is_err(), "a bad value is reported");
    // Exposure as systemd rates it (0 = fully confined, 10 = unprotected): ≤ 2.5.
    let out = run(Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--threshold=25", "--no-pager"])
        .arg(&unit));
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "systemd-analyze security: {report}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{}", report.lines().last().unwrap_or_default());
    // The unit's configuration is the repository's default file, and it is valid.
    let out = run(Command::new(BIN)
        .args(["serve", "--check-config"])
        .arg(repo().join("packaging/holdline.toml")));
    assert!(out.status.success(), "{out:?}");
}

/// Waits (bounded) for one datagram on `sock`.
fn recv(sock: &UnixDatagram, limit: Duration) -> String {
    sock.set_read_timeout(Some(limit)).expect("timeout");
    let mut buf = [0u8; 4096];
    let n = sock
        .recv(&mut buf)
        .unwrap_or_else(|e| panic!("no notification within {limit:?}: {e}"));
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// `holdline serve` (`bin`) with `$NOTIFY_SOCKET` = `notify`, on free ports; stopped by PID.
fn serve_notified(bin: &str, notify: &str, extra: &[&str]) -> (Guard, SocketAddr) {
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let child: Child = Command::new(bin)
        .arg("serve")
        .args(extra)
        .args(["--listen", &format!("udp:127.0.0.1:{}", free_port())])
        .args(["--metrics", &metrics.to_string(), "--store", "memory"])
        .env("NOTIFY_SOCKET", notify)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn holdline serve");
    (Guard(child), metrics)
}

/// `GET path` from a metrics listener; the body (asserting a 200).
fn get(addr: SocketAddr, path: &str) -> String {
    let mut c = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    c.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
        .expect("request");
    let mut text = String::new();
    c.read_to_string(&mut text).expect("response");
    assert!(text.starts_with("HTTP/1.0 200"), "{path}: {text}");
    text.split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default()
}

/// READY=1 once the server serves (its metrics answer at once), STOPPING=1 on SIGTERM, and
/// a clean exit.
fn check_notifications(bin: &str, extra: &[&str]) {
    let dir = tempfile::tempdir().expect("tempdir");
    for abstract_name in [false, true] {
        let (sock, name) = if abstract_name {
            use std::os::linux::net::SocketAddrExt;
            let name = format!("holdline-test-{}-{}", std::process::id(), free_port());
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
                .expect("abstract address");
            (
                UnixDatagram::bind_addr(&addr).expect("bind abstract"),
                format!("@{name}"),
            )
        } else {
            let path = dir.path().join("notify.sock");
            (
                UnixDatagram::bind(&path).expect("bind"),
                path.display().to_string(),
            )
        };
        let (mut server, metrics) = serve_notified(bin, &name, extra);
        let ready = recv(&sock, Duration::from_secs(30));
        assert!(ready.lines().any(|l| l == "READY=1"), "{ready}");
        assert!(
            ready
                .lines()
                .any(|l| l == format!("MAINPID={}", server.0.id())),
            "{ready}"
        );
        // Ready means serving: the metrics listener answers without waiting.
        assert!(get(metrics, "/metrics").contains("holdline_messages_in_total"));
        let status = Command::new("kill")
            .args(["-TERM", &server.0.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
        let stopping = recv(&sock, Duration::from_secs(15));
        assert!(stopping.lines().any(|l| l == "STOPPING=1"), "{stopping}");
        let exit = server
            .wait_for(Duration::from_secs(15))
            .expect("exits after SIGTERM");
        assert!(exit.success(), "{exit:?}");
    }
}

#[test]
fn serve_notifies_readiness_and_stopping_on_notify_socket() {
    check_notifications(BIN, &[]);
}

#[test]
fn completions_and_man_page_come_from_clap() {
    let out = run(Command::new(BIN).args(["completions", "bash"]));
    assert!(out.status.success(), "{out:?}");
    let bash = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        bash.contains("_holdline()") && bash.contains("serve"),
        "{bash}"
    );
    assert!(bash.contains("--check-config"), "serve's options complete");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("holdline.bash");
    std::fs::write(&file, &bash).expect("write");
    let syntax = run(Command::new("bash").arg("-n").arg(&file));
    assert!(syntax.status.success(), "bash -n: {syntax:?}");
    for shell in ["zsh", "fish"] {
        let out = run(Command::new(BIN).args(["completions", shell]));
        assert!(out.status.success() && !out.stdout.is_empty(), "{shell}");
    }
    let out = run(Command::new(BIN).arg("man"));
    assert!(out.status.success(), "{out:?}");
    let roff = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        roff.starts_with(".ie") || roff.contains(".TH holdline 1"),
        "{roff}"
    );
    for want in [
        ".SH NAME",
        ".SH SYNOPSIS",
        "HOLDLINE SERVE",
        "check\\-config",
        "/etc/holdline/holdline.toml",
    ] {
        assert!(roff.contains(want), "man page has `{want}`");
    }
    // Rendered without warnings when groff is there.
    if has("groff") {
        let mut child = Command::new("groff")
            .args(["-man", "-Tutf8", "-ww", "-z"])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("groff");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(roff.as_bytes())
            .expect("write");
        let out = child.wait_with_output().expect("groff");
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "groff: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `dpkg` with bounded retries while another dpkg/apt holds the lock.
fn dpkg(args: &[&str]) -> Output {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let out = run(Command::new("dpkg").args(args));
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.success() || !err.contains("lock") || Instant::now() >= deadline {
            return out;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[test]
fn debian_package_installs_starts_and_is_removed() {
    if std::env::var_os("HOLDLINE_SKIP_DEB").is_some() {
        eprintln!("SKIPPED: HOLDLINE_SKIP_DEB is set");
        return;
    }
    if !is_root() || !has("dpkg") {
        eprintln!("SKIPPED: installing a package needs root and dpkg");
        return;
    }
    let installed = run(Command::new("dpkg-query").args(["-W", "-f=${Status}", "holdline"]));
    if String::from_utf8_lossy(&installed.stdout).contains("installed")
        || ["/usr/bin/holdline", "/etc/holdline", "/var/lib/holdline"]
            .iter()
            .any(|p| Path::new(p).exists())
    {
        eprintln!(
            "SKIPPED: holdline (or its /etc/holdline or /var/lib/holdline) is already on this machine: not replacing or purging it"
        );
        return;
    }
    assert!(
        has("cargo-deb"),
        "cargo-deb is not installed: cargo install --locked cargo-deb (scripts/install-test-deps)"
    );
    let started = Instant::now();
    // The package of the binary under test (the dev profile, optimized): no release build
    // in the test; `packaging/build-deb` alone builds the release one.
    let target = Path::new(BIN)
        .parent()
        .and_then(Path::parent)
        .expect("target dir");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run(Command::new(repo().join("packaging/build-deb"))
        .args(["--profile", "dev", "--no-build", "--fast", "--output"])
        .arg(dir.path())
        .env("CARGO_TARGET_DIR", target));
    assert!(
        out.status.success(),
        "build-deb: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let deb = std::fs::read_dir(dir.path())
        .expect("output")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .expect("a .deb written");
    let built = started.elapsed();
    let contents = run(Command::new("dpkg-deb").arg("--contents").arg(&deb));
    let listing = String::from_utf8_lossy(&contents.stdout).into_owned();
    for path in [
        "./usr/bin/holdline",
        "./etc/holdline/holdline.toml",
        "./lib/systemd/system/holdline.service",
        "./usr/share/man/man1/holdline.1.gz",
        "./usr/share/bash-completion/completions/holdline",
        "./usr/share/zsh/vendor-completions/_holdline",
        "./usr/share/fish/vendor_completions.d/holdline.fish",
    ] {
        assert!(listing.contains(path), "{path} in the package:\n{listing}");
    }

    let out = dpkg(&["-i", &deb.display().to_string()]);
    // From here on, remove the package whatever happens.
    struct Remove;
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = dpkg(&["--purge", "holdline"]);
        }
    }
    let _remove = Remove;
    assert!(
        out.status.success(),
        "dpkg -i: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(Path::new("/usr/bin/holdline").is_file());
    let ids = run(Command::new("id").arg("holdline"));
    assert!(ids.status.success(), "the holdline user exists");
    let stat = run(Command::new("stat")
        .args(["-c", "%U:%G %a"])
        .args(["/var/lib/holdline", "/etc/holdline/holdline.toml"]));
    let stat = String::from_utf8_lossy(&stat.stdout).into_owned();
    assert_eq!(
        stat.lines().collect::<Vec<_>>(),
        ["holdline:holdline 750", "root:holdline 640"],
        "data and configuration owners"
    );
    if has("systemd-analyze") {
        // The installed unit as it is, the man page it names included when man is there.
        verify(
            Path::new("/lib/systemd/system/holdline.service"),
            has("man"),
        )
        .unwrap_or_else(|e| panic!("installed unit: {e}"));
    }
    // Started once as the unit runs it: the installed binary, the installed configuration,
    // as the holdline user (free ports instead of 5060 and 9480, which may be taken).
    let check = run(Command::new("/usr/bin/holdline").args([
        "serve",
        "--check-config",
        "/etc/holdline/holdline.toml",
    ]));
    assert!(check.status.success(), "{check:?}");
    let notify = dir.path().join("notify.sock");
    let sock = UnixDatagram::bind(&notify).expect("bind");
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let _ = run(Command::new("chown").arg("holdline").arg(&notify));
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let mut serve = Command::new("setpriv");
    serve
        .args([
            "--reuid=holdline",
            "--regid=holdline",
            "--init-groups",
            "--",
        ])
        .args([
            "/usr/bin/holdline",
            "serve",
            "--config",
            "/etc/holdline/holdline.toml",
        ])
        .args(["--listen", &format!("udp:127.0.0.1:{}", free_port())])
        .args(["--metrics", &metrics.to_string()])
        .env("NOTIFY_SOCKET", &notify)
        .env_remove("XDG_DATA_HOME")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut server = Guard(serve.spawn().expect("spawn the installed holdline"));
    let ready = recv(&sock, Duration::from_secs(30));
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready}");
    assert!(get(metrics, "/metrics").contains("holdline_build_info"));
    let status: serde_json::Value =
        serde_json::from_str(&get(metrics, "/status.json")).expect("status.json");
    assert_eq!(status["version"], env!("CARGO_PKG_VERSION"));
    let _ = Command::new("kill")
        .args(["-TERM", &server.0.id().to_string()])
        .status();
    let exit = server
        .wait_for(Duration::from_secs(15))
        .expect("exits after SIGTERM");
    let mut err = String::new();
    if let Some(mut e) = server.0.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    assert!(exit.success(), "{exit:?}\n{err}");
    assert!(
        err.contains("data directory /var/lib/holdline"),
        "the configured data directory:\n{err}"
    );
    assert!(
        Path::new("/var/lib/holdline/location").exists(),
        "the store in the data directory"
    );

    // Removed: the binary goes, the configuration stays until purge, then it and the data go.
    let out = dpkg(&["-r", "holdline"]);
    assert!(out.status.success(), "dpkg -r: {out:?}");
    assert!(!Path::new("/usr/bin/holdline").exists());
    assert!(
        Path::new("/etc/holdline/holdline.toml").exists(),
        "conffile kept"
    );
    let out = dpkg(&["--purge", "holdline"]);
    assert!(out.status.success(), "dpkg --purge: {out:?}");
    assert!(!Path::new("/etc/holdline/holdline.toml").exists());
    assert!(!Path::new("/var/lib/holdline").exists());
    eprintln!(
        "package built in {:.1} s; built, installed, started and removed in {:.1} s",
        built.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}
