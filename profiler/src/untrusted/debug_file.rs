//! Separate debug files: found as gdb documents it, by build id under the debug directories and
//! by `.gnu_debuglink` next to the file, in its `.debug/` directory and under the debug
//! directories; all of it inside the target's root. A link is a plain file name (a path would
//! lead elsewhere), and a candidate is accepted only when it is the file the module asks for:
//! the same build id, or the CRC the link records.
use std::{
    ffi::OsStr,
    fs::File,
    os::unix::ffi::OsStrExt as _,
    path::{Path, PathBuf},
};

use super::{
    Parts, StableFile, Writer,
    elf::ElfFacts,
    open::{self, Root},
};

/// The directories searched for separate debug files.
const DEBUG_DIRS: [&str; 2] = ["/usr/lib/debug", "/lib/debug"];

/// The debug file of a module mapped from `path` by a process whose paths resolve in `root`
/// (`asked`: whether a handle's file system is one the kernel answers for), whose facts
/// are `facts`, a file `writer` can change; made [`open::stable`]. A debug file names the
/// module's frames: it is taken only from root, or from the user who could change the module
/// anyway (a user's mount namespace may put their own files at the debug directories' paths).
/// Nothing is looked up in a file system the kernel does not answer for (see `mounts`).
pub(crate) fn find(
    root: &Root,
    asked: &dyn Fn(std::os::fd::BorrowedFd<'_>) -> bool,
    path: &Path,
    facts: &ElfFacts,
    writer: Writer,
) -> Option<StableFile> {
    candidates(path, facts).into_iter().filter(|candidate| candidate != path).find_map(|candidate| {
        let file = root.open(&candidate, asked).and_then(|file| open::stable(file, Parts::Whole)).ok()?;
        let trusted = match (file.writer(), writer) {
            (Writer::Root, _) => true,
            (Writer::User(debug), Writer::User(module)) => debug == module,
            _ => false,
        };
        (trusted && matches(&file, facts)).then_some(file)
    })
}

fn candidates(path: &Path, facts: &ElfFacts) -> Vec<PathBuf> {
    let mut candidates = Vec::new();
    if let Some((first, rest)) = facts.build_id.as_deref().and_then(<[u8]>::split_first) {
        let rest: String = rest.iter().map(|b| format!("{b:02x}")).collect();
        candidates
            .extend(DEBUG_DIRS.map(|dir| PathBuf::from(format!("{dir}/.build-id/{first:02x}/{rest}.debug"))));
    }
    let link = facts.debug_link.as_ref().map(|(name, _)| Path::new(OsStr::from_bytes(name)));
    if let (Some(name), Some(dir)) = (link.filter(|name| is_plain_name(name)), path.parent()) {
        candidates.push(dir.join(name));
        candidates.push(dir.join(".debug").join(name));
        let relative = dir.strip_prefix("/").unwrap_or(dir);
        candidates.extend(DEBUG_DIRS.map(|debug_dir| Path::new(debug_dir).join(relative).join(name)));
    }
    candidates
}

/// A file name alone: no directory, not `.` or `..`.
fn is_plain_name(name: &Path) -> bool {
    let bytes = name.as_os_str().as_bytes();
    !bytes.is_empty() && !bytes.contains(&b'/') && bytes != b"." && bytes != b".."
}

/// Whether `file` is the debug file of the module: the same build id, else the CRC its debug
/// link records.
fn matches(file: &File, module: &ElfFacts) -> bool {
    let Ok(image) = open::map(file) else { return false };
    let Some(debug) = ElfFacts::read(&image) else { return false };
    match (&module.build_id, &debug.build_id) {
        (Some(wanted), Some(found)) => wanted == found,
        _ => module.debug_link.as_ref().is_some_and(|&(_, crc)| crc32(&image) == crc),
    }
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = flate2::Crc::new();
    crc.update(bytes);
    crc.sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_are_plain_names() {
        assert!(is_plain_name(Path::new("libc.so.6.debug")));
        for bad in ["", ".", "..", "../../etc/shadow", "/etc/shadow", "a/b"] {
            assert!(!is_plain_name(Path::new(bad)), "{bad}");
        }
    }

    #[test]
    fn candidates_in_the_documented_places() {
        let facts = ElfFacts {
            build_id: Some(vec![0xab, 0xcd, 0xef]),
            debug_link: Some((b"app.debug".to_vec(), 0)),
            ..ElfFacts::default()
        };
        let found: Vec<String> = candidates(Path::new("/opt/app/bin/app"), &facts)
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        assert_eq!(
            found,
            [
                "/usr/lib/debug/.build-id/ab/cdef.debug",
                "/lib/debug/.build-id/ab/cdef.debug",
                "/opt/app/bin/app.debug",
                "/opt/app/bin/.debug/app.debug",
                "/usr/lib/debug/opt/app/bin/app.debug",
                "/lib/debug/opt/app/bin/app.debug",
            ]
        );
        let escaping =
            ElfFacts { debug_link: Some((b"../../../etc/shadow".to_vec(), 0)), ..ElfFacts::default() };
        assert!(candidates(Path::new("/opt/app"), &escaping).is_empty(), "a path is not a link");
    }

    #[test]
    fn crc_is_gnu_debuglinks() {
        // The CRC-32 of gdb's documentation (IEEE polynomial), of "123456789".
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
    }
}
