//! Project tasks: `cargo xtask setup | build | run | test | fuzz | bench`.
//!
//! `setup` installs what a fresh machine lacks (the nightly `profiler-ebpf/rust-toolchain.toml`
//! names, bpf-linker built against that nightly's own libLLVM in `.tools/`, the C/C++ compilers
//! the tests use) and does nothing when everything is there. Every other task runs it first.
mod bench;
mod fuzz;
mod python;
mod setup;
mod test_binaries;

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{Context as _, Result, bail};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "profiler project tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install the toolchain pieces and packages the build and the tests need (idempotent).
    Setup,
    /// Build the eBPF object and the profiler (release).
    Build,
    /// Build, then run the profiler (as root, through `sudo -E` when needed).
    /// Without arguments: a demo on bundled programs built without frame pointers (CPU time,
    /// then every thread's time on and off the CPU), and on a Python program when a CPython
    /// 3.8–3.13 is installed, written to target/demo/.
    Run {
        #[arg(last = true)]
        args: Vec<OsString>,
    },
    /// Measure the profiler on workloads it builds; writes BENCHMARKS.md (needs root).
    Bench {
        /// One repetition, shorter runs.
        #[arg(long)]
        quick: bool,
        /// Only these sections, rewritten in place in BENCHMARKS.md (repeatable; all when
        /// absent).
        #[arg(long, value_name = "SECTION", value_parser = clap::builder::PossibleValuesParser::new(bench::SECTIONS))]
        only: Vec<String>,
    },
    /// Run the fuzz targets (cargo-fuzz, with the eBPF nightly) for a while each.
    Fuzz {
        /// Seconds per target.
        #[arg(long, default_value_t = 60)]
        seconds: u32,
        /// Targets to run (all when none given).
        targets: Vec<String>,
    },
    /// Formatting and clippy checks, then every test binary in turn, end-to-end ones as root
    /// (the fuzz targets' seeds among them), each timed and each run whatever the one before.
    Test {
        /// Only the unit and fixture tests, as any user, built without the eBPF programs (so
        /// without the nightly and bpf-linker) and without installing anything: the fast loop.
        #[arg(long)]
        unit: bool,
        /// Arguments for each test binary (a test name filter, say).
        #[arg(last = true)]
        args: Vec<OsString>,
    },
}

fn main() {
    if let Err(err) = run(Cli::parse().task) {
        eprintln!("xtask: error: {err:#}");
        std::process::exit(1);
    }
}

fn run(task: Task) -> Result<()> {
    let root = workspace_root();
    if let Task::Test { unit: true, args } = &task {
        return test_binaries::run_unit(&root, args);
    }
    let started = Instant::now();
    match task {
        Task::Test { .. } => setup::ensure_build(&root)?,
        _ => setup::ensure(&root)?,
    }
    println!("xtask: setup took {:.0} s", started.elapsed().as_secs_f64());
    match task {
        Task::Setup => setup::ensure_bench_tools(&root),
        Task::Build => build(&root),
        Task::Run { args } => {
            build(&root)?;
            run_profiler(&root, args)
        }
        Task::Test { args, .. } => test(&root, &args),
        Task::Fuzz { seconds, targets } => fuzz::run(&root, seconds, &targets),
        Task::Bench { quick, only } => {
            if !is_root() {
                bail!("benchmarks load eBPF programs and set kernel.bpf_stats_enabled: run as root");
            }
            setup::ensure_bench_tools(&root)?;
            bench::run(&root, &bench::Options { quick, only })
        }
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_owned()
}

fn build(root: &Path) -> Result<()> {
    cargo(root, &["build", "--release", "--package", "profiler"])
}

fn run_profiler(root: &Path, args: Vec<OsString>) -> Result<()> {
    if args.is_empty() {
        return demo(root);
    }
    profiler(root, &args, Stdio::inherit())
}

/// Runs the profiler with `stdout` as its standard output, which a command it starts inherits.
fn profiler(root: &Path, args: &[OsString], stdout: Stdio) -> Result<()> {
    let binary = root.join("target/release/profiler");
    let status = as_root(&binary)
        .args(args)
        .stdout(stdout)
        .status()
        .with_context(|| format!("cannot run {}", binary.display()))?;
    if !status.success() {
        bail!("profiler exited with {status}");
    }
    Ok(())
}

/// What the profiler is for, in a minute: two bundled programs built without frame pointers
/// (as most distribution binaries are), profiled with whole stacks; then, when a CPython it
/// reads is installed, a Python program, its Python frames among the native ones.
fn demo(root: &Path) -> Result<()> {
    let dir = root.join("target/demo");
    std::fs::create_dir_all(&dir)?;
    let workloads = root.join("profiler/tests/workloads");
    let build = |source: &str, name: &str| -> Result<PathBuf> {
        let out = dir.join(name);
        check(
            Command::new("gcc")
                .args(["-O2", "-g", "-fomit-frame-pointer", "-o"])
                .arg(&out)
                .arg(workloads.join(source))
                .arg("-lpthread"),
        )?;
        Ok(out)
    };
    let (split, waits) = (build("split.c", "split")?, build("off_cpu.c", "waits")?);
    let path = |name: &str| dir.join(name).into_os_string();
    // The workloads print measurements for the tests, nothing a reader of the demo needs; the
    // profiler writes to standard output only with `-o -`, which the demo does not use.
    let record = |args: Vec<OsString>| profiler(root, &args, Stdio::null());
    let python = python::newest_supported();
    let demos = if python.is_some() { 3 } else { 2 };
    println!(
        "demo 1/{demos}: CPU time of `split` (hot_a 60%, hot_b 30%, hot_c 10%, each under main -> burn -> ...)"
    );
    let mut cpu: Vec<OsString> = ["record", "-F", "999"].map(OsString::from).to_vec();
    for output in ["cpu.svg", "cpu.json", "cpu.pb.gz"] {
        cpu.extend(["-o".into(), path(output)]);
    }
    cpu.extend(["--".into(), split.into(), "3".into()]);
    record(cpu)?;
    println!(
        "\ndemo 2/{demos}: where the threads of `waits` spend their time: sleeping, reading a pipe, waiting for a lock, burning CPU"
    );
    let mut wall: Vec<OsString> = ["record", "--wall", "--per-thread", "-o"].map(OsString::from).to_vec();
    wall.extend([path("wall.svg"), "-o".into(), path("wall.prof"), "--".into(), waits.into(), "3".into()]);
    record(wall)?;
    let shown = |name: &str| dir.join(name).display().to_string();
    let python_svg = if python.is_some() { format!(", {}", shown("python.svg")) } else { String::new() };
    if let Some(python) = python {
        println!(
            "\ndemo 3/3: CPU time of a Python program on {}: `shares.py` (alpha 50%, beta 30%, Burner.gamma 20%, \
             under <module>), its Python frames among the interpreter's native ones",
            python.display()
        );
        let mut args: Vec<OsString> = ["record", "-F", "999", "-o"].map(OsString::from).to_vec();
        args.extend([
            path("python.svg"),
            "--".into(),
            python.into(),
            workloads.join("python/shares.py").into(),
        ]);
        args.push("3".into());
        record(args)?;
    }
    println!(
        "\nopen {}{python_svg} and {} in a browser (click a frame to zoom), and {} at https://www.speedscope.app \
         (a timeline per thread); then try\n  \
         target/release/profiler report {} --state S -o sleeping.svg   (only the time asleep)\n  \
         target/release/profiler report {} -o -   (folded stacks on the terminal, the weight last)",
        shown("cpu.svg"),
        shown("wall.svg"),
        shown("cpu.json"),
        shown("wall.prof"),
        shown("wall.prof"),
    );
    if setup::is_present("go") {
        println!("  go tool pprof -top {}", shown("cpu.pb.gz"));
    }
    Ok(())
}

/// The lints, then every test; what the tests run is fetched meanwhile.
fn test(root: &Path, args: &[OsString]) -> Result<()> {
    let fetching = std::thread::spawn({
        let root = root.to_owned();
        move || {
            let started = Instant::now();
            setup::ensure_test_tools(&root).map(|()| started.elapsed())
        }
    });
    let test_tools = || match fetching.join() {
        Ok(Ok(took)) => {
            println!(
                "xtask: what the tests run was set up in {:.0} s, beside the lints and the build",
                took.as_secs_f64()
            );
            Ok(())
        }
        Ok(Err(err)) => Err(err.context("setting up what the tests run")),
        Err(_) => bail!("setting up what the tests run panicked"),
    };
    if let Err(err) = lint(root) {
        // Not cut short (an apt install half done): what is being set up is waited for.
        let _ = test_tools();
        return Err(err);
    }
    test_binaries::run(root, args, test_tools)
}

fn lint(root: &Path) -> Result<()> {
    let started = Instant::now();
    cargo(root, &["fmt", "--all", "--check"])?;
    // With the tests' profile: the build scripts (the eBPF object's among them) and proc macros
    // it builds are the ones the tests' build then uses.
    cargo(root, &["clippy", "--profile", "ci", "--all-targets", "--", "-D", "warnings"])?;
    // The binary alone, without the `testing` feature the tests turn on.
    cargo(root, &["clippy", "--profile", "ci", "--package", "profiler", "--", "-D", "warnings"])?;
    setup::clippy_ebpf(root)?;
    println!("xtask: formatting and lints took {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

pub fn cargo(root: &Path, args: &[&str]) -> Result<()> {
    check(Command::new("cargo").current_dir(root).args(args))
}

pub fn check(command: &mut Command) -> Result<()> {
    let status = command.status().with_context(|| format!("cannot run {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed with {status}");
    }
    Ok(())
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A command for `program`, through `sudo -E` unless we are root already.
pub fn as_root(program: &Path) -> Command {
    if is_root() {
        Command::new(program)
    } else {
        let mut command = Command::new("sudo");
        command.arg("-E").arg(program);
        command
    }
}
