//! Memory from /proc (Linux): a process's resident set.

/// VmRSS of a process in kB, from /proc/<pid>/status.
pub fn vm_rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
