//! Go's table of its own functions (`runtime.pclntab`), which every Go binary keeps, stripped
//! or not: Go's runtime reads it for its tracebacks and its collector. For each function it
//! holds its entry, its name and, per range of PCs, varint-coded runs of values: the stack
//! pointer's offset from the function's entry (`pcsp`), its source file (`pcfile`) and line
//! (`pcln`), and which of the calls inlined into it the PC is in (a `pcdata` table, into the
//! function's inline tree, a `funcdata`).
//!
//! The layout has changed with Go's versions; each is told by the header's first word. Tables of
//! Go 1.16 and later are read; older ones (Go 1.2 to 1.15) are refused by name. Every offset in
//! the table is the target's: each read is bounds-checked, a name or path is read up to
//! [`MAX_STRING`] bytes, a run of values for at most [`MAX_RUNS`] runs, and an inline tree
//! [`MAX_INLINED`] calls deep.
use std::ops::Range;

use anyhow::{Result, bail};

pub use super::binary::Placement;

/// Bytes of a function's name or a file's path read at most (a generic function's name spells
/// its type arguments out).
pub const MAX_STRING: usize = 4096;
/// Runs of a value table decoded at most for one PC (one per change of value: a function of
/// a few thousand lines has a few thousand).
const MAX_RUNS: usize = 1 << 16;

/// What lookups may still cost: steps left, one per run of a value table decoded and per 64
/// bytes of a name or path read. A table can make each lookup long, and a stack has up to 1,024
/// frames, each with a chain of inlined calls: the caller gives what one stack may cost, and
/// lookups fail once it is spent.
#[derive(Debug)]
pub struct Work {
    steps: usize,
    /// A lookup failed for want of steps.
    spent: bool,
}

impl Work {
    pub fn new(steps: usize) -> Self {
        Self { steps, spent: false }
    }

    /// Whether a lookup failed for want of work left.
    pub fn spent(&self) -> bool {
        self.spent
    }

    /// Takes `steps`; false (and spent) when there are not that many left.
    fn take(&mut self, steps: usize) -> bool {
        match self.steps.checked_sub(steps) {
            Some(left) => self.steps = left,
            None => self.spent = true,
        }
        !self.spent
    }
}

/// Calls inlined into one another followed at most at one PC.
pub const MAX_INLINED: usize = 64;

/// Offsets of fields in `runtime.moduledata` (64-bit): the table's address and its names', the
/// first function's entry (`minpc`), and `gofunc` (where the functions' data is, Go 1.18 and
/// later: it moved with 1.20 and 1.27).
const MODULE_PCHEADER: usize = 0;
const MODULE_NAMES: usize = 8;
const MODULE_MINPC: usize = 160;

/// The index of a function's inline tree among its data (`FUNCDATA_InlTree`): 3 from Go 1.16,
/// 4 in Go 1.12 to 1.15 (which kept register maps before it); and of the table of where a PC is
/// in that tree among its value tables (`PCDATA_InlTreeIndex`), 2 in both.
const FUNCDATA_INLINE_TREE: usize = 3;
const FUNCDATA_INLINE_TREE_GO112: usize = 4;
const PCDATA_INLINE_INDEX: usize = 2;

/// A function that writes the stack pointer arbitrarily (`runtime.systemstack`, `mcall`,
/// `asmcgocall`): its caller cannot be found from its stack offset.
const FLAG_SPWRITE: u8 = 1 << 1;
/// Those functions, by name, for the releases before Go 1.17, whose functions have no flags.
const WRITES_SP: [&[u8]; 6] = [
    b"runtime.systemstack",
    b"runtime.morestack",
    b"runtime.mcall",
    b"runtime.asmcgocall",
    b"runtime.cgocallback",
    b"runtime.cgocallback_gofunc",
];

/// The table's layouts, by the Go versions that write them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// Go 1.2 to 1.15: entries are addresses, everything else an offset from the table's start.
    Go12,
    /// Go 1.16 and 1.17: entries are addresses.
    Go116,
    /// Go 1.18 and 1.19: entries are offsets from the start of Go's text.
    Go118,
    /// Go 1.20 and later: functions say the line they start on.
    Go120,
}

impl Version {
    fn of_magic(magic: u32) -> Result<Self> {
        Ok(match magic {
            0xffff_fffb => Self::Go12,
            0xffff_fffa => Self::Go116,
            0xffff_fff0 => Self::Go118,
            0xffff_fff1 => Self::Go120,
            other => bail!("not a table of Go's functions (magic {other:#x})"),
        })
    }

    /// Where the fields of a function's record (`runtime._func`) and of an inlined call's
    /// (`runtime.inlinedCall`) are.
    fn fields(self) -> &'static Fields {
        match self {
            Self::Go12 => &Fields {
                entry_size: 8,
                name: 8,
                pcsp: 20,
                pcfile: 24,
                pcln: 28,
                npcdata: 32,
                cu: None,
                flag: None,
                // From Go 1.12 (a word's first byte before: its high byte, 0, read here).
                nfuncdata: 39,
                record_size: 40,
                inlined: InlinedFields { size: 20, name: 12, parent_pc: 16 },
            },
            Self::Go116 => &Fields {
                entry_size: 8,
                name: 8,
                pcsp: 20,
                pcfile: 24,
                pcln: 28,
                npcdata: 32,
                cu: Some(36),
                flag: Some(41),
                nfuncdata: 43,
                record_size: 44,
                inlined: InlinedFields { size: 20, name: 12, parent_pc: 16 },
            },
            Self::Go118 => &Fields {
                entry_size: 4,
                name: 4,
                pcsp: 16,
                pcfile: 20,
                pcln: 24,
                npcdata: 28,
                cu: Some(32),
                flag: Some(37),
                nfuncdata: 39,
                record_size: 40,
                inlined: InlinedFields { size: 20, name: 12, parent_pc: 16 },
            },
            Self::Go120 => &Fields {
                entry_size: 4,
                name: 4,
                pcsp: 16,
                pcfile: 20,
                pcln: 24,
                npcdata: 28,
                cu: Some(32),
                flag: Some(41),
                nfuncdata: 43,
                record_size: 44,
                inlined: InlinedFields { size: 16, name: 4, parent_pc: 8 },
            },
        }
    }

    /// Where `gofunc` is in the module data of the Go `minor` release that wrote this layout:
    /// `None` where it is not needed (Go 1.16's data are addresses) or not known.
    fn gofunc_field(self, minor: Option<u32>) -> Option<usize> {
        match (self, minor?) {
            (Self::Go12 | Self::Go116, _) => None,
            (Self::Go118, 18..=19) => Some(304),
            (Self::Go120, 20..=26) => Some(320),
            (Self::Go120, 27) => Some(344),
            _ => None,
        }
    }
}

/// Offsets of the fields read of a function's record.
struct Fields {
    /// Bytes of its entry (the record's first field) and of each half of a function table's
    /// pair: an address (8) or an offset from the text's start (4).
    entry_size: usize,
    name: usize,
    pcsp: usize,
    pcfile: usize,
    pcln: usize,
    npcdata: usize,
    /// Its compilation unit's first entry in the table of files (from Go 1.16: before, one
    /// table of files serves every function).
    cu: Option<usize>,
    /// Its flags (`TOPFRAME`, `SPWRITE`): from Go 1.17 (padding, 0, in 1.16).
    flag: Option<usize>,
    nfuncdata: usize,
    /// Where its value tables' offsets start, and its data's after them.
    record_size: usize,
    inlined: InlinedFields,
}

/// Offsets of the fields read of an inlined call.
struct InlinedFields {
    size: usize,
    name: usize,
    /// The PC (an offset from the function's entry) of an instruction of the call's caller at
    /// the call: its file and line are the call's.
    parent_pc: usize,
}

/// Where a table's parts are: offsets from its start.
#[derive(Clone, Debug)]
struct Layout {
    version: Version,
    functions: usize,
    /// The address Go's text starts at (`runtime.text`), which entries are offsets from.
    text_start: u64,
    names: usize,
    cu_files: usize,
    files: usize,
    values: usize,
    /// The function table: pairs of (entry, record's offset from `records`), one per function,
    /// and a last entry, the end of the last function.
    function_table: usize,
    /// What records' offsets are from: the function table, or the table's start (Go 1.2-1.15).
    records: usize,
    /// Where the functions' data is in the file (`go:func.*`, Go 1.18 and later), when known.
    functions_data: Option<usize>,
    /// The index of a function's inline tree among its data, where the release's is known.
    inline_tree: Option<usize>,
    /// Whether its functions say they write the stack pointer (Go 1.17 and later), or their
    /// names must.
    flags: bool,
}

/// A Go binary's table of functions, read in place from its file's `bytes`.
pub struct GoTable<B> {
    bytes: B,
    placement: Placement,
    layout: Layout,
}

/// A function of the table: its entry (an SVMA) and where its record is in the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Function {
    pub entry: u64,
    record: usize,
}

/// A function at a PC, with the file and line of the PC in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Located<'a> {
    pub name: &'a [u8],
    pub file: &'a [u8],
    pub line: u32,
}

impl<B: AsRef<[u8]>> GoTable<B> {
    /// The table in an ELF file's `bytes`: `None` when the file has none (not a Go binary), an
    /// error when it has one that is not read (what it is).
    pub fn read(bytes: B) -> Result<Option<Self>> {
        let Some(placement) = Placement::find(bytes.as_ref())? else { return Ok(None) };
        Self::new(bytes, placement).map(Some)
    }

    /// The table `placement` says is in `bytes`.
    pub fn new(bytes: B, placement: Placement) -> Result<Self> {
        let layout =
            Layout::read(bytes.as_ref().get(placement.table.clone()).unwrap_or_default(), &placement)?;
        Ok(Self { bytes, placement, layout })
    }

    pub fn version(&self) -> Version {
        self.layout.version
    }

    /// What its binary holds around it: the release that built it, its load segments, ...
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// How many functions it has.
    pub fn functions(&self) -> usize {
        self.layout.functions
    }

    /// Whether calls inlined into its functions are read (Go 1.12 to 1.17's, whose data are
    /// addresses, and later ones' whose functions' data was found).
    pub fn reads_inlined(&self) -> bool {
        let addresses = matches!(self.layout.version, Version::Go12 | Version::Go116);
        self.layout.inline_tree.is_some() && (addresses || self.layout.functions_data.is_some())
    }

    /// The addresses (SVMAs) its functions cover.
    pub fn text(&self) -> Option<Range<u64>> {
        Some(self.entry(0)?..self.entry(self.layout.functions)?)
    }

    /// The function whose code `svma` is in.
    pub fn function(&self, svma: u64) -> Option<Function> {
        let count = self.layout.functions;
        if !self.text()?.contains(&svma) {
            return None;
        }
        // The last function whose entry is at or before `svma`; entries are sorted.
        let (mut low, mut high) = (0, count);
        while high - low > 1 {
            let mid = low + (high - low) / 2;
            if self.entry(mid)? <= svma {
                low = mid;
            } else {
                high = mid;
            }
        }
        let size = self.fields().entry_size;
        let pair = self.layout.function_table + low * 2 * size;
        let record = self.layout.records.checked_add(self.word(pair + size, size)?)?;
        let entry = self.entry(low)?;
        // A record that does not say the entry its table does is not this function's.
        (self.entry_word(record)? == entry).then_some(Function { entry, record })
    }

    /// Its name.
    pub fn name(&self, function: Function, work: &mut Work) -> Option<&[u8]> {
        self.name_at(self.u32(function.record + self.fields().name)?, work)
    }

    /// Whether its name is `name`, reading no more of it than that.
    pub fn is_named(&self, function: Function, name: &[u8]) -> bool {
        let Some(offset) = self.u32(function.record + self.fields().name) else { return false };
        let at = self.layout.names.saturating_add(offset as usize);
        self.bytes()
            .get(at..at.saturating_add(name.len() + 1))
            .is_some_and(|bytes| bytes[..name.len()] == *name && bytes[name.len()] == 0)
    }

    /// How far below its stack pointer at entry the stack pointer is at `svma` in it (the
    /// return address excluded): its return address is that far above the stack pointer.
    pub fn sp_offset(&self, function: Function, svma: u64, work: &mut Work) -> Option<u64> {
        let offset = self.value(function, self.u32(function.record + self.fields().pcsp)?, svma, work)?;
        u64::try_from(offset).ok()
    }

    /// The source file and line of `svma` in it.
    pub fn source(&self, function: Function, svma: u64, work: &mut Work) -> Option<(&[u8], u32)> {
        let fields = self.fields();
        let file =
            u32::try_from(self.value(function, self.u32(function.record + fields.pcfile)?, svma, work)?)
                .ok()?;
        let line =
            u32::try_from(self.value(function, self.u32(function.record + fields.pcln)?, svma, work)?)
                .ok()?;
        let cu = match fields.cu {
            Some(field) => self.u32(function.record + field)?,
            None => 0,
        };
        let entry = self.layout.cu_files.checked_add(4 * cu.checked_add(file)? as usize)?;
        let path = self.string(self.layout.files.checked_add(self.u32(entry)? as usize)?, work)?;
        Some((path, line))
    }

    /// The functions at `svma` in `function`, innermost first: those inlined into it there, each
    /// with its file and line, then the function itself with its line at the outermost call.
    /// Empty when not even the function's own name can be read.
    pub fn located(&self, function: Function, svma: u64, work: &mut Work) -> Vec<Located<'_>> {
        let mut located = Vec::new();
        let tree = self.inline_tree(function);
        let mut at = svma;
        let place = |at, work: &mut Work| self.source(function, at, work).unwrap_or((b"", 0));
        for _ in 0..MAX_INLINED {
            let call = tree.and_then(|tree| {
                let index = usize::try_from(self.pcdata(function, PCDATA_INLINE_INDEX, at, work)?).ok()?;
                let fields = &self.fields().inlined;
                let call = tree.checked_add(index.checked_mul(fields.size)?)?;
                let name = self.name_at(self.file_u32(call + fields.name)?, work)?;
                Some((name, self.file_u32(call + fields.parent_pc)?))
            });
            let Some((name, parent_pc)) = call else { break };
            let (file, line) = place(at, work);
            located.push(Located { name, file, line });
            at = function.entry.saturating_add(u64::from(parent_pc));
        }
        if let Some(name) = self.name(function, work) {
            let (file, line) = place(at, work);
            located.push(Located { name, file, line });
        }
        located
    }

    /// Whether it writes the stack pointer arbitrarily, so that its caller cannot be found.
    pub fn writes_sp(&self, function: Function) -> bool {
        if !self.layout.flags {
            return WRITES_SP.iter().any(|name| self.is_named(function, name));
        }
        let flag = self.fields().flag.and_then(|field| self.bytes().get(function.record + field));
        flag.is_some_and(|flag| flag & FLAG_SPWRITE != 0)
    }

    fn fields(&self) -> &'static Fields {
        self.layout.version.fields()
    }

    /// Where a function's inline tree is in the file.
    fn inline_tree(&self, function: Function) -> Option<usize> {
        let fields = self.fields();
        let index = self.layout.inline_tree?;
        let funcdata = usize::from(*self.bytes().get(function.record + fields.nfuncdata)?);
        if index >= funcdata {
            return None;
        }
        let pcdata = self.u32(function.record + fields.npcdata)? as usize;
        let after_pcdata = function.record.checked_add(fields.record_size)?.checked_add(4 * pcdata)?;
        match self.layout.version {
            Version::Go12 | Version::Go116 => {
                // Addresses, 8-aligned.
                let address = self.u64(after_pcdata.next_multiple_of(8) + 8 * index)?;
                self.placement.file_offset(address, 1)
            }
            Version::Go118 | Version::Go120 => {
                let offset = self.u32(after_pcdata + 4 * index)?;
                (offset != u32::MAX).then_some(())?;
                self.layout.functions_data?.checked_add(offset as usize)
            }
        }
    }

    /// The value at `svma` of a function's `index`th `pcdata` table.
    fn pcdata(&self, function: Function, index: usize, svma: u64, work: &mut Work) -> Option<i32> {
        let fields = self.fields();
        if index >= self.u32(function.record + fields.npcdata)? as usize {
            return None;
        }
        let offset = self.u32(function.record + fields.record_size + 4 * index)?;
        self.value(function, offset, svma, work)
    }

    /// The value at `svma` of a function's value table at `offset`.
    fn value(&self, function: Function, offset: u32, svma: u64, work: &mut Work) -> Option<i32> {
        // No table: the function says nothing of it.
        if offset == 0 {
            return None;
        }
        let mut values = self.bytes().get(self.layout.values.checked_add(offset as usize)?..)?;
        let mut value: i32 = -1;
        let mut pc = function.entry;
        for run in 0..MAX_RUNS {
            work.take(1).then_some(())?;
            let value_delta = uvarint(&mut values)?;
            // The end of the table (a first delta of 0 is a value of -1).
            if value_delta == 0 && run > 0 {
                return None;
            }
            let delta = if value_delta & 1 == 0 { value_delta >> 1 } else { !(value_delta >> 1) };
            value = value.wrapping_add(delta as i32);
            pc = pc.checked_add(uvarint(&mut values)?)?;
            if svma < pc {
                return Some(value);
            }
        }
        None
    }

    /// The entry (an SVMA) of the function table's `index`th pair.
    fn entry(&self, index: usize) -> Option<u64> {
        let size = self.fields().entry_size;
        self.entry_word(self.layout.function_table.checked_add(index.checked_mul(2 * size)?)?)
    }

    fn entry_word(&self, at: usize) -> Option<u64> {
        match self.layout.version {
            Version::Go12 | Version::Go116 => self.u64(at),
            Version::Go118 | Version::Go120 => self.layout.text_start.checked_add(u64::from(self.u32(at)?)),
        }
    }

    fn name_at(&self, offset: u32, work: &mut Work) -> Option<&[u8]> {
        self.string(self.layout.names.checked_add(offset as usize)?, work)
    }

    fn bytes(&self) -> &[u8] {
        self.bytes.as_ref().get(self.placement.table.clone()).unwrap_or_default()
    }

    fn word(&self, at: usize, size: usize) -> Option<usize> {
        match size {
            8 => usize::try_from(self.u64(at)?).ok(),
            _ => Some(self.u32(at)? as usize),
        }
    }

    fn u32(&self, at: usize) -> Option<u32> {
        read_u32(self.bytes(), at)
    }

    fn u64(&self, at: usize) -> Option<u64> {
        read_u64(self.bytes(), at)
    }

    /// A word anywhere in the file (functions' data is outside the table before Go 1.26).
    fn file_u32(&self, at: usize) -> Option<u32> {
        read_u32(self.bytes.as_ref(), at)
    }

    /// The NUL-terminated string at `at`, its bytes read charged to `work`.
    fn string(&self, at: usize, work: &mut Work) -> Option<&[u8]> {
        let rest = self.bytes().get(at..)?;
        let rest = &rest[..rest.len().min(MAX_STRING)];
        let end = rest.iter().position(|&b| b == 0);
        work.take(1 + end.unwrap_or(rest.len()) / 64).then_some(())?;
        end.map(|end| &rest[..end])
    }
}

impl Layout {
    /// The layout its `header` (the table's bytes) says, `placement` saying where Go's text and
    /// functions' data start when the header leaves them out.
    fn read(header: &[u8], placement: &Placement) -> Result<Self> {
        let Some(magic) = read_u32(header, 0) else { bail!("Go's table is shorter than its header") };
        let version = Version::of_magic(magic)?;
        // Padding, the instruction size quantum (1 on x86-64) and the pointer size.
        if header.get(4..8) != Some(&[0, 0, 1, 8][..]) {
            bail!("Go's table is not one of a 64-bit x86 binary");
        }
        if version == Version::Go12 {
            return Self::read_go12(header, placement);
        }
        let count = match version {
            Version::Go12 | Version::Go116 => 7,
            Version::Go118 | Version::Go120 => 8,
        };
        let fields: Vec<u64> = (0..count)
            .map(|i| read_u64(header, 8 + 8 * i))
            .collect::<Option<_>>()
            .ok_or_else(|| anyhow::anyhow!("Go's table is shorter than its header"))?;
        let offset = |value: u64| -> Result<usize> {
            let at = usize::try_from(value)?;
            if at >= header.len() {
                bail!("Go's table says a part of it is past its end");
            }
            Ok(at)
        };
        let (functions, rest) = (usize::try_from(fields[0])?, &fields[2..]);
        let (text_start, rest) = match version {
            Version::Go12 | Version::Go116 => (0, rest),
            Version::Go118 | Version::Go120 => (rest[0], &rest[1..]),
        };
        let function_table = offset(rest[4])?;
        let minor = placement.minor_release();
        let layout = Self {
            version,
            functions,
            text_start,
            names: offset(rest[0])?,
            cu_files: offset(rest[1])?,
            files: offset(rest[2])?,
            values: offset(rest[3])?,
            function_table,
            records: function_table,
            functions_data: None,
            inline_tree: Some(FUNCDATA_INLINE_TREE),
            // Go 1.16 and 1.17 share a layout; only 1.17's functions have flags.
            flags: version != Version::Go116 || minor.is_some_and(|minor| minor >= 17),
        };
        layout.function_table_fits(header.len())?;
        layout.with_module_data(header, placement)
    }

    /// Go 1.2 to 1.15's layout: the header says how many functions there are, the function table
    /// follows it, and the offset of the table of files follows that table. Everything else is
    /// an offset from the table's start: names, records, value tables. Inline trees are read
    /// from Go 1.12, the first to say where a call's caller is in them.
    fn read_go12(header: &[u8], placement: &Placement) -> Result<Self> {
        let too_short = || anyhow::anyhow!("Go's table is shorter than its header");
        let functions = usize::try_from(read_u64(header, 8).ok_or_else(too_short)?)?;
        let minor = placement.minor_release();
        let layout = Self {
            version: Version::Go12,
            functions,
            text_start: 0,
            names: 0,
            cu_files: 0,
            files: 0,
            values: 0,
            function_table: 16,
            records: 0,
            functions_data: None,
            inline_tree: minor.filter(|minor| (12..=15).contains(minor)).map(|_| FUNCDATA_INLINE_TREE_GO112),
            flags: false,
        };
        let files_at = layout.function_table_fits(header.len())?;
        let Some(files) = read_u32(header, files_at) else { bail!("Go's table ends before its files") };
        Ok(Self { cu_files: files as usize, ..layout })
    }

    /// Checks the function table (its pairs, and the last entry) fits in the table; where it ends.
    fn function_table_fits(&self, len: usize) -> Result<usize> {
        let entry_size = self.version.fields().entry_size;
        let functions = self.functions;
        let table_end = (functions.checked_mul(2 * entry_size))
            .and_then(|size| size.checked_add(entry_size))
            .and_then(|size| self.function_table.checked_add(size));
        match table_end {
            Some(end) if end <= len => Ok(end),
            _ => bail!("Go's table says it has {functions} functions, more than it holds"),
        }
    }

    /// Go 1.18 and later give entries as offsets from where Go's text starts. Its header says
    /// where, but Go 1.26 and later write 0 there (the runtime takes it from its module data):
    /// then it is the module data's first function's entry (`minpc`) less that function's
    /// offset. Where the functions' data is comes from the module data alone. Module data is
    /// taken for the table's only if it says the table's address and its names'.
    fn with_module_data(mut self, header: &[u8], placement: &Placement) -> Result<Self> {
        if self.version == Version::Go116 {
            return Ok(self);
        }
        let data = placement.module_data.as_deref().filter(|data| {
            data.get(MODULE_PCHEADER / 8) == Some(&placement.address)
                && data.get(MODULE_NAMES / 8) == placement.address.checked_add(self.names as u64).as_ref()
        });
        self.functions_data = self
            .version
            .gofunc_field(placement.minor_release())
            .and_then(|field| data?.get(field / 8))
            .and_then(|&address| placement.file_offset(address, 1));
        if self.text_start != 0 {
            return Ok(self);
        }
        let Some(min_pc) = data.and_then(|data| data.get(MODULE_MINPC / 8)) else {
            bail!("where Go's text starts is not in its table, and its module data was not found")
        };
        let first_offset = read_u32(header, self.function_table).map(u64::from).unwrap_or_default();
        self.text_start = min_pc
            .checked_sub(first_offset)
            .ok_or_else(|| anyhow::anyhow!("Go's module data says its text starts below 0"))?;
        Ok(self)
    }
}

pub(super) fn read_u64(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

fn read_u32(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

/// Reads an unsigned LEB128 varint off the front of `bytes` (at most 64 bits).
pub(super) fn uvarint(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for (i, &byte) in bytes.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            *bytes = &bytes[i + 1..];
            return Some(value);
        }
    }
    None
}
