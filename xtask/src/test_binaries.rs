//! `cargo xtask test`'s run of the tests: every test binary built once, then each run in turn
//! (as root; the end-to-end binary a module at a time), timed, and run whether or not one before
//! it failed; a table of each run's wall time and result, and each failure's message, end it.
use std::{
    ffi::OsString,
    io::{BufRead as _, BufReader},
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

/// Builds every test binary with the `ci` profile, waits for what they run to be `ready`, runs
/// each with `args`, then the doc tests; fails when any failed, after all ran.
pub fn run(root: &Path, args: &[OsString], ready: impl FnOnce() -> Result<()>) -> Result<()> {
    let started = Instant::now();
    let built = build(root);
    println!("xtask: the tests' build took {:.0} s", started.elapsed().as_secs_f64());
    // Waited for even when the build failed, so as not to be cut short.
    let ready = ready();
    let binaries = built?;
    ready?;
    let mut ran: Vec<(String, Duration, bool)> = Vec::new();
    let mut panics: Vec<(String, Vec<String>)> = Vec::new();
    for binary in &binaries {
        for part in parts(binary, args)? {
            println!("\nxtask: {} ({})", part.name, binary.executable.display());
            let started = Instant::now();
            let (passed, excerpts) = run_binary(binary, &[&part.tests[..], args].concat())?;
            ran.push((part.name.clone(), started.elapsed(), passed));
            panics.extend(excerpts.into_iter().map(|excerpt| (part.name.clone(), excerpt)));
        }
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
    // A failing test's message is printed amid its captured output, which can be long; CI keeps
    // a log's ends, so the messages are said again here, at the end.
    for (name, excerpt) in &panics {
        println!("\nxtask: in {name}:");
        for line in excerpt {
            println!("  {line}");
        }
    }
    let failed: Vec<&str> =
        ran.iter().filter(|(_, _, passed)| !passed).map(|(name, ..)| name.as_str()).collect();
    if !failed.is_empty() {
        bail!("tests failed in {}", failed.join(", "));
    }
    Ok(())
}

/// What one run of a test binary runs: its tests of one module of the end-to-end binary, or all.
struct Part {
    /// `profiler/tests/e2e/python.rs`, or the binary's name.
    name: String,
    /// `--exact` and the tests' names; none: all of the binary's.
    tests: Vec<OsString>,
}

/// The runs of `binary`: the end-to-end binary (`tests/e2e/main.rs`, built once) in one run per
/// module, one after another, as if each were a binary of its own (its tests run beside one
/// another alone); any other in one. `args` (a filter) narrows the tests named.
fn parts(binary: &TestBinary, args: &[OsString]) -> Result<Vec<Part>> {
    let Some(dir) = binary.name.strip_suffix("/main.rs").filter(|_| !binary.unit) else {
        return Ok(vec![Part { name: binary.name.clone(), tests: Vec::new() }]);
    };
    let listed = as_root(&binary.executable)
        .args(["--list", "--format", "terse"])
        .args(args)
        .current_dir(&binary.package_dir)
        .output()
        .with_context(|| format!("cannot list the tests of {}", binary.executable.display()))?;
    if !listed.status.success() {
        bail!("{} --list failed with {}", binary.executable.display(), listed.status);
    }
    Ok(by_module(&String::from_utf8_lossy(&listed.stdout), dir))
}

/// The tests of a `--list --format terse` output (`python::deep_stacks: test`), grouped by
/// their module, in order, each group named as the module's file in `dir`.
fn by_module(listed: &str, dir: &str) -> Vec<Part> {
    let mut parts: Vec<Part> = Vec::new();
    for test in listed.lines().filter_map(|line| line.strip_suffix(": test")) {
        let module = test.split_once("::").map_or("main", |(module, _)| module);
        let name = format!("{dir}/{module}.rs");
        if parts.last().is_none_or(|part| part.name != name) {
            parts.push(Part { name, tests: vec!["--exact".into()] });
        }
        parts.last_mut().expect("pushed").tests.push(test.into());
    }
    parts
}

/// Runs one test binary with `args`, its output passed through as it comes: whether it passed,
/// and an excerpt of each panic it printed.
fn run_binary(binary: &TestBinary, args: &[OsString]) -> Result<(bool, Vec<Vec<String>>)> {
    let mut child = as_root(&binary.executable)
        .args(args)
        .current_dir(&binary.package_dir)
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {}", binary.executable.display()))?;
    let mut panics = PanicExcerpts::default();
    let stdout = BufReader::new(child.stdout.take().expect("stdout is piped"));
    for line in stdout.split(b'\n') {
        let line = String::from_utf8_lossy(&line.context("reading a test binary's output")?).into_owned();
        println!("{line}");
        panics.see(line);
    }
    let status = child.wait().with_context(|| format!("waiting for {}", binary.executable.display()))?;
    Ok((status.success(), panics.excerpts))
}

/// The panics in a test binary's output: each `panicked at` line and its message, without the
/// backtrace, bounded (a message may list a profile's stacks).
#[derive(Default)]
struct PanicExcerpts {
    excerpts: Vec<Vec<String>>,
    /// Whether the last excerpt's message is still being read.
    open: bool,
}

impl PanicExcerpts {
    const LINES: usize = 12;
    const LINE_CHARS: usize = 400;

    fn see(&mut self, line: String) {
        // `thread 'NAME' (TID) panicked at FILE:LINE:COLUMN:`, then the message.
        if line.starts_with("thread '") && line.contains(" panicked at ") {
            self.open = true;
            self.excerpts.push(Vec::new());
        } else if line.is_empty() || line.starts_with("note: ") || line.starts_with("stack backtrace:") {
            self.open = false;
        }
        let Some(excerpt) = self.excerpts.last_mut().filter(|_| self.open) else { return };
        if excerpt.len() == Self::LINES {
            self.open = false;
            excerpt.push("…".to_owned());
            return;
        }
        let mut line = line;
        if let Some((cut, _)) = line.char_indices().nth(Self::LINE_CHARS) {
            line.truncate(cut);
            line.push('…');
        }
        excerpt.push(line);
    }
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

    #[test]
    fn the_end_to_end_tests_run_by_module() {
        let listed = "go::a: test\ngo::b: test\npython::c: test\nbench_x: benchmark\n";
        let parts = by_module(listed, "profiler/tests/e2e");
        let named: Vec<(&str, Vec<&str>)> = parts
            .iter()
            .map(|part| (part.name.as_str(), part.tests.iter().map(|t| t.to_str().unwrap()).collect()))
            .collect();
        assert_eq!(
            named,
            [
                ("profiler/tests/e2e/go.rs", vec!["--exact", "go::a", "go::b"]),
                ("profiler/tests/e2e/python.rs", vec!["--exact", "python::c"]),
            ]
        );
        assert!(by_module("", "profiler/tests/e2e").is_empty(), "a filter that names none runs none");
    }

    #[test]
    fn a_panic_is_excerpted_without_its_backtrace_and_bounded() {
        let mut panics = PanicExcerpts::default();
        let long = "x".repeat(1000);
        let output = [
            "captured output",
            "thread 'first' (12002) panicked at tests/go.rs:166:13:",
            "Go 1.26: only 9 of 10 whole",
            "stack backtrace:",
            "   0: rust_begin_unwind",
            "",
            "thread 'second' (12003) panicked at tests/php.rs:1:1:",
            &long,
        ];
        for line in output.iter().copied().chain(std::iter::repeat_n("more", 20)) {
            panics.see(line.to_owned());
        }
        let [first, second] = &panics.excerpts[..] else { panic!("{:?}", panics.excerpts) };
        assert_eq!(
            first,
            &["thread 'first' (12002) panicked at tests/go.rs:166:13:", "Go 1.26: only 9 of 10 whole"]
        );
        assert_eq!(second.len(), PanicExcerpts::LINES + 1);
        assert_eq!(second[1].chars().count(), PanicExcerpts::LINE_CHARS + 1);
        assert_eq!(second.last().unwrap(), "…");
    }
}
