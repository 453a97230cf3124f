//! `profiler record` on a CPU-bound PHP program (tests/workloads/php/shares.php) on Debian's PHP
//! 8.2 and unstable's 8.4, and on a native program (split.c, one thread) for what a sample costs
//! without PHP, at 99 and 999 Hz, in one run: the program's slowdown, the profiler's CPU per
//! sample and peak RSS, how many samples carry the script's PHP frames and how close the methods'
//! shares come to the 60/30/10 the script burns. Then the eBPF program's time per sample on each
//! PHP and on the native program. No other profiler: there is no maintained out-of-process PHP
//! sampler to install from a package registry.
use std::{ffi::OsString, path::Path};

use anyhow::Result;

use super::scripts::{self, AgainstNative, Program, Script};

/// Debian stable's PHP, as `cargo xtask setup` installs it, run with its php.ini.
const SYSTEM_PHP: &str = "/usr/bin/php8.2";
/// Debian unstable's PHP 8.4, as `cargo xtask setup` unpacks it: its ini and extension
/// directories are not on this machine, so it runs with no php.ini (`-n`), as the tests run it.
const DEBIAN_PHP: &str = ".tools/debian-sid-php8.4/usr/bin/php8.4";
/// shares.php's methods and the share of the script's CPU each burns.
const SHARES: [(&str, f64); 3] = [("alpha", 60.0), ("beta", 30.0), ("gamma", 10.0)];
const PHP_82: &str = "shares.php, Debian's 8.2";
const PHP_84: &str = "shares.php, unstable's 8.4";
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
    let count_rounds = dir.join("count_rounds.php");
    std::fs::write(&count_rounds, COUNT_ROUNDS)?;
    let args: Vec<OsString> = vec![count_rounds.into(), src.join("php/shares.php").into()];
    let with_no_ini = [vec![OsString::from("-n")], args.clone()].concat();
    let section = AgainstNative {
        key: "php",
        language: "PHP",
        programs: vec![
            Program::Script { label: PHP_82, interpreter: SYSTEM_PHP.into(), env: Vec::new(), args },
            Program::Script {
                label: PHP_84,
                interpreter: root.join(DEBIAN_PHP),
                env: Vec::new(),
                args: with_no_ini,
            },
        ],
        script: Script { file_name: "shares.php", shares: &SHARES },
        introduction: format!(
            "`shares.php`: one thread whose methods `Outer\\Worker::alpha`, `::beta` (called from a closure \
             `array_map`, a C function, calls back) and `::gamma` burn 60/30/10% of its CPU, in rounds of about \
             2.5 ms, on Debian's PHP 8.2 (`{SYSTEM_PHP}`, with its php.ini) and unstable's 8.4 (`{DEBIAN_PHP} -n`); \
             beside it, for what a sample costs without PHP, `split.c` with one thread. No other profiler is run: \
             there is no maintained out-of-process PHP sampler to install from crates.io, PyPI, npm or Debian \
             (phpspy is packaged on none of them and is built from its repository; Debian's `php-excimer` is an \
             extension the program itself must start), so each PHP row is held against the native one. The script prints no progress and its rounds call nothing \
             another file can wrap: a wrapper includes it with no time to run, then calls its `Outer\\Worker::run` \
             once per round (a finish 100 µs ahead, a round taking over a millisecond) and counts them; its stacks \
             lack `Worker::start`'s frame and start at the wrapper's `{{main}}`."
        ),
    };
    scripts::against_native(profiler, src, dir, repetitions, &section)
}
