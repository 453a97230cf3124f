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

pub fn run(root: &Path, seconds: u32, targets: &[String]) -> Result<()> {
    let fuzz_dir = root.join("profiler/fuzz");
    let cargo_fuzz = root.join(".tools/bin/cargo-fuzz");
    let toolchain = setup::ebpf_toolchain(root)?;
    let chosen = if targets.is_empty() { all_targets(&fuzz_dir)? } else { targets.to_vec() };
    let cargo_fuzz = |args: &[&str]| {
        let mut command = Command::new("rustup");
        command.args(["run", &toolchain]).arg(&cargo_fuzz).args(args).current_dir(&fuzz_dir);
        command
    };
    setup::ensure_cargo_fuzz(root)?;
    check(&mut cargo_fuzz(&["build"]))?;
    std::fs::create_dir_all(fuzz_dir.join("artifacts"))?;
    // A fuzzer keeps one CPU busy: one per CPU at a time, each writing to a log of its own.
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    for batch in chosen.chunks(cpus) {
        let mut running = Vec::new();
        for target in batch {
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

/// Every target: the files of `fuzz_targets/`, by name.
fn all_targets(fuzz_dir: &Path) -> Result<Vec<String>> {
    let dir = fuzz_dir.join("fuzz_targets");
    let mut targets = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|extension| extension == "rs") {
            targets.extend(path.file_stem().and_then(|stem| stem.to_str()).map(str::to_owned));
        }
    }
    targets.sort();
    Ok(targets)
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
