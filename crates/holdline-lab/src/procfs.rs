//! CPU time of process trees from `/proc/PID/stat` (utime + stime, all threads).

use std::collections::HashMap;

/// Clock ticks per second of `/proc/PID/stat` times.
fn clk_tck() -> u64 {
    // SAFETY: sysconf has no preconditions; it returns -1 for an unknown name.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as u64 } else { 100 }
}

/// Parent PID and utime+stime (ticks) of one process, if it exists.
fn stat(pid: u32) -> Option<(u32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Parses a `/proc/PID/stat` line into (ppid, utime + stime). The command name (field 2) is
/// in parentheses and may hold spaces and parentheses, so fields are counted after the last `)`.
pub(crate) fn parse_stat(text: &str) -> Option<(u32, u64)> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(3) ppid(4) ... utime(14) stime(15), i.e. indexes 0, 1, 11, 12.
    let ppid = f.get(1)?.parse().ok()?;
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some((ppid, utime + stime))
}

/// Every PID currently in `/proc` with its parent.
fn parents() -> HashMap<u32, u32> {
    let mut map = HashMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            if let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok())
                && let Some((ppid, _)) = stat(pid)
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

/// CPU time (utime + stime) in microseconds of `root` and every descendant alive now.
/// Kamailio's workers are children of its main process: they are summed here, read while
/// they run (the main process's cutime only counts reaped children).
pub(crate) fn tree_cpu_us(root: u32) -> u64 {
    let ticks: u64 = tree(root)
        .iter()
        .filter_map(|&p| stat(p))
        .map(|(_, t)| t)
        .sum();
    ticks * 1_000_000 / clk_tck()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_line_with_spaces_and_parens_in_the_name() {
        let line = "1234 (kam (x) y) S 1 1234 1234 0 -1 4194560 100 0 0 0 37 12 0 0 20 0 1 0 5 0 0";
        assert_eq!(parse_stat(line), Some((1, 49)));
        assert_eq!(parse_stat("1 (x) S"), None);
    }

    #[test]
    fn own_process_tree_has_cpu_time() {
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
    }
}
