//! CPU time and memory of process trees from `/proc` (`/proc/PID/stat`: utime and stime, all
//! threads; `/proc/PID/status`: `VmRSS`; `/proc/PID/smaps_rollup`: `Pss`).

use std::collections::HashMap;

/// Clock ticks per second of `/proc/PID/stat` times.
fn clk_tck() -> u64 {
    // SAFETY: sysconf has no preconditions; it returns -1 for an unknown name.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as u64 } else { 100 }
}

/// Parent PID, utime and stime (ticks) of one process, if it exists.
fn stat(pid: u32) -> Option<(u32, u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat_times(&text)
}

/// Parses a `/proc/PID/stat` line into (ppid, utime, stime), in clock ticks. The command
/// name (field 2) is in parentheses and may hold spaces and parentheses, so fields are
/// counted after the last `)`.
pub(crate) fn parse_stat_times(text: &str) -> Option<(u32, u64, u64)> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(3) ppid(4) ... utime(14) stime(15), i.e. indexes 0, 1, 11, 12.
    let ppid = f.get(1)?.parse().ok()?;
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some((ppid, utime, stime))
}

/// Every PID currently in `/proc` with its parent.
fn parents() -> HashMap<u32, u32> {
    let mut map = HashMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            if let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok())
                && let Some((ppid, ..)) = stat(pid)
            {
                map.insert(pid, ppid);
            }
        }
    }
    map
}

/// `root` and all its descendants alive now.
pub(crate) fn tree(root: u32) -> Vec<u32> {
    let map = parents();
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(map.iter().filter(|&(_, &pp)| pp == p).map(|(&c, _)| c));
        i += 1;
    }
    out
}

/// CPU time of a process tree, split into user and system time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CpuSplit {
    /// utime summed over the processes, µs.
    pub user_us: u64,
    /// stime summed over the processes, µs.
    pub sys_us: u64,
}

impl CpuSplit {
    /// user + system, µs.
    pub(crate) fn total_us(self) -> u64 {
        self.user_us + self.sys_us
    }

    /// The CPU time spent since `earlier` (0 where a counter went backwards: a process of
    /// the tree exited between the two reads).
    pub(crate) fn since(self, earlier: Self) -> Self {
        Self {
            user_us: self.user_us.saturating_sub(earlier.user_us),
            sys_us: self.sys_us.saturating_sub(earlier.sys_us),
        }
    }
}

/// The CPU time of `pids` (those alive now).
fn cpu_of(pids: &[u32]) -> CpuSplit {
    let (u, s) = pids
        .iter()
        .filter_map(|&p| stat(p))
        .fold((0u64, 0u64), |(u, s), (_, pu, ps)| (u + pu, s + ps));
    let tck = clk_tck();
    CpuSplit {
        user_us: u * 1_000_000 / tck,
        sys_us: s * 1_000_000 / tck,
    }
}

/// CPU time (utime and stime) of `root` and every descendant alive now. Kamailio's workers
/// are children of its main process: they are summed here, read while they run (the main
/// process's cutime only counts reaped children).
pub(crate) fn tree_cpu_split(root: u32) -> CpuSplit {
    cpu_of(&tree(root))
}

/// CPU time (utime + stime) in microseconds of `root` and every descendant alive now (see
/// [`tree_cpu_split`]).
pub(crate) fn tree_cpu_us(root: u32) -> u64 {
    tree_cpu_split(root).total_us()
}

/// Time one CPU spent, from its `cpuN` line of `/proc/stat`, in µs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CoreTimes {
    /// Every state: user, nice, system, idle, iowait, irq, softirq, steal.
    pub total_us: u64,
    /// Not idle and not waiting for IO: processes' time, the interrupt and softirq work done
    /// on the core (for a server on loopback, the delivery of what it sends) and time the
    /// hypervisor took (steal: the core was not the server's then either).
    pub busy_us: u64,
    /// Its softirq and irq part (the kernel also charges what interrupted a process to that
    /// process's system time).
    pub interrupt_us: u64,
}

impl CoreTimes {
    /// The share of the time since `earlier` the core was busy (0 when no time passed).
    pub(crate) fn busy_since(self, earlier: Self) -> f64 {
        let total = self.total_us.saturating_sub(earlier.total_us);
        if total == 0 {
            return 0.0;
        }
        self.busy_us.saturating_sub(earlier.busy_us) as f64 / total as f64
    }
}

/// The times of CPU `core` now (`None` if `/proc/stat` has no such line).
pub(crate) fn core_times(core: &str) -> Option<CoreTimes> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    parse_core_times(&text, core, 1_000_000 / clk_tck().max(1))
}

/// Parses the `cpu<core>` line of a `/proc/stat` text (times in ticks of `us_per_tick` µs).
pub(crate) fn parse_core_times(text: &str, core: &str, us_per_tick: u64) -> Option<CoreTimes> {
    let name = format!("cpu{core}");
    let line = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    let [user, nice, system, idle, iowait, irq, softirq, steal] = v.try_into().ok()?;
    let us = |t: u64| t.saturating_mul(us_per_tick);
    Some(CoreTimes {
        total_us: us(user + nice + system + idle + iowait + irq + softirq + steal),
        busy_us: us(user + nice + system + irq + softirq + steal),
        interrupt_us: us(irq + softirq),
    })
}

/// The value in kB of the line `field` (e.g. `VmRSS:`) of a `/proc/PID/status` or
/// `/proc/PID/smaps_rollup` text.
pub(crate) fn kb_field(text: &str, field: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// `VmRSS` of a `/proc/PID/status` text, kB.
pub(crate) fn vm_rss_kb(status: &str) -> Option<u64> {
    kb_field(status, "VmRSS:")
}

/// Memory of a process tree.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TreeMemory {
    /// `VmRSS` summed over the processes, kB (pages shared between processes, such as
    /// Kamailio's shared memory, count once per process that touched them).
    pub rss_kb: u64,
    /// `Pss` (proportional set size: a shared page split among its users) summed over the
    /// processes, kB; `None` when a `smaps_rollup` could not be read.
    pub pss_kb: Option<u64>,
    /// Processes in the tree.
    pub processes: usize,
}

/// CPU time and memory of `root` and every descendant alive now (one walk of `/proc`).
pub(crate) fn tree_sample(root: u32) -> (CpuSplit, TreeMemory) {
    let pids = tree(root);
    let cpu = cpu_of(&pids);
    let mut mem = TreeMemory {
        rss_kb: 0,
        pss_kb: Some(0),
        processes: 0,
    };
    for &p in &pids {
        let Some(rss) = std::fs::read_to_string(format!("/proc/{p}/status"))
            .ok()
            .as_deref()
            .and_then(vm_rss_kb)
        else {
            // Gone, or a kernel thread without memory.
            continue;
        };
        mem.rss_kb += rss;
        mem.processes += 1;
        let pss = std::fs::read_to_string(format!("/proc/{p}/smaps_rollup"))
            .ok()
            .as_deref()
            .and_then(|t| kb_field(t, "Pss:"));
        mem.pss_kb = match (mem.pss_kb, pss) {
            (Some(a), Some(b)) => Some(a + b),
            _ => None,
        };
    }
    if mem.processes == 0 {
        mem.pss_kb = None;
    }
    (cpu, mem)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn core_line_of_proc_stat() {
        let text = "cpu  10 0 10 100 0 0 0 0 0 0\n\
                    cpu0 1 2 3 4 5 6 7 8 0 0\n\
                    cpu1 100 0 50 800 10 0 40 0 0 0\n\
                    cpu10 9 9 9 9 9 9 9 9 0 0\n";
        let c = parse_core_times(text, "1", 10_000).unwrap_or_default();
        assert_eq!(c.total_us, 1000 * 10_000);
        assert_eq!(c.busy_us, 190 * 10_000);
        assert_eq!(c.interrupt_us, 40 * 10_000);
        let c0 = parse_core_times(text, "0", 1).unwrap_or_default();
        assert_eq!((c0.total_us, c0.busy_us, c0.interrupt_us), (36, 27, 13));
        assert_eq!(parse_core_times(text, "2", 1), None);
        assert_eq!(parse_core_times("cpu1 1 2 x\n", "1", 1), None);
        let later = CoreTimes {
            total_us: c.total_us + 1000,
            busy_us: c.busy_us + 900,
            interrupt_us: c.interrupt_us,
        };
        assert!((later.busy_since(c) - 0.9).abs() < 1e-12);
        assert_eq!(c.busy_since(c), 0.0);
    }

    #[test]
    fn stat_line_with_spaces_and_parens_in_the_name() {
        let line = "1234 (kam (x) y) S 1 1234 1234 0 -1 4194560 100 0 0 0 37 12 0 0 20 0 1 0 5 0 0";
        assert_eq!(parse_stat_times(line), Some((1, 37, 12)));
        assert_eq!(parse_stat_times("1 (x) S"), None);
    }

    #[test]
    fn reads_kb_fields() {
        let status = "Name:\tholdline\nVmPeak:\t  100 kB\nVmRSS:\t   12345 kB\nThreads:\t3\n";
        assert_eq!(vm_rss_kb(status), Some(12345));
        assert_eq!(vm_rss_kb("Name:\tx\n"), None);
        let rollup = "55d0-7ffd ---p 00000000 00:00 0  [rollup]\nRss:  2048 kB\nPss:  1024 kB\n";
        assert_eq!(kb_field(rollup, "Pss:"), Some(1024));
    }

    #[test]
    fn own_process_tree_has_cpu_time_and_memory() {
        let me = std::process::id();
        // Burn a little CPU so the figure cannot be zero.
        let mut x = 1u64;
        let start = std::time::Instant::now();
        while start.elapsed().as_millis() < 50 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        assert!(x != 0);
        assert!(tree(me).contains(&me));
        assert!(tree_cpu_us(me) >= 10_000, "50 ms of busy loop shows");
        let split = tree_cpu_split(me);
        assert!(split.user_us > 0, "{split:?}");
        assert_eq!(split.total_us(), split.user_us + split.sys_us);
        let (cpu, mem) = tree_sample(me);
        assert!(cpu.total_us() >= 10_000);
        assert!(mem.rss_kb > 0 && mem.processes >= 1, "{mem:?}");
        if let Some(pss) = mem.pss_kb {
            assert!(pss > 0 && pss <= mem.rss_kb, "{mem:?}");
        }
    }
}
