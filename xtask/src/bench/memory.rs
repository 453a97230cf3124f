//! Where the profiler's resident memory goes at 999 Hz with default options: its binary, the
//! ring buffer, the heap (stacks, names, unwind tables being used), other libraries; from
//! `/proc/PID/smaps` while it records both CPUs busy.
use std::{
    collections::BTreeMap,
    fmt::Write as _,
    path::Path,
    process::{Command, Stdio},
    thread::sleep,
    time::Duration,
};

use anyhow::{Context as _, Result};

use super::workloads::{KillOnDrop, Workload};

pub fn table(profiler: &Path, dir: &Path, workload: &Workload) -> Result<String> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut busy = Vec::new();
    for _ in 0..cpus {
        let child =
            Command::new(&workload.binary).arg("0").args(&workload.args).stdout(Stdio::null()).spawn()?;
        busy.push(KillOnDrop(child));
    }
    let pids: Vec<String> = busy.iter().map(|c| c.0.id().to_string()).collect();
    let mut command = Command::new(profiler);
    command.args(["record", "-q", "-F", "999", "-d", "8"]);
    for pid in &pids {
        command.args(["-p", pid]);
    }
    let mut recorder = command
        .arg("-o")
        .arg(dir.join("memory.svg"))
        .stdin(Stdio::null())
        .spawn()
        .context("cannot start the profiler")?;
    sleep(Duration::from_secs(6));
    let smaps = std::fs::read_to_string(format!("/proc/{}/smaps", recorder.id()))?;
    recorder.wait()?;
    let parts = breakdown(&smaps, profiler);
    let total: f64 = parts.values().sum();
    let mut text = format!(
        "## Memory\n\n`profiler record -q -F 999 -d 8 -p PID...` (default options) on {} copies of `{}`, both CPUs \
         busy: resident memory by mapping after 6 s (`/proc/PID/smaps`), {total:.1} MiB in all.\n\n\
         | part | RSS (MiB) |\n|---|---|\n",
        pids.len(),
        workload.name
    );
    for (part, mib) in &parts {
        writeln!(text, "| {part} | {mib:.1} |")?;
    }
    text.push('\n');
    Ok(text)
}

/// Resident MiB by part: the profiler's own binary, the ring buffer (a BPF map mapped into the
/// process), the heap (anonymous memory), files mapped to read them (binaries being symbolized
/// or unwound), the C library and others.
fn breakdown(smaps: &str, profiler: &Path) -> BTreeMap<&'static str, f64> {
    let mut parts = BTreeMap::new();
    let mut part = "";
    for line in smaps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields
            .first()
            .is_some_and(|f| f.contains('-') && f.chars().all(|c| c.is_ascii_hexdigit() || c == '-'))
        {
            let name = fields.get(5).copied().unwrap_or("");
            part = match name {
                _ if Path::new(name) == profiler => "profiler binary",
                "anon_inode:bpf-map" => "ring buffer and BPF maps",
                "" | "[heap]" => "heap",
                "[stack]" => "stacks",
                _ if name.starts_with('[') => "kernel-provided",
                _ if name.contains("/lib") => "shared libraries",
                _ => "files read (binaries symbolized or unwound)",
            };
        } else if fields.first() == Some(&"Rss:") {
            let kib: f64 = fields.get(1).and_then(|k| k.parse().ok()).unwrap_or(0.0);
            *parts.entry(part).or_insert(0.0) += kib / 1024.0;
        }
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resident_memory_by_part() {
        let smaps = "55d0-55e0 r-xp 00000000 08:01 12 /usr/bin/profiler\nRss:  2048 kB\n\
                     7f00-7f10 rw-s 00000000 00:0f 3 anon_inode:bpf-map\nRss:  4096 kB\n\
                     7f20-7f30 rw-p 00000000 00:00 0 \nRss:  1024 kB\n\
                     7f40-7f50 r--p 00000000 08:01 9 /usr/lib/x86_64-linux-gnu/libc.so.6\nRss:  512 kB\n";
        let parts = breakdown(smaps, Path::new("/usr/bin/profiler"));
        assert_eq!(parts["profiler binary"], 2.0);
        assert_eq!(parts["ring buffer and BPF maps"], 4.0);
        assert_eq!(parts["heap"], 1.0);
        assert_eq!(parts["shared libraries"], 0.5);
    }
}
