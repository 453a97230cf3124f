//! Builds the eBPF object (`profiler-ebpf`, for bpfel-unknown-none with the nightly its
//! `rust-toolchain.toml` names, and bpf-linker) into OUT_DIR, where `src/kernel/object.rs` embeds
//! it.
use std::{path::Path, process::Command};

use anyhow::{Context as _, anyhow, bail};

fn main() -> anyhow::Result<()> {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").context("CARGO_MANIFEST_DIR")?;
    let ebpf_dir = Path::new(&manifest_dir).join("../profiler-ebpf");
    println!("cargo:rerun-if-changed={}", ebpf_dir.join("rust-toolchain.toml").display());
    let toolchain = ebpf_toolchain(&ebpf_dir)?;
    let ebpf_dir = ebpf_dir.to_str().ok_or_else(|| anyhow!("non-UTF-8 path {}", ebpf_dir.display()))?;
    let package = aya_build::Package { name: "profiler-ebpf", root_dir: ebpf_dir, ..Default::default() };
    aya_build::build_ebpf([package], aya_build::Toolchain::Custom(&toolchain))
}

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
