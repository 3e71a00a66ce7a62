//! PEM files for TLS: certificate chains and private keys, read with rustls' own PEM parser
//! (shared by the server's `[tls]` settings and the load generator's `--tls-*` options).

use std::path::Path;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// Reads every certificate of the PEM file `path`; an error message (naming the file) if
/// it cannot be read or holds none.
pub fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let read = |e: rustls::pki_types::pem::Error| {
        format!("cannot read certificates from `{}`: {e}", path.display())
    };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(read)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(read)?;
    if certs.is_empty() {
        return Err(format!("no PEM certificate in `{}`", path.display()));
    }
    Ok(certs)
}

/// Reads the first private key (PKCS#8, PKCS#1 or SEC1) of the PEM file `path`.
pub fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| {
        format!(
            "cannot read a PEM private key from `{}`: {e}",
            path.display()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_rcgen_writes_and_names_the_file_it_cannot_use() {
        let dir = std::env::temp_dir().join(format!("holdline-pem-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["a.test".to_owned()])
            .expect("params")
            .self_signed(&key)
            .expect("cert");
        let (c, k, empty) = (dir.join("c.pem"), dir.join("k.pem"), dir.join("e.pem"));
        std::fs::write(&c, cert.pem()).expect("write");
        std::fs::write(&k, key.serialize_pem()).expect("write");
        std::fs::write(&empty, "nothing here\n").expect("write");
        assert_eq!(certificates(&c).expect("certs").len(), 1);
        assert!(private_key(&k).is_ok());
        let e = certificates(&empty).expect_err("no certificate");
        assert!(e.contains("e.pem"), "{e}");
        let e = private_key(&dir.join("missing.pem")).expect_err("no file");
        assert!(e.contains("missing.pem"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
