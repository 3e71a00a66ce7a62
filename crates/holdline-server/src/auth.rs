//! Digest authentication's IO: reading the users file (and reloading it on SIGHUP), the
//! nonce secret (a file, or system randomness), and the settings handed to every worker's
//! engine. The checks themselves are pure: `holdline_proto::auth`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use holdline_base::Duration;
use holdline_proto::{AuthConfig, IpNet, NonceCounts, SharedUsers, Users, UsersFileError};

use crate::ServerConfig;

/// Why authentication could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthSetupError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The users file has an error.
    #[error("{path}:{line}: key `{entry}`: {kind}", line = .error.line, entry = .error.entry, kind = .error.kind)]
    Users {
        /// The users file.
        path: PathBuf,
        /// Where and what.
        error: UsersFileError,
    },
    /// The secret file is too short to key anything.
    #[error("{path}: the nonce secret must hold at least 16 bytes (it has {len})")]
    ShortSecret {
        /// The secret file.
        path: PathBuf,
        /// Its length.
        len: usize,
    },
    /// The secret file could not be created.
    #[error("cannot create the nonce secret {path}: {source}")]
    WriteSecret {
        /// The secret file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The system has no randomness to offer.
    #[error("no system randomness for the nonce secret: {0}")]
    Random(String),
    /// A setting is invalid.
    #[error("{key}: {message}")]
    Setting {
        /// The key.
        key: String,
        /// What is wrong.
        message: String,
    },
}

/// Reads and parses a users file.
pub fn read_users(path: &Path) -> Result<Users, AuthSetupError> {
    let text = std::fs::read_to_string(path).map_err(|source| AuthSetupError::Read {
        path: path.to_owned(),
        source,
    })?;
    Users::parse(&text).map_err(|error| AuthSetupError::Users {
        path: path.to_owned(),
        error,
    })
}

/// 32 bytes of system randomness.
fn random_key() -> Result<[u8; 32], AuthSetupError> {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| AuthSetupError::Random(e.to_string()))?;
    Ok(key)
}

/// The nonce key from `path` (the SHA-256 of its bytes), creating the file with 32 random
/// bytes (mode 0600) when it does not exist.
fn read_secret(path: &Path) -> Result<[u8; 32], AuthSetupError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let key = random_key()?;
            let write_err = |source| AuthSetupError::WriteSecret {
                path: path.to_owned(),
                source,
            };
            let mut opts = std::fs::OpenOptions::new();
            opts.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
            let mut f = opts.open(path).map_err(write_err)?;
            f.write_all(&key).map_err(write_err)?;
            f.sync_all().map_err(write_err)?;
            key.to_vec()
        }
        Err(source) => {
            return Err(AuthSetupError::Read {
                path: path.to_owned(),
                source,
            });
        }
    };
    if bytes.len() < 16 {
        return Err(AuthSetupError::ShortSecret {
            path: path.to_owned(),
            len: bytes.len(),
        });
    }
    Ok(AuthConfig::secret_from(&bytes))
}

/// Authentication as the server runs it: the users (replaceable), and the settings every
/// worker's engine gets.
#[derive(Debug)]
pub struct AuthRuntime {
    users_file: PathBuf,
    users: Arc<SharedUsers>,
    base: AuthConfig,
}

impl AuthRuntime {
    /// The users file.
    pub fn users_file(&self) -> &Path {
        &self.users_file
    }

    /// Users in force.
    pub fn user_count(&self) -> usize {
        self.users.current().len()
    }

    /// The settings of one engine, whose clock reads `Instant::ZERO` at wall-clock
    /// `wall_clock_at_zero_ms` (ms since the Unix epoch). Every engine shares the users and
    /// the nonce-count table.
    pub fn proxy_auth(&self, wall_clock_at_zero_ms: u64) -> AuthConfig {
        let mut c = self.base.clone();
        c.wall_clock_at_zero_ms = wall_clock_at_zero_ms;
        c
    }

    /// Reads the users file again and, if it parses, puts it in force; returns the number of
    /// users. On an error the users in force stay.
    pub fn reload(&self) -> Result<usize, AuthSetupError> {
        let users = read_users(&self.users_file)?;
        let n = users.len();
        self.users.replace(users);
        Ok(n)
    }
}

/// Sets authentication up as `config` says: `None` when `[auth] users_file` is absent.
pub fn load_auth(config: &ServerConfig) -> Result<Option<Arc<AuthRuntime>>, AuthSetupError> {
    let a = &config.auth;
    let Some(users_file) = &a.users_file else {
        return Ok(None);
    };
    let algorithms = a
        .algorithms()
        .map_err(|(key, message)| AuthSetupError::Setting { key, message })?;
    let users = Arc::new(SharedUsers::new(read_users(users_file)?));
    let secret = match &a.secret_file {
        Some(p) => read_secret(p)?,
        None => random_key()?,
    };
    let mut base = AuthConfig::new(users.clone(), secret);
    base.realm.clone_from(&a.realm);
    base.algorithms = algorithms;
    base.nonce_lifetime = Duration::from_secs(a.nonce_lifetime_s);
    base.nonce_counts = Arc::new(NonceCounts::new(a.nonce_counts));
    base.trusted = config.trusted.iter().map(|t| t.0).collect::<Vec<IpNet>>();
    Ok(Some(Arc::new(AuthRuntime {
        users_file: users_file.clone(),
        users,
        base,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_file_errors_name_file_line_and_entry() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("users.txt");
        std::fs::write(&path, "# users\nalice@example.com 00 11\n").expect("write");
        let e = read_users(&path).expect_err("bad hash");
        let text = e.to_string();
        assert!(
            text.starts_with(&format!("{}:2: key `alice@example.com`: ", path.display())),
            "{text}"
        );
        let missing = read_users(&dir.path().join("none.txt")).expect_err("missing");
        assert!(missing.to_string().contains("none.txt"), "{missing}");
    }

    #[test]
    fn secret_file_is_created_once_and_then_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("nonce.key");
        let k1 = read_secret(&path).expect("created");
        let k2 = read_secret(&path).expect("read");
        assert_eq!(k1, k2, "the same key after a restart");
        std::fs::write(&path, b"short").expect("write");
        assert!(matches!(
            read_secret(&path),
            Err(AuthSetupError::ShortSecret { len: 5, .. })
        ));
    }

    #[test]
    fn runtime_reloads_users_and_keeps_them_on_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("users.txt");
        let mut users = Users::new();
        users.insert(
            "alice",
            "example.com",
            holdline_proto::UserEntry::new(b"alice", b"example.com", b"pw"),
        );
        std::fs::write(&path, users.to_text()).expect("write");
        let mut config = ServerConfig::default();
        config.auth.users_file = Some(path.clone());
        let rt = load_auth(&config).expect("loads").expect("on");
        assert_eq!(rt.user_count(), 1);
        users.insert(
            "bob",
            "example.com",
            holdline_proto::UserEntry::new(b"bob", b"example.com", b"pw"),
        );
        std::fs::write(&path, users.to_text()).expect("write");
        assert_eq!(rt.reload().expect("reload"), 2);
        std::fs::write(&path, "garbage\n").expect("write");
        assert!(rt.reload().is_err());
        assert_eq!(rt.user_count(), 2, "the users in force stay");
        assert_eq!(rt.proxy_auth(5).wall_clock_at_zero_ms, 5);
    }
}
