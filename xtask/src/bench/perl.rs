//! `profiler record` on a CPU-bound Perl program (tests/workloads/perl/shares.pl) on Debian's Perl
//! 5.36 and unstable's 5.42, and on a native program (split.c, one thread) for what a sample costs
//! without Perl, at 99 and 999 Hz, in one run: the program's slowdown, the profiler's CPU per
//! sample and peak RSS, how many samples carry the script's Perl frames and how close the subs'
//! shares come to the 60/30/10 the script burns. Then the eBPF program's time per sample on each
//! Perl and on the native program. No other profiler: there is no out-of-process Perl sampler to
//! install from a package registry.
use std::{ffi::OsString, path::Path};

use anyhow::Result;

use super::scripts::{self, AgainstNative, Program, Script};
use crate::setup::{DEBIAN_PERL_DIR, DEBIAN_PERL_LIB};

/// Debian stable's Perl.
const SYSTEM_PERL: &str = "/usr/bin/perl";
/// shares.pl's subs and the share of the script's CPU each burns.
const SHARES: [(&str, f64); 3] = [("alpha", 60.0), ("beta", 30.0), ("gamma", 10.0)];
const PERL_536: &str = "shares.pl, Debian's 5.36";
const PERL_542: &str = "shares.pl, unstable's 5.42";
/// Runs shares.pl (its first argument) for SECONDS (its second), one round per call of its
/// `Outer::Worker::run`, and with `PROGRESS=1` prints `SECONDS ROUNDS` about every 100 ms.
/// shares.pl prints no progress: it is run (`do`) with no time to run, which prints `main PID`,
/// then `run` given 100 µs runs one round (each takes over a millisecond) and returns, so that no
/// frame of this file but its own `<main>` is on the stack while a round burns.
const COUNT_ROUNDS: &str = r#"use strict;
use warnings;
use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC);
my ($script, $seconds) = @ARGV;
{
    local @ARGV = ('0');
    # Its last statement's value is run's: false, for no time. A failure sets $@.
    do $script;
    die "$script: $@" if $@;
}
my $progress = ($ENV{PROGRESS} // '') eq '1';
my $start = my $shown = clock_gettime(CLOCK_MONOTONIC);
my $finish = $start + $seconds;
my $rounds = 0;
while ((my $now = clock_gettime(CLOCK_MONOTONIC)) < $finish) {
    Outer::Worker::run(0.0001);
    # None when run started after its finish: it returned at once.
    $rounds++ if clock_gettime(CLOCK_MONOTONIC) - $now >= 0.0001;
    if ($progress && $now - $shown >= 0.1) {
        printf("%.3f %d\n", $now - $start, $rounds);
        $shown = $now;
    }
}
"#;

pub fn table(profiler: &Path, root: &Path, src: &Path, dir: &Path, repetitions: usize) -> Result<String> {
    let count_rounds = dir.join("count_rounds.pl");
    std::fs::write(&count_rounds, COUNT_ROUNDS)?;
    let args: Vec<OsString> = vec![count_rounds.into(), src.join("perl/shares.pl").into()];
    let unpacked = root.join(DEBIAN_PERL_DIR);
    let library = std::env::join_paths(DEBIAN_PERL_LIB.iter().map(|sub| unpacked.join(sub)))?;
    let section = AgainstNative {
        key: "perl",
        language: "Perl",
        programs: vec![
            Program::Script {
                label: PERL_536,
                interpreter: SYSTEM_PERL.into(),
                env: Vec::new(),
                args: args.clone(),
            },
            Program::Script {
                label: PERL_542,
                interpreter: unpacked.join("usr/bin/perl"),
                env: vec![("PERL5LIB", library)],
                args,
            },
        ],
        script: Script { file_name: "shares.pl", shares: &SHARES },
        introduction: format!(
            "`shares.pl`: one thread whose subs `Outer::Worker::alpha`, `::beta` (called from a `sort` block, \
             which runs in a loop of ops of its own under the C function that sorts) and `::gamma` burn 60/30/10% \
             of its CPU, all under a `map` block, in rounds of about 2.5 ms, on Debian's Perl 5.36 (`{SYSTEM_PERL}`) \
             and unstable's 5.42 (`{DEBIAN_PERL_DIR}/usr/bin/perl`, `PERL5LIB` its own library, as `cargo xtask setup` unpacks it); beside it, for \
             what a sample costs without Perl, `split.c` with one thread. No other profiler is run: there is no \
             out-of-process Perl sampler to install from crates.io, PyPI, npm or Debian (Devel::NYTProf runs \
             inside the program), so each Perl row is held against the native one. A wrapper runs the script \
             with no time to run, then calls its `Outer::Worker::run` once per round (100 µs given, a round taking \
             over a millisecond) and counts them; its stacks start at the wrapper's `<main>`."
        ),
    };
    scripts::against_native(profiler, src, dir, repetitions, &section)
}
