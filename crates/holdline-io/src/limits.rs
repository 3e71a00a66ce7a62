//! The process's open-file limit (`RLIMIT_NOFILE`): every connection is a file descriptor,
//! and the usual soft limit (1,024) is far below what a server with tens of thousands of
//! connections needs. Raising the soft limit up to the hard one needs no privilege; raising
//! the hard one does (`CAP_SYS_RESOURCE`: systemd's `LimitNOFILE=`, `ulimit -Hn` as root).

use std::io;

/// The open-file limits after [`raise_open_files`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenFiles {
    /// The soft limit now in force.
    pub soft: u64,
    /// The hard limit (the most the soft one can be raised to).
    pub hard: u64,
    /// What was asked for.
    pub wanted: u64,
}

impl OpenFiles {
    /// Whether the soft limit covers what was asked for.
    pub fn enough(&self) -> bool {
        self.soft >= self.wanted
    }
}

/// Raises the soft open-file limit to `wanted`, or to the hard limit if that is lower; never
/// lowers it.
pub fn raise_open_files(wanted: u64) -> io::Result<OpenFiles> {
    let (soft, hard) = rlimit::getrlimit(rlimit::Resource::NOFILE)?;
    let target = wanted.min(hard);
    let soft = if target > soft {
        rlimit::setrlimit(rlimit::Resource::NOFILE, target, hard)?;
        target
    } else {
        soft
    };
    Ok(OpenFiles { soft, hard, wanted })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raises_to_what_is_asked_within_the_hard_limit_and_never_lowers() {
        let (soft0, hard) = rlimit::getrlimit(rlimit::Resource::NOFILE).expect("getrlimit");
        let l = raise_open_files(1).expect("raise");
        assert_eq!((l.soft, l.hard), (soft0, hard), "never lowered");
        let l = raise_open_files(u64::MAX).expect("raise");
        assert_eq!(l.soft, hard, "up to the hard limit");
        assert!(!l.enough());
        assert!(raise_open_files(hard).expect("raise").enough());
    }
}
