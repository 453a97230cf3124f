//! CPython interpreters on this machine, for the Python benchmark and demo: pyenv's
//! (`$(pyenv root)/versions/3.N.P/bin/python3.N`) and the system's (`/usr/bin/python3.N`).
use std::{
    ops::RangeInclusive,
    path::{Path, PathBuf},
    process::Command,
};

/// The CPython minor versions (3.N) the profiler shows Python frames of.
pub const SUPPORTED_MINORS: RangeInclusive<u32> = 6..=14;

/// pyenv's newest 3.`minor`.P, if installed.
pub fn pyenv(minor: u32) -> Option<PathBuf> {
    let versions = pyenv_root()?.join("versions");
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir(&versions)
        .ok()?
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().to_string_lossy().into_owned();
            let patch = name.strip_prefix(&format!("3.{minor}."))?.parse().ok()?;
            let python = versions.join(&name).join(format!("bin/python3.{minor}"));
            python.exists().then_some((patch, python))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, python)| python)
}

/// The newest supported CPython installed: pyenv's, else the system's.
pub fn newest_supported() -> Option<PathBuf> {
    let system =
        |minor: u32| Some(Path::new(&format!("/usr/bin/python3.{minor}")).to_owned()).filter(|p| p.exists());
    SUPPORTED_MINORS.rev().find_map(pyenv).or_else(|| SUPPORTED_MINORS.rev().find_map(system))
}

/// pyenv's root: `pyenv root`, else `$PYENV_ROOT`, else `~/.pyenv`.
fn pyenv_root() -> Option<PathBuf> {
    let said = Command::new("pyenv").arg("root").output().ok().filter(|out| out.status.success());
    let root = match said {
        Some(out) => PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()),
        None => std::env::var_os("PYENV_ROOT")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".pyenv")))?,
    };
    root.is_dir().then_some(root)
}
