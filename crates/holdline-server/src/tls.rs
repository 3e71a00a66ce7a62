//! TLS (rustls with the ring provider; no OpenSSL): the `[tls]` settings turned into rustls
//! configurations, loaded once at start (and by `--check-config`).
//!
//! ```text
//!   [tls] cert_file + key_file ──> rustls::ServerConfig   (tls: listeners; verify_client:
//!                                                         client certificates against ca_file)
//!   [tls] ca_file | system roots ─┐
//!   client_cert_file + key_file ──┴> rustls::ClientConfig (connections to TLS next hops)
//!   [[routes]] server_name ────────> the name each next hop's certificate must carry
//! ```
//!
//! The sessions themselves run inside [`holdline_io::tcp::TcpConn`] (`start_tls`), between
//! the socket and the stream framing, driven by the worker's mio loop like any connection.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use holdline_base::Transport;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::config::ServerConfig;

/// The rustls configurations of a server.
pub(crate) struct TlsSetup {
    /// For connections accepted on `tls:` listeners (`None` without one).
    pub(crate) server: Option<Arc<rustls::ServerConfig>>,
    /// For connections opened to TLS next hops.
    pub(crate) client: Arc<rustls::ClientConfig>,
    /// The names next hops' certificates must carry, by address (static routes'
    /// `server_name`); other addresses are verified against their IP address.
    pub(crate) names: HashMap<SocketAddr, ServerName<'static>>,
}

impl std::fmt::Debug for TlsSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSetup")
            .field("server", &self.server.is_some())
            .field("names", &self.names)
            .finish_non_exhaustive()
    }
}

impl TlsSetup {
    /// The name a connection to `addr` verifies the certificate against.
    pub(crate) fn name_for(&self, addr: SocketAddr) -> ServerName<'static> {
        self.names
            .get(&addr)
            .cloned()
            .unwrap_or_else(|| ServerName::IpAddress(addr.ip().into()))
    }
}

/// A server name (DNS name or IP address) as rustls takes it.
pub(crate) fn server_name(name: &str) -> Result<ServerName<'static>, String> {
    ServerName::try_from(name.to_owned())
        .map_err(|_| format!("`{name}` is not a valid DNS name or IP address"))
}

/// A key and what is wrong with it.
type KeyError = (String, String);

fn err(key: &str, message: String) -> KeyError {
    (key.to_owned(), message)
}

fn certs(key: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, KeyError> {
    holdline_io::pem::certificates(path).map_err(|m| err(key, m))
}

fn private_key(key: &str, path: &Path) -> Result<PrivateKeyDer<'static>, KeyError> {
    holdline_io::pem::private_key(path).map_err(|m| err(key, m))
}

/// Whether the configuration uses TLS at all (a `tls:` listener or route, or `[tls]`
/// settings beyond the defaults).
pub(crate) fn wanted(config: &ServerConfig) -> bool {
    config.listen.iter().any(|l| l.transport == Transport::Tls)
        || config.routes.iter().any(|r| r.target.is_tls())
        || config.tls != crate::config::TlsSettings::default()
}

/// Checks the `[tls]` settings by loading them (files included).
pub(crate) fn check(config: &ServerConfig) -> Result<(), KeyError> {
    setup(config).map(drop)
}

/// The rustls configurations of `config`; `None` when it uses no TLS.
pub(crate) fn setup(config: &ServerConfig) -> Result<Option<Arc<TlsSetup>>, KeyError> {
    if !wanted(config) {
        return Ok(None);
    }
    let t = &config.tls;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls_err = |e: rustls::Error| err("tls", e.to_string());

    // The CAs: for next hops, and for clients with verify_client.
    let mut roots = rustls::RootCertStore::empty();
    match &t.ca_file {
        Some(path) => {
            for c in certs("tls.ca_file", path)? {
                roots.add(c).map_err(|e| {
                    err(
                        "tls.ca_file",
                        format!("`{}`: unusable CA certificate: {e}", path.display()),
                    )
                })?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                tracing::warn!(
                    errors = ?found.errors,
                    "no system CA certificates found: TLS next hops cannot be verified (set tls.ca_file)"
                );
            }
        }
    }
    let roots = Arc::new(roots);

    let tls_listener = config.listen.iter().find(|l| l.transport == Transport::Tls);
    let server = match (tls_listener, &t.cert_file, &t.key_file) {
        (None, None, None) => None,
        (_, Some(cert), Some(key)) => {
            let chain = certs("tls.cert_file", cert)?;
            let key = private_key("tls.key_file", key)?;
            let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .map_err(tls_err)?;
            let builder = if t.verify_client {
                if t.ca_file.is_none() {
                    return Err(err(
                        "tls.verify_client",
                        "needs tls.ca_file (the CAs client certificates must be signed by)".into(),
                    ));
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    roots.clone(),
                    provider.clone(),
                )
                .build()
                .map_err(|e| err("tls.ca_file", e.to_string()))?;
                builder.with_client_cert_verifier(verifier)
            } else {
                builder.with_no_client_auth()
            };
            let server = builder
                .with_single_cert(chain, key)
                .map_err(|e| err("tls.key_file", format!("with tls.cert_file: {e}")))?;
            Some(Arc::new(server))
        }
        (Some(l), None, _) => {
            return Err(err(
                "tls.cert_file",
                format!("required by the listener `{l}`"),
            ));
        }
        (_, Some(_), None) => {
            return Err(err("tls.key_file", "required with tls.cert_file".into()));
        }
        (_, None, Some(_)) => {
            return Err(err("tls.cert_file", "required with tls.key_file".into()));
        }
    };
    if t.verify_client && server.is_none() {
        return Err(err(
            "tls.verify_client",
            "needs a tls: listener with tls.cert_file and tls.key_file".into(),
        ));
    }

    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(tls_err)?
        .with_root_certificates(roots);
    let client = match (&t.client_cert_file, &t.client_key_file) {
        (Some(cert), Some(key)) => builder
            .with_client_auth_cert(
                certs("tls.client_cert_file", cert)?,
                private_key("tls.client_key_file", key)?,
            )
            .map_err(|e| {
                err(
                    "tls.client_key_file",
                    format!("with tls.client_cert_file: {e}"),
                )
            })?,
        (None, None) => builder.with_no_client_auth(),
        (Some(_), None) => {
            return Err(err(
                "tls.client_key_file",
                "required with tls.client_cert_file".into(),
            ));
        }
        (None, Some(_)) => {
            return Err(err(
                "tls.client_cert_file",
                "required with tls.client_key_file".into(),
            ));
        }
    };

    let mut names = HashMap::new();
    for (i, r) in config.routes.iter().enumerate() {
        if let Some(name) = &r.server_name {
            let name =
                server_name(name).map_err(|m| err(&format!("routes[{i}].server_name"), m))?;
            // check() allows server_name on address targets only.
            if let Some(l) = r.target.addr() {
                names.insert(l.addr, name);
            }
        }
    }
    Ok(Some(Arc::new(TlsSetup {
        server,
        client: Arc::new(client),
        names,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tls_listener_needs_a_certificate() {
        let e = ServerConfig::from_toml("t.toml", "listen = [\"tls:127.0.0.1:5061\"]\n")
            .expect_err("no certificate");
        assert_eq!(e.key, "tls.cert_file", "{e}");
        assert!(e.message.contains("tls:127.0.0.1:5061"), "{e}");
    }

    #[test]
    fn unreadable_files_are_named_with_their_key_and_line() {
        let text = "listen = [\"tls:127.0.0.1:5061\"]\n[tls]\ncert_file = \"/nonexistent/c.pem\"\nkey_file = \"/nonexistent/k.pem\"\n";
        let e = ServerConfig::from_toml("t.toml", text).expect_err("missing file");
        assert_eq!((e.line, e.key.as_str()), (3, "tls.cert_file"), "{e}");
        assert!(e.message.contains("/nonexistent/c.pem"), "{e}");
        let text = "[tls]\nverify_client = true\n";
        let e = ServerConfig::from_toml("t.toml", text).expect_err("no listener");
        assert_eq!((e.line, e.key.as_str()), (2, "tls.verify_client"), "{e}");
    }

    #[test]
    fn routes_take_a_server_name_for_tls_only() {
        let r: crate::config::Route = "*=tls:127.0.0.1:5061,server_name=sip.example.net"
            .parse()
            .expect("route");
        assert_eq!(r.target.addr().map(|l| l.transport), Some(Transport::Tls));
        assert_eq!(r.server_name.as_deref(), Some("sip.example.net"));
        let e = "*=tcp:127.0.0.1:5061,server_name=x.example"
            .parse::<crate::config::Route>()
            .expect_err("tcp");
        assert!(e.contains("tls"), "{e}");
        let text = "[[routes]]\ndomain = \"*\"\ntarget = \"udp:127.0.0.1:5060\"\nserver_name = \"a.example\"\n";
        let e = ServerConfig::from_toml("t.toml", text).expect_err("udp route");
        assert_eq!(
            (e.line, e.key.as_str()),
            (4, "routes[0].server_name"),
            "{e}"
        );
    }

    #[test]
    fn a_tls_route_alone_builds_a_client_configuration() {
        let mut c = ServerConfig::default();
        c.routes.push(
            "*=tls:127.0.0.1:5061,server_name=sip.example.net"
                .parse()
                .expect("route"),
        );
        let s = setup(&c).expect("setup").expect("tls wanted");
        assert!(s.server.is_none());
        assert_eq!(
            s.name_for("127.0.0.1:5061".parse().expect("addr")),
            server_name("sip.example.net").expect("name")
        );
        assert_eq!(
            s.name_for("127.0.0.1:5062".parse().expect("addr")),
            server_name("127.0.0.1").expect("name")
        );
        assert!(setup(&ServerConfig::default()).expect("setup").is_none());
    }
}
