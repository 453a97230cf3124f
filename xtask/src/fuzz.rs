//! `cargo xtask fuzz`: the cargo-fuzz targets of `profiler/fuzz`, each for a while, starting
//! from the committed seeds (`profiler/fuzz/seeds/TARGET`), one per CPU at a time; what libFuzzer
//! finds goes to the ignored `corpus/` and `artifacts/` folders, and its output to
//! `artifacts/TARGET.log`.
use std::{
    fs::File,
    path::Path,
    process::{Command, ExitStatus},
};

use anyhow::{Context as _, Result, bail};

use crate::{check, setup};

/// Seconds per target when `cargo xtask test` runs them.
pub const BRIEF_SECONDS: u32 = 15;
const TARGETS: [&str; 12] = [
    "decode_record",
    "unwind_stack",
    "raw_recording",
    "elf_file",
    "proc_text",
    "task_event",
    "hostile_names",
    "python_line_table",
    "python_code_object",
    "hotspot_walk",
    "v8_walk",
    "jitdump",
];

pub fn run(root: &Path, seconds: u32, targets: &[String]) -> Result<()> {
    let fuzz_dir = root.join("profiler/fuzz");
    let cargo_fuzz = root.join(".tools/bin/cargo-fuzz");
    let toolchain = setup::ebpf_toolchain(root)?;
    let chosen: Vec<&str> =
        if targets.is_empty() { TARGETS.to_vec() } else { targets.iter().map(String::as_str).collect() };
    let cargo_fuzz = |args: &[&str]| {
        let mut command = Command::new("rustup");
        command.args(["run", &toolchain]).arg(&cargo_fuzz).args(args).current_dir(&fuzz_dir);
        command
    };
    check(&mut cargo_fuzz(&["build"]))?;
    std::fs::create_dir_all(fuzz_dir.join("artifacts"))?;
    // A fuzzer keeps one CPU busy: one per CPU at a time, each writing to a log of its own.
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    for batch in chosen.chunks(cpus) {
        let mut running = Vec::new();
        for &target in batch {
            eprintln!("xtask: fuzzing {target} for {seconds} s");
            let corpus = fuzz_dir.join("corpus").join(target);
            std::fs::create_dir_all(&corpus)?;
            let log = fuzz_dir.join("artifacts").join(format!("{target}.log"));
            let output = File::create(&log).with_context(|| format!("create {}", log.display()))?;
            let mut command = cargo_fuzz(&["run", target]);
            command
                .arg(&corpus)
                .arg(fuzz_dir.join("seeds").join(target))
                .args(["--", &format!("-max_total_time={seconds}")])
                .stdout(output.try_clone()?)
                .stderr(output);
            let child = command.spawn().with_context(|| format!("cannot run {command:?}"))?;
            running.push((target, child, log));
        }
        // All of the batch end before a failure is told, so that none is left running.
        let ended: Vec<_> =
            running.into_iter().map(|(target, mut child, log)| (target, child.wait(), log)).collect();
        for (target, status, log) in ended {
            report(target, status?, &log)?;
        }
    }
    Ok(())
}

/// How fuzz target `target` ended: its whole log if it failed, libFuzzer's last word (how many
/// inputs it ran) otherwise.
fn report(target: &str, status: ExitStatus, log: &Path) -> Result<()> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    if !status.success() {
        eprintln!("{text}");
        bail!("fuzz target {target} failed with {status} (its log: {})", log.display());
    }
    let done = text.lines().rev().find(|line| line.starts_with("Done")).unwrap_or("done");
    eprintln!("xtask: {target}: {done}");
    Ok(())
}
