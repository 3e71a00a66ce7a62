//! A cgroup v1 CPU group with a CFS quota: the servers' "slowed the same way".

use std::path::{Path, PathBuf};

use crate::error::{LabError, Result};

/// Root of the cgroup v1 CPU controller.
const CPU_ROOT: &str = "/sys/fs/cgroup/cpu";

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
