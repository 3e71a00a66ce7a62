//! A cgroup v1 CPU group with a CFS quota: the servers' "slowed the same way".

use std::path::{Path, PathBuf};

use crate::error::{LabError, Result};

/// Root of the cgroup v1 CPU controller.
const CPU_ROOT: &str = "/sys/fs/cgroup/cpu";
/// The kernel's smallest `cpu.cfs_quota_us` and `cpu.cfs_period_us` (1 ms): smaller values
/// are refused with `EINVAL`.
pub(crate) const MIN_QUOTA_US: u64 = 1000;
/// The kernel's largest `cpu.cfs_period_us` (1 s).
pub(crate) const MAX_PERIOD_US: u64 = 1_000_000;

/// The period and quota of a `percent`% CPU quota with a period of `period_us`: the period
/// itself when its quota is at least [`MIN_QUOTA_US`], else the smallest period whose quota
/// is (at 25%: 4,000 µs for a requested 1,000 µs). Returns `(period_us, quota_us)`.
pub(crate) fn feasible_quota(period_us: u64, percent: u64) -> (u64, u64) {
    let percent = percent.clamp(1, 100);
    let period = period_us.clamp(MIN_QUOTA_US, MAX_PERIOD_US);
    let quota = period * percent / 100;
    if quota >= MIN_QUOTA_US {
        return (period, quota);
    }
    let period = (MIN_QUOTA_US * 100).div_ceil(percent);
    (period, period * percent / 100)
}

/// A CPU cgroup created for a run and removed when dropped.
#[derive(Debug)]
pub(crate) struct CpuGroup {
    path: PathBuf,
}

impl CpuGroup {
    /// Creates `/sys/fs/cgroup/cpu/NAME` limited to `quota_us` per `period_us`.
    pub(crate) fn create(name: &str, period_us: u64, quota_us: u64) -> Result<Self> {
        let root = Path::new(CPU_ROOT);
        if !root.join("cgroup.procs").exists() {
            return Err(LabError::Precondition(format!(
                "{CPU_ROOT} is not a cgroup v1 CPU controller (needed for the overload curve)"
            )));
        }
        let path = root.join(name);
        std::fs::create_dir_all(&path)
            .map_err(|e| LabError::io(format!("create cgroup {}", path.display()), e))?;
        let g = Self { path };
        g.write("cpu.cfs_period_us", &period_us.to_string())?;
        g.write("cpu.cfs_quota_us", &quota_us.to_string())?;
        Ok(g)
    }

    /// Sets the group's weight against its siblings (`cpu.shares`; 1024 weighs as one
    /// process at nice 0, 335 as one at nice 5), whatever the number of threads inside.
    pub(crate) fn set_shares(&self, shares: u64) -> Result<()> {
        self.write("cpu.shares", &shares.to_string())
    }

    fn write(&self, file: &str, value: &str) -> Result<()> {
        let p = self.path.join(file);
        std::fs::write(&p, value)
            .map_err(|e| LabError::io(format!("write {value} to {}", p.display()), e))
    }

    /// The `cgroup.procs` file: a process that writes its PID there (before it execs the
    /// server) puts itself and every child it forks later into the group.
    pub(crate) fn procs_file(&self) -> PathBuf {
        self.path.join("cgroup.procs")
    }
}

impl Drop for CpuGroup {
    fn drop(&mut self) {
        // Move any process still inside back to the root group, then remove the directory.
        if let Ok(list) = std::fs::read_to_string(self.procs_file()) {
            for pid in list.split_whitespace() {
                let _ = std::fs::write(Path::new(CPU_ROOT).join("cgroup.procs"), pid);
            }
        }
        if let Err(e) = std::fs::remove_dir(&self.path) {
            eprintln!(
                "bench: could not remove cgroup {}: {e}",
                self.path.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quota_under_the_kernels_minimum_gets_a_longer_period() {
        assert_eq!(feasible_quota(10_000, 25), (10_000, 2_500));
        assert_eq!(feasible_quota(1_000, 25), (4_000, 1_000));
        assert_eq!(feasible_quota(1_000, 100), (1_000, 1_000));
        assert_eq!(feasible_quota(3_000, 30), (3_334, 1_000));
        assert_eq!(feasible_quota(5_000, 25), (5_000, 1_250));
    }
}
