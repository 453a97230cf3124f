//! `cargo xtask fuzz`: the cargo-fuzz targets of `profiler/fuzz`, each for a while, starting
//! from the committed seeds (`profiler/fuzz/seeds/TARGET`); what libFuzzer finds goes to the
//! ignored `corpus/` and `artifacts/` folders.
use std::{path::Path, process::Command};

use anyhow::Result;

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
    for target in chosen {
        eprintln!("xtask: fuzzing {target} for {seconds} s");
        let corpus = fuzz_dir.join("corpus").join(target);
        std::fs::create_dir_all(&corpus)?;
        check(
            Command::new("rustup")
                .args(["run", &toolchain])
                .arg(&cargo_fuzz)
                .args(["run", target])
                .arg(&corpus)
                .arg(fuzz_dir.join("seeds").join(target))
                .args(["--", &format!("-max_total_time={seconds}")])
                .current_dir(&fuzz_dir),
        )?;
    }
    Ok(())
}
