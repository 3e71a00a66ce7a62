//! Certificates for the lab's TLS runs, generated (rcgen) into the results directory: a CA
//! and one certificate for 127.0.0.1 that it signed, used by every TLS endpoint of a run
//! (the server's `tls:` listener and its TLS next hop, the generator's UAS); callers verify
//! it against the CA, as in a deployment.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, SanType};

use crate::error::{LabError, Result};

/// The PEM files of a run's certificates.
#[derive(Debug, Clone)]
pub(crate) struct Pki {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

fn pki_err(what: &str, e: rcgen::Error) -> LabError {
    LabError::Precondition(format!("cannot generate the lab's {what}: {e}"))
}

impl Pki {
    /// The certificates in `dir/pki/`, generated there if they are not yet.
    pub(crate) fn in_dir(dir: &Path) -> Result<Self> {
        let pki = dir.join("pki");
        let this = Self {
            ca: pki.join("ca.pem"),
            cert: pki.join("cert.pem"),
            key: pki.join("key.pem"),
        };
        if this.ca.exists() && this.cert.exists() && this.key.exists() {
            return Ok(this);
        }
        std::fs::create_dir_all(&pki)
            .map_err(|e| LabError::io(format!("create {}", pki.display()), e))?;
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(|e| pki_err("CA", e))?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "holdline lab CA");
        let ca_key = KeyPair::generate().map_err(|e| pki_err("CA key", e))?;
        let ca_pem = ca.self_signed(&ca_key).map_err(|e| pki_err("CA", e))?.pem();
        let issuer = Issuer::new(ca, ca_key);
        let mut leaf =
            CertificateParams::new(Vec::<String>::new()).map_err(|e| pki_err("certificate", e))?;
        leaf.subject_alt_names = vec![SanType::IpAddress([127, 0, 0, 1].into())];
        let key = KeyPair::generate().map_err(|e| pki_err("key", e))?;
        let cert = leaf
            .signed_by(&key, &issuer)
            .map_err(|e| pki_err("certificate", e))?;
        for (path, text) in [
            (&this.ca, ca_pem),
            (&this.cert, cert.pem()),
            (&this.key, key.serialize_pem()),
        ] {
            std::fs::write(path, text)
                .map_err(|e| LabError::io(format!("write {}", path.display()), e))?;
        }
        Ok(this)
    }

    /// `holdline load uas`'s options to answer over TLS.
    pub(crate) fn uas_args(&self) -> [String; 2] {
        [
            format!("--tls-cert={}", self.cert.display()),
            format!("--tls-key={}", self.key.display()),
        ]
    }

    /// `holdline load uac`'s option to verify the server.
    pub(crate) fn uac_arg(&self) -> String {
        format!("--tls-ca={}", self.ca.display())
    }

    /// The server's `[tls]` section: its listener's certificate, and the CA its next hops'
    /// certificates are verified against.
    pub(crate) fn server_toml(&self) -> String {
        format!(
            "[tls]\ncert_file = {:?}\nkey_file = {:?}\nca_file = {:?}\n",
            self.cert.display().to_string(),
            self.key.display().to_string(),
            self.ca.display().to_string()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_once_and_names_its_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = Pki::in_dir(dir.path()).expect("pki");
        let ca = std::fs::read_to_string(&a.ca).expect("ca");
        assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"), "{ca}");
        // A second call reuses the files (every process of a run trusts the same CA).
        let b = Pki::in_dir(dir.path()).expect("pki");
        assert_eq!(std::fs::read_to_string(&b.ca).expect("ca"), ca);
        assert!(a.server_toml().contains("cert_file = "));
        assert!(a.uac_arg().starts_with("--tls-ca="));
    }
}
