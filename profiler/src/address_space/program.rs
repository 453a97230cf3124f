//! What a command will map before it runs: its program, found in `PATH` as `execvp` finds it,
//! and the libraries its own dynamic linker lists for it, in load order (what `ldd` does). The
//! caller says how its files are opened.
use std::{
    ffi::OsStr,
    fs::File,
    io::{self, Read as _},
    os::unix::{ffi::OsStrExt as _, fs::FileExt as _, fs::PermissionsExt as _},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, anyhow, bail};
use object::elf::PT_INTERP;

/// Bytes read of a program for its ELF and program headers: linkers write them first.
const HEAD_BYTES: u64 = 64 << 10;
/// The longest dynamic linker's name read (`PATH_MAX`).
const MAX_LINKER_NAME: u64 = 4096;
/// The longest the dynamic linker may take to list a program's libraries: one on a file system
/// that never answers would hold it, and the profiler's start, for ever.
const LIST_TIMEOUT: Duration = Duration::from_secs(5);

/// The files a command will map, in the order its dynamic linker loads them.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct LoadOrder {
    /// The program, as `execvp` finds it.
    pub program: PathBuf,
    /// Its dynamic linker (`PT_INTERP`), unless it is static.
    pub linker: Option<PathBuf>,
    /// The libraries the linker lists for it, in load order (the linker among them).
    pub libraries: Vec<PathBuf>,
}

impl LoadOrder {
    /// The program, then its libraries.
    pub(crate) fn files(&self) -> impl Iterator<Item = &Path> {
        std::iter::once(self.program.as_path()).chain(self.libraries.iter().map(PathBuf::as_path))
    }
}

/// The files `program` will map once it runs, each opened (to look for it in `PATH` and to read
/// the program's headers) with `open`.
pub(crate) fn load_order(program: &OsStr, open: &dyn Fn(&Path) -> io::Result<File>) -> Result<LoadOrder> {
    let (path, file) = find(program, open)?;
    let linker = linker(&file).with_context(|| format!("{} is not a 64-bit ELF file", path.display()))?;
    let linker = linker.map(std::path::absolute).transpose()?;
    let libraries = match &linker {
        Some(linker) => {
            // Its file system asked first: running it waits until it is loaded.
            open(linker).with_context(|| format!("cannot read the dynamic linker {}", linker.display()))?;
            libraries(linker, &path)?
        }
        None => Vec::new(),
    };
    Ok(LoadOrder { program: path, linker, libraries })
}

/// The dynamic linker an ELF program names (`PT_INTERP`); `None` if it is static. Read, not
/// mapped: a file its owner may truncate as it is read (and no copy of it is made).
fn linker(file: &File) -> Result<Option<PathBuf>> {
    use object::read::elf::{FileHeader as _, ProgramHeader as _};
    let mut head = Vec::new();
    file.take(HEAD_BYTES).read_to_end(&mut head)?;
    let header = object::elf::FileHeader64::<object::Endianness>::parse(&*head)?;
    let endian = header.endian()?;
    let Some(interp) =
        header.program_headers(endian, &*head)?.iter().find(|segment| segment.p_type(endian) == PT_INTERP)
    else {
        return Ok(None);
    };
    let (offset, size) = (interp.p_offset(endian), interp.p_filesz(endian));
    let mut name = vec![0; usize::try_from(size.min(MAX_LINKER_NAME))?];
    file.read_exact_at(&mut name, offset)?;
    let name = name.split(|&b| b == 0).next().unwrap_or_default();
    Ok(Some(PathBuf::from(OsStr::from_bytes(name))))
}

/// The libraries a dynamic program loads, in load order, as its own dynamic linker lists them
/// (what `ldd` does), within [`LIST_TIMEOUT`]. Only the linker runs, in list mode; the program
/// does not.
fn libraries(linker: &Path, program: &Path) -> Result<Vec<PathBuf>> {
    let mut child = Command::new(linker)
        .arg("--list")
        .arg(program)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run the dynamic linker {}", linker.display()))?;
    let (mut stdout, mut stderr) = (child.stdout.take(), child.stderr.take());
    // Read beside the wait: a long list fills the pipe before the linker exits.
    let output = std::thread::spawn(move || {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        stdout.as_mut().map(|pipe| pipe.read_to_end(&mut out));
        stderr.as_mut().map(|pipe| pipe.read_to_end(&mut err));
        (out, err)
    });
    let deadline = Instant::now() + LIST_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(1)),
            waited => {
                let _ = child.kill();
                // Reaped aside: one held by a file system that does not answer outlives a kill.
                std::thread::spawn(move || child.wait());
                waited?;
                bail!(
                    "the dynamic linker did not list the libraries of {} within {LIST_TIMEOUT:?}",
                    program.display()
                );
            }
        }
    };
    let (out, err) =
        output.join().map_err(|_| anyhow!("the reader of the dynamic linker's list panicked"))?;
    if !status.success() {
        let why = String::from_utf8_lossy(&err);
        bail!(
            "cannot list the libraries of {}: {}",
            program.display(),
            why.lines().next().unwrap_or("the dynamic linker failed")
        );
    }
    Ok(parse_library_list(&String::from_utf8_lossy(&out)))
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

/// The program `execvp` would run for `program`, opened with `open`.
fn find(program: &OsStr, open: &dyn Fn(&Path) -> io::Result<File>) -> Result<(PathBuf, File)> {
    let program = Path::new(program);
    if program.components().count() > 1 {
        let file = open(program).with_context(|| format!("cannot read {}", program.display()))?;
        return Ok((program.to_owned(), file));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(program);
        match open(&candidate) {
            Ok(file) if file.metadata().is_ok_and(|m| m.permissions().mode() & 0o111 != 0) => {
                return Ok((candidate, file));
            }
            // Where `execvp` may find it, but whose files `open` does not read: what is there
            // is not known, and what comes after in `PATH` may not be what runs.
            Err(err) if err.kind() == io::ErrorKind::PermissionDenied => {
                return Err(err).with_context(|| format!("cannot read {}", candidate.display()));
            }
            _ => {}
        }
    }
    bail!("cannot run {}: not found in PATH", program.display())
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

    /// Files as the profiler opens its own.
    fn own(path: &Path) -> io::Result<File> {
        crate::untrusted::open::own_file(path)
    }

    #[test]
    fn a_dynamic_program_is_followed_by_its_libraries() {
        let order = load_order(OsStr::new("true"), &own).unwrap();
        assert!(order.program.ends_with("true") && order.program.is_absolute(), "{order:?}");
        let linker = order.linker.as_deref().expect("dynamic");
        assert!(order.libraries.iter().any(|library| library == linker), "{order:?}");
        let names: Vec<&str> = order.libraries.iter().filter_map(|f| f.file_name()?.to_str()).collect();
        assert!(names.iter().any(|name| name.starts_with("libc.so")), "{names:?}");
        assert_eq!(order.files().next(), Some(order.program.as_path()), "the program first");
    }

    #[test]
    fn a_static_program_has_no_dynamic_linker() {
        let program = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/unwind/snapshot");
        let order = load_order(program.as_os_str(), &own).unwrap();
        assert_eq!(order, LoadOrder { program, linker: None, libraries: Vec::new() });
    }

    #[test]
    fn what_is_not_elf_is_an_error() {
        let err = load_order(OsStr::new("/etc/passwd"), &own).unwrap_err();
        assert_eq!(format!("{err}"), "/etc/passwd is not a 64-bit ELF file");
    }

    #[test]
    fn a_program_not_in_path_is_an_error() {
        let err = load_order(OsStr::new("no-such-program-anywhere"), &own).unwrap_err();
        assert_eq!(format!("{err:#}"), "cannot run no-such-program-anywhere: not found in PATH");
    }

    #[test]
    fn a_file_system_not_read_in_path_stops_the_search() {
        let not_read = |_: &Path| Err(io::Error::from(io::ErrorKind::PermissionDenied));
        let err = load_order(OsStr::new("true"), &not_read).unwrap_err();
        assert!(format!("{err}").starts_with("cannot read /"), "{err}");
        let absent = |_: &Path| Err(io::Error::from(io::ErrorKind::NotFound));
        let err = load_order(OsStr::new("true"), &absent).unwrap_err();
        assert_eq!(format!("{err}"), "cannot run true: not found in PATH");
    }

    #[test]
    fn a_dynamic_linker_not_read_is_not_run() {
        let program = Path::new("/bin/true");
        let only_the_program = |path: &Path| {
            if path == program { own(path) } else { Err(io::Error::from(io::ErrorKind::PermissionDenied)) }
        };
        let err = load_order(program.as_os_str(), &only_the_program).unwrap_err();
        assert!(format!("{err}").starts_with("cannot read the dynamic linker /"), "{err}");
    }
}
