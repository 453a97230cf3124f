//! Builds the eBPF objects (`profiler-ebpf`, for bpfel-unknown-none with the nightly its
//! `rust-toolchain.toml` names, and bpf-linker) into OUT_DIR, where `src/kernel/object.rs` and
//! `src/kernel/names.rs` embed them; with `PROFILER_EBPF=none`, empty files in their place (the
//! unit tests' build: `cargo xtask test --unit`, without the nightly and bpf-linker).
use std::{path::Path, process::Command};

use anyhow::{Context as _, anyhow, bail};

fn main() -> anyhow::Result<()> {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").context("CARGO_MANIFEST_DIR")?;
    let out_dir = std::env::var_os("OUT_DIR").context("OUT_DIR")?;
    println!("cargo:rerun-if-env-changed=PROFILER_EBPF");
    if std::env::var_os("PROFILER_EBPF").is_some_and(|value| value == "none") {
        for object in OBJECTS {
            std::fs::write(Path::new(&out_dir).join(object), [])?;
        }
        println!("cargo:warning=built without its eBPF programs (PROFILER_EBPF=none): it cannot sample");
        return Ok(());
    }
    let ebpf_dir = Path::new(&manifest_dir).join("../profiler-ebpf");
    println!("cargo:rerun-if-changed={}", ebpf_dir.join("rust-toolchain.toml").display());
    let toolchain = ebpf_toolchain(&ebpf_dir)?;
    let ebpf_dir = ebpf_dir.to_str().ok_or_else(|| anyhow!("non-UTF-8 path {}", ebpf_dir.display()))?;
    let package = aya_build::Package { name: "profiler-ebpf", root_dir: ebpf_dir, ..Default::default() };
    // Each profile (dev, release, ci, clippy's, the fuzz targets' own workspace) would build the
    // same object again, `core` included, in its own OUT_DIR: about 40 s each. aya-build builds
    // into OUT_DIR, so it is pointed at one folder for all, and the object copied from there.
    let shared = Path::new(&manifest_dir).join("../target/ebpf");
    // SAFETY: a build script's one thread; aya-build reads OUT_DIR from the environment.
    unsafe { std::env::set_var("OUT_DIR", &shared) };
    aya_build::build_ebpf([package], aya_build::Toolchain::Custom(&toolchain))?;
    for object in OBJECTS {
        std::fs::copy(shared.join(object), Path::new(&out_dir).join(object))
            .with_context(|| format!("copy the eBPF object {object} from {}", shared.display()))?;
    }
    Ok(())
}

/// The eBPF crate's binaries, as aya-build names them in OUT_DIR.
const OBJECTS: [&str; 2] = ["profiler", "kernel-names"];

/// The toolchain the eBPF crate's `rust-toolchain.toml` names, as rustup resolves it there (not
/// the one cargo runs this script with, which rustup passes down in `RUSTUP_TOOLCHAIN`).
fn ebpf_toolchain(ebpf_dir: &Path) -> anyhow::Result<String> {
    let output = Command::new("rustup")
        .args(["show", "active-toolchain"])
        .env_remove("RUSTUP_TOOLCHAIN")
        .current_dir(ebpf_dir)
        .output()
        .context("rustup builds the eBPF programs, and cannot be run")?;
    let said = String::from_utf8_lossy(&output.stdout);
    match said.split_whitespace().next() {
        Some(name) if output.status.success() => Ok(name.to_owned()),
        _ => bail!(
            "the eBPF programs' toolchain (profiler-ebpf/rust-toolchain.toml) is not installed: run `cargo xtask setup`: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ),
    }
}
