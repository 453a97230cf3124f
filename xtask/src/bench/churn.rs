//! `profiler agent -F 99 --output-dir` beside a host that keeps starting programs the agent has
//! not seen: hundreds of executables with build ids of their own (a few thousand functions each,
//! so large symbol, CFI and DWARF tables), owned and run by an unprivileged user (so each is
//! copied before it is read), each busy for ~100 ms, several a second, plus `churn`'s fork storm
//! and dlopen/dlclose loop. The agent's RSS and open descriptors over time: what it read of a
//! program must be let go once the program is gone.
use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, Result};

use super::{
    long_run::{measure, measured, slope, storm},
    verdict,
    workloads::KillOnDrop,
};
use crate::check;

const RSS_GOAL_MIB: f64 = 64.0;
const SLOPE_GOAL_MIB_PER_MINUTE: f64 = 0.5;
/// Functions per program.
const FUNCTIONS: usize = 3000;
/// A new program every so often.
const EVERY: Duration = Duration::from_millis(200);
const NOBODY: u32 = 65534;

pub fn table(profiler: &Path, src: &Path, dir: &Path, quick: bool) -> Result<String> {
    let (minutes, sample_every, programs) =
        if quick { (2.0, Duration::from_secs(10), 150) } else { (10.0, Duration::from_secs(20), 900) };
    let programs = build_programs(dir, programs)?;
    let seconds = minutes * 60.0;
    eprintln!(
        "xtask bench: agent beside {} new programs a second for {minutes} min",
        1000 / EVERY.as_millis()
    );
    let _storm = storm(src, dir, seconds + 10.0)?;
    let output = dir.join("churn-agent");
    let _ = std::fs::remove_dir_all(&output);
    std::fs::create_dir_all(&output)?;
    let mut agent = Command::new(profiler)
        .args(["agent", "-q", "-F", "99", "-d", &seconds.to_string(), "--output-dir"])
        .arg(&output)
        .stdin(Stdio::null())
        .spawn()
        .context("cannot start the agent")?;
    let launches = dir.join("churn-launches");
    let _launcher = launch(&programs, &launches)?;
    let measures = dir.join("churn-measures");
    let _measuring = measure(agent.id(), sample_every, &measures)?;
    // Waiting, not polling: this program (with DWARF of its own) stays off the CPU, so the agent
    // samples and names only the churn.
    agent.wait()?;
    let points = measured(&measures, seconds)?;
    let started_programs = std::fs::metadata(&launches).map_or(0, |m| m.len());
    let at =
        |minute: f64| points.iter().find(|p| p.0 >= minute).or(points.last()).copied().unwrap_or_default();
    let (first, last) = (at(1.0), points.last().copied().unwrap_or_default());
    let peak = points.iter().map(|p| p.1).fold(0.0, f64::max);
    let after_first_minute: Vec<(f64, f64)> =
        points.iter().filter(|p| p.0 >= 1.0).map(|p| (p.0, p.1)).collect();
    let rss_slope = slope(&after_first_minute);
    let fds: Vec<(f64, f64)> = points.iter().filter(|p| p.0 >= 1.0).map(|p| (p.0, p.2 as f64)).collect();
    let fd_slope = slope(&fds);
    let mut text = format!(
        "## Churn: `profiler agent` beside programs it has not seen\n\n\
         `profiler agent -q -F 99 -d {seconds:.0} --output-dir DIR` (15 s windows) while a new program starts every \
         {} ms ({} started: {} distinct executables of {FUNCTIONS} functions each, built with DWARF and a build id of \
         their own, owned and run by nobody, each busy for 100 ms) and `churn` forks and execs `/bin/true`, loads and \
         unloads a library and creates threads, in loops; the programs are started by a shell. The agent's RSS (VmRSS) and open descriptors every {} s, read by a \
         shell while the benchmark's own program waits off the CPU (sampled, its DWARF would be named too).\n\n\
         | goal | measured | |\n|---|---|---|\n\
         | RSS ≤ {RSS_GOAL_MIB} MiB | {:.1} MiB at 1 min, {:.1} at the end, peak {peak:.1} | {} |\n\
         | RSS flat | {rss_slope:+.2} MiB per minute after the first | {} |\n\
         | descriptors flat | {} at 1 min, {} at the end ({fd_slope:+.1} per minute) | {} |\n\n\
         | minute | RSS (MiB) | open descriptors |\n|---|---|---|\n",
        EVERY.as_millis(),
        started_programs,
        if quick { 150 } else { 900 },
        sample_every.as_secs(),
        first.1,
        last.1,
        verdict(peak <= RSS_GOAL_MIB),
        verdict(rss_slope < SLOPE_GOAL_MIB_PER_MINUTE),
        first.2,
        last.2,
        verdict(fd_slope.abs() < 1.0),
    );
    for (minute, rss, fds) in &points {
        writeln!(text, "| {minute:.1} | {rss:.1} | {fds} |")?;
    }
    text.push('\n');
    Ok(text)
}

/// `count` executables in a directory of nobody's, each a link of one object with a build id of
/// its own.
fn build_programs(dir: &Path, count: usize) -> Result<Vec<PathBuf>> {
    let programs = dir.join("churn-programs");
    let _ = std::fs::remove_dir_all(&programs);
    std::fs::create_dir_all(&programs)?;
    std::os::unix::fs::chown(&programs, Some(NOBODY), Some(NOBODY))?;
    let source = programs.join("many.c");
    std::fs::write(&source, many_functions())?;
    let object = programs.join("many.o");
    check(Command::new("gcc").args(["-O1", "-g", "-c", "-o"]).arg(&object).arg(&source))?;
    eprintln!("xtask bench: linking {count} programs");
    (0..count)
        .map(|i| {
            let program = programs.join(format!("program-{i}"));
            check(
                Command::new("gcc")
                    .arg(format!("-Wl,--build-id=0x{:040x}", i + 1))
                    .arg("-o")
                    .arg(&program)
                    .arg(&object),
            )?;
            std::os::unix::fs::chown(&program, Some(NOBODY), Some(NOBODY))?;
            Ok(program)
        })
        .collect()
}

/// A C program of [`FUNCTIONS`] functions, each calling the next few, started in turn from a
/// table of all of them, that keeps them busy for about 100 ms.
fn many_functions() -> String {
    let mut source = String::from(
        "#include <time.h>\nstatic volatile unsigned long sink;\n\
         static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }\n",
    );
    for i in (0..FUNCTIONS).rev() {
        let next = if i + 1 < FUNCTIONS { format!("if (n > 2) f{}(n / 2);", i + 1) } else { String::new() };
        let _ = writeln!(
            source,
            "__attribute__((noinline)) void f{i}(unsigned long n) {{ for (unsigned long k = 0; k < n; k++) sink += k ^ {i}; {next} }}"
        );
    }
    let table: Vec<String> = (0..FUNCTIONS).map(|i| format!("f{i}")).collect();
    let _ = writeln!(source, "static void (*const table[])(unsigned long) = {{{}}};", table.join(", "));
    let _ = writeln!(
        source,
        "int main(void) {{ double end = now() + 0.1; for (unsigned long i = 0; now() < end; i++) table[i * 7919 % {FUNCTIONS}](256); return 0; }}"
    );
    source
}

/// Starts the programs in turn, one every [`EVERY`], as nobody, from a shell (a small stripped
/// program, where this one, built with DWARF, would be sampled and named too), which writes a
/// byte to `launches` for each.
fn launch(programs: &[PathBuf], launches: &Path) -> Result<KillOnDrop> {
    let list: Vec<String> = programs.iter().map(|p| format!("'{}'", p.display())).collect();
    let script = format!(
        "while :; do for p in {}; do setpriv --reuid={NOBODY} --regid={NOBODY} --clear-groups \"$p\" & \
         printf . >> '{}'; sleep {}; done; done",
        list.join(" "),
        launches.display(),
        EVERY.as_secs_f64()
    );
    let _ = std::fs::remove_file(launches);
    Ok(KillOnDrop(Command::new("sh").args(["-c", &script]).stdin(Stdio::null()).spawn()?))
}
