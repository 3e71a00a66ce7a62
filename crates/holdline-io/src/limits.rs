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

/// Whether the kernel may back this process's memory with transparent huge pages (Linux's
/// `PR_SET_THP_DISABLE`, inherited by children; elsewhere nothing to do). Call it before the
/// workers start: it applies to the pages touched from then on.
pub fn set_transparent_huge_pages(enabled: bool) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `prctl(PR_SET_THP_DISABLE, flag, 0, 0, 0)` takes integers only and changes
        // a flag of the calling process; no memory is passed to the kernel.
        let r = unsafe {
            libc::prctl(
                libc::PR_SET_THP_DISABLE,
                libc::c_ulong::from(!enabled),
                0,
                0,
                0,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = enabled;
    Ok(())
}

/// Whether transparent huge pages are disabled for this process (`PR_GET_THP_DISABLE`;
/// `None` off Linux or when the kernel does not say).
pub fn transparent_huge_pages_disabled() -> Option<bool> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0)` reads a flag of the calling
        // process and returns it.
        let r = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
        if r >= 0 {
            return Some(r == 1);
        }
    }
    None
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

    #[test]
    #[cfg(target_os = "linux")]
    fn transparent_huge_pages_can_be_turned_off_and_on_again() {
        let before = transparent_huge_pages_disabled();
        set_transparent_huge_pages(false).expect("prctl");
        assert_eq!(transparent_huge_pages_disabled(), Some(true));
        set_transparent_huge_pages(true).expect("prctl");
        assert_eq!(transparent_huge_pages_disabled(), Some(false));
        set_transparent_huge_pages(before != Some(true)).expect("prctl");
    }
}
