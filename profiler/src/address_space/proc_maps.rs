//! A process's memory mappings, as read from `/proc/PID/maps`: which file and file offset an
//! address belonged to.
use std::{fmt, io, path::PathBuf};

use crate::model::Tgid;

/// What backs a mapping.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Backing {
    /// A file, by the path the target sees (may have been deleted since it was mapped).
    File { path: PathBuf, deleted: bool },
    /// A region the kernel names: `[vdso]`, `[stack]`, `[heap]`.
    Pseudo(String),
    /// Anonymous memory (JIT code lives here).
    Anonymous,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// Offset in the file of `start`.
    pub offset: u64,
    pub executable: bool,
    /// Device and inode of the file (0 for non-file mappings): the file's identity.
    pub dev: u64,
    pub inode: u64,
    pub backing: Backing,
}

impl Mapping {
    pub fn contains(&self, addr: u64) -> bool {
        (self.start..self.end).contains(&addr)
    }

    /// Offset in the backing file (or region) of an address inside this mapping.
    pub fn file_offset(&self, addr: u64) -> u64 {
        addr - self.start + self.offset
    }
}

#[cfg(test)]
impl Mapping {
    /// `start..end` mapped executable from the start of the file at `path`, with the file's
    /// device and inode, as the kernel would list it.
    pub fn of_file(path: &std::path::Path, start: u64, end: u64) -> Self {
        use std::os::unix::fs::MetadataExt as _;
        let metadata = std::fs::metadata(path).unwrap();
        let dev = (u64::from(rustix::fs::major(metadata.dev())) << 32)
            | u64::from(rustix::fs::minor(metadata.dev()));
        let backing = Backing::File { path: path.to_owned(), deleted: false };
        Self { start, end, offset: 0, executable: true, dev, inode: metadata.ino(), backing }
    }

    /// `start..end` mapped executable from a region named like `[heap]`.
    pub fn pseudo(name: &str, start: u64, end: u64) -> Self {
        Self {
            start,
            end,
            offset: 0,
            executable: true,
            dev: 0,
            inode: 0,
            backing: Backing::Pseudo(name.into()),
        }
    }
}

/// A mapping and when it was made (CLOCK_MONOTONIC ns; 0: before the recording began).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimedMapping {
    pub mapping: Mapping,
    pub since_ns: u64,
}

/// The mappings of one process, sorted by address and not overlapping, like the kernel's.
#[derive(Clone, Debug, Default)]
pub struct Mappings {
    entries: Vec<TimedMapping>,
}

#[derive(Debug, PartialEq, Eq)]
pub struct ParseError {
    pub line: usize,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed maps line {}", self.line)
    }
}

impl std::error::Error for ParseError {}

impl Mappings {
    /// Reads `/proc/PID/maps`.
    pub fn read(pid: Tgid) -> io::Result<Self> {
        // Not read_bounded: the file is as long as the process's list of mappings.
        let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
        Self::parse(&text).map_err(|err| io::Error::new(io::ErrorKind::InvalidData, err))
    }

    /// Parses the text of a `/proc/PID/maps` file.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let mut mappings = text
            .lines()
            .enumerate()
            .filter(|(_, line)| !line.trim().is_empty())
            .map(|(index, line)| parse_line(line).ok_or(ParseError { line: index + 1 }))
            .collect::<Result<Vec<_>, _>>()?;
        mappings.sort_by_key(|m| m.start);
        Ok(Self {
            entries: mappings.into_iter().map(|mapping| TimedMapping { mapping, since_ns: 0 }).collect(),
        })
    }

    /// The mapping that contains `addr`.
    pub fn find(&self, addr: u64) -> Option<&Mapping> {
        self.find_timed(addr).map(|entry| &entry.mapping)
    }

    /// The mapping that contains `addr`, with the time it was made.
    pub fn find_timed(&self, addr: u64) -> Option<&TimedMapping> {
        let index = self.entries.partition_point(|e| e.mapping.start <= addr);
        let candidate = self.entries.get(index.checked_sub(1)?)?;
        candidate.mapping.contains(addr).then_some(candidate)
    }

    pub fn mappings(&self) -> impl Iterator<Item = &Mapping> {
        self.entries.iter().map(|e| &e.mapping)
    }

    /// Adds a mapping made at `since_ns`, replacing whatever it overlaps, as mmap does.
    /// Returns the parts it displaced.
    pub fn insert(&mut self, mapping: Mapping, since_ns: u64) -> Vec<TimedMapping> {
        let (start, end) = (mapping.start, mapping.end);
        let mut displaced = Vec::new();
        let mut kept = Vec::with_capacity(self.entries.len() + 2);
        for entry in self.entries.drain(..) {
            let m = &entry.mapping;
            if m.end <= start || m.start >= end {
                kept.push(entry);
                continue;
            }
            if m.start < start {
                kept.push(TimedMapping { mapping: slice(m, m.start, start), ..entry.clone() });
            }
            if m.end > end {
                kept.push(TimedMapping { mapping: slice(m, end, m.end), ..entry.clone() });
            }
            displaced.push(TimedMapping { mapping: slice(m, m.start.max(start), m.end.min(end)), ..entry });
        }
        kept.push(TimedMapping { mapping, since_ns });
        kept.sort_by_key(|e| e.mapping.start);
        self.entries = kept;
        displaced
    }
}

/// The part `[start, end)` of a mapping.
fn slice(mapping: &Mapping, start: u64, end: u64) -> Mapping {
    let offset = match mapping.backing {
        Backing::File { .. } => mapping.offset + (start - mapping.start),
        _ => mapping.offset,
    };
    Mapping { start, end, offset, backing: mapping.backing.clone(), ..*mapping }
}

fn parse_line(line: &str) -> Option<Mapping> {
    // start-end perms offset major:minor inode [path]; the path may contain spaces.
    let mut fields = line.splitn(6, ' ');
    let (start, end) = fields.next()?.split_once('-')?;
    let perms = fields.next()?;
    let offset = fields.next()?;
    let (major, minor) = fields.next()?.split_once(':')?;
    let inode: u64 = fields.next()?.parse().ok()?;
    let name = fields.next().unwrap_or("").trim_start();
    let dev = (u64::from_str_radix(major, 16).ok()? << 32) | u64::from_str_radix(minor, 16).ok()?;
    Some(Mapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        offset: u64::from_str_radix(offset, 16).ok()?,
        executable: perms.as_bytes().get(2) == Some(&b'x'),
        dev,
        inode,
        backing: backing_named(name, inode),
    })
}

/// The backing of a mapping named `name` (the last field of a maps line). Anonymous memory a
/// process named itself (`[anon:NAME]`, `[anon_shmem:NAME]`, prctl's `PR_SET_VMA_ANON_NAME`) is
/// anonymous memory: a name any process chooses, as many as it likes, is not a module.
pub fn backing_named(name: &str, inode: u64) -> Backing {
    if name.is_empty() || (inode == 0 && (name.starts_with("[anon:") || name.starts_with("[anon_shmem:"))) {
        Backing::Anonymous
    } else if inode == 0 && !name.starts_with('/') {
        Backing::Pseudo(name.to_owned())
    } else {
        match name.strip_suffix(" (deleted)") {
            Some(path) => Backing::File { path: path.into(), deleted: true },
            None => Backing::File { path: name.into(), deleted: false },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
5583c2a00000-5583c2a01000 r--p 00000000 fe:01 1835342                    /tmp/work/split
5583c2a01000-5583c2a02000 r-xp 00001000 fe:01 1835342                    /tmp/work/split
5583c2a04000-5583c2a25000 rw-p 00000000 00:00 0                          [heap]
7f3a1c000000-7f3a1c021000 rw-p 00000000 00:00 0 
7f3a1d828000-7f3a1d9a5000 r-xp 00028000 fe:01 2241                       /usr/lib/x86_64-linux-gnu/libc.so.6
7f3a1dbd0000-7f3a1dbd1000 r-xp 00001000 00:2d 77                         /tmp/my lib.so (deleted)
7ffd2c5de000-7ffd2c5ff000 rw-p 00000000 00:00 0                          [stack]
7ffd2c5fe000-7ffd2c600000 r-xp 00000000 00:00 0                          [vdso]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
";

    #[test]
    fn parses_every_kind_of_line() {
        let space = Mappings::parse(MAPS).unwrap();
        assert_eq!(space.mappings().count(), 9);
        let text = space.find(0x5583c2a01234).unwrap();
        assert!(text.executable);
        assert_eq!(text.file_offset(0x5583c2a01234), 0x1234);
        assert_eq!(text.backing, Backing::File { path: "/tmp/work/split".into(), deleted: false });
        assert_eq!((text.dev, text.inode), (0xfe_0000_0001, 1835342));

        let libc = space.find(0x7f3a1d828000).unwrap();
        assert_eq!(libc.file_offset(0x7f3a1d828010), 0x28010);

        let deleted = space.find(0x7f3a1dbd0000).unwrap();
        assert_eq!(deleted.backing, Backing::File { path: "/tmp/my lib.so".into(), deleted: true });
        assert_eq!(space.find(0x7ffd2c5ff500).unwrap().backing, Backing::Pseudo("[vdso]".into()));
        for named in ["[anon:jit code]", "[anon_shmem:doublemapper]"] {
            assert_eq!(backing_named(named, 0), Backing::Anonymous, "{named}");
        }
        assert_eq!(space.find(0x7f3a1c000010).unwrap().backing, Backing::Anonymous);
        assert!(!space.find(0x5583c2a00000).unwrap().executable);
    }

    #[test]
    fn addresses_outside_any_mapping() {
        let space = Mappings::parse(MAPS).unwrap();
        assert_eq!(space.find(0), None);
        assert_eq!(space.find(0x5583c2a02000), None); // end is exclusive
        assert_eq!(space.find(u64::MAX), None);
    }

    #[test]
    fn rejects_garbage() {
        assert_eq!(Mappings::parse("hello world\n").unwrap_err(), ParseError { line: 1 });
        assert_eq!(Mappings::parse("1000-2000 r-xp zz 00:00 0\n").unwrap_err(), ParseError { line: 1 });
    }

    fn file(start: u64, end: u64, offset: u64) -> Mapping {
        Mapping {
            start,
            end,
            offset,
            executable: true,
            dev: 1,
            inode: 7,
            backing: Backing::File { path: "/lib/x.so".into(), deleted: false },
        }
    }

    #[test]
    fn insert_replaces_what_it_overlaps() {
        let mut space = Mappings::default();
        assert!(space.insert(file(0x1000, 0x5000, 0), 10).is_empty());
        // A new mapping in the middle splits the old one; the file offset of the right part moves.
        let new = Mapping { inode: 8, ..file(0x2000, 0x3000, 0) };
        let displaced = space.insert(new.clone(), 20);
        assert_eq!(displaced, [TimedMapping { mapping: file(0x2000, 0x3000, 0x1000), since_ns: 10 }]);
        let entries: Vec<_> = space.entries.iter().map(|e| (e.mapping.clone(), e.since_ns)).collect();
        assert_eq!(entries, [(file(0x1000, 0x2000, 0), 10), (new, 20), (file(0x3000, 0x5000, 0x2000), 10)]);
        assert_eq!(space.find_timed(0x3800).unwrap().mapping.file_offset(0x3800), 0x2800);
    }

    #[test]
    fn reads_own_maps() {
        let space = Mappings::read(Tgid::own()).unwrap();
        let here = reads_own_maps as *const () as usize as u64;
        let mapping = space.find(here).expect("own code is mapped");
        assert!(mapping.executable);
        assert!(matches!(mapping.backing, Backing::File { .. }));
    }
}
