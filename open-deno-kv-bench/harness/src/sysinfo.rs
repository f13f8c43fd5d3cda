//! The machine a run was on, and a process's peak memory.
//!
//! Peak memory is the process's own `VmHWM` ("high water mark" of resident memory) read from
//! `/proc/self/status` by each child just before it exits, and reported to the parent with its
//! results. Why not `getrusage(RUSAGE_CHILDREN)` in the parent: its `ru_maxrss` is the largest
//! peak of *all* children waited for so far, so children run one after another cannot be told
//! apart, and `wait4` (per-child usage) would need `unsafe` FFI, which this workspace forbids.
//! `VmHWM` is per process, exact, and needs nothing but a file read (Linux only; elsewhere the
//! figure is reported as unknown).

use serde_json::{Value, json};

/// The peak resident set size of this process in KiB, if the platform tells.
pub fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status_field_kib(&status, "VmHWM:")
}

/// Bytes this process has caused to be written to storage so far (`write_bytes` of
/// `/proc/self/io`: what reached the block layer, journal and page writeback included), if the
/// platform tells.
pub fn storage_write_bytes() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    io.lines()
        .find_map(|line| line.strip_prefix("write_bytes:"))
        .and_then(|n| n.trim().parse().ok())
}

/// A `kB` field of a `/proc/.../status` or `/proc/meminfo` text.
fn status_field_kib(text: &str, field: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

/// The 1, 5 and 15 minute load averages, as `/proc/loadavg` shows them (other work on the
/// machine skews a run; the report shows the load at its start and end).
pub fn load_average() -> Option<String> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    Some(
        text.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// The CPU model, core count, kernel and memory, for the report.
pub fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            (name.trim() == "model name").then(|| value.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| std::env::consts::OS.to_owned());
    let mem_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| status_field_kib(&text, "MemTotal:"));
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    json!({
        "cpus": cpus,
        "cpu_model": cpu,
        "kernel": kernel,
        "memory_gib": mem_kib.map(|k| (k as f64 / 1024.0 / 1024.0 * 10.0).round() / 10.0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_kib_fields() {
        let text = "Name:\tx\nVmPeak:\t  1000 kB\nVmHWM:\t   2048 kB\n";
        assert_eq!(status_field_kib(text, "VmHWM:"), Some(2048));
        assert_eq!(status_field_kib(text, "VmRSS:"), None);
    }

    #[test]
    fn this_process_has_a_peak_on_linux() {
        if cfg!(target_os = "linux") {
            assert!(peak_rss_kib().is_some_and(|k| k > 0));
        }
    }
}
