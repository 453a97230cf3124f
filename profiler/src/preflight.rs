//! Checks run before recording, each failing with a message that says what to do.
use anyhow::{Result, bail};

const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;
const BTF_PATH: &str = "/sys/kernel/btf/vmlinux";

/// Loading BPF programs and opening system-wide perf events needs CAP_BPF and CAP_PERFMON (or
/// CAP_SYS_ADMIN, which implies both).
pub fn check_privileges() -> Result<()> {
    let caps = effective_capabilities().unwrap_or(0);
    let has = |cap: u32| caps & (1 << cap) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        return Ok(());
    }
    bail!("profiler needs root, or the CAP_BPF and CAP_PERFMON capabilities: run it with sudo")
}

fn effective_capabilities() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let hex = status.lines().find_map(|line| line.strip_prefix("CapEff:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

/// The program reads task registers through BTF-typed helpers.
pub fn check_btf() -> Result<()> {
    if std::path::Path::new(BTF_PATH).exists() {
        return Ok(());
    }
    bail!("kernel BTF not found at {BTF_PATH}: profiler needs a kernel built with CONFIG_DEBUG_INFO_BTF=y")
}

/// The kernel refuses frequencies above `kernel.perf_event_max_sample_rate`.
pub fn check_frequency(hz: u64) -> Result<()> {
    let max = std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok());
    match max {
        Some(max) if hz > max => bail!(
            "-F {hz} is above the kernel's limit of {max} Hz (raise it with: sysctl kernel.perf_event_max_sample_rate={hz})"
        ),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_capabilities() {
        assert!(effective_capabilities().is_some());
    }

    #[test]
    fn absurd_frequency_is_refused() {
        let err = check_frequency(u64::MAX).unwrap_err().to_string();
        assert!(err.contains("above the kernel's limit"), "{err}");
        assert!(check_frequency(1).is_ok());
    }
}
