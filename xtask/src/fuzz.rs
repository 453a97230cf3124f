//! `cargo xtask fuzz`: the cargo-fuzz targets of `profiler/fuzz`, each for a while, starting
//! from the committed seeds (`profiler/fuzz/seeds/TARGET`), one per CPU at a time; what libFuzzer
//! finds goes to the ignored `corpus/` and `artifacts/` folders, and its output to
//! `artifacts/TARGET.log`.
use std::{fs::File, path::Path, process::Command};

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
    // A fuzzer keeps one CPU busy: one per CPU at a time, each writing to a log of its own, shown
    // when it fails.
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    for batch in chosen.chunks(cpus) {
        let mut running = Vec::new();
        for &target in batch {
            eprintln!("xtask: fuzzing {target} for {seconds} s");
            let corpus = fuzz_dir.join("corpus").join(target);
            std::fs::create_dir_all(&corpus)?;
            let log_path = fuzz_dir.join("artifacts").join(format!("{target}.log"));
            std::fs::create_dir_all(fuzz_dir.join("artifacts"))?;
            let log = File::create(&log_path).with_context(|| format!("create {}", log_path.display()))?;
            let mut command = cargo_fuzz(&["run", target]);
            command
                .arg(&corpus)
                .arg(fuzz_dir.join("seeds").join(target))
                .args(["--", &format!("-max_total_time={seconds}")])
                .stdout(log.try_clone()?)
                .stderr(log);
            let child = command.spawn().with_context(|| format!("cannot run {command:?}"))?;
            running.push((target, child, log_path));
        }
        // All of the batch end before a failure is told, so that none is left running.
        let ended: Vec<_> = running
            .into_iter()
            .map(|(target, mut child, log_path)| (target, child.wait(), log_path))
            .collect();
        for (target, status, log_path) in ended {
            let status = status?;
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            if !status.success() {
                eprintln!("{log}");
                bail!("fuzz target {target} failed with {status} (its log: {})", log_path.display());
            }
            // libFuzzer's last word: how many inputs it ran.
            let done = log.lines().rev().find(|line| line.starts_with("Done")).unwrap_or("done");
            eprintln!("xtask: {target}: {done}");
        }
    }
    Ok(())
}
