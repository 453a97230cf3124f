//! A process's memory mappings, as read from `/proc/PID/maps`: which file and file offset an
//! address belonged to.
use std::{
    ffi::OsStr,
    fmt,
    io::{self, BufRead as _, BufReader, Read as _},
    os::unix::ffi::OsStrExt as _,
    path::PathBuf,
    sync::{
        Arc, OnceLock,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use crate::{model::Tgid, untrusted::open::MappedAt};

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
    /// The whole of the file at `path` (its device and inode in `metadata`), as a mapping of it
    /// would be listed, from address 0: a file a process is about to map.
    pub fn whole_file(path: &std::path::Path, metadata: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt as _;
        let dev = crate::untrusted::mounts::listed_dev(metadata.dev());
        let backing = Backing::File { path: path.to_owned(), deleted: false };
        Self {
            start: 0,
            end: metadata.len(),
            offset: 0,
            executable: true,
            dev,
            inode: metadata.ino(),
            backing,
        }
    }

    pub fn contains(&self, addr: u64) -> bool {
        (self.start..self.end).contains(&addr)
    }

    /// Offset in the backing file (or region) of an address inside this mapping.
    pub fn file_offset(&self, addr: u64) -> u64 {
        addr - self.start + self.offset
    }

    /// What opening its file needs to know of it.
    pub fn at(&self) -> MappedAt {
        MappedAt { start: self.start, end: self.end, dev: self.dev, inode: self.inode }
    }
}

#[cfg(test)]
impl Mapping {
    /// `start..end` mapped executable from the start of the file at `path`, as the kernel would
    /// list it.
    pub fn of_file(path: &std::path::Path, start: u64, end: u64) -> Self {
        Self { start, end, ..Self::whole_file(path, &std::fs::metadata(path).unwrap()) }
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
#[derive(Clone, Debug)]
pub struct Mappings {
    entries: Vec<TimedMapping>,
    /// Read from a `/proc/PID/maps` longer than [`MAX_MAPS_BYTES`]: only up to there.
    cut: bool,
    /// Read from a `/proc/PID/maps` that took longer than [`MAX_MAPS_READ_TIME`]: only as far as
    /// it got by then.
    out_of_time: bool,
    /// Which table this is, as it is now: each change makes it another (processes that share
    /// it share it unchanged).
    id: u64,
    /// The files it maps executable, once asked (see [`Self::executable_files`]); forgotten at
    /// each change.
    executable_files: OnceLock<Arc<[Mapping]>>,
}

/// The last table id given.
static TABLES: AtomicU64 = AtomicU64::new(0);

fn next_table_id() -> u64 {
    TABLES.fetch_add(1, Ordering::Relaxed) + 1
}

impl Default for Mappings {
    fn default() -> Self {
        Self::of(Vec::new(), false)
    }
}

/// Bytes of a `/proc/PID/maps` read at most. A process may map as many files as the kernel
/// allows (65530 by default), each under a name of up to 4096 bytes of its choosing: 256 MiB of
/// text. Every mapping of that many with a name of 100 bytes fits.
pub(crate) const MAX_MAPS_BYTES: u64 = 16 << 20;

/// The longest a reading of a `/proc/PID/maps` takes: the kernel writes it a chunk at a time
/// (100 ms for 60,000 mappings), each chunk waiting for the process's memory lock, which a
/// process with tens of thousands of mappings holds for tens of milliseconds at each fork. What
/// was read by then is kept, as a reading cut at [`MAX_MAPS_BYTES`] is.
pub(crate) const MAX_MAPS_READ_TIME: Duration = Duration::from_millis(250);

/// A text read until a time: past it, it reads as ended.
struct Timed<R> {
    text: R,
    until: Instant,
    out_of_time: bool,
}

impl<R: io::Read> io::Read for Timed<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if Instant::now() >= self.until {
            self.out_of_time = true;
            return Ok(0);
        }
        self.text.read(buf)
    }
}

/// Readings of a `/proc/PID/maps` cut at [`MAX_MAPS_BYTES`] or [`MAX_MAPS_READ_TIME`], for the
/// summary.
static CUT_READINGS: AtomicU64 = AtomicU64::new(0);

/// How many readings of a `/proc/PID/maps` stopped at [`MAX_MAPS_BYTES`] so far.
pub(crate) fn cut_readings() -> u64 {
    CUT_READINGS.load(Ordering::Relaxed)
}

/// The longest line of a `/proc/PID/maps` (a path is at most 4096 bytes, each of which the
/// kernel may write as an escape of four, `\012` for a line break): past it, a line is not one.
const MAX_LINE_BYTES: u64 = 20 << 10;

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
    /// Reads `/proc/PID/maps` here, up to [`MAX_MAPS_BYTES`] or [`MAX_MAPS_READ_TIME`], a line
    /// at a time: the profiler's own, and a process `check` looks at (targets' are read by
    /// readers: see `untrusted::reader::maps`).
    pub fn read(pid: Tgid) -> io::Result<Self> {
        let file = std::fs::File::open(format!("/proc/{pid}/maps"))?;
        Self::read_from(file, MAX_MAPS_READ_TIME)
    }

    /// Reads the text of a `/proc/PID/maps` from `text` as [`Self::read`] does, for at most
    /// `time`. What `text` fails with is what this fails with.
    pub fn read_from(text: impl io::Read, time: Duration) -> io::Result<Self> {
        let timed = Timed { text, until: Instant::now() + time, out_of_time: false };
        let mut text = BufReader::with_capacity(64 << 10, timed.take(MAX_MAPS_BYTES));
        let mut mappings = Self::parse_from(&mut text).map_err(|err| match err {
            ParseLinesError::Read(err) => err,
            ParseLinesError::Line(err) => io::Error::new(io::ErrorKind::InvalidData, err),
        })?;
        // A line cut at the end is the time's doing, not the bound's, when time ran out.
        mappings.out_of_time = text.into_inner().into_inner().out_of_time;
        mappings.cut &= !mappings.out_of_time;
        if mappings.cut || mappings.out_of_time {
            CUT_READINGS.fetch_add(1, Ordering::Relaxed);
        }
        Ok(mappings)
    }

    /// Whether this was read from a `/proc/PID/maps` that took too long, as far as it got.
    pub fn out_of_time(&self) -> bool {
        self.out_of_time
    }

    /// Whether `addr` lies past what a reading cut at [`MAX_MAPS_BYTES`] got to: reading the
    /// maps again would not find its mapping either (a reading cut for time may, another time).
    pub fn beyond_reading(&self, addr: u64) -> bool {
        self.cut && self.entries.last().is_some_and(|last| addr >= last.mapping.end)
    }

    /// Parses the text of a `/proc/PID/maps` file: paths are bytes, as the kernel gives them.
    #[cfg(any(test, feature = "testing"))]
    pub fn parse(text: &[u8]) -> Result<Self, ParseError> {
        Self::parse_from(text).map_err(ParseLinesError::into_parse_error)
    }

    /// Parses lines until `reader` ends, as [`Self::parse`]. A last line cut (the text was
    /// longer than the reader lets through) is left out, and the mappings say they were cut.
    fn parse_from(mut reader: impl io::BufRead) -> Result<Self, ParseLinesError> {
        let mut mappings = Vec::new();
        let mut line = Vec::new();
        let mut cut = false;
        for number in 1.. {
            line.clear();
            (&mut reader).take(MAX_LINE_BYTES).read_until(b'\n', &mut line)?;
            let Some(text) = line.strip_suffix(b"\n") else {
                // The end, or a line cut by the bound.
                cut = !line.is_empty();
                break;
            };
            if text.trim_ascii().is_empty() {
                continue;
            }
            mappings.push(parse_line(text).ok_or(ParseError { line: number })?);
        }
        mappings.sort_by_key(|m| m.start);
        let entries = mappings.into_iter().map(|mapping| TimedMapping { mapping, since_ns: 0 }).collect();
        Ok(Self::of(entries, cut))
    }

    fn of(entries: Vec<TimedMapping>, cut: bool) -> Self {
        Self { entries, cut, out_of_time: false, id: next_table_id(), executable_files: OnceLock::new() }
    }

    /// Which table this is, as it is now: another once anything is mapped into it, the process
    /// runs exec or its maps are read again.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Each file mapped executable, once (by device and inode: hard links are one file), at its
    /// lowest mapping: what runtimes are looked for in. Worked out once per change of the table,
    /// and shared by the processes that share it (children forked from one with tens of
    /// thousands of mappings).
    pub fn executable_files(&self) -> Arc<[Mapping]> {
        let files = self.executable_files.get_or_init(|| {
            let mut seen = rustc_hash::FxHashSet::default();
            self.mappings()
                .filter(|mapping| {
                    mapping.executable
                        && matches!(mapping.backing, Backing::File { .. })
                        && seen.insert((mapping.dev, mapping.inode))
                })
                .cloned()
                .collect()
        });
        Arc::clone(files)
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
        self.id = next_table_id();
        self.executable_files = OnceLock::new();
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

/// Why lines could not be parsed: one that is not a mapping, or a failed read.
#[derive(Debug)]
enum ParseLinesError {
    Line(ParseError),
    Read(io::Error),
}

impl From<ParseError> for ParseLinesError {
    fn from(err: ParseError) -> Self {
        Self::Line(err)
    }
}

impl From<io::Error> for ParseLinesError {
    fn from(err: io::Error) -> Self {
        Self::Read(err)
    }
}

#[cfg(any(test, feature = "testing"))]
impl ParseLinesError {
    /// The error of a text in memory, which cannot fail to be read.
    fn into_parse_error(self) -> ParseError {
        match self {
            Self::Line(err) => err,
            Self::Read(_) => ParseError { line: 0 },
        }
    }
}

impl fmt::Display for ParseLinesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Line(err) => err.fmt(f),
            Self::Read(err) => err.fmt(f),
        }
    }
}

impl std::error::Error for ParseLinesError {}

fn parse_line(line: &[u8]) -> Option<Mapping> {
    // start-end perms offset major:minor inode [path]; the path may contain spaces, and is any
    // bytes but a line break.
    let mut fields = line.splitn(6, |&b| b == b' ');
    let mut text = || std::str::from_utf8(fields.next()?).ok();
    let (start, end) = text()?.split_once('-')?;
    let perms = text()?;
    let offset = text()?;
    let (major, minor) = text()?.split_once(':')?;
    let inode: u64 = text()?.parse().ok()?;
    let name = fields.next().unwrap_or_default().trim_ascii_start();
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

/// The backing of a mapping named `name` (the last field of a maps line, a path of any bytes).
/// Anonymous memory a process named itself (`[anon:NAME]`, `[anon_shmem:NAME]`, prctl's
/// `PR_SET_VMA_ANON_NAME`) is anonymous memory: a name any process chooses, as many as it likes,
/// is not a module.
pub(crate) fn backing_named(name: &[u8], inode: u64) -> Backing {
    if name.is_empty() || (inode == 0 && (name.starts_with(b"[anon:") || name.starts_with(b"[anon_shmem:"))) {
        Backing::Anonymous
    } else if inode == 0 && !name.starts_with(b"/") {
        Backing::Pseudo(String::from_utf8_lossy(name).into_owned())
    } else {
        let path = |bytes: &[u8]| PathBuf::from(OsStr::from_bytes(bytes));
        match name.strip_suffix(b" (deleted)") {
            Some(name) => Backing::File { path: path(name), deleted: true },
            None => Backing::File { path: path(name), deleted: false },
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
        let space = Mappings::parse(MAPS.as_bytes()).unwrap();
        assert_eq!(space.mappings().count(), 9);
        assert!(!space.cut);
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
            assert_eq!(backing_named(named.as_bytes(), 0), Backing::Anonymous, "{named}");
        }
        assert_eq!(space.find(0x7f3a1c000010).unwrap().backing, Backing::Anonymous);
        assert!(!space.find(0x5583c2a00000).unwrap().executable);
    }

    #[test]
    fn addresses_outside_any_mapping() {
        let space = Mappings::parse(MAPS.as_bytes()).unwrap();
        assert_eq!(space.find(0), None);
        assert_eq!(space.find(0x5583c2a02000), None); // end is exclusive
        assert_eq!(space.find(u64::MAX), None);
    }

    #[test]
    fn rejects_garbage() {
        assert_eq!(Mappings::parse(b"hello world\n").unwrap_err(), ParseError { line: 1 });
        assert_eq!(Mappings::parse(b"1000-2000 r-xp zz 00:00 0\n").unwrap_err(), ParseError { line: 1 });
    }

    #[test]
    fn paths_are_any_bytes() {
        let line = b"1000-2000 r-xp 00000000 fe:01 7 /tmp/caf\xe9/lib\xff.so (deleted)\n";
        let space = Mappings::parse(line).unwrap();
        let Backing::File { path, deleted: true } = &space.find(0x1000).unwrap().backing else { panic!() };
        assert_eq!(path.as_os_str().as_bytes(), b"/tmp/caf\xe9/lib\xff.so", "not UTF-8, kept as it is");
    }

    #[test]
    fn a_text_longer_than_the_bound_is_read_up_to_it() {
        let line = "1000-2000 r-xp 00000000 fe:01 7 /lib/x.so\n";
        let text = format!("{line}{}", &line[..20]);
        let space = Mappings::parse_from(text.as_bytes()).unwrap();
        assert_eq!((space.mappings().count(), space.cut), (1, true), "the cut line left out");
        let long = format!("1000-2000 r-xp 00000000 fe:01 7 /{}\n", "x".repeat(MAX_LINE_BYTES as usize));
        assert!(Mappings::parse(long.as_bytes()).unwrap().cut, "no line is that long");
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

    /// Targets' maps are read by a reader, a chunk at a time (here of 100 bytes): the same
    /// mappings of this test's code as read here; a process gone is an error of its own kind.
    #[test]
    fn maps_read_by_a_reader_are_those_read_here() {
        use std::io::Read as _;
        let code = |space: &Mappings| {
            let here = maps_read_by_a_reader_are_those_read_here as *const () as usize as u64;
            space.find(here).cloned().expect("own code is mapped")
        };
        let mut text = Vec::new();
        let mut maps = crate::untrusted::reader::maps(Tgid::own(), None);
        let mut chunk = [0; 100];
        loop {
            match maps.read(&mut chunk).unwrap() {
                0 => break,
                read => text.extend_from_slice(&chunk[..read]),
            }
        }
        assert!(text.len() > 1000, "read in many chunks: {} bytes", text.len());
        let by_reader = Mappings::parse(&text).unwrap();
        assert_eq!(code(&by_reader), code(&Mappings::read(Tgid::own()).unwrap()));
        let gone =
            Mappings::read_from(crate::untrusted::reader::maps(Tgid(u32::MAX), None), MAX_MAPS_READ_TIME);
        assert_eq!(gone.unwrap_err().kind(), io::ErrorKind::NotFound);
    }
}
