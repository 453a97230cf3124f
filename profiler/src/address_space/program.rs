//! What a command will map before it runs: its program, found in `PATH` as `execvp` finds it,
//! and the libraries its own dynamic linker lists for it, in load order (what `ldd` does). The
//! program is the user's choice, not a target's: its files are opened in the profiler's root.
use std::{
    ffi::OsStr,
    io::Read as _,
    os::unix::ffi::OsStrExt as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, anyhow, bail};

use crate::untrusted::open;

/// Bytes read of a program to find its dynamic linker: linkers write the ELF header, the program
/// headers and the linker's name first.
const HEAD_BYTES: u64 = 64 << 10;

/// The files `program` will map once it runs: the program first, then the libraries in load
/// order (its dynamic linker among them); the program alone if it is static.
pub fn load_order(program: &OsStr) -> Result<Vec<PathBuf>> {
    let path = find(program)?;
    // Read, not mapped: a file its owner may truncate as it is read (no copy of it is made).
    let mut head = Vec::new();
    open::own_file(&path)
        .and_then(|file| file.take(HEAD_BYTES).read_to_end(&mut head))
        .with_context(|| format!("cannot read {}", path.display()))?;
    let interpreter =
        interpreter(&head).with_context(|| format!("{} is not a 64-bit ELF file", path.display()))?;
    let mut files = vec![path.clone()];
    if let Some(interpreter) = interpreter {
        files.extend(libraries(&interpreter, &path)?);
    }
    Ok(files)
}

/// The dynamic linker the ELF file that starts with `head` names (`PT_INTERP`); `None` if it
/// is static.
fn interpreter(head: &[u8]) -> Result<Option<PathBuf>> {
    use object::read::elf::{FileHeader as _, ProgramHeader as _};
    let header = object::elf::FileHeader64::<object::Endianness>::parse(head)?;
    let endian = header.endian()?;
    for segment in header.program_headers(endian, head)? {
        if let Some(name) = segment.interpreter(endian, head)? {
            return Ok(Some(PathBuf::from(OsStr::from_bytes(name))));
        }
    }
    Ok(None)
}

/// The libraries a dynamic program loads, in load order, as its own dynamic linker lists them.
/// Only the linker runs, in list mode; the program does not.
fn libraries(interpreter: &Path, program: &Path) -> Result<Vec<PathBuf>> {
    let output = Command::new(interpreter)
        .arg("--list")
        .arg(program)
        .stdin(std::process::Stdio::null())
        .output()
        .with_context(|| format!("cannot run the dynamic linker {}", interpreter.display()))?;
    if !output.status.success() {
        let why = String::from_utf8_lossy(&output.stderr);
        bail!(
            "cannot list the libraries of {}: {}",
            program.display(),
            why.lines().next().unwrap_or("the dynamic linker failed")
        );
    }
    Ok(parse_library_list(&String::from_utf8_lossy(&output.stdout)))
}

/// Lines of `ld.so --list`: `name => /path (0x...)`, `/path (0x...)`, or `name (0x...)` for the
/// vDSO, which has no file.
fn parse_library_list(list: &str) -> Vec<PathBuf> {
    list.lines()
        .filter_map(|line| {
            let line = line.trim();
            let path = line.split_once("=>").map_or(line, |(_, path)| path.trim());
            let path = path.rsplit_once(" (").map_or(path, |(path, _)| path);
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect()
}

/// The program `execvp` would run for `program`.
fn find(program: &OsStr) -> Result<PathBuf> {
    let program = Path::new(program);
    if program.components().count() > 1 {
        return Ok(program.to_owned());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
        .ok_or_else(|| anyhow!("cannot run {}: not found in PATH", program.display()))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_list_in_load_order() {
        let list = "\tlinux-vdso.so.1 (0x00007ffd)\n\
                    \tlibjemalloc.so.2 => /usr/lib/x86_64-linux-gnu/libjemalloc.so.2 (0x00007f01)\n\
                    \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f02)\n\
                    \t/lib64/ld-linux-x86-64.so.2 (0x00007f03)\n";
        assert_eq!(
            parse_library_list(list),
            [
                PathBuf::from("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"),
                PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6"),
                PathBuf::from("/lib64/ld-linux-x86-64.so.2"),
            ]
        );
    }

    #[test]
    fn a_dynamic_program_is_followed_by_its_libraries() {
        let files = load_order(OsStr::new("true")).unwrap();
        assert!(files[0].ends_with("true") && files[0].is_absolute(), "{files:?}");
        let names: Vec<&str> = files[1..].iter().filter_map(|f| f.file_name()?.to_str()).collect();
        assert!(names.iter().any(|name| name.starts_with("libc.so")), "{names:?}");
    }

    #[test]
    fn a_static_program_has_no_dynamic_linker() {
        let program = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/unwind/snapshot");
        let files = load_order(program.as_os_str()).unwrap();
        assert_eq!(files, [program]);
    }

    #[test]
    fn what_is_not_elf_is_an_error() {
        let err = load_order(OsStr::new("/etc/passwd")).unwrap_err();
        assert_eq!(format!("{err}"), "/etc/passwd is not a 64-bit ELF file");
    }

    #[test]
    fn a_program_not_in_path_is_an_error() {
        let err = load_order(OsStr::new("no-such-program-anywhere")).unwrap_err();
        assert_eq!(format!("{err:#}"), "cannot run no-such-program-anywhere: not found in PATH");
    }
}
