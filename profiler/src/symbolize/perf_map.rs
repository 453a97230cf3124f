//! JIT symbols from perf map files (`/tmp/perf-PID.map`: `START SIZE NAME` per line, hex), the
//! convention of V8/Node, the JVM agents, .NET, LuaJIT and others.
//!
//! A map is read when a sample first lands in the process's anonymous memory, and read again
//! when a later sample lands outside every known entry (the JIT emitted more code), at most once
//! per [`REREAD_INTERVAL_NS`]. Runtimes may delete the file at exit: what was read is kept.
use std::collections::HashMap;

/// How often a process's perf map may be re-read.
const REREAD_INTERVAL_NS: u64 = 100_000_000;

#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    start: u64,
    size: u64,
    name: String,
}

#[derive(Debug, Default)]
struct PerfMap {
    /// Sorted by start.
    entries: Vec<Entry>,
    read_at_ns: Option<u64>,
}

impl PerfMap {
    fn find(&self, addr: u64) -> Option<&Entry> {
        let index = self.entries.partition_point(|e| e.start <= addr);
        let entry = self.entries.get(index.checked_sub(1)?)?;
        (addr - entry.start < entry.size).then_some(entry)
    }
}

#[derive(Debug, Default)]
pub struct PerfMaps {
    by_tgid: HashMap<u32, PerfMap>,
}

impl PerfMaps {
    /// Notes that a sample of process `tgid` ran at `addr` in anonymous memory, at `now_ns`.
    pub fn observe(&mut self, tgid: u32, addr: u64, now_ns: u64) {
        let map = self.by_tgid.entry(tgid).or_default();
        let stale = map.read_at_ns.is_none_or(|at| now_ns.saturating_sub(at) >= REREAD_INTERVAL_NS);
        if map.find(addr).is_none() && stale {
            map.read_at_ns = Some(now_ns);
            if let Some(entries) = read(tgid) {
                map.entries = entries;
            }
        }
    }

    /// The JIT symbol at `addr` in process `tgid`, if its perf map names one.
    pub fn name(&self, tgid: u32, addr: u64) -> Option<&str> {
        Some(&self.by_tgid.get(&tgid)?.find(addr)?.name)
    }
}

/// The perf map of a process: in its own mount namespace (containers write it in theirs, named
/// after the pid there), else in ours.
fn read(tgid: u32) -> Option<Vec<Entry>> {
    let ns_pid = namespace_pid(tgid).unwrap_or(tgid);
    let candidates = [format!("/proc/{tgid}/root/tmp/perf-{ns_pid}.map"), format!("/tmp/perf-{tgid}.map")];
    let text = candidates.iter().find_map(|path| std::fs::read_to_string(path).ok())?;
    Some(parse(&text))
}

/// The process's pid in its own pid namespace (the last `NSpid:` field).
fn namespace_pid(tgid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{tgid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("NSpid:"))?.split_whitespace().last()?.parse().ok()
}

fn parse(text: &str) -> Vec<Entry> {
    let hex = |field: &str| u64::from_str_radix(field.trim_start_matches("0x"), 16).ok();
    let mut entries: Vec<Entry> = text
        .lines()
        .filter_map(|line| {
            let mut fields = line.splitn(3, ' ');
            let start = hex(fields.next()?)?;
            let size = hex(fields.next()?)?;
            let name = fields.next()?.trim();
            (size > 0 && !name.is_empty()).then(|| Entry { start, size, name: name.to_owned() })
        })
        .collect();
    // Later lines win for the same start (code regenerated in place).
    entries.reverse();
    entries.sort_by_key(|e| e.start);
    entries.dedup_by_key(|e| e.start);
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_perf_map_lines() {
        let text = "7f0000001000 40 LazyCompile:*foo bar.js:1\n0x7f0000002000 0x10 stub\ngarbage\n7f0000003000 0 empty\n";
        let entries = parse(text);
        assert_eq!(entries.len(), 2);
        let map = PerfMap { entries, read_at_ns: Some(0) };
        assert_eq!(map.find(0x7f0000001020).unwrap().name, "LazyCompile:*foo bar.js:1");
        assert_eq!(map.find(0x7f0000001040), None);
        assert_eq!(map.find(0x7f000000200f).unwrap().name, "stub");
        assert_eq!(map.find(0x10), None);
    }

    #[test]
    fn reads_the_map_of_a_process_and_keeps_it() {
        let pid = std::process::id();
        let path = format!("/tmp/perf-{pid}.map");
        std::fs::write(&path, "1000 100 jitted\n").unwrap();
        let mut maps = PerfMaps::default();
        maps.observe(pid, 0x1010, 1);
        std::fs::remove_file(&path).unwrap();
        maps.observe(pid, 0x5000, 1 + REREAD_INTERVAL_NS);
        assert_eq!(maps.name(pid, 0x1010), Some("jitted"), "kept after the file is gone");
        assert_eq!(maps.name(pid, 0x5000), None);
    }
}
