//! `cargo xtask test`'s run of the tests: every test binary built once, then each run in turn
//! (as root), timed, and run whether or not one before it failed; a table of each binary's wall
//! time and result ends the run.
use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};

use crate::{as_root, check};

/// A test binary cargo built: the target's file, its kind, and where cargo would run it.
struct TestBinary {
    /// `profiler/tests/python.rs`: its package's directory and the target's source in it.
    name: String,
    /// Unit tests (of `src/`), run before the package's other tests.
    unit: bool,
    executable: PathBuf,
    /// Its package's directory, the working directory `cargo test` gives it.
    package_dir: PathBuf,
}

/// Builds every test binary with the `ci` profile, runs each with `args`, then the doc tests;
/// fails when any failed, after all ran.
pub fn run(root: &Path, args: &[OsString]) -> Result<()> {
    let started = Instant::now();
    let binaries = build(root)?;
    println!("xtask: the tests' build took {:.0} s", started.elapsed().as_secs_f64());
    let mut ran: Vec<(String, Duration, bool)> = Vec::new();
    for binary in &binaries {
        println!("\nxtask: {} ({})", binary.name, binary.executable.display());
        let started = Instant::now();
        let status = as_root(&binary.executable)
            .args(args)
            .current_dir(&binary.package_dir)
            .status()
            .with_context(|| format!("cannot run {}", binary.executable.display()))?;
        ran.push((binary.name.clone(), started.elapsed(), status.success()));
    }
    let started = Instant::now();
    let doc = check(Command::new("cargo").current_dir(root).args(["test", "--profile", "ci", "--doc"]));
    ran.push(("doc tests".to_owned(), started.elapsed(), doc.is_ok()));
    println!("\nxtask: test binaries, wall time");
    for (name, took, passed) in &ran {
        println!("  {:>7.1} s  {}  {name}", took.as_secs_f64(), if *passed { "ok    " } else { "FAILED" });
    }
    let total: Duration = ran.iter().map(|(_, took, _)| *took).sum();
    println!("  {:>7.1} s  in all", total.as_secs_f64());
    let failed: Vec<&str> =
        ran.iter().filter(|(_, _, passed)| !passed).map(|(name, ..)| name.as_str()).collect();
    if !failed.is_empty() {
        bail!("tests failed in {}", failed.join(", "));
    }
    Ok(())
}

/// The fast loop: the unit and fixture tests of the host crates, built with the `unit` profile
/// (`dev`'s, in a folder of its own) without the eBPF programs, run as the user; what needs root
/// says it is skipped.
pub fn run_unit(root: &Path, args: &[OsString]) -> Result<()> {
    let cargo_test = |targets: &[&str]| {
        let mut command = Command::new("cargo");
        command
            .current_dir(root)
            .args(["test", "--profile", "unit"])
            .args(targets)
            .env("PROFILER_EBPF", "none")
            .env("PROFILER_SKIP_E2E", "1");
        if !args.is_empty() {
            command.arg("--").args(args);
        }
        check(&mut command)
    };
    cargo_test(&["-p", "profiler", "-p", "profiler-common", "-p", "xtask", "--lib", "--bins"])?;
    cargo_test(&["-p", "profiler", "--test", "fuzz_seeds"])
}

/// `cargo test --no-run`'s test binaries, libraries' unit tests first, then by name.
fn build(root: &Path) -> Result<Vec<TestBinary>> {
    let output = Command::new("cargo")
        .current_dir(root)
        .args(["test", "--profile", "ci", "--no-run", "--message-format=json-render-diagnostics"])
        .stderr(Stdio::inherit())
        .output()
        .context("cannot run cargo test --no-run")?;
    if !output.status.success() {
        bail!("cargo test --no-run failed with {}", output.status);
    }
    let mut binaries = Vec::new();
    for line in output.stdout.split(|&byte| byte == b'\n').filter(|line| !line.is_empty()) {
        let message: serde_json::Value = serde_json::from_slice(line).context("cargo's JSON message")?;
        if let Some(binary) = test_binary(&message) {
            binaries.push(binary);
        }
    }
    binaries.sort_by(|a, b| (&a.package_dir, !a.unit, &a.name).cmp(&(&b.package_dir, !b.unit, &b.name)));
    Ok(binaries)
}

/// The test binary a `compiler-artifact` message names, if it names one.
fn test_binary(message: &serde_json::Value) -> Option<TestBinary> {
    if message["reason"] != "compiler-artifact" || message["profile"]["test"] != true {
        return None;
    }
    let executable = PathBuf::from(message["executable"].as_str()?);
    let source = Path::new(message["target"]["src_path"].as_str()?);
    let package_dir = Path::new(message["manifest_path"].as_str()?).parent()?.to_owned();
    let source = source.strip_prefix(&package_dir).unwrap_or(source);
    let name = format!("{}/{}", package_dir.file_name()?.to_string_lossy(), source.display());
    Some(TestBinary { name, unit: source.starts_with("src"), executable, package_dir })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_artifact_names_its_binary_and_package() {
        let message = serde_json::json!({
            "reason": "compiler-artifact",
            "manifest_path": "/w/profiler/Cargo.toml",
            "target": {"src_path": "/w/profiler/tests/python.rs"},
            "profile": {"test": true},
            "executable": "/w/target/ci/deps/python-0123",
        });
        let binary = test_binary(&message).unwrap();
        assert_eq!(binary.name, "profiler/tests/python.rs");
        assert!(!binary.unit);
        assert_eq!(binary.package_dir, Path::new("/w/profiler"));
        assert_eq!(binary.executable, Path::new("/w/target/ci/deps/python-0123"));
        let mut built = message.clone();
        built["profile"]["test"] = false.into();
        assert!(test_binary(&built).is_none(), "a library built for the tests is no test binary");
    }
}
