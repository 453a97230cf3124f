//! `profiler record` on a CPU-bound PHP program (tests/workloads/php/shares.php) on Debian's PHP
//! 8.2 and unstable's 8.4, and on a native program (split.c, one thread) for what a sample costs
//! without PHP, at 99 and 999 Hz, in one run: the program's slowdown, the profiler's CPU per
//! sample and peak RSS, how many samples carry the script's PHP frames and how close the methods'
//! shares come to the 60/30/10 the script burns. Then the eBPF program's time per sample on each
//! PHP and on the native program. No other profiler: there is no maintained out-of-process PHP
//! sampler to install from a package registry.
use std::{ffi::OsString, fmt::Write as _, path::Path, process::Command};

use anyhow::{Result, bail};

use super::scripts::{
    self, AFTER, BEFORE, NATIVE, PROFILED, Program, RATES, Run, Script, column, header, per_sample_goal,
};

/// Debian stable's PHP, as `cargo xtask setup` installs it, run with its php.ini.
const SYSTEM_PHP: &str = "/usr/bin/php8.2";
/// Debian unstable's PHP 8.4, as `cargo xtask setup` unpacks it: its ini and extension
/// directories are not on this machine, so it runs with no php.ini (`-n`), as the tests run it.
const DEBIAN_PHP: &str = ".tools/debian-sid-php8.4/usr/bin/php8.4";
/// shares.php's methods and the share of the script's CPU each burns.
const SHARES: [(&str, f64); 3] = [("alpha", 60.0), ("beta", 30.0), ("gamma", 10.0)];
const PHP_82: &str = "shares.php, Debian's 8.2";
const PHP_84: &str = "shares.php, unstable's 8.4";
const READY: &str = "profiler: recording";
/// Runs shares.php (its first argument) for SECONDS (its second), one round per call of its
/// `Outer\Worker::run`, and with `PROGRESS=1` prints `SECONDS ROUNDS` about every 100 ms.
/// shares.php prints no progress and its rounds call nothing that another file can wrap (its
/// calls of PHP's functions are qualified, and `Worker::start` makes a `Worker` of its own):
/// shares.php is included with no time to run, and `run` given a finish 100 µs ahead runs one
/// round (each takes over a millisecond) and returns, so that no frame of this file but its own
/// `{main}` is on the stack while a round burns; `Worker::start`'s frame is missing.
const COUNT_ROUNDS: &str = r#"<?php
$script = $argv[1];
$seconds = (float) $argv[2];
// shares.php defines Outer\Worker, prints `main PID` and runs for no time.
$argv = [$argv[0], '0'];
$argc = 2;
include $script;
$progress = getenv('PROGRESS') === '1';
$worker = new \Outer\Worker();
$start = $shown = hrtime(true);
$finish = $start + (int) ($seconds * 1e9);
$rounds = 0;
while (($now = hrtime(true)) < $finish) {
    $worker->run($now + 100000);
    // None when run started after its finish: it returned at once.
    if (hrtime(true) - $now >= 100000) {
        $rounds++;
    }
    if ($progress && $now - $shown >= 100000000) {
        printf("%.3f %d\n", ($now - $start) / 1e9, $rounds);
        flush();
        $shown = $now;
    }
}
"#;

pub fn table(profiler: &Path, root: &Path, src: &Path, dir: &Path, repetitions: usize) -> Result<String> {
    let native = Program::native(src, dir)?;
    let count_rounds = dir.join("count_rounds.php");
    std::fs::write(&count_rounds, COUNT_ROUNDS)?;
    let args: Vec<OsString> = vec![count_rounds.into(), src.join("php/shares.php").into()];
    let with_no_ini = [vec![OsString::from("-n")], args.clone()].concat();
    let phps = [
        Program::Script { label: PHP_82, interpreter: SYSTEM_PHP.into(), env: Vec::new(), args },
        Program::Script {
            label: PHP_84,
            interpreter: root.join(DEBIAN_PHP),
            env: Vec::new(),
            args: with_no_ini,
        },
    ];
    for php in &phps {
        check_runs(php)?;
    }
    let cases: Vec<(u64, &Program)> =
        RATES.iter().flat_map(|&hz| phps.iter().chain([&native]).map(move |program| (hz, program))).collect();
    let mut runs: Vec<Vec<Run>> = cases.iter().map(|_| Vec::new()).collect();
    for repetition in 0..repetitions {
        // Alternate the order, so that drift of the machine does not favour one.
        let mut order: Vec<(usize, &(u64, &Program))> = cases.iter().enumerate().collect();
        if repetition % 2 == 1 {
            order.reverse();
        }
        for (c, &(hz, program)) in order {
            eprintln!("xtask bench: php · {} · {} · run {}", label(hz), program.label(), repetition + 1);
            runs[c].push(measure(profiler, program, hz, dir)?);
        }
    }
    let mut text = format!(
        "## PHP (against native samples)\n\n\
         `shares.php`: one thread whose methods `Outer\\Worker::alpha`, `::beta` (called from a closure \
         `array_map`, a C function, calls back) and `::gamma` burn 60/30/10% of its CPU, in rounds of about \
         2.5 ms, on Debian's PHP 8.2 (`{SYSTEM_PHP}`, with its php.ini) and unstable's 8.4 (`{DEBIAN_PHP} -n`); \
         beside it, for what a sample costs without PHP, `split.c` with one thread. No other profiler is run: \
         there is no maintained out-of-process PHP sampler to install from crates.io, PyPI, npm or Debian \
         (phpspy is packaged on none of them and is built from its repository; Debian's `php-excimer` is an \
         extension the program itself must start), so each PHP row is held against the native one. The script prints no progress and its rounds call nothing \
         another file can wrap: a wrapper includes it with no time to run, then calls its `Outer\\Worker::run` \
         once per round (a finish 100 µs ahead, a round taking over a millisecond) and counts them; its stacks \
         lack `Worker::start`'s frame and start at the wrapper's `{{main}}`. Each runs alone for {BEFORE} s, is \
         profiled for {PROFILED} s (`profiler record -p PID -F HZ -o php.folded`, stopped with SIGINT), then runs \
         alone again for {AFTER} s; medians of {repetitions} run(s), the order alternating. *Target slowdown*: \
         its peak rounds per second (best one-second window) while profiled against its peak alone. *Tool CPU \
         while recording*: from half a second after the profiler says it samples until it is stopped (every \
         thread, from schedstat), and that per sample it took (naming costs once per file, PHP's and libc's, are \
         in it). *In all*: start to output written. *Peak RSS*: the profiler's. *With PHP frames*: samples \
         holding a frame of shares.php. *Share error*: largest distance, in points, between a method's share of \
         those samples and what it burns.\n\n"
    );
    text.push_str(&header("PHP"));
    for (c, &(hz, program)) in cases.iter().enumerate() {
        text.push_str(&scripts::row(&label(hz), program, &runs[c]));
    }
    text.push('\n');
    let (costs, against_native) = scripts::kernel_cost(profiler, "php", &phps, &native, dir, repetitions)?;
    text.push_str(&costs);
    text.push_str("#### Against native samples, and goals\n\n| goal | measured | |\n|---|---|---|\n");
    let find = |label: &str, hz: u64| {
        cases.iter().position(|&(at, program)| at == hz && program.label() == label).map(|c| &runs[c])
    };
    for hz in RATES {
        let Some(native) = find(NATIVE, hz) else { continue };
        for php in phps.iter().map(Program::label) {
            let Some(ours) = find(php, hz) else { continue };
            let (slowdown, native_slowdown) = (column(ours, |r| r.slowdown), column(native, |r| r.slowdown));
            writeln!(
                text,
                "| target slowdown ({php}) at {hz} Hz, against the native program's (no goal) | {slowdown:.1}% vs {native_slowdown:.1}% | – |",
            )?;
            text.push_str(&per_sample_goal(
                "PHP",
                php,
                hz,
                column(ours, |r| r.us_per_sample),
                column(native, |r| r.us_per_sample),
            ));
            let (rss, native_rss) = (column(ours, |r| r.rss_mib), column(native, |r| r.rss_mib));
            writeln!(
                text,
                "| peak RSS ({php}) at {hz} Hz, against the native program's (no goal) | {rss:.1} vs {native_rss:.1} MiB ({:+.1} MiB) | – |",
                rss - native_rss
            )?;
        }
    }
    text.push_str(&against_native);
    text.push('\n');
    Ok(text)
}

fn label(hz: u64) -> String {
    format!("`profiler record -F {hz}`")
}

/// Fails unless `php` runs shares.php through the wrapper and counts its rounds.
fn check_runs(php: &Program) -> Result<()> {
    let out = php.command(|path| Command::new(path), "0.5").env("PROGRESS", "1").output()?;
    let said = String::from_utf8_lossy(&out.stdout);
    let rounds = said.lines().last().and_then(|line| line.split_whitespace().nth(1)?.parse::<u64>().ok());
    if !out.status.success() || !said.starts_with("main ") || rounds.unwrap_or(0) == 0 {
        bail!(
            "{} does not run shares.php: run `cargo xtask setup` ({}: {said}{})",
            php.label(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

fn measure(profiler: &Path, program: &Program, hz: u64, dir: &Path) -> Result<Run> {
    let folded = dir.join("php.folded");
    let record = |pid: &str| {
        let mut record = Command::new(profiler);
        record.args(["record", "-p", pid, "-F", &hz.to_string(), "-o"]).arg(&folded);
        record
    };
    scripts::measure(program, record, READY, &folded, &Script { file_name: "shares.php", shares: &SHARES })
}
