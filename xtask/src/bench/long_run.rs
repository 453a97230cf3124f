//! A long `profiler record -a` under a churn workload (a storm of short processes, a library
//! loaded and unloaded in a loop, threads created and joined): the profiler's RSS every so often,
//! and its slope once the first minute is over, with outputs that aggregate (flame graph, folded
//! stacks).
use std::{
    fmt::Write as _,
    path::Path,
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, Result};

use super::workloads::{KillOnDrop, compile_c};
use crate::check;

pub fn table(profiler: &Path, src: &Path, dir: &Path, quick: bool) -> Result<String> {
    let (minutes, every) =
        if quick { (2.0, Duration::from_secs(5)) } else { (10.0, Duration::from_secs(10)) };
    let seconds = minutes * 60.0;
    eprintln!("xtask bench: record -a under churn for {minutes} min");
    let _workload = storm(src, dir, seconds + 10.0)?;
    let mut recorder = Command::new(profiler)
        .args(["record", "-a", "-q", "-F", "999", "-d", &seconds.to_string()])
        .arg("-o")
        .arg(dir.join("churn.svg"))
        .arg("-o")
        .arg(dir.join("churn.folded"))
        .stdin(Stdio::null())
        .spawn()
        .context("cannot start the profiler")?;
    let measures = dir.join("long-run-measures");
    let _measuring = measure(recorder.id(), every, &measures)?;
    // Waiting, not polling: this program (with DWARF of its own) stays off the CPU, so the
    // recording samples and names only the churn.
    recorder.wait()?;
    let points: Vec<(f64, f64)> =
        measured(&measures, seconds)?.into_iter().map(|(minute, rss, _)| (minute, rss)).collect();
    let after_first_minute: Vec<(f64, f64)> = points.iter().copied().filter(|&(t, _)| t >= 1.0).collect();
    let slope = slope(&after_first_minute);
    let mut text = format!(
        "## Long run: `record -a` under churn\n\n\
         `profiler record -a -q -F 999 -d {seconds:.0} -o churn.svg -o churn.folded` while `churn` forks and execs \
         `/bin/true` in a loop, loads and unloads a library in a loop and creates and joins threads in a loop. \
         The profiler's RSS (VmRSS) every {} s, read by a shell while the benchmark's own program waits off the \
         CPU (sampled, its DWARF would be named too).\n\n\
         RSS slope after the first minute: **{slope:.2} MiB per minute** (goal: under 1, {}).\n\n\
         | minute | RSS (MiB) |\n|---|---|\n",
        every.as_secs(),
        super::verdict(slope < 1.0)
    );
    for (minute, rss) in points.iter().step_by(if quick { 2 } else { 3 }) {
        writeln!(text, "| {minute:.1} | {rss:.1} |")?;
    }
    text.push('\n');
    Ok(text)
}

/// `churn` (built from `src` into `dir`) for `seconds`: a storm of short processes, a library
/// loaded and unloaded, threads created and joined, all in loops.
pub(super) fn storm(src: &Path, dir: &Path, seconds: f64) -> Result<KillOnDrop> {
    let churn = dir.join("churn");
    compile_c(&src.join("churn.c"), &churn, &["-O2", "-g"])?;
    let plugin = dir.join("libplugin.so");
    check(
        Command::new("gcc")
            .args(["-O2", "-g", "-shared", "-fPIC", "-o"])
            .arg(&plugin)
            .arg(src.join("plugin.c")),
    )?;
    let workload = Command::new(&churn).arg(seconds.to_string()).arg(&plugin).stdin(Stdio::null()).spawn();
    Ok(KillOnDrop(workload.context("cannot start the churn workload")?))
}

/// Writes to `measures`, every `every` while process `pid` lives, a line of the seconds since
/// the start, its RSS (KiB) and its open descriptors, from a shell: this program, built with
/// DWARF, would be sampled and named by a system-wide profiler.
pub(super) fn measure(pid: u32, every: Duration, measures: &Path) -> Result<KillOnDrop> {
    let script = format!(
        "start=$(date +%s.%N); while sleep {every}; do \
           rss=$(awk '/^VmRSS/ {{print $2}}' /proc/{pid}/status 2>/dev/null); [ -n \"$rss\" ] || break; \
           fds=$(ls /proc/{pid}/fd | wc -l); \
           awk -v now=$(date +%s.%N) -v start=$start -v rss=$rss -v fds=$fds 'BEGIN {{ print now - start, rss, fds }}'; \
         done > '{measures}'",
        every = every.as_secs_f64(),
        measures = measures.display()
    );
    Ok(KillOnDrop(Command::new("sh").args(["-c", &script]).stdin(Stdio::null()).spawn()?))
}

/// What [`measure`] wrote while the run lasted (`seconds`): the minute, the RSS (MiB) and the
/// open descriptors of each line.
pub(super) fn measured(measures: &Path, seconds: f64) -> Result<Vec<(f64, f64, usize)>> {
    let points = std::fs::read_to_string(measures)?
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace().map(str::parse::<f64>);
            let (Some(Ok(at)), Some(Ok(rss_kib)), Some(Ok(fds))) =
                (fields.next(), fields.next(), fields.next())
            else {
                return None;
            };
            // Not once its run is over: it is letting go of everything then.
            (at < seconds).then_some((at / 60.0, rss_kib / 1024.0, fds as usize))
        })
        .collect();
    Ok(points)
}

/// The resident set of a process, in MiB.
pub(super) fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

/// The least-squares slope of `points` (y per x).
pub(super) fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if n < 2.0 {
        return 0.0;
    }
    let (mean_x, mean_y) =
        (points.iter().map(|p| p.0).sum::<f64>() / n, points.iter().map(|p| p.1).sum::<f64>() / n);
    let covariance: f64 = points.iter().map(|(x, y)| (x - mean_x) * (y - mean_y)).sum();
    let variance: f64 = points.iter().map(|(x, _)| (x - mean_x).powi(2)).sum();
    if variance == 0.0 { 0.0 } else { covariance / variance }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_squares_slope() {
        assert_eq!(slope(&[(1.0, 10.0), (2.0, 12.0), (3.0, 14.0)]), 2.0);
        assert_eq!(slope(&[(1.0, 10.0), (2.0, 10.0)]), 0.0);
        assert_eq!(slope(&[(1.0, 10.0)]), 0.0);
    }
}
